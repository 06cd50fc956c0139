//! `sluice bench apps`: unmodified programs on the engine (sluice-a, through `sluice run`)
//! and on Linux kernel TCP (sluice-k), driven by the same clients in sluice-b, in one run;
//! one table with the engine/Linux ratios. Numbers are reported, never asserted.

use clap::Args;

use super::error::AppsError;
use super::harness::Harness;
use super::servers::App;
use super::side::Side;
use super::table::Table;
use super::tools::iperf3::{self, Direction};
use super::tools::{redis_benchmark, wrk};
use super::workdir::SMALL_FILE;
use crate::lab_run;

/// The programs the bench measures, by name.
const BENCH_APPS: [App; 3] = [App::Redis, App::Nginx, App::Iperf3];
/// redis-benchmark has no duration option: requests per test per second asked for.
const REDIS_REQUESTS_PER_SECOND: u64 = 25_000;

/// `sluice bench apps`.
#[derive(Args, Debug)]
pub struct BenchAppsArgs {
    /// Seconds per measured run (wrk, each iperf3 direction; redis-benchmark sends
    /// 25,000 requests per second asked for, per test).
    #[arg(long, default_value_t = 5)]
    seconds: u32,
    /// The engine's device backend.
    #[arg(long, default_value = "af_packet", value_parser = ["af_packet", "tap", "af_xdp"])]
    backend: String,
    /// Extra arguments for `sluice engine` (repeat it: `--engine-arg=--app-idle-us
    /// --engine-arg=0`).
    #[arg(long = "engine-arg", allow_hyphen_values = true)]
    engine_args: Vec<String>,
    /// Run only these programs (comma-separated: redis, nginx, iperf3); all by default.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Leave the lab up afterwards.
    #[arg(long)]
    keep_lab: bool,
    /// The caller already holds the lab lock (tests holding a LabGuard).
    #[arg(long, hide = true)]
    no_lock: bool,
}

/// Runs `sluice bench apps` and prints the table.
pub fn run(args: &BenchAppsArgs) -> Result<(), AppsError> {
    let apps = selected(&args.only)?;
    let result = lab_run::in_lab(COMMAND, args.no_lock, args.keep_lab, |_| {
        measure_all(args, &apps)
    });
    let table = result?;
    print!("{}", table.render());
    let linux = table.failures(Side::Linux);
    if linux.is_empty() {
        Ok(())
    } else {
        let programs: Vec<&str> = linux.iter().flat_map(|(p, _)| p.iter().copied()).collect();
        Err(AppsError::client(
            "the Linux baseline",
            format!("failed for {} (reasons above)", programs.join(", ")),
        ))
    }
}

/// The programs `--only` names (all by default).
fn selected(only: &[String]) -> Result<Vec<App>, AppsError> {
    if only.is_empty() {
        return Ok(BENCH_APPS.to_vec());
    }
    only.iter()
        .map(|name| {
            BENCH_APPS
                .into_iter()
                .find(|a| a.name() == name.trim())
                .ok_or_else(|| {
                    AppsError::Usage(format!(
                        "--only: unknown program {name:?} (redis, nginx, iperf3)"
                    ))
                })
        })
        .collect()
}

/// The command, for progress lines.
const COMMAND: &str = "bench apps";

/// A progress line on stderr.
fn progress(msg: &str) {
    lab_run::progress(COMMAND, msg);
}

/// Every selected program on Linux, then on the engine.
fn measure_all(args: &BenchAppsArgs, apps: &[App]) -> Result<Table, AppsError> {
    let exe =
        std::env::current_exe().map_err(|e| AppsError::io("find the sluice executable", e))?;
    let h = Harness::new(exe, &args.backend)?.with_engine_args(&args.engine_args);
    let mut table = Table::default();
    table.setup = vec![
        format!(
            "sluice bench apps: {} s per run, {} shared CPU cores, clients in sluice-b",
            args.seconds,
            std::thread::available_parallelism().map_or(1, |n| n.get())
        ),
        "  linux:  each program in sluice-k (10.77.0.3) on Linux kernel TCP".into(),
        format!(
            "  engine: each program in sluice-a (10.77.0.1) through `sluice run`, on \
             `sluice engine --lab --backend {}{}`",
            args.backend,
            args.engine_args
                .iter()
                .fold(String::new(), |s, a| s + " " + a)
        ),
        format!(
            "  clients: redis-benchmark -c {} -t get,set ({} requests per test), \
             wrk -t2 -c50 --latency /{SMALL_FILE}, iperf3 -4 both ways",
            redis_benchmark::CLIENTS,
            redis_requests(args.seconds)
        ),
    ];
    for side in [Side::Linux, Side::Engine] {
        let mut engine_down: Option<String> = None;
        for &app in apps {
            if let Some(why) = &engine_down {
                table.fail_program(side, app.name(), why);
                continue;
            }
            progress(&format!("{} on {side}", app.name()));
            match measure(&h, app, side, args.seconds, &mut table) {
                Ok(()) => {}
                Err(e @ AppsError::Engine { .. }) => {
                    // The daemon itself is missing or broken: no program can run on it.
                    let why = e.to_string();
                    progress(&format!("engine unavailable: {why}"));
                    table.fail_program(side, app.name(), &why);
                    engine_down = Some(why);
                }
                Err(e) => {
                    let why = e.to_string();
                    progress(&format!("{} on {side} failed: {why}", app.name()));
                    table.fail_program(side, app.name(), &why);
                }
            }
        }
    }
    Ok(table)
}

fn redis_requests(seconds: u32) -> u64 {
    (u64::from(seconds) * REDIS_REQUESTS_PER_SECOND).max(1000)
}

/// Runs `app` on `side` with its benchmark client and records the metrics.
fn measure(
    h: &Harness,
    app: App,
    side: Side,
    seconds: u32,
    table: &mut Table,
) -> Result<(), AppsError> {
    let mut run = h.start(app, side)?;
    let addr = run.addr();
    let mut values: Vec<(&'static str, f64)> = Vec::new();
    let measured = match app {
        App::Redis => redis_benchmark::run(h, addr, redis_requests(seconds)).map(|r| {
            values.extend([
                ("GET ops/s", r.get.ops_per_sec),
                ("GET p99 ms", r.get.p99_ms),
                ("SET ops/s", r.set.ops_per_sec),
                ("SET p99 ms", r.set.p99_ms),
            ]);
        }),
        App::Nginx => wrk::run(h, addr, SMALL_FILE, seconds).and_then(|w| {
            if w.socket_errors > 0 || w.non_2xx_3xx > 0 {
                return Err(AppsError::client(
                    "wrk",
                    format!(
                        "{} socket errors, {} non-2xx/3xx answers",
                        w.socket_errors, w.non_2xx_3xx
                    ),
                ));
            }
            values.extend([("req/s", w.requests_per_sec), ("p99 ms", w.p99_ms)]);
            Ok(())
        }),
        App::Iperf3 => Direction::BOTH.into_iter().try_for_each(|dir| {
            let gbps = iperf3::run(h, addr, dir, seconds)?;
            values.push(match dir {
                Direction::ToServer => ("Gbit/s client->server", gbps),
                Direction::FromServer => ("Gbit/s server->client", gbps),
            });
            Ok(())
        }),
        other => Err(AppsError::Usage(format!(
            "{} has no benchmark",
            other.name()
        ))),
    };
    measured.map_err(|e| run.with_server_log(e))?;
    run.check_alive()?;
    run.stop()?;
    for (metric, v) in values {
        let name = if v > 0.0 && v.is_finite() {
            Ok(v)
        } else {
            Err(format!("measured {v}"))
        };
        table.set(side, app.name(), metric, name);
    }
    Ok(())
}
