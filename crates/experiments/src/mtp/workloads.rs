//! `sluice experiment mtp-workloads`: the five message-size distributions of the Homa papers
//! (W1-W5, [`cdf`](crate::mtp::cdf)) at 50 % and 80 % load on a two-tier fabric (Homa's 144
//! hosts: 9 racks of 16 under 4 spines, 10 Gbit/s hosts, 40 Gbit/s uplinks): the 99th
//! percentile slowdown (completion time over the unloaded one) per message-size bucket, MTP
//! against Sluice's TCP with DCTCP. Every host sends Poisson arrivals to peers drawn from a
//! fixed set (TCP keeps a connection to each; MTP needs none), the same for both.

use std::time::Duration;

use clap::Args;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_sim::mtp::{Balancer, MtpDevice, Pathlet};
use sluice_sim::Sim;
use sluice_tcp::Stack;

use crate::drain::{check, drain};
use crate::error::ExperimentError;
use crate::fabric::{self, FabricSpec};
use crate::flows::{quantile, Class, Flows};
use crate::mtp::cdf::{SizeDist, Workload};
use crate::mtp::host::{MtpHost, MtpMessages};
use crate::mtp::tcp;
use crate::plot::{Plot, Series};
use crate::report::{fmt_num, fmt_ratio, Report};
use crate::Common;

/// `sluice experiment mtp-workloads`.
#[derive(Args, Debug)]
pub struct WorkloadsArgs {
    /// Size, output directory and seed.
    #[command(flatten)]
    pub common: Common,
    /// Racks (leaf switches) of the fabric (default 9; with --quick 2).
    #[arg(long)]
    pub racks: Option<usize>,
    /// Hosts per rack (default 16; with --quick 4).
    #[arg(long)]
    pub hosts_per_rack: Option<usize>,
    /// Only these workloads (comma-separated, e.g. w1,w5; default all five).
    #[arg(long, value_delimiter = ',')]
    pub workloads: Vec<String>,
    /// Only these loads, in percent of a host's link (comma-separated, e.g. 80; default 50,80).
    #[arg(long, value_delimiter = ',')]
    pub loads: Vec<u32>,
    /// One FIFO per switch port instead of eight strict-priority queues (MTP's packets all
    /// best effort, as before the priorities).
    #[arg(long)]
    pub no_priorities: bool,
}

/// The loads, as fractions of each host's link.
pub const LOADS: [f64; 2] = [0.5, 0.8];
/// Size buckets: (label, largest size in the bucket).
pub const BUCKETS: [(&str, u64); 5] = [
    ("<1K", 999),
    ("1K-10K", 9_999),
    ("10K-100K", 99_999),
    ("100K-1M", 999_999),
    (">=1M", u64::MAX),
];

/// The bucket of a message of `bytes`.
pub fn bucket_of(bytes: u64) -> usize {
    BUCKETS
        .iter()
        .position(|&(_, hi)| bytes <= hi)
        .unwrap_or(BUCKETS.len() - 1)
}

/// The buckets holding at least 0.5 % of a distribution's messages (by its CDF).
pub fn buckets_of(dist: &SizeDist) -> Vec<usize> {
    (0..BUCKETS.len())
        .filter(|&b| {
            let lo = if b == 0 {
                0.0
            } else {
                dist.cdf(BUCKETS[b - 1].1)
            };
            dist.cdf(BUCKETS[b].1) - lo >= 0.005
        })
        .collect()
}

/// The experiment's size.
#[derive(Clone, Debug)]
struct Scale {
    fabric: FabricSpec,
    /// Peers each host sends to.
    peers: usize,
    /// Messages aimed at per run (the arrival window is set from it).
    messages: f64,
    /// Bounds of the arrival window.
    window: (Duration, Duration),
    /// The largest message (W3-W5's tails scaled down for the simulator).
    cap: u64,
}

impl Scale {
    fn new(args: &WorkloadsArgs) -> Scale {
        let quick = args.common.quick;
        let fabric = FabricSpec {
            spines: if quick { 2 } else { 4 },
            leaves: args.racks.unwrap_or(if quick { 2 } else { 9 }).max(1),
            hosts_per_leaf: args
                .hosts_per_rack
                .unwrap_or(if quick { 4 } else { 16 })
                .max(1),
            host_bps: 10_000_000_000,
            uplink_bps: 40_000_000_000,
            delay: Duration::from_micros(1),
            queue_bytes: 512 * 1024,
            ecn_k_bytes: Some(65 * 1514),
            // Eight priority queues per port, as Homa's switches (TCP marks no DSCP: one FIFO
            // for it in effect).
            priority_queues: if args.no_priorities { 0 } else { 8 },
        };
        Scale {
            fabric,
            peers: if quick { 3 } else { 16 },
            messages: if quick { 400.0 } else { 20_000.0 },
            window: if quick {
                (Duration::from_micros(200), Duration::from_millis(2))
            } else {
                (Duration::from_millis(1), Duration::from_millis(20))
            },
            cap: if quick { 300_000 } else { 3_000_000 },
        }
    }

    fn hosts(&self) -> usize {
        self.fabric.leaves * self.fabric.hosts_per_leaf
    }
}

/// One message of the workload.
#[derive(Clone, Copy, Debug)]
struct Arrival {
    at: Duration,
    src: usize,
    dst: usize,
    bytes: u64,
}

/// The seeded arrivals of workload `dist` at `load`, and the window they span.
fn arrivals(
    scale: &Scale,
    dist: &SizeDist,
    load: f64,
    peers: &[Vec<usize>],
    seed: u64,
) -> (Vec<Arrival>, Duration) {
    let n = scale.hosts();
    // Load counts bytes on the wire, as Homa's does: payload plus a TCP/IPv4/Ethernet header
    // (66 bytes with timestamps) per 1448-byte segment (MTP's headers are longer).
    let wire_mean = {
        let mut r = ChaCha8Rng::seed_from_u64(seed ^ 0x10ad);
        (0..20_000)
            .map(|_| {
                let b = dist.sample(&mut r);
                (b + b.div_ceil(1448).max(1) * 66) as f64
            })
            .sum::<f64>()
            / 20_000.0
    };
    let per_host = load * scale.fabric.host_bps as f64 / 8.0 / wire_mean;
    let window = Duration::from_secs_f64(scale.messages / (per_host * n as f64))
        .clamp(scale.window.0, scale.window.1);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::new();
    for (src, peers) in peers.iter().enumerate() {
        let mut t = 0.0;
        loop {
            t += -rng.gen::<f64>().max(1e-12).ln() / per_host;
            if t >= window.as_secs_f64() {
                break;
            }
            let dst = *peers.choose(&mut rng).unwrap_or(&((src + 1) % n));
            out.push(Arrival {
                at: Duration::from_secs_f64(t),
                src,
                dst,
                bytes: dist.sample(&mut rng),
            });
        }
    }
    out.sort_by_key(|a| a.at);
    (out, window)
}

/// The longest message given a priority above best effort: the goal's short messages.
const SHORT_MAX: u64 = 10_000;

/// Priority cutoffs for `dist` (Homa's unscheduled cutoffs, HomaModule's `unsched_cutoffs`,
/// over the short messages only): lengths splitting the bytes of messages of at most
/// [`SHORT_MAX`] into seven equal parts, the shortest at DSCP 7; longer messages share DSCP
/// 0 as one FIFO, so the long ones do not starve each other (and hold their senders'
/// pathlet windows) in classes below one another. From a seeded sample of `dist`.
fn dscp_cutoffs(dist: &SizeDist, seed: u64) -> [u64; 7] {
    let mut r = ChaCha8Rng::seed_from_u64(seed ^ 0xd5c9);
    let mut sizes: Vec<u64> = (0..20_000)
        .map(|_| dist.sample(&mut r))
        .filter(|&b| b <= SHORT_MAX)
        .collect();
    sizes.sort_unstable();
    let total: u64 = sizes.iter().sum::<u64>().max(1);
    let mut cutoffs = [SHORT_MAX; 7];
    let (mut acc, mut level) = (0u64, 0usize);
    for &b in &sizes {
        acc += b;
        while level < 6 && acc * 7 >= total * (level as u64 + 1) {
            cutoffs[level] = b.max(1);
            level += 1;
        }
    }
    cutoffs
}

/// The unloaded completion time of `bytes` from `src` to `dst`: serialization at the host
/// rate (with 1500-byte frames' headers) plus, per link on the way, its delay and one frame's
/// store-and-forward.
fn ideal(scale: &Scale, src: usize, dst: usize, bytes: u64) -> Duration {
    let f = &scale.fabric;
    let links = if src / f.hosts_per_leaf == dst / f.hosts_per_leaf {
        2
    } else {
        4
    };
    let frames = bytes.div_ceil(1448).max(1);
    let wire = (bytes + frames * 66) as f64 * 8.0 / f.host_bps as f64;
    let hop = f.delay.as_secs_f64() + 1514.0 * 8.0 / f.host_bps as f64;
    Duration::from_secs_f64(wire + links as f64 * hop)
}

/// One run's slowdowns: (bytes, slowdown) per message.
type Slowdowns = Vec<(u64, f64)>;

/// Runs the experiment and builds its report.
pub fn run(args: &WorkloadsArgs) -> Result<Report, ExperimentError> {
    let scale = Scale::new(args);
    let seed = args.common.seed;
    let workloads: Vec<Workload> = if args.workloads.is_empty() {
        Workload::ALL.to_vec()
    } else {
        args.workloads
            .iter()
            .map(|w| {
                Workload::parse(w)
                    .ok_or_else(|| ExperimentError::Usage(format!("no workload {w} (w1..w5)")))
            })
            .collect::<Result<_, _>>()?
    };
    let loads: Vec<f64> = if args.loads.is_empty() {
        LOADS.to_vec()
    } else {
        args.loads
            .iter()
            .map(|&l| {
                (1..=99)
                    .contains(&l)
                    .then_some(f64::from(l) / 100.0)
                    .ok_or_else(|| ExperimentError::Usage(format!("load {l} % (1..99)")))
            })
            .collect::<Result<_, _>>()?
    };
    let n = scale.hosts();
    // The same peers for every run.
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x9ee5);
    let peers: Vec<Vec<usize>> = (0..n)
        .map(|src| {
            let mut others: Vec<usize> = (0..n).filter(|&d| d != src).collect();
            others.shuffle(&mut rng);
            others.truncate(scale.peers.max(1));
            others
        })
        .collect();
    let mut rows = Vec::new();
    let mut series = Vec::new();
    let mut windows = Vec::new();
    for w in &workloads {
        let dist = SizeDist::new(*w, Some(scale.cap));
        for &load in &loads {
            let (arr, window) = arrivals(&scale, &dist, load, &peers, seed);
            windows.push(format!(
                "{} {:.0}%: {} messages in {} us",
                w.name(),
                load * 100.0,
                arr.len(),
                window.as_micros()
            ));
            eprintln!(
                "sluice experiment mtp-workloads: {} at {:.0} %, TCP ({} messages)",
                w.name(),
                load * 100.0,
                arr.len()
            );
            let tcp = run_tcp(&scale, seed, &peers, &arr)?;
            eprintln!(
                "sluice experiment mtp-workloads: {} at {:.0} %, MTP",
                w.name(),
                load * 100.0
            );
            let dscp = if scale.fabric.priority_queues >= 2 {
                dscp_cutoffs(&dist, seed)
            } else {
                [0; 7]
            };
            let mtp = run_mtp(&scale, seed, &arr, dscp)?;
            let mut points = Vec::new();
            for b in buckets_of(&dist) {
                let p99 = |s: &Slowdowns| {
                    let mut v: Vec<f64> = s
                        .iter()
                        .filter(|(bytes, _)| bucket_of(*bytes) == b)
                        .map(|&(_, x)| x)
                        .collect();
                    (v.len(), quantile(&mut v, 0.99))
                };
                let (count, t) = p99(&tcp);
                let (_, m) = p99(&mtp);
                rows.push(vec![
                    w.name().to_string(),
                    format!("{:.0}", load * 100.0),
                    BUCKETS[b].0.to_string(),
                    count.to_string(),
                    fmt_num(t),
                    fmt_num(m),
                    fmt_ratio(m, t),
                ]);
                points.push((b as f64, t, m));
            }
            for (k, system) in ["tcp", "mtp"].iter().enumerate() {
                series.push(Series {
                    name: format!("{} {:.0}% {system}", w.name(), load * 100.0),
                    points: points
                        .iter()
                        .map(|&(b, t, m)| (b, if k == 0 { t } else { m }))
                        .collect(),
                });
            }
        }
    }
    let f = &scale.fabric;
    Ok(Report {
        name: "mtp-workloads".into(),
        setup: vec![
            format!(
                "sluice experiment mtp-workloads: {} hosts ({} racks x {}, {} spines), {} Gbit/s \
                 hosts, {} Gbit/s uplinks, {} us links, {} KB queues, ECN at {} KB; each host \
                 sends to {} peers; seed {seed}",
                n,
                f.leaves,
                f.hosts_per_leaf,
                f.spines,
                f.host_bps / 1_000_000_000,
                f.uplink_bps / 1_000_000_000,
                f.delay.as_micros(),
                f.queue_bytes / 1024,
                f.ecn_k_bytes.unwrap_or(0) / 1024,
                scale.peers,
            ),
            format!(
                "  sizes: Homa's W1-W5 (HomaModule util/dist.cc), capped at {} KB for the \
                 simulator; load counts TCP's wire bytes (66 header bytes a segment); \
                 slowdown = completion time / unloaded time; arrival windows: {}",
                scale.cap / 1000,
                windows.join(", ")
            ),
        ],
        columns: [
            "workload",
            "load %",
            "size",
            "messages",
            "tcp p99 slowdown",
            "mtp p99 slowdown",
            "mtp/tcp",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        rows,
        notes: vec![
            "mtp: every switch an MTP device: an ECN pathlet per port (K as TCP's), messages \
             placed by the message balancer; tcp: ECMP by connection"
                .into(),
            "issue 17's goal: at 80 % load a short-message p99 slowdown under 3 for MTP, and \
             better than TCP in every bucket"
                .into(),
        ],
        plot: Some(Plot {
            title: "p99 slowdown by message size".into(),
            x_label: "message size".into(),
            y_label: "p99 slowdown".into(),
            x_categories: Some(BUCKETS.iter().map(|(l, _)| l.to_string()).collect()),
            series,
        }),
        data: None,
    })
}

/// TCP with DCTCP: a connection from every host to each of its peers, messages FIFO on it.
fn run_tcp(
    scale: &Scale,
    seed: u64,
    peers: &[Vec<usize>],
    arrivals: &[Arrival],
) -> Result<Slowdowns, ExperimentError> {
    let n = scale.hosts();
    let mut sim: Sim<Stack> = Sim::new(seed);
    let fab = fabric::build_with(&mut sim, &scale.fabric, |i| {
        // 10 Gbit/s x a few us: the core's default 256 KB buffers are plenty.
        tcp::dctcp_stack(i, n, seed, 256 * 1024)
    })?;
    let mut flows = Flows::new(&mut sim, &fab.hosts, &fab.ips)?;
    // chan[src][k] goes to peers[src][k].
    let mut chan = Vec::with_capacity(n);
    for (src, ps) in peers.iter().enumerate() {
        let mut row = Vec::with_capacity(ps.len());
        for &dst in ps {
            row.push(flows.open(&mut sim, src, dst)?);
        }
        chan.push(row);
    }
    let deadline = sim.now() + Duration::from_millis(10);
    let _ = sim.run_until(deadline, |now, hosts| {
        flows.step(now, hosts);
        flows.all_open()
    });
    if !flows.all_open() {
        return Err(ExperimentError::Workload(format!(
            "connections did not open: {}",
            flows.error().unwrap_or("timeout")
        )));
    }
    let start = sim.now();
    for a in arrivals {
        let _ = sim.run_until(start + a.at, |now, hosts| {
            flows.step(now, hosts);
            false
        });
        let k = peers[a.src].iter().position(|&d| d == a.dst).unwrap_or(0);
        flows.send(&mut sim, chan[a.src][k], a.bytes, Class::Background)?;
        check(&flows)?;
    }
    drain(&mut sim, &mut flows, Duration::from_secs(2), "TCP messages")?;
    Ok(flows
        .done
        .iter()
        .filter_map(|c| {
            let (src, dst) = flows.ends(c.channel)?;
            let ideal = ideal(scale, src, dst, c.bytes).as_secs_f64();
            Some((c.bytes, c.fct.as_secs_f64() / ideal))
        })
        .collect())
}

/// MTP: every message sent as it arrives; every switch an MTP device with an ECN pathlet on
/// each port (the TCP side's marking threshold) and the message balancer on its groups.
fn run_mtp(
    scale: &Scale,
    seed: u64,
    arrivals: &[Arrival],
    dscp: [u64; 7],
) -> Result<Slowdowns, ExperimentError> {
    let n = scale.hosts();
    let cap = scale.cap;
    let mut sim: Sim<MtpHost> = Sim::new(seed);
    let host_bps = scale.fabric.host_bps;
    let fab = fabric::build_with(&mut sim, &scale.fabric, |i| {
        MtpHost::new(i, n, |c| {
            c.max_message_len = cap as u32;
            // Paced to its link: SRPT decides the order on the wire, not a NIC FIFO.
            c.link_bps = host_bps;
            // Short messages in the switches' higher priority queues.
            c.dscp_cutoffs = dscp;
            // A long message gets at least one packet in 16 however many short ones arrive.
            c.srpt_aging = 16;
            // The longest path crosses three pathlets (leaf, spine, leaf): a fourth slot
            // would be 8 bytes of every data packet, 3 % of a W1 message, never filled.
            c.feedback_slots = 3;
        })
    })?;
    let f = &scale.fabric;
    let k = f.ecn_k_bytes.unwrap_or(65 * 1514);
    let switches = fab
        .leaves
        .iter()
        .map(|&l| (l, f.spines + f.hosts_per_leaf))
        .chain(fab.spines.iter().map(|&s| (s, f.leaves)));
    for (i, (switch, ports)) in switches.enumerate() {
        let mut device = MtpDevice::new(ports).with_balancer(Balancer::Message);
        for p in 0..ports {
            let id = u16::try_from(i * 64 + p + 1).map_err(|_| {
                ExperimentError::Usage("too many switch ports for pathlet ids".into())
            })?;
            device = device.with_pathlet(p, Pathlet::ecn(id, k));
        }
        sim.set_mtp_device(switch, device)?;
    }
    let mut msgs = MtpMessages::new(&fab.hosts, cap as usize);
    let start = sim.now();
    for a in arrivals {
        let _ = sim.run_until(start + a.at, |now, hosts| {
            msgs.step(now, hosts);
            false
        });
        msgs.send(&mut sim, a.src, a.dst, a.bytes, 0, 0)?;
        check(&msgs)?;
    }
    drain(&mut sim, &mut msgs, Duration::from_secs(2), "MTP messages")?;
    // What the senders had to repair, for the account of the tail.
    let mut c = [0u64; 4];
    for h in fab.hosts.iter().filter_map(|&n| sim.host(n)) {
        let k = h.stack.counters();
        for (x, y) in c
            .iter_mut()
            .zip([k.timeouts, k.retx_rack, k.retx_sack_gap, k.data_sent])
        {
            *x += y;
        }
    }
    eprintln!(
        "sluice experiment mtp-workloads: MTP timeouts {}, RACK retransmissions {}, SACK-gap \
         retransmissions {}, data packets {}",
        c[0], c[1], c[2], c[3]
    );
    Ok(msgs
        .done
        .iter()
        .map(|d| {
            let ideal = ideal(scale, d.src, d.dst, d.bytes).as_secs_f64();
            (d.bytes, d.fct.as_secs_f64() / ideal)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(workloads: &[&str], loads: &[u32]) -> WorkloadsArgs {
        WorkloadsArgs {
            common: Common {
                quick: true,
                out: std::env::temp_dir(),
                seed: 1,
            },
            racks: None,
            hosts_per_rack: None,
            workloads: workloads.iter().map(|w| w.to_string()).collect(),
            loads: loads.to_vec(),
            no_priorities: false,
        }
    }

    #[test]
    fn one_workload_at_one_load_runs_alone() {
        let r = run(&args(&["w2"], &[80])).unwrap();
        let cells: Vec<(&str, &str)> = r
            .rows
            .iter()
            .map(|row| (row[0].as_str(), row[1].as_str()))
            .collect();
        assert_eq!(cells, [("W2", "80"), ("W2", "80")], "<1K and 1K-10K only");
        assert!(matches!(
            run(&args(&["w2"], &[100])),
            Err(ExperimentError::Usage(_))
        ));
    }

    #[test]
    fn priorities_go_to_short_messages_only_shortest_highest() {
        for w in Workload::ALL {
            let dist = SizeDist::new(w, Some(3_000_000));
            let c = dscp_cutoffs(&dist, 1);
            assert!(c.windows(2).all(|p| p[0] <= p[1]), "{w:?}: {c:?}");
            assert_eq!(
                c[6], SHORT_MAX,
                "{w:?}: every short message above best effort"
            );
            assert!(c[0] >= 1);
        }
        // W1 (mostly tiny): the first level already splits messages under 1 KB.
        let w1 = dscp_cutoffs(&SizeDist::new(Workload::ALL[0], None), 1);
        assert!(w1[0] < 1000, "{w1:?}");
    }
}
