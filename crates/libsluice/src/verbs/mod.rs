//! RDMA verbs through the engine (docs/verbs.md): reliable-connected queue pairs over the
//! engine's RoCEv2 transport, with libibverbs' semantics and numbers.
//!
//! [`Device::open`] queries the engine's device; a [`ProtectionDomain`] holds
//! [`MemoryRegion`]s (memory shared with the engine through a sealed memfd) and
//! [`QueuePair`]s, whose completions go to [`CompletionQueue`]s. Control-path verbs are
//! requests on the control socket; posting writes entries into the QP's verbs queues and
//! rings the engine with one `QpDoorbell` on the calling thread's context queue.
//!
//! Objects keep what they use alive (a region its PD, a QP its PD and CQs) and are
//! destroyed when dropped; the explicit `destroy`/`dealloc`/`dereg` calls report the
//! engine's answer.

mod control;
mod cq;
mod device;
mod error;
mod mr;
mod offload;
pub(crate) mod pipes;
mod qp;
pub(crate) mod remap;
mod wr;

pub use cq::{wc_opcode, wc_status, CompletionQueue, WorkCompletion, WC_WITH_IMM};
pub use device::{Device, ProtectionDomain};
pub use error::{PostError, VerbsError};
pub use mr::{access, MemoryRegion};
pub use offload::{OffloadHandler, OffloadRow};
pub use pipes::DEFAULT_COMPLETION_LAG;
pub use qp::{qp_mask, qp_state, QpCaps, QpInit, QueuePair};
pub use sluice_shm::verbs::{DeviceInfo, QpAttrs};
pub use wr::{flags as send_flags, RecvWr, SendData, SendOp, SendWr, Sge};

#[cfg(test)]
mod tests {
    use super::*;

    /// A QP's posts and a CQ's polls may come from any thread (each behind its own lock).
    #[test]
    fn the_objects_are_send_and_sync() {
        fn both<T: Send + Sync>() {}
        both::<Device>();
        both::<ProtectionDomain>();
        both::<MemoryRegion>();
        both::<CompletionQueue>();
        both::<QueuePair>();
    }
}
