//! Why the service could not start or run.

use std::fmt;

use sluice_shm::ShmError;

/// A service failure (never caused by an application: bad input from one is refused and
/// counted, see [`crate::Counters`]).
#[derive(Debug)]
pub enum ServiceError {
    /// The configuration is out of range (the message says which value and why).
    Config(String),
    /// The control socket or a shared-memory object could not be set up.
    Shm(ShmError),
    /// A system call of the service's own failed.
    Sys {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        err: nix::errno::Errno,
    },
}

impl fmt::Display for ServiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServiceError::Config(m) => write!(f, "bad service configuration: {m}"),
            ServiceError::Shm(e) => write!(f, "{e}"),
            ServiceError::Sys { what, err } => write!(f, "{what}: {}", err.desc()),
        }
    }
}

impl std::error::Error for ServiceError {}

impl From<ShmError> for ServiceError {
    fn from(e: ShmError) -> Self {
        ServiceError::Shm(e)
    }
}

/// Wraps an errno with what was being done.
pub(crate) fn sys(what: &'static str) -> impl FnOnce(nix::errno::Errno) -> ServiceError {
    move |err| ServiceError::Sys { what, err }
}
