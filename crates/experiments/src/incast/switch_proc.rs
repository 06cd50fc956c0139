//! `sluice switch --lab` as a child process of the experiment, stopped with SIGTERM for its
//! report.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant as WallInstant};

use crate::error::ExperimentError;

/// `sluice switch --lab` as a child process, with its report collected on SIGTERM.
pub(super) struct SwitchProc {
    child: Option<Child>,
    lines: mpsc::Receiver<String>,
    reader: Option<JoinHandle<()>>,
}

impl SwitchProc {
    /// Starts the switch over the lab's ports with `port_spec` overriding one, and waits for
    /// its ready line.
    pub(super) fn start(port_spec: &str, seed: u64) -> Result<SwitchProc, ExperimentError> {
        let exe = std::env::current_exe()
            .map_err(|e| ExperimentError::Io("find the sluice executable".into(), e))?;
        let mut child = Command::new(exe)
            .args([
                "switch",
                "--lab",
                "--seed",
                &seed.to_string(),
                "--port",
                port_spec,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| ExperimentError::Io("start sluice switch".into(), e))?;
        let out = child.stdout.take();
        let (tx, lines) = mpsc::channel();
        let reader = thread::spawn(move || {
            if let Some(out) = out {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            }
        });
        let sw = SwitchProc {
            child: Some(child),
            lines,
            reader: Some(reader),
        };
        let deadline = WallInstant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(WallInstant::now());
            match sw.lines.recv_timeout(left) {
                Ok(l) if l.starts_with("sluice switch: ready") => return Ok(sw),
                Ok(_) => {}
                Err(_) => {
                    return Err(ExperimentError::Workload(
                        "sluice switch did not become ready".into(),
                    ))
                }
            }
        }
    }

    /// SIGTERM, wait, and everything it printed after its ready line.
    pub(super) fn stop(mut self) -> Result<String, ExperimentError> {
        let Some(mut child) = self.child.take() else {
            return Err(ExperimentError::Workload(
                "the switch was already stopped".into(),
            ));
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = WallInstant::now() + Duration::from_secs(20);
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if WallInstant::now() < deadline => {
                    thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
            }
        };
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let report: Vec<String> = self.lines.try_iter().collect();
        match status {
            Some(s) if s.success() => Ok(report.join("\n")),
            other => Err(ExperimentError::Workload(format!(
                "sluice switch ended with {other:?}:\n{}",
                report.join("\n")
            ))),
        }
    }
}

impl Drop for SwitchProc {
    fn drop(&mut self) {
        // A failed run must not leave the switch forwarding behind it (our own child).
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
