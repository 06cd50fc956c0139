//! `sluice sink`: a discarding server on the engine; prints bytes and SHA-256 per connection.

use clap::Args;
use sluice_engine::apps::SinkApp;
use sluice_engine::setup::Backend;

use crate::attach::{run_app, Attach};
use crate::error::CliError;
use crate::sim;
use crate::sim_args::{refuse_sim_flags, SimSinkArgs};

/// `sluice sink`.
#[derive(Args, Debug)]
pub struct SinkArgs {
    /// Port to serve.
    #[arg(long)]
    port: u16,
    /// Exit after this many connections closed.
    #[arg(long)]
    count: Option<usize>,
    #[command(flatten)]
    attach: Attach,
    #[command(flatten)]
    sim: SimSinkArgs,
}

/// Runs `sluice sink`.
pub fn run(args: &SinkArgs) -> Result<(), CliError> {
    if args.attach.backend == Backend::Sim {
        return sim::sink(&args.attach, args.port, args.count, &args.sim);
    }
    refuse_sim_flags(args.sim.given())?;
    let mut app = SinkApp::new(args.port);
    app.stop_after = args.count;
    run_app(&args.attach, &mut app)
}
