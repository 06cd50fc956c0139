//! `sluice experiment mtp-isolation`: mtp.txt 5.3 / Figure 7. Two tenants send to their
//! receivers across one common 100 Gbit/s, 10 us link; tenant 2 sends 8x the messages
//! (8 long flows against tenant 1's one). Per-tenant throughput for DCTCP with one shared
//! queue, DCTCP with a queue per tenant (class queues by DSCP, deficit round robin), and
//! MTP with the switch's per-tenant fair share by traffic class on one shared queue.
//! The paper: 80 vs 10 Gbit/s on the shared queue, equal shares with the other two.

use std::time::Duration;

use clap::Args;
use sluice_sim::mtp::{FairShare, MtpDevice, Pathlet};
use sluice_sim::{Host, Instant, LinkConfig, LinkId, NodeId, Sim};

use crate::error::ExperimentError;
use crate::fabric::host_addr;
use crate::flows::{Class, Flows};
use crate::mtp::host::{MtpHost, MtpMessages};
use crate::mtp::tcp::{self, Marked};
use crate::mtp::{gbps, FRAME_BYTES};
use crate::plot::{Plot, Series};
use crate::report::{fmt_num, Report};
use crate::Common;

/// `sluice experiment mtp-isolation`.
#[derive(Args, Debug)]
pub struct IsolationArgs {
    /// Size, output directory and seed.
    #[command(flatten)]
    pub common: Common,
}

/// Long flows (or concurrent message streams) per tenant: tenant 2 sends 8x the messages.
pub const FLOWS: [usize; 2] = [1, 8];
/// The common link's rate.
const LINK_BPS: u64 = 100_000_000_000;
/// The common link's delay.
const LINK_DELAY: Duration = Duration::from_micros(10);
/// Queue of every port, frames (the common link's round trip is about 170 frames).
const QUEUE_PACKETS: usize = 512;
/// DCTCP's marking threshold, frames.
const ECN_K_PACKETS: usize = 65;

/// The experiment's size.
#[derive(Clone, Copy, Debug)]
struct Scale {
    warmup: Duration,
    measure: Duration,
}

impl Scale {
    fn new(quick: bool) -> Scale {
        if quick {
            Scale {
                warmup: Duration::from_millis(1),
                measure: Duration::from_millis(2),
            }
        } else {
            Scale {
                warmup: Duration::from_millis(2),
                measure: Duration::from_millis(20),
            }
        }
    }
}

/// The topology: senders (hosts 0 and 1, tenants 1 and 2) under an ingress switch, the
/// common link to an egress switch, receivers (hosts 2 and 3) under it.
struct Topology {
    /// Senders then receivers.
    hosts: [NodeId; 4],
    /// The ingress switch, whose port 2 is the common link.
    ingress: NodeId,
    /// The common link.
    common: LinkId,
}

fn build<H: Host>(
    sim: &mut Sim<H>,
    common: LinkConfig,
    mut make: impl FnMut(usize) -> Result<H, ExperimentError>,
) -> Result<Topology, ExperimentError> {
    let edge = LinkConfig::new(LINK_BPS, Duration::from_micros(1))
        .with_queue_packets(QUEUE_PACKETS)
        .with_ecn(ECN_K_PACKETS * FRAME_BYTES);
    let ingress = sim.add_static_switch();
    let egress = sim.add_static_switch();
    let mut hosts = [NodeId(0); 4];
    for (i, h) in hosts.iter_mut().enumerate() {
        *h = sim.add_host(make(i)?);
    }
    let up = [
        sim.connect(hosts[0], ingress, edge.clone())?,
        sim.connect(hosts[1], ingress, edge.clone())?,
    ];
    let link = sim.connect(ingress, egress, common)?;
    let down = [
        sim.connect(egress, hosts[2], edge.clone())?,
        sim.connect(egress, hosts[3], edge)?,
    ];
    for i in 0..2 {
        let (sender, receiver) = (host_addr(i).0 .0, host_addr(2 + i).0 .0);
        sim.add_route(ingress, receiver, &[link])?;
        sim.add_route(ingress, sender, &[up[i]])?;
        sim.add_route(egress, receiver, &[down[i]])?;
        sim.add_route(egress, sender, &[link])?;
    }
    Ok(Topology {
        hosts,
        ingress,
        common: link,
    })
}

/// The common link with one shared queue.
fn shared_link() -> LinkConfig {
    LinkConfig::new(LINK_BPS, LINK_DELAY)
        .with_queue_packets(QUEUE_PACKETS)
        .with_ecn(ECN_K_PACKETS * FRAME_BYTES)
}

/// Runs the experiment and builds its report.
pub fn run(args: &IsolationArgs) -> Result<Report, ExperimentError> {
    let scale = Scale::new(args.common.quick);
    let seed = args.common.seed;
    let mut systems: Vec<(&str, [f64; 2])> = Vec::new();
    eprintln!("sluice experiment mtp-isolation: DCTCP, one shared queue");
    systems.push(("dctcp-shared", run_tcp(scale, seed, shared_link())?));
    eprintln!("sluice experiment mtp-isolation: DCTCP, a queue per tenant");
    let per_tenant = shared_link().with_class_queues(2);
    systems.push(("dctcp-queues", run_tcp(scale, seed, per_tenant)?));
    eprintln!("sluice experiment mtp-isolation: MTP, fair share on one shared queue");
    systems.push(("mtp-fair", run_mtp(scale, seed)?));
    Ok(report(scale, seed, &systems))
}

fn report(scale: Scale, seed: u64, systems: &[(&str, [f64; 2])]) -> Report {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for (name, g) in systems {
        for (t, v) in g.iter().enumerate() {
            rows.push(vec![name.to_string(), (t + 1).to_string(), fmt_num(*v)]);
        }
        notes.push(format!(
            "  {name}: tenant 2 / tenant 1 = {}",
            crate::report::fmt_ratio(g[1], g[0])
        ));
    }
    notes.push(
        "paper (mtp.txt Figure 7): shared queue 80 vs 10 Gbit/s; a queue per tenant and MTP's \
         fair share on one queue: equal"
            .into(),
    );
    let series = (0..2)
        .map(|t| Series {
            name: format!("tenant {}", t + 1),
            points: systems
                .iter()
                .enumerate()
                .map(|(i, (_, g))| (i as f64, g[t]))
                .collect(),
        })
        .collect();
    Report {
        name: "mtp-isolation".into(),
        setup: vec![
            format!(
                "sluice experiment mtp-isolation: two tenants across one 100 Gbit/s, {} us link; \
                 tenant 1 {} flow, tenant 2 {} (8x the messages); {}-frame queues, ECN at {} \
                 frames",
                LINK_DELAY.as_micros(),
                FLOWS[0],
                FLOWS[1],
                QUEUE_PACKETS,
                ECN_K_PACKETS
            ),
            format!(
                "  throughput = bytes the tenant's receiver got in {} ms after {} ms of warm-up; \
                 seed {seed}",
                scale.measure.as_millis(),
                scale.warmup.as_millis()
            ),
        ],
        columns: ["system", "tenant", "gbps"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        rows,
        notes,
        plot: Some(Plot {
            title: "Per-tenant throughput on a common 100 Gbit/s link".into(),
            x_label: "system".into(),
            y_label: "Gbit/s".into(),
            x_categories: Some(systems.iter().map(|(s, _)| s.to_string()).collect()),
            series,
        }),
        data: None,
    }
}

/// DCTCP: tenant `t`'s sender opens `FLOWS[t]` connections to its receiver, every one
/// always backlogged; its frames carry DSCP `t` (the class a queue per tenant sorts by).
fn run_tcp(scale: Scale, seed: u64, common: LinkConfig) -> Result<[f64; 2], ExperimentError> {
    let mut sim: Sim<Marked> = Sim::new(seed);
    let topo = build(&mut sim, common, |i| {
        Ok(Marked::new(
            tcp::dctcp_stack(i, 4, seed, tcp::BUFFER_100G)?,
            (i % 2) as u8,
        ))
    })?;
    let ips: Vec<_> = (0..4).map(|i| host_addr(i).1).collect();
    let mut flows = Flows::new(&mut sim, &topo.hosts, &ips)?;
    let mut chans = [Vec::new(), Vec::new()];
    for (t, c) in chans.iter_mut().enumerate() {
        for _ in 0..FLOWS[t] {
            c.push(flows.open(&mut sim, t, 2 + t)?);
        }
    }
    let _ = sim.run_until(Instant::ZERO + Duration::from_millis(1), |now, hosts| {
        flows.step(now, hosts);
        flows.all_open()
    });
    if !flows.all_open() {
        return Err(ExperimentError::Workload(
            "the connections did not open in 1 ms".into(),
        ));
    }
    for &c in chans.iter().flatten() {
        flows.send(&mut sim, c, 1 << 50, Class::Background)?;
    }
    let read = |flows: &Flows| -> [u64; 2] {
        [0, 1].map(|t| chans[t].iter().map(|&c| flows.bytes_read(c)).sum())
    };
    let mut phase = |sim: &mut Sim<Marked>, d: Duration| -> Result<[u64; 2], ExperimentError> {
        let deadline = sim.now() + d;
        let _ = sim.run_until(deadline, |now, hosts| {
            flows.step(now, hosts);
            false
        });
        match flows.error() {
            Some(e) => Err(ExperimentError::Workload(e.to_string())),
            None => Ok(read(&flows)),
        }
    };
    let before = phase(&mut sim, scale.warmup)?;
    let after = phase(&mut sim, scale.measure)?;
    Ok([0, 1].map(|t| gbps(after[t] - before[t], scale.measure)))
}

/// Messages of the MTP tenants.
const MTP_MESSAGE: u64 = 64 * 1024;
/// Messages tenant 1 keeps queued; tenant 2 keeps 8x as many (its 8x the messages).
const MTP_QUEUED: usize = 4;
/// Fair share enforces above this much shared queue.
const FAIR_SHARE_THRESHOLD: usize = ECN_K_PACKETS * FRAME_BYTES;

/// MTP: tenant `t` (traffic class t + 1) keeps `FLOWS[t]` x [`MTP_QUEUED`] messages queued;
/// the ingress switch's fair share gives each active class half the common link, told to
/// the senders as the common link's pathlet's rate feedback.
fn run_mtp(scale: Scale, seed: u64) -> Result<[f64; 2], ExperimentError> {
    let mut sim: Sim<MtpHost> = Sim::new(seed);
    let topo = build(&mut sim, shared_link(), |i| MtpHost::new(i, 4, |_| {}))?;
    let port = sim.switch_port(topo.ingress, topo.common)?;
    let device = MtpDevice::new(0)
        .with_pathlet(port, Pathlet::rate(1))
        .with_fair_share(FairShare::new(FAIR_SHARE_THRESHOLD));
    sim.set_mtp_device(topo.ingress, device)?;
    let mut msgs = MtpMessages::new(&topo.hosts, MTP_MESSAGE as usize);
    let want = |t: usize| FLOWS[t] * MTP_QUEUED;
    for t in 0..2 {
        for _ in 0..want(t) {
            msgs.send(&mut sim, t, 2 + t, MTP_MESSAGE, t as u8 + 1, t as u32)?;
        }
    }
    let mut phase = |sim: &mut Sim<MtpHost>, d: Duration| -> Result<[u64; 2], ExperimentError> {
        let deadline = sim.now() + d;
        let mut failed = None;
        let _ = sim.run_until(deadline, |now, hosts| {
            msgs.step(now, hosts);
            for t in 0..2 {
                while msgs.outstanding_from(t) < want(t) && failed.is_none() {
                    let tc = t as u8 + 1;
                    if let Err(e) = msgs.send_within(now, hosts, t, 2 + t, MTP_MESSAGE, tc, 0) {
                        failed = Some(e);
                    }
                }
            }
            failed.is_some() || msgs.error().is_some()
        });
        if let Some(e) = failed {
            return Err(e);
        }
        match msgs.error() {
            Some(e) => Err(ExperimentError::Workload(e.to_string())),
            None => Ok([msgs.received[2], msgs.received[3]]),
        }
    };
    let before = phase(&mut sim, scale.warmup)?;
    let after = phase(&mut sim, scale.measure)?;
    Ok([0, 1].map(|t| gbps(after[t] - before[t], scale.measure)))
}
