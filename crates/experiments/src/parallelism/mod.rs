//! `sluice experiment parallelism` (issue 20; flextoe.txt Table 3): where the multi-core
//! data-path's throughput comes from. 64 connections with one 2 KB RPC in flight each (Linux
//! clients in sluice-b) against the engine's echo server in sluice-a under each layout
//! (`sluice echo --cores N --layout L`), and Linux's echo in sluice-k in the same run; then
//! the sequencing step's microbenchmark; then the scaling table: rpc (64 B) over 1 to 256
//! connections on 1 and 2 data-path cores against Linux, and redis-benchmark's 50 clients
//! against redis-server over `sluice engine --cores 1|2` and on Linux ([`redis`]). Ops/s,
//! p50 and p99.99, and CPU per operation (the engine process's threads summed; Linux's echo
//! server process, its softirq time not included; the redis rows add redis-server's and
//! redis-benchmark's).

pub mod echo;
pub mod redis;
pub mod rows;
pub mod table;

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use clap::Args;
use sluice_bench::{run_loadgen_sized, KernelServers, Kind, Measurement, Timing, Workload, PORTS};
use sluice_engine::setup::Backend;
use sluice_lab::{ENGINE_IP, KERNEL_IP, NS_CLIENT, NS_KERNEL};

use crate::error::ExperimentError;
use crate::report::Report;
use crate::{lab_workload, Common, LabRun};
use echo::EngineEcho;
pub use redis::REDIS;
pub use rows::{Answered, Row, RowError, Server, SCALING, TABLE3};
pub use table::report;

/// `sluice experiment parallelism`.
#[derive(Args, Debug)]
pub struct ParallelismArgs {
    /// Size, output directory and seed.
    #[command(flatten)]
    pub common: Common,
    /// The engine's device backend: af_packet or af_xdp.
    #[arg(long, default_value = "af_packet")]
    pub backend: Backend,
    /// Run length and the lab lock.
    #[command(flatten)]
    pub lab: LabRun,
}

/// Connections of the parallelism table, one RPC in flight each.
const TABLE3_CONNS: usize = 64;
/// Bytes of the parallelism table's requests and responses.
const TABLE3_BYTES: usize = 2048;
/// Bytes of the scaling table's requests and responses (the bench's rpc).
const RPC_BYTES: usize = 64;

/// Runs the clients against `ip` and returns their measurement and the server's CPU
/// seconds over the same window (`cpu` reads the server's total so far).
fn load(
    ip: Ipv4Addr,
    conns: usize,
    bytes: usize,
    timing: Timing,
    cpu: &dyn Fn() -> f64,
) -> Result<(Measurement, f64), RowError> {
    let target = SocketAddr::V4(SocketAddrV4::new(ip, PORTS.echo));
    let w = Workload {
        kind: Kind::Rpc,
        conns,
    };
    let before = cpu();
    let m = run_loadgen_sized(NS_CLIENT, w, target, timing, bytes)
        .map_err(|e| RowError::Failed(e.to_string()))?;
    // The warm-up is inside the CPU window: scale it to the measured part.
    let whole = timing.seconds + timing.warmup;
    let spent = (cpu() - before) * timing.seconds / whole.max(1e-9);
    if m.ops == 0 {
        return Err(RowError::Failed("no RPC completed".into()));
    }
    Ok((m, spent))
}

/// Runs every row; a failed row is kept (and printed as failed), so the rest still run.
fn measure(
    backend: Backend,
    timing: Timing,
    scaling_conns: &[usize],
    redis_requests: u64,
) -> Result<Vec<Row>, ExperimentError> {
    let exe = std::env::current_exe()
        .map_err(|e| ExperimentError::Io("find the sluice executable".into(), e))?;
    let mut rows = Vec::new();
    // Each engine row: start its echo, run its loads, stop it.
    let mut engine_rows = |table: &'static str, server: Server, loads: &[(usize, usize)]| {
        let Server::Engine { cores, layout } = server else {
            return;
        };
        eprintln!("sluice experiment parallelism: {}", server.name());
        match EngineEcho::start(&exe, backend, cores, layout) {
            Ok(echo) => {
                for &(conns, bytes) in loads {
                    let result = load(ENGINE_IP, conns, bytes, timing, &|| echo.cpu_seconds());
                    rows.push(Row {
                        table,
                        server,
                        conns,
                        bytes,
                        result,
                        answered: None,
                    });
                }
            }
            Err(e) => {
                for &(conns, bytes) in loads {
                    rows.push(Row {
                        table,
                        server,
                        conns,
                        bytes,
                        result: Err(RowError::Failed(e.to_string())),
                        answered: None,
                    });
                }
            }
        }
    };
    for server in TABLE3.iter().filter(|s| **s != Server::Linux) {
        engine_rows("parallelism", *server, &[(TABLE3_CONNS, TABLE3_BYTES)]);
    }
    let scaling_loads: Vec<(usize, usize)> =
        scaling_conns.iter().map(|&c| (c, RPC_BYTES)).collect();
    for server in SCALING.iter().filter(|s| **s != Server::Linux) {
        engine_rows("scaling", *server, &scaling_loads);
    }
    // redis-server through `sluice run` on each engine, then on Linux.
    rows.extend(redis::measure(&exe, backend, redis_requests));
    eprintln!("sluice experiment parallelism: linux");
    let kernel = KernelServers::start(NS_KERNEL).map_err(|e| lab_workload(&e))?;
    let linux = |table: &'static str, conns: usize, bytes: usize| Row {
        table,
        server: Server::Linux,
        conns,
        bytes,
        result: load(KERNEL_IP, conns, bytes, timing, &|| kernel.cpu_seconds()),
        answered: None,
    };
    rows.push(linux("parallelism", TABLE3_CONNS, TABLE3_BYTES));
    for &c in scaling_conns {
        rows.push(linux("scaling", c, RPC_BYTES));
    }
    drop(kernel);
    Ok(rows)
}

/// Runs the experiment in the lab and builds its report.
pub fn run(args: &ParallelismArgs) -> Result<Report, ExperimentError> {
    let quick = args.common.quick;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 {
        return Err(ExperimentError::Usage(
            "sluice experiment parallelism compares 1 and 2 data-path cores: this machine has 1"
                .into(),
        ));
    }
    let timing = if quick && args.lab.seconds.is_none() {
        Timing {
            seconds: 0.3,
            warmup: 0.1,
        }
    } else {
        args.lab.timing(quick)
    };
    let scaling_conns: Vec<usize> = if quick {
        vec![1, 16]
    } else {
        vec![1, 16, 64, 256]
    };
    let redis_requests = redis::requests(quick, timing);
    let rows = args.lab.in_lab(
        "parallelism",
        |lab| {
            lab.up().map_err(|e| lab_workload(&e))?;
            sluice_bench::prepare(lab).map_err(|e| lab_workload(&e))
        },
        |_| measure(args.backend, timing, &scaling_conns, redis_requests),
    )?;
    let sequencing = sluice_bench::sequencing::table(if quick { 0.02 } else { 0.5 });
    Ok(report(
        args.backend,
        timing,
        cores,
        redis_requests,
        &rows,
        &sequencing,
    ))
}
