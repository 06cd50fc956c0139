//! `sluice experiment ooo`: out-of-order fidelity in the simulator, the shape of Laminar's
//! Table 2 (laminar.txt 6.4), at half its scale (48 hosts rather than 96: the simulator polls
//! every host after every event, so time grows with hosts squared). A leaf-spine fabric carries partition-aggregate incasts of
//! 8 KB answers (foreground) competing with heavy-tailed background transfers; the same
//! seeded workload runs with 64 ("max"), 0, 1 and 2 tracked out-of-order intervals per
//! connection under each congestion-control policy, and the 90th and 99.9th percentile flow
//! completion times are compared with the max-fidelity run.

use std::time::Duration;

use clap::Args;
use rand::distributions::{Distribution, WeightedIndex};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_sim::Sim;
use sluice_tcp::{Config, Stack};

use crate::drain::{check, drain};
use crate::error::ExperimentError;
use crate::fabric::{self, FabricSpec};
use crate::flows::{quantile, Class, Flows};
use crate::plot::{Plot, Series};
use crate::report::{fmt_num, fmt_ratio, Report};
use crate::Common;

/// `sluice experiment ooo`.
#[derive(Args, Debug)]
pub struct OooArgs {
    /// Size, output directory and seed.
    #[command(flatten)]
    pub common: Common,
    /// Turn RACK-TLP (RFC 8985) off in every host, to compare.
    #[arg(long)]
    pub no_rack_tlp: bool,
}

/// Out-of-order intervals per row: "max" first (the reference), then 0, 1, 2.
const FIDELITIES: [(&str, usize); 4] = [("max", 64), ("0", 0), ("1", 1), ("2", 2)];

/// Size of each worker's answer in a partition-aggregate query.
pub(crate) const ANSWER_BYTES: u64 = 8 * 1024;

/// Background flow sizes: the web-search distribution of the DCTCP paper, coarsely
/// (bytes, probability).
pub(crate) const BACKGROUND_SIZES: [(u64, f64); 8] = [
    (6_000, 0.15),
    (20_000, 0.15),
    (50_000, 0.2),
    (130_000, 0.1),
    (670_000, 0.1),
    (1_300_000, 0.1),
    (3_300_000, 0.1),
    (6_700_000, 0.1),
];

/// The experiment's size.
/// The experiment's fabric (`quick`: its --quick size); the ns-3 cross-check uses it too.
pub(crate) fn fabric_spec(quick: bool) -> FabricSpec {
    FabricSpec {
        spines: if quick { 2 } else { 4 },
        leaves: if quick { 2 } else { 6 },
        hosts_per_leaf: if quick { 4 } else { 8 },
        host_bps: 10_000_000_000,
        uplink_bps: 40_000_000_000,
        delay: Duration::from_micros(2),
        queue_bytes: 200 * 1024,
        ecn_k_bytes: Some(65 * 1500),
        priority_queues: 0,
    }
}

#[derive(Clone, Debug)]
struct Scale {
    fabric: FabricSpec,
    /// Workers answering each query.
    fan_in: usize,
    /// Queries per second, whole fabric.
    queries_per_sec: f64,
    /// Background load as a fraction of each host's link.
    background_load: f64,
    /// Background channels per host.
    background_channels: usize,
    /// Arrivals stop after this much virtual time; the run then drains.
    duration: Duration,
}

impl Scale {
    fn new(quick: bool) -> Scale {
        let fabric = fabric_spec(quick);
        Scale {
            fabric,
            fan_in: if quick { 4 } else { 12 },
            queries_per_sec: if quick { 2_000.0 } else { 4_000.0 },
            background_load: 0.5,
            background_channels: 2,
            duration: Duration::from_millis(if quick { 20 } else { 100 }),
        }
    }
}

/// FCT percentiles of one run, in milliseconds.
#[derive(Clone, Copy, Debug)]
struct Fcts {
    fg_p90: f64,
    fg_p999: f64,
    bg_p90: f64,
    bg_p999: f64,
    flows: usize,
    retransmitted_mb: f64,
}

/// Runs the experiment and builds its report.
pub fn run(args: &OooArgs) -> Result<Report, ExperimentError> {
    let scale = Scale::new(args.common.quick);
    let policies = crate::policies();
    let mut report = Report {
        name: "ooo".into(),
        setup: vec![
            format!(
                "sluice experiment ooo: {} spines x {} leaves x {} hosts, {} Gbit/s hosts, {} Gbit/s uplinks, \
                 {} us links, {} KB port queues, ECN K {} KB, ECMP by flow",
                scale.fabric.spines,
                scale.fabric.leaves,
                scale.fabric.hosts_per_leaf,
                scale.fabric.host_bps / 1_000_000_000,
                scale.fabric.uplink_bps / 1_000_000_000,
                scale.fabric.delay.as_micros(),
                scale.fabric.queue_bytes / 1024,
                scale.fabric.ecn_k_bytes.unwrap_or(0) / 1024,
            ),
            format!(
                "  foreground: {} queries/s, each {} workers in other racks answer {} KB at once; \
                 background: {:.0}% load per host, web-search sizes; arrivals for {} ms, seed {}",
                scale.queries_per_sec,
                scale.fan_in,
                ANSWER_BYTES / 1024,
                scale.background_load * 100.0,
                scale.duration.as_millis(),
                args.common.seed
            ),
            "  ooo = out-of-order intervals tracked per connection (max = 64; 0 = go-back-N, \
             out-of-order data dropped); ratios are against max"
                .into(),
        ],
        columns: [
            "cc", "ooo", "fg p90 ms", "x", "fg p99.9 ms", "x", "bg p90 ms", "x", "bg p99.9 ms",
            "x", "flows", "retx MB",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        ..Report::default()
    };
    let mut series = Vec::new();
    for &(cc, apply) in &policies {
        let mut reference: Option<Fcts> = None;
        let mut points = Vec::new();
        for (i, &(label, intervals)) in FIDELITIES.iter().enumerate() {
            eprintln!("sluice experiment ooo: {cc}, {label} intervals");
            let f = run_one(
                &scale,
                args.common.seed,
                intervals,
                apply,
                !args.no_rack_tlp,
            )?;
            let r = *reference.get_or_insert(f);
            report.rows.push(vec![
                cc.to_string(),
                label.to_string(),
                fmt_num(f.fg_p90),
                fmt_ratio(f.fg_p90, r.fg_p90),
                fmt_num(f.fg_p999),
                fmt_ratio(f.fg_p999, r.fg_p999),
                fmt_num(f.bg_p90),
                fmt_ratio(f.bg_p90, r.bg_p90),
                fmt_num(f.bg_p999),
                fmt_ratio(f.bg_p999, r.bg_p999),
                f.flows.to_string(),
                fmt_num(f.retransmitted_mb),
            ]);
            points.push((i as f64, f.fg_p999));
        }
        series.push(Series {
            name: format!("{cc} foreground p99.9"),
            points,
        });
    }
    report.plot = Some(Plot {
        title: "Foreground FCT p99.9 by out-of-order intervals tracked".into(),
        x_label: "out-of-order intervals".into(),
        y_label: "FCT p99.9 (ms)".into(),
        x_categories: Some(FIDELITIES.iter().map(|(l, _)| l.to_string()).collect()),
        series,
    });
    Ok(report)
}

/// A leaf-spine fabric of Sluice hosts with the experiment's channels open: every host to
/// the aggregator (first host) of every other rack, and `background_channels` per host to
/// random hosts in other racks. The ns-3 cross-check (crate::ns3_crosscheck) runs the same
/// fabric and channels at other sizes.
pub(crate) struct Channels {
    /// The simulation, with every channel open.
    pub sim: Sim<Stack>,
    /// The fabric's hosts.
    pub fab: fabric::Fabric,
    /// The channels.
    pub flows: Flows,
    /// Per aggregator, the channels from its workers (foreground).
    pub answers: Vec<Vec<usize>>,
    /// Per host, its background channels.
    pub background: Vec<Vec<usize>>,
    /// The workload's generator, after the channels' draws.
    pub rng: ChaCha8Rng,
}

/// Builds the fabric (hosts configured by `configure` after the common settings, with
/// `table` connections and SYN backlog), opens the channels and waits until all are open.
pub(crate) fn open_channels(
    spec: &FabricSpec,
    seed: u64,
    background_channels: usize,
    table: usize,
    configure: &mut dyn FnMut(&mut Config),
) -> Result<Channels, ExperimentError> {
    let mut sim: Sim<Stack> = Sim::new(seed);
    let fab = fabric::build(&mut sim, spec, |i| {
        let (mac, ip) = fabric::host_addr(i);
        let mut c = Config::new(mac, ip);
        c.seed = seed.wrapping_mul(1000).wrapping_add(i as u64);
        c.rto_min = Duration::from_millis(5);
        c.rto_initial = Duration::from_millis(10);
        c.max_connections = table;
        c.syn_backlog = table;
        c.time_wait = Duration::from_millis(10);
        configure(&mut c);
        c
    })?;
    let n = fab.hosts.len();
    let per_leaf = spec.hosts_per_leaf;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut flows = Flows::new(&mut sim, &fab.hosts, &fab.ips)?;
    let mut answers = vec![Vec::new(); n];
    for leaf in 0..spec.leaves {
        let agg = leaf * per_leaf;
        for w in (0..n).filter(|&w| fab.leaf_of[w] != leaf) {
            answers[agg].push(flows.open(&mut sim, w, agg)?);
        }
    }
    let mut background = vec![Vec::new(); n];
    for (src, chans) in background.iter_mut().enumerate() {
        for _ in 0..background_channels {
            let dst = loop {
                let d = rng.gen_range(0..n);
                if fab.leaf_of[d] != fab.leaf_of[src] {
                    break d;
                }
            };
            chans.push(flows.open(&mut sim, src, dst)?);
        }
    }
    let setup_deadline = sim.now() + Duration::from_secs(1);
    let opened = sim.run_until(setup_deadline, |now, hosts| {
        flows.step(now, hosts);
        flows.all_open()
    });
    if opened.is_err() || !flows.all_open() {
        return Err(ExperimentError::Workload(format!(
            "channels did not open: {}",
            flows.error().unwrap_or("timeout")
        )));
    }
    Ok(Channels {
        sim,
        fab,
        flows,
        answers,
        background,
        rng,
    })
}

/// One seeded run with `intervals` out-of-order intervals per connection.
fn run_one(
    scale: &Scale,
    seed: u64,
    intervals: usize,
    apply_cc: crate::ConfigureCc,
    rack_tlp: bool,
) -> Result<Fcts, ExperimentError> {
    let Channels {
        mut sim,
        fab,
        mut flows,
        answers,
        background,
        mut rng,
    } = open_channels(
        &scale.fabric,
        seed,
        scale.background_channels,
        512,
        &mut |c| {
            c.ooo_intervals = intervals;
            c.rack_tlp = rack_tlp;
            apply_cc(c);
        },
    )?;
    let per_leaf = scale.fabric.hosts_per_leaf;

    // Arrivals: Poisson queries and per-host Poisson background flows, merged in time order.
    let sizes = WeightedIndex::new(BACKGROUND_SIZES.iter().map(|(_, p)| *p))
        .map_err(|e| ExperimentError::Usage(e.to_string()))?;
    let mean_bg: f64 = BACKGROUND_SIZES
        .iter()
        .map(|(b, p)| *b as f64 * p)
        .sum::<f64>();
    let bg_rate = scale.background_load * scale.fabric.host_bps as f64 / 8.0 / mean_bg;
    let mut arrivals: Vec<(Duration, Arrival)> = Vec::new();
    let horizon = scale.duration.as_secs_f64();
    let exp = |rng: &mut ChaCha8Rng, rate: f64| -rng.gen::<f64>().max(1e-12).ln() / rate;
    let mut t = exp(&mut rng, scale.queries_per_sec);
    while t < horizon {
        let agg = rng.gen_range(0..scale.fabric.leaves) * per_leaf;
        arrivals.push((Duration::from_secs_f64(t), Arrival::Query { agg }));
        t += exp(&mut rng, scale.queries_per_sec);
    }
    for chans in &background {
        let mut t = exp(&mut rng, bg_rate);
        while t < horizon {
            let bytes = BACKGROUND_SIZES[sizes.sample(&mut rng)].0;
            let chan = chans[rng.gen_range(0..chans.len())];
            arrivals.push((
                Duration::from_secs_f64(t),
                Arrival::Background { chan, bytes },
            ));
            t += exp(&mut rng, bg_rate);
        }
    }
    arrivals.sort_by_key(|(t, _)| *t);

    let start = sim.now();
    for (at, arrival) in arrivals {
        let _ = sim.run_until(start + at, |now, hosts| {
            flows.step(now, hosts);
            false
        });
        match arrival {
            Arrival::Query { agg } => {
                let chans = &answers[agg];
                let mut picked = Vec::with_capacity(scale.fan_in);
                while picked.len() < scale.fan_in.min(chans.len()) {
                    let c = chans[rng.gen_range(0..chans.len())];
                    if !picked.contains(&c) {
                        picked.push(c);
                    }
                }
                for c in picked {
                    flows.send(&mut sim, c, ANSWER_BYTES, Class::Foreground)?;
                }
            }
            Arrival::Background { chan, bytes } => {
                flows.send(&mut sim, chan, bytes, Class::Background)?
            }
        }
        check(&flows)?;
    }
    drain(&mut sim, &mut flows, Duration::from_secs(5), "messages")?;
    let ms = |class| {
        flows
            .done
            .iter()
            .filter(|c| c.class == class)
            .map(|c| c.fct.as_secs_f64() * 1e3)
            .collect::<Vec<f64>>()
    };
    let (mut fg, mut bg) = (ms(Class::Foreground), ms(Class::Background));
    let retransmitted: u64 = fab
        .hosts
        .iter()
        .filter_map(|&h| sim.host(h))
        .map(|s| s.counters().retransmitted_bytes)
        .sum();
    Ok(Fcts {
        fg_p90: quantile(&mut fg, 0.9),
        fg_p999: quantile(&mut fg, 0.999),
        bg_p90: quantile(&mut bg, 0.9),
        bg_p999: quantile(&mut bg, 0.999),
        flows: flows.done.len(),
        retransmitted_mb: retransmitted as f64 / 1e6,
    })
}

/// A workload event.
#[derive(Clone, Copy, Debug)]
enum Arrival {
    /// A query to the aggregator host `agg`: `fan_in` workers answer at once.
    Query { agg: usize },
    /// A background transfer of `bytes` on channel `chan`.
    Background { chan: usize, bytes: u64 },
}
