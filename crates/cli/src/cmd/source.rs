//! `sluice source`: sends a deterministic pseudo-random stream from the engine.

use std::net::SocketAddrV4;

use clap::Args;
use sluice_engine::apps::SourceApp;
use sluice_engine::setup::Backend;

use crate::attach::{run_on_cores, Attach};
use crate::cores::GroupSource;
use crate::error::CliError;
use crate::sim;

/// `sluice source`.
#[derive(Args, Debug)]
pub struct SourceArgs {
    /// Server to send to, IP:PORT.
    #[arg(long)]
    connect: SocketAddrV4,
    /// Bytes to send.
    #[arg(long)]
    bytes: u64,
    /// Seed of the pseudo-random stream.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    attach: Attach,
}

/// Runs `sluice source`.
pub fn run(args: &SourceArgs) -> Result<(), CliError> {
    if args.attach.backend == Backend::Sim && args.attach.cores.layout()?.is_none() {
        return sim::source(&args.attach, args.connect, args.bytes, args.seed);
    }
    // The one connection is flow group 0's (its local port is chosen to hash there).
    run_on_cores(&args.attach, |g| {
        GroupSource((g == 0).then(|| {
            SourceApp::new(
                *args.connect.ip(),
                args.connect.port(),
                args.bytes,
                args.seed,
            )
        }))
    })?;
    Ok(())
}
