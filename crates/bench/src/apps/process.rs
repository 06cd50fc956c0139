//! Child processes the harness owns: each in its own process group, output captured to
//! files, stopped with SIGTERM then SIGKILL (the whole group, so a launcher's children go
//! too), and bounded runs of client programs.

use std::fs::File;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::error::AppsError;
use super::program::Program;

/// How long a stopped process gets between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(3);
/// Lines of a log shown in an error.
const TAIL_LINES: usize = 15;

/// kill(1), which signals a process group without `unsafe` here.
const KILL: Program = Program {
    name: "kill",
    package: "procps",
};

/// A running child in its own process group, stopped (and reaped) when dropped.
#[derive(Debug)]
pub struct Supervised {
    child: Child,
    name: String,
    logs: Vec<PathBuf>,
    /// How it ended, once stopped: the group is not signalled again after that.
    stopped: Option<Option<ExitStatus>>,
}

impl Supervised {
    /// Spawns `cmd` as the leader of a new process group; stdin is closed, stderr goes to
    /// `<log_stem>.err`, stdout to `<log_stem>.out` unless `pipe_stdout` (then the caller
    /// reads it from [`Supervised::child_mut`]).
    pub fn spawn(
        mut cmd: Command,
        name: &str,
        log_stem: &Path,
        pipe_stdout: bool,
    ) -> Result<Supervised, AppsError> {
        let out_path = log_stem.with_extension("out");
        let err_path = log_stem.with_extension("err");
        let create = |p: &Path| {
            File::create(p).map_err(|e| AppsError::io(format!("create {}", p.display()), e))
        };
        let stdout = if pipe_stdout {
            Stdio::piped()
        } else {
            Stdio::from(create(&out_path)?)
        };
        cmd.stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::from(create(&err_path)?))
            .process_group(0);
        let child = cmd
            .spawn()
            .map_err(|e| AppsError::io(format!("start {name} ({cmd:?})"), e))?;
        Ok(Supervised {
            child,
            name: name.to_string(),
            logs: vec![out_path, err_path],
            stopped: None,
        })
    }

    /// The child (to take a piped stdout).
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// The child's pid (also its process group id).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The end of its stdout and stderr logs.
    pub fn log_tail(&self) -> String {
        self.logs
            .iter()
            .map(|p| tail_of(p, TAIL_LINES))
            .filter(|t| !t.trim().is_empty())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The whole of its stdout log (empty when stdout was piped to the caller).
    pub fn stdout_log(&self) -> String {
        self.logs
            .first()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }

    /// The whole of its stderr log (what a stopped engine printed last: its counters).
    pub fn stderr_log(&self) -> String {
        self.logs
            .last()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }

    /// Stops the process group (SIGTERM, then SIGKILL after `grace`) and reaps the leader;
    /// returns how it ended.
    pub fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        if let Some(status) = self.stopped {
            return status;
        }
        let status = self.stop_group(grace);
        self.stopped = Some(status);
        status
    }

    fn stop_group(&mut self, grace: Duration) -> Option<ExitStatus> {
        if let Some(status) = self.exited() {
            // The leader is gone; anything it left in its group goes now.
            signal_group(&mut self.child, "KILL");
            return Some(status);
        }
        signal_group(&mut self.child, "TERM");
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Some(status) = self.exited() {
                signal_group(&mut self.child, "KILL");
                return Some(status);
            }
            thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "sluice apps: {} (pid {}) ignored SIGTERM for {grace:?}; killing it",
            self.name,
            self.child.id()
        );
        signal_group(&mut self.child, "KILL");
        self.child.wait().ok()
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop(STOP_GRACE);
    }
}

/// Sends SIG`sig` to the child's process group; falls back to SIGKILL of the child alone
/// when kill(1) is missing.
fn signal_group(child: &mut Child, sig: &str) {
    let group = format!("-{}", child.id());
    let sent = super::program::find(KILL).ok().is_some_and(|kill| {
        Command::new(kill)
            .args(["-s", sig, "--", &group])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if !sent && sig == "KILL" {
        let _ = child.kill();
    }
}

/// The last `n` lines of the file at `path` ("" if unreadable).
pub fn tail_of(path: &Path, n: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    tail_lines(&text, n)
}

/// The last `n` lines of `text`.
pub fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Runs `cmd` to completion with its output captured, killing its process group after
/// `limit`; `what` names the run in errors. A nonzero exit is an error carrying its output.
pub fn run_bounded(cmd: Command, what: &str, limit: Duration) -> Result<Output, AppsError> {
    let out = run_captured(cmd, what, limit)?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(AppsError::client(
            what,
            format!("{}; output:\n{}", out.status, output_tail(&out)),
        ))
    }
}

/// The end of a run's stdout and stderr.
pub fn output_tail(out: &Output) -> String {
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    tail_lines(text.trim(), TAIL_LINES)
}

/// Like [`run_bounded`], but any exit status is returned to the caller (only a run that
/// could not start or overran `limit` is an error).
pub fn run_captured(mut cmd: Command, what: &str, limit: Duration) -> Result<Output, AppsError> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd
        .spawn()
        .map_err(|e| AppsError::io(format!("start {what}"), e))?;
    let readers = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ]
    .map(|r| {
        thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            _ => {
                signal_group(&mut child, "KILL");
                let _ = child.wait();
                break None;
            }
        }
    };
    // Also reaps stragglers in the group that still hold the pipes open.
    signal_group(&mut child, "KILL");
    let [stdout, stderr] = readers.map(|h| h.join().unwrap_or_default());
    match status {
        Some(status) => Ok(Output {
            status,
            stdout,
            stderr,
        }),
        None => {
            let text = format!(
                "{}\n{}",
                String::from_utf8_lossy(&stdout),
                String::from_utf8_lossy(&stderr)
            );
            Err(AppsError::client(
                what,
                format!(
                    "did not finish within {limit:?}; output:\n{}",
                    tail_lines(text.trim(), TAIL_LINES)
                ),
            ))
        }
    }
}
