//! The engine runtime: a polling loop that drives the sans-IO core with the real clock (or a
//! virtual one) over a device backend, the setup that opens a backend (optionally inside a
//! namespace whose site, such as `sluice_lab::presets`, prepares the wire), and the embedded
//! applications the CLI runs (echo, sink, source). The simulator's wire as a backend is
//! `sluice_sim::sim_wire`, above this crate: the runtime carries no test rig.
#![forbid(unsafe_code)]

pub mod apps;
pub mod cbpf;
mod clock;
mod hook_point;
pub mod hooks;
pub mod modules;
pub mod multicore;
pub mod pump;
mod runtime;
pub mod setup;
pub mod splice_fast_path;
mod stage_time;
pub mod traffic_class;
pub mod transport;

pub use clock::Clock;
pub use hooks::{HookPoint, Hooks};
pub use runtime::{
    App, AppStatus, Engine, EngineError, RunStats, DEFAULT_LINGER, DEFAULT_SPIN_BEFORE_YIELD,
    STATS_EVERY,
};
pub use sluice_device::DeviceStats;
pub use transport::{Transport, Transports};
