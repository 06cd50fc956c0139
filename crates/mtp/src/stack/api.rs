//! What applications see: endpoints, send options, messages, events and the errors of
//! each operation.

use std::fmt;
use std::net::SocketAddrV4;

use super::config::Nanos;

pub use crate::endpoint::EndpointId;

/// How a message is to be sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendOptions {
    /// Higher goes first (mtp.txt 3.1.2).
    pub priority: u8,
    /// The traffic class (the tenant's class; keys the pathlet windows with the pathlet).
    pub tc: u8,
}

/// A whole received message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The sender's address and port.
    pub src: SocketAddrV4,
    /// The sender's message id.
    pub msg_id: u32,
    /// Its priority.
    pub priority: u8,
    /// Its traffic class.
    pub tc: u8,
    /// Its bytes.
    pub data: Vec<u8>,
}

/// Why a message failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailReason {
    /// It timed out more than `max_timeouts` times.
    Timeout,
    /// Its endpoint was unbound before it was acknowledged.
    Unbound,
}

impl fmt::Display for FailReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailReason::Timeout => f.write_str("retransmission timeouts exhausted"),
            FailReason::Unbound => f.write_str("endpoint unbound"),
        }
    }
}

/// What happened, for applications.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Every packet of the message was acknowledged at `at`.
    Delivered {
        /// The sending endpoint.
        ep: EndpointId,
        /// The message.
        msg_id: u32,
        /// When the last acknowledgement arrived.
        at: Nanos,
    },
    /// The message was given up.
    Failed {
        /// The sending endpoint.
        ep: EndpointId,
        /// The message.
        msg_id: u32,
        /// Why.
        reason: FailReason,
    },
    /// A whole message waits in the endpoint's receive queue.
    Readable {
        /// The endpoint.
        ep: EndpointId,
    },
}

/// Why `bind` failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindError {
    /// The port is bound already.
    InUse(u16),
    /// `max_endpoints` are bound.
    TooMany,
    /// No ephemeral port is free.
    NoEphemeral,
}

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindError::InUse(p) => write!(f, "MTP port {p} is in use"),
            BindError::TooMany => f.write_str("too many MTP endpoints"),
            BindError::NoEphemeral => f.write_str("no ephemeral MTP port is free"),
        }
    }
}

impl std::error::Error for BindError {}

/// Why `send_message` failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// No such endpoint.
    UnknownEndpoint,
    /// Longer than `max_message_len`.
    TooLong(usize),
    /// `max_outstanding` messages are unacknowledged.
    TooManyOutstanding,
    /// Destination port 0 or an unspecified/broadcast address.
    BadDestination,
    /// The sender keeps state for `max_destinations` destinations already.
    TooManyDestinations,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::UnknownEndpoint => f.write_str("unknown MTP endpoint"),
            SendError::TooLong(n) => write!(f, "MTP message of {n} bytes is too long"),
            SendError::TooManyOutstanding => f.write_str("too many outstanding MTP messages"),
            SendError::BadDestination => f.write_str("bad MTP destination"),
            SendError::TooManyDestinations => f.write_str("too many MTP destinations"),
        }
    }
}

impl std::error::Error for SendError {}
