//! The engine runtime: a polling loop that drives the sans-IO core with the real clock over a
//! device backend, the setup that opens a backend (optionally inside the lab's engine
//! namespace), the embedded applications the CLI runs (echo, sink, source), and the
//! simulator's wire as a backend ([`sim_wire`]: simulated peers in virtual time, no root).
#![forbid(unsafe_code)]

pub mod apps;
mod clock;
mod runtime;
pub mod setup;
pub mod sim_wire;

pub use clock::Clock;
pub use runtime::{App, AppStatus, Engine, EngineError, RunStats};
