//! `sluice experiment synflood`: legitimate connections through a SYN flood, the engine's
//! echo server against Linux's, in one run on the lab.
//!
//! ```text
//!  sluice-b: flood (AF_PACKET on br0, spoofed 198.18.0.0/15)  ──> engine 10.77.0.1:7001
//!            legitimate client (kernel TCP): connect, 64 B echo, close   or Linux 10.77.0.3:7001
//! ```
//!
//! Three servers: the engine, the engine with one receive queue for every frame (its
//! AF_PACKET device without the SYN lane, as before it), and Linux.
//! For each: `--cycles` connect/echo/close cycles unloaded, then the same number
//! during a flood of `--rate` spoofed SYNs a second ([`sluice_lab::flood`]). A cycle counts
//! as served during the flood if it finished before the flood ended. The table gives both
//! latency sets, the success counts, the p99 ratio (the target: within 2x of unloaded) and
//! the engine's CPU per second of flood with its SYN-cookie and drop counters.
//!
//! Linux answers SYN-ACKs through its route to the spoofed source: sluice-k gets a default
//! route through sluice-b's bridge, where they are dropped (the engine answers at the
//! frame's source MAC, the same bridge).

use std::io::{Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use sluice_bench::{cpu_seconds, current_thread_stat, open_with, EngineSpec, KernelServers};
use sluice_device::{AfPacket, AfPacketConfig, Device, DeviceStats};
use sluice_engine::apps::BenchServerApp;
use sluice_engine::setup::{Backend, EngineOptions};
use sluice_lab::flood::{FloodReport, FloodSpec, FloodThread, DEFAULT_SOURCES};
use sluice_lab::presets::LabPreset;
use sluice_lab::{
    Lab, BRIDGE, CLIENT_IP, ENGINE_IP, ENGINE_MAC, KERNEL_IP, KERNEL_MAC, NS_CLIENT, NS_KERNEL,
};
use sluice_tcp::Counters;
use sluice_wire::EthernetAddress;

use crate::error::ExperimentError;
use crate::report::{fmt_num, fmt_ratio, Report};
use crate::{lab_workload, Common, LabRun};
use sluice_bench::PORTS;

/// The engine's device backend, as the lab tests run it.
const BACKEND: Backend = Backend::AfPacket;
/// Payload of one echo.
const ECHO_BYTES: usize = 64;
/// How long one step of a cycle may take before the cycle counts as failed.
const CYCLE_TIMEOUT: Duration = Duration::from_secs(5);
/// The flood runs this long before the first cycle, so the SYN backlog is full.
const FLOOD_LEAD: Duration = Duration::from_millis(500);

/// `sluice experiment synflood`.
#[derive(Args, Debug)]
pub struct SynfloodArgs {
    /// Size, output directory and seed (the flood's sources).
    #[command(flatten)]
    pub common: Common,
    /// Spoofed SYNs per second (0: as fast as one core sends them).
    #[arg(long, default_value_t = 300_000)]
    pub rate: u64,
    /// Legitimate connect/echo/close cycles, unloaded and during the flood (default 200;
    /// with --quick 50).
    #[arg(long)]
    pub cycles: Option<usize>,
    /// Seconds the flood lasts (default 10; with --quick 3).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// The caller already holds the lab lock (tests holding a LabGuard).
    #[arg(long, hide = true)]
    pub no_lock: bool,
}

/// Which server is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    /// The engine's echo in sluice-a.
    Engine,
    /// The same with one receive queue for every frame (AF_PACKET without its SYN lane):
    /// the engine before the lane, for comparison.
    EngineOneQueue,
    /// `sluice kserve echo` in sluice-k.
    Linux,
}

impl Server {
    /// Every server, in the order they run.
    pub const ALL: [Server; 3] = [Server::Engine, Server::EngineOneQueue, Server::Linux];

    /// Its name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Server::Engine => "engine",
            Server::EngineOneQueue => "engine-one-queue",
            Server::Linux => "linux",
        }
    }

    fn addr(self) -> SocketAddrV4 {
        match self {
            Server::Engine | Server::EngineOneQueue => SocketAddrV4::new(ENGINE_IP, PORTS.echo),
            Server::Linux => SocketAddrV4::new(KERNEL_IP, PORTS.echo),
        }
    }

    fn mac(self) -> EthernetAddress {
        EthernetAddress(match self {
            Server::Engine | Server::EngineOneQueue => ENGINE_MAC,
            Server::Linux => KERNEL_MAC,
        })
    }
}

/// Legitimate cycles: connect latencies of the ones that succeeded, and the failures.
#[derive(Clone, Debug, Default)]
pub struct Cycles {
    /// Connect latency of every cycle that completed, in completion order.
    pub connect: Vec<Duration>,
    /// Cycles that completed while the flood still ran.
    pub during_flood: usize,
    /// Cycles tried.
    pub tried: usize,
}

impl Cycles {
    /// The `q` quantile of the connect latencies (nearest rank), in milliseconds.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        let mut v = self.connect.clone();
        if v.is_empty() {
            return f64::NAN;
        }
        v.sort();
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1].as_secs_f64() * 1e3
    }
}

/// What one server's run measured.
#[derive(Clone, Debug, Default)]
pub struct Run {
    /// Cycles without a flood.
    pub unloaded: Cycles,
    /// Cycles during the flood.
    pub flooded: Cycles,
    /// What the flood achieved.
    pub flood: FloodReport,
    /// The engine's CPU seconds per second of flood (engine only).
    pub cpu_per_second: Option<f64>,
    /// The engine's core and device counters at the end (engine only).
    pub engine: Option<(Counters, DeviceStats)>,
}

/// Runs the experiment in the lab and builds its report.
pub fn run(args: &SynfloodArgs) -> Result<Report, ExperimentError> {
    let quick = args.common.quick;
    let cycles = args.cycles.unwrap_or(if quick { 50 } else { 200 });
    let seconds = args.seconds.unwrap_or(if quick { 3.0 } else { 10.0 });
    if cycles == 0 || !(seconds > 0.0 && seconds <= 3600.0) {
        return Err(ExperimentError::Usage(
            "--cycles must be at least 1 and --seconds in (0, 3600]".into(),
        ));
    }
    let lab_run = LabRun {
        seconds: None,
        no_lock: args.no_lock,
    };
    let runs = lab_run.in_lab(
        "synflood",
        |lab| prepare(lab).map_err(|e| lab_workload(&e)),
        |_| {
            Server::ALL
                .iter()
                .map(|&s| measure(s, args, cycles, seconds))
                .collect::<Result<Vec<_>, _>>()
        },
    )?;
    Ok(report(args, cycles, seconds, &runs))
}

/// The lab, with sluice-k routing to the spoofed sources through sluice-b's bridge.
pub fn prepare(lab: &Lab) -> Result<(), sluice_lab::LabError> {
    lab.up()?;
    let via = CLIENT_IP.to_string();
    lab.ip_in(NS_KERNEL, &["route", "replace", "default", "via", &via])?;
    Ok(())
}

/// One server: unloaded cycles, then cycles during a flood.
pub fn measure(
    server: Server,
    args: &SynfloodArgs,
    cycles: usize,
    seconds: f64,
) -> Result<Run, ExperimentError> {
    eprintln!("sluice experiment synflood: {}", server.name());
    let fail = |e: &dyn std::fmt::Display| ExperimentError::Workload(e.to_string());
    let (engine, kernel) = match server {
        Server::Engine => (Some(EngineThread::start(false)?), None),
        Server::EngineOneQueue => (Some(EngineThread::start(true)?), None),
        Server::Linux => (
            None,
            Some(KernelServers::start(NS_KERNEL).map_err(|e| fail(&e))?),
        ),
    };
    std::thread::sleep(Duration::from_millis(200));
    let target = server.addr();
    let unloaded = legit_cycles(target, cycles, Duration::ZERO, None)?;
    let flood_for = Duration::from_secs_f64(seconds);
    let spec = FloodSpec {
        iface: BRIDGE.into(),
        netns: Some(NS_CLIENT.into()),
        dst_mac: server.mac(),
        target,
        sources: DEFAULT_SOURCES,
        rate: args.rate,
        duration: flood_for,
        seed: args.common.seed,
    };
    let cpu0 = engine.as_ref().map(EngineThread::cpu_seconds);
    let flood = FloodThread::start(spec).map_err(|e| fail(&e))?;
    std::thread::sleep(FLOOD_LEAD);
    // Spread the cycles over the flood, leaving its last fifth for stragglers.
    let gap = flood_for.saturating_sub(FLOOD_LEAD).mul_f64(0.8) / cycles as u32;
    let flooded = legit_cycles(target, cycles, gap, Some(&flood))?;
    let report = flood.stop().map_err(|e| fail(&e))?;
    let cpu_per_second = engine
        .as_ref()
        .zip(cpu0)
        .map(|(e, c0)| (e.cpu_seconds() - c0) / report.seconds.max(1e-9));
    let engine = engine.map(EngineThread::stop).transpose()?;
    drop(kernel);
    Ok(Run {
        unloaded,
        flooded,
        flood: report,
        cpu_per_second,
        engine,
    })
}

/// `n` connect/echo/close cycles from sluice-b against `target`, `gap` apart; with a flood,
/// counts those that finished while it ran.
fn legit_cycles(
    target: SocketAddrV4,
    n: usize,
    gap: Duration,
    flood: Option<&FloodThread>,
) -> Result<Cycles, ExperimentError> {
    let fail = |e: &dyn std::fmt::Display| ExperimentError::Workload(e.to_string());
    // The flood's state is read from this thread; the cycles run in sluice-b on their own.
    let flooding = Arc::new(AtomicBool::new(flood.is_some()));
    let flag = Arc::clone(&flooding);
    let worker = std::thread::Builder::new()
        .name("legit-client".into())
        .spawn(move || -> Result<Cycles, String> {
            sluice_device::netns::enter(NS_CLIENT).map_err(|e| e.to_string())?;
            let mut out = Cycles::default();
            let start = Instant::now();
            for i in 0..n {
                let due = start + gap * i as u32;
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                out.tried += 1;
                if let Some(connect) = cycle(target) {
                    out.connect.push(connect);
                    if flag.load(Ordering::Relaxed) {
                        out.during_flood += 1;
                    }
                }
            }
            Ok(out)
        })
        .map_err(|e| ExperimentError::Io("spawn the legitimate client".into(), e))?;
    if let Some(f) = flood {
        while !worker.is_finished() && !f.is_finished() {
            std::thread::sleep(Duration::from_millis(5));
        }
        flooding.store(false, Ordering::Relaxed);
    }
    match worker.join() {
        Ok(r) => r.map_err(|e| fail(&e)),
        Err(_) => Err(fail(&"the legitimate client panicked")),
    }
}

/// One connect, 64 B echo and close; the connect latency, or None if any step failed.
fn cycle(target: SocketAddrV4) -> Option<Duration> {
    let t0 = Instant::now();
    let mut s = TcpStream::connect_timeout(&SocketAddr::V4(target), CYCLE_TIMEOUT).ok()?;
    let connect = t0.elapsed();
    s.set_read_timeout(Some(CYCLE_TIMEOUT)).ok()?;
    s.set_write_timeout(Some(CYCLE_TIMEOUT)).ok()?;
    let msg = [0x5a; ECHO_BYTES];
    s.write_all(&msg).ok()?;
    let mut back = [0; ECHO_BYTES];
    s.read_exact(&mut back).ok()?;
    (back == msg).then_some(connect)
}

/// The engine's echo server on its own thread, returning its counters when stopped.
struct EngineThread {
    stop: Arc<AtomicBool>,
    stat_path: String,
    handle: Option<std::thread::JoinHandle<Result<(Counters, DeviceStats), String>>>,
}

impl EngineThread {
    /// The engine's echo; with `one_queue`, on an AF_PACKET device without its SYN lane.
    fn start(one_queue: bool) -> Result<EngineThread, ExperimentError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("engine-server".into())
            .spawn(move || {
                let spec = EngineSpec {
                    backend: BACKEND,
                    idle_before_sleep: Some(Duration::from_micros(100)),
                };
                let options = EngineOptions::lab(BACKEND);
                let opened = open_with(&options, spec, None)
                    .map_err(|e| e.to_string())
                    .and_then(|mut engine| {
                        if one_queue {
                            // The engine's device as it was before the lane.
                            let config = AfPacketConfig {
                                complete_partial: false,
                                syn_lane: None,
                                ..AfPacketConfig::offload()
                            };
                            let device = AfPacket::open(&options.iface, config);
                            engine.device = Box::new(device.map_err(|e| e.to_string())?);
                        }
                        Ok(engine)
                    });
                let mut engine = match opened {
                    Ok(e) => e,
                    Err(e) => {
                        let _ = ready_tx.send(None);
                        return Err(e);
                    }
                };
                let _ = ready_tx.send(Some(current_thread_stat()));
                let mut app = BenchServerApp::new(PORTS, flag);
                engine.run(&mut app, None).map_err(|e| e.to_string())?;
                Ok((engine.stack.counters().clone(), engine.device.stats()))
            })
            .map_err(|e| ExperimentError::Io("spawn the engine thread".into(), e))?;
        let mut t = EngineThread {
            stop,
            stat_path: String::new(),
            handle: Some(handle),
        };
        match ready_rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Some(p)) => {
                t.stat_path = p;
                Ok(t)
            }
            _ => Err(t
                .stop()
                .err()
                .unwrap_or_else(|| ExperimentError::Workload("the engine did not start".into()))),
        }
    }

    fn cpu_seconds(&self) -> f64 {
        cpu_seconds(&self.stat_path)
    }

    fn stop(mut self) -> Result<(Counters, DeviceStats), ExperimentError> {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.take().map(std::thread::JoinHandle::join) {
            Some(Ok(r)) => r.map_err(|e| ExperimentError::Workload(format!("the engine: {e}"))),
            _ => Err(ExperimentError::Workload(
                "the engine thread panicked".into(),
            )),
        }
    }
}

impl Drop for EngineThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The table: a row per server.
pub fn report(args: &SynfloodArgs, cycles: usize, seconds: f64, runs: &[Run]) -> Report {
    let columns = [
        "server",
        "flood SYN/s",
        "served in flood",
        "failed",
        "unloaded p50 ms",
        "unloaded p99 ms",
        "flood p50 ms",
        "flood p99 ms",
        "flood max ms",
        "p99 flood/unloaded",
        "server CPU/s",
    ]
    .map(String::from)
    .to_vec();
    let mut rows = Vec::new();
    let mut notes = vec![
        "served in flood: cycles (connect, 64 B echo, close) finished while the flood ran; \
         failed: cycles that did not finish within 5 s a step; target: every cycle served \
         and p99 within 2x of unloaded"
            .to_string(),
    ];
    for (server, r) in Server::ALL.iter().zip(runs) {
        let (up99, fp99) = (r.unloaded.quantile_ms(0.99), r.flooded.quantile_ms(0.99));
        rows.push(vec![
            server.name().to_string(),
            format!("{:.0}", r.flood.rate()),
            format!("{}/{}", r.flooded.during_flood, r.flooded.tried),
            (r.flooded.tried - r.flooded.connect.len()).to_string(),
            fmt_num(r.unloaded.quantile_ms(0.5)),
            fmt_num(up99),
            fmt_num(r.flooded.quantile_ms(0.5)),
            fmt_num(fp99),
            fmt_num(r.flooded.quantile_ms(1.0)),
            fmt_ratio(fp99, up99),
            r.cpu_per_second.map_or("n/a".into(), |c| format!("{c:.2}")),
        ]);
        if let Some((c, d)) = &r.engine {
            notes.push(format!(
                "  {}: syn_cookies_sent {} accepted {} rejected {}, syn_dropped {}, \
                 accept_queue_overflow {}, control_queue_full {}, frames_rx {}, device rx {} \
                 tx {} tx_dropped {}, SYNs shed by the device {}",
                server.name(),
                c.syn_cookies_sent,
                c.syn_cookies_accepted,
                c.syn_cookies_rejected,
                c.syn_dropped,
                c.accept_queue_overflow,
                c.control_queue_full,
                c.frames_rx,
                d.rx_frames,
                d.tx_frames,
                d.tx_dropped,
                d.rx_syns_shed,
            ));
        }
        if r.flood.dropped > 0 {
            notes.push(format!(
                "  {}: the flood's socket refused {} SYNs",
                server.name(),
                r.flood.dropped
            ));
        }
    }
    if let [e, _, l] = runs {
        notes.push(format!(
            "engine/linux: served in flood {}, flood p99 {}",
            fmt_ratio(e.flooded.during_flood as f64, l.flooded.during_flood as f64),
            fmt_ratio(e.flooded.quantile_ms(0.99), l.flooded.quantile_ms(0.99)),
        ));
    }
    Report {
        name: "synflood".into(),
        setup: vec![
            format!(
                "sluice experiment synflood: {cycles} connect/64 B echo/close cycles from \
                 sluice-b unloaded, then {cycles} during {seconds} s of spoofed SYNs at {} /s \
                 (sources {}/{}), against the engine's echo ({BACKEND:?}; with and without its SYN lane) and Linux's",
                if args.rate == 0 {
                    "as many as one core sends".to_string()
                } else {
                    args.rate.to_string()
                },
                DEFAULT_SOURCES.0,
                DEFAULT_SOURCES.1
            ),
            format!(
                "  {} shared CPU cores; server CPU/s: the engine thread's CPU seconds per \
                 second of flood (Linux's is spent in softirq, not measured)",
                std::thread::available_parallelism().map_or(1, |n| n.get())
            ),
        ],
        columns,
        rows,
        notes,
        plot: None,
        data: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cycles(ms: &[u64], tried: usize) -> Cycles {
        Cycles {
            connect: ms.iter().map(|&m| Duration::from_millis(m)).collect(),
            during_flood: ms.len(),
            tried,
        }
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let c = cycles(&[5, 1, 3, 2, 4], 5);
        assert_eq!(c.quantile_ms(0.5), 3.0);
        assert_eq!(c.quantile_ms(0.99), 5.0);
        assert_eq!(c.quantile_ms(1.0), 5.0);
        assert!(cycles(&[], 0).quantile_ms(0.5).is_nan());
    }

    #[test]
    fn report_has_a_row_per_server_and_the_ratio() {
        let args = SynfloodArgs {
            common: Common {
                quick: true,
                out: "x".into(),
                seed: 1,
            },
            rate: 1000,
            cycles: None,
            seconds: None,
            no_lock: false,
        };
        let run = |flood_ms: &[u64]| Run {
            unloaded: cycles(&[1, 1, 2], 3),
            flooded: cycles(flood_ms, 4),
            flood: FloodReport {
                sent: 3000,
                dropped: 0,
                seconds: 3.0,
            },
            ..Run::default()
        };
        let runs = [run(&[1, 2, 4]), run(&[5, 5]), run(&[1, 1, 2, 2])];
        let r = report(&args, 4, 3.0, &runs);
        assert_eq!(r.rows.len(), 3);
        assert_eq!(r.rows[1][0], "engine-one-queue");
        assert_eq!(r.rows[0][1], "1000");
        assert_eq!(r.rows[0][2], "3/4");
        assert_eq!(r.rows[0][3], "1");
        assert_eq!(r.rows[0][9], "x2.00");
        assert!(r.notes.iter().any(|n| n.contains("engine/linux")));
    }
}
