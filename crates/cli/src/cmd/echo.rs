//! `sluice echo`: an echo server on the engine.

use clap::Args;
use sluice_engine::apps::EchoApp;
use sluice_engine::setup::Backend;

use crate::attach::{run_app, Attach};
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
    if args.attach.backend == Backend::Sim {
        return sim::echo(&args.attach, args.port, &args.sim);
    }
    refuse_sim_flags(args.sim.given())?;
    run_app(&args.attach, &mut EchoApp::new(args.port))
}
