//! Why a verb failed, and the errno each reason is to C callers and the provider.

use std::fmt;

use crate::error::Error;

/// Why a verb failed. Every variant maps to a Linux errno ([`VerbsError::errno`]).
#[derive(Debug)]
pub enum VerbsError {
    /// The engine refused the verb with this errno (nothing changed).
    Refused(i32),
    /// A field of the call is wrong (EINVAL), named.
    Invalid(&'static str),
    /// The span overlaps one registered before only in part (EINVAL).
    PartialOverlap,
    /// The send or receive queue has no room for the work request (ENOMEM).
    QueueFull,
    /// The object is still used by another (EBUSY): a PD by regions or QPs, a CQ by QPs.
    Busy,
    /// A system call of the library failed (memfd, mmap, eventfd) with this errno.
    Os(i32),
    /// The engine serves no verbs (ENODEV): its reason.
    NoDevice(String),
    /// The engine answered with something this version does not expect (EPROTO).
    Protocol(String),
    /// Attaching or the control socket failed (the engine is gone, ...).
    Library(Error),
    /// The engine refused an offload registration: its reason, which begins with the errno
    /// name (`ENOENT:`, `EEXIST:`, `EINVAL:`, `ENOMEM:`) or `permission denied`.
    OffloadRefused(String),
}

impl VerbsError {
    /// The Linux errno.
    pub fn errno(&self) -> i32 {
        match self {
            VerbsError::Refused(e) | VerbsError::Os(e) => *e,
            VerbsError::Invalid(_) | VerbsError::PartialOverlap => libc::EINVAL,
            VerbsError::QueueFull => libc::ENOMEM,
            VerbsError::Busy => libc::EBUSY,
            VerbsError::Protocol(_) => libc::EPROTO,
            VerbsError::NoDevice(_) => libc::ENODEV,
            VerbsError::Library(e) => e.errno(),
            VerbsError::OffloadRefused(r) => {
                let names = [
                    ("ENOENT", libc::ENOENT),
                    ("EEXIST", libc::EEXIST),
                    ("ENOMEM", libc::ENOMEM),
                    ("permission denied", libc::EPERM),
                ];
                names
                    .iter()
                    .find(|(n, _)| r.starts_with(n))
                    .map_or(libc::EINVAL, |&(_, e)| e)
            }
        }
    }
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerbsError::Refused(e) => write!(
                f,
                "the engine refused the verb: {}",
                std::io::Error::from_raw_os_error(*e)
            ),
            VerbsError::Invalid(what) => write!(f, "invalid {what}"),
            VerbsError::PartialOverlap => {
                f.write_str("the span overlaps a registered span only in part")
            }
            VerbsError::QueueFull => f.write_str("the work queue is full"),
            VerbsError::Busy => f.write_str("the object is still in use"),
            VerbsError::Os(e) => write!(f, "{}", std::io::Error::from_raw_os_error(*e)),
            VerbsError::NoDevice(s) => write!(f, "the engine has no RDMA device: {s}"),
            VerbsError::Protocol(s) => write!(f, "unexpected reply from the engine: {s}"),
            VerbsError::Library(e) => write!(f, "{e}"),
            VerbsError::OffloadRefused(r) => write!(f, "offload handler refused: {r}"),
        }
    }
}

impl std::error::Error for VerbsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            VerbsError::Library(e) => Some(e),
            _ => None,
        }
    }
}

impl From<Error> for VerbsError {
    fn from(e: Error) -> VerbsError {
        VerbsError::Library(e)
    }
}

/// A post that stopped at a work request: those before `index` were posted.
#[derive(Debug)]
pub struct PostError {
    /// The first work request not posted.
    pub index: usize,
    /// Why.
    pub error: VerbsError,
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "work request {}: {}", self.index, self.error)
    }
}

impl std::error::Error for PostError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_has_its_errno() {
        assert_eq!(VerbsError::Refused(libc::EAGAIN).errno(), libc::EAGAIN);
        assert_eq!(VerbsError::Invalid("lkey").errno(), libc::EINVAL);
        assert_eq!(VerbsError::PartialOverlap.errno(), libc::EINVAL);
        assert_eq!(VerbsError::QueueFull.errno(), libc::ENOMEM);
        assert_eq!(VerbsError::Busy.errno(), libc::EBUSY);
        assert_eq!(VerbsError::Protocol("x".into()).errno(), libc::EPROTO);
        assert_eq!(VerbsError::NoDevice("x".into()).errno(), libc::ENODEV);
        assert_eq!(
            VerbsError::Library(Error::EngineGone).errno(),
            libc::ECONNRESET
        );
        assert_eq!(
            VerbsError::OffloadRefused("EEXIST: taken".into()).errno(),
            libc::EEXIST
        );
        assert_eq!(
            VerbsError::OffloadRefused("permission denied: rust".into()).errno(),
            libc::EPERM
        );
        assert_eq!(
            VerbsError::OffloadRefused("EINVAL: bad".into()).errno(),
            libc::EINVAL
        );
        assert!(VerbsError::Invalid("num_sge")
            .to_string()
            .contains("num_sge"));
    }
}
