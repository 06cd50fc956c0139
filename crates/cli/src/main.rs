//! The `sluice` command.

mod demo;
mod engine_cmd;
mod run;
mod run_cmd;
mod switch_cmd;

use clap::{Args, Parser, Subcommand};
use sluice_bench::{self as bench, apps};
use sluice_experiments as experiment;

/// Sluice: a software TCP engine for data-center hosts.
#[derive(Parser)]
#[command(name = "sluice", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Two simulated hosts running the real core over an impaired link (no root needed).
    Demo(demo::DemoArgs),
    /// The engine as a service: applications attach over a Unix socket (`sluice run`).
    Engine(engine_cmd::EngineArgs),
    /// Runs an unmodified program over the engine (LD_PRELOAD of libsluice_preload.so).
    Run(run_cmd::RunArgs),
    /// Echo server on the engine.
    Echo(run::EchoArgs),
    /// Discarding server on the engine; prints bytes and SHA-256 per connection.
    Sink(run::SinkArgs),
    /// Sends a deterministic pseudo-random stream from the engine; prints its SHA-256.
    Source(run::SourceArgs),
    /// A userspace software switch between interfaces (in any namespaces) with shaped,
    /// ECN-marking, impaired egress queues; SIGTERM prints its counters (needs root).
    Switch(switch_cmd::SwitchArgs),
    /// The namespace lab (needs root).
    #[command(subcommand)]
    Lab(run::LabCommand),
    /// The papers' experiments: a table, a CSV and a PNG plot each.
    #[command(subcommand)]
    Experiment(experiment::ExperimentCommand),
    /// Every workload against the engine and against Linux TCP in the lab (needs root).
    Bench(BenchCli),
    /// The bench's Linux client (run by `sluice bench` inside a lab namespace).
    #[command(hide = true)]
    Loadgen(bench::loadgen::LoadgenArgs),
    /// The bench's Linux kernel server (run by `sluice bench` inside a lab namespace).
    #[command(hide = true)]
    Kserve(bench::kserve::KserveArgs),
    /// Verification clients for unmodified programs (run by the apps harness in sluice-b).
    #[command(hide = true)]
    Appcheck(apps::appcheck::AppcheckArgs),
}

/// `sluice bench [apps]`: the workloads, or unmodified programs with `apps`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
struct BenchCli {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    #[command(flatten)]
    args: bench::BenchArgs,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// redis, nginx and iperf3 on the engine (through `sluice run`) and on Linux, same
    /// clients, one table (needs root).
    Apps(apps::bench::BenchAppsArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo::run(&args).map_err(|e| e.to_string()),
        Command::Engine(args) => engine_cmd::run(&args),
        Command::Run(args) => run_cmd::run(&args).map_err(|e| e.to_string()),
        Command::Echo(args) => run::echo(&args),
        Command::Sink(args) => run::sink(&args),
        Command::Source(args) => run::source(&args),
        Command::Switch(args) => switch_cmd::run(&args),
        Command::Lab(cmd) => run::lab(&cmd),
        Command::Bench(BenchCli {
            command: Some(BenchCommand::Apps(args)),
            ..
        }) => apps::bench::run(&args).map_err(|e| e.to_string()),
        Command::Bench(BenchCli { args, .. }) => bench::run(&args).map_err(|e| e.to_string()),
        Command::Loadgen(args) => bench::loadgen::run(&args).map_err(|e| e.to_string()),
        Command::Kserve(args) => bench::kserve::run(&args).map_err(|e| e.to_string()),
        Command::Experiment(cmd) => experiment::run(&cmd).map_err(|e| e.to_string()),
        Command::Appcheck(args) => apps::appcheck::run(&args).map_err(|e| e.to_string()),
    };
    if let Err(e) = result {
        eprintln!("sluice: {e}");
        std::process::exit(1);
    }
}
