//! Wire formats for Sluice: Ethernet II (with one optional 802.1Q tag), ARP
//! (Ethernet/IPv4), IPv4, TCP, UDP and the Internet checksum; and the flow group of a
//! frame (a keyed symmetric 4-tuple hash, RSS in software).
//!
//! The design follows smoltcp's `wire` module in a compact form: each protocol
//! has a plain-data *repr* with `parse`/`emit`, and (where useful) a checked
//! zero-copy *view* over a byte buffer. Parsing never panics on any input and
//! neither parsing nor emitting allocates.
#![forbid(unsafe_code)]

pub mod arp;
pub mod checksum;
mod error;
pub mod ethernet;
mod field;
pub mod flow_group;
pub mod gso;
pub mod ipv4;
pub mod tcp;
pub mod udp;

pub use error::WireError;
pub use ethernet::EthernetAddress;
pub use std::net::Ipv4Addr;
