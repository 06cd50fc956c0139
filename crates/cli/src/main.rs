//! The `sluice` command.
//!
//! The top level: the command line, one module per subcommand under [`cmd`] (the bench's and
//! the experiments' own in sluice-bench and sluice-experiments), and the one place that
//! prints an error.

#![forbid(unsafe_code)]

mod attach;
mod cmd;
mod cores;
mod error;
mod sim;
mod sim_args;

use clap::{Parser, Subcommand};
use cmd::{
    bench, ctl, demo, echo, engine, flood, lab, mtp, offload_demo, proxy, run, sink, soak, source,
    switch,
};
use sluice_bench::{apps, kserve, loadgen};
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
    Engine(engine::EngineArgs),
    /// Runs an unmodified program over the engine (LD_PRELOAD of libsluice_preload.so).
    Run(run::RunArgs),
    /// tcpdump-style capture from a running engine into a pcap file (root or the engine's uid).
    Capture(cmd::capture::CaptureArgs),
    /// Echo server on the engine.
    Echo(echo::EchoArgs),
    /// L7 proxy on the engine that splices each client to its backend (AccelTCP).
    Proxy(proxy::ProxyArgs),
    /// Discarding server on the engine; prints bytes and SHA-256 per connection.
    Sink(sink::SinkArgs),
    /// Sends a deterministic pseudo-random stream from the engine; prints its SHA-256.
    Source(source::SourceArgs),
    /// A userspace software switch between interfaces (in any namespaces) with shaped,
    /// ECN-marking, impaired egress queues; SIGTERM prints its counters (needs root).
    Switch(switch::SwitchArgs),
    /// Spoofed SYNs at a set rate from a lab namespace, for SYN-flood tests (needs root).
    Flood(flood::FloodArgs),
    /// Looks into a running engine and tunes it: connections (like `ss -tni`), counters
    /// (like `nstat`), a connection's congestion control or rate (docs/ctl.md).
    Ctl(ctl::CtlArgs),
    /// MTP messages through a running engine: send, receive (and echo), RPC round trips.
    #[command(subcommand)]
    Mtp(mtp::MtpCommand),
    /// The namespace lab (needs root).
    #[command(subcommand)]
    Lab(lab::LabCommand),
    /// The papers' experiments: a table, a CSV and a PNG plot each.
    #[command(subcommand)]
    Experiment(experiment::ExperimentCommand),
    /// The offload engine's batched READ and list traversal between two lab hosts, against
    /// one READ per item (root; scripts/offload-demo.sh).
    OffloadDemo(offload_demo::OffloadDemoArgs),
    /// Every workload against the engine and against Linux TCP in the lab (needs root).
    Bench(bench::BenchCli),
    /// Mixed traffic against the engine and Linux side by side, impairments on and off, for
    /// a chosen time: bytes verified, connections, errors and memory (needs root).
    Soak(experiment::soak::SoakArgs),
    /// A soak server, the engine's or Linux's (run by `sluice soak`).
    #[command(hide = true)]
    SoakServer(experiment::soak::ServeArgs),
    /// The bench's Linux client (run by `sluice bench` inside a lab namespace).
    #[command(hide = true)]
    Loadgen(loadgen::LoadgenArgs),
    /// The bench's Linux kernel server (run by `sluice bench` inside a lab namespace).
    #[command(hide = true)]
    Kserve(kserve::KserveArgs),
    /// Verification clients for unmodified programs (run by the apps harness in sluice-b).
    #[command(hide = true)]
    Appcheck(apps::appcheck::AppcheckArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo::run(&args).map_err(|e| e.to_string()),
        Command::Engine(args) => engine::run(&args).map_err(|e| e.to_string()),
        Command::Run(args) => run::run(&args).map_err(|e| e.to_string()),
        Command::Capture(args) => cmd::capture::run(&args).map_err(|e| e.to_string()),
        Command::Echo(args) => echo::run(&args).map_err(|e| e.to_string()),
        Command::Proxy(args) => proxy::run(&args).map_err(|e| e.to_string()),
        Command::Sink(args) => sink::run(&args).map_err(|e| e.to_string()),
        Command::Source(args) => source::run(&args).map_err(|e| e.to_string()),
        Command::Switch(args) => switch::run(&args).map_err(|e| e.to_string()),
        Command::Flood(args) => flood::run(&args).map_err(|e| e.to_string()),
        Command::Lab(cmd) => lab::run(&cmd).map_err(|e| e.to_string()),
        Command::Mtp(cmd) => mtp::run(&cmd).map_err(|e| e.to_string()),
        Command::Ctl(args) => ctl::run(&args).map_err(|e| e.to_string()),
        Command::Bench(cli) => bench::run(&cli).map_err(|e| e.to_string()),
        Command::Soak(args) => soak::run(&args).map_err(|e| e.to_string()),
        Command::SoakServer(args) => experiment::soak::serve(&args).map_err(|e| e.to_string()),
        Command::Loadgen(args) => loadgen::run(&args).map_err(|e| e.to_string()),
        Command::Kserve(args) => kserve::run(&args).map_err(|e| e.to_string()),
        Command::Experiment(cmd) => experiment::run(&cmd).map_err(|e| e.to_string()),
        Command::OffloadDemo(args) => offload_demo::run(&args),
        Command::Appcheck(args) => apps::appcheck::run(&args).map_err(|e| e.to_string()),
    };
    if let Err(e) = result {
        eprintln!("sluice: {e}");
        std::process::exit(1);
    }
}
