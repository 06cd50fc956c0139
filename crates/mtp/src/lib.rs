//! MTP, the message transport of mtp.txt, as a sans-IO core beside TCP and RDMA (DESIGN.md
//! "Three transports, one engine").
//!
//! - [`wire`]: the header of mtp.txt Figure 4 (ports, message id, priority, message length,
//!   packet number/offset/length, the path-exclude, path-feedback, ACK-path-feedback, SACK
//!   and NACK lists), carried over IPv4 protocol 253 or UDP port 9919; checked views,
//!   parse/emit with a no-panic contract, and the in-place edits devices make.
//! - [`stack`]: [`stack::MtpStack`], the transport (docs/mtp.md "The transport").
//! - [`msg`]: the sender's message table and order, the receiver's reassembly, the RTO.
//! - [`cc`]: pathlet congestion control: windows per (pathlet, TC), paths, exclusion.
//! - [`blob`]: blobs larger than one message, split and reassembled in order.
//!
//! The byte layout is in `docs/mtp.md`; `tools/mtp.lua` dissects it in tshark.
#![forbid(unsafe_code)]

pub mod blob;
pub mod cc;
pub mod endpoint;
pub mod msg;
pub mod stack;
pub mod time;
pub mod wire;
