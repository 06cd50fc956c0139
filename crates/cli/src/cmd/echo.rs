//! `sluice echo`: an echo server on the engine.

use clap::Args;
use sluice_engine::setup::Backend;

use crate::attach::{run_on_cores, Attach};
use crate::cores::{stop_on_signals, GroupEcho};
use crate::error::CliError;
use crate::sim;
use crate::sim_args::{refuse_sim_flags, SimEchoArgs};

/// `sluice echo`.
#[derive(Args, Debug)]
pub struct EchoArgs {
    /// Port to serve.
    #[arg(long)]
    port: u16,
    #[command(flatten)]
    attach: Attach,
    #[command(flatten)]
    sim: SimEchoArgs,
}

/// Runs `sluice echo`.
pub fn run(args: &EchoArgs) -> Result<(), CliError> {
    if args.attach.backend == Backend::Sim && args.attach.cores.layout()?.is_none() {
        return sim::echo(&args.attach, args.port, &args.sim);
    }
    refuse_sim_flags(args.sim.given())?;
    // One echo server per flow group, each listening on the port in its own core; SIGTERM
    // or SIGINT ends them (the connections close within --linger).
    let stop = stop_on_signals()?;
    run_on_cores(&args.attach, |_| GroupEcho::new(args.port, stop.clone()))?;
    Ok(())
}
