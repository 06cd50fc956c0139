//! The engine runtime: a polling loop that drives the sans-IO core with the real clock over a
//! device backend, the setup that opens a backend (optionally inside the lab's engine
//! namespace), and the embedded applications the CLI runs (echo, sink, source).
#![forbid(unsafe_code)]

pub mod apps;
mod clock;
mod runtime;
pub mod setup;

pub use clock::Clock;
pub use runtime::{App, AppStatus, Engine, EngineError, RunStats};
