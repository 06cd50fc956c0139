//! `sluice echo` in sluice-a, the server of the parallelism and scaling rows: started with
//! `--cores N --layout L`, ready once it printed its flow-group assignment, stopped by SIGTERM.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use sluice_bench::cpu::process_seconds;
use sluice_bench::PORTS;
use sluice_engine::setup::Backend;

use crate::error::ExperimentError;

/// `sluice echo` in sluice-a as a child process (it enters the namespace itself).
pub(crate) struct EngineEcho {
    child: Child,
}

impl EngineEcho {
    /// Starts it and waits until it has opened its device and printed its assignment.
    pub(crate) fn start(
        exe: &Path,
        backend: Backend,
        cores: usize,
        layout: Option<&str>,
    ) -> Result<Self, ExperimentError> {
        let mut cmd = Command::new(exe);
        cmd.args(["echo", "--lab", "--port", &PORTS.echo.to_string()])
            .args(["--backend", backend_name(backend)])
            .args(["--cores", &cores.to_string(), "--linger", "0"]);
        if let Some(l) = layout {
            cmd.args(["--layout", l]);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| ExperimentError::Io("start sluice echo".into(), e))?;
        let stderr = child.stderr.take();
        let (tx, rx) = mpsc::channel();
        // Forward its stderr, and say when it is up: the assignment's last line, or the
        // single engine's start line.
        std::thread::spawn(move || {
            let Some(err) = stderr else { return };
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("  {line}");
                if line.starts_with("flow groups:")
                    || (line.starts_with("sluice: engine at") && !line.contains("data-path core"))
                {
                    let _ = tx.send(());
                }
            }
        });
        let mut echo = EngineEcho { child };
        if rx.recv_timeout(Duration::from_secs(20)).is_err() {
            let status = echo.child.try_wait().ok().flatten();
            return Err(ExperimentError::Workload(format!(
                "sluice echo --cores {cores} did not start ({status:?})"
            )));
        }
        // Its first poll listens; give ARP and the listener a moment.
        std::thread::sleep(Duration::from_millis(300));
        Ok(echo)
    }

    /// Its CPU seconds so far (every thread).
    pub(crate) fn cpu_seconds(&self) -> f64 {
        process_seconds(self.child.id()).unwrap_or(0.0)
    }
}

impl Drop for EngineEcho {
    fn drop(&mut self) {
        // SIGTERM ends it cleanly (its device closed, an XDP program detached); kill if not.
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        for _ in 0..50 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `--backend`'s spelling of `b`.
pub(crate) fn backend_name(b: Backend) -> &'static str {
    match b {
        Backend::AfXdp => "af_xdp",
        Backend::Tap => "tap",
        Backend::Sim => "sim",
        Backend::AfPacket => "af_packet",
    }
}
