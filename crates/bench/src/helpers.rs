//! The Linux side of the bench as child processes of our own binary inside lab namespaces:
//! `sluice loadgen` (clients) and `sluice kserve` (servers), through `ip netns exec`.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use sluice_lab::command;

use crate::error::BenchError;
use crate::measure::{self, Measurement};
use crate::plan::{Timing, Workload, PORTS, REQUEST_BYTES};

/// This program, to run again inside a namespace.
fn exe() -> Result<PathBuf, BenchError> {
    std::env::current_exe().map_err(|e| BenchError::io("find the sluice executable", e))
}

/// `ip netns exec NS <this program>`, ready for arguments.
fn in_namespace(ns: &str) -> Result<Command, BenchError> {
    let ip = command::find(command::IP)?;
    let mut cmd = Command::new(ip);
    cmd.args(["netns", "exec", ns]).arg(exe()?);
    Ok(cmd)
}

/// Runs `sluice loadgen` in `ns` against `target` and returns what it measured.
pub fn run_loadgen(
    ns: &str,
    workload: Workload,
    target: SocketAddr,
    timing: Timing,
) -> Result<Measurement, BenchError> {
    run_loadgen_sized(ns, workload, target, timing, REQUEST_BYTES)
}

/// [`run_loadgen`] with rpc requests and responses of `size` bytes.
pub fn run_loadgen_sized(
    ns: &str,
    workload: Workload,
    target: SocketAddr,
    timing: Timing,
    size: usize,
) -> Result<Measurement, BenchError> {
    let what = format!("loadgen {} in {ns} against {target}", workload.name());
    let out = in_namespace(ns)?
        .arg("loadgen")
        .arg(workload.kind.as_str())
        .args(["--target", &target.to_string()])
        .args(["--conns", &workload.conns.to_string()])
        .args(["--seconds", &timing.seconds.to_string()])
        .args(["--warmup", &timing.warmup.to_string()])
        .args(["--size", &size.to_string()])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| BenchError::io(what.clone(), e))?;
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if !out.status.success() {
        return Err(BenchError::Helper {
            what,
            detail: format!("{}: {stderr}", out.status),
        });
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).map_err(|e| BenchError::Helper {
        what,
        detail: format!("unreadable result {stdout:?}: {e}"),
    })
}

/// Linux kernel servers (echo, sink, source on [`PORTS`]) in one namespace.
pub struct KernelServers {
    children: Vec<Child>,
}

impl KernelServers {
    /// Starts the three servers in `ns` and waits until each listens.
    pub fn start(ns: &str) -> Result<KernelServers, BenchError> {
        let mut servers = KernelServers {
            children: Vec::new(),
        };
        for (name, port) in [
            ("echo", PORTS.echo),
            ("sink", PORTS.sink),
            ("source", PORTS.source),
        ] {
            let what = format!("kserve {name} in {ns}");
            let mut child = in_namespace(ns)?
                .args(["kserve", name, "--port", &port.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| BenchError::io(what.clone(), e))?;
            let mut line = String::new();
            if let Some(out) = child.stdout.take() {
                let _ = BufReader::new(out).read_line(&mut line);
            }
            servers.children.push(child);
            if line.trim() != "ready" {
                return Err(BenchError::Helper {
                    what,
                    detail: "it did not start listening".into(),
                });
            }
        }
        Ok(servers)
    }

    /// CPU seconds the servers have used so far (all their threads).
    pub fn cpu_seconds(&self) -> f64 {
        self.children
            .iter()
            .map(|c| measure::cpu_seconds(&format!("/proc/{}/stat", c.id())))
            .sum()
    }
}

impl Drop for KernelServers {
    fn drop(&mut self) {
        for child in &mut self.children {
            // Closing stdin asks it to exit; kill makes sure (it is our own child).
            drop(child.stdin.take());
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
