//! `sluice ctl trace` against an engine in this process (the service over the in-memory
//! device pair, no lab, no root): `trace on state` before the engine's connection
//! completes, then `trace stream --count 1` prints its change to ESTABLISHED perf-script
//! style; `trace list` (table and JSON) shows it on with its hit; `stream --json` lines
//! parse; an unknown name is refused; `counters trace` shows the hits and the lost count.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use sluice_device::{pair, Device, PairConfig, PairEnd};
use sluice_engine::{pump, Engine, Transports};
use sluice_service::{Service, ServiceConfig};
use sluice_tcp::{Config, Instant, Stack};

const ENGINE_IP: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);

/// The engine thread with one connection of its core to the peer, and the peer.
struct Rig {
    socket: PathBuf,
    dir: PathBuf,
    stop: Arc<AtomicBool>,
    engine: Option<JoinHandle<()>>,
    peer: Stack,
    dev: PairEnd,
    start: std::time::Instant,
}

impl Rig {
    fn start(name: &str) -> Rig {
        let dir =
            std::env::temp_dir().join(format!("sluice-ctl-trace-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("engine.sock");
        let cfg = PairConfig::default();
        let (a, b) = pair(cfg).expect("device pair");
        let service = ServiceConfig::new(&socket, ENGINE_IP, 24);
        let mut service = Service::new(service).expect("service");
        let stop = service.stop_flag();
        let mut core = Config::new(cfg.macs[0], ENGINE_IP);
        core.max_connections = 64;
        let mut stack = Stack::new(core).expect("engine core");
        stack.add_neighbor(PEER_IP, cfg.macs[1]);
        // The engine's own connection (no application owns it: the listing says so).
        stack
            .connect(Instant::ZERO, PEER_IP, 9)
            .expect("engine connects");
        let mut peer_core = Config::new(cfg.macs[1], PEER_IP);
        peer_core.max_connections = 64;
        peer_core.seed = 0x9ee7;
        let mut peer = Stack::new(peer_core).expect("peer core");
        peer.add_neighbor(ENGINE_IP, cfg.macs[0]);
        peer.listen(9, 8).expect("peer listens");
        let engine = std::thread::spawn(move || {
            let mut engine = Engine::new(stack, a);
            engine.idle_before_sleep = Duration::from_millis(1);
            engine.run(&mut service, None).expect("engine runs");
        });
        Rig {
            socket,
            dir,
            stop,
            engine: Some(engine),
            peer,
            dev: b,
            start: std::time::Instant::now(),
        }
    }

    /// One round of the peer.
    fn pump(&mut self) {
        let now = Instant::from_nanos(self.start.elapsed().as_nanos() as u64);
        let mut none = Transports::none();
        while pump::receive_classified(&mut self.peer, &mut none, &mut self.dev, now).unwrap_or(0)
            > 0
        {}
        pump::run_due_timers(&mut self.peer, now);
        let _ = pump::transmit(&mut self.peer, &mut self.dev, now);
        let _ = self.dev.wait(Some(Duration::from_micros(200)));
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(e) = self.engine.take() {
            while !e.is_finished() {
                self.pump();
            }
            let _ = e.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `sluice ctl --socket SOCKET ARGS...`: (success, stdout, stderr).
fn ctl(socket: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("ctl")
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .expect("runs sluice");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn ctl_trace_turns_on_lists_and_streams_events() {
    let mut rig = Rig::start("trace");
    let (ok, out, err) = ctl(&rig.socket, &["trace", "list"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("NAME"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("state ") && l.contains(" off ")),
        "{out}"
    );
    let (ok, out, err) = ctl(&rig.socket, &["trace", "on", "state"]);
    assert!(ok && out.contains("tracepoint state: on"), "{out}{err}");
    // The engine's connection completes only now that the peer answers.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while rig.peer.connection_count() == 0 || !peer_established(&rig) {
        rig.pump();
        assert!(std::time::Instant::now() < deadline, "never established");
    }
    let (ok, out, err) = ctl(&rig.socket, &["trace", "stream", "--count", "1"]);
    assert!(ok, "{err}");
    let line = out.lines().next().unwrap_or_default();
    assert!(
        line.contains("tcp:state 10.9.0.1:")
            && line.contains(" > 10.9.0.2:9 from=SYN-SENT to=ESTABLISHED"),
        "{out}"
    );
    let (ok, out, err) = ctl(&rig.socket, &["trace", "list", "--json"]);
    assert!(ok, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(doc["schema"], 1);
    let state = doc["tracepoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "state")
        .cloned()
        .unwrap();
    assert_eq!(
        (state["on"].as_bool(), state["hits"].as_u64()),
        (Some(true), Some(1))
    );

    let (ok, _, err) = ctl(&rig.socket, &["trace", "on", "nonesuch"]);
    assert!(!ok && err.contains("EINVAL: no tracepoint"), "{err}");
    // The engine's stage times flow with no traffic: two JSON lines.
    let (ok, _, err) = ctl(&rig.socket, &["trace", "on", "stage_time"]);
    assert!(ok, "{err}");
    let (ok, out, err) = ctl(&rig.socket, &["trace", "stream", "--count", "2", "--json"]);
    assert!(ok, "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines.iter().all(|e| e["tracepoint"] == "stage_time"
            && e["fields"]["stage"].is_string()
            && e["fields"]["ns"].is_u64()),
        "{out}"
    );
    let (ok, _, err) = ctl(&rig.socket, &["trace", "off", "all"]);
    assert!(ok, "{err}");
    let (ok, out, err) = ctl(&rig.socket, &["counters", "--all", "trace."]);
    assert!(ok, "{err}");
    assert!(
        out.contains("trace.events_lost") && out.contains("trace.state_hits"),
        "{out}"
    );
}

fn peer_established(rig: &Rig) -> bool {
    let (ok, out, _) = ctl(&rig.socket, &["conns", "--json"]);
    ok && out.contains("ESTABLISHED")
}
