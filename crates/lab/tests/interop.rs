//! Linux kernel TCP against the engine through the lab (needs root: the tests are
//! `#[ignore]`d, and scripts/test.sh runs them as root):
//! 64 MiB each way verified by SHA-256, echo, and a closed port refusing.

use std::thread;
use std::time::Duration;

use sluice_apps::{hex, pattern_fill};
use sluice_engine::apps::{EchoApp, SinkApp, SourceApp};
use sluice_engine::setup::{self, Backend, EngineOptions};
use sluice_engine::{App, AppStatus};
use sluice_lab::presets::LabPreset;
use sluice_lab::{LabGuard, CLIENT_IP, ENGINE_IP, NS_CLIENT};

const MIB: u64 = 1 << 20;

/// Takes the lab (builds it, tears it down on drop); panics when it cannot run here.
fn lab() -> LabGuard {
    sluice_lab::require_programs(&["python3"]);
    LabGuard::require()
}

/// Runs `app` on the engine in sluice-a on its own thread for at most `limit`.
fn spawn_engine<A: App + Send + 'static>(
    backend: Backend,
    mut app: A,
    limit: Duration,
) -> thread::JoinHandle<(A, AppStatus)> {
    thread::spawn(move || {
        let mut engine =
            setup::open(&EngineOptions::lab(backend)).expect("engine opens in sluice-a");
        let status = engine.run(&mut app, Some(limit)).expect("engine runs");
        (app, status)
    })
}

/// Runs a Python snippet in the Linux client namespace; returns its stdout.
fn linux(lab: &LabGuard, script: &str) -> String {
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

/// SHA-256 of the first `bytes` of the deterministic stream `seed`.
fn expected_digest(bytes: u64, seed: u64) -> String {
    use sha2::{Digest, Sha256};
    let mut data = vec![0u8; bytes as usize];
    pattern_fill(seed, 0, &mut data);
    hex(&Sha256::digest(&data))
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn linux_client_to_engine_server_and_engine_client_to_linux_server() {
    let lab = lab();
    // Linux sends 64 MiB to the engine's sink.
    let mut sink = SinkApp::new(5001);
    sink.stop_after = Some(1);
    sink.print = false;
    let engine = spawn_engine(Backend::AfPacket, sink, Duration::from_secs(60));
    thread::sleep(Duration::from_millis(300));
    let sent = linux(
        &lab,
        &format!(
            "import socket,hashlib,os\n\
             d=os.urandom({n})\n\
             s=socket.create_connection(('{ip}',5001),timeout=20)\n\
             s.sendall(d); s.shutdown(socket.SHUT_WR); s.recv(1); s.close()\n\
             print(hashlib.sha256(d).hexdigest())",
            n = 64 * MIB,
            ip = ENGINE_IP
        ),
    );
    let (sink, status) = engine.join().expect("engine thread");
    assert_eq!(status, AppStatus::Done, "the sink saw its connection close");
    assert_eq!(sink.reports.len(), 1);
    assert_eq!(sink.reports[0].bytes, 64 * MIB);
    assert_eq!(sink.reports[0].sha256.map(|d| hex(&d)), Some(sent));

    // The engine sends 64 MiB to a Linux server.
    let server = {
        let lab_ns = NS_CLIENT.to_string();
        let script = format!(
            "import socket,hashlib\n\
             l=socket.socket(); l.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
             l.bind(('{ip}',6001)); l.listen(1); l.settimeout(20)\n\
             c,_=l.accept(); h=hashlib.sha256(); n=0\n\
             while True:\n    d=c.recv(1<<20)\n    if not d: break\n    h.update(d); n+=len(d)\n\
             print(n, h.hexdigest())",
            ip = CLIENT_IP
        );
        thread::spawn(move || {
            sluice_lab::Lab::new()
                .exec(&lab_ns, &["python3", "-c", &script])
                .expect("python3 runs")
        })
    };
    thread::sleep(Duration::from_millis(300));
    let mut source = SourceApp::new(CLIENT_IP, 6001, 64 * MIB, 9);
    source.print = false;
    let (source, status) = spawn_engine(Backend::AfPacket, source, Duration::from_secs(60))
        .join()
        .unwrap();
    assert_eq!(status, AppStatus::Done);
    let out = server.join().unwrap();
    let received = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let digest = expected_digest(64 * MIB, 9);
    assert_eq!(source.sha256().map(|d| hex(&d)), Some(digest.clone()));
    assert_eq!(received, format!("{} {digest}", 64 * MIB));
    lab.teardown().expect("lab down");
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn echo_for_many_linux_clients_and_refusal_on_a_closed_port() {
    let lab = lab();
    let mut echo = EchoApp::new(7);
    echo.stop_after = Some(21);
    let engine = spawn_engine(Backend::AfPacket, echo, Duration::from_secs(60));
    thread::sleep(Duration::from_millis(300));
    let out = linux(
        &lab,
        &format!(
            "import socket,os\n\
             ok=0\n\
             for i in range(20):\n\
             \x20   s=socket.create_connection(('{ip}',7),timeout=10)\n\
             \x20   d=os.urandom(100000+i)\n\
             \x20   s.sendall(d); s.shutdown(socket.SHUT_WR)\n\
             \x20   b=b''\n\
             \x20   while True:\n\
             \x20       x=s.recv(65536)\n\
             \x20       if not x: break\n\
             \x20       b+=x\n\
             \x20   ok+= b==d\n\
             \x20   s.close()\n\
             try:\n\
             \x20   socket.create_connection(('{ip}',9),timeout=5); print(ok,'connected')\n\
             except ConnectionRefusedError:\n\
             \x20   print(ok,'refused')\n\
             s=socket.create_connection(('{ip}',7),timeout=10); s.sendall(b'bye'); s.shutdown(socket.SHUT_WR); s.recv(3); s.close()",
            ip = ENGINE_IP
        ),
    );
    let (_, status) = engine.join().expect("engine thread");
    assert_eq!(
        out, "20 refused",
        "all echoes identical, and a SYN to a closed port got a RST"
    );
    assert_eq!(status, AppStatus::Done);
    lab.teardown().expect("lab down");
}
