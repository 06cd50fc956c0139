//! `sluice engine --lab` end to end (needs root: the test is
//! `#[ignore]`d, and scripts/test.sh runs it as root): the real binary owns
//! sl-a in sluice-a, a test application attaches over the Unix socket from the root
//! namespace (written on sluice-shm, not libsluice), and Linux in sluice-b talks to it:
//! a Linux client through the application's listener, the application as a client of a
//! Linux server, an application that goes away (its peer sees a reset), and SIGTERM (the
//! application sees the hang-up, the socket file goes).

#[path = "../../service/tests/support/client.rs"]
mod client;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use client::Client;
use sha2::{Digest, Sha256};
use sluice_lab::{LabGuard, CLIENT_IP, ENGINE_IP, NS_CLIENT};
use sluice_shm::flags::CONNECTED;

/// The bytes both sides agree on: `(i * 7 + 3) mod 256`.
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + 3) as u8).collect()
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// A Linux client in sluice-b: connects, sends N pattern bytes, shuts down writing, reads
/// to the end, prints "BYTES SHA256". With "hold" it sends a little and waits for a reset.
const PY_CLIENT: &str = r#"
import hashlib, socket, sys
ip, port, n, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if mode == "hold":
    # The reset may come before the send, or even before connect returns (Linux reports a
    # reset that lands before the connecting process runs again as connect's error): the
    # application can go as soon as it accepted.
    try:
        s = socket.create_connection((ip, port), timeout=30)
        s.sendall(b"hello")
        b = s.recv(100)
        print("eof" if not b else "data")
    except (ConnectionResetError, BrokenPipeError):
        print("reset")
    sys.exit(0)
s = socket.create_connection((ip, port), timeout=30)
s.sendall(bytes((i * 7 + 3) & 0xff for i in range(n)))
s.shutdown(socket.SHUT_WR)
h, total = hashlib.sha256(), 0
while True:
    b = s.recv(65536)
    if not b:
        break
    h.update(b)
    total += len(b)
print(total, h.hexdigest())
"#;

/// A Linux server in sluice-b: prints "listening", accepts one connection, sends N pattern
/// bytes and closes.
const PY_SERVER: &str = r#"
import socket, sys
ip, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((ip, port))
l.listen(1)
print("listening", flush=True)
l.settimeout(30)
c, _ = l.accept()
c.sendall(bytes((i * 7 + 3) & 0xff for i in range(n)))
c.close()
"#;

/// Runs a Python script in sluice-b.
fn python_in_client_ns(script: &str, args: &[String]) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", NS_CLIENT, "python3", "-c", script]);
    cmd.args(args);
    cmd
}

/// The engine process (killed if the test fails before stopping it) and its stdout, kept
/// open so a later line cannot hit a closed pipe.
struct EngineProcess(
    Option<Child>,
    #[allow(dead_code)] BufReader<std::process::ChildStdout>,
);

impl Drop for EngineProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts `sluice engine --lab --backend BACKEND` and waits for its "ready" line.
fn start_engine(socket: &Path, backend: &str) -> EngineProcess {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["engine", "--lab", "--backend", backend])
        .args(["--idle-us", "2000", "--app-idle-us", "200"])
        .args(["--ring-size", "65536"])
        .args(["--max-sockets", "64", "--max-contexts", "4"])
        .arg("--socket")
        .arg(socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sluice engine starts");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).expect("a line from the engine");
    if !line.contains("ready") {
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        panic!(
            "the engine did not get ready: {line:?}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        line.contains(&format!("{ENGINE_IP}/24, {backend}")),
        "{line}"
    );
    EngineProcess(Some(child), stdout)
}

/// SIGTERM, then waits for a clean exit; returns what the engine printed on stderr.
fn stop_engine(engine: &mut EngineProcess) -> String {
    let mut child = engine.0.take().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "the engine did not stop on SIGTERM"
        );
        pause();
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "engine exit {status}:\n{err}");
    err
}

/// A socket path of the test's own.
fn socket_path(tag: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("sluice-engine-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    (dir.join("engine.sock"), dir)
}

/// Waits until the engine has gone to sleep (its flag in the application's region), so the
/// next command must reach it through the doorbell and the device wait.
fn until_engine_sleeps(app: &Client) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while app
        .region
        .engine_sleeping()
        .load(std::sync::atomic::Ordering::SeqCst)
        == 0
    {
        assert!(Instant::now() < deadline, "the idle engine never slept");
        pause();
    }
}

/// A Linux client echoes `n` bytes through a listener of `app` on `port`.
fn linux_echo_through(app: &mut Client, ctx: u32, port: u16, n: usize) {
    let mut pump = pause;
    let l = app.listen(ctx, port, &mut pump);
    let linux = python_in_client_ns(
        PY_CLIENT,
        &[
            ENGINE_IP.to_string(),
            port.to_string(),
            n.to_string(),
            "echo".into(),
        ],
    )
    .stdout(Stdio::piped())
    .spawn()
    .expect("python client");
    let rec = app.accept(ctx, l, &mut pump);
    assert_eq!(*rec.peer.ip(), CLIENT_IP);
    let got = app.read_to_fin(ctx, rec.slot, &mut pump);
    assert_eq!(got.len(), n);
    assert!(
        got == pattern(n),
        "the application read the Linux client's bytes"
    );
    app.write_all(ctx, rec.slot, &got, &mut pump);
    app.post(
        ctx,
        sluice_shm::Command::Close {
            slot: rec.slot,
            abort: false,
        },
    );
    app.post(
        ctx,
        sluice_shm::Command::Close {
            slot: l,
            abort: false,
        },
    );
    let out = linux.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(said, format!("{n} {}", hex(&Sha256::digest(pattern(n)))));
}

fn pause() {
    std::thread::sleep(Duration::from_micros(200));
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn sluice_engine_serves_an_attached_application_to_linux_in_the_lab() {
    let lab = LabGuard::require();
    let (socket, dir) = socket_path("af-packet");
    let mut engine = start_engine(&socket, "af_packet");

    let mut app = Client::attach(&socket, "lab-test");
    assert_eq!(app.engine.ip, ENGINE_IP);
    let ctx = app.context();
    let mut pump = pause;

    // A Linux client through the application's listener: 1 MiB up, echoed back. The engine
    // sleeps first: the Listen reaches it through the doorbell.
    let n = 1 << 20;
    until_engine_sleeps(&app);
    linux_echo_through(&mut app, ctx, 6100, n);

    // The application as a client of a Linux server in sluice-b.
    let mut server = python_in_client_ns(
        PY_SERVER,
        &[CLIENT_IP.to_string(), "6200".into(), n.to_string()],
    )
    .stdout(Stdio::piped())
    .spawn()
    .expect("python server");
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "listening");
    let (s, _local) = app.connect(ctx, CLIENT_IP, 6200, &mut pump);
    app.wait_flags(s, CONNECTED, &mut pump);
    let got = app.read_to_fin(ctx, s, &mut pump);
    assert!(
        got == pattern(n),
        "the application read the Linux server's {} bytes",
        got.len()
    );
    app.post(
        ctx,
        sluice_shm::Command::Close {
            slot: s,
            abort: false,
        },
    );
    assert!(server.wait().unwrap().success());

    // An application that goes away with a connection open: Linux sees a reset.
    let mut other = Client::attach(&socket, "leaver");
    let octx = other.context();
    let ol = other.listen(octx, 6300, &mut pump);
    let holder = python_in_client_ns(
        PY_CLIENT,
        &[
            ENGINE_IP.to_string(),
            "6300".into(),
            "0".into(),
            "hold".into(),
        ],
    )
    .stdout(Stdio::piped())
    .spawn()
    .expect("python client");
    let _ = other.accept(octx, ol, &mut pump);
    drop(other);
    let out = holder.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "reset");

    // SIGTERM: the engine stops cleanly, the application sees the hang-up.
    let err = stop_engine(&mut engine);
    // Counters by name (the report's column width follows its longest name).
    let count = |name: &str| {
        err.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(name))
                .then(|| w.next()?.parse::<u64>().ok())
                .flatten()
        })
    };
    assert_eq!(count("apps_attached"), Some(2), "{err}");
    assert_eq!(count("resets_on_detach"), Some(1), "{err}");
    assert!(app.engine_gone(), "the control socket hung up");
    assert!(!socket.exists(), "the socket file is removed");
    drop(app);
    let _ = std::fs::remove_dir_all(&dir);
    lab.teardown()
        .expect("the lab is torn down, no namespace left");
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn sluice_engine_sleeps_and_wakes_over_tap_and_af_xdp_too() {
    let lab = LabGuard::require();
    for backend in ["tap", "af_xdp"] {
        let (socket, dir) = socket_path(backend);
        let mut engine = start_engine(&socket, backend);
        let mut app = Client::attach(&socket, backend);
        let ctx = app.context();
        // Asleep on the device and the service's epoll together (Device::wait_also): the
        // doorbell wakes it for the Listen, the Linux client's SYN through the device.
        until_engine_sleeps(&app);
        linux_echo_through(&mut app, ctx, 6400, 256 << 10);
        let err = stop_engine(&mut engine);
        assert!(err.contains("sleeps"), "{err}");
        assert!(app.engine_gone(), "{backend}: the control socket hung up");
        assert!(!socket.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
    lab.teardown()
        .expect("the lab is torn down, no namespace left");
}
