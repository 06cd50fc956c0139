//! The network model shared by the Sluice simulator (`sluice-sim`) and software switch
//! (`sluice-switch`), so both queue, mark and impair frames the same way.
//!
//! - [`Channel`]: one direction of a link: a FIFO egress queue drained at line rate, tail
//!   drop at a byte and/or frame capacity, ECN CE marking above a threshold K at enqueue
//!   ([`mark_ce`], IPv4 checksum fixed incrementally), and random impairments when a frame
//!   leaves the line (loss, Gilbert–Elliott burst loss, reordering, duplication, corruption).
//! - [`Bridge`]: a learning switch's forwarding decision over a bounded MAC table.
//! - [`FramePool`]: recycled frame buffers, so steady-state forwarding does not allocate.
//!
//! Sans-IO and deterministic: no clock (the caller says when serialization ends) and all
//! randomness from a seeded [`rand_chacha::ChaCha8Rng`] the caller supplies.
#![forbid(unsafe_code)]

mod bridge;
mod ecn;
mod link;
mod pool;

pub use bridge::{Bridge, Forward, Mac, SwitchStats, DEFAULT_MAX_LEARNED};
pub use ecn::{mark_ce, EcnOutcome};
pub use link::{Channel, GilbertElliott, Impairment, LinkConfig, LinkStats, Offer, Transmitted};
pub use pool::FramePool;
pub use rand_chacha::ChaCha8Rng;
