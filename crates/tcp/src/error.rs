//! Errors of the application API: [`Error`] for most operations, and one enum per
//! operation whose causes callers answer differently ([`ListenError`], [`ConnectError`]),
//! as smoltcp does.

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

/// Why [`crate::Stack::listen`] refused: each cause asks the caller for a different answer
/// (a socket layer maps them to EINVAL, EADDRINUSE and ENOBUFS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListenError {
    /// Port 0 cannot be listened on.
    InvalidArgument,
    /// A listener already has the port.
    AddrInUse,
    /// Every listener slot is taken.
    NoResources,
}

// The same words as the shared Error, so messages built from either read alike.
impl core::fmt::Display for ListenError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        Error::from(*self).fmt(f)
    }
}

impl std::error::Error for ListenError {}

impl From<ListenError> for Error {
    fn from(e: ListenError) -> Self {
        match e {
            ListenError::InvalidArgument => Error::InvalidArgument,
            ListenError::AddrInUse => Error::AddrInUse,
            ListenError::NoResources => Error::NoResources,
        }
    }
}

/// Why [`crate::Stack::connect`] refused: a bad destination, or nothing left to open a
/// connection with (a socket layer maps them to EINVAL and EADDRNOTAVAIL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectError {
    /// Port 0, our own address, or a broadcast, multicast or unspecified address.
    InvalidArgument,
    /// No free connection slot, or every ephemeral port to the destination is taken.
    NoResources,
}

impl core::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        Error::from(*self).fmt(f)
    }
}

impl std::error::Error for ConnectError {}

impl From<ConnectError> for Error {
    fn from(e: ConnectError) -> Self {
        match e {
            ConnectError::InvalidArgument => Error::InvalidArgument,
            ConnectError::NoResources => Error::NoResources,
        }
    }
}

/// Why a memory-group call ([`crate::Stack::set_memory_group`] and the like) refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryGroupError {
    /// The group id is not below `Config::max_memory_groups`.
    NoSuchGroup {
        /// The id asked for.
        group: u16,
        /// How many groups there are (`Config::max_memory_groups`).
        groups: usize,
    },
    /// The handle does not name a live connection or listener.
    InvalidHandle,
    /// Group 0 is the ungrouped: it takes no limits of its own.
    Ungrouped,
    /// Limits must satisfy 0 < low <= pressure <= high.
    BadLimits,
}

impl core::fmt::Display for MemoryGroupError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            MemoryGroupError::NoSuchGroup { group, groups } => {
                write!(f, "no memory group {group} (groups are 0..{groups})")
            }
            MemoryGroupError::InvalidHandle => Error::InvalidHandle.fmt(f),
            MemoryGroupError::Ungrouped => {
                f.write_str("memory group 0 is the ungrouped and takes no limits")
            }
            MemoryGroupError::BadLimits => {
                f.write_str("memory group limits must be 0 < low <= pressure <= high")
            }
        }
    }
}

impl std::error::Error for MemoryGroupError {}
