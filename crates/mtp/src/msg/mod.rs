//! Messages (mtp.txt 3.1.2): the sender's message table and scheduling, the receiver's
//! reassembly, and the retransmission timeout.
//!
//! Loss detection: a NACK (a trimmed packet) retransmits at once; a first transmission is
//! lost when a packet of the same message numbered at least [`SACK_GAP`] higher is
//! acknowledged while it is not (each packet is judged once this way; a lost
//! retransmission is left to [`rack`]); [`rack`] declares lost what a later transmission to
//! the same destination over the same path outran; the timeout retransmits every packet in
//! flight to the destination.

mod charge;
mod out;
pub mod rack;
mod reassembly;
mod rto;
mod sched;

pub use out::{OutMessage, PktState};
pub use reassembly::{InMessage, MsgKey, Reassembly, Refusal, Shape};
pub use rto::RttEstimator;
pub use sched::Scheduler;

/// How many higher-numbered packets acknowledged make a packet lost (as TCP's three
/// duplicate ACKs).
pub const SACK_GAP: u16 = 3;
