//! Errors of the application API.

use crate::control::state::ConnError;

/// Errors of the application API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Nothing to do now; retry after an event.
    WouldBlock,
    /// The handle does not name a live connection or listener.
    InvalidHandle,
    /// The port is already in use.
    AddrInUse,
    /// The connection table, listener table or ephemeral ports are exhausted.
    NoResources,
    /// The connection is not open for this operation (e.g. send after shutdown).
    NotConnected,
    /// An argument was invalid (port 0, own address, broadcast).
    InvalidArgument,
    /// The connection failed.
    Connection(ConnError),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::WouldBlock => f.write_str("operation would block"),
            Error::InvalidHandle => f.write_str("invalid or stale handle"),
            Error::AddrInUse => f.write_str("address in use"),
            Error::NoResources => f.write_str("no free connection slot, listener or port"),
            Error::NotConnected => f.write_str("not connected for this operation"),
            Error::InvalidArgument => f.write_str("invalid argument"),
            Error::Connection(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}
