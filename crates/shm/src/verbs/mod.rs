//! The verbs part of the contract (docs/verbs.md): what an application's RDMA send,
//! receive and completion queues say ([`wqe`]), and the control-path verbs it asks over the
//! control socket ([`request`]).
//!
//! Send and receive queues and completion queues are verbs queues of the application's
//! region (`Layout::verbs_queues`), reached with `Producer::verbs` / `Consumer::verbs`; the
//! application rings the engine with [`crate::Command::QpDoorbell`] after posting. In pipe
//! mode a context's QPs share its notification pipes instead ([`pipe`]'s lines, no doorbell).

pub mod pipe;
pub mod request;
pub mod wqe;

pub use request::{DeviceInfo, QpAttrs, VerbsReply, VerbsRequest};
pub use wqe::{Cqe, RecvWqe, SendWqe, WqeSge, WrOpcode, INLINE_CHUNK, MAX_INLINE};
