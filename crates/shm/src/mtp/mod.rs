//! The MTP part of the contract (docs/mtp.md "Messages in service mode"): what an
//! application's MTP send, receive and completion queues say ([`entry`]), and the requests it
//! asks over the control socket ([`request`]).
//!
//! The three queues of an endpoint are verbs queues of the application's region
//! (`Layout::verbs_queues`), reached with `Producer::verbs` / `Consumer::verbs`; message bytes
//! live in memory the application registers (a sealed memfd, as verbs regions); the
//! application rings the engine with [`crate::Command::MtpDoorbell`] after posting.

pub mod entry;
pub mod request;

pub use entry::{CqeKind, MtpCqe, MtpStatus, RecvEntry, SendEntry};
pub use request::{MtpReply, MtpRequest};
