//! One check per program, on one side: start it, verify it with real clients in sluice-b,
//! stop it. The tests in crates/cli/tests/apps.rs are one call each.

use std::time::Duration;

use sluice_lab::NS_CLIENT;

use super::error::AppsError;
use super::harness::{Harness, Running};
use super::servers::App;
use super::side::Side;
use super::tools::iperf3::{self, Direction};
use super::tools::{curl, redis_benchmark, wrk};
use super::workdir::{BIG_FILE, BIG_FILE_BYTES, SMALL_FILE};

/// The seed of the key-value and echo checks.
const SEED: &str = "4";
/// How long an appcheck run may take.
const APPCHECK_LIMIT: Duration = Duration::from_secs(120);
/// Requests per redis-benchmark test in the check (a smoke run, not a measurement).
const REDIS_BENCH_REQUESTS: u64 = 20_000;
/// Seconds of wrk and of each iperf3 direction in the checks.
const CHECK_SECONDS: u32 = 1;
/// Seconds of each direction of iperf3 as a client (`-t 2`, as issue 4's check runs it).
const CLIENT_SECONDS: u32 = 2;

/// Runs `body` against `app` started on `side`, then stops it (failing if it died).
fn with_server(
    h: &Harness,
    app: App,
    side: Side,
    body: impl FnOnce(&Running) -> Result<String, AppsError>,
) -> Result<String, AppsError> {
    let run = h.start(app, side)?;
    let summary = body(&run).map_err(|e| run.with_server_log(e))?;
    run.stop()?;
    Ok(format!("{} on {side}: {summary}", app.name()))
}

/// `sluice appcheck ARGS --addr ADDR --seed SEED` in sluice-b.
fn appcheck(h: &Harness, run: &Running, args: &[&str]) -> Result<String, AppsError> {
    let addr = run.addr().to_string();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--addr", &addr, "--seed", SEED]);
    h.appcheck(&all, APPCHECK_LIMIT)
}

/// Fails unless `what` measured something.
fn nonzero(what: &str, v: f64) -> Result<(), AppsError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(AppsError::client(what, format!("measured {v}")))
    }
}

/// Fails unless a download is the big file, byte for byte.
fn expect_big_file(h: &Harness, got: &curl::Download) -> Result<String, AppsError> {
    let want = &h.content().big_sha256;
    if got.bytes != BIG_FILE_BYTES || got.sha256 != *want {
        return Err(AppsError::Mismatch(format!(
            "curl /{BIG_FILE}: {} bytes with SHA-256 {}, expected {BIG_FILE_BYTES} bytes with {want}",
            got.bytes, got.sha256
        )));
    }
    Ok(format!(
        "curl /{BIG_FILE}: {} bytes, SHA-256 {}",
        got.bytes, got.sha256
    ))
}

/// redis-server: 10,000 random values SET and read back by GET, then a short
/// redis-benchmark (GET and SET, 50 clients) that must report nonzero ops/s.
pub fn redis(h: &Harness, side: Side) -> Result<String, AppsError> {
    with_server(h, App::Redis, side, |run| {
        let check = appcheck(h, run, &["redis", "--count", "10000"])?;
        let b = redis_benchmark::run(h, run.addr(), REDIS_BENCH_REQUESTS)?;
        nonzero("redis-benchmark GET", b.get.ops_per_sec)?;
        nonzero("redis-benchmark SET", b.set.ops_per_sec)?;
        Ok(format!(
            "{check}; redis-benchmark: GET {:.0} ops/s, SET {:.0} ops/s",
            b.get.ops_per_sec, b.set.ops_per_sec
        ))
    })
}

/// memcached: 10,000 random values stored and read back.
pub fn memcached(h: &Harness, side: Side) -> Result<String, AppsError> {
    with_server(h, App::Memcached, side, |run| {
        appcheck(h, run, &["memcached", "--count", "10000"])
    })
}

/// nginx: curl downloads the 10 MB file with the right SHA-256; a short wrk completes
/// requests with no socket errors and only 2xx/3xx answers.
pub fn nginx(h: &Harness, side: Side) -> Result<String, AppsError> {
    with_server(h, App::Nginx, side, |run| {
        let file = expect_big_file(h, &curl::get(h, run.addr(), BIG_FILE)?)?;
        let w = wrk::run(h, run.addr(), SMALL_FILE, CHECK_SECONDS)?;
        if w.requests == 0 || w.socket_errors > 0 || w.non_2xx_3xx > 0 {
            return Err(AppsError::client(
                "wrk",
                format!(
                    "{} requests, {} socket errors, {} non-2xx/3xx answers",
                    w.requests, w.socket_errors, w.non_2xx_3xx
                ),
            ));
        }
        Ok(format!(
            "{file}; wrk /{SMALL_FILE}: {} requests, {:.0} req/s, no errors",
            w.requests, w.requests_per_sec
        ))
    })
}

/// iperf3: a run in each direction, each with a nonzero rate.
pub fn iperf3(h: &Harness, side: Side) -> Result<String, AppsError> {
    with_server(h, App::Iperf3, side, |run| {
        let mut parts = Vec::new();
        for dir in Direction::BOTH {
            let gbps = iperf3::run(h, run.addr(), dir, CHECK_SECONDS)?;
            nonzero(&format!("iperf3 {}", dir.name()), gbps)?;
            parts.push(format!("{} {gbps:.2} Gbit/s", dir.name()));
        }
        Ok(format!("iperf3: {}", parts.join(", ")))
    })
}

/// iperf3 as a client on `side` (over the engine on Side::Engine, from sluice-k on
/// Side::Linux) against an `iperf3 -s -4` server in sluice-b (10.77.0.2): a run in each
/// direction (the side sending, then receiving with -R), each with a nonzero rate and no
/// error in iperf3's JSON.
pub fn iperf3_client(h: &Harness, side: Side) -> Result<String, AppsError> {
    let mut peer = h.start_peer(App::Iperf3)?;
    let mut host = h.client_host(side)?;
    let mut parts = Vec::new();
    for dir in Direction::BOTH {
        let gbps = iperf3::run_on(&mut host, peer.addr(), dir, CLIENT_SECONDS)
            .and_then(|gbps| {
                nonzero(&format!("iperf3 -c {} {}", peer.addr(), dir.name()), gbps)?;
                Ok(gbps)
            })
            .map_err(|e| peer.with_server_log(e))?;
        parts.push(format!("{} {gbps:.2} Gbit/s", dir.name()));
    }
    peer.check_alive()?;
    host.stop()?;
    peer.stop()?;
    Ok(format!(
        "iperf3 client on {side} against the server in {NS_CLIENT}: {}",
        parts.join(", ")
    ))
}

/// python3 -m http.server: curl downloads the 10 MB file with the right SHA-256.
pub fn python_http(h: &Harness, side: Side) -> Result<String, AppsError> {
    with_server(h, App::PythonHttp, side, |run| {
        expect_big_file(h, &curl::get(h, run.addr(), BIG_FILE)?)
    })
}

/// The python echo server: 100 concurrent clients, each checking its echoed messages.
pub fn python_echo(h: &Harness, side: Side) -> Result<String, AppsError> {
    with_server(h, App::PythonEcho, side, |run| {
        appcheck(h, run, &["echo", "--clients", "100"])
    })
}
