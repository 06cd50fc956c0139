//! Laminar's shared-log extension (laminar.txt 5, "Shared log"): an application registers a
//! log, a bounded byte buffer the core owns, and attaches client connections to it. Their
//! payload that arrives in order is appended at the log's tail pointer instead of their
//! receive rings, so records are in order per connection and linearized across
//! connections by arrival (clients keep each record within one segment, footnote 2). An
//! out-of-order segment reserves log space up to its end, a gap for the missing bytes,
//! and is written after it; the missing bytes, when they arrive, are redirected to the
//! application, which fills the gap. The application reads up to the first unfilled gap
//! and trims from the head; each attached connection's window is its share of the log's
//! free space, so a full log closes windows and never overwrites.
//!
//! `log.rs` is the log's bookkeeping, `placement.rs` the data-path's part, `api.rs` the
//! application's calls.

pub(crate) mod api;
pub(crate) mod log;
pub(crate) mod placement;

pub use log::{LogError, LogId, LogInfo, LogRedirect, MAX_GAPS, MAX_LOGS, MAX_LOG_CAPACITY};
