//! The `sluice` command.

mod bench;
mod demo;
mod run;

use clap::{Parser, Subcommand};

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
    /// Echo server on the engine.
    Echo(run::EchoArgs),
    /// Discarding server on the engine; prints bytes and SHA-256 per connection.
    Sink(run::SinkArgs),
    /// Sends a deterministic pseudo-random stream from the engine; prints its SHA-256.
    Source(run::SourceArgs),
    /// The namespace lab (needs root).
    #[command(subcommand)]
    Lab(run::LabCommand),
    /// Every workload against the engine and against Linux TCP in the lab (needs root).
    Bench(bench::BenchArgs),
    /// The bench's Linux client (run by `sluice bench` inside a lab namespace).
    #[command(hide = true)]
    Loadgen(bench::loadgen::LoadgenArgs),
    /// The bench's Linux kernel server (run by `sluice bench` inside a lab namespace).
    #[command(hide = true)]
    Kserve(bench::kserve::KserveArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo::run(&args).map_err(|e| e.to_string()),
        Command::Echo(args) => run::echo(&args),
        Command::Sink(args) => run::sink(&args),
        Command::Source(args) => run::source(&args),
        Command::Lab(cmd) => run::lab(&cmd),
        Command::Bench(args) => bench::run(&args).map_err(|e| e.to_string()),
        Command::Loadgen(args) => bench::loadgen::run(&args).map_err(|e| e.to_string()),
        Command::Kserve(args) => bench::kserve::run(&args).map_err(|e| e.to_string()),
    };
    if let Err(e) = result {
        eprintln!("sluice: {e}");
        std::process::exit(1);
    }
}
