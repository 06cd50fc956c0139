//! The engine on 2 data-path cores (`MultiEngine`, flow groups; issue 20) against Linux
//! clients in sluice-b, over AF_PACKET and AF_XDP (needs root: the tests are `#[ignore]`d,
//! and scripts/test.sh runs them as root): 64 connections echoing byte-exact, and several
//! connections into a sink with every SHA-256 checked. Both flow groups must carry frames.

mod lab_support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use lab_support::{lab, linux, py_connect, PEER_TIMEOUT_S};
use sluice_apps::hex;
use sluice_engine::apps::{EchoApp, SinkApp};
use sluice_engine::multicore::{Layout, MultiEngine, MultiReport};
use sluice_engine::setup::{self, Backend, EngineOptions};
use sluice_engine::{App, AppStatus, EngineError};
use sluice_lab::presets::LabPreset;
use sluice_lab::ENGINE_IP;
use sluice_tcp::{Instant, Stack};

/// Longest a multi-core engine run may take before the test fails instead of hanging.
const LIMIT: Duration = Duration::from_secs(60);

/// Whether the machine has the 2 cores the layout needs (else the test says it skipped).
fn two_cores(test: &str) -> bool {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    if n < 2 {
        eprintln!("{test}: skipped: 2 data-path cores need a 2-core machine, this has {n}");
    }
    n >= 2
}

/// Runs the multi-core engine (2 flow groups) in sluice-a on its own thread until every
/// group's app is done (or [`LIMIT`]); returns the apps and the report.
fn start_multi<A: App + Send + 'static>(
    backend: Backend,
    factory: impl FnMut(u16) -> A + Send + 'static,
) -> thread::JoinHandle<(Vec<A>, MultiReport)> {
    thread::spawn(move || {
        let opts = EngineOptions::lab(backend);
        let (device, config) = setup::open_multi(&opts).expect("the device opens in sluice-a");
        let mut engine =
            MultiEngine::new(device, config, Layout::FlowGroups { groups: 2 }, factory)
                .expect("the multi-core engine builds");
        engine.linger = Duration::from_secs(2);
        eprint!("{}", engine.describe());
        let report = engine.run(Some(LIMIT)).expect("the multi-core engine runs");
        eprintln!("multi-core report: {report:?}");
        (engine.into_apps(), report)
    })
}

/// Checks what any multi-core run must show: both groups carried frames, nothing was
/// refused by a reorder buffer, every app finished.
fn check_report(report: &MultiReport) {
    assert!(report.apps_done, "every group's app finished: {report:?}");
    for (g, rx) in report.protocol_rx.iter().enumerate() {
        assert!(
            rx.frames > 0,
            "flow group {g} received no frame: {report:?}"
        );
        assert_eq!(rx.reorder_refused, 0, "group {g}: {report:?}");
    }
    assert_eq!(report.nic_tx.reorder_refused, 0, "{report:?}");
}

/// An echo server until the test sets `stop`.
struct EchoUntil {
    echo: EchoApp,
    stop: Arc<AtomicBool>,
}

impl App for EchoUntil {
    fn poll(&mut self, stack: &mut Stack, now: Instant) -> Result<AppStatus, EngineError> {
        if self.stop.load(Ordering::Relaxed) {
            return Ok(AppStatus::Done);
        }
        self.echo.poll(stack, now)
    }
}

/// A sink that ends once all groups' sinks together saw `want` connections close.
struct SinkCounted {
    sink: SinkApp,
    closed: Arc<AtomicUsize>,
    seen: usize,
    want: usize,
}

impl App for SinkCounted {
    fn poll(&mut self, stack: &mut Stack, now: Instant) -> Result<AppStatus, EngineError> {
        self.sink.poll(stack, now)?;
        let new = self.sink.reports.len() - self.seen;
        self.seen = self.sink.reports.len();
        let total = self.closed.fetch_add(new, Ordering::AcqRel) + new;
        Ok(if total >= self.want {
            AppStatus::Done
        } else {
            AppStatus::Running
        })
    }
}

/// 64 connections at once, each echoing 64 KiB of random bytes, compared.
fn echo_64_connections(backend: Backend) {
    if !two_cores("echo_64_connections") {
        return;
    }
    let lab = lab();
    let port = 7;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let engine = start_multi(backend, move |_| EchoUntil {
        echo: EchoApp::new(port),
        stop: flag.clone(),
    });
    let out = linux(
        &lab,
        &format!(
            "{connect}\
             import os,threading\n\
             N=64; M=64<<10\n\
             socks=[connect()]+[socket.create_connection(('{ENGINE_IP}',{port}),timeout={PEER_TIMEOUT_S}) for _ in range(N-1)]\n\
             data=[os.urandom(M) for _ in range(N)]\n\
             ok=[False]*N\n\
             def writer(i):\n\
             \x20   socks[i].sendall(data[i]); socks[i].shutdown(socket.SHUT_WR)\n\
             def reader(i):\n\
             \x20   b=bytearray()\n\
             \x20   while True:\n\
             \x20       x=socks[i].recv(1<<16)\n\
             \x20       if not x: break\n\
             \x20       b+=x\n\
             \x20   ok[i]= bytes(b)==data[i]\n\
             ts=[threading.Thread(target=f,args=(i,)) for i in range(N) for f in (writer,reader)]\n\
             [t.start() for t in ts]; [t.join() for t in ts]\n\
             print(sum(ok))",
            connect = py_connect(port),
        ),
    );
    stop.store(true, Ordering::Relaxed);
    let (_, report) = engine.join().expect("the engine thread");
    assert_eq!(out, "64", "every connection got its 64 KiB back byte-exact");
    check_report(&report);
    lab.teardown().expect("lab down");
}

/// 8 connections into the sink, 4 MiB of random bytes each: every SHA-256 matches.
fn sink_8_connections(backend: Backend) {
    if !two_cores("sink_8_connections") {
        return;
    }
    let lab = lab();
    let port = 5001;
    let n = 8;
    let closed = Arc::new(AtomicUsize::new(0));
    let shared = closed.clone();
    let engine = start_multi(backend, move |_| {
        let mut sink = SinkApp::new(port);
        sink.print = false;
        SinkCounted {
            sink,
            closed: shared.clone(),
            seen: 0,
            want: n,
        }
    });
    let out = linux(
        &lab,
        &format!(
            "{connect}\
             import hashlib,os,threading\n\
             N={n}; M=4<<20\n\
             socks=[connect()]+[socket.create_connection(('{ENGINE_IP}',{port}),timeout={PEER_TIMEOUT_S}) for _ in range(N-1)]\n\
             data=[os.urandom(M) for _ in range(N)]\n\
             def send(i):\n\
             \x20   socks[i].sendall(data[i]); socks[i].shutdown(socket.SHUT_WR)\n\
             \x20   assert socks[i].recv(1)==b''\n\
             \x20   socks[i].close()\n\
             ts=[threading.Thread(target=send,args=(i,)) for i in range(N)]\n\
             [t.start() for t in ts]; [t.join() for t in ts]\n\
             print(' '.join(sorted(hashlib.sha256(d).hexdigest() for d in data)))",
            connect = py_connect(port),
        ),
    );
    let (apps, report) = engine.join().expect("the engine thread");
    let mut got: Vec<String> = Vec::new();
    for app in &apps {
        for r in &app.sink.reports {
            assert_eq!(r.error, None, "{r:?}");
            assert_eq!(r.bytes, 4 << 20);
            got.push(r.sha256.map(|d| hex(&d)).unwrap_or_default());
        }
    }
    got.sort();
    assert_eq!(got.join(" "), out, "every stream's SHA-256 matches");
    check_report(&report);
    lab.teardown().expect("lab down");
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn two_cores_echo_64_connections_af_packet() {
    echo_64_connections(Backend::AfPacket);
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn two_cores_echo_64_connections_af_xdp() {
    echo_64_connections(Backend::AfXdp);
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn two_cores_sink_8_connections_sha256_af_packet() {
    sink_8_connections(Backend::AfPacket);
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn two_cores_sink_8_connections_sha256_af_xdp() {
    sink_8_connections(Backend::AfXdp);
}
