//! `sluice ctl` against an engine in this process (the service over the in-memory device
//! pair, no lab, no root): `conns --json` shows the engine's connection, `set-cc` named by
//! the 4-tuple changes it, `counters` lists the core's counters, and a socket nobody serves
//! is a clear error; `module load|list|unload` and `map set|get|dump|delete` on the shipped
//! firewall, a refused object's reason, and `sluice engine --module` refusing one at start;
//! `trace on state` before the engine's connection completes, then `trace stream --count 1`
//! prints its change to ESTABLISHED, `trace list` (table and JSON) shows its hit, `stream
//! --json` lines parse, an unknown name is refused, `counters trace` shows hits and lost.

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
        let dir = std::env::temp_dir().join(format!("sluice-ctl-{}-{name}", std::process::id()));
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
fn ctl_lists_sets_and_counts_on_a_running_engine() {
    let mut rig = Rig::start("conns");
    // The handshake completes once the peer answers.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        rig.pump();
        if rig.peer.connection_count() > 0 {
            let (ok, out, _) = ctl(&rig.socket, &["conns", "--json"]);
            if ok && out.contains("ESTABLISHED") {
                break;
            }
        }
        assert!(std::time::Instant::now() < deadline, "never established");
    }
    let (ok, out, err) = ctl(&rig.socket, &["conns", "--json"]);
    assert!(ok, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(doc["schema"], 1);
    let conns = doc["connections"].as_array().expect("connections");
    assert_eq!(conns.len(), 1, "{out}");
    let c = &conns[0];
    assert_eq!(c["state"], "ESTABLISHED");
    assert_eq!(c["remote"], "10.9.0.2:9");
    assert!(c["owner"].is_null(), "the core's own connection: {out}");
    assert!(c["mss"].as_u64().unwrap() > 0 && c["cwnd"].as_u64().unwrap() > 0);
    assert_ne!(c["cc"], "bbr");
    let tuple = format!("{}-{}", c["local"].as_str().unwrap(), "10.9.0.2:9");

    let (ok, out, err) = ctl(&rig.socket, &["set-cc", &tuple, "bbr"]);
    assert!(ok && out.contains("bbr"), "{out}{err}");
    let (ok, out, err) = ctl(&rig.socket, &["conns"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("State"), "{out}");
    assert!(lines[1].starts_with("ESTABLISHED") && lines[1].contains("10.9.0.2:9"));
    assert!(
        lines[2].contains("bbr") && lines[2].contains("cwnd:"),
        "{out}"
    );

    let (ok, _, err) = ctl(&rig.socket, &["set-cc", &tuple, "vegas"]);
    assert!(!ok && err.contains("EINVAL"), "{err}");
    let (ok, _, err) = ctl(&rig.socket, &["set-rate", "10.9.0.1:1-10.9.0.2:2", "1000"]);
    assert!(!ok && err.contains("no connection"), "{err}");

    let (ok, out, err) = ctl(&rig.socket, &["counters", "tcp.frames"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("tcp.frames_rx") && out.contains("tcp.frames_tx"),
        "{out}"
    );
    assert!(!out.contains("service."), "the pattern filters: {out}");
    let (ok, out, _) = ctl(&rig.socket, &["counters", "--json", "--all"]);
    assert!(ok);
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(doc["counters"]["tcp.malformed"], 0, "--all keeps zeros");
    assert!(doc["counters"]["service.admin_requests"].as_u64().unwrap() > 0);
}

#[test]
fn no_engine_is_a_clear_error() {
    let (ok, _, err) = ctl(Path::new("/nonexistent/sluice.sock"), &["conns"]);
    assert!(!ok);
    assert!(err.contains("/nonexistent/sluice.sock"), "{err}");
}

#[test]
fn ctl_loads_modules_and_reads_and_writes_their_maps() {
    let rig = Rig::start("modules");
    let (ok, out, err) = ctl(&rig.socket, &["module", "load", "ingress", "firewall"]);
    assert!(ok, "{err}");
    assert!(
        out.starts_with("module 0: firewall (xdp) at ingress"),
        "{out}"
    );
    let (ok, out, err) = ctl(&rig.socket, &["module", "list", "--json"]);
    assert!(ok, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(doc["schema"], 1);
    let m = &doc["modules"][0];
    assert_eq!(
        (m["id"].as_u64(), m["hook"].as_str()),
        (Some(0), Some("ingress"))
    );
    assert_eq!(m["maps"], serde_json::json!(["rules"]));
    assert!(m["insns"].as_u64().unwrap() > 10);
    // Compiled where the JIT is (x86-64 Linux), interpreted elsewhere.
    let jit = cfg!(all(target_arch = "x86_64", target_os = "linux"));
    assert_eq!(m["exec"].as_str(), Some(if jit { "jit" } else { "interp" }));
    let key = "0a 09 00 02 0a 09 00 01 9c 40 00 07 06 00 00 00";
    let (ok, _, err) = ctl(
        &rig.socket,
        &["map", "set", "0", "rules", key, "0000000000000000"],
    );
    assert!(ok, "{err}");
    let (ok, out, err) = ctl(
        &rig.socket,
        &["map", "get", "0", "rules", &key.replace(' ', "")],
    );
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "00 00 00 00 00 00 00 00");
    let (ok, out, err) = ctl(&rig.socket, &["map", "dump", "0", "rules", "--json"]);
    assert!(ok, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(doc["entries"][0]["key"], key, "{out}");
    let (ok, _, err) = ctl(&rig.socket, &["map", "set", "0", "rules", "0a 09", "00"]);
    assert!(!ok && err.contains("EINVAL"), "a short key: {err}");
    let (ok, _, err) = ctl(&rig.socket, &["map", "get", "0", "rules", "zz"]);
    assert!(!ok && err.contains("not hex"), "{err}");
    let (ok, _, err) = ctl(&rig.socket, &["map", "delete", "0", "rules", key]);
    assert!(ok, "{err}");
    let (ok, out, _) = ctl(&rig.socket, &["map", "dump", "0", "rules"]);
    assert!(ok && out.is_empty(), "{out}");

    let bad = rig.dir.join("oob_read.o");
    std::fs::write(&bad, sluice_ebpf::programs::bad::OOB_READ).unwrap();
    let (ok, _, err) = ctl(
        &rig.socket,
        &["module", "load", "ingress", bad.to_str().unwrap()],
    );
    assert!(!ok && err.contains("verifier: insn "), "{err}");
    let (ok, out, err) = ctl(
        &rig.socket,
        &["module", "load", "established", "port_counter"],
    );
    assert!(ok, "{err}");
    assert!(
        out.starts_with("module 1: port_counter (xdp) at established"),
        "{out}"
    );
    let (ok, out, err) = ctl(&rig.socket, &["module", "unload", "0"]);
    assert!(ok && out.contains("unloaded"), "{err}");
    let (ok, out, err) = ctl(&rig.socket, &["module", "unload", "1"]);
    assert!(ok && out.contains("unloaded"), "{err}");
    let (ok, out, _) = ctl(&rig.socket, &["module", "list"]);
    assert!(ok && out.lines().count() == 1, "only the header: {out}");
}

#[test]
fn engine_refuses_a_module_the_verifier_refuses_before_it_starts() {
    let dir = std::env::temp_dir().join(format!("sluice-engine-module-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.o");
    std::fs::write(&bad, sluice_ebpf::programs::bad::UNBOUNDED_LOOP).unwrap();
    let run = |module: &str| {
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["engine", "--socket"])
            .arg(dir.join("engine.sock"))
            .args(["--module", module])
            .output()
            .expect("runs sluice")
    };
    let out = run(&format!("ingress={}", bad.display()));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("verifier: insn "), "{err}");
    let out = run("nowhere=null");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no hook point"),
        "{err}"
    );
    let out = run("ingress=/nonexistent.o");
    assert!(!out.status.success());
    // established is a hook point: what fails is the file.
    let out = run("established=/nonexistent.o");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && !err.contains("no hook point"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ctl_loads_the_shipped_modules_by_name_and_sets_their_maps() {
    let rig = Rig::start("shipped");
    for (i, (hook, name)) in [
        ("egress", "vlan_insert"),
        ("ingress", "conn_counter"),
        ("egress", "classify"),
    ]
    .iter()
    .enumerate()
    {
        let (ok, out, err) = ctl(&rig.socket, &["module", "load", hook, name]);
        assert!(ok, "{name}: {err}");
        assert!(
            out.starts_with(&format!("module {i}: {name} (xdp) at {hook}")),
            "{out}"
        );
    }
    // VID 100, PCP 3: struct vlan_conf is a little-endian u16, a byte, a pad byte.
    let (ok, _, err) = ctl(
        &rig.socket,
        &["map", "set", "0", "vlan", "00000000", "64 00 03 00"],
    );
    assert!(ok, "{err}");
    let (ok, out, _) = ctl(&rig.socket, &["map", "get", "0", "vlan", "00000000"]);
    assert!(ok && out.trim() == "64 00 03 00", "{out}");
    // Class 2 at 10 Mbit/s.
    let (ok, _, err) = ctl(
        &rig.socket,
        &[
            "map",
            "set",
            "2",
            "class_rate",
            "02000000",
            "80 96 98 00 00 00 00 00",
        ],
    );
    assert!(ok, "{err}");
    let (ok, out, err) = ctl(&rig.socket, &["map", "dump", "2", "class_rate", "--json"]);
    assert!(ok, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(doc["entries"][0]["key"], "02 00 00 00", "{out}");
    let (ok, out, _) = ctl(&rig.socket, &["map", "dump", "1", "conns"]);
    assert!(ok, "{out}");
    let (ok, out, _) = ctl(&rig.socket, &["module", "list"]);
    assert!(
        ok && out.lines().count() == 4,
        "a header and three modules: {out}"
    );
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
