//! `sluice mtp recv|send|rpc` end to end without root: two engines (the service over each
//! end of the in-memory device pair) run in this process; the real binary attaches to them
//! over their control sockets, as it would to `sluice engine`.

use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use sluice_device::{pair, PairConfig};
use sluice_engine::Engine;
use sluice_service::{Service, ServiceConfig};
use sluice_shm::Layout;
use sluice_tcp::{Config, Stack};

const A_IP: Ipv4Addr = Ipv4Addr::new(10, 13, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 13, 0, 2);

struct TwoEngines {
    sockets: [PathBuf; 2],
    dir: PathBuf,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl TwoEngines {
    fn start() -> TwoEngines {
        let dir = std::env::temp_dir().join(format!("sluice-mtp-cli-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = PairConfig::default();
        let (a, b) = pair(cfg).expect("device pair");
        let sockets = [dir.join("a.sock"), dir.join("b.sock")];
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for (i, (end, ip, mac)) in [(a, A_IP, cfg.macs[0]), (b, B_IP, cfg.macs[1])]
            .into_iter()
            .enumerate()
        {
            let mut sc = ServiceConfig::new(&sockets[i], ip, 24);
            sc.layout = Layout {
                verbs_queues: 16,
                verbs_queue_entries: 256,
                ..Layout::default()
            };
            sc.engine.app_idle_us = 100;
            let mut service = Service::new(sc).expect("service starts");
            let flag = service.stop_flag();
            let stop = stop.clone();
            threads.push(std::thread::spawn(move || {
                let mut engine = Engine::new(Stack::new(Config::new(mac, ip)).unwrap(), end);
                engine.idle_before_sleep = Duration::from_millis(1);
                // Stops when the test's flag is set (the service's own flag follows it).
                let watcher = std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    flag.store(true, Ordering::Relaxed);
                });
                let _ = engine.run(&mut service, None);
                let _ = watcher.join();
            }));
        }
        TwoEngines {
            sockets,
            dir,
            stop,
            threads,
        }
    }
}

impl Drop for TwoEngines {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn sluice(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
    c.arg("mtp").args(args);
    c
}

#[test]
fn recv_echoes_what_send_and_rpc_send() {
    let e = TwoEngines::start();
    let (sock_a, sock_b) = (
        e.sockets[0].to_str().unwrap(),
        e.sockets[1].to_str().unwrap(),
    );
    let mut recv = sluice(&["recv", "--port", "9000", "--echo", "--count", "15"])
        .args(["--socket", sock_b])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(recv.stdout.take().unwrap()).lines();
    let first = lines.next().expect("recv said nothing").unwrap();
    assert_eq!(first, "sluice mtp: receiving on port 9000");
    let to = format!("{B_IP}:9000");
    let rpc = sluice(&["rpc", "--to", &to, "--size", "64", "--count", "10"])
        .args(["--socket", sock_a])
        .output()
        .unwrap();
    let rpc_out = String::from_utf8_lossy(&rpc.stdout);
    assert!(
        rpc.status.success(),
        "rpc: {rpc_out}{}",
        String::from_utf8_lossy(&rpc.stderr)
    );
    assert!(
        rpc_out.starts_with("sluice mtp: 10 round trips of 64 bytes: p50 "),
        "{rpc_out}"
    );
    assert!(rpc_out.contains(" p99 "), "{rpc_out}");
    let send = sluice(&["send", "--to", &to, "--size", "100000", "--count", "5"])
        .args(["--socket", sock_a])
        .output()
        .unwrap();
    let send_out = String::from_utf8_lossy(&send.stdout);
    assert!(
        send.status.success(),
        "send: {send_out}{}",
        String::from_utf8_lossy(&send.stderr)
    );
    assert!(
        send_out.starts_with("sluice mtp: 5 messages of 100000 bytes acknowledged"),
        "{send_out}"
    );
    assert!(recv.wait().unwrap().success());
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    // 10 requests of 8 + 64 bytes, 5 messages of 100000; then their digest.
    let bytes = 10 * 72 + 5 * 100_000;
    assert_eq!(rest.len(), 2, "{rest:?}");
    assert_eq!(rest[0], format!("sluice mtp: 15 messages, {bytes} bytes"));
    assert!(
        rest[1].starts_with(&format!(
            "sluice mtp: received digest messages=15 bytes={bytes} fnv="
        )),
        "{rest:?}"
    );
    // A destination without a port is refused by the command line.
    let bad = sluice(&["send", "--to", "10.13.0.2"]).output().unwrap();
    assert!(!bad.status.success());
}
