//! `sluice experiment incast`: N bulk senders into one receiver through the software
//! switch's bottleneck port, with a concurrent 64 B RPC flow to the same receiver; DCTCP
//! against NewReno on the engine, side by side in one run (the shape of flextoe.txt
//! Table 4).
//!
//! ```text
//!  sluice-a: engine, the SENDERS ── br0 ── sw-up ┐
//!            (N connections, DCTCP or NewReno)  │ sluice switch (sluice-s)
//!  sluice-c2: Linux `sluice loadgen rpc` ─ sw-c2 ┤
//!            (the RPC flow, closed loop, 64 B)  │
//!  sluice-c1: engine, the RECEIVER ─────── sw-c1 ┘ ← the bottleneck: rate, queue-bytes,
//!            (sink + echo, DCTCP receiver)          ECN threshold K
//! ```
//!
//! - "N senders" are N connections of one engine in sluice-a, each a bulk sender (stream to
//!   the receiver's sink), not N hosts: two shared cores cannot run N engine processes. They
//!   still meet where incast happens, in the switch's egress queue towards the receiver.
//! - The receiver is a second engine, in sluice-c1, on sl-c1 (whose kernel address is
//!   removed, so Linux does not answer for it) at 10.77.0.101. It runs DCTCP, so it echoes
//!   CE per segment (RFC 8257 3.2) — the kernel here has no DCTCP, and a Linux receiver
//!   would latch ECE until CWR (RFC 3168). It accepts ECN only when the sender asks.
//! - The policy under test is the senders': DCTCP (ECN-capable, so the switch marks above K)
//!   against NewReno (not ECN-capable: above the queue's capacity the switch tail-drops).
//! - The RPC flow is a Linux client in sluice-c2 against the receiver's echo: its requests
//!   wait in the bottleneck queue behind the bulk data, its replies return uncongested.
//!   Its p99 with no senders (N = 0) is the unloaded reference.
//! - Per run the switch is started afresh and stopped with SIGTERM; its counters for the
//!   bottleneck port (tail drops, ECN marks, maximum queue depth) are parsed from its report.
//! - Per-connection throughput is what the receiver acknowledged (snd_una) over the measured
//!   window; Jain's index is over those N numbers.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant as WallInstant};

use clap::Args;
use sluice_engine::setup::{Backend, EngineOptions, Transport};
use sluice_engine::{App, AppStatus, EngineError};
use sluice_lab::presets::LabPreset;
use sluice_lab::{client_iface, client_ip, client_ns, Lab, NS_SWITCH, PREFIX_LEN};
use sluice_tcp::{Algorithm, ConnId, Error, Instant, Stack, TcpState};

use super::error::ExperimentError;
use super::fairness::jain;
use super::plot::{Plot, Series};
use super::report::{fmt_num, fmt_ratio, Report};
use super::{lab_workload, Common, LabRun};
use crate::bench::engine_side::{open_with, EngineServer, EngineSpec};
use crate::bench::helpers;
use crate::bench::measure::Latency;
use crate::bench::plan::{Kind, Timing, Workload, PORTS};

/// The receiver's client namespace (sluice-c1).
const RECEIVER: u8 = 1;
/// The RPC client's namespace (sluice-c2).
const RPC_CLIENT: u8 = 2;
/// The engine polls this long with nothing to do before sleeping on its device (two shared
/// cores: a busy-polling engine would starve the switch and the other engine).
const IDLE_BEFORE_SLEEP: Duration = Duration::from_micros(100);

/// `sluice experiment incast`.
#[derive(Args, Debug)]
pub struct IncastArgs {
    /// Size, output directory and seed (of the switch).
    #[command(flatten)]
    pub common: Common,
    /// Sender counts (default 1,2,4,8,16; with --quick 1,4,16).
    #[arg(long, value_delimiter = ',')]
    pub senders: Vec<usize>,
    /// The bottleneck's line rate (the switch's egress towards the receiver), bits/s.
    #[arg(long, default_value = "1g")]
    pub rate: String,
    /// The bottleneck queue's capacity in bytes (tail drop beyond).
    #[arg(long, default_value = "256k")]
    pub queue_bytes: String,
    /// The bottleneck's ECN marking threshold K in bytes.
    #[arg(long, default_value = "30k")]
    pub ecn_k: String,
    /// The engines' device backend: af_xdp, af_packet or tap.
    #[arg(long, default_value = "af_packet")]
    pub backend: Backend,
    /// Run length and the lab lock.
    #[command(flatten)]
    pub lab: LabRun,
}

/// The bottleneck port's counters from the switch's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Frames dropped because the queue was full.
    pub tail_drops: u64,
    /// Frames marked CE.
    pub ecn_marked: u64,
    /// Deepest the queue got, bytes.
    pub max_queue_bytes: u64,
    /// Frames sent out of the port.
    pub forwarded: u64,
}

/// Counters of `port` in `sluice switch`'s SIGTERM report (its last report line).
pub fn parse_port_counters(report: &str, port: &str) -> Option<PortCounters> {
    let prefix = format!("sluice switch: port {port} rx=");
    let line = report.lines().rfind(|l| l.starts_with(&prefix))?;
    let get = |key: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse::<u64>().ok())
    };
    Some(PortCounters {
        tail_drops: get("tail_drops")?,
        ecn_marked: get("ecn_marked")?,
        max_queue_bytes: get("max_queue_bytes")?,
        forwarded: get("forwarded")?,
    })
}

/// One measured cell: N senders under one policy (N = 0: the RPC flow alone).
#[derive(Clone, Debug)]
struct Cell {
    senders: usize,
    policy: &'static str,
    gbps: f64,
    jain: f64,
    rpc: Latency,
    rpc_ops: u64,
    switch: PortCounters,
    timeouts: u64,
}

/// The policies compared: (name, the senders' algorithm).
const POLICIES: [(&str, Algorithm); 2] =
    [("dctcp", Algorithm::Dctcp), ("newreno", Algorithm::NewReno)];

/// Runs the experiment in the switched lab and builds its report.
pub fn run(args: &IncastArgs) -> Result<Report, ExperimentError> {
    let quick = args.common.quick;
    let counts = if !args.senders.is_empty() {
        args.senders.clone()
    } else if quick {
        vec![1, 4, 16]
    } else {
        vec![1, 2, 4, 8, 16]
    };
    if counts.iter().any(|&n| n == 0 || n > 1024) {
        return Err(ExperimentError::Usage("--senders: each in 1..=1024".into()));
    }
    if args.backend == Backend::Sim {
        return Err(ExperimentError::Usage(
            "incast runs in the lab: --backend sim is not supported".into(),
        ));
    }
    let timing = args.lab.timing(quick);
    let bottleneck = format!(
        "{NS_SWITCH}:{}",
        sluice_lab::switched::switch_port(RECEIVER)
    );
    let port_spec = format!(
        "{bottleneck},rate={},queue-bytes={},ecn-k={}",
        args.rate, args.queue_bytes, args.ecn_k
    );
    let setup = Setup {
        backend: args.backend,
        port_spec: port_spec.clone(),
        bottleneck: bottleneck.clone(),
        seed: args.common.seed,
        timing,
    };
    let cells = args.lab.in_lab(
        "incast",
        |lab| {
            lab.up_switched(RPC_CLIENT)
                .and_then(|()| prepare(lab))
                .map_err(|e| lab_workload(&e))
        },
        |_| measure(&setup, &counts),
    )?;
    Ok(build_report(args, &setup, &cells))
}

/// What every run shares.
struct Setup {
    backend: Backend,
    port_spec: String,
    bottleneck: String,
    seed: u64,
    timing: Timing,
}

/// The receiver's namespace loses its kernel address (the engine answers there instead);
/// the RPC client's ports stay above the servers'.
fn prepare(lab: &Lab) -> Result<(), sluice_lab::LabError> {
    let ns = client_ns(RECEIVER);
    lab.ip_in(&ns, &["addr", "flush", "dev", &client_iface(RECEIVER)])?;
    let rpc = client_ns(RPC_CLIENT);
    lab.sysctl(&rpc, "net.ipv4.ip_local_port_range", "10000 65535")?;
    Ok(())
}

/// The receiver engine's options: sl-c1 in sluice-c1 at the client's address, DCTCP.
fn receiver_options(backend: Backend) -> EngineOptions {
    EngineOptions {
        iface: client_iface(RECEIVER),
        ip: client_ip(RECEIVER),
        prefix: PREFIX_LEN,
        netns: Some(client_ns(RECEIVER)),
        transport: Transport {
            congestion_control: Algorithm::Dctcp,
            ..Transport::default()
        },
        ..EngineOptions::lab(backend)
    }
}

/// Every cell: the unloaded RPC flow, then each sender count under each policy
/// (interleaved, so slow drift of the machine hits both alike).
fn measure(setup: &Setup, counts: &[usize]) -> Result<Vec<Cell>, ExperimentError> {
    let bench = |e: &dyn std::fmt::Display| ExperimentError::Workload(e.to_string());
    let spec = EngineSpec {
        backend: setup.backend,
        idle_before_sleep: Some(IDLE_BEFORE_SLEEP),
    };
    let receiver =
        EngineServer::start_with(receiver_options(setup.backend), spec).map_err(|e| bench(&e))?;
    std::thread::sleep(Duration::from_millis(200));
    let mut cells = vec![cell(setup, 0, "unloaded", None)?];
    for &n in counts {
        for (name, algorithm) in POLICIES {
            cells.push(cell(setup, n, name, Some(algorithm))?);
        }
    }
    receiver.stop().map_err(|e| bench(&e))?;
    Ok(cells)
}

/// One run: a fresh switch, N senders (if any) and the RPC flow beside them.
fn cell(
    setup: &Setup,
    n: usize,
    policy: &'static str,
    algorithm: Option<Algorithm>,
) -> Result<Cell, ExperimentError> {
    let bench = |e: &dyn std::fmt::Display| ExperimentError::Workload(e.to_string());
    eprintln!("sluice experiment incast: {n} senders, {policy}");
    let switch = SwitchProc::start(&setup.port_spec, setup.seed)?;
    let senders = match algorithm {
        Some(a) if n > 0 => Some(Senders::start(setup.backend, a, n, setup.timing)?),
        _ => None,
    };
    let rpc_target = SocketAddr::V4(SocketAddrV4::new(client_ip(RECEIVER), PORTS.echo));
    let rpc = helpers::loadgen(
        &client_ns(RPC_CLIENT),
        Workload {
            kind: Kind::Rpc,
            conns: 1,
        },
        rpc_target,
        setup.timing,
    )
    .map_err(|e| bench(&e));
    let bulk = senders.map(Senders::finish).transpose();
    let report = switch.stop()?;
    let (rpc, bulk) = (rpc?, bulk?);
    let switch = parse_port_counters(&report, &setup.bottleneck).ok_or_else(|| {
        ExperimentError::Workload(format!(
            "no counters for {} in the switch's report:\n{report}",
            setup.bottleneck
        ))
    })?;
    let latency = rpc.latency.ok_or_else(|| {
        ExperimentError::Workload(format!(
            "the RPC flow completed no request ({n} senders, {policy})"
        ))
    })?;
    let (gbps, jain_index, timeouts) = match bulk {
        Some(b) => {
            let mbps: Vec<f64> = b
                .per_conn_bytes
                .iter()
                .map(|&x| x as f64 * 8.0 / b.seconds.max(1e-9) / 1e6)
                .collect();
            (mbps.iter().sum::<f64>() / 1e3, jain(&mbps), b.timeouts)
        }
        None => (0.0, f64::NAN, 0),
    };
    Ok(Cell {
        senders: n,
        policy,
        gbps,
        jain: jain_index,
        rpc: latency,
        rpc_ops: rpc.ops,
        switch,
        timeouts,
    })
}

fn build_report(args: &IncastArgs, setup: &Setup, cells: &[Cell]) -> Report {
    let timing = setup.timing;
    let unloaded = cells
        .iter()
        .find(|c| c.senders == 0)
        .map_or(f64::NAN, |c| c.rpc.p99_us);
    let mut report = Report {
        name: "incast".into(),
        setup: vec![
            format!(
                "sluice experiment incast: N bulk senders (N connections of the engine in sluice-a) \
                 into one receiver (the engine in sluice-c1) through sluice switch's port towards it: \
                 rate {}, queue {} B, ECN K {} B",
                args.rate, args.queue_bytes, args.ecn_k
            ),
            format!(
                "  beside them a 64 B closed-loop RPC flow (Linux, sluice-c2) to the receiver's echo; \
                 {} s after {} s warm-up per run; {:?} backend; {} shared CPU cores",
                timing.seconds,
                timing.warmup,
                setup.backend,
                std::thread::available_parallelism().map_or(1, |n| n.get())
            ),
        ],
        columns: [
            "senders",
            "policy",
            "Gbit/s",
            "Jain",
            "rpc p50 us",
            "rpc p99 us",
            "p99/unloaded",
            "rpc ops",
            "tail drops",
            "ECN marks",
            "max queue KB",
            "RTOs",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        ..Report::default()
    };
    let mut series: Vec<Series> = POLICIES
        .iter()
        .map(|(name, _)| Series {
            name: (*name).into(),
            points: Vec::new(),
        })
        .collect();
    let mut reference = Series {
        name: "unloaded".into(),
        points: Vec::new(),
    };
    for c in cells {
        report.rows.push(vec![
            c.senders.to_string(),
            c.policy.to_string(),
            fmt_num(c.gbps),
            if c.jain.is_finite() {
                format!("{:.3}", c.jain)
            } else {
                "n/a".into()
            },
            fmt_num(c.rpc.p50_us),
            fmt_num(c.rpc.p99_us),
            fmt_ratio(c.rpc.p99_us, unloaded),
            c.rpc_ops.to_string(),
            c.switch.tail_drops.to_string(),
            c.switch.ecn_marked.to_string(),
            fmt_num(c.switch.max_queue_bytes as f64 / 1024.0),
            c.timeouts.to_string(),
        ]);
        if c.senders > 0 {
            let x = (c.senders as f64).log2();
            if let Some(s) = series.iter_mut().find(|s| s.name == c.policy) {
                s.points.push((x, c.rpc.p99_us));
            }
            reference.points.push((x, unloaded));
        }
    }
    reference.points.dedup_by(|a, b| a.0 == b.0);
    series.push(reference);
    let largest = cells.iter().map(|c| c.senders).max().unwrap_or(0);
    let verdict = cells
        .iter()
        .find(|c| c.senders == largest && c.policy == "dctcp" && largest > 0)
        .map(|c| {
            let ratio = c.rpc.p99_us / unloaded;
            let met = c.switch.tail_drops == 0 && ratio <= 2.0;
            format!(
                "measured: DCTCP at incast {largest}: {} tail drops, RPC p99 x{ratio:.2} of unloaded \
                 -> {}",
                c.switch.tail_drops,
                if met { "met" } else { "NOT met" }
            )
        });
    report.notes.push(
        "target: with DCTCP at incast 16, no tail drops and RPC p99 within 2x its unloaded value"
            .into(),
    );
    report.notes.extend(verdict);
    report.plot = Some(Plot {
        title: "p99 latency of an RPC flow beside N bulk senders".into(),
        x_label: "senders".into(),
        y_label: "RPC p99 (us)".into(),
        x_categories: Some((0..=10).map(|p| (1u32 << p).to_string()).collect()),
        series,
    });
    report
}

/// `sluice switch --lab` as a child process, with its report collected on SIGTERM.
struct SwitchProc {
    child: Option<Child>,
    lines: mpsc::Receiver<String>,
    reader: Option<JoinHandle<()>>,
}

impl SwitchProc {
    /// Starts the switch over the lab's ports with `port_spec` overriding one, and waits for
    /// its ready line.
    fn start(port_spec: &str, seed: u64) -> Result<SwitchProc, ExperimentError> {
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
    fn stop(mut self) -> Result<String, ExperimentError> {
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

/// What the senders measured.
struct Bulk {
    seconds: f64,
    per_conn_bytes: Vec<u64>,
    timeouts: u64,
}

/// [`Senders::stop`]: keep sending.
const RUN: u8 = 0;
/// [`Senders::stop`]: finish once the measured window has closed.
const FINISH: u8 = 1;
/// [`Senders::stop`]: give up now (a failed run).
const ABORT: u8 = 2;

/// The engine in sluice-a running N bulk connections to the receiver's sink, on its own
/// thread, until told to stop.
struct Senders {
    stop: Arc<AtomicU8>,
    handle: Option<JoinHandle<Result<Bulk, String>>>,
}

impl Senders {
    /// Starts the engine and returns once every connection is established (the measured
    /// window opens after the warm-up from then on).
    fn start(
        backend: Backend,
        algorithm: Algorithm,
        n: usize,
        timing: Timing,
    ) -> Result<Senders, ExperimentError> {
        let stop = Arc::new(AtomicU8::new(RUN));
        let (ready_tx, ready_rx) = mpsc::channel();
        let flag = Arc::clone(&stop);
        let handle = thread::Builder::new()
            .name("incast-senders".into())
            .spawn(move || -> Result<Bulk, String> {
                let opts = EngineOptions {
                    transport: Transport {
                        congestion_control: algorithm,
                        ..Transport::default()
                    },
                    ..EngineOptions::lab(backend)
                };
                let spec = EngineSpec {
                    backend,
                    idle_before_sleep: Some(IDLE_BEFORE_SLEEP),
                };
                let mut engine = open_with(&opts, spec, None)?;
                let timeouts0 = engine.stack.counters().timeouts;
                let mut app = BulkSenders::new(n, client_ip(RECEIVER), timing, flag, ready_tx);
                // A bound on the whole run, should the stop flag never come.
                let limit = Duration::from_secs_f64(timing.seconds + timing.warmup + 120.0);
                engine
                    .run(&mut app, Some(limit))
                    .map_err(|e| e.to_string())?;
                let (seconds, per_conn_bytes) = app
                    .measured
                    .ok_or_else(|| format!("the {n} senders did not finish their window"))?;
                Ok(Bulk {
                    seconds,
                    per_conn_bytes,
                    timeouts: engine.stack.counters().timeouts - timeouts0,
                })
            })
            .map_err(|e| ExperimentError::Io("spawn the senders' engine".into(), e))?;
        let senders = Senders {
            stop,
            handle: Some(handle),
        };
        match ready_rx.recv_timeout(Duration::from_secs(20)) {
            Ok(()) => Ok(senders),
            // The thread ended (its error is in finish) or hangs: stop it either way.
            Err(_) => match senders.end(ABORT) {
                Ok(_) => Err(ExperimentError::Workload(
                    "the senders never became ready".into(),
                )),
                Err(e) => Err(e),
            },
        }
    }

    /// Stops the senders (after their window) and returns what they measured.
    fn finish(self) -> Result<Bulk, ExperimentError> {
        self.end(FINISH)
    }

    fn end(mut self, how: u8) -> Result<Bulk, ExperimentError> {
        self.stop.store(how, Ordering::Relaxed);
        match self.handle.take().map(JoinHandle::join) {
            Some(Ok(r)) => r.map_err(ExperimentError::Workload),
            Some(Err(_)) => Err(ExperimentError::Workload(
                "the senders' engine thread panicked".into(),
            )),
            None => Err(ExperimentError::Workload(
                "the senders already finished".into(),
            )),
        }
    }
}

impl Drop for Senders {
    fn drop(&mut self) {
        self.stop.store(ABORT, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// N connections sending as fast as the window lets them; measures what each got
/// acknowledged (snd_una) over the window.
struct BulkSenders {
    n: usize,
    receiver: Ipv4Addr,
    timing: Timing,
    stop: Arc<AtomicU8>,
    ready: Option<mpsc::Sender<()>>,
    conns: Vec<ConnId>,
    began: Option<WallInstant>,
    window: Option<(WallInstant, WallInstant)>,
    una_start: Vec<u32>,
    measured: Option<(f64, Vec<u64>)>,
    chunk: Vec<u8>,
}

impl BulkSenders {
    fn new(
        n: usize,
        receiver: Ipv4Addr,
        timing: Timing,
        stop: Arc<AtomicU8>,
        ready: mpsc::Sender<()>,
    ) -> Self {
        BulkSenders {
            n,
            receiver,
            timing,
            stop,
            ready: Some(ready),
            conns: Vec::new(),
            began: None,
            window: None,
            una_start: Vec::new(),
            measured: None,
            chunk: vec![0x5a; 64 * 1024],
        }
    }

    fn fail(&self, what: impl std::fmt::Display) -> EngineError {
        EngineError::App(format!("incast sender to {}: {what}", self.receiver))
    }

    fn snd_una(&self, stack: &Stack) -> Result<Vec<u32>, EngineError> {
        self.conns
            .iter()
            .map(|&c| stack.info(c).map(|i| i.snd_una.0).map_err(|e| self.fail(e)))
            .collect()
    }
}

impl App for BulkSenders {
    fn poll(&mut self, stack: &mut Stack, core_now: Instant) -> Result<AppStatus, EngineError> {
        let now = WallInstant::now();
        let stop = self.stop.load(Ordering::Relaxed);
        if stop == ABORT || (stop == FINISH && self.measured.is_some()) {
            for &c in &self.conns {
                let _ = stack.abort(c);
            }
            return Ok(AppStatus::Done);
        }
        if self.began.is_none() {
            self.began = Some(now);
            for _ in 0..self.n {
                let c = stack
                    .connect(core_now, self.receiver, PORTS.sink)
                    .map_err(|e| self.fail(e))?;
                self.conns.push(c);
            }
        }
        let mut established = 0;
        for i in 0..self.conns.len() {
            let c = self.conns[i];
            if let Some(e) = stack.error(c).map_err(|e| self.fail(e))? {
                return Err(self.fail(e));
            }
            match stack.state(c).map_err(|e| self.fail(e))? {
                TcpState::SynSent | TcpState::SynReceived => continue,
                _ => established += 1,
            }
            if self.window.is_none() {
                continue;
            }
            loop {
                match stack.send(c, &self.chunk) {
                    Ok(k) if k == self.chunk.len() => {}
                    Ok(_) | Err(Error::WouldBlock) => break,
                    Err(e) => return Err(self.fail(e)),
                }
            }
        }
        match self.window {
            None if established == self.n => {
                let start = now + Duration::from_secs_f64(self.timing.warmup);
                let end = start + Duration::from_secs_f64(self.timing.seconds);
                self.window = Some((start, end));
                if let Some(tx) = self.ready.take() {
                    let _ = tx.send(());
                }
            }
            None if self
                .began
                .is_some_and(|b| now - b > Duration::from_secs(10)) =>
            {
                return Err(self.fail("connections did not open in time"));
            }
            None => {}
            Some((start, _)) if self.una_start.is_empty() && now >= start => {
                self.una_start = self.snd_una(stack)?;
            }
            Some((start, end)) if self.measured.is_none() && now >= end => {
                let una = self.snd_una(stack)?;
                let bytes = una
                    .iter()
                    .zip(&self.una_start)
                    .map(|(&e, &s)| u64::from(e.wrapping_sub(s)))
                    .collect();
                self.measured = Some(((now - start).as_secs_f64(), bytes));
            }
            Some(_) => {}
        }
        Ok(AppStatus::Running)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_switch_report() {
        let report = "sluice switch: port sluice-s:sw-c1 rate=1000000000bit/s queue_bytes=262144\n\
            sluice switch: ready, 3 ports\n\
            sluice switch: port sluice-s:sw-up rx=5 rx_bytes=300 forwarded=9 forwarded_bytes=1 \
            tail_drops=1 ecn_marked=2 lost=0 max_queue_bytes=3\n\
            sluice switch: port sluice-s:sw-c1 rx=5 rx_bytes=300 forwarded=1234 \
            forwarded_bytes=1 tail_drops=7 ecn_marked=42 lost=0 lost_random=0 \
            max_queue_bytes=31000 max_queue_packets=21\n";
        assert_eq!(
            parse_port_counters(report, "sluice-s:sw-c1"),
            Some(PortCounters {
                tail_drops: 7,
                ecn_marked: 42,
                max_queue_bytes: 31000,
                forwarded: 1234,
            })
        );
        assert_eq!(parse_port_counters(report, "sluice-s:sw-c2"), None);
        assert_eq!(parse_port_counters("garbage", "sluice-s:sw-c1"), None);
    }
}
