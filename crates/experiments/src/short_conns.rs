//! `sluice experiment short-conns`: AccelTCP's short-connection experiment (acceltcp.txt 6.1,
//! Figure 10) with programs nobody here wrote. nginx serves a 900-byte page; wrk in
//! sluice-b sends every request on a new connection (`Connection: close`, so nginx closes
//! first and the server keeps TIME-WAIT, as in the paper's setup). nginx runs on Linux
//! kernel TCP (sluice-k) and on the engine through `sluice run` (sluice-a), without and
//! with teardown offload (`sluice run --teardown-offload`), one after the other in one run.
//!
//! For each: connections (= requests) per second, wrk's p99, the machine's CPU time per
//! connection (every core, every process: wrk and the client's kernel are the same in all
//! rows, so the differences are the server side's; on a shared 2-core machine it is the
//! figure that survives noise), and the engine's teardown counters from its exit report.

use std::time::Duration;

use clap::Args;
use sluice_bench::apps::tools::wrk;
use sluice_bench::apps::workdir::SMALL_FILE;
use sluice_bench::apps::{App, Harness, Side};

use crate::error::ExperimentError;
use crate::plot::{Plot, Series};
use crate::report::{fmt_num, fmt_ratio, Report};
use crate::{lab_workload, Common, LabRun};

/// wrk's connections (each does one request per connection, back to back).
const DEFAULT_CONNECTIONS: u32 = 32;

/// `sluice experiment short-conns`.
#[derive(Args, Debug)]
pub struct ShortConnsArgs {
    /// Size and output directory.
    #[command(flatten)]
    pub common: Common,
    /// Seconds per run, and the lab lock.
    #[command(flatten)]
    pub lab: LabRun,
    /// wrk's concurrent connections.
    #[arg(long, default_value_t = DEFAULT_CONNECTIONS)]
    pub connections: u32,
}

/// Where nginx runs. The engine's rows add AccelTCP's offloads one at a time, as the
/// breakdown of acceltcp.txt Table 3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Linux kernel TCP.
    Linux,
    /// The engine, setup and closes on the normal path.
    Engine,
    /// The engine answering every SYN with a cookie (no state until the handshake
    /// completes: the setup offload, acceltcp.txt 4.1).
    EngineSetup,
    /// Setup offload, and closes offloaded to the teardown stage (acceltcp.txt 4.2).
    EngineSetupTeardown,
}

impl Variant {
    const ALL: [Variant; 4] = [
        Variant::Linux,
        Variant::Engine,
        Variant::EngineSetup,
        Variant::EngineSetupTeardown,
    ];

    fn name(self) -> &'static str {
        match self {
            Variant::Linux => "linux",
            Variant::Engine => "engine",
            Variant::EngineSetup => "engine + setup offload",
            Variant::EngineSetupTeardown => "engine + setup + teardown offload",
        }
    }

    /// `sluice engine` flags.
    fn engine_args(self) -> Vec<String> {
        match self {
            Variant::Linux | Variant::Engine => Vec::new(),
            Variant::EngineSetup | Variant::EngineSetupTeardown => {
                vec!["--syn-backlog".into(), "0".into()]
            }
        }
    }

    /// `sluice run` flags.
    fn run_args(self) -> &'static [&'static str] {
        match self {
            Variant::EngineSetupTeardown => &["--teardown-offload"],
            _ => &[],
        }
    }
}

/// One variant's measurement.
#[derive(Clone, Debug, Default)]
pub struct Row {
    /// Connections completed per second.
    pub conns_per_sec: f64,
    /// wrk's 99th percentile latency, ms.
    pub p99_ms: f64,
    /// Machine CPU time per connection, microseconds.
    pub cpu_us_per_conn: f64,
    /// wrk's socket errors and non-2xx answers.
    pub errors: u64,
    /// The engine's `teardown_offloaded` and `teardown_completed` (None on Linux).
    pub offloaded: Option<(u64, u64)>,
    /// The engine's `syn_cookies_sent` and `syn_cookies_accepted` (None on Linux).
    pub cookies: Option<(u64, u64)>,
}

/// Runs the experiment and returns its report.
pub fn run(args: &ShortConnsArgs) -> Result<Report, ExperimentError> {
    let timing = args.lab.timing(args.common.quick);
    let seconds = timing.seconds.ceil().max(1.0) as u32;
    let rows = args.lab.in_lab(
        "short-conns",
        |lab| lab.up().map_err(|e| lab_workload(&e)),
        |_| {
            let exe = std::env::current_exe()
                .map_err(|e| ExperimentError::Io("find the sluice executable".into(), e))?;
            let mut rows = Vec::new();
            for v in Variant::ALL {
                eprintln!("sluice experiment short-conns: nginx on {}", v.name());
                let row = Harness::new(&exe, "af_packet")
                    .map_err(|e| lab_workload(&e))
                    .and_then(|h| {
                        let h = h.with_engine_args(&v.engine_args());
                        measure(&h, v, seconds, args.connections)
                    });
                if let Err(e) = &row {
                    eprintln!("sluice experiment short-conns: {} failed: {e}", v.name());
                }
                rows.push((v, row));
            }
            Ok(rows)
        },
    )?;
    Ok(report(args, seconds, &rows))
}

/// Starts nginx for `v`, runs wrk against it, stops it and reads the engine's report.
fn measure(h: &Harness, v: Variant, seconds: u32, conns: u32) -> Result<Row, ExperimentError> {
    let side = match v {
        Variant::Linux => Side::Linux,
        _ => Side::Engine,
    };
    let running = h
        .start_with(App::Nginx, side, v.run_args())
        .map_err(|e| lab_workload(&e))?;
    let addr = running.addr();
    let close = ["Connection: close"];
    // A short warm-up (caches, the engine's rings), not measured.
    wrk::run_with(h, addr, SMALL_FILE, 1, conns, &close)
        .map_err(|e| lab_workload(&running.with_server_log(e)))?;
    let busy = machine_busy_seconds();
    let w = wrk::run_with(h, addr, SMALL_FILE, seconds, conns, &close)
        .map_err(|e| lab_workload(&running.with_server_log(e)))?;
    let cpu = machine_busy_seconds() - busy;
    let log = running
        .stop_with_engine_log()
        .map_err(|e| lab_workload(&e))?;
    let offloaded = log.as_ref().map(|log| {
        (
            counter(log, "teardown_offloaded"),
            counter(log, "teardown_completed"),
        )
    });
    let cookies = log.as_ref().map(|log| {
        (
            counter(log, "syn_cookies_sent"),
            counter(log, "syn_cookies_accepted"),
        )
    });
    Ok(Row {
        conns_per_sec: w.requests_per_sec,
        p99_ms: w.p99_ms,
        cpu_us_per_conn: cpu / w.requests.max(1) as f64 * 1e6,
        errors: w.socket_errors + w.non_2xx_3xx,
        offloaded,
        cookies,
    })
}

/// CPU time the whole machine spent busy so far (every core; /proc/stat), seconds.
pub(crate) fn machine_busy_seconds() -> f64 {
    let Ok(text) = std::fs::read_to_string("/proc/stat") else {
        return 0.0;
    };
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|w| w.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...: busy is all but idle and iowait.
    let total: u64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
    // USER_HZ is 100 on Linux.
    total.saturating_sub(idle) as f64 / 100.0
}

/// The value of a `name value` line in an engine's exit report (0 if absent).
fn counter(log: &str, name: &str) -> u64 {
    log.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(name)).then(|| w.next()?.parse().ok())?
        })
        .next_back()
        .unwrap_or(0)
}

type Measured = (Variant, Result<Row, ExperimentError>);

fn report(args: &ShortConnsArgs, seconds: u32, rows: &[Measured]) -> Report {
    let find = |want: Variant| {
        rows.iter()
            .find(|(v, _)| *v == want)
            .and_then(|(_, r)| r.as_ref().ok())
            .cloned()
    };
    let (linux, engine) = (find(Variant::Linux), find(Variant::Engine));
    let mut table = Vec::new();
    for (v, r) in rows {
        match r {
            Ok(r) => table.push(vec![
                v.name().to_string(),
                fmt_num(r.conns_per_sec),
                linux
                    .as_ref()
                    .map_or("-".into(), |l| fmt_ratio(r.conns_per_sec, l.conns_per_sec)),
                match (v, &engine) {
                    (Variant::Linux, _) | (_, None) => "-".into(),
                    (_, Some(e)) => fmt_ratio(r.conns_per_sec, e.conns_per_sec),
                },
                fmt_num(r.p99_ms),
                fmt_num(r.cpu_us_per_conn),
                linux.as_ref().map_or("-".into(), |l| {
                    fmt_ratio(r.cpu_us_per_conn, l.cpu_us_per_conn)
                }),
                r.errors.to_string(),
                r.cookies.map_or("-".into(), |(s, a)| format!("{s} / {a}")),
                r.offloaded
                    .map_or("-".into(), |(o, c)| format!("{o} / {c}")),
            ]),
            Err(e) => table.push(vec![
                v.name().to_string(),
                format!("failed: {e}"),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ]),
        }
    }
    let ok: Vec<(usize, &Row)> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, (_, r))| r.as_ref().ok().map(|r| (i, r)))
        .collect();
    let plot = Plot {
        title: "Short connections: nginx, wrk with Connection: close".into(),
        x_label: "server".into(),
        y_label: "thousand conns/s; CPU us per conn".into(),
        x_categories: Some(rows.iter().map(|(v, _)| v.name().to_string()).collect()),
        series: vec![
            Series {
                name: "thousand connections/s".into(),
                points: ok
                    .iter()
                    .map(|&(i, r)| (i as f64, r.conns_per_sec / 1000.0))
                    .collect(),
            },
            Series {
                name: "machine CPU us per connection".into(),
                points: ok
                    .iter()
                    .map(|&(i, r)| (i as f64, r.cpu_us_per_conn))
                    .collect(),
            },
        ],
    };
    Report {
        name: "short-conns".into(),
        setup: vec![
            format!(
                "sluice experiment short-conns: nginx ({SMALL_FILE}, 900 B), wrk -t2 -c{} \
                 -H 'Connection: close' for {seconds} s after a 1 s warm-up, from sluice-b; \
                 {} shared CPU cores",
                args.connections,
                std::thread::available_parallelism().map_or(1, |n| n.get())
            ),
            "  linux: nginx in sluice-k on kernel TCP; engine: nginx in sluice-a through \
             `sluice run` on `sluice engine --lab` (af_packet); + setup offload: \
             `sluice engine --syn-backlog 0` (every SYN answered with a cookie, no state \
             until the handshake completes); + teardown offload: `sluice run \
             --teardown-offload`"
                .into(),
        ],
        columns: [
            "server",
            "conns/s",
            "vs linux",
            "vs engine",
            "p99 ms",
            "CPU us/conn",
            "CPU vs linux",
            "errors",
            "cookies sent / accepted",
            "offloaded / completed",
        ]
        .map(String::from)
        .to_vec(),
        rows: table,
        notes: vec![
            "CPU us/conn: busy time of every core (/proc/stat) over the run divided by the \
             connections wrk completed; wrk and the client kernel's share is in every row."
                .into(),
            "vs engine: each offload's speed-up over the engine without offloads (the \
             breakdown of acceltcp.txt Table 3)"
                .into(),
            format!(
                "offloaded / completed: the engine core's teardown_offloaded and \
                 teardown_completed at exit (a close is offloaded when the rest of its \
                 response fits the send window; {} s of TIME-WAIT each)",
                Duration::from_secs(60).as_secs()
            ),
        ],
        plot: Some(plot),
        data: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engines_exit_report_is_read_by_name() {
        let log = "sluice engine: stopped; service counters:\naccepts            12\n\
                   core counters:\nteardown_offloaded        10\nteardown_completed        9\n";
        assert_eq!(counter(log, "teardown_offloaded"), 10);
        assert_eq!(counter(log, "teardown_completed"), 9);
        assert_eq!(counter(log, "accepts"), 12);
        assert_eq!(counter(log, "nothing"), 0);
    }

    #[test]
    fn machine_cpu_time_only_grows() {
        let a = machine_busy_seconds();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(machine_busy_seconds() >= a);
    }
}
