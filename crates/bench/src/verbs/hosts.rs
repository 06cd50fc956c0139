//! Where each stack's programs run in the lab, and one measured client/server pair.
//!
//! - Linux TCP: server in sluice-k (10.77.0.3), client in sluice-b.
//! - Sluice (verbs or TCP): server on engine E (`ip netns exec sluice-e sluice run
//!   --socket S_E`, 10.77.0.4), client on engine A (`sluice run --lab --socket S_A`), each
//!   engine started like scripts/verbs-demo.sh does (`--idle-us 20 --app-idle-us 200`).

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use sluice_lab::NS_KERNEL;
use sluice_lab::{
    command, ENGINE2_IFACE, ENGINE2_IP, KERNEL_IP, NS_CLIENT, NS_ENGINE2, PREFIX_LEN,
};

use super::table::Stack;
use crate::apps::engine::EngineProcess;
use crate::apps::error::AppsError;
use crate::apps::process::{output_tail, run_captured, tail_lines, Supervised};
use crate::apps::program::Program;
use crate::cpu::{CpuMeter, CpuUse};

/// Engine flags of the verbs lab (scripts/verbs-demo.sh): poll 20 us before sleeping.
pub const ENGINE_FLAGS: [&str; 4] = ["--idle-us", "20", "--app-idle-us", "200"];
/// The setup lines of a table's TCP rows: where sockperf and iperf3 run for each stack.
pub fn tcp_setup_lines() -> [String; 2] {
    [
        format!(
            "  sluice TCP: sockperf/iperf3 under `sluice run --no-verbs`, same engines (both `{}`)",
            ENGINE_FLAGS.join(" ")
        ),
        "  linux TCP:  sockperf/iperf3 server in sluice-k (10.77.0.3), client in sluice-b; \
         measured first, before the engines start"
            .into(),
    ]
}

/// How long a server gets to listen before its client starts.
const SERVER_WAIT: Duration = Duration::from_millis(1500);
/// How long a server that ends by itself (perftest) gets after its client.
const SERVER_EXIT: Duration = Duration::from_secs(5);

/// The two engines Sluice rows run on.
#[derive(Debug)]
pub struct Engines {
    a: EngineProcess,
    e: EngineProcess,
}

impl Engines {
    /// Starts engine A (`sluice engine --lab`, sluice-a) and engine E (`sluice engine
    /// --iface sl-e --ip 10.77.0.4/24` in sluice-e), sockets and logs in `dir`.
    pub fn start(sluice: &Path, dir: &Path) -> Result<Engines, AppsError> {
        let flags: Vec<String> = ENGINE_FLAGS.iter().map(|s| s.to_string()).collect();
        let a = EngineProcess::start(
            sluice,
            "af_packet",
            &flags,
            &dir.join("engine-a.sock"),
            &dir.join("engine-a"),
        )?;
        let sock_e = dir.join("engine-e.sock");
        let mut cmd = netns(NS_ENGINE2)?;
        cmd.arg(sluice)
            .args(["engine", "--iface", ENGINE2_IFACE, "--ip"])
            .arg(format!("{ENGINE2_IP}/{PREFIX_LEN}"))
            .arg("--socket")
            .arg(&sock_e)
            .args(ENGINE_FLAGS);
        let e = EngineProcess::start_command(cmd, &sock_e, &dir.join("engine-e"))?;
        Ok(Engines { a, e })
    }

    /// Both engines' pids (for their CPU time).
    pub fn pids(&self) -> [u32; 2] {
        [self.a.pid(), self.e.pid()]
    }

    /// Fails, with the dead engine's log, if either has exited.
    pub fn check_alive(&mut self) -> Result<(), AppsError> {
        self.a.check_alive()?;
        self.e.check_alive()
    }
}

/// Launches programs for every stack.
#[derive(Debug)]
pub struct Hosts {
    sluice: PathBuf,
    dir: PathBuf,
    engines: Option<Engines>,
    runs: u32,
}

impl Hosts {
    /// Hosts with no engine yet (Linux rows only until [`Hosts::start_engines`]).
    pub fn new(sluice: PathBuf, dir: PathBuf) -> Hosts {
        Hosts {
            sluice,
            dir,
            engines: None,
            runs: 0,
        }
    }

    /// Starts the two engines for the Sluice rows.
    pub fn start_engines(&mut self) -> Result<(), AppsError> {
        self.engines = Some(Engines::start(&self.sluice, &self.dir)?);
        Ok(())
    }

    /// Stops the engines.
    pub fn stop_engines(&mut self) {
        self.engines = None;
    }

    /// Where `stack`'s server listens.
    pub fn server_ip(stack: Stack) -> Ipv4Addr {
        match stack {
            Stack::LinuxTcp => KERNEL_IP,
            _ => ENGINE2_IP,
        }
    }

    /// The launcher of `stack`'s server or client, ready for the program.
    fn launcher(&self, stack: Stack, server: bool) -> Result<Command, AppsError> {
        if stack == Stack::LinuxTcp {
            return netns(if server { NS_KERNEL } else { NS_CLIENT });
        }
        let engines = self.engines.as_ref().ok_or_else(|| {
            AppsError::Usage("internal: Sluice rows need the engines started".into())
        })?;
        let verbs = if stack == Stack::SluiceTcp {
            "--no-verbs"
        } else {
            "--verbs"
        };
        let mut cmd = if server {
            let mut c = netns(NS_ENGINE2)?;
            c.arg(&self.sluice).arg("run");
            c
        } else {
            let mut c = Command::new(&self.sluice);
            c.args(["run", "--lab"]);
            c
        };
        let socket = if server {
            engines.e.socket()
        } else {
            engines.a.socket()
        };
        cmd.args([verbs, "--socket"]).arg(socket).arg("--");
        Ok(cmd)
    }

    /// Runs `program SERVER_ARGS` as `stack`'s server and then `program CLIENT_ARGS` as its
    /// client, measuring CPU over the client's run; returns the client's stdout. The
    /// server is stopped afterwards (perftest's ends by itself).
    pub fn measure(
        &mut self,
        stack: Stack,
        program: Program,
        server_args: &[String],
        client_args: &[String],
        limit: Duration,
    ) -> Result<(String, CpuUse), String> {
        let found = crate::apps::program::find(program).map_err(|e| e.to_string())?;
        let mut server = self.launcher(stack, true).map_err(|e| e.to_string())?;
        server.arg(&found).args(server_args);
        let mut client = self.launcher(stack, false).map_err(|e| e.to_string())?;
        client.arg(&found).args(client_args);
        let what = format!("{} {}", program.name, client_args.join(" "));
        // perftest's server finishes its own run; the others are stopped.
        let server_ends = program.name.starts_with("ib_");
        let tag = format!("{}-{}", program.name, stack.name().replace(' ', "-"));
        self.measure_commands(&tag, &what, server, client, limit, server_ends)
    }

    /// Runs the ready `server` command, then `client` (described as `what`, logs under
    /// `tag`), measuring CPU (machine-wide and the engines') over the client's run; returns
    /// the client's stdout. The server is stopped afterwards, after waiting for it to end by
    /// itself if `server_ends`.
    pub fn measure_commands(
        &mut self,
        tag: &str,
        what: &str,
        server: Command,
        client: Command,
        limit: Duration,
        server_ends: bool,
    ) -> Result<(String, CpuUse), String> {
        self.runs += 1;
        let stem = self.dir.join(format!("{:03}-{tag}", self.runs));
        if let Some(engines) = &mut self.engines {
            engines.check_alive().map_err(|e| e.to_string())?;
        }
        let mut srv = Supervised::spawn(server, tag, &stem.with_extension("server"), false)
            .map_err(|e| e.to_string())?;
        thread::sleep(SERVER_WAIT);
        if let Some(status) = srv.exited() {
            return Err(format!(
                "the server exited ({status}) before its client started: {}",
                one_line(&srv.log_tail())
            ));
        }
        let pids = self
            .engines
            .as_ref()
            .map(|e| e.pids().to_vec())
            .unwrap_or_default();
        let meter = CpuMeter::start(&pids);
        let out = run_captured(client, what, limit).map_err(|e| one_line(&e.to_string()));
        let cpu = meter.stop();
        let _ = std::fs::write(
            stem.with_extension("client.out"),
            out.as_ref().map(|o| o.stdout.clone()).unwrap_or_default(),
        );
        let out = out?;
        let deadline = Instant::now() + SERVER_EXIT;
        while server_ends && srv.exited().is_none() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
        srv.stop(Duration::from_secs(2));
        if !out.status.success() {
            let engine = match &mut self.engines {
                Some(e) => e
                    .check_alive()
                    .err()
                    .map(|e| format!("; {e}"))
                    .unwrap_or_default(),
                None => String::new(),
            };
            return Err(format!(
                "{what}: {}: {} (server: {}){engine}",
                out.status,
                one_line(&output_tail(&out)),
                one_line(&srv.log_tail())
            ));
        }
        Ok((String::from_utf8_lossy(&out.stdout).into_owned(), cpu))
    }

    /// `sluice mtp SUBCOMMAND` attached to engine E (server, in sluice-e) or A (client),
    /// ready for the subcommand's flags (`--socket` is added); fails before the engines run.
    pub fn mtp_command(&self, server: bool, subcommand: &str) -> Result<Command, String> {
        let engines = self
            .engines
            .as_ref()
            .ok_or("internal: MTP rows need the engines started")?;
        let (mut cmd, socket) = if server {
            (
                netns(NS_ENGINE2).map_err(|e| e.to_string())?,
                engines.e.socket(),
            )
        } else {
            (Command::new(&self.sluice), engines.a.socket())
        };
        if server {
            cmd.arg(&self.sluice);
        }
        cmd.args(["mtp", subcommand, "--socket"]).arg(socket);
        Ok(cmd)
    }
}

/// `ip netns exec NS`, ready for the program.
fn netns(ns: &str) -> Result<Command, AppsError> {
    let mut cmd = Command::new(command::find(command::IP)?);
    cmd.args(["netns", "exec", ns]);
    Ok(cmd)
}

/// The last lines of a log joined on one line (for a table's failed row).
pub fn one_line(text: &str) -> String {
    tail_lines(text.trim(), 4)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" | ")
}
