//! Issue 14: the engine against Linux under 5 % random loss through `sluice switch` (needs
//! root: the tests are `#[ignore]`d, and scripts/test.sh runs them as root).
//!
//! 16 MiB each way, Linux client to the engine's sink and the engine's source to a Linux
//! server, byte-exact, each finished within a bound set from Linux-to-Linux's time for the
//! same transfer on the same switch in the same run: a liveness check (the stall of issue
//! 14 never finished), not a performance assertion.
//!
//! ```text
//!  engine sluice-a 10.77.0.1 ─┐                                    ┌ Linux sluice-c1 10.77.0.101
//!                             ├ br0 ── sw-up (5 %) ═══ sw-c1 (5 %) ┤
//!  Linux  sluice-k 10.77.0.3 ─┘
//! ```
//!
//! Every port loses 5 % of the frames it sends, so data and ACKs both cross a lossy egress.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use sluice_apps::{hex, pattern_fill};
use sluice_engine::apps::{SinkApp, SourceApp};
use sluice_engine::setup::{self, Backend, EngineOptions};
use sluice_engine::{App, AppStatus};
use sluice_lab::presets::LabPreset;
use sluice_lab::{client_ip, client_ns, LabGuard, ENGINE_IP, KERNEL_IP, NS_KERNEL};
use sluice_switch::{default_egress, PortReport, PortSpec, Runner};

const MIB: u64 = 1 << 20;
/// The bytes each transfer moves.
const BYTES: u64 = 16 * MIB;
/// The loss every port of the switch applies to what it sends.
const LOSS: f64 = 0.05;
/// The liveness bound: this many times Linux's time for the same transfer, plus `SLACK`.
const TIMES_LINUX: u32 = 30;
/// Headroom for the engine's start and the lab's scheduling on shared cores.
const SLACK: Duration = Duration::from_secs(10);

/// The switch on a thread of this test: every lab port, each losing `LOSS`.
struct Switch {
    stop: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<Vec<PortReport>>>,
}

impl Switch {
    fn start(lab: &LabGuard) -> Switch {
        let ports = lab.switch_ports().expect("the switched lab's ports");
        let defaults = default_egress();
        let specs: Vec<PortSpec> = ports
            .iter()
            .map(|p| PortSpec::parse(&format!("{p},loss={LOSS}"), &defaults).expect("port spec"))
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let handle = thread::spawn(move || {
            let mut runner = Runner::open(&specs, 14).expect("the switch opens its ports");
            ready_tx.send(()).expect("test waits for the switch");
            runner.run(&flag).expect("the switch runs");
            runner.report()
        });
        ready_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the switch is ready");
        Switch {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops the switch; returns the frames its ports lost.
    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let reports = self
            .handle
            .take()
            .expect("running")
            .join()
            .expect("switch thread");
        reports.iter().map(|r| r.stats.egress.link.lost).sum()
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A Python receiver listening on `ip:port` in `ns`: prints the bytes and their SHA-256.
fn python_receiver(ns: String, ip: String, port: u16) -> thread::JoinHandle<String> {
    let script = format!(
        "import socket,hashlib\n\
         l=socket.socket(); l.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
         l.bind(('{ip}',{port})); l.listen(1); l.settimeout(120)\n\
         c,_=l.accept(); c.settimeout(120); h=hashlib.sha256(); n=0\n\
         while True:\n    d=c.recv(1<<20)\n    if not d: break\n    h.update(d); n+=len(d)\n\
         c.close(); print(n, h.hexdigest())"
    );
    thread::spawn(move || {
        let out = sluice_lab::Lab::new()
            .exec(&ns, &["python3", "-c", &script])
            .expect("python3 runs");
        assert!(
            out.status.success(),
            "receiver in {ns}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    })
}

/// A Python sender in `ns`: sends `BYTES` of the deterministic stream `seed` (written the
/// way [`pattern_fill`] does, so the receiver's digest can be checked) to `ip:port` and
/// closes; the kernel delivers what is still buffered. The receiver's end says when the
/// transfer finished (not the peer's FIN, which is not what is measured here).
fn python_send(lab: &LabGuard, ns: &str, ip: &str, port: u16, data: &[u8]) {
    let path = format!("/tmp/sluice-interop-loss-{}.bin", std::process::id());
    std::fs::write(&path, data).expect("write the payload");
    let script = format!(
        "import socket\n\
         d=open('{path}','rb').read()\n\
         s=socket.create_connection(('{ip}',{port}),timeout=120)\n\
         s.sendall(d); s.shutdown(socket.SHUT_WR); s.close()"
    );
    let out = lab
        .exec(ns, &["python3", "-c", &script])
        .expect("python3 runs");
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "sender in {ns}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The payload of one transfer and its SHA-256.
fn payload(seed: u64) -> (Vec<u8>, String) {
    use sha2::{Digest, Sha256};
    let mut data = vec![0u8; BYTES as usize];
    pattern_fill(seed, 0, &mut data);
    let digest = hex(&Sha256::digest(&data));
    (data, digest)
}

/// Runs `app` on the engine in sluice-a on its own thread for at most `limit`.
fn spawn_engine<A: App + Send + 'static>(
    mut app: A,
    limit: Duration,
) -> thread::JoinHandle<(A, AppStatus)> {
    thread::spawn(move || {
        let mut engine =
            setup::open(&EngineOptions::lab(Backend::AfPacket)).expect("engine opens in sluice-a");
        let status = engine.run(&mut app, Some(limit)).expect("engine runs");
        (app, status)
    })
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn linux_and_engine_each_way_finish_16_mib_under_5_percent_loss() {
    sluice_lab::require_programs(&["python3"]);
    sluice_lab::require_lab();
    let lab = LabGuard::up_switched(1).expect("switched lab up");
    let switch = Switch::start(&lab);
    let client = client_ns(1);
    let client_addr = client_ip(1).to_string();
    let (data, digest) = payload(14);
    let expected = format!("{BYTES} {digest}");

    // Linux to Linux, both directions through the same lossy ports: the reference times.
    let started = Instant::now();
    let server = python_receiver(NS_KERNEL.into(), KERNEL_IP.to_string(), 7001);
    thread::sleep(Duration::from_millis(300));
    python_send(&lab, &client, &KERNEL_IP.to_string(), 7001, &data);
    assert_eq!(server.join().expect("receiver"), expected, "linux->linux");
    let linux_up = started.elapsed();
    let started = Instant::now();
    let server = python_receiver(client.clone(), client_addr.clone(), 7002);
    thread::sleep(Duration::from_millis(300));
    python_send(&lab, NS_KERNEL, &client_addr, 7002, &data);
    assert_eq!(
        server.join().expect("receiver"),
        expected,
        "linux->linux back"
    );
    let linux_down = started.elapsed();
    let bound = |linux: Duration| linux * TIMES_LINUX + SLACK;

    // The Linux client sends to the engine's sink (the stall's direction).
    let limit = bound(linux_up);
    let mut sink = SinkApp::new(5001);
    sink.stop_after = Some(1);
    sink.print = false;
    let started = Instant::now();
    let engine = spawn_engine(sink, limit);
    thread::sleep(Duration::from_millis(300));
    python_send(&lab, &client, &ENGINE_IP.to_string(), 5001, &data);
    let (sink, status) = engine.join().expect("engine thread");
    let took = started.elapsed();
    assert_eq!(
        status,
        AppStatus::Done,
        "linux->engine did not finish in {limit:?} (linux->linux took {linux_up:?})"
    );
    assert_eq!(sink.reports.len(), 1);
    assert_eq!(sink.reports[0].bytes, BYTES);
    assert_eq!(
        sink.reports[0].sha256.map(|d| hex(&d)),
        Some(digest.clone())
    );
    eprintln!("linux->engine {took:?}, linux->linux {linux_up:?}");

    // The engine's source sends to a Linux receiver.
    let limit = bound(linux_down);
    let server = python_receiver(client.clone(), client_addr.clone(), 6001);
    thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let mut source = SourceApp::new(client_ip(1), 6001, BYTES, 14);
    source.print = false;
    let (source, status) = spawn_engine(source, limit).join().expect("engine thread");
    let received = server.join().expect("receiver");
    let took = started.elapsed();
    assert_eq!(
        status,
        AppStatus::Done,
        "engine->linux did not finish in {limit:?} (linux->linux took {linux_down:?})"
    );
    assert_eq!(source.sha256().map(|d| hex(&d)), Some(digest));
    assert_eq!(received, expected, "engine->linux");
    assert!(
        took <= limit,
        "engine->linux took {took:?}, bound {limit:?}"
    );
    eprintln!("engine->linux {took:?}, linux->linux {linux_down:?}");

    let lost = switch.stop();
    assert!(lost > 0, "the switch lost frames");
    lab.teardown().expect("lab down");
}
