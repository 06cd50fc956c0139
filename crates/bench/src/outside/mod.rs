//! `sluice bench`'s rows against programs nobody here wrote (issue 18): Debian's
//! `sockperf` (64 B ping-pong: p50 to p99.99, and throughput) and memcached with
//! libmemcached's memcaslap. Linux runs the standard server in sluice-k; the engine runs
//! the same server under `sluice run` on `sluice engine --lab` in sluice-a ([`crate::apps`]'
//! harness); the same client runs in sluice-b against both. Beside every throughput: CPU
//! per operation of both sides ([`rows::CpuPerOp`]).
//!
//! - [`rows`]: one measured run; [`memcaslap`]: its output's parser (sockperf's is
//!   [`crate::sockperf`], shared with `bench verbs` and `bench mtp`); [`table`]: the
//!   printed part.

pub mod memcaslap;
pub mod rows;
pub mod table;

use crate::apps::{AppsError, Harness, Side};
pub use rows::Workload;
pub use table::{OutsideRow, OutsideTable};

/// Runs `workloads` on Linux, then on the engine (an engine per row, as `bench apps`), for
/// `seconds` each; a row that fails records why and the rest still run.
pub fn measure_all(h: &Harness, workloads: &[Workload], seconds: u32) -> OutsideTable {
    let mut table = OutsideTable::default();
    for side in [Side::Linux, Side::Engine] {
        let mut engine_down: Option<String> = None;
        for &w in workloads {
            eprint!("outside: {} on {side} ... ", w.name());
            let result = match &engine_down {
                Some(why) => Err(why.clone()),
                None => rows::measure(h, w, side, seconds).map_err(|e| {
                    let why = e.to_string();
                    if matches!(e, AppsError::Engine { .. }) {
                        // The daemon itself is broken: no program can run on it.
                        engine_down = Some(why.clone());
                    }
                    why
                }),
            };
            match &result {
                Ok(m) => eprintln!(
                    "{}",
                    m.metrics
                        .iter()
                        .map(|(k, v)| format!("{k} {}", crate::cells::fmt_num(*v)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Err(e) => eprintln!("failed: {}", crate::cells::short(e)),
            }
            table.rows.push(OutsideRow {
                workload: w,
                side: side.name(),
                result,
            });
        }
    }
    table
}
