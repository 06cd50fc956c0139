//! The scaling table's redis rows (issue 20): redis-server, unmodified, in sluice-a through
//! `sluice run` over `sluice engine --cores 1`, `--cores 2` (the service's default layout)
//! and `--cores 2 --layout flow-groups`, then on Linux in sluice-k; redis-benchmark with 50
//! clients in sluice-b, a fixed number of SET and then GET requests (one run per test, so
//! each has its own CPU window). CPU per request is the engine's, redis-server's and
//! redis-benchmark's (a reaped child: getrusage). Redis's own counters (`INFO`) must show
//! every request answered and no error reply, or the row fails.

use std::path::Path;

use nix::sys::resource::{getrusage, UsageWho};
use sluice_bench::apps::tools::redis_benchmark::{self, Test, CLIENTS};
use sluice_bench::apps::tools::redis_info::{self, RedisInfo};
use sluice_bench::apps::{App, AppsError, Harness, Running, Side};
use sluice_bench::cpu::CpuMeter;
use sluice_bench::{Latency, Measurement, Timing};
use sluice_engine::setup::Backend;

use super::echo::backend_name;
use super::rows::{Answered, Row, RowError, Server};

/// The redis rows' servers, in order (Linux last). The `--cores 2` row takes the service's
/// default layout (pipelined); flow groups are refused by a service that cannot run them,
/// and the row says so.
pub const REDIS: [Server; 4] = [
    Server::Engine {
        cores: 1,
        layout: None,
    },
    Server::Engine {
        cores: 2,
        layout: None,
    },
    Server::Engine {
        cores: 2,
        layout: Some("flow-groups"),
    },
    Server::Linux,
];

/// The tests in the order they run (SET first, so GET reads a key that exists), with
/// their table names.
pub const TESTS: [(&str, Test); 2] = [("redis-set", Test::Set), ("redis-get", Test::Get)];

/// redis-benchmark's value size (its default `-d 3`).
pub const VALUE_BYTES: usize = 3;

/// Requests per test: a few thousand with `--quick`, else 25,000 per measured second (as
/// `sluice bench apps`: redis-benchmark has no duration option).
pub fn requests(quick: bool, timing: Timing) -> u64 {
    if quick {
        2_000
    } else {
        ((timing.seconds * 25_000.0) as u64).max(1_000)
    }
}

/// Every redis row: each server started once, both tests run against it.
pub fn measure(exe: &Path, backend: Backend, requests: u64) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut harness = Harness::new(exe, backend_name(backend));
    for server in REDIS {
        eprintln!("sluice experiment parallelism: redis on {}", server.name());
        let results = match &mut harness {
            Ok(h) => server_rows(h, server, requests),
            Err(e) => vec![Err(RowError::Failed(e.to_string())); TESTS.len()],
        };
        for ((table, _), result) in TESTS.iter().zip(results) {
            let (result, answered) = match result {
                Ok((m, cpu, a)) => (Ok((m, cpu)), Some(a)),
                Err(e) => (Err(e), None),
            };
            rows.push(Row {
                table,
                server,
                conns: CLIENTS,
                bytes: VALUE_BYTES,
                result,
                answered,
            });
        }
    }
    rows
}

/// One test's measurement, CPU seconds and redis's count.
type TestResult = Result<(Measurement, f64, Answered), RowError>;

/// Starts redis-server on `server` and runs each test against it.
fn server_rows(h: &mut Harness, server: Server, requests: u64) -> Vec<TestResult> {
    let (side, flags) = match server {
        Server::Engine { cores, layout } => {
            let mut flags = vec!["--cores".to_string(), cores.to_string()];
            if let Some(l) = layout {
                flags.extend(["--layout".to_string(), l.to_string()]);
            }
            (Side::Engine, flags)
        }
        Server::Linux => (Side::Linux, Vec::new()),
    };
    h.set_engine_args(&flags);
    let mut run = match h.start(App::Redis, side) {
        Ok(run) => run,
        Err(e) => {
            let why =
                refusal(&e, &flags).map_or(RowError::Failed(e.to_string()), RowError::Refused);
            return vec![Err(why); TESTS.len()];
        }
    };
    let results: Vec<TestResult> = TESTS
        .iter()
        .map(|&(_, test)| one_test(h, &mut run, test, requests))
        .collect();
    if let Err(e) = run.stop() {
        // Both tests ran; a server or engine that died by the end fails them.
        let why = RowError::Failed(format!("at stop: {e}"));
        return vec![Err(why); TESTS.len()];
    }
    results
}

/// Runs one test against the running server, with its CPU and redis's counters.
fn one_test(h: &Harness, run: &mut Running, test: Test, requests: u64) -> TestResult {
    let failed = |e: AppsError| RowError::Failed(e.to_string());
    let addr = run.addr();
    let before = redis_info::read(h, addr).map_err(failed)?;
    let (server_pid, engine_pid) = run.pids();
    let pids: Vec<u32> = std::iter::once(server_pid).chain(engine_pid).collect();
    let meter = CpuMeter::start(&pids);
    let children = children_seconds();
    let r = redis_benchmark::run_test(h, addr, test, requests)
        .map_err(|e| failed(run.with_server_log(e)))?;
    let client_cpu = children_seconds() - children;
    let server_cpu = meter
        .stop()
        .engines
        .ok_or_else(|| RowError::Failed("the server or its engine exited".into()))?;
    run.check_alive().map_err(failed)?;
    let after = redis_info::read(h, addr).map_err(failed)?;
    let answered = answered(&before, &after, test, requests);
    if !answered.complete() {
        return Err(RowError::Failed(format!("redis counted {answered}")));
    }
    if r.ops_per_sec <= 0.0 {
        return Err(RowError::Failed(
            "redis-benchmark measured 0 requests/s".into(),
        ));
    }
    let m = Measurement {
        seconds: requests as f64 / r.ops_per_sec,
        ops: requests,
        latency: Some(Latency {
            p50_us: r.p50_ms * 1e3,
            p99_us: r.p99_ms * 1e3,
            // redis-benchmark's CSV stops at p99 (and max).
            p999_us: f64::NAN,
            p9999_us: f64::NAN,
        }),
        ..Measurement::default()
    };
    Ok((m, server_cpu + client_cpu, answered))
}

/// What changed in redis's counters over one test.
pub fn answered(before: &RedisInfo, after: &RedisInfo, test: Test, requests: u64) -> Answered {
    let delta = |a: u64, b: u64| b.saturating_sub(a);
    Answered {
        requests,
        calls: delta(before.calls_of(test.name()), after.calls_of(test.name())),
        errors: delta(before.error_replies, after.error_replies)
            + delta(before.failed_calls, after.failed_calls),
    }
}

/// The reason the engine gave if it refused the flags it was started with: it exited before
/// `ready` with a usage line (`sluice: ...`) naming one of `--cores` / `--layout`.
pub fn refusal(e: &AppsError, flags: &[String]) -> Option<String> {
    let AppsError::Engine { detail, log_tail } = e else {
        return None;
    };
    if !detail.starts_with("exited") {
        return None;
    }
    let named = |line: &str| {
        flags
            .iter()
            .filter(|f| f.starts_with("--"))
            .any(|f| line.contains(f.as_str()))
    };
    log_tail
        .lines()
        .rev()
        .filter_map(|l| l.trim().strip_prefix("sluice: "))
        .find(|l| named(l))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// User and system CPU seconds of this process's reaped children so far.
fn children_seconds() -> f64 {
    getrusage(UsageWho::RUSAGE_CHILDREN).map_or(f64::NAN, |u| {
        let s = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        s(u.user_time()) + s(u.system_time())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_usage_refusal_is_told_from_a_failure() {
        let flags: Vec<String> = ["--cores", "2", "--layout", "flow-groups"]
            .map(String::from)
            .to_vec();
        let refused = AppsError::Engine {
            detail: "exited (exit status: 1) before printing `ready`".into(),
            log_tail: "sluice: --cores 2 --layout flow-groups: the service runs in one flow \
                       group   (one queue); use --layout pipelined"
                .into(),
        };
        let why = refusal(&refused, &flags).unwrap();
        assert!(
            why.starts_with("--cores 2 --layout flow-groups: the service"),
            "{why}"
        );
        let crashed = AppsError::Engine {
            detail: "exited (signal: 11) before printing `ready`".into(),
            log_tail: "sluice: cannot open device sl-a".into(),
        };
        assert_eq!(refusal(&crashed, &flags), None, "not about its flags");
        let slow = AppsError::Engine {
            detail: "printed no `ready` line within 30s".into(),
            log_tail: "sluice: --layout flow-groups".into(),
        };
        assert_eq!(refusal(&slow, &flags), None, "it did not exit");
    }

    #[test]
    fn answered_counts_only_the_test_and_its_errors() {
        let info = |set: u64, get: u64, errors: u64| RedisInfo {
            calls: vec![("set".into(), set), ("get".into(), get)],
            failed_calls: 0,
            error_replies: errors,
        };
        let a = answered(&info(10, 5, 1), &info(2010, 5, 1), Test::Set, 2000);
        assert_eq!(
            a,
            Answered {
                requests: 2000,
                calls: 2000,
                errors: 0
            }
        );
        assert!(a.complete());
        let short = answered(&info(0, 0, 0), &info(0, 1999, 0), Test::Get, 2000);
        assert!(!short.complete(), "{short}");
        let errs = answered(&info(0, 0, 0), &info(0, 2000, 3), Test::Get, 2000);
        assert!(!errs.complete(), "{errs}");
        assert_eq!(errs.to_string(), "2000 requests, 2000 answered, 3 errors");
        let timing = Timing {
            seconds: 5.0,
            warmup: 1.0,
        };
        assert_eq!(requests(true, timing), 2_000);
        assert_eq!(requests(false, timing), 125_000);
    }
}
