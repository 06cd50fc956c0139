//! Signals end blocking calls on engine sockets (root, lab): servers run with
//! `sluice run --lab` over `sluice engine --lab`, block on engine sockets with no timeout,
//! and get signals while their wait spins (the engine's app_idle_us made longer than the
//! test) or sleeps (the default). As on Linux (signal(7)): epoll_wait, poll and select end
//! with EINTR for every handler, SA_RESTART or not; accept and read go on after an
//! SA_RESTART handler and end with EINTR after one without. A SIGTERM handler that sets a
//! flag must make the server exit within a second: a C server (epoll_wait, epoll_pwait,
//! poll, select, accept, read), a python one (epoll), and nginx (`master_process off`).
//!
//! The tests are `#[ignore]`d (scripts/test.sh runs them as root); when asked for, they fail
//! if the lab is unavailable (not root, no ip(8)) or a program a test needs is missing. The
//! preload library must have been built (`cargo test --workspace` and `cargo build` of the
//! workspace build it next to `sluice`).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sluice_lab::LabGuard;

mod common;

use common::{preload, ENGINE_IP, SLUICE};

/// Longer than any test: every wait of the program stays in its spin.
const SPIN_FOREVER_US: &str = "60000000";
/// How soon a signalled server must be gone.
const EXIT_WITHIN: Duration = Duration::from_secs(1);

/// Panics unless the lab and every one of `programs` are here: the tests are `#[ignore]`d,
/// and when asked for they run or fail.
fn require(programs: &[&str]) {
    sluice_lab::require_lab();
    sluice_lab::require_programs(programs);
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

    fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), sig).expect("kill");
    }

    /// Sends `sig` and requires the process to exit successfully within [`EXIT_WITHIN`].
    fn must_exit_on(&mut self, sig: Signal) {
        let sent = Instant::now();
        self.signal(sig);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                let took = sent.elapsed();
                // The reader threads may still be draining the last lines.
                std::thread::sleep(Duration::from_millis(100));
                assert!(
                    status.success(),
                    "{}: exit status {status} after {sig}; output:\n{}",
                    self.name,
                    self.output()
                );
                eprintln!("{}: exited {took:?} after {sig}", self.name);
                return;
            }
            assert!(
                sent.elapsed() < EXIT_WITHIN,
                "{}: still running {EXIT_WITHIN:?} after {sig}; output:\n{}",
                self.name,
                self.output()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// No line containing `needle` shows up for `quiet`, and the process is still running.
    fn stays_quiet(&mut self, needle: &str, quiet: Duration) {
        let deadline = Instant::now() + quiet;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            if let Ok(line) = self.rx.recv_timeout(left) {
                assert!(
                    !line.contains(needle),
                    "{}: unexpected {line:?}; output:\n{}",
                    self.name,
                    self.output()
                );
            }
        }
        assert!(
            self.child.try_wait().expect("try_wait").is_none(),
            "{}: exited; output:\n{}",
            self.name,
            self.output()
        );
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
    _lab: LabGuard,
}

impl Setup {
    /// `app_idle_us`: None for the engine's default (waits soon sleep).
    fn up(test: &str, app_idle_us: Option<&str>) -> Setup {
        let lab = LabGuard::up().expect("lab up");
        let dir =
            std::env::temp_dir().join(format!("sluice-signals-e2e-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let socket = dir.join("engine.sock");
        let mut cmd = Command::new(SLUICE);
        cmd.args(["engine", "--lab", "--socket"]).arg(&socket);
        if let Some(us) = app_idle_us {
            cmd.args(["--app-idle-us", us]);
        }
        let mut engine = Proc::spawn("sluice engine", &mut cmd);
        engine.wait_for("ready", Duration::from_secs(30));
        Setup {
            socket,
            dir,
            engine,
            _lab: lab,
        }
    }

    /// `sluice run --lab -- PROGRAM ARGS` in sluice-a (it execs: the pid is the program's).
    fn run(&self, name: &str, program: &[&str]) -> Proc {
        let mut cmd = Command::new(SLUICE);
        cmd.args(["run", "--lab", "--socket"])
            .arg(&self.socket)
            .arg("--preload")
            .arg(preload())
            .arg("--")
            .args(program);
        Proc::spawn(name, &mut cmd)
    }

    /// A Linux client in sluice-b that connects to the engine's `port` and holds the
    /// connection open for a minute.
    fn client(&self, port: u16) -> Proc {
        Proc::spawn(
            "linux client",
            Command::new("ip")
                .args(["netns", "exec", sluice_lab::NS_CLIENT, "python3", "-c"])
                .arg(format!(
                    "import socket, time\n\
                     s = socket.create_connection(('{ENGINE_IP}', {port}), timeout=10)\n\
                     print('connected', flush=True)\n\
                     time.sleep(60)\n"
                )),
        )
    }

    /// Waits until something accepts connections on the engine's `port` (from sluice-b).
    fn wait_for_port(&self, port: u16, server: &Proc) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = Command::new("ip")
                .args(["netns", "exec", sluice_lab::NS_CLIENT, "python3", "-c"])
                .arg(format!(
                    "import socket; socket.create_connection(('{ENGINE_IP}', {port}), timeout=1).close()"
                ))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "nothing accepts on {ENGINE_IP}:{port}; {}:\n{}\nengine:\n{}",
                server.name,
                server.output(),
                self.engine.output()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Compiles the C server.
    fn c_server(&self) -> String {
        let src = self.dir.join("sigserver.c");
        std::fs::write(&src, C_SERVER).expect("write C source");
        let bin = self.dir.join("sigserver");
        let st = Command::new("cc")
            .args(["-O2", "-Wall", "-o"])
            .arg(&bin)
            .arg(&src)
            .status()
            .expect("cc runs");
        assert!(st.success(), "sigserver.c does not compile");
        bin.to_str().expect("utf-8").to_string()
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A server blocked on engine sockets in one call (argv[2]): SIGTERM's handler sets a flag
/// (no SA_RESTART), SIGUSR1's counts (SA_RESTART). Every EINTR is printed.
const C_SERVER: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

static volatile sig_atomic_t term, usr1;
static void on_term(int s) { (void)s; term = 1; }
static void on_usr1(int s) { (void)s; usr1++; }
static const char *mode;

/* An EINTR: exit if SIGTERM's flag is set, else say so and go on. */
static void check(long r) {
    if (r >= 0) return;
    if (errno != EINTR) { printf("error %s: %s\n", mode, strerror(errno)); exit(2); }
    if (term) { printf("eintr %s usr1=%d\n", mode, (int)usr1); exit(0); }
    printf("eintr %s restartable usr1=%d\n", mode, (int)usr1);
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    mode = argv[2];
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sigaction a;
    memset(&a, 0, sizeof a);
    sigemptyset(&a.sa_mask);
    a.sa_handler = on_term;
    a.sa_flags = 0;
    sigaction(SIGTERM, &a, NULL);
    a.sa_handler = on_usr1;
    a.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &a, NULL);

    int l = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[1])) };
    if (bind(l, (struct sockaddr *)&sin, sizeof sin) || listen(l, 16)) { perror("listen"); return 2; }
    printf("listening %s\n", argv[1]);

    if (!strcmp(mode, "epoll") || !strcmp(mode, "epoll_pwait")) {
        int ep = epoll_create1(0);
        struct epoll_event ev = { .events = EPOLLIN, .data.fd = l };
        epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
        sigset_t none, blocked;
        sigemptyset(&none);
        sigemptyset(&blocked);
        sigaddset(&blocked, SIGTERM);
        sigaddset(&blocked, SIGUSR1);
        int pwait = !strcmp(mode, "epoll_pwait");
        /* pselect style: the signals are let in only during the wait. */
        if (pwait) sigprocmask(SIG_BLOCK, &blocked, NULL);
        for (;;) {
            struct epoll_event out[8];
            int n = pwait ? epoll_pwait(ep, out, 8, -1, &none) : epoll_wait(ep, out, 8, -1);
            check(n);
            for (int i = 0; i < n; i++) close(accept(l, NULL, NULL));
        }
    } else if (!strcmp(mode, "poll")) {
        for (;;) {
            struct pollfd p = { .fd = l, .events = POLLIN };
            int n = poll(&p, 1, -1);
            check(n);
            if (n > 0) close(accept(l, NULL, NULL));
        }
    } else if (!strcmp(mode, "select")) {
        for (;;) {
            fd_set r;
            FD_ZERO(&r);
            FD_SET(l, &r);
            int n = select(l + 1, &r, NULL, NULL, NULL);
            check(n);
            if (n > 0) close(accept(l, NULL, NULL));
        }
    } else if (!strcmp(mode, "accept")) {
        for (;;) {
            int c = accept(l, NULL, NULL);
            check(c);
            if (c >= 0) { printf("accepted usr1=%d\n", (int)usr1); close(c); }
        }
    } else if (!strcmp(mode, "connect")) {
        /* A blocking connect to an address of the lab's subnet nobody answers. */
        struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(9) };
        to.sin_addr.s_addr = htonl((10u << 24) | (77u << 16) | 99u);
        printf("connecting\n");
        for (;;) {
            int c = socket(AF_INET, SOCK_STREAM, 0);
            int r = connect(c, (struct sockaddr *)&to, sizeof to);
            check(r);
            if (r == 0) { printf("connected?\n"); return 2; }
            close(c);
        }
    } else if (!strcmp(mode, "read")) {
        int c = accept(l, NULL, NULL);
        if (c < 0) { perror("accept"); return 2; }
        printf("accepted\n");
        for (;;) {
            char buf[256];
            ssize_t n = read(c, buf, sizeof buf);
            check(n);
            if (n == 0) { printf("eof\n"); return 2; }
        }
    }
    return 2;
}
"#;

/// SIGUSR1 (SA_RESTART) then SIGTERM to a C server blocked in `mode`.
fn c_server_scenario(setup: &Setup, bin: &str, mode: &str, port: u16) {
    let p = port.to_string();
    let mut server = setup.run(mode, &[bin, &p, mode]);
    server.wait_for("listening", Duration::from_secs(30));
    let restartable = matches!(mode, "accept" | "read" | "connect");
    let _client = (mode == "read").then(|| {
        let c = setup.client(port);
        server.wait_for("accepted", Duration::from_secs(30));
        c
    });
    // Let the server get (back) into its wait.
    std::thread::sleep(Duration::from_millis(200));
    server.signal(Signal::SIGUSR1);
    if restartable {
        // SA_RESTART: the call goes on as if nothing happened.
        server.stays_quiet("eintr", Duration::from_millis(300));
        if mode == "accept" {
            // ... and still accepts.
            let _c = setup.client(port);
            server.wait_for("accepted usr1=1", Duration::from_secs(10));
        }
    } else {
        // epoll_wait, poll and select end with EINTR whatever the flags.
        server.wait_for(&format!("eintr {mode} restartable usr1=1"), EXIT_WITHIN);
    }
    std::thread::sleep(Duration::from_millis(200));
    server.must_exit_on(Signal::SIGTERM);
    let out = server.output();
    assert!(
        out.contains(&format!("eintr {mode} usr1=1")),
        "{mode}: the SIGTERM flag was not seen after EINTR:\n{out}"
    );
    assert!(
        !out.contains("sluice-preload: internal error"),
        "{mode}: the preload library failed:\n{out}"
    );
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn c_servers_blocked_on_engine_sockets_get_eintr_while_spinning() {
    require(&["cc", "python3"]);
    let setup = Setup::up("c-spin", Some(SPIN_FOREVER_US));
    let bin = setup.c_server();
    for (i, mode) in [
        "epoll",
        "epoll_pwait",
        "poll",
        "select",
        "accept",
        "read",
        "connect",
    ]
    .into_iter()
    .enumerate()
    {
        c_server_scenario(&setup, &bin, mode, 7301 + i as u16);
    }
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn c_servers_blocked_on_engine_sockets_get_eintr_while_sleeping() {
    require(&["cc", "python3"]);
    let setup = Setup::up("c-sleep", None);
    let bin = setup.c_server();
    for (i, mode) in ["epoll", "poll", "accept", "read", "connect"]
        .into_iter()
        .enumerate()
    {
        c_server_scenario(&setup, &bin, mode, 7311 + i as u16);
    }
}

const PYTHON_SERVER: &str = r#"
import select, signal, socket, sys
class Term(Exception):
    pass
terminated = False
def on_term(sig, frame):
    global terminated
    terminated = True
    raise Term()
signal.signal(signal.SIGTERM, on_term)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(8)
ep = select.epoll()
ep.register(s.fileno(), select.EPOLLIN)
print("listening", flush=True)
try:
    while True:
        for fd, ev in ep.poll():
            s.accept()[0].close()
except Term:
    print("terminated", terminated, flush=True)
"#;

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn a_python_epoll_server_exits_on_sigterm_while_spinning() {
    require(&["python3"]);
    let setup = Setup::up("python-spin", Some(SPIN_FOREVER_US));
    let mut server = setup.run(
        "python epoll server",
        &["python3", "-c", PYTHON_SERVER, "7321"],
    );
    server.wait_for("listening", Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(300));
    server.must_exit_on(Signal::SIGTERM);
    assert!(
        server.output().contains("terminated True"),
        "{}",
        server.output()
    );
}

/// nginx as the apps harness runs it (crates/bench/src/apps/servers.rs): one process.
fn nginx_scenario(test: &str, app_idle_us: Option<&str>) {
    let setup = Setup::up(test, app_idle_us);
    let root = setup.dir.join("html");
    std::fs::create_dir_all(&root).expect("html dir");
    std::fs::write(root.join("index.html"), "hello\n").expect("index.html");
    let dir = setup.dir.display();
    let conf = setup.dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "daemon off;\n\
             master_process off;\n\
             worker_processes 1;\n\
             error_log {dir}/error.log notice;\n\
             pid {dir}/nginx.pid;\n\
             events {{\n    worker_connections 1024;\n}}\n\
             http {{\n\
             \x20   access_log off;\n\
             \x20   sendfile on;\n\
             \x20   client_body_temp_path {dir}/client_body;\n\
             \x20   proxy_temp_path {dir}/proxy;\n\
             \x20   fastcgi_temp_path {dir}/fastcgi;\n\
             \x20   uwsgi_temp_path {dir}/uwsgi;\n\
             \x20   scgi_temp_path {dir}/scgi;\n\
             \x20   server {{\n\
             \x20       listen 0.0.0.0:8080;\n\
             \x20       root {};\n\
             \x20   }}\n\
             }}\n",
            root.display()
        ),
    )
    .expect("nginx.conf");
    let prefix = setup.dir.to_str().expect("utf-8").to_string();
    let error_log = setup.dir.join("error.log");
    let mut nginx = setup.run(
        "nginx",
        &[
            "nginx",
            "-p",
            &prefix,
            "-c",
            conf.to_str().expect("utf-8"),
            "-e",
            error_log.to_str().expect("utf-8"),
        ],
    );
    setup.wait_for_port(8080, &nginx);
    // Back in epoll_wait after the probes.
    std::thread::sleep(Duration::from_millis(300));
    nginx.must_exit_on(Signal::SIGTERM);
    let log = std::fs::read_to_string(&error_log).unwrap_or_default();
    assert!(
        log.contains("SIGTERM") && log.contains("exit"),
        "nginx's error.log:\n{log}"
    );
}

#[test]
#[ignore = "root: needs the namespace lab and nginx (scripts/test.sh runs it as root)"]
fn nginx_exits_on_sigterm_while_spinning() {
    require(&["nginx", "python3"]);
    nginx_scenario("nginx-spin", Some(SPIN_FOREVER_US));
}

#[test]
#[ignore = "root: needs the namespace lab and nginx (scripts/test.sh runs it as root)"]
fn nginx_exits_on_sigterm_while_sleeping() {
    require(&["nginx", "python3"]);
    nginx_scenario("nginx-sleep", None);
}
