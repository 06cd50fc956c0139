//! `sluice experiment impair`: goodput of one bulk connection under each of the switch's
//! impairments (loss, reordering, corruption, duplication), the engine as sender and as
//! receiver beside Linux->Linux on the same port in the same run, with the ratio.
//!
//! Every run is a [`crate::switched_bulk`] run: data crosses the port towards sluice-c1,
//! which applies the impairment (reordering with the switch's default hold-back unless
//! `--reorder-delay` is given). One run on this lab varies by up to 2x, so each cell runs
//! `--reps` times, the repetitions interleaved (rep 1 of every cell, then rep 2, ...) so a
//! disturbance spreads over the cells, and the median is reported. Beside goodput: the
//! engine's CPU per byte, and, per cell, the engine's core and device counters and the
//! switch's per MB that crossed the impaired port, to show where the engine loses time.
//! Every run's counters go to `impair-runs.csv` (and to stderr with `--verbose`).

use std::str::FromStr;

use clap::Args;
use sluice_bench::{KernelServers, Timing};
use sluice_lab::Lab;
use sluice_tcp::cc::Algorithm;

use crate::error::ExperimentError;
use crate::plot::{Plot, Series};
use crate::report::{fmt_num, fmt_ratio, Report};
use crate::switched_bulk::{configure, run_once, Outcome, Pairing, Wire, RECEIVER_CLIENT};
use crate::{lab_workload, Common, LabRun};

mod counters;

use counters::{nonzero_line, runs_report, where_it_goes};

/// The impairments, and none (the reference).
pub const DEFAULT_IMPAIRMENTS: [&str; 5] =
    ["none", "loss=5", "reorder=1", "corrupt=1", "duplicate=1"];
/// The pairings of a full run; `--quick` leaves out engine->engine.
pub const DEFAULT_PAIRINGS: [Pairing; 4] = [
    Pairing::EngineToLinux,
    Pairing::LinuxToEngine,
    Pairing::LinuxToLinux,
    Pairing::EngineToEngine,
];
/// An engine below this share of Linux->Linux misses the target.
pub const TARGET_RATIO: f64 = 0.8;

/// `sluice experiment impair`.
#[derive(Args, Debug)]
pub struct ImpairArgs {
    /// Size, output directory and seed (the switch's draws).
    #[command(flatten)]
    pub common: Common,
    /// Impairments: `none` or KIND=PERCENT, KIND one of loss, reorder, corrupt, duplicate
    /// (default none,loss=5,reorder=1,corrupt=1,duplicate=1).
    #[arg(long, value_delimiter = ',')]
    pub impair: Vec<String>,
    /// How long the switch holds back a frame chosen for reordering (`sluice switch`'s
    /// `reorder-delay`, e.g. 500us); the switch's default if not given.
    #[arg(long)]
    pub reorder_delay: Option<String>,
    /// Pairings (default engine->linux,linux->engine,linux->linux,engine->engine; with
    /// --quick the first three); gbn->gbn is also known.
    #[arg(long, value_delimiter = ',')]
    pub pairings: Vec<String>,
    /// Runs per cell, the median reported (default 3; with --quick 1).
    #[arg(long)]
    pub reps: Option<usize>,
    /// Print every run's nonzero counters (engine core and device, switch) as it ends.
    #[arg(long)]
    pub verbose: bool,
    /// How long a sending engine polls with nothing to do before it sleeps, in
    /// microseconds: its core is shared with the switch and the Linux end (0: at once).
    #[arg(long, default_value_t = 100)]
    pub engine_idle_us: u64,
    /// The engines' congestion control (dctcp, timely, reno, cubic, bbr); the engine's default
    /// (DCTCP) if not given. Linux's end runs its own default (CUBIC).
    #[arg(long, value_parser = Algorithm::from_str)]
    pub cc: Option<Algorithm>,
    /// Linux's congestion control for its senders (set in their namespace, e.g. cubic); the
    /// kernel's default if not given.
    #[arg(long)]
    pub linux_cc: Option<String>,
    /// Run length and the lab lock.
    #[command(flatten)]
    pub lab: LabRun,
}

/// One impairment of the receivers' port.
#[derive(Clone, Debug, PartialEq)]
pub struct Impairment {
    /// The switch's key (`loss`, `reorder`, `corrupt`, `duplicate`), or None for none.
    pub kind: Option<&'static str>,
    /// Its probability in percent.
    pub percent: f64,
}

impl Impairment {
    /// Parses `none` or `KIND=PERCENT`.
    pub fn parse(word: &str) -> Result<Impairment, ExperimentError> {
        let usage = || {
            ExperimentError::Usage(format!(
                "--impair {word:?}: none or KIND=PERCENT, KIND one of loss, reorder, corrupt, \
                 duplicate, PERCENT within 0..=100"
            ))
        };
        if word == "none" {
            return Ok(Impairment {
                kind: None,
                percent: 0.0,
            });
        }
        let (k, v) = word.split_once('=').ok_or_else(usage)?;
        let kind = ["loss", "reorder", "corrupt", "duplicate"]
            .into_iter()
            .find(|&n| n == k)
            .ok_or_else(usage)?;
        let percent: f64 = v.parse().map_err(|_| usage())?;
        if !(0.0..=100.0).contains(&percent) {
            return Err(usage());
        }
        Ok(Impairment {
            kind: Some(kind),
            percent,
        })
    }

    /// Its name in the table: `none` or `loss 5 %`.
    pub fn label(&self) -> String {
        match self.kind {
            Some(k) => format!("{k} {} %", self.percent),
            None => "none".into(),
        }
    }

    /// The switch port's parameters for it (`loss=0.05`), with the reorder hold-back.
    pub fn switch_params(&self, reorder_delay: Option<&str>) -> String {
        match (self.kind, reorder_delay) {
            (None, _) => String::new(),
            (Some("reorder"), Some(d)) => {
                format!("reorder={},reorder-delay={d}", self.percent / 100.0)
            }
            (Some(k), _) => format!("{k}={}", self.percent / 100.0),
        }
    }

    /// Frames the switch's impaired port applied this impairment to in a run.
    fn applied(&self, o: &Outcome) -> u64 {
        let link = &o.port.egress.link;
        match self.kind {
            Some("loss") => link.lost,
            Some("reorder") => link.reordered,
            Some("corrupt") => link.corrupted,
            Some("duplicate") => link.duplicated,
            _ => 0,
        }
    }
}

/// The runs of one (impairment, pairing) cell.
type Runs = Vec<Outcome>;

/// Runs the experiment in the switched lab, writes every run's counters to
/// `impair-runs.csv`, and builds the summary report.
pub fn run(args: &ImpairArgs) -> Result<Report, ExperimentError> {
    let quick = args.common.quick;
    let impairments = if args.impair.is_empty() {
        DEFAULT_IMPAIRMENTS
            .iter()
            .map(|w| Impairment::parse(w))
            .collect()
    } else {
        args.impair
            .iter()
            .map(|w| Impairment::parse(w))
            .collect::<Result<Vec<_>, _>>()
    }?;
    let pairings: Vec<Pairing> = if args.pairings.is_empty() {
        DEFAULT_PAIRINGS[..if quick { 3 } else { 4 }].to_vec()
    } else {
        args.pairings
            .iter()
            .map(|n| {
                Pairing::parse(n).ok_or_else(|| {
                    ExperimentError::Usage(format!(
                        "--pairings {n:?}: one of engine->linux, linux->engine, \
                         engine->engine, linux->linux, gbn->gbn"
                    ))
                })
            })
            .collect::<Result<_, _>>()?
    };
    let reps = args.reps.unwrap_or(if quick { 1 } else { 3 });
    if reps == 0 {
        return Err(ExperimentError::Usage("--reps: at least 1".into()));
    }
    if let Some(d) = &args.reorder_delay {
        sluice_switch::parse_duration("--reorder-delay", d)
            .map_err(|e| ExperimentError::Usage(e.to_string()))?;
    }
    let timing = args.lab.timing(quick);
    let (cells, linux_cc) = args.lab.in_lab(
        "impair",
        |lab| {
            lab.up_switched(RECEIVER_CLIENT)
                .map_err(|e| lab_workload(&e))
        },
        |lab| measure(lab, args, &impairments, &pairings, reps, timing),
    )?;
    let labels: Vec<String> = impairments.iter().map(Impairment::label).collect();
    let runs = runs_report(&labels, &pairings, &cells);
    runs.write(&args.common.out)?;
    println!(
        "every run's counters: {}",
        args.common.out.join("impair-runs.csv").display()
    );
    Ok(report(
        args,
        &impairments,
        &pairings,
        reps,
        timing,
        &cells,
        &linux_cc,
    ))
}

/// Every pairing under every impairment, `reps` times: `cells[impairment][pairing]`.
fn measure(
    lab: &Lab,
    args: &ImpairArgs,
    impairments: &[Impairment],
    pairings: &[Pairing],
    reps: usize,
    timing: Timing,
) -> Result<(Vec<Vec<Runs>>, String), ExperimentError> {
    let wire = Wire::of(lab)?;
    const CC_KEY: &str = "net.ipv4.tcp_congestion_control";
    if let Some(cc) = &args.linux_cc {
        lab.sysctl(sluice_lab::NS_KERNEL, CC_KEY, cc)
            .map_err(|e| ExperimentError::Usage(format!("--linux-cc {cc}: {e}")))?;
    }
    // The namespaces inherit the kernel's default (Linux copies init_net's choice into a new
    // namespace): it decides how Linux copes with random loss, so the report names it.
    let linux_cc = lab
        .sysctl_get(sluice_lab::NS_KERNEL, CC_KEY)
        .unwrap_or_else(|_| "unknown".into());
    let kernel = KernelServers::start(sluice_lab::NS_KERNEL).map_err(|e| lab_workload(&e))?;
    let mut cells = vec![vec![Runs::new(); pairings.len()]; impairments.len()];
    for rep in 0..reps {
        for (i, imp) in impairments.iter().enumerate() {
            let params = imp.switch_params(args.reorder_delay.as_deref());
            for (j, &pairing) in pairings.iter().enumerate() {
                let config = configure(pairing, None, args.cc, true);
                let seed = args
                    .common
                    .seed
                    .wrapping_add((rep * impairments.len() + i) as u64);
                let idle = std::time::Duration::from_micros(args.engine_idle_us);
                let o = run_once(&wire, pairing, &config, &params, seed, timing, idle)?;
                eprintln!(
                    "sluice experiment impair: {} {} run {}/{reps}: {} Mbit/s",
                    imp.label(),
                    pairing.name(),
                    rep + 1,
                    fmt_num(o.mbps)
                );
                if args.verbose {
                    eprintln!("  {}", nonzero_line(&o));
                }
                cells[i][j].push(o);
            }
        }
    }
    drop(kernel);
    Ok((cells, linux_cc))
}

/// The median goodput of a cell's runs (NaN without runs).
fn median_mbps(runs: &[Outcome]) -> f64 {
    median(runs.iter().map(|o| o.mbps).collect())
}

/// The median of some values (NaN when none is finite).
fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The summary: a row per impairment, the median goodput of each pairing, the engine's
/// ratios to Linux->Linux and its CPU per byte; notes on what each engine cell counted.
fn report(
    args: &ImpairArgs,
    impairments: &[Impairment],
    pairings: &[Pairing],
    reps: usize,
    timing: Timing,
    cells: &[Vec<Runs>],
    linux_cc: &str,
) -> Report {
    let linux = pairings.iter().position(|&p| p == Pairing::LinuxToLinux);
    let engines: Vec<(usize, Pairing)> = pairings
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, p)| p.engine_sends() || p.engine_receives())
        .collect();
    let mut columns = vec!["impairment".to_string()];
    columns.extend(pairings.iter().map(|p| format!("{} Mbit/s", p.name())));
    if linux.is_some() {
        columns.extend(engines.iter().map(|(_, p)| format!("{} / linux", p.name())));
    }
    columns.extend(engines.iter().map(|(_, p)| format!("{} ns/B", p.name())));
    columns.extend(["impaired frames", "other drops"].map(String::from));
    let mut rows = Vec::new();
    let mut notes = vec![
        format!(
            "Mbit/s: the median of {reps} run(s); X / linux: the engine pairing's median over \
             linux->linux's (target >= {TARGET_RATIO}); ns/B: the engine's thread CPU per payload \
             byte (the receiving engine's over the window; the sending engine's over its whole \
             run, bytes estimated at the window's rate), median; impaired frames: what the \
             switch lost, held back, corrupted or duplicated, over every run of the row; other \
             drops: what it dropped besides"
        ),
        "where it goes (engine and Linux counters summed over a cell's runs, per MB that \
         crossed the impaired port):"
            .to_string(),
    ];
    for (imp, row) in impairments.iter().zip(cells) {
        let mut r = vec![imp.label()];
        r.extend(row.iter().map(|runs| fmt_num(median_mbps(runs))));
        let reference = linux.map(|l| median_mbps(&row[l]));
        if let Some(l) = reference {
            for (j, p) in &engines {
                let e = median_mbps(&row[*j]);
                r.push(fmt_ratio(e, l));
                let verdict = if l > 0.0 && e >= TARGET_RATIO * l {
                    "met"
                } else {
                    "missed"
                };
                notes.push(format!(
                    "  {} {}: {} linux->linux ({verdict}); {}",
                    imp.label(),
                    p.name(),
                    fmt_ratio(e, l),
                    where_it_goes(&row[*j])
                ));
            }
        }
        if let Some(l) = linux {
            notes.push(format!(
                "  {} linux->linux: {}",
                imp.label(),
                where_it_goes(&row[l])
            ));
        }
        for (j, _) in &engines {
            r.push(fmt_num(median(
                row[*j]
                    .iter()
                    .filter_map(Outcome::engine_ns_per_byte)
                    .collect(),
            )));
        }
        let all = row.iter().flatten();
        r.push(all.clone().map(|o| imp.applied(o)).sum::<u64>().to_string());
        r.push(all.map(|o| o.other_drops).sum::<u64>().to_string());
        rows.push(r);
    }
    let series = pairings
        .iter()
        .enumerate()
        .map(|(j, p)| Series {
            name: p.name().into(),
            points: cells
                .iter()
                .enumerate()
                .map(|(i, row)| (i as f64, median_mbps(&row[j])))
                .collect(),
        })
        .collect();
    Report {
        name: "impair".into(),
        setup: vec![
            format!(
                "sluice experiment impair: one bulk connection per run from a server in the \
                 default lab to a receiver in sluice-c1, through sluice switch; the port towards \
                 sluice-c1 applies the impairment to every frame it forwards (the data; ACKs take \
                 the unimpaired uplink); reorder hold-back {}; {} s after {} s warm-up, {reps} \
                 run(s) per cell, content checked",
                args.reorder_delay
                    .as_deref()
                    .unwrap_or("the switch's default (500us)"),
                timing.seconds,
                timing.warmup
            ),
            format!(
                "  engine: {:?} backend, the core's defaults, congestion control {}; linux: \
                 sluice kserve / sluice loadgen, kernel defaults, congestion control {}; {} \
                 shared CPU cores",
                crate::switched_bulk::BACKEND,
                args.cc.unwrap_or_default(),
                linux_cc,
                std::thread::available_parallelism().map_or(1, |n| n.get())
            ),
        ],
        columns,
        rows,
        notes,
        plot: Some(Plot {
            title: "Goodput of one connection under each impairment".into(),
            x_label: "impairment".into(),
            y_label: "Mbit/s".into(),
            x_categories: Some(impairments.iter().map(Impairment::label).collect()),
            series,
        }),
        data: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_bench::EngineCounters;

    fn outcome(mbps: f64) -> Outcome {
        let mut o = Outcome {
            mbps,
            bytes: (mbps * 1e6 / 8.0) as u64,
            seconds: 1.0,
            wall_s: 2.0,
            receiver_cpu_s: Some(0.5),
            receiver: Some(EngineCounters::default()),
            ..Outcome::default()
        };
        o.port.forwarded_bytes = 2_000_000;
        o.port.egress.link.reordered = 3;
        if let Some(r) = o.receiver.as_mut() {
            r.core.duplicate_segments = 4;
        }
        o
    }

    #[test]
    fn impairments_parse_and_spell_the_switch_parameters() {
        let none = Impairment::parse("none").unwrap();
        assert_eq!(none.switch_params(None), "");
        let r = Impairment::parse("reorder=1").unwrap();
        assert_eq!(r.label(), "reorder 1 %");
        assert_eq!(r.switch_params(None), "reorder=0.01");
        assert_eq!(
            r.switch_params(Some("2ms")),
            "reorder=0.01,reorder-delay=2ms"
        );
        assert_eq!(
            Impairment::parse("loss=5")
                .unwrap()
                .switch_params(Some("2ms")),
            "loss=0.05"
        );
        for bad in ["", "loss", "loss=x", "loss=101", "delay=1", "none=1"] {
            assert!(Impairment::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn medians_ratios_and_where_it_goes() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(vec![f64::NAN]).is_nan());
        let args = ImpairArgs {
            common: Common {
                quick: true,
                out: "x".into(),
                seed: 1,
            },
            impair: Vec::new(),
            reorder_delay: None,
            pairings: Vec::new(),
            reps: None,
            verbose: false,
            engine_idle_us: 100,
            cc: None,
            linux_cc: None,
            lab: LabRun::default(),
        };
        let imps = [
            Impairment::parse("none").unwrap(),
            Impairment::parse("reorder=1").unwrap(),
        ];
        let pairings = [Pairing::LinuxToEngine, Pairing::LinuxToLinux];
        let cells = vec![
            vec![vec![outcome(900.0)], vec![outcome(1000.0)]],
            vec![
                vec![outcome(100.0), outcome(500.0), outcome(300.0)],
                vec![outcome(1000.0)],
            ],
        ];
        let timing = Timing {
            seconds: 1.0,
            warmup: 0.5,
        };
        let r = report(&args, &imps, &pairings, 3, timing, &cells, "cubic");
        assert_eq!(
            r.columns,
            [
                "impairment",
                "linux->engine Mbit/s",
                "linux->linux Mbit/s",
                "linux->engine / linux",
                "linux->engine ns/B",
                "impaired frames",
                "other drops"
            ]
        );
        assert_eq!(r.rows[0][1..4], ["900", "1000", "x0.90"].map(String::from));
        assert_eq!(r.rows[1][1..4], ["300", "1000", "x0.30"].map(String::from));
        // 0.5 s of CPU over 300 Mbit/s for 1 s: 0.5e9 / 37.5e6 ns per byte.
        assert_eq!(r.rows[1][4], "13.3");
        assert_eq!(r.rows[1][5], "12");
        assert!(
            r.setup
                .iter()
                .any(|h| h.contains("linux: ") && h.contains("congestion control cubic")),
            "{:?}",
            r.setup
        );
        let text = r.notes.join("\n");
        assert!(
            text.contains("none linux->engine: x0.90 linux->linux (met)"),
            "{text}"
        );
        assert!(
            text.contains("reorder 1 % linux->engine: x0.30 linux->linux (missed); receiver: duplicate_segments 2.00/MB"),
            "{text}"
        );
        let labels: Vec<String> = imps.iter().map(Impairment::label).collect();
        let runs = runs_report(&labels, &pairings, &cells);
        assert_eq!(runs.rows.len(), 6);
        assert!(runs.rows.iter().all(|row| row.len() == runs.columns.len()));
    }
}
