//! Shared by the lab tests that run programs over `sluice engine --lab` (preload.rs,
//! service_apps.rs): the lab and an engine in it ([`Setup`]), programs attached to it with
//! `sluice run --lab` or `$SLUICE_SOCKET`, Linux programs in the lab's namespaces, and
//! their output ([`Proc`]). Each test binary uses a part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_lab::LabGuard;

pub const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");
pub const ENGINE_IP: &str = "10.77.0.1";
pub const LINUX_CLIENT_IP: &str = "10.77.0.2";

/// `--cores N` for every engine these tests start: `$SLUICE_TEST_ENGINE_CORES` (issue 20:
/// the same tests on the service's several data-path cores), none when unset.
pub fn engine_cores_args() -> Vec<String> {
    match std::env::var("SLUICE_TEST_ENGINE_CORES") {
        Ok(n) if !n.is_empty() => {
            let mut args = vec!["--cores".to_string(), n];
            // `$SLUICE_TEST_ENGINE_LAYOUT` (flow-groups, pipelined, ...): the layout too.
            if let Ok(l) = std::env::var("SLUICE_TEST_ENGINE_LAYOUT") {
                if !l.is_empty() {
                    args.extend(["--layout".to_string(), l]);
                }
            }
            args
        }
        _ => Vec::new(),
    }
}

/// The scripts and programs the tests run (crates/cli/tests/preload/).
pub fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/preload")
}

pub fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Panics unless the lab, python3 and every one of `programs` are here: the tests are
/// `#[ignore]`d, and when asked for they run or fail, never pass without running.
pub fn require_lab(programs: &[&str]) {
    sluice_lab::require_lab();
    sluice_lab::require_programs(&["python3"]);
    sluice_lab::require_programs(programs);
}

/// libsluice_preload.so for the sluice binary under test, found by the rule `sluice run`
/// itself follows (`sluice_shm::preload_library`): next to it (`cargo build` copies it there)
/// or in deps/ (where `cargo test` leaves it), the newer one; any other build it falls back
/// to is named on stderr.
pub fn preload() -> PathBuf {
    sluice_shm::preload_library::locate(None, None, Path::new(SLUICE))
        .unwrap_or_else(|missing| panic!("{missing} (or run the whole workspace's tests)"))
        .announce("tests")
}

/// A child process whose output lines (stdout and stderr) are collected; killed when
/// dropped.
pub struct Proc {
    pub name: String,
    pub child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    rx: Receiver<String>,
}

impl Proc {
    pub fn spawn(name: &str, cmd: &mut Command) -> Proc {
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

    /// Waits for a line containing `needle` (among the lines not yet waited through) and
    /// returns it.
    pub fn wait_for(&mut self, needle: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left.max(Duration::from_millis(1))) {
                Ok(line) if line.contains(needle) => return line,
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

    /// Waits for the process to exit and for the rest of its output; panics (with the
    /// output) if it is still running after `within`.
    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "{}: still running after {within:?}; output:\n{}",
                self.name,
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        // The readers end at EOF, when every holder of the pipes is gone (bounded: a
        // child the program left behind may still hold them).
        let drained = Instant::now() + Duration::from_secs(2);
        loop {
            let left = drained.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(_) => {}
                Err(RecvTimeoutError::Disconnected | RecvTimeoutError::Timeout) => break,
            }
        }
        status
    }

    /// SIGTERM, then [`Proc::wait_exit`].
    pub fn terminate(&mut self, within: Duration) -> ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        self.wait_exit(within)
    }

    /// Everything it printed so far.
    pub fn output(&self) -> String {
        self.lines.lock().expect("lines").join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A scratch directory, removed when dropped.
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// Owns `dir` (already created), removing it when dropped.
    pub fn new(dir: PathBuf) -> ScratchDir {
        ScratchDir(dir)
    }
}

impl std::ops::Deref for ScratchDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The lab, an engine in it, and the socket to reach it.
pub struct Setup {
    pub socket: PathBuf,
    // Dropped in this order: the engine, its directory, then the lab.
    pub engine: Proc,
    pub dir: ScratchDir,
    pub lab: LabGuard,
}

impl Setup {
    pub fn up(test: &str) -> Setup {
        Self::up_with(test, &[])
    }

    /// As [`Setup::up`], with extra `sluice engine` flags.
    pub fn up_with(test: &str, engine_args: &[&str]) -> Setup {
        let lab = LabGuard::require();
        let dir = std::env::temp_dir().join(format!("sluice-e2e-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let socket = dir.join("engine.sock");
        let mut engine = Proc::spawn(
            "sluice engine",
            Command::new(SLUICE)
                .args(["engine", "--lab", "--socket"])
                .arg(&socket)
                .args(engine_cores_args())
                .args(engine_args),
        );
        engine.wait_for("ready", Duration::from_secs(30));
        Setup {
            socket,
            engine,
            dir: ScratchDir(dir),
            lab,
        }
    }

    /// Stops the engine (if still running), tears the lab down while still holding it, and
    /// checks that no namespace is left.
    pub fn teardown(self) {
        let Setup {
            engine, dir, lab, ..
        } = self;
        drop(engine);
        drop(dir);
        lab.teardown()
            .expect("the lab is torn down, no namespace left");
    }

    /// `sluice run --lab -- PROGRAM ARGS` in sluice-a; waits for its "listening" line if asked.
    pub fn run(&self, name: &str, program: &[&str], listening: bool) -> Proc {
        self.run_with(name, &[], program, listening)
    }

    /// [`Setup::run`] with more `sluice run` flags (`run_args`) before the program.
    pub fn run_with(
        &self,
        name: &str,
        run_args: &[&str],
        program: &[&str],
        listening: bool,
    ) -> Proc {
        let mut cmd = Command::new(SLUICE);
        cmd.args(["run", "--lab", "--socket"])
            .arg(&self.socket)
            .arg("--preload")
            .arg(preload())
            .args(run_args)
            .arg("--")
            .args(program);
        let mut p = Proc::spawn(name, &mut cmd);
        if listening {
            p.wait_for("listening", Duration::from_secs(30));
        }
        p
    }

    /// A Linux program in namespace `ns`, running in the background.
    pub fn spawn_in_ns(&self, ns: &str, name: &str, args: &[&str]) -> Proc {
        Proc::spawn(
            name,
            Command::new("ip").args(["netns", "exec", ns]).args(args),
        )
    }

    /// A command in namespace `ns`, bounded by timeout(1).
    pub fn in_ns(&self, ns: &str, args: &[&str]) -> std::process::Output {
        let _ = &self.lab;
        Command::new("timeout")
            .args(["300", "ip", "netns", "exec", ns])
            .args(args)
            .output()
            .expect("ip netns exec runs")
    }

    /// The Linux clients in sluice-b: `clients` connections each echoing `bytes` through
    /// `port` of the engine, checked byte for byte (SHA-256).
    pub fn echo_clients(&self, server: &Proc, port: u16, clients: usize, bytes: usize) {
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

    /// Stops the engine with SIGTERM (it must exit cleanly) and returns everything it
    /// printed, ending with its service counters.
    pub fn stop_engine(&mut self) -> String {
        let status = self.engine.terminate(Duration::from_secs(10));
        let out = self.engine.output();
        assert!(status.success(), "the engine exited with {status}:\n{out}");
        out
    }
}

/// The value of service counter `name` in the engine's output (`name   value` lines).
pub fn counter(engine_output: &str, name: &str) -> u64 {
    engine_output
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some(name)).then(|| words.next()?.parse().ok())?
        })
        .next_back()
        .unwrap_or_else(|| panic!("no counter {name} in the engine's output:\n{engine_output}"))
}

/// The preload never hit an internal error in the program.
pub fn assert_clean(p: &Proc) {
    let out = p.output();
    assert!(
        !out.contains("sluice-preload: internal error"),
        "{}: the preload library failed:\n{out}",
        p.name
    );
}

pub fn python_server(setup: &Setup, script: &str, port: u16) -> Proc {
    let path = scripts().join(script);
    setup.run(
        script,
        &["python3", path.to_str().expect("utf-8"), &port.to_string()],
        true,
    )
}
