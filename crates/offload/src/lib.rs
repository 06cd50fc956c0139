//! Sluice's programmable offloading engine (flexins.txt 3.5, Table 2; docs/offload.md).
//!
//! An operator registers a handler for an offload opcode on a QP; the RDMA transport receives
//! an OFFLOAD request for it like a SEND and hands it out ([`sluice_rdma::stack::RdmaStack::poll_offload`]);
//! the [`OffloadEngine`] runs the handler on offload threads, apart from the data-path,
//! through bounded SPSC rings, and gives back the response for
//! [`sluice_rdma::stack::RdmaStack::complete_offload`]. A handler sees only Table 2's API
//! ([`OffloadCtx`]): the request, regions of application memory registered for it, a
//! response it allocates, asynchronous reads/writes of the regions it waits for, and the
//! response it submits. Every handler is bounded in steps, response size and outstanding
//! operations, and touches only its regions; a failure is an error status, never a panic.
//!
//! `unsafe` is denied except in [`dylib`], the C-ABI boundary of handler libraries loaded
//! at run time (opening a shared library is the OS boundary).
#![deny(unsafe_code)]

pub mod api;
pub mod dylib;
pub mod ebpf;
pub mod engine;
pub mod examples;
pub mod host;
pub mod region;

pub use api::{DmaId, Handler, HandlerError, Limits, OffloadCtx};
pub use dylib::{DylibError, DylibHandler};
pub use ebpf::EbpfHandler;
pub use engine::{
    EngineCounters, OffloadEngine, OffloadEngineBuilder, OffloadResponse, Registration,
};
pub use region::{RegionMemory, RegionTable, SharedRegion};
