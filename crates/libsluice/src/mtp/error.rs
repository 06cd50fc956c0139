//! Why an MTP call failed, and the errno each reason is to C callers.

use std::fmt;

use sluice_shm::mtp::MtpStatus;

use crate::error::Error;

/// Why an MTP call failed. Every variant maps to a Linux errno ([`MtpError::errno`]).
#[derive(Debug)]
pub enum MtpError {
    /// The engine refused the request with this errno (nothing changed).
    Refused(i32),
    /// The message is longer than the endpoint's `max_message` (EMSGSIZE).
    TooLong(usize),
    /// The engine completed the message or buffer with an error.
    Failed(MtpStatus),
    /// The wait's timeout passed first (ETIMEDOUT).
    TimedOut,
    /// A system call of the library failed (memfd, mmap, eventfd) with this errno.
    Os(i32),
    /// The engine serves no MTP (ENODEV): its reason.
    NoMtp(String),
    /// The engine answered with something this version does not expect (EPROTO).
    Protocol(String),
    /// Attaching or the control socket failed (the engine is gone, ...).
    Library(Error),
}

impl MtpError {
    /// The Linux errno.
    pub fn errno(&self) -> i32 {
        match self {
            MtpError::Refused(e) | MtpError::Os(e) => *e,
            MtpError::TooLong(_) => libc::EMSGSIZE,
            MtpError::Failed(MtpStatus::Timeout) | MtpError::TimedOut => libc::ETIMEDOUT,
            MtpError::Failed(MtpStatus::BadDestination) => libc::EHOSTUNREACH,
            MtpError::Failed(MtpStatus::TooLong) => libc::EMSGSIZE,
            MtpError::Failed(MtpStatus::Flushed) => libc::ECANCELED,
            MtpError::Failed(_) => libc::EINVAL,
            MtpError::NoMtp(_) => libc::ENODEV,
            MtpError::Protocol(_) => libc::EPROTO,
            MtpError::Library(e) => e.errno(),
        }
    }
}

impl fmt::Display for MtpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MtpError::Refused(e) => write!(
                f,
                "the engine refused the MTP request: {}",
                std::io::Error::from_raw_os_error(*e)
            ),
            MtpError::TooLong(n) => write!(f, "a message of {n} bytes is too long"),
            MtpError::Failed(s) => write!(f, "MTP: {s}"),
            MtpError::TimedOut => f.write_str("timed out"),
            MtpError::Os(e) => write!(f, "{}", std::io::Error::from_raw_os_error(*e)),
            MtpError::NoMtp(s) => write!(f, "the engine serves no MTP: {s}"),
            MtpError::Protocol(s) => write!(f, "unexpected reply from the engine: {s}"),
            MtpError::Library(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for MtpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MtpError::Library(e) => Some(e),
            _ => None,
        }
    }
}

impl From<Error> for MtpError {
    fn from(e: Error) -> MtpError {
        MtpError::Library(e)
    }
}

impl From<crate::verbs::VerbsError> for MtpError {
    fn from(e: crate::verbs::VerbsError) -> MtpError {
        match e {
            crate::verbs::VerbsError::Library(e) => MtpError::Library(e),
            other => MtpError::Os(other.errno()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_has_its_errno() {
        assert_eq!(
            MtpError::Refused(libc::EADDRINUSE).errno(),
            libc::EADDRINUSE
        );
        assert_eq!(MtpError::TooLong(5).errno(), libc::EMSGSIZE);
        assert_eq!(MtpError::TimedOut.errno(), libc::ETIMEDOUT);
        assert_eq!(
            MtpError::Failed(MtpStatus::Timeout).errno(),
            libc::ETIMEDOUT
        );
        assert_eq!(MtpError::Failed(MtpStatus::BadMemory).errno(), libc::EINVAL);
        assert_eq!(MtpError::NoMtp("x".into()).errno(), libc::ENODEV);
        assert_eq!(
            MtpError::Library(Error::EngineGone).errno(),
            libc::ECONNRESET
        );
        assert!(MtpError::TooLong(7).to_string().contains('7'));
    }
}
