//! Sluice's sans-IO TCP core: a control plane and a data-path pipeline of stages with
//! stage-owned state (Laminar, FlexTOE), driven with explicit time.
//!
//! Drive a [`Stack`] with [`Stack::handle_frames`], [`Stack::poll_transmit`],
//! [`Stack::poll_timeout`] and [`Stack::handle_timeout`]; use it through [`Stack::listen`],
//! [`Stack::connect`], [`Stack::accept`], [`Stack::send`], [`Stack::recv`],
//! [`Stack::shutdown`], [`Stack::close`] and [`Stack::poll_event`].
#![forbid(unsafe_code)]

pub mod buffer;
pub mod cc;
pub mod config;
pub mod control;
pub mod counters;
pub mod datapath;
mod events;
pub mod frame;
mod stack;
pub mod table;
pub mod time;
pub mod timer;

pub use cc::Algorithm;
pub use config::{AckPolicy, Config, ConfigError, Recovery};
pub use control::state::{ConnError, TcpState};
pub use counters::Counters;
pub use frame::{Transmit, TxChecksum};
pub use stack::{ConnId, ConnInfo, Error, Event, ListenerId, Readiness, Stack};
pub use time::Instant;
