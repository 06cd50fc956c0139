//! `sluice switch`: a userspace software switch for the namespace lab (the kernel here has
//! no netem, so shaping, ECN marking and impairment between lab hosts happen here).
//!
//! - [`SwitchCore`]: the forwarding core, sans-IO and deterministic (time passed in, seeded
//!   randomness): a learning bridge and per-port [`Egress`] queues. The queue model is
//!   [`sluice_fabric::Channel`], the same code the simulator runs: line rate, byte and
//!   frame capacity with tail drop, ECN CE marking above K, random and Gilbert–Elliott
//!   burst loss, reordering, duplication, corruption; plus a fixed delay.
//! - [`Runner`]: the core between AF_PACKET sockets (`sluice-device`) in any namespaces, in
//!   real time.
//! - [`PortReport`]: a port's counters, and the `key=value` line `sluice switch` prints
//!   them as on SIGTERM (written and read back in one place).
//! - [`PortSpec`], [`set_param`]: ports and egress parameters as the command line spells them.
//! - [`MtpConfig`]: the MTP device (pathlets per port, balancer over route groups, fair
//!   share, trimming) the core runs when configured, the simulator's own
//!   ([`sluice_fabric::mtp`]).
#![forbid(unsafe_code)]

mod config;
mod core;
mod egress;
mod error;
mod mtp;
mod pathlet_words;
mod report;
mod runner;
mod units;

pub use config::{
    default_egress, parse_burst, parse_duration, parse_probability, parse_rate, parse_size,
    set_param, ConfigError, PortSpec, MAX_IFACE_LEN,
};
pub use core::{PortStats, SwitchCore, TxResult, MAX_DELAYED};
pub use egress::{Egress, EgressStats};
pub use error::SwitchError;
pub use mtp::{parse_balancer, parse_group, MtpConfig, MAX_GROUPS};
pub use pathlet_words::parse_feedback;
pub use report::{PortReport, ReportLineError};
pub use runner::{Runner, MAX_PORTS};
pub use sluice_fabric::mtp as device;
pub use sluice_fabric::{GilbertElliott, Impairment, LinkConfig};
