//! `sluice engine --lab`: the daemon that `sluice run` attaches programs to (Side::Engine).

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use super::error::AppsError;
use super::process::Supervised;

/// How long the engine gets to print `ready`.
pub const READY_LIMIT: Duration = Duration::from_secs(30);
/// How long the engine gets to exit after SIGTERM.
const ENGINE_GRACE: Duration = Duration::from_secs(5);

/// A running `sluice engine --lab --socket S`, stopped (SIGTERM, then SIGKILL) when dropped.
#[derive(Debug)]
pub struct EngineProcess {
    proc: Supervised,
    socket: PathBuf,
}

impl EngineProcess {
    /// Starts `sluice engine --lab --backend <backend> --socket <socket> <extra>` and waits until
    /// it prints a line containing `ready` (its output goes to `<log_stem>.out/.err`).
    pub fn start(
        sluice: &Path,
        backend: &str,
        extra: &[String],
        socket: &Path,
        log_stem: &Path,
    ) -> Result<EngineProcess, AppsError> {
        let mut cmd = Command::new(sluice);
        cmd.args(["engine", "--lab", "--backend", backend, "--socket"])
            .arg(socket)
            .args(extra);
        EngineProcess::start_command(cmd, socket, log_stem)
    }

    /// Starts an engine from a complete command line (e.g. `ip netns exec sluice-e sluice
    /// engine --iface sl-e ...`, the lab's second engine) serving `socket`, and waits until
    /// it prints `ready`.
    pub fn start_command(
        cmd: Command,
        socket: &Path,
        log_stem: &Path,
    ) -> Result<EngineProcess, AppsError> {
        let mut proc = Supervised::spawn(cmd, "sluice engine", log_stem, true)?;
        let out_path = log_stem.with_extension("out");
        let mut log = File::create(&out_path)
            .map_err(|e| AppsError::io(format!("create {}", out_path.display()), e))?;
        let stdout = proc.child_mut().stdout.take();
        let (tx, rx) = mpsc::channel();
        // Copies stdout to the log for as long as the engine runs, so its pipe never fills.
        thread::Builder::new()
            .name("engine-stdout".into())
            .spawn(move || {
                let Some(stdout) = stdout else { return };
                let mut told = false;
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let _ = writeln!(log, "{line}");
                    if !told && line.contains("ready") {
                        told = true;
                        let _ = tx.send(());
                    }
                }
            })
            .map_err(|e| AppsError::io("spawn the engine's output reader", e))?;
        let fail = |proc: &Supervised, detail: String| AppsError::Engine {
            detail,
            log_tail: proc.log_tail(),
        };
        let deadline = Instant::now() + READY_LIMIT;
        loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(()) => {
                    return Ok(EngineProcess {
                        proc,
                        socket: socket.to_path_buf(),
                    })
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // Its stdout closed without `ready`: it is exiting; give it a moment.
                    let status = wait_exit(&mut proc, Duration::from_secs(2));
                    let how =
                        status.map_or("closed its output".to_string(), |s| format!("exited ({s})"));
                    return Err(fail(&proc, format!("{how} before printing `ready`")));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Some(status) = proc.exited() {
                        return Err(fail(
                            &proc,
                            format!("exited ({status}) before printing `ready`"),
                        ));
                    }
                    if Instant::now() >= deadline {
                        return Err(fail(
                            &proc,
                            format!("printed no `ready` line within {READY_LIMIT:?}"),
                        ));
                    }
                }
            }
        }
    }

    /// The Unix socket applications attach through.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Its pid (`ip netns exec` execs the engine, so the same process).
    pub fn pid(&self) -> u32 {
        self.proc.id()
    }

    /// The end of its output.
    pub fn log_tail(&self) -> String {
        self.proc.log_tail()
    }

    /// Stops the engine (SIGTERM: it prints its counters) and returns its stderr log.
    pub fn stop_with_log(mut self) -> String {
        self.proc.stop(ENGINE_GRACE);
        self.proc.stderr_log()
    }

    /// Fails (with its log) if the engine has exited.
    pub fn check_alive(&mut self) -> Result<(), AppsError> {
        match self.proc.exited() {
            None => Ok(()),
            Some(status) => Err(AppsError::Engine {
                detail: format!("exited during the run ({status})"),
                log_tail: self.proc.log_tail(),
            }),
        }
    }
}

impl Drop for EngineProcess {
    fn drop(&mut self) {
        self.proc.stop(ENGINE_GRACE);
    }
}

/// Waits up to `limit` for `proc` to exit.
fn wait_exit(proc: &mut Supervised, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = proc.exited() {
            return Some(s);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(20));
    }
}
