//! sluice-experiments: `sluice experiment`, the papers' experiments, each printing a table, writing a CSV and a
//! PNG plot, and comparing its variants side by side in one run.
//! The lab experiments build their runs from sluice-bench's public API.
#![forbid(unsafe_code)]

pub mod drain;
pub mod error;
pub mod fabric;
pub mod fairness;
pub mod flexins;
pub mod flexins_offload;
pub mod flows;
pub mod impair;
pub mod incast;
pub mod loss;
pub mod million;
pub mod mtp;
pub mod netstat;
pub mod ns3_crosscheck;
pub mod ooo;
pub mod parallelism;
pub mod plot;
pub mod proxy;
pub mod report;
pub mod short_conns;
pub mod soak;
pub mod sockmap_proxy;
pub mod switch_thread;
pub mod switched_bulk;
pub mod synflood;

use std::path::PathBuf;

use clap::{Args, Subcommand};
use sluice_lab::{Lab, LabLock};
use sluice_tcp::{Algorithm, Config};

use sluice_bench::Timing;

use error::ExperimentError;

/// Options every experiment takes.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// A small size that finishes in seconds (what CI runs).
    #[arg(long)]
    pub quick: bool,
    /// Directory for the CSV and PNG.
    #[arg(long, default_value = "experiments")]
    pub out: PathBuf,
    /// Seed for the workload and the simulator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Options every lab experiment takes.
#[derive(Args, Debug, Clone, Default)]
pub struct LabRun {
    /// Measured seconds per run (default 5; with --quick 1).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// The caller already holds the lab lock (tests holding a LabGuard).
    #[arg(long, hide = true)]
    pub no_lock: bool,
}

impl LabRun {
    /// How long each run lasts: `--seconds` after a warm-up, shorter with `--quick`.
    pub fn timing(&self, quick: bool) -> Timing {
        Timing {
            seconds: self.seconds.unwrap_or(if quick { 1.0 } else { 5.0 }),
            warmup: if quick { 0.5 } else { 1.0 },
        }
    }

    /// Runs `body` in the lab: needs root, takes the lab lock unless the caller holds it,
    /// brings the lab up with `up`, and takes it down afterwards whatever happened.
    pub fn in_lab<T>(
        &self,
        name: &str,
        up: impl FnOnce(&Lab) -> Result<(), ExperimentError>,
        body: impl FnOnce(&Lab) -> Result<T, ExperimentError>,
    ) -> Result<T, ExperimentError> {
        sluice_lab::check_root().map_err(|e| lab_workload(&e))?;
        let _lock = if self.no_lock {
            None
        } else {
            Some(LabLock::acquire().map_err(|e| lab_workload(&e))?)
        };
        let lab = Lab::new();
        let result = up(&lab).and_then(|()| body(&lab));
        if let Err(e) = lab.down() {
            eprintln!("sluice experiment {name}: tearing the lab down failed: {e}");
        }
        result
    }
}

/// A lab or bench failure as the experiment's.
pub fn lab_workload(e: &dyn std::fmt::Display) -> ExperimentError {
    ExperimentError::Workload(e.to_string())
}

/// The experiments.
#[derive(Subcommand, Debug)]
pub enum ExperimentCommand {
    /// Out-of-order fidelity in a simulated leaf-spine fabric (Laminar Table 2).
    Ooo(ooo::OooArgs),
    /// One core holding a million idle connections from simulated peers: memory per
    /// connection, and the cost per segment against 1,000 connections (the simulator).
    Million(million::MillionArgs),
    /// 1 to 1024 bulk connections on the engine and on Linux: per-connection shares and
    /// Jain's index (needs root: the lab).
    Fairness(fairness::FairnessArgs),
    /// Goodput of one connection against random loss at the switch, engine and Linux as
    /// sender and receiver, and the go-back-N baseline (needs root: the switched lab).
    Loss(loss::LossArgs),
    /// Goodput of one connection under each of the switch's impairments (loss, reordering,
    /// corruption, duplication), the engine as sender and receiver beside Linux->Linux, with
    /// the ratio, CPU per byte and where the engine's time goes (needs root: the switched lab).
    Impair(impair::ImpairArgs),
    /// 1 to 16 bulk senders into one receiver through the switch's ECN-marking bottleneck,
    /// beside an RPC flow: DCTCP against NewReno (flextoe.txt Table 4; needs root: the lab).
    Incast(incast::IncastArgs),
    /// Legitimate connect/echo/close cycles through a spoofed SYN flood, the engine's echo
    /// against Linux's: success during the flood and connect latency (needs root: the lab).
    Synflood(synflood::SynfloodArgs),
    /// 64 connections with one 2 KB RPC in flight against the engine's echo under each
    /// multi-core layout, the sequencing step, rpc over 1 to 256 connections on 1 and 2
    /// data-path cores and redis-benchmark's 50 clients against redis-server over the service
    /// on 1 and 2 cores, Linux in the same run (flextoe.txt Table 3; needs root: the lab).
    Parallelism(parallelism::ParallelismArgs),
    /// A new connection per request (acceltcp.txt Figure 10): nginx and wrk with
    /// `Connection: close`, on Linux and on the engine with and without teardown offload
    /// (needs root: the lab).
    ShortConns(short_conns::ShortConnsArgs),
    /// An L7 proxy between wrk and nginx (acceltcp.txt Figures 12-13): `sluice proxy` with
    /// and without splicing against HAProxy and nginx's stream proxy (needs root: the lab).
    Proxy(proxy::ProxyArgs),
    /// One long flow over a path alternating between 100 and 10 Gbit/s every 384 us: MTP's
    /// per-pathlet windows against DCTCP (mtp.txt 5.1, Figure 5; the simulator).
    MtpMultipath(mtp::multipath::MultipathArgs),
    /// Tail flow completion times over two unequal paths: ECMP, packet spraying and MTP's
    /// message-aware balancer (mtp.txt 5.2, Figure 6; the simulator).
    MtpBalance(mtp::balance::BalanceArgs),
    /// Two tenants on one link, one sending 8x the messages: DCTCP with a shared queue and
    /// with a queue per tenant against MTP's fair share (mtp.txt 5.3, Figure 7; the simulator).
    MtpIsolation(mtp::isolation::IsolationArgs),
    /// The Homa papers' workloads W1-W5 at 50 % and 80 % load on a two-tier fabric: p99
    /// slowdown per message size, MTP against TCP with DCTCP (the simulator).
    MtpWorkloads(mtp::workloads::WorkloadsArgs),
    /// RDMA WRITE throughput of 2 QPs, 64 B to 64 KB, header-only TX against a staging copy,
    /// with the engine's bytes touched per payload byte (flexins.txt Figure 12; no lab).
    FlexinsTx(flexins::tx::TxArgs),
    /// 8 KB RDMA WRITEs into a growing receive working set, direct placement against a
    /// staging copy, with bytes touched per payload byte (flexins.txt Figure 14; no lab).
    FlexinsRx(flexins::rx::RxArgs),
    /// The programmable offloading engine's list traversal and batched READ against the
    /// client doing them with READs (flexins.txt Figure 16; two RDMA stacks in-process).
    FlexinsOffload(flexins_offload::OffloadArgs),
    /// 64 B WRITE submission through the notification pipe against doorbells for 1, 100
    /// and 2,000 QPs, and 64 B round trips: inline QP, pipe SEND/RECV, Sluice TCP, Linux
    /// TCP (flexins.txt Figure 15; two engines in-process, no lab).
    FlexinsPipe(flexins::pipe::PipeArgs),
}

/// Runs an experiment: prints its table and writes its files.
pub fn run(cmd: &ExperimentCommand) -> Result<(), ExperimentError> {
    let (report, common) = match cmd {
        ExperimentCommand::Ooo(args) => (ooo::run(args)?, &args.common),
        ExperimentCommand::Million(args) => (million::run(args)?, &args.common),
        ExperimentCommand::Fairness(args) => (fairness::run(args)?, &args.common),
        ExperimentCommand::Loss(args) => (loss::run(args)?, &args.common),
        ExperimentCommand::Impair(args) => (impair::run(args)?, &args.common),
        ExperimentCommand::Incast(args) => (incast::run(args)?, &args.common),
        ExperimentCommand::Synflood(args) => (synflood::run(args)?, &args.common),
        ExperimentCommand::Parallelism(args) => (parallelism::run(args)?, &args.common),
        ExperimentCommand::ShortConns(args) => (short_conns::run(args)?, &args.common),
        ExperimentCommand::Proxy(args) => (proxy::run(args)?, &args.common),
        ExperimentCommand::MtpMultipath(args) => (mtp::multipath::run(args)?, &args.common),
        ExperimentCommand::MtpBalance(args) => (mtp::balance::run(args)?, &args.common),
        ExperimentCommand::MtpIsolation(args) => (mtp::isolation::run(args)?, &args.common),
        ExperimentCommand::MtpWorkloads(args) => (mtp::workloads::run(args)?, &args.common),
        ExperimentCommand::FlexinsTx(args) => (flexins::tx::run(args)?, &args.common),
        ExperimentCommand::FlexinsRx(args) => (flexins::rx::run(args)?, &args.common),
        ExperimentCommand::FlexinsOffload(args) => (flexins_offload::run(args)?, &args.common),
        ExperimentCommand::FlexinsPipe(args) => (flexins::pipe::run(args)?, &args.common),
    };
    print!("{}", report.render());
    let written = report.write(&common.out)?;
    println!("csv: {}", written.csv.display());
    match written.png {
        Ok(p) => println!("png: {}", p.display()),
        Err(e) => eprintln!("sluice experiment: no plot: {e}"),
    }
    Ok(())
}

/// Sets a congestion-control policy in a core's configuration.
pub type ConfigureCc = fn(&mut Config);

/// The congestion-control policies the experiments compare, by name, with how each is
/// configured.
pub fn policies() -> Vec<(&'static str, ConfigureCc)> {
    vec![
        ("newreno", |c: &mut Config| {
            c.congestion_control = Algorithm::NewReno
        }),
        ("dctcp", |c: &mut Config| {
            c.congestion_control = Algorithm::Dctcp
        }),
    ]
}
