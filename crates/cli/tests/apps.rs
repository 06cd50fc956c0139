//! Unmodified programs from Debian's packages served in the namespace lab and checked by
//! clients in sluice-b (issue 4): redis-server, memcached, nginx, iperf3, python3's
//! http.server and a python echo server; and iperf3 as a client on a side against a server
//! in sluice-b. Each test runs its check on every side in [`sides`]. Needs root (the tests
//! are `#[ignore]`d; scripts/test.sh runs them as root) and the programs (scripts/setup.sh
//! installs them). No timing assertion:
//! benchmarks here only have to complete (house rule 5).

use sluice_bench::apps::{checks, AppsError, Harness, Side};
use sluice_lab::LabGuard;

/// The sides every check runs on.
fn sides() -> Vec<Side> {
    // Linux first: it checks the harness and the clients, so an engine failure is the engine's.
    vec![Side::Linux, Side::Engine]
}

/// The engine backend for Side::Engine.
const BACKEND: &str = "af_packet";

/// `--cores N` for the engine of Side::Engine: `$SLUICE_TEST_ENGINE_CORES` (issue 20: the
/// same checks on the service's several data-path cores; scripts/test.sh sets it to 2 for a
/// second pass), none when unset.
fn engine_cores_args() -> Vec<String> {
    match std::env::var("SLUICE_TEST_ENGINE_CORES") {
        Ok(n) if !n.is_empty() => {
            let mut args = vec!["--cores".to_string(), n];
            // `$SLUICE_TEST_ENGINE_LAYOUT` (flow-groups, pipelined, ...): the layout too.
            if let Ok(l) = std::env::var("SLUICE_TEST_ENGINE_LAYOUT") {
                if !l.is_empty() {
                    args.extend(["--layout".to_string(), l]);
                }
            }
            args
        }
        _ => Vec::new(),
    }
}

/// Holds the lab, runs `check` on every side, tears the lab down.
fn on_every_side(name: &str, check: fn(&Harness, Side) -> Result<String, AppsError>) {
    let lab = LabGuard::require();
    let harness = Harness::new(env!("CARGO_BIN_EXE_sluice"), BACKEND)
        .expect("harness")
        .with_engine_args(&engine_cores_args());
    let mut failures = Vec::new();
    for side in sides() {
        match check(&harness, side) {
            Ok(summary) => eprintln!("{summary}"),
            Err(e) => failures.push(format!("{name} on {side}: {e}")),
        }
    }
    // Every program is stopped by now; the lab goes before the verdict.
    drop(harness);
    lab.teardown().expect("lab down and no namespace left");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn redis_stores_10k_values_and_redis_benchmark_completes() {
    on_every_side("redis", checks::redis);
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn memcached_stores_10k_values() {
    on_every_side("memcached", checks::memcached);
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn nginx_serves_10mb_file_and_wrk_runs() {
    on_every_side("nginx", checks::nginx);
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn iperf3_both_directions() {
    on_every_side("iperf3", checks::iperf3);
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn iperf3_client_on_the_engine_both_directions() {
    on_every_side("iperf3 client", checks::iperf3_client);
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn python_http_server_serves_10mb_file() {
    on_every_side("python http.server", checks::python_http);
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn python_echo_server_with_100_concurrent_clients() {
    on_every_side("python echo", checks::python_echo);
}
