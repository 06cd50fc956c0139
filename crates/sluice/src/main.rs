//! The `sluice` command.

mod demo;

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
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo::run(&args),
    };
    if let Err(e) = result {
        eprintln!("sluice: {e}");
        std::process::exit(1);
    }
}
