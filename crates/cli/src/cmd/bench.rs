//! `sluice bench [apps]`: every workload against the engine and against Linux TCP in the
//! lab (sluice-bench), or unmodified programs with `apps`.

use clap::{Args, Subcommand};
use sluice_bench::apps;

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
}

/// Runs `sluice bench` or `sluice bench apps`.
pub fn run(cli: &BenchCli) -> Result<(), CliError> {
    match &cli.command {
        Some(BenchCommand::Apps(args)) => apps::bench::run(args).map_err(CliError::Apps),
        None => sluice_bench::run(&cli.args).map_err(CliError::Bench),
    }
}
