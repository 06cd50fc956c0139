//! The flags of `--backend sim` (the simulated link, clients and sources), refused with
//! every other backend.

use crate::error::CliError;
use clap::Args;

/// The simulated link of `--backend sim` (flags are refused with other backends).
#[derive(Args, Debug, Clone, Default)]
pub struct SimLinkArgs {
    /// sim: link rate in Gbit/s, 0.001..=400 [default: 10].
    #[arg(long)]
    pub(crate) sim_gbps: Option<f64>,
    /// sim: one-way propagation delay in microseconds, at most 1000000 [default: 10].
    #[arg(long)]
    pub(crate) sim_delay_us: Option<u64>,
    /// sim: egress queue per link direction in KiB, 2..=65536 [default: 1024].
    #[arg(long)]
    pub(crate) sim_queue_kib: Option<u64>,
    /// sim: probability a frame is lost, each direction, 0..=0.5 [default: 0].
    #[arg(long)]
    pub(crate) sim_loss: Option<f64>,
    /// sim: probability a frame is delivered late (overtaken), 0..=0.5 [default: 0].
    #[arg(long)]
    pub(crate) sim_reorder: Option<f64>,
    /// sim: probability a frame is delivered twice, 0..=0.5 [default: 0].
    #[arg(long)]
    pub(crate) sim_duplicate: Option<f64>,
    /// sim: probability one bit of a frame is flipped, 0..=0.5 [default: 0].
    #[arg(long)]
    pub(crate) sim_corrupt: Option<f64>,
    /// sim: seed of the run (impairments and every simulated core) [default: 1].
    #[arg(long)]
    pub(crate) sim_seed: Option<u64>,
    /// sim: give up after this many seconds of virtual time, 0.001..=86400 [default: 600].
    #[arg(long)]
    pub(crate) sim_budget_s: Option<f64>,
}

/// `sluice echo --backend sim`: the simulated RPC clients.
#[derive(Args, Debug, Clone, Default)]
pub struct SimEchoArgs {
    /// sim: simulated RPC clients, each its own host, 1..=250 [default: 4].
    #[arg(long)]
    pub(crate) sim_clients: Option<u32>,
    /// sim: requests per client [default: 10000].
    #[arg(long)]
    pub(crate) sim_rpcs: Option<u64>,
    /// sim: bytes per request, 1..=65536 [default: 64].
    #[arg(long)]
    pub(crate) sim_rpc_size: Option<usize>,
}

/// `sluice sink --backend sim`: the simulated sources.
#[derive(Args, Debug, Clone, Default)]
pub struct SimSinkArgs {
    /// sim: simulated sources, each its own host sending one stream, 1..=250 [default: --count or 1].
    #[arg(long)]
    pub(crate) sim_clients: Option<u32>,
    /// sim: bytes each source sends, at most 1 TiB [default: 16777216].
    #[arg(long)]
    pub(crate) sim_bytes: Option<u64>,
}

impl SimLinkArgs {
    /// The first flag given, by name (to refuse it with other backends).
    pub(crate) fn given(&self) -> Option<&'static str> {
        [
            (self.sim_gbps.is_some(), "--sim-gbps"),
            (self.sim_delay_us.is_some(), "--sim-delay-us"),
            (self.sim_queue_kib.is_some(), "--sim-queue-kib"),
            (self.sim_loss.is_some(), "--sim-loss"),
            (self.sim_reorder.is_some(), "--sim-reorder"),
            (self.sim_duplicate.is_some(), "--sim-duplicate"),
            (self.sim_corrupt.is_some(), "--sim-corrupt"),
            (self.sim_seed.is_some(), "--sim-seed"),
            (self.sim_budget_s.is_some(), "--sim-budget-s"),
        ]
        .into_iter()
        .find_map(|(given, name)| given.then_some(name))
    }
}

impl SimEchoArgs {
    /// The first flag given, by name (to refuse it with other backends).
    pub(crate) fn given(&self) -> Option<&'static str> {
        [
            (self.sim_clients.is_some(), "--sim-clients"),
            (self.sim_rpcs.is_some(), "--sim-rpcs"),
            (self.sim_rpc_size.is_some(), "--sim-rpc-size"),
        ]
        .into_iter()
        .find_map(|(given, name)| given.then_some(name))
    }
}

impl SimSinkArgs {
    /// The first flag given, by name (to refuse it with other backends).
    pub(crate) fn given(&self) -> Option<&'static str> {
        [
            (self.sim_clients.is_some(), "--sim-clients"),
            (self.sim_bytes.is_some(), "--sim-bytes"),
        ]
        .into_iter()
        .find_map(|(given, name)| given.then_some(name))
    }
}

/// Refuses simulator flags with a real backend.
pub(crate) fn refuse_sim_flags(flag: Option<&'static str>) -> Result<(), CliError> {
    match flag {
        Some(name) => Err(CliError::Usage(format!(
            "{name} applies only to --backend sim"
        ))),
        None => Ok(()),
    }
}
