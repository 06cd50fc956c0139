//! Unmodified programs over the engine through libsluice_preload.so (root, lab).
//!
//! Each test builds the lab (`LabGuard`, one user at a time), starts `sluice engine --lab`,
//! runs a server program with `sluice run --lab` in sluice-a, and checks byte-exact echoes
//! (SHA-256) from Linux clients in sluice-b: many concurrent clients, several-MB transfers,
//! over threads, epoll (level- and edge-triggered), poll, select, dup + fork, sendfile, and
//! a client program connecting out through the engine to a Linux server.
//!
//! Skipped, with the reason printed, when the lab is unavailable (not root, no ip(8)) or
//! python3 is missing. The preload library must have been built (`cargo test --workspace`
//! and `cargo build` of the workspace build it next to the `sluice` binary).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use sluice_lab::LabGuard;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");
const ENGINE_IP: &str = "10.77.0.1";
const LINUX_CLIENT_IP: &str = "10.77.0.2";

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/preload")
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Why these tests cannot run here, if they cannot.
fn skip_reason() -> Option<String> {
    if let Some(r) = sluice_lab::unavailable_reason() {
        return Some(r);
    }
    if !have("python3") {
        return Some("python3 is not installed".into());
    }
    None
}

/// libsluice_preload.so: next to the sluice binary (`cargo build` copies it there) or in
/// deps/ (where `cargo test` leaves it), the newer one.
fn preload() -> PathBuf {
    let dir = Path::new(SLUICE).parent().expect("the binary's directory");
    let found = [
        dir.join("libsluice_preload.so"),
        dir.join("deps/libsluice_preload.so"),
    ]
    .into_iter()
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max();
    if let Some((_, p)) = found {
        return p;
    }
    panic!(
        "libsluice_preload.so is not next to {SLUICE}: build it with `cargo build -p sluice-preload` \
         (with the same profile), or run the whole workspace's tests"
    );
}

/// A child process whose output lines are collected; killed when dropped.
struct Proc {
    name: String,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    rx: Receiver<String>,
}

impl Proc {
    fn spawn(name: &str, cmd: &mut Command) -> Proc {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: cannot start: {e}"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = channel();
        let out = child.stdout.take().expect("piped");
        let err = child.stderr.take().expect("piped");
        for stream in [
            Box::new(out) as Box<dyn std::io::Read + Send>,
            Box::new(err),
        ] {
            let lines = lines.clone();
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    lines.lock().expect("lines").push(line.clone());
                    let _ = tx.send(line);
                }
            });
        }
        Proc {
            name: name.to_string(),
            child,
            lines,
            rx,
        }
    }

    /// Waits for a line containing `needle`.
    fn wait_for(&mut self, needle: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left.max(Duration::from_millis(1))) {
                Ok(line) if line.contains(needle) => return,
                Ok(_) => {}
                Err(_) => {
                    let status = self.child.try_wait().ok().flatten();
                    panic!(
                        "{}: no line with {needle:?} within {within:?} (exit: {status:?}); output:\n{}",
                        self.name,
                        self.output()
                    );
                }
            }
        }
    }

    fn output(&self) -> String {
        self.lines.lock().expect("lines").join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The lab, an engine in it, and the socket to reach it.
struct Setup {
    socket: PathBuf,
    dir: PathBuf,
    // Dropped in this order: the engine before the lab goes down.
    engine: Proc,
    lab: LabGuard,
}

impl Setup {
    fn up(test: &str) -> Setup {
        let lab = LabGuard::up().expect("lab up");
        let dir =
            std::env::temp_dir().join(format!("sluice-preload-e2e-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let socket = dir.join("engine.sock");
        let mut engine = Proc::spawn(
            "sluice engine",
            Command::new(SLUICE)
                .args(["engine", "--lab", "--socket"])
                .arg(&socket),
        );
        engine.wait_for("ready", Duration::from_secs(30));
        Setup {
            socket,
            dir,
            engine,
            lab,
        }
    }

    /// `sluice run --lab -- PROGRAM ARGS` in sluice-a; waits for its "listening" line if asked.
    fn run(&self, name: &str, program: &[&str], listening: bool) -> Proc {
        let mut cmd = Command::new(SLUICE);
        cmd.args(["run", "--lab", "--socket"])
            .arg(&self.socket)
            .arg("--preload")
            .arg(preload())
            .arg("--")
            .args(program);
        let mut p = Proc::spawn(name, &mut cmd);
        if listening {
            p.wait_for("listening", Duration::from_secs(30));
        }
        p
    }

    /// A command in namespace `ns`, bounded by timeout(1).
    fn in_ns(&self, ns: &str, args: &[&str]) -> std::process::Output {
        let _ = &self.lab;
        Command::new("timeout")
            .args(["300", "ip", "netns", "exec", ns])
            .args(args)
            .output()
            .expect("ip netns exec runs")
    }

    /// The Linux clients in sluice-b: `clients` connections each echoing `bytes`.
    fn echo_clients(&self, server: &Proc, port: u16, clients: usize, bytes: usize) {
        let client = scripts().join("client.py");
        let out = self.in_ns(
            sluice_lab::NS_CLIENT,
            &[
                "python3",
                client.to_str().expect("utf-8"),
                ENGINE_IP,
                &port.to_string(),
                &clients.to_string(),
                &bytes.to_string(),
            ],
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(&format!("ok {clients} {bytes}")),
            "clients failed ({}):\n{stdout}\n{}\n--- server:\n{}\n--- engine:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            server.output(),
            self.engine.output()
        );
        assert_clean(server);
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The preload never hit an internal error in the program.
fn assert_clean(p: &Proc) {
    let out = p.output();
    assert!(
        !out.contains("sluice-preload: internal error"),
        "{}: the preload library failed:\n{out}",
        p.name
    );
}

fn python_server(setup: &Setup, script: &str, port: u16) -> Proc {
    let path = scripts().join(script);
    setup.run(
        script,
        &["python3", path.to_str().expect("utf-8"), &port.to_string()],
        true,
    )
}

macro_rules! skip_unless_lab {
    () => {
        if let Some(reason) = skip_reason() {
            eprintln!("skipped: {reason}");
            return;
        }
    };
}

#[test]
fn threaded_echo_server_with_many_clients_and_large_transfers() {
    skip_unless_lab!();
    let setup = Setup::up("threads");
    let server = python_server(&setup, "echo_threads.py", 7101);
    setup.echo_clients(&server, 7101, 100, 256 << 10);
    setup.echo_clients(&server, 7101, 4, 8 << 20);
}

#[test]
fn epoll_level_triggered_echo_server_with_a_kernel_fd_in_the_same_set() {
    skip_unless_lab!();
    let setup = Setup::up("selectors");
    let mut server = python_server(&setup, "echo_selectors.py", 7102);
    // One sleep covers the engine sockets and the kernel descriptor in the same set.
    server.wait_for("kernel fd ready", Duration::from_secs(10));
    setup.echo_clients(&server, 7102, 32, 2 << 20);
}

#[test]
fn poll_echo_server_with_a_kernel_fd_in_the_same_set() {
    skip_unless_lab!();
    let setup = Setup::up("poll");
    let mut server = python_server(&setup, "echo_poll.py", 7103);
    // One sleep covers the engine sockets and the kernel descriptor in the same set.
    server.wait_for("kernel fd ready", Duration::from_secs(10));
    setup.echo_clients(&server, 7103, 32, 1 << 20);
}

#[test]
fn non_blocking_select_echo_server() {
    skip_unless_lab!();
    let setup = Setup::up("select");
    let server = python_server(&setup, "echo_select.py", 7104);
    setup.echo_clients(&server, 7104, 16, 1 << 20);
}

#[test]
fn edge_triggered_epoll_c_server() {
    skip_unless_lab!();
    if !have("cc") {
        eprintln!("skipped: no C compiler");
        return;
    }
    let setup = Setup::up("epoll-et");
    let bin = setup.dir.join("echo_epoll_et");
    let st = Command::new("cc")
        .args(["-O2", "-Wall", "-o"])
        .arg(&bin)
        .arg(scripts().join("echo_epoll_et.c"))
        .status()
        .expect("cc runs");
    assert!(st.success(), "echo_epoll_et.c does not compile");
    let server = setup.run(
        "echo_epoll_et",
        &[bin.to_str().expect("utf-8"), "7105"],
        true,
    );
    setup.echo_clients(&server, 7105, 50, 4 << 20);
}

#[test]
fn dup_and_fork_child_close() {
    skip_unless_lab!();
    let setup = Setup::up("fork");
    let server = python_server(&setup, "echo_fork.py", 7106);
    setup.echo_clients(&server, 7106, 10, 1 << 20);
    let out = server.output();
    assert!(
        out.contains("child inherited-send=EBADF fresh-listen=ok"),
        "the fork child's view:\n{out}"
    );
}

#[test]
fn sendfile_serves_a_file_byte_exact() {
    skip_unless_lab!();
    let setup = Setup::up("sendfile");
    let body: Vec<u8> = (0..(6u32 << 20))
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    let file = setup.dir.join("blob");
    std::fs::write(&file, &body).expect("write blob");
    let digest = format!("{:x}", Sha256::digest(&body));
    let script = scripts().join("sendfile_server.py");
    let server = setup.run(
        "sendfile_server.py",
        &[
            "python3",
            script.to_str().expect("utf-8"),
            "7107",
            file.to_str().expect("utf-8"),
        ],
        true,
    );
    let client = scripts().join("client.py");
    let out = setup.in_ns(
        sluice_lab::NS_CLIENT,
        &[
            "python3",
            client.to_str().expect("utf-8"),
            ENGINE_IP,
            "7107",
            "3",
            "0",
            "fetch",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.trim(),
        format!("fetched {}:{digest}", body.len()),
        "stderr: {}\nserver:\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.output()
    );
    assert_clean(&server);
}

#[test]
fn a_client_program_connects_out_through_the_engine() {
    skip_unless_lab!();
    let setup = Setup::up("outbound");
    // A Linux echo server in sluice-b (plain python, no preload).
    let echo = scripts().join("echo_threads.py");
    let mut linux = Proc::spawn(
        "linux echo server",
        Command::new("ip")
            .args(["netns", "exec", sluice_lab::NS_CLIENT, "python3"])
            .arg(&echo)
            .arg("7108"),
    );
    linux.wait_for("listening", Duration::from_secs(30));
    let client = scripts().join("client.py");
    let mut run = setup.run(
        "client.py",
        &[
            "python3",
            client.to_str().expect("utf-8"),
            LINUX_CLIENT_IP,
            "7108",
            "20",
            "2000000",
        ],
        false,
    );
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(s) = run.child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the client did not finish:\n{}",
            run.output()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // The reader threads may still be draining the last lines.
    std::thread::sleep(Duration::from_millis(200));
    let out = run.output();
    assert!(
        status.success() && out.contains("ok 20 2000000"),
        "client over the engine failed ({status}):\n{out}"
    );
    assert_clean(&run);
}

#[test]
fn when_the_engine_dies_the_program_gets_clean_errors_not_hangs() {
    skip_unless_lab!();
    let mut setup = Setup::up("engine-death");
    let mut server = python_server(&setup, "engine_death.py", 7109);
    // A Linux client that connects, sends a little and stays connected.
    let _client = Proc::spawn(
        "linux client",
        Command::new("ip")
            .args(["netns", "exec", sluice_lab::NS_CLIENT, "python3", "-c"])
            .arg(
                "import socket, time\n\
             s = socket.create_connection(('10.77.0.1', 7109))\n\
             s.sendall(b'hello' * 100)\n\
             time.sleep(60)\n",
            ),
    );
    server.wait_for("accepted", Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(300));
    setup.engine.child.kill().expect("kill the engine");
    let _ = setup.engine.child.wait();
    server.wait_for("new socket", Duration::from_secs(30));
    let out = server.output();
    assert!(
        out.contains("recv ECONNRESET"),
        "the read after the engine died:\n{out}"
    );
    assert!(
        out.contains("send EPIPE"),
        "the write after the engine died:\n{out}"
    );
    assert!(
        out.contains("new socket ECONNREFUSED"),
        "a new engine socket:\n{out}"
    );
    assert_clean(&server);
}
