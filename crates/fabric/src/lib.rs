//! The network model shared by the Sluice simulator (`sluice-sim`) and software switch
//! (`sluice-switch`), so both queue, mark and impair frames the same way.
//!
//! - [`Channel`]: one direction of a link: a FIFO egress queue drained at line rate, tail
//!   drop at a byte and/or frame capacity, ECN CE marking above a threshold K at enqueue
//!   ([`mark_ce`], IPv4 checksum fixed incrementally), and random impairments when a frame
//!   leaves the line (loss, Gilbert–Elliott burst loss, reordering, duplication, corruption).
//! - [`Bridge`]: a learning switch's forwarding decision over a bounded MAC table.
//! - Class queues ([`LinkConfig::with_class_queues`]): N queues by IPv4 DSCP served by
//!   deficit round robin, the "queue per tenant" baseline of mtp.txt 5.3; or, with
//!   [`LinkConfig::with_priority_queues`], strict priority for short messages (Homa, pFabric).
//! - [`mtp`]: MTP devices: pathlet feedback, balancers for route groups, per-tenant fair
//!   share on one queue, trimming on overflow ([`mtp::MtpDevice`]).
//! - [`FramePool`]: recycled frame buffers, so steady-state forwarding does not allocate.
//!
//! Sans-IO and deterministic: no clock (the caller says when serialization ends) and all
//! randomness from a seeded [`rand_chacha::ChaCha8Rng`] the caller supplies.
#![forbid(unsafe_code)]

mod bridge;
mod classes;
mod ecn;
mod link;
pub mod mtp;
mod pool;

pub use bridge::{Bridge, Forward, Mac, SwitchStats, DEFAULT_MAX_LEARNED};
pub use classes::{class_of, ClassService, DRR_QUANTUM};
pub use ecn::{mark_ce, EcnOutcome};
pub use link::{Channel, GilbertElliott, Impairment, LinkConfig, LinkStats, Offer, Transmitted};
pub use pool::FramePool;
pub use rand_chacha::ChaCha8Rng;
