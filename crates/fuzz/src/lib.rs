//! Fuzz harness for the Sluice TCP core.
//!
//! A campaign runs seeded cases ([`run_case`]); each drives two [`sluice_tcp::Stack`]s — a
//! client and a server with small bounds — through real traffic interleaved with loss,
//! duplication, reordering, delay, mutated and forged frames, clock jumps and random
//! application calls, checking invariants after every step. No coverage instrumentation, so
//! it runs on stable Rust; a failure names the seed that replays it exactly. [`targets`] holds
//! the byte-driven targets a coverage-guided engine steers.
#![forbid(unsafe_code)]

mod apps;
pub mod case;
pub mod config;
pub mod flows;
pub mod frames;
mod inject;
pub mod invariants;
pub mod mutate;
pub mod net;
pub mod options;
pub mod targets;
pub mod violation;

use std::panic::{catch_unwind, AssertUnwindSafe};

pub use case::{run_case, CaseOptions, CaseStats};
pub use violation::{Failure, Violation};

/// The seed of case `index` of the campaign with seed `base`.
pub fn case_seed(base: u64, index: u64) -> u64 {
    flows::mix(base ^ flows::mix(index))
}

/// Runs a case, turning a panic anywhere (in the core or the harness) into a [`Failure`]
/// that carries the seed.
pub fn run_case_caught(seed: u64, opts: &CaseOptions) -> Result<CaseStats, Failure> {
    match catch_unwind(AssertUnwindSafe(|| run_case(seed, opts))) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".into());
            Err(Failure {
                seed,
                step: usize::MAX,
                kind: Violation::Panic(msg),
            })
        }
    }
}
