//! `python3 -m http.server` over `sluice engine --lab` (root, lab; issue 23 item 5): a Linux
//! client in sluice-b fetches a ~100 KB file 500 times, one connection per fetch, from the
//! same server on Linux in sluice-k and then over the engine in sluice-a. Every fetch over
//! the engine completes within max(20 x Linux's p99, 500 ms) of this run: the issue saw
//! fetches stall 0.5-2.9 s after a fast connect and one time out after 5 s.
//!
//! The bound is derived from Linux's time in the same run (not a fixed figure) so that a
//! loaded machine widens it for both; it is a guard against stalls of the order of a
//! retransmission timeout (a lost request waits 0.2 + 0.4 s), not a measurement.
//! The test is `#[ignore]`d (scripts/test.sh runs it as root) and, when asked for, fails
//! if the lab is unavailable.

mod common;

use std::time::Duration;

use common::{scripts, Proc, Setup, ENGINE_IP};
use sluice_lab::NS_CLIENT;

/// Fetches of each server: enough that a stall of a few in a thousand shows.
const FETCHES: usize = 500;
/// The file served: about the size of the page, more than one window of segments.
const FILE_BYTES: usize = 100_000;
const PORT: u16 = 8000;
/// The Linux server's address in sluice-k.
const LINUX_SERVER_IP: &str = "10.77.0.3";

/// Per-fetch seconds from fetch_loop.py's `fetch I SECONDS` lines, checked to be all
/// `FETCHES` of them and to end with its `ok` line.
fn fetch_times(setup: &Setup, host: &str, server: &Proc) -> Vec<f64> {
    let script = scripts().join("fetch_loop.py");
    let out = setup.in_ns(
        NS_CLIENT,
        &[
            "python3",
            script.to_str().expect("utf-8"),
            host,
            &PORT.to_string(),
            "page.bin",
            &FETCHES.to_string(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let times: Vec<f64> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("fetch "))
        .filter_map(|l| l.split(' ').nth(1)?.parse().ok())
        .collect();
    assert!(
        out.status.success() && times.len() == FETCHES && stdout.contains("\nok "),
        "fetches from {host} failed ({}; {} of {FETCHES} done):\n{}\n--- server:\n{}\n--- engine:\n{}",
        out.status,
        times.len(),
        String::from_utf8_lossy(&out.stderr),
        server.output(),
        setup.engine.output()
    );
    times
}

/// The `q` quantile (0..=1) of `times`, nearest rank.
fn quantile(times: &[f64], q: f64) -> f64 {
    let mut s = times.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((s.len() as f64 * q).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn http_server_fetches_over_the_engine_never_stall() {
    common::require_lab(&[]);
    let setup = Setup::up("http-stalls");
    let page: Vec<u8> = (0..FILE_BYTES).map(|i| (i * 7 + i / 251) as u8).collect();
    std::fs::write(setup.dir.join("page.bin"), &page).expect("write the page");
    let dir = setup.dir.to_str().expect("utf-8").to_string();
    let serve = [
        "python3",
        "-u",
        "-m",
        "http.server",
        "--bind",
        "0.0.0.0",
        "--directory",
        &dir,
        "8000",
    ];
    let mut linux = setup.spawn_in_ns(sluice_lab::NS_KERNEL, "linux http.server", &serve);
    linux.wait_for("Serving HTTP", Duration::from_secs(30));
    let mut engine = setup.run("http.server", &serve, false);
    engine.wait_for("Serving HTTP", Duration::from_secs(30));

    let on_linux = fetch_times(&setup, LINUX_SERVER_IP, &linux);
    let over_engine = fetch_times(&setup, ENGINE_IP, &engine);
    let linux_p99 = quantile(&on_linux, 0.99);
    let bound = (20.0 * linux_p99).max(0.5);
    let (worst_at, worst) = over_engine
        .iter()
        .copied()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .expect("fetches");
    println!(
        "{FETCHES} fetches of {FILE_BYTES} B: Linux p50 {:.2} ms p99 {:.2} ms max {:.2} ms; \
         engine p50 {:.2} ms p99 {:.2} ms max {:.2} ms (fetch {worst_at}); bound {:.0} ms",
        quantile(&on_linux, 0.5) * 1e3,
        linux_p99 * 1e3,
        quantile(&on_linux, 1.0) * 1e3,
        quantile(&over_engine, 0.5) * 1e3,
        quantile(&over_engine, 0.99) * 1e3,
        worst * 1e3,
        bound * 1e3
    );
    let slow: Vec<(usize, f64)> = over_engine
        .iter()
        .copied()
        .enumerate()
        .filter(|&(_, t)| t > bound)
        .collect();
    assert!(
        slow.is_empty(),
        "fetches over the engine slower than {:.0} ms (max(20 x Linux p99 {:.2} ms, 500 ms)): \
         {slow:?}\n--- engine:\n{}",
        bound * 1e3,
        linux_p99 * 1e3,
        setup.engine.output()
    );
    common::assert_clean(&engine);
    drop(engine);
    drop(linux);
    setup.teardown();
}
