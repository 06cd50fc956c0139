//! `sluice sink`: a discarding server on the engine; prints bytes and SHA-256 per connection.

use clap::Args;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use sluice_engine::setup::Backend;

use crate::attach::{run_on_cores, Attach};
use crate::cores::GroupSink;
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
    if args.attach.backend == Backend::Sim && args.attach.cores.layout()?.is_none() {
        return sim::sink(&args.attach, args.port, args.count, &args.sim);
    }
    refuse_sim_flags(args.sim.given())?;
    // --count counts the connections every flow group's sink closed.
    let closed = Arc::new(AtomicUsize::new(0));
    run_on_cores(&args.attach, |_| {
        GroupSink::new(args.port, args.count, closed.clone())
    })?;
    Ok(())
}
