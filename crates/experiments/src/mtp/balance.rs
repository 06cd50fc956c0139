//! `sluice experiment mtp-balance`: mtp.txt 5.2 / Figure 6. A sender and a receiver joined by
//! two 100 Gbit/s paths, one 1 us longer; messages of the DCTCP web-search sizes (W5 of
//! [`cdf`](crate::mtp::cdf), skewed to short) arrive as a Poisson process; the 99th
//! percentile flow completion time by size, for ECMP (TCP, a path per connection),
//! packet spraying (TCP, a path per packet, paying for the reordering) and MTP's
//! message-aware balancer (a path per message, by load and size).

use std::time::Duration;

use clap::Args;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_sim::mtp::Balancer;
use sluice_sim::{Host, Instant, Sim};
use sluice_tcp::Stack;

use crate::drain::{check, drain};
use crate::error::ExperimentError;
use crate::fabric::host_addr;
use crate::flows::{quantile, Class, Flows};
use crate::mtp::cdf::{SizeDist, Workload};
use crate::mtp::host::{MtpHost, MtpMessages};
use crate::mtp::paths::{self, Hop, PathsSpec, TwoPaths};
use crate::mtp::{ecn_device, tcp, FRAME_BYTES, QUEUE_PACKETS};
use crate::plot::{Plot, Series};
use crate::report::{fmt_num, fmt_ratio, Report};
use crate::Common;

/// `sluice experiment mtp-balance`.
#[derive(Args, Debug)]
pub struct BalanceArgs {
    /// Size, output directory and seed.
    #[command(flatten)]
    pub common: Common,
}

/// The smallest message (mtp.txt 5.2: 10 KB to 1 GB).
const MIN_BYTES: u64 = 10_000;
/// Size buckets: (label, upper bound in bytes, inclusive).
pub const BUCKETS: [(&str, u64); 3] = [
    ("10K-100K", 100_000),
    ("100K-1M", 999_999),
    (">=1M", u64::MAX),
];
/// TCP connections the sender spreads messages over (ECMP's entropy).
const TCP_CHANNELS: usize = 16;
/// Offered load, as a fraction of the two paths' capacity.
const LOAD: f64 = 0.6;

/// The experiment's size.
#[derive(Clone, Copy, Debug)]
struct Scale {
    /// The largest message (the web-search tail, scaled down from 1 GB).
    cap: u64,
    /// Arrivals stop after this long; the run then drains.
    arrivals: Duration,
}

impl Scale {
    fn new(quick: bool) -> Scale {
        if quick {
            Scale {
                cap: 1_000_000,
                arrivals: Duration::from_millis(2),
            }
        } else {
            Scale {
                cap: 4_000_000,
                arrivals: Duration::from_millis(20),
            }
        }
    }
}

/// The topology: 200 Gbit/s host links (so the paths, not the sender, are the bottleneck),
/// two 100 Gbit/s paths of 1 and 2 us.
fn spec() -> PathsSpec {
    let us = Duration::from_micros(1);
    PathsSpec {
        host: Hop {
            bps: 200_000_000_000,
            delay: us,
        },
        paths: [
            Hop {
                bps: 100_000_000_000,
                delay: us,
            },
            Hop {
                bps: 100_000_000_000,
                delay: 2 * us,
            },
        ],
        queue_packets: QUEUE_PACKETS,
        ecn_k_bytes: Some(20 * FRAME_BYTES),
    }
}

/// The seeded workload: (arrival time, size).
fn workload(scale: Scale, seed: u64) -> Vec<(Duration, u64)> {
    let dist = SizeDist::new(Workload::W5, Some(scale.cap));
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // Mean of the sizes as drawn (floored at MIN_BYTES), for the arrival rate.
    let mean = {
        let mut r = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
        (0..10_000)
            .map(|_| dist.sample(&mut r).max(MIN_BYTES) as f64)
            .sum::<f64>()
            / 10_000.0
    };
    let capacity = 2.0 * 100e9 / 8.0;
    let rate = LOAD * capacity / mean;
    let mut t = 0.0;
    let mut out = Vec::new();
    loop {
        t += -rng.gen::<f64>().max(1e-12).ln() / rate;
        if t >= scale.arrivals.as_secs_f64() {
            return out;
        }
        out.push((
            Duration::from_secs_f64(t),
            dist.sample(&mut rng).max(MIN_BYTES),
        ));
    }
}

/// The bucket of a message of `bytes`.
pub fn bucket_of(bytes: u64) -> usize {
    BUCKETS
        .iter()
        .position(|&(_, hi)| bytes <= hi)
        .unwrap_or(BUCKETS.len() - 1)
}

/// One system's completions: (bytes, FCT).
type Fcts = Vec<(u64, Duration)>;

/// One system's run.
struct Outcome {
    fcts: Fcts,
    /// Bytes the sender retransmitted, MB (MTP: packets retransmitted x payload per packet).
    retx_mb: f64,
}

/// Runs the experiment and builds its report.
pub fn run(args: &BalanceArgs) -> Result<Report, ExperimentError> {
    let scale = Scale::new(args.common.quick);
    let seed = args.common.seed;
    let arrivals = workload(scale, seed);
    let mut systems: Vec<(&str, Outcome)> = Vec::new();
    eprintln!("sluice experiment mtp-balance: ECMP (TCP with DCTCP)");
    systems.push(("ecmp", run_tcp(seed, &arrivals, Balancer::Hash)?));
    eprintln!("sluice experiment mtp-balance: packet spraying (TCP with DCTCP)");
    systems.push(("spray", run_tcp(seed, &arrivals, Balancer::Spray)?));
    eprintln!("sluice experiment mtp-balance: MTP, the message balancer");
    systems.push(("mtp", run_mtp(scale, seed, &arrivals)?));
    Ok(report(scale, seed, arrivals.len(), &systems))
}

fn report(scale: Scale, seed: u64, messages: usize, systems: &[(&str, Outcome)]) -> Report {
    let p99 = |fcts: &Fcts, b: usize| {
        let mut v: Vec<f64> = fcts
            .iter()
            .filter(|(bytes, _)| bucket_of(*bytes) == b)
            .map(|(_, d)| d.as_secs_f64() * 1e6)
            .collect();
        (v.len(), quantile(&mut v, 0.99))
    };
    let mut rows = Vec::new();
    let mut series = Vec::new();
    let ecmp = systems
        .iter()
        .find(|(s, _)| *s == "ecmp")
        .map(|(_, o)| &o.fcts);
    let mut notes = vec![format!(
        "retransmitted MB: {}",
        systems
            .iter()
            .map(|(s, o)| format!("{s} {}", fmt_num(o.retx_mb)))
            .collect::<Vec<_>>()
            .join(", ")
    )];
    notes.push(
        "paper (mtp.txt Figure 6): ECMP suffers the unequal delays, spraying the reordering; \
         the MTP balancer is near-perfect"
            .into(),
    );
    for (name, o) in systems {
        let fcts = &o.fcts;
        let mut points = Vec::new();
        for (b, (label, _)) in BUCKETS.iter().enumerate() {
            let (n, us) = p99(fcts, b);
            let base = ecmp.map_or(f64::NAN, |e| p99(e, b).1);
            rows.push(vec![
                name.to_string(),
                label.to_string(),
                n.to_string(),
                fmt_num(us),
                fmt_ratio(us, base),
            ]);
            points.push((b as f64, us));
        }
        series.push(Series {
            name: name.to_string(),
            points,
        });
    }
    Report {
        name: "mtp-balance".into(),
        setup: vec![
            "sluice experiment mtp-balance: a sender and a receiver (200 Gbit/s links) joined by \
             two 100 Gbit/s paths of 1 and 2 us; 128-frame queues, ECN at 20 frames"
                .into(),
            format!(
                "  {messages} messages of the DCTCP web-search sizes (W5), floored at 10 KB and \
                 capped at {} KB (the paper's 1 GB tail scaled down for the simulator), Poisson \
                 arrivals at {:.0} % of the two paths for {} ms; seed {seed}",
                scale.cap / 1000,
                LOAD * 100.0,
                scale.arrivals.as_millis()
            ),
            format!(
                "  ecmp / spray: TCP (DCTCP) over {TCP_CHANNELS} connections, each message on \
                 the connection with the fewest queued; the first hop hashes each connection to \
                 a path / sends packets to the paths in turn"
            ),
            "  mtp: each message as it arrives; the first hop pins each message to the path \
             with the fewest bytes queued and expected (its ECN pathlets feed the windows)"
                .into(),
        ],
        columns: ["system", "size", "messages", "p99 FCT us", "vs ecmp"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        rows,
        notes,
        plot: Some(Plot {
            title: "p99 flow completion time by message size".into(),
            x_label: "message size".into(),
            y_label: "p99 FCT (us)".into(),
            x_categories: Some(BUCKETS.iter().map(|(l, _)| l.to_string()).collect()),
            series,
        }),
        data: None,
    }
}

/// The first hop balances with `balancer`, each path's egress an ECN pathlet (ids 1, 2).
fn balance<H: Host>(sim: &mut Sim<H>, topo: &TwoPaths, b: Balancer) -> Result<(), ExperimentError> {
    let k = spec().ecn_k_bytes.unwrap_or(20 * FRAME_BYTES);
    ecn_device(sim, topo.first_hop, &topo.paths, 1, k, b)
}

/// TCP with DCTCP over [`TCP_CHANNELS`] connections, the first hop balancing with `b`.
fn run_tcp(
    seed: u64,
    arrivals: &[(Duration, u64)],
    b: Balancer,
) -> Result<Outcome, ExperimentError> {
    let mut sim: Sim<Stack> = Sim::new(seed);
    let topo = paths::build(&mut sim, &spec(), |i| {
        tcp::dctcp_stack(i, 2, seed, tcp::BUFFER_100G)
    })?;
    balance(&mut sim, &topo, b)?;
    let ips = [host_addr(0).1, host_addr(1).1];
    let mut flows = Flows::new(&mut sim, &[topo.sender, topo.receiver], &ips)?;
    let chans: Vec<usize> = (0..TCP_CHANNELS)
        .map(|_| flows.open(&mut sim, 0, 1))
        .collect::<Result<_, _>>()?;
    let _ = sim.run_until(Instant::ZERO + Duration::from_millis(1), |now, hosts| {
        flows.step(now, hosts);
        flows.all_open()
    });
    if !flows.all_open() {
        return Err(ExperimentError::Workload(
            "the connections did not open in 1 ms".into(),
        ));
    }
    let start = sim.now();
    let mut next = 0;
    for &(at, bytes) in arrivals {
        let _ = sim.run_until(start + at, |now, hosts| {
            flows.step(now, hosts);
            false
        });
        // The connection with the fewest messages queued, in turn among equals.
        let ch = (0..TCP_CHANNELS)
            .map(|k| chans[(next + k) % TCP_CHANNELS])
            .min_by_key(|&c| flows.pending(c))
            .unwrap_or(chans[0]);
        next = (next + 1) % TCP_CHANNELS;
        flows.send(&mut sim, ch, bytes, Class::Background)?;
        check(&flows)?;
    }
    drain(&mut sim, &mut flows, Duration::from_secs(1), "TCP messages")?;
    let retx = sim
        .host(topo.sender)
        .map_or(0, |s| s.counters().retransmitted_bytes);
    Ok(Outcome {
        fcts: flows.done.iter().map(|c| (c.bytes, c.fct)).collect(),
        retx_mb: retx as f64 / 1e6,
    })
}

/// MTP: each message sent as it arrives, the first hop's message balancer placing it.
fn run_mtp(
    scale: Scale,
    seed: u64,
    arrivals: &[(Duration, u64)],
) -> Result<Outcome, ExperimentError> {
    let mut sim: Sim<MtpHost> = Sim::new(seed);
    let max = scale.cap.max(MIN_BYTES);
    let topo = paths::build(&mut sim, &spec(), |i| {
        MtpHost::new(i, 2, |c| c.max_message_len = max as u32)
    })?;
    balance(&mut sim, &topo, Balancer::Message)?;
    let mut msgs = MtpMessages::new(&[topo.sender, topo.receiver], max as usize);
    let start = sim.now();
    for &(at, bytes) in arrivals {
        let _ = sim.run_until(start + at, |now, hosts| {
            msgs.step(now, hosts);
            false
        });
        msgs.send(&mut sim, 0, 1, bytes, 0, 0)?;
        check(&msgs)?;
    }
    drain(&mut sim, &mut msgs, Duration::from_secs(1), "MTP messages")?;
    let retx = sim.host(topo.sender).map_or(0, |h| {
        let c = h.stack.counters();
        (c.retx_timeout + c.retx_nack + c.retx_sack_gap + c.retx_rack) * h.stack.mss() as u64
    });
    Ok(Outcome {
        fcts: msgs.done.iter().map(|d| (d.bytes, d.fct)).collect(),
        retx_mb: retx as f64 / 1e6,
    })
}
