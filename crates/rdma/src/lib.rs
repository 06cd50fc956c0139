//! Sluice's RDMA transport (issue 16; flexins.txt 3.1), in the sans-IO style of the TCP
//! core: the RoCEv2 wire format (`wire`: the InfiniBand transport headers BTH, RETH, AETH
//! and ImmDt over UDP port 4791 with their invariant CRC, the reliable-connected opcodes and
//! the CNP), the verbs objects (`verbs`: memory regions and keys, completion queues, the
//! queue pair state machine), the queue pairs' RC transport (`qp`), the stack of one
//! address (`stack`), and per-QP congestion control (`cc`: CNPs and DCQCN).

#![forbid(unsafe_code)]

pub mod cc;
pub mod qp;
pub mod stack;
pub mod verbs;
pub mod wire;
