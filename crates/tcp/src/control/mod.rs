//! The control plane: connection lifecycle (RFC 9293), handshakes with SYN cookies, RFC 5961
//! defences, teardown and TIME-WAIT, retransmission and persist timers, ARP, and the
//! congestion-control loop that runs each connection's policy about once per RTT. It runs off the
//! fast path: the data-path hands it exceptions and state-change events, and it installs
//! synchronized connections into the data-path's stage tables.

mod arp;
mod congestion;
pub(crate) mod cookie;
mod handshake;
mod input;
pub(crate) mod isn;
pub(crate) mod loss_probe;
mod memory;
mod memory_group;
pub(crate) mod neighbor;
mod offload;
pub(crate) mod rcv_space;
mod reorder;
mod reset;
pub(crate) mod splice;
pub(crate) mod state;
mod syn_cookie;
pub(crate) mod teardown;
mod timers;
