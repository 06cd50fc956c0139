//! sluice-bench: `sluice bench`, every workload against the engine and against Linux kernel TCP in one run,
//! in the namespace lab, with the same Linux client program; prints a table and JSON.
//!
//! - Server role: `sluice loadgen` in sluice-b drives the engine (10.77.0.1, sluice-a) and
//!   then `sluice kserve` (10.77.0.3, sluice-k).
//! - Client role: the engine (sluice-a) and then `sluice loadgen` in sluice-k drive
//!   `sluice kserve` in sluice-b (10.77.0.2). Either way the two sides are one veth and the
//!   bridge away from their peer.
//! - Outside programs ([`outside`], issue 18): Debian's sockperf (64 B ping-pong and
//!   throughput) and memcached with memcaslap, the standard server on Linux (sluice-k) and
//!   under `sluice run` on the engine, the same client in sluice-b; CPU per operation of
//!   both sides beside every throughput.
//!
//! Also the unmodified-program harness ([`apps`]: `sluice bench apps`, `sluice appcheck`),
//! the Linux helpers ([`loadgen`], [`kserve`]), and the pieces the experiments build their
//! lab runs from (engine sites and servers, the kernel servers, the load generator).
#![forbid(unsafe_code)]

pub mod apps;
mod cells;
pub mod cpu;
mod engine_client;
mod engine_side;
mod error;
pub mod extensions;
mod helpers;
pub mod kserve;
mod lab_run;
pub mod loadgen;
mod measure;
pub mod mtp;
mod op_rows;
pub mod outside;
mod plan;
mod report;
pub mod sequencing;
pub mod shared_log;
pub mod sockperf;
pub mod verbs;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use sluice_engine::setup::Backend;
use sluice_lab::{Lab, CLIENT_IP, ENGINE_IP, KERNEL_IP, NS_CLIENT, NS_KERNEL};

// The bench's public API: what the experiments build their runs from.
pub use engine_side::{
    open_with, run_client, run_client_at, run_client_counted, EngineCounters, EngineServer,
    EngineSite, EngineSpec,
};
pub use error::{BenchError, EngineFailure};
pub use helpers::{run_loadgen, run_loadgen_sized, KernelServers};
pub use measure::{cpu_seconds, current_thread_stat, Latency, Measurement};
pub use plan::{Kind, Timing, Workload, PORTS, WORKLOADS};
use report::{Report, Role, Row, Side};

/// `sluice bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Short runs for CI smoke tests (well under 30 s in all).
    #[arg(long)]
    quick: bool,
    /// Print JSON on stdout (the table goes to stderr).
    #[arg(long)]
    json: bool,
    /// Also write the JSON to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Measured seconds per run (default 5, or 0.4 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// The engine's device backend: af_xdp, af_packet or tap.
    #[arg(long, default_value = "af_packet")]
    backend: Backend,
    /// The engine sleeps on its device after this many microseconds with nothing to do
    /// (polling, then interrupts: on two shared cores a busy-polling engine starves the
    /// clients it serves); `--busy-poll` never sleeps.
    #[arg(long, default_value_t = 100, conflicts_with = "busy_poll")]
    engine_idle_us: u64,
    /// Busy-poll one core for the whole run instead of sleeping when idle.
    #[arg(long)]
    busy_poll: bool,
    /// Run only these workloads (comma-separated names: rpc-1, rpc-16, stream-up,
    /// stream-down, connect-4, sockperf-pp, sockperf-tp, sockperf-wake, memcached); all by default.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Extra arguments for the outside rows' `sluice engine` (repeat it:
    /// `--engine-arg=--app-idle-us --engine-arg=100`); `--idle-us` here replaces the one
    /// `--engine-idle-us` gives.
    #[arg(long = "engine-arg", allow_hyphen_values = true)]
    engine_args: Vec<String>,
    /// Leave the lab up afterwards.
    #[arg(long)]
    keep_lab: bool,
    /// The caller already holds the lab lock (tests holding a LabGuard).
    #[arg(long, hide = true)]
    no_lock: bool,
}

/// Runs `sluice bench`.
pub fn run(args: &BenchArgs) -> Result<(), BenchError> {
    if args.backend == Backend::Sim {
        // The bench compares against Linux on the lab's wire; the simulator has no Linux.
        return Err(BenchError::Usage(
            "the bench runs on the lab's wire against Linux: --backend sim is not supported \
             (use `sluice echo|sink|source --backend sim`)"
                .into(),
        ));
    }
    let report = lab_run::in_lab("bench", args.no_lock, args.keep_lab, |lab| {
        prepare(lab)?;
        let bridge = lab.bridge_netfilter()?;
        let mut report = measure_all(args)?;
        report.setup.insert("bridge", bridge.to_string());
        Ok::<_, BenchError>(report)
    })?;
    let json = serde_json::to_string_pretty(&report).map_err(|e| BenchError::Helper {
        what: "JSON".into(),
        detail: e.to_string(),
    })?;
    if let Some(path) = &args.out {
        std::fs::write(path, &json)
            .map_err(|e| BenchError::io(format!("write {}", path.display()), e))?;
    }
    if args.json {
        eprint!("{}", report.table());
        println!("{json}");
    } else {
        print!("{}", report.table());
    }
    // An engine row that failed is a finding; a Linux baseline that failed is a broken run.
    let linux = report.outside.failed_on(apps::Side::Linux);
    if linux.is_empty() {
        Ok(())
    } else {
        Err(BenchError::Helper {
            what: "the outside programs' Linux baseline".into(),
            detail: format!("failed for {} (reasons above)", linux.join(", ")),
        })
    }
}

/// Linux clients make a connection per request in the connect workload and close first:
/// let them reuse their TIME-WAIT ports (with timestamps, RFC 7323) and use more ports, all
/// above the bench's server ports (a client's TIME-WAIT there would block a server's bind).
pub fn prepare(lab: &Lab) -> Result<(), BenchError> {
    for ns in [NS_CLIENT, NS_KERNEL] {
        lab.sysctl(ns, "net.ipv4.tcp_tw_reuse", "1")?;
        lab.sysctl(ns, "net.ipv4.ip_local_port_range", "10000 65535")?;
    }
    Ok(())
}

/// The backend as the command line spells it.
fn backend_name(b: Backend) -> &'static str {
    match b {
        Backend::AfPacket => "af_packet",
        Backend::Tap => "tap",
        Backend::AfXdp => "af_xdp",
        Backend::Sim => "sim",
    }
}

/// Counts runs for progress lines.
struct Progress {
    done: usize,
    total: usize,
    began: Instant,
}

impl Progress {
    fn start(&mut self, role: Role, side: Side, w: Workload, server: SocketAddr) {
        self.done += 1;
        eprint!(
            "[{:>2}/{}] {:>5.1}s  {:?} role, {:?} side: {} ({} conn) -> {} ... ",
            self.done,
            self.total,
            self.began.elapsed().as_secs_f64(),
            role,
            side,
            w.name(),
            w.conns,
            server
        );
    }
}

fn addr(ip: Ipv4Addr, w: Workload) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(ip, w.port()))
}

/// Checks a row measured something and prints it.
fn finish(row: Row) -> Result<Row, BenchError> {
    let ok = !row.metrics.is_empty() && row.metrics.values().all(|v| v.is_finite() && *v > 0.0);
    eprintln!("{}", row.summary());
    if ok {
        Ok(row)
    } else {
        Err(BenchError::Empty(format!(
            "{:?} role, {:?} side, {}",
            row.role, row.side, row.workload
        )))
    }
}

/// Runs every workload in both roles on both sides, then the outside programs.
fn measure_all(args: &BenchArgs) -> Result<Report, BenchError> {
    let timing = Timing::new(args.quick, args.seconds);
    let wanted = |name: &str| args.only.is_empty() || args.only.iter().any(|o| o == name);
    let workloads: Vec<Workload> = WORKLOADS
        .into_iter()
        .filter(|w| wanted(&w.name()))
        .collect();
    let outside_workloads: Vec<outside::Workload> = outside::Workload::ALL
        .into_iter()
        .filter(|w| wanted(w.name()))
        .collect();
    if workloads.is_empty() && outside_workloads.is_empty() {
        let names: Vec<String> = WORKLOADS
            .iter()
            .map(|w| w.name())
            .chain(outside::Workload::ALL.iter().map(|w| w.name().to_string()))
            .collect();
        return Err(BenchError::Usage(format!(
            "--only names no workload; they are {}",
            names.join(", ")
        )));
    }
    let spec = engine_side::EngineSpec {
        backend: args.backend,
        idle_before_sleep: (!args.busy_poll)
            .then(|| std::time::Duration::from_micros(args.engine_idle_us)),
    };
    let rows = if workloads.is_empty() {
        Vec::new()
    } else {
        measure_own(spec, &workloads, timing)?
    };
    let outside_table = if outside_workloads.is_empty() {
        outside::OutsideTable::default()
    } else {
        measure_outside(args, &outside_workloads, timing)?
    };
    let mut setup = BTreeMap::new();
    setup.insert(
        "engine",
        format!(
            "sluice engine, {} backend, one thread {} (embedded apps); \
             as a client in connect-N: TIME-WAIT 1 s, ports 10000-65535",
            backend_name(args.backend),
            if args.busy_poll {
                "busy-polling one core".to_string()
            } else {
                format!(
                    "polling, sleeping on the device after {} us idle",
                    args.engine_idle_us
                )
            }
        ),
    );
    setup.insert(
        "linux",
        "Linux kernel TCP, sluice kserve / sluice loadgen: a thread per connection, \
         scheduled on any core; clients with tcp_tw_reuse=1, ports 10000-65535"
            .to_string(),
    );
    if !outside_table.rows.is_empty() {
        setup.insert(
            "outside",
            format!(
                "the outside rows' Linux baseline is the standard program (sockperf server, \
                 memcached) in sluice-k, the rows above use sluice kserve as a second one; on \
                 the engine the same program runs under `sluice run` on `sluice engine --lab \
                 --backend {} {}` (the service engine; application threads poll 10 ms before \
                 sleeping at most, less while their core is contended); clients in sluice-b: \
                 sockperf pp/tp --tcp -m {} (pp with --full-rtt: round-trip percentiles; \
                 sockperf-wake: pp at --mps {}, every ping finding the server side asleep), \
                 memcaslap -T 1 -c {}",
                backend_name(args.backend),
                service_engine_args(args).join(" "),
                outside::rows::MESSAGE_BYTES,
                outside::rows::WAKE_PINGS_PER_SECOND,
                outside::rows::MEMCASLAP_CONCURRENCY,
            ),
        );
    }
    setup.insert(
        "clients",
        "sluice loadgen on kernel sockets (sluice-b for the server role, sluice-k for the \
         Linux client side of the client role)"
            .to_string(),
    );
    let mut report = Report {
        backend: backend_name(args.backend).to_string(),
        quick: args.quick,
        seconds: timing.seconds,
        warmup: timing.warmup,
        machine_cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        setup,
        results: rows,
        ratios: Vec::new(),
        outside: outside_table,
    };
    report.compute_ratios();
    Ok(report)
}

/// The bench's own workloads (loadgen and kserve, the engine embedded): both roles, both
/// sides.
fn measure_own(
    spec: engine_side::EngineSpec,
    workloads: &[Workload],
    timing: Timing,
) -> Result<Vec<Row>, BenchError> {
    let mut p = Progress {
        done: 0,
        total: workloads.len() * 4,
        began: Instant::now(),
    };
    let mut rows = Vec::new();

    // Server role, engine side: Linux clients in sluice-b against the engine.
    let server = engine_side::EngineServer::start(spec)?;
    std::thread::sleep(std::time::Duration::from_millis(200));
    for &w in workloads {
        let target = addr(ENGINE_IP, w);
        p.start(Role::Server, Side::Engine, w, target);
        let cpu0 = server.cpu_seconds();
        let machine0 = MachineCpu::now();
        let m = run_loadgen(NS_CLIENT, w, target, timing)?;
        let mut row = Row::new(Role::Server, Side::Engine, w, target.to_string(), &m);
        row.server_cores = (server.cpu_seconds() - cpu0) / (timing.seconds + timing.warmup);
        machine0.set_cores_since(&mut row, timing);
        rows.push(finish(row)?);
    }
    server.stop()?;

    // Server role, Linux side: the same clients against kernel servers in sluice-k.
    let kernel = KernelServers::start(NS_KERNEL)?;
    for &w in workloads {
        let target = addr(KERNEL_IP, w);
        p.start(Role::Server, Side::Linux, w, target);
        let cpu0 = kernel.cpu_seconds();
        let machine0 = MachineCpu::now();
        let m = run_loadgen(NS_CLIENT, w, target, timing)?;
        let mut row = Row::new(Role::Server, Side::Linux, w, target.to_string(), &m);
        row.server_cores = (kernel.cpu_seconds() - cpu0) / (timing.seconds + timing.warmup);
        machine0.set_cores_since(&mut row, timing);
        rows.push(finish(row)?);
    }
    drop(kernel);

    // Client role: the engine, then Linux clients in sluice-k, against kernel servers in sluice-b.
    let kernel = KernelServers::start(NS_CLIENT)?;
    for &w in workloads {
        let target = addr(CLIENT_IP, w);
        for side in [Side::Engine, Side::Linux] {
            p.start(Role::Client, side, w, target);
            let cpu0 = kernel.cpu_seconds();
            let machine0 = MachineCpu::now();
            let m = match side {
                Side::Engine => engine_side::run_client(spec, w, CLIENT_IP, w.port(), timing)?,
                Side::Linux => run_loadgen(NS_KERNEL, w, target, timing)?,
            };
            let mut row = Row::new(Role::Client, side, w, target.to_string(), &m);
            row.server_cores = (kernel.cpu_seconds() - cpu0) / (timing.seconds + timing.warmup);
            machine0.set_cores_since(&mut row, timing);
            rows.push(finish(row)?);
        }
    }
    drop(kernel);
    Ok(rows)
}

/// The machine's busy and softirq CPU seconds at one instant (/proc/stat).
struct MachineCpu {
    busy: Option<f64>,
    softirq: Option<f64>,
}

impl MachineCpu {
    fn now() -> MachineCpu {
        MachineCpu {
            busy: cpu::busy_seconds(),
            softirq: cpu::softirq_seconds(),
        }
    }

    /// Sets `row`'s machine-wide busy and softirq cores since `self`, over a run's window.
    fn set_cores_since(&self, row: &mut Row, timing: Timing) {
        let now = MachineCpu::now();
        let window = timing.seconds + timing.warmup;
        let cores = |a: Option<f64>, b: Option<f64>| {
            a.zip(b).map_or(0.0, |(a, b)| (b - a).max(0.0) / window)
        };
        row.busy_cores = cores(self.busy, now.busy);
        row.softirq_cores = cores(self.softirq, now.softirq);
    }
}

/// The outside programs' rows: the service engine (`sluice engine --lab`, polling as the
/// embedded one: `--idle-us`) under `sluice run`, against Linux.
fn measure_outside(
    args: &BenchArgs,
    workloads: &[outside::Workload],
    timing: Timing,
) -> Result<outside::OutsideTable, BenchError> {
    let exe =
        std::env::current_exe().map_err(|e| BenchError::io("find the sluice executable", e))?;
    let harness = |e: apps::AppsError| BenchError::Helper {
        what: "the outside programs' harness".into(),
        detail: e.to_string(),
    };
    let h = apps::Harness::new(exe, backend_name(args.backend))
        .map_err(harness)?
        .with_engine_args(&service_engine_args(args));
    // sockperf's -t and memcaslap's -t take whole seconds.
    let seconds = (timing.seconds + timing.warmup).ceil().max(1.0) as u32;
    Ok(outside::measure_all(&h, workloads, seconds))
}

/// `sluice engine` flags for the outside rows: the bench's idle policy, then `--engine-arg`s.
fn service_engine_args(args: &BenchArgs) -> Vec<String> {
    let mut flags = Vec::new();
    if !args.engine_args.iter().any(|a| a.starts_with("--idle-us")) {
        // --busy-poll: an idle spell longer than any run.
        let idle_us = if args.busy_poll {
            u64::from(u32::MAX)
        } else {
            args.engine_idle_us
        };
        flags.extend(["--idle-us".to_string(), idle_us.to_string()]);
    }
    flags.extend(args.engine_args.iter().cloned());
    flags
}
