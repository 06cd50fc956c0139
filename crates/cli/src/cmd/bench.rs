//! `sluice bench [apps|verbs|mtp|extensions|sequencing|shared-log]`: every workload against
//! the engine and against Linux TCP in the lab (sluice-bench), unmodified programs with `apps`,
//! perftest over verbs with `verbs`, MTP beside both TCPs with `mtp`, the data-path extensions'
//! cost with `extensions`, the multi-core sequencing step with `sequencing`, Laminar's shared
//! log with `shared-log`.

use clap::{Args, Subcommand};
use sluice_bench::apps;
use sluice_engine::cbpf::Insn;

use crate::error::CliError;

/// `sluice bench [apps]`: the workloads, or unmodified programs with `apps`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchCli {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    #[command(flatten)]
    args: sluice_bench::BenchArgs,
}

// What `sluice bench` runs instead of the workloads.
#[derive(Subcommand)]
enum BenchCommand {
    /// redis, nginx and iperf3 on the engine (through `sluice run`) and on Linux, same
    /// clients, one table (needs root).
    Apps(apps::bench::BenchAppsArgs),
    /// perftest over Sluice's RDMA verbs beside Linux TCP and Sluice TCP (sockperf,
    /// iperf3), one table with ratios and CPU per operation (needs root).
    Verbs(sluice_bench::verbs::BenchVerbsArgs),
    /// MTP messages between two engines beside Sluice TCP and Linux TCP: 64 B RPC round
    /// trip and message throughput, CPU per operation, ratios (needs root; issue 17).
    Mtp(sluice_bench::mtp::BenchMtpArgs),
    /// What eBPF modules, tracepoints and capture cost (flextoe.txt Table 2): RPC ops/s with
    /// each beside the baseline, hook ns per frame, CPU per operation; interpreter vs JIT
    /// (the lab part needs root; issue 19).
    Extensions(sluice_bench::extensions::BenchExtensionsArgs),
    /// The multi-core data-path's sequencing step (Sequencer + Reorder, 1/2/4 replicas
    /// interleaved) and one link hop, ns per frame, in process (issue 20).
    Sequencing(sluice_bench::sequencing::BenchSequencingArgs),
    /// Laminar's shared log (laminar.txt 5): records/s and CPU per record for the core's
    /// extension, the same log over Sluice sockets and over Linux sockets, ratios (no root,
    /// no lab; issue 20).
    SharedLog(sluice_bench::shared_log::BenchSharedLogArgs),
}

/// Runs `sluice bench` or `sluice bench apps`.
pub fn run(cli: &BenchCli) -> Result<(), CliError> {
    match &cli.command {
        Some(BenchCommand::Apps(args)) => apps::bench::run(args).map_err(CliError::Apps),
        Some(BenchCommand::Verbs(args)) => sluice_bench::verbs::run(args).map_err(CliError::Apps),
        Some(BenchCommand::Mtp(args)) => sluice_bench::mtp::run(args).map_err(CliError::Apps),
        Some(BenchCommand::Extensions(args)) => {
            if args.filter.trim().is_empty() {
                // The filtered row would be the unfiltered one again.
                return Err(CliError::usage("--filter: an empty filter filters nothing"));
            }
            // Compiled here by libpcap, as `sluice capture` compiles it, for the in-process tap.
            let filter: Vec<Insn> = super::capture_filter::compile(&args.filter)
                .map_err(|e| CliError::usage(format!("--filter: {e}")))?
                .into_iter()
                .map(|(code, jt, jf, k)| Insn::new(code, jt, jf, k))
                .collect();
            sluice_bench::extensions::run(args, &filter).map_err(CliError::Apps)
        }
        Some(BenchCommand::Sequencing(args)) => {
            sluice_bench::sequencing::run(args);
            Ok(())
        }
        Some(BenchCommand::SharedLog(args)) => {
            sluice_bench::shared_log::run(args).map_err(CliError::Apps)
        }
        None => sluice_bench::run(&cli.args).map_err(CliError::Bench),
    }
}
