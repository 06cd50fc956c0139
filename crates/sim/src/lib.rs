//! Deterministic discrete-event network simulator for Sluice hosts.
//!
//! A [`Sim`] joins any number of [`Host`]s (typically TCP cores behind an
//! adapter) and learning Ethernet switches with full-duplex links. Each link
//! direction has its own FIFO egress queue, serialization delay, propagation
//! delay, optional ECN marking and random impairments (loss, burst loss,
//! reordering, duplication, corruption): the model of [`sluice_fabric`], which the
//! software switch (`sluice-switch`) runs too. Everything runs in virtual time and
//! all randomness derives from one seed, so a run is exactly reproducible.
//!
//! [`sim_wire`] puts the simulator's wire under the engine runtime as a device backend
//! (`--backend sim`): the real engine against simulated peers, in virtual time, no root.
#![forbid(unsafe_code)]

mod error;
mod host;
mod link;
pub mod million;
mod nic;
mod pcap;
mod sim;
pub mod sim_wire;
mod switch;
mod tcp_host;
mod trace;

pub use error::SimError;
pub use host::{Host, MAX_FRAME_LEN};
pub use link::Direction;
pub use nic::OffloadNic;
pub use sim::{HostsView, LinkId, NodeId, Sim, SimStats};
/// MTP devices for switches ([`Sim::set_mtp_device`]): pathlets, balancers, fair share,
/// trimming.
pub use sluice_fabric::mtp;
pub use sluice_fabric::{GilbertElliott, Impairment, LinkConfig, LinkStats, SwitchStats};
pub use sluice_tcp::Instant;
pub use trace::{TraceEvent, TraceKind};
