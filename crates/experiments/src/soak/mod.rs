//! `sluice soak`: mixed traffic against the engine and against Linux, side by side in the
//! switched lab, for a chosen time, with every byte checked.
//!
//! ```text
//!  Linux clients  sluice-c1 ─┐                               ┌ br0 ─ sl-a  engine 10.77.0.1
//!                            ├ sluice switch (impairments) ──┤        (`soak-server engine`)
//!  Linux clients  sluice-c2 ─┘   on every port, in phases    └ br0 ─ sl-k  Linux 10.77.0.3
//!                                                                   (`soak-server linux`)
//! ```
//!
//! Each side's clients (threads of this process in its client namespace) run the same
//! workloads at once: bulk uploads and downloads, closed-loop RPC echo, and connect/close
//! churn, all in the [`protocol`] (every payload byte is a seeded pattern both ends check).
//! The switch goes through [`schedule`]'s phases, impairments on and off. The engine runs
//! as its own process, so its resident set is its own; it is sampled every few seconds,
//! beside the kernel's slab and TCP memory. At the end the report gives, per side, bytes
//! verified, connections completed and errors by kind, and fails if any byte was wrong or
//! any error happened (none is expected: TCP must deliver everything).

mod client;
mod engine_server;
mod memory;
pub mod protocol;
mod report;
mod schedule;
mod serve;

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use clap::Args;
use sluice_lab::{client_ns, command, Lab, ENGINE_IP, KERNEL_IP, NS_KERNEL};

use crate::error::ExperimentError;
use crate::switch_thread::SwitchThread;
use crate::{lab_workload, LabRun};
use client::{ClientPlan, Clients, Tally, Workload};
pub use report::{SideReport, SoakReport};
use schedule::PhaseRecord;
pub use serve::{serve, ServeArgs, ServerSide};

/// The client namespace of the engine's clients.
const ENGINE_CLIENT: u8 = 1;
/// The client namespace of Linux's clients.
const LINUX_CLIENT: u8 = 2;
/// How long a server process may take to stop before it is killed: longer than the
/// engine's linger, which lets its last closes finish.
const STOP_GRACE: Duration = sluice_engine::DEFAULT_LINGER.saturating_add(Duration::from_secs(5));

/// `sluice soak`.
#[derive(Args, Debug, Clone)]
pub struct SoakArgs {
    /// Minutes of traffic (30 if neither this nor --seconds is given).
    #[arg(long, conflicts_with = "seconds")]
    pub minutes: Option<f64>,
    /// Seconds of traffic, for short runs.
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Seconds per impairment phase (shorter if the run cannot fit a cycle of ten).
    #[arg(long, default_value_t = 30.0)]
    pub phase_seconds: f64,
    /// Seconds between memory samples.
    #[arg(long, default_value_t = 5.0)]
    pub sample_seconds: f64,
    /// MiB per bulk transfer.
    #[arg(long, default_value_t = 8)]
    pub bulk_mib: u64,
    /// RPC connections per side (at a time).
    #[arg(long, default_value_t = 4)]
    pub rpc_conns: usize,
    /// Connect/close loops per side.
    #[arg(long, default_value_t = 2)]
    pub churn_conns: usize,
    /// Print the report as JSON on stdout (the table goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON report to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Seed of the switch's random draws and of the payloads.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The caller already holds the lab lock (tests holding a LabGuard).
    #[arg(long, hide = true)]
    pub no_lock: bool,
}

impl SoakArgs {
    /// How long the traffic runs.
    fn duration(&self) -> Result<Duration, ExperimentError> {
        let secs = match (self.seconds, self.minutes) {
            (Some(s), _) => s,
            (None, Some(m)) => m * 60.0,
            (None, None) => 30.0 * 60.0,
        };
        if !(1.0..=7.0 * 86400.0).contains(&secs) {
            return Err(ExperimentError::Usage(
                "--seconds/--minutes: from 1 second to a week".into(),
            ));
        }
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if !positive(self.phase_seconds) || !positive(self.sample_seconds) || self.bulk_mib == 0 {
            return Err(ExperimentError::Usage(
                "--phase-seconds, --sample-seconds and --bulk-mib must be positive".into(),
            ));
        }
        Ok(Duration::from_secs_f64(secs))
    }
}

/// Runs the soak in the switched lab and returns its report (judged: see
/// [`SoakReport::passed`]).
pub fn run(args: &SoakArgs) -> Result<SoakReport, ExperimentError> {
    let run_for = args.duration()?;
    let lab = LabRun {
        seconds: None,
        no_lock: args.no_lock,
    };
    lab.in_lab("soak", up, |lab| soak(lab, args, run_for))
}

/// The switched lab with two client namespaces whose Linux clients reuse TIME-WAIT ports
/// (the churn closes first, thousands of times) from a wide range.
fn up(lab: &Lab) -> Result<(), ExperimentError> {
    lab.up_switched(LINUX_CLIENT)
        .map_err(|e| lab_workload(&e))?;
    for i in [ENGINE_CLIENT, LINUX_CLIENT] {
        let ns = client_ns(i);
        lab.sysctl(&ns, "net.ipv4.tcp_tw_reuse", "1")
            .and_then(|()| lab.sysctl(&ns, "net.ipv4.ip_local_port_range", "10000 65535"))
            .map_err(|e| lab_workload(&e))?;
    }
    Ok(())
}

/// The run itself, in a lab that is up.
fn soak(lab: &Lab, args: &SoakArgs, run_for: Duration) -> Result<SoakReport, ExperimentError> {
    let ports = lab.switch_ports().map_err(|e| lab_workload(&e))?;
    let linux = ServerProcess::start(Some(NS_KERNEL), ServerSide::Linux)?;
    let mut engine = ServerProcess::start(None, ServerSide::Engine)?;
    let phase_len = schedule::phase_length(run_for, Duration::from_secs_f64(args.phase_seconds));
    let mut switch = Some(SwitchThread::start(
        schedule::port_specs(&ports, 0)?,
        args.seed,
    )?);
    let t0 = Instant::now();
    let mut samples = vec![memory::sample(0.0, engine.pid())];
    let plan = |client: u8, server: std::net::Ipv4Addr, side: u64| ClientPlan {
        netns: client_ns(client),
        target: SocketAddr::V4(SocketAddrV4::new(server, protocol::PORT)),
        bulk: args.bulk_mib << 20,
        threads: [
            (Workload::BulkUp, 1),
            (Workload::BulkDown, 1),
            (Workload::Rpc, args.rpc_conns),
            (Workload::Churn, args.churn_conns),
        ],
        seed: args.seed.rotate_left(32) ^ side,
    };
    let io = |e| ExperimentError::Io("start the client threads".into(), e);
    let sides = [
        (
            "engine",
            Clients::start(&plan(ENGINE_CLIENT, ENGINE_IP, 1), t0).map_err(io)?,
        ),
        (
            "linux",
            Clients::start(&plan(LINUX_CLIENT, KERNEL_IP, 2), t0).map_err(io)?,
        ),
    ];
    let sample_every = Duration::from_secs_f64(args.sample_seconds);
    let end = t0 + run_for;
    let (mut next_sample, mut next_phase) = (t0 + sample_every, t0 + phase_len);
    let (mut phase, mut phase_began) = (0usize, t0);
    let mut phases = Vec::new();
    let mut failures = Vec::new();
    let since = |t: Instant| t.saturating_duration_since(t0).as_secs_f64();
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        std::thread::sleep(next_sample.min(next_phase).min(end) - now);
        let now = Instant::now();
        if now >= next_phase && now < end {
            let reports = switch.take().map_or(Ok(Vec::new()), SwitchThread::stop)?;
            let name = schedule::phase(phase).0;
            phases.push(PhaseRecord::new(
                name,
                since(phase_began),
                (now - phase_began).as_secs_f64(),
                &reports,
            ));
            phase += 1;
            phase_began = now;
            next_phase += phase_len;
            switch = Some(SwitchThread::start(
                schedule::port_specs(&ports, phase)?,
                args.seed.wrapping_add(phase as u64),
            )?);
        }
        if now >= next_sample {
            let s = memory::sample(since(now), engine.pid());
            samples.push(s);
            next_sample += sample_every;
            progress(since(now), run_for, schedule::phase(phase).0, &sides, &s);
        }
        if let Some(status) = engine.exited() {
            failures.push(format!("the engine exited during the run ({status})"));
            break;
        }
    }
    let seconds = since(Instant::now());
    eprintln!("sluice soak: stopping the clients (each finishes its current operation)");
    for (_, c) in &sides {
        c.request_stop();
    }
    let tallies: Vec<(&'static str, Tally)> =
        sides.into_iter().map(|(n, c)| (n, c.stop())).collect();
    let now = Instant::now();
    samples.push(memory::sample(since(now), engine.pid()));
    // The engine stops while the switch still runs: a close under way (the last phase lost
    // a final ACK) then finishes, where behind a stopped switch it lingered until killed.
    if let Err(e) = engine.stop() {
        failures.push(e);
    }
    let reports = switch.take().map_or(Ok(Vec::new()), SwitchThread::stop)?;
    phases.push(PhaseRecord::new(
        schedule::phase(phase).0,
        since(phase_began),
        (now - phase_began).as_secs_f64(),
        &reports,
    ));
    drop(linux);
    let sides = tallies
        .into_iter()
        .map(|(name, tally)| {
            let server = if name == "engine" {
                ENGINE_IP
            } else {
                KERNEL_IP
            };
            SideReport::new(name, format!("{server}:{}", protocol::PORT), tally)
        })
        .collect();
    Ok(SoakReport::new(
        seconds,
        sides,
        report::MemoryReport::new(args.sample_seconds, samples),
        phases,
        failures,
    ))
}

/// A progress line on stderr.
fn progress(t: f64, run_for: Duration, phase: &str, sides: &[(&str, Clients)], s: &memory::Sample) {
    let mut line = format!(
        "sluice soak: {t:.0}/{:.0} s, {phase:<13}",
        run_for.as_secs_f64()
    );
    for (name, c) in sides {
        let tally = c.tally();
        line.push_str(&format!(
            " | {name}: {} verified, {} conns, {} errors",
            report::bytes(tally.bytes_verified()),
            tally.connections(),
            tally.error_count()
        ));
    }
    if let Some(k) = s.engine_rss_kib {
        line.push_str(&format!(" | engine RSS {:.1} MiB", k as f64 / 1024.0));
    }
    eprintln!("{line}");
}

/// A soak server as a child process (`sluice soak-server`), stopped by closing its stdin.
struct ServerProcess {
    child: Child,
    what: String,
}

impl ServerProcess {
    /// Starts `side`'s server, in `netns` if given, and waits for its "ready".
    fn start(netns: Option<&str>, side: ServerSide) -> Result<ServerProcess, ExperimentError> {
        let what = format!("the {side:?} soak server").to_lowercase();
        let exe = std::env::current_exe()
            .map_err(|e| ExperimentError::Io("find the sluice executable".into(), e))?;
        let mut cmd = match netns {
            Some(ns) => {
                let ip = command::find(command::IP).map_err(|e| lab_workload(&e))?;
                let mut c = Command::new(ip);
                c.args(["netns", "exec", ns]).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        let side_name = match side {
            ServerSide::Engine => "engine",
            ServerSide::Linux => "linux",
        };
        let child = cmd
            .args(["soak-server", side_name])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| ExperimentError::Io(format!("start {what}"), e))?;
        let mut server = ServerProcess { child, what };
        let mut line = String::new();
        if let Some(out) = server.child.stdout.take() {
            let _ = BufReader::new(out).read_line(&mut line);
        }
        if line.trim() != "ready" {
            return Err(ExperimentError::Workload(format!(
                "{} did not start",
                server.what
            )));
        }
        Ok(server)
    }

    /// Its process id (the engine's, for /proc/PID/status).
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How it ended, if it has.
    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Asks it to stop and waits; an error if it failed or had to be killed.
    fn stop(mut self) -> Result<(), String> {
        drop(self.child.stdin.take());
        let began = Instant::now();
        while began.elapsed() < STOP_GRACE {
            match self.child.try_wait() {
                Ok(Some(s)) if s.success() => return Ok(()),
                Ok(Some(s)) => return Err(format!("{} exited with {s}", self.what)),
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => return Err(format!("{}: {e}", self.what)),
            }
        }
        Err(format!(
            "{} did not stop within {STOP_GRACE:?}; killed",
            self.what
        ))
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // Our own child: closing stdin asks it to exit, kill makes sure.
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
