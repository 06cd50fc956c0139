//! Sluice's RDMA transport (issue 16; flexins.txt 3.1), in the sans-IO style of the TCP
//! core. So far: the RoCEv2 wire format (`wire`: the InfiniBand transport headers BTH,
//! RETH, AETH and ImmDt over UDP port 4791 with their invariant CRC, for the
//! reliable-connected opcodes) and the verbs objects (`verbs`: memory regions and keys,
//! completion queues, the queue pair state machine). The queue pairs' transport is next
//! (docs/notes/issue-16/plan.md).

#![forbid(unsafe_code)]

pub mod qp;
pub mod stack;
pub mod verbs;
pub mod wire;
