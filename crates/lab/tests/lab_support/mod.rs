//! What the lab interop tests share: the engine on its own thread in sluice-a (optionally
//! impaired), Linux peers as Python snippets in sluice-b, and the two 64 MiB transfers
//! (Linux client → engine sink, engine source → Linux server) verified by SHA-256.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use sluice_apps::{hex, pattern_fill};
use sluice_device::DeviceStats;
use sluice_engine::apps::{SinkApp, SourceApp};
use sluice_engine::setup::{self, Backend, EngineOptions};
use sluice_engine::{App, AppStatus, EngineError};
use sluice_lab::presets::LabPreset;
use sluice_lab::{
    Lab, LabGuard, BRIDGE, CLIENT_IP, ENGINE_IP, ENGINE_PEER, KERNEL_PEER, NS_CLIENT,
};
use sluice_tcp::{Counters, Instant, Stack};

pub const MIB: u64 = 1 << 20;

/// Longest any one engine run may take: generous, so that a slow CI machine never flakes;
/// a hung case fails after this instead of hanging.
pub const ENGINE_LIMIT: Duration = Duration::from_secs(120);
/// Socket timeout of the Linux peers (each blocking call).
pub const PEER_TIMEOUT_S: u32 = 60;

/// Takes the lab (builds it, tears it down on drop); panics when it cannot run here.
pub fn lab() -> LabGuard {
    sluice_lab::require_programs(&["python3"]);
    LabGuard::require()
}

/// Engine-side fault injection for a case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Impair {
    pub loss: f64,
    pub reorder: f64,
}

/// No fault injection.
pub const NO_IMPAIR: Option<Impair> = None;

/// One setting of the Linux peer in sluice-b.
#[derive(Clone, Copy, Debug)]
pub enum Peer {
    /// A sysctl in sluice-b, e.g. `net.ipv4.tcp_sack = 0`.
    Sysctl(&'static str, &'static str),
    /// The MTU of br0 and its ports (the client side of the wire).
    Mtu(u32),
    /// TSO, GSO and GRO on or off on br0 and its ports.
    Offloads(bool),
}

/// sluice-b's bridge ports, then the bridge (ports first so the bridge never exceeds them).
const CLIENT_SIDE: [&str; 3] = [ENGINE_PEER, KERNEL_PEER, BRIDGE];

/// Applies a peer setting and checks it took.
pub fn apply(lab: &Lab, peer: Peer) {
    match peer {
        Peer::Sysctl(key, value) => {
            lab.sysctl(NS_CLIENT, key, value)
                .expect("sysctl in sluice-b");
            assert_eq!(lab.sysctl_get(NS_CLIENT, key).unwrap(), value);
        }
        Peer::Mtu(mtu) => {
            for iface in CLIENT_SIDE {
                lab.set_mtu(NS_CLIENT, iface, mtu).expect("set mtu");
            }
            let shown = lab
                .ip_in(NS_CLIENT, &["-o", "link", "show", "dev", BRIDGE])
                .unwrap();
            assert!(shown.contains(&format!("mtu {mtu} ")), "{shown}");
        }
        Peer::Offloads(on) => {
            for iface in CLIENT_SIDE {
                lab.ethtool_features(NS_CLIENT, iface, &[("tso", on), ("gso", on), ("gro", on)])
                    .expect("ethtool -K in sluice-b");
                let features = lab.ethtool_show(NS_CLIENT, iface).unwrap();
                for name in ["tcp-segmentation-offload", "generic-receive-offload"] {
                    let state = features.iter().find(|(n, _)| n == name).map(|f| f.1);
                    assert_eq!(state, Some(on), "{iface} {name}");
                }
            }
        }
    }
}

/// An app that reports once it has been polled (the inner app listens on its first poll),
/// and, for servers, stays up after the app is done until its last connection has left the
/// table: a FIN lost to fault injection is then retransmitted instead of leaving the peer
/// waiting for it.
struct Ready<A> {
    inner: A,
    ready: Option<mpsc::Sender<()>>,
    linger: bool,
    done_at: Option<Instant>,
}

impl<A: App> App for Ready<A> {
    fn poll(&mut self, stack: &mut Stack, now: Instant) -> Result<AppStatus, EngineError> {
        let status = match self.done_at {
            Some(_) => AppStatus::Done,
            None => self.inner.poll(stack, now)?,
        };
        if let Some(tx) = self.ready.take() {
            let _ = tx.send(());
        }
        if status == AppStatus::Done && self.linger {
            let since = *self.done_at.get_or_insert(now);
            let gone = stack.connection_count() == 0;
            if !gone && now.saturating_since(since) < Duration::from_secs(10) {
                return Ok(AppStatus::Running);
            }
        }
        Ok(status)
    }
}

/// The engine running an app on its own thread in sluice-a.
pub struct EngineRun<A> {
    handle: thread::JoinHandle<(A, AppStatus, DeviceStats, Counters)>,
}

/// Opens the engine in sluice-a (with fault injection if asked), runs `app` for at most
/// [`ENGINE_LIMIT`], and returns once the app has been polled (is listening).
pub fn start_engine<A: App + Send + 'static>(
    backend: Backend,
    impair: Option<Impair>,
    app: A,
    linger: bool,
) -> EngineRun<A> {
    start_engine_with(EngineOptions::lab(backend), impair, app, linger)
}

/// [`start_engine`] with the engine's options given in full (e.g. an XDP mode).
pub fn start_engine_with<A: App + Send + 'static>(
    opts: EngineOptions,
    impair: Option<Impair>,
    app: A,
    linger: bool,
) -> EngineRun<A> {
    start_engine_for(opts, impair, app, linger, ENGINE_LIMIT)
}

/// [`start_engine_with`] for at most `limit` instead of [`ENGINE_LIMIT`], for a run whose
/// length grows with what it is asked (tens of thousands of connections).
pub fn start_engine_for<A: App + Send + 'static>(
    opts: EngineOptions,
    impair: Option<Impair>,
    app: A,
    linger: bool,
    limit: Duration,
) -> EngineRun<A> {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let mut opts = opts;
        if let Some(i) = impair {
            opts = opts.impaired(0x1a_b5eed, i.loss, i.reorder);
        }
        let mut engine = setup::open(&opts).expect("engine opens in sluice-a");
        let mut app = Ready {
            inner: app,
            ready: Some(tx),
            linger,
            done_at: None,
        };
        let status = engine.run(&mut app, Some(limit)).expect("engine runs");
        eprintln!("engine counters: {:?}", engine.stack.counters());
        let counters = engine.stack.counters().clone();
        (app.inner, status, engine.device.stats(), counters)
    });
    // An engine that fails to open drops the sender; the join below reports why.
    if rx.recv_timeout(Duration::from_secs(30)).is_err() {
        match handle.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(_) => panic!("the engine stopped before it was polled"),
        }
    }
    EngineRun { handle }
}

impl<A> EngineRun<A> {
    /// Waits for the engine to stop; fails the test if its thread panicked.
    pub fn join(self) -> (A, AppStatus, DeviceStats, Counters) {
        match self.handle.join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

/// Runs a Python snippet in sluice-b to completion; returns its stdout (trimmed).
pub fn linux(lab: &Lab, script: &str) -> String {
    let out = lab
        .exec(NS_CLIENT, &["python3", "-c", script])
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "linux side failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A Python server started in sluice-b in the background; it prints `ready` once listening.
pub struct LinuxServer {
    child: Child,
    stdout: BufReader<std::process::ChildStdout>,
}

impl LinuxServer {
    /// Starts `script` and waits until it printed its `ready` line.
    pub fn start(script: &str) -> LinuxServer {
        let ip = sluice_lab::command::find(sluice_lab::command::IP).expect("ip(8)");
        let mut child = Command::new(ip)
            .args(["netns", "exec", NS_CLIENT, "python3", "-u", "-c", script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3 starts in sluice-b");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("server output");
        if line.trim() != "ready" {
            let _ = child.kill();
            let mut err = String::new();
            let _ = child.stderr.take().map(|mut e| e.read_to_string(&mut err));
            panic!("linux server did not start: {line:?} {err}");
        }
        LinuxServer { child, stdout }
    }

    /// Waits for the server to exit; returns the rest of its stdout (trimmed).
    pub fn finish(mut self) -> String {
        let mut rest = String::new();
        self.stdout
            .read_to_string(&mut rest)
            .expect("server output");
        let status = self.child.wait().expect("server exits");
        let mut err = String::new();
        let _ = self
            .child
            .stderr
            .take()
            .map(|mut e| e.read_to_string(&mut err));
        assert!(status.success(), "linux server failed: {err}");
        rest.trim().to_string()
    }
}

impl Drop for LinuxServer {
    fn drop(&mut self) {
        // Only if it is still running (a failed test): never leave it behind.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Python: connect to the engine, retrying only while nothing listens yet (a setup race:
/// a TAP bridge port still coming up), never after data moved.
pub fn py_connect(port: u16) -> String {
    format!(
        "import socket,time\n\
         def connect():\n\
         \x20   end=time.time()+20\n\
         \x20   while True:\n\
         \x20       try:\n\
         \x20           return socket.create_connection(('{ENGINE_IP}',{port}),timeout={PEER_TIMEOUT_S})\n\
         \x20       except (ConnectionRefusedError, socket.timeout):\n\
         \x20           if time.time()>end: raise\n\
         \x20           time.sleep(0.2)\n"
    )
}

/// SHA-256 of the first `bytes` of the deterministic stream `seed` (what [`SourceApp`] sends).
pub fn expected_digest(bytes: u64, seed: u64) -> String {
    use sha2::{Digest, Sha256};
    let mut data = vec![0u8; bytes as usize];
    pattern_fill(seed, 0, &mut data);
    hex(&Sha256::digest(&data))
}

/// Checks that fault injection, when asked for, really dropped or reordered frames.
fn check_impaired(impair: Option<Impair>, stats: &DeviceStats, what: &str) {
    eprintln!("{what}: {stats:?}");
    if let Some(i) = impair {
        if i.loss > 0.0 {
            assert!(
                stats.impaired_rx_dropped + stats.impaired_tx_dropped > 0,
                "{what}: no frame was dropped: {stats:?}"
            );
            // Each direction on its own only where it carried enough frames that dropping
            // none is improbable (< 1e-6): a receiver sends few ACKs (166 for 1,050 data
            // frames was seen), and 0.99^166 = 19 % of runs drop none of them.
            let surely = |frames: u64| (1.0 - i.loss).powf(frames as f64) < 1e-6;
            for (dir, frames, dropped) in [
                ("rx", stats.rx_frames, stats.impaired_rx_dropped),
                ("tx", stats.tx_frames, stats.impaired_tx_dropped),
            ] {
                assert!(
                    dropped > 0 || !surely(frames),
                    "{what}: no {dir} frame of {frames} was dropped: {stats:?}"
                );
            }
        }
        if i.reorder > 0.0 {
            assert!(
                stats.impaired_rx_reordered + stats.impaired_tx_reordered > 0,
                "{what}: no frame was reordered: {stats:?}"
            );
        }
    }
}

/// Linux client → engine sink: `bytes` of random data, digests compared.
pub fn linux_to_engine(lab: &Lab, opts: &EngineOptions, impair: Option<Impair>, bytes: u64) {
    let port = 5001;
    let mut sink = SinkApp::new(port);
    sink.stop_after = Some(1);
    sink.print = false;
    let engine = start_engine_with(opts.clone(), impair, sink, true);
    let sent = linux(
        lab,
        &format!(
            "{connect}\
             import hashlib,os\n\
             d=os.urandom({bytes})\n\
             s=connect()\n\
             s.sendall(d); s.shutdown(socket.SHUT_WR)\n\
             assert s.recv(1)==b''\n\
             s.close()\n\
             print(hashlib.sha256(d).hexdigest())",
            connect = py_connect(port),
        ),
    );
    let (sink, status, stats, _) = engine.join();
    check_impaired(impair, &stats, "linux → engine");
    assert_eq!(status, AppStatus::Done, "the sink saw its connection close");
    assert_eq!(sink.reports.len(), 1);
    let report = &sink.reports[0];
    assert_eq!(report.error, None);
    assert_eq!(report.bytes, bytes);
    assert_eq!(report.sha256.map(|d| hex(&d)), Some(sent));
}

/// Engine source → Linux server: `bytes` of the deterministic stream, digests compared.
pub fn engine_to_linux(lab: &Lab, opts: &EngineOptions, impair: Option<Impair>, bytes: u64) {
    let _ = lab;
    let port = 6001;
    let server = LinuxServer::start(&format!(
        "import socket,hashlib\n\
         l=socket.socket(); l.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
         l.bind(('{CLIENT_IP}',{port})); l.listen(1); l.settimeout({PEER_TIMEOUT_S})\n\
         print('ready')\n\
         c,_=l.accept(); c.settimeout({PEER_TIMEOUT_S}); h=hashlib.sha256(); n=0\n\
         while True:\n\
         \x20   d=c.recv(1<<20)\n\
         \x20   if not d: break\n\
         \x20   h.update(d); n+=len(d)\n\
         c.close()\n\
         print(n, h.hexdigest())"
    ));
    let seed = 9;
    let mut source = SourceApp::new(CLIENT_IP, port, bytes, seed);
    source.print = false;
    let (source, status, stats, counters) =
        start_engine_with(opts.clone(), impair, source, false).join();
    check_impaired(impair, &stats, "engine → linux");
    if impair.is_none() && matches!(opts.backend, Backend::AfPacket | Backend::Tap) {
        // These backends offload segmentation: the engine sends 64 KB segments.
        assert!(
            counters.large_segments_tx > 100,
            "engine → linux over {:?}: only {} large segments",
            opts.backend,
            counters.large_segments_tx
        );
    }
    assert_eq!(status, AppStatus::Done, "the source finished");
    let received = server.finish();
    let digest = expected_digest(bytes, seed);
    assert_eq!(source.sha256().map(|d| hex(&d)), Some(digest.clone()));
    assert_eq!(received, format!("{bytes} {digest}"));
}

/// One matrix case: the peer settings, then 64 MiB each way, over `backend`.
pub fn run_case(backend: Backend, impair: Option<Impair>, peer: &[Peer]) {
    run_case_with(EngineOptions::lab(backend), impair, peer);
}

/// [`run_case`] with the engine's options given in full (e.g. an XDP mode).
pub fn run_case_with(opts: EngineOptions, impair: Option<Impair>, peer: &[Peer]) {
    let lab = lab();
    for p in peer {
        apply(&lab, *p);
    }
    linux_to_engine(&lab, &opts, impair, 64 * MIB);
    engine_to_linux(&lab, &opts, impair, 64 * MIB);
    lab.teardown().expect("lab down");
}

/// This process's resident set in KiB.
pub fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}
