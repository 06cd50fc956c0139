//! Sluice's sans-IO TCP core: a control plane and a data-path pipeline of stages with
//! stage-owned state (Laminar, FlexTOE), driven with explicit time.
//!
//! Drive a [`Stack`] with [`Stack::handle_frames`], [`Stack::poll_transmit`],
//! [`Stack::poll_timeout`] and [`Stack::handle_timeout`]; use it through [`Stack::listen`],
//! [`Stack::connect`], [`Stack::accept`], [`Stack::send`], [`Stack::recv`],
//! [`Stack::shutdown`], [`Stack::close`] and [`Stack::poll_event`].
#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

/// The timer structures for the timer bench (benches/timers.rs); not part of the API.
#[doc(hidden)]
pub mod bench_support;
mod buffer;
pub mod cc;
pub mod config;
mod control;
pub mod counters;
mod datapath;
mod error;
mod events;
pub mod frame;
mod handle;
mod header_only;
mod host;
mod inspect;
mod invariant;
mod memory_group;
mod offload;
mod payload_source;
mod pressure;
mod queue;
mod reuseport;
pub mod shared_log;
mod stack;
mod table;
pub mod time;
mod timer;
pub mod trace;

pub use cc::Algorithm;
pub use config::{AckPolicy, Config, ConfigError, FlowGroupMember, MemoryLimits, Recovery};
pub use control::splice::{
    SpliceEnd, SpliceError, SpliceEvent, SpliceId, SpliceRewrite, SpliceStats,
};
pub use control::state::{ConnError, TcpState};
pub use control::teardown::Closing;
pub use counters::Counters;
pub use datapath::StateBytes;
pub use error::{ConnectError, Error, ListenError, MemoryGroupError};
pub use frame::{Transmit, TxChecksum};
pub use handle::{ConnId, ListenerId};
pub use header_only::TxPositions;
pub use host::Stack;
pub use inspect::{ConnRow, ListenerInfo};
pub use invariant::{InvariantViolation, WheelViolation};
pub use memory_group::{GroupStats, UNGROUPED};
pub use payload_source::{PayloadSource, Touched, TxPath};
pub use pressure::MemoryState;
pub use shared_log::{LogError, LogId, LogInfo, LogRedirect};
pub use stack::{ConnInfo, Event, Readiness};
pub use time::Instant;
pub use trace::{TraceData, TraceEvent, Tracepoint, Tracer};
