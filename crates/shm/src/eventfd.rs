//! Eventfds: how a sleeping side is woken.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::eventfd::{EfdFlags, EventFd as NixEventFd};

use crate::error::sys;
use crate::ShmError;

/// A non-blocking eventfd.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A new non-blocking, close-on-exec eventfd.
    pub fn new() -> Result<EventFd, ShmError> {
        let e = NixEventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
            .map_err(sys("eventfd"))?;
        Ok(EventFd(e.into()))
    }

    /// Wraps an eventfd received from the engine.
    pub fn from_owned(fd: OwnedFd) -> EventFd {
        EventFd(fd)
    }

    /// Wakes whoever sleeps on it. A full counter already means "woken", so it is not an error.
    pub fn signal(&self) {
        let _ = nix::unistd::write(&self.0, &1u64.to_ne_bytes());
    }

    /// Writes `token` (8 bytes, native order): `signal` for an eventfd when it is 1, one
    /// event record for a pipe. False when it would block (a pipe nobody reads) or failed.
    pub fn notify(&self, token: u64) -> bool {
        loop {
            match nix::unistd::write(&self.0, &token.to_ne_bytes()) {
                Ok(8) => return true,
                Err(Errno::EINTR) => continue,
                _ => return false,
            }
        }
    }

    /// Whether writes to it never block (O_NONBLOCK): the engine writes only to such
    /// descriptors from applications.
    pub fn is_nonblocking(&self) -> bool {
        nix::fcntl::fcntl(&self.0, nix::fcntl::FcntlArg::F_GETFL).is_ok_and(|fl| {
            nix::fcntl::OFlag::from_bits_truncate(fl).contains(nix::fcntl::OFlag::O_NONBLOCK)
        })
    }

    /// Clears it; returns whether it had been signalled.
    pub fn drain(&self) -> bool {
        let mut b = [0u8; 8];
        loop {
            match nix::unistd::read(&self.0, &mut b) {
                Ok(_) => return true,
                Err(Errno::EINTR) => continue,
                Err(_) => return false,
            }
        }
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}
