//! libsluice: the application side of Sluice's service mode (docs/service.md), as a Rust API
//! and as the C API of `libsluice.so` (`include/sluice.h`).
//!
//! An application attaches once ([`Sluice::attach`]), receives its own shared region, and
//! talks to the engine through per-thread context queues; each [`Socket`] is a block in
//! that region with an RX and a TX payload ring mapped twice back to back, so a send or a
//! receive is one memcpy and, while the engine polls, no system call (FlexTOE 3 libTOE,
//! Laminar 4.3 and 5). Waiting polls first, then sleeps on an eventfd ([`Sluice::wait`]).
//! The zero-copy calls ([`Socket::rx_slice`], [`Socket::tx_slice`]) hand out the rings
//! themselves.
//!
//! An engine that serves sockets on several data-path cores (flow groups) gives each
//! context a command/completion queue pair per core: the library posts `Open` to the cores
//! in turn and every later command of a socket to its slot's core (`flow_group`,
//! docs/service.md "Several data-path cores"); a connect the slot's core refuses with
//! EXDEV moves the socket to another core's slot (`flow_group_move`). With one core
//! nothing differs.
//!
//! `unsafe` appears only where shared memory, the OS or the C ABI is touched.

pub mod admin;
mod attach;
mod capi;
mod capi_mtp;
mod capi_splice;
mod capi_verbs;
mod capi_verbs_types;
mod command;
mod context;
mod error;
mod flow_group;
mod flow_group_move;
#[cfg(test)]
mod flow_group_tests;
mod fork;
mod lock;
pub mod mtp;
mod socket;
mod splice;
pub mod verbs;
mod wait;
mod zero_copy;

pub use attach::{socket_path_from_env, Sluice};
pub use capi_mtp::{MtpCompletionC, SluiceMtp};
pub use capi_splice::SpliceStatsC;
pub use capi_verbs_types::{
    RdmaDeviceAttr, RdmaQpAttr, RdmaQpCaps, RdmaQpInit, RdmaRecvWr, RdmaSendWr, RdmaSge,
    SluiceRdma, SluiceRdmaCq, SluiceRdmaQp,
};
pub use error::{Error, Op};
pub use fork::after_fork_child;
pub use sluice_shm::{Congestion, Reuse, SpliceOutcome, SpliceReport, TCP_TEARDOWN_OFFLOAD};
pub use socket::{Readiness, Socket};
pub use splice::{Splice, SpliceError};
pub use wait::Wait;
pub use zero_copy::TxSlice;
