//! Errors, and the Linux errno each one becomes in the C API and the preload shim.

use std::fmt;

use sluice_shm::ShmError;

/// Why a libsluice call failed. Every variant maps to a Linux errno ([`Error::errno`]).
#[derive(Debug)]
pub enum Error {
    /// The call would block (EAGAIN): a non-blocking socket, or a timeout expired.
    WouldBlock,
    /// A non-blocking connect started (EINPROGRESS); readiness or `take_error` tell the outcome.
    InProgress,
    /// An errno from the engine or from a local check (EBADF, EINVAL, ECONNREFUSED, ...).
    Os(i32),
    /// The engine hung up. Socket calls report this as the errno the call would see on a
    /// reset connection (see [`Error::errno_for`]); `Sluice`-level calls return it as is.
    EngineGone,
    /// Attaching to the engine failed (ECONNREFUSED).
    Shm(ShmError),
    /// The engine's access policy refused this process's uid (EACCES); the engine's reason.
    Denied(String),
    /// Attaching would cross one of the engine's quotas (applications per uid): EAGAIN, as
    /// fork over RLIMIT_NPROC; the engine's reason.
    Quota(String),
}

/// What kind of call failed, for the errno of [`Error::EngineGone`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A read (recv, accept, zero-copy RX): ECONNRESET.
    Read,
    /// A write (send, shutdown, zero-copy TX): EPIPE.
    Write,
    /// A new socket or connection (open, bind, listen, connect): ECONNREFUSED.
    Open,
}

impl Error {
    /// The Linux errno (EngineGone counts as a read: ECONNRESET).
    pub fn errno(&self) -> i32 {
        self.errno_for(Op::Read)
    }

    /// The Linux errno when the failed call was of kind `op`; only `EngineGone` depends on it.
    pub fn errno_for(&self, op: Op) -> i32 {
        match self {
            Error::WouldBlock => libc::EAGAIN,
            Error::InProgress => libc::EINPROGRESS,
            Error::Os(e) => *e,
            Error::EngineGone => match op {
                Op::Read => libc::ECONNRESET,
                Op::Write => libc::EPIPE,
                Op::Open => libc::ECONNREFUSED,
            },
            Error::Shm(_) => libc::ECONNREFUSED,
            Error::Denied(_) => libc::EACCES,
            Error::Quota(_) => libc::EAGAIN,
        }
    }

    /// `EngineGone` becomes the plain errno a call of kind `op` reports (so that a caller who
    /// only looks at [`Error::errno`] sees EPIPE for writes); other errors are unchanged.
    pub(crate) fn for_op(self, op: Op) -> Error {
        match self {
            Error::EngineGone => Error::Os(self.errno_for(op)),
            e => e,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::WouldBlock => f.write_str("the operation would block"),
            Error::InProgress => f.write_str("the connection is in progress"),
            Error::Os(e) => write!(f, "{}", std::io::Error::from_raw_os_error(*e)),
            Error::EngineGone => f.write_str("the Sluice engine went away"),
            Error::Shm(e) => write!(f, "attaching to the Sluice engine: {e}"),
            Error::Denied(reason) | Error::Quota(reason) => {
                write!(f, "the Sluice engine refused to attach: {reason}")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Shm(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ShmError> for Error {
    fn from(e: ShmError) -> Error {
        match e {
            // A hang-up on the control socket after attaching is the engine dying.
            ShmError::Disconnected => Error::EngineGone,
            e => Error::Shm(e),
        }
    }
}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> std::io::Error {
        match e {
            Error::Shm(e) => std::io::Error::new(std::io::ErrorKind::ConnectionRefused, e),
            Error::Denied(reason) => std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("the Sluice engine refused to attach: {reason}"),
            ),
            Error::Quota(reason) => std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                format!("the Sluice engine refused to attach: {reason}"),
            ),
            e => std::io::Error::from_raw_os_error(e.errno()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_has_its_errno() {
        assert_eq!(Error::WouldBlock.errno(), libc::EAGAIN);
        assert_eq!(Error::InProgress.errno(), libc::EINPROGRESS);
        assert_eq!(Error::Os(libc::EBADF).errno(), libc::EBADF);
        assert_eq!(Error::EngineGone.errno(), libc::ECONNRESET);
        assert_eq!(Error::EngineGone.errno_for(Op::Write), libc::EPIPE);
        assert_eq!(Error::EngineGone.errno_for(Op::Open), libc::ECONNREFUSED);
        assert_eq!(
            Error::Shm(ShmError::BadHeader).errno_for(Op::Write),
            libc::ECONNREFUSED
        );
    }

    #[test]
    fn engine_death_becomes_the_errno_of_the_call() {
        assert_eq!(
            Error::EngineGone.for_op(Op::Write).errno(),
            libc::EPIPE,
            "a write after the engine died is EPIPE even to errno()"
        );
        assert_eq!(Error::EngineGone.for_op(Op::Read).errno(), libc::ECONNRESET);
        assert!(matches!(
            Error::WouldBlock.for_op(Op::Write),
            Error::WouldBlock
        ));
        assert!(matches!(
            Error::from(ShmError::Disconnected),
            Error::EngineGone
        ));
    }

    #[test]
    fn io_errors_keep_the_kind() {
        let e: std::io::Error = Error::WouldBlock.into();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
        let e: std::io::Error = Error::Os(libc::ECONNREFUSED).into();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
        assert!(Error::Os(libc::EPIPE).to_string().contains("pipe"));
        let denied = Error::Denied("permission denied: uid 65534".into());
        assert_eq!(denied.errno(), libc::EACCES);
        assert!(denied.to_string().contains("uid 65534"));
        let e: std::io::Error = denied.into();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
        let quota = Error::Quota("quota exceeded: uid 65534 has 64 applications".into());
        assert_eq!(quota.errno(), libc::EAGAIN);
        assert!(quota.to_string().contains("quota exceeded"));
        let e: std::io::Error = quota.into();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
        assert!(e.to_string().contains("uid 65534"), "{e}");
    }
}
