//! Errors of the shared-memory layer.

use std::fmt;

/// Why a shared-memory operation failed.
#[derive(Debug)]
pub enum ShmError {
    /// A layout value is out of range (the message says which and why).
    Layout(String),
    /// A system call failed.
    Sys {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        err: nix::errno::Errno,
    },
    /// The region file is smaller than its layout says (a truncated or foreign file).
    RegionTooSmall {
        /// Bytes the layout needs.
        need: u64,
        /// Bytes the file has.
        have: u64,
    },
    /// The region does not start with the expected magic and version.
    BadHeader,
    /// A control message was malformed (bad JSON, missing descriptors, too long).
    Protocol(String),
    /// The peer closed the control socket.
    Disconnected,
    /// The other side wrote a queue index outside its bounds; the queue is no longer used.
    CorruptQueue,
}

impl fmt::Display for ShmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShmError::Layout(m) => write!(f, "bad shared-memory layout: {m}"),
            ShmError::Sys { what, err } => write!(f, "{what}: {}", err.desc()),
            ShmError::RegionTooSmall { need, have } => {
                write!(f, "shared region has {have} bytes, its layout needs {need}")
            }
            ShmError::BadHeader => f.write_str("shared region has a bad magic or version"),
            ShmError::Protocol(m) => write!(f, "control protocol: {m}"),
            ShmError::Disconnected => f.write_str("the engine's control socket closed"),
            ShmError::CorruptQueue => f.write_str("a context queue index is out of bounds"),
        }
    }
}

impl std::error::Error for ShmError {}

/// Wraps an errno with what was being done.
pub(crate) fn sys(what: &'static str) -> impl FnOnce(nix::errno::Errno) -> ShmError {
    move |err| ShmError::Sys { what, err }
}
