//! The RoCEv2 wire format: InfiniBand transport headers carried in UDP (destination port
//! 4791) over IPv4, protected by the invariant CRC.
//!
//! ```text
//! Ethernet | IPv4 | UDP (dst 4791) | BTH (12) | RETH (16)? | AETH (4)? | ImmDt (4)? | payload | pad to 4 | ICRC (4)
//! ```
//!
//! Each header has a plain-data repr with `parse`/`emit` over a byte slice, as in
//! `sluice-wire`; [`RocePacket`] is a checked view of a whole UDP payload, and
//! [`frame`] emits and parses whole Ethernet frames. No-panic contract: every parser takes
//! arbitrary bytes and answers a [`RoceError`] for anything short, unknown or inconsistent;
//! nothing here allocates.

pub mod aeth;
pub mod bth;
mod error;
pub mod frame;
pub mod icrc;
pub mod immdt;
pub mod opcode;
pub mod packet;
pub mod psn;
pub mod reth;

pub use aeth::{AethRepr, NakCode, Syndrome};
pub use bth::BthRepr;
pub use error::RoceError;
pub use immdt::ImmDt;
pub use opcode::{ExtHeaders, Opcode};
pub use packet::{RocePacket, RoceRepr};
pub use psn::Psn;
pub use reth::RethRepr;

/// The UDP destination port IANA assigned to RoCEv2.
pub const ROCEV2_UDP_PORT: u16 = 4791;
