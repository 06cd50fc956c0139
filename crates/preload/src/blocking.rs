//! Blocking calls on engine sockets (read, recv, send, accept, connect, sendfile), which a
//! signal interrupts as it would Linux's (signal(7)).
//!
//! libsluice's own blocking calls wait with a condition of their own, which no signal can
//! end while it spins, so these calls are made here from their non-blocking forms: try,
//! and while the call would block, wait (`Sluice::wait`) until the socket is ready, the
//! socket's timeout passes (EAGAIN), or a signal handler runs on this thread ([`Blocker`]).
//! A handler with SA_RESTART does not end the call unless the socket has a timeout for it
//! (SO_RCVTIMEO for reading calls, SO_SNDTIMEO for writing ones); then, and for handlers
//! without SA_RESTART, the call fails with EINTR (or returns what it had transferred).

use std::time::Instant;

use sluice::{Error, Socket};

use crate::signals::{self, Mark};

/// Which of the socket's timeouts the call has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// SO_RCVTIMEO: read, recv, accept.
    Read,
    /// SO_SNDTIMEO: write, send, connect, sendfile.
    Write,
}

/// `Ok(None)` for `WouldBlock`: the shape [`Blocker::run`] wants from a non-blocking call.
pub fn nonblocking<T>(r: Result<T, Error>) -> Result<Option<T>, Error> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(Error::WouldBlock) => Ok(None),
        Err(e) => Err(e),
    }
}

/// One blocking call on an engine socket: its start mark, deadline and restart rule.
pub struct Blocker<'a> {
    s: &'a Socket,
    /// The thread's handler counts when the call began.
    mark: Mark,
    /// The counts when the last sleep was interrupted (to tell our handlers from others).
    seen: Mark,
    /// No timeout: a handler with SA_RESTART lets the call go on.
    restartable: bool,
    deadline: Option<Instant>,
}

impl<'a> Blocker<'a> {
    /// Starts a blocking call on `s`.
    pub fn new(s: &'a Socket, side: Side) -> Blocker<'a> {
        let mark = signals::mark();
        let timeout = match side {
            Side::Read => s.read_timeout(),
            Side::Write => s.write_timeout(),
        };
        Blocker {
            s,
            mark,
            seen: mark,
            restartable: timeout.is_none(),
            deadline: timeout.map(|t| Instant::now() + t),
        }
    }

    /// Whether a signal handler has ended the call.
    pub fn interrupted(&self) -> bool {
        self.mark.interrupts(self.restartable)
    }

    /// The call cannot go on yet: waits until `ready()`, the engine wakes the thread, or a
    /// sleep ends. Err(Os(EINTR)) when a signal ends the call, Err(WouldBlock) once the
    /// timeout has passed, Err(other) if the wait failed (the engine is gone); Ok: try again.
    pub fn wait(&mut self, ready: &mut dyn FnMut() -> bool) -> Result<(), Error> {
        if self.interrupted() {
            return Err(Error::Os(libc::EINTR));
        }
        let remaining = match self.deadline {
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(r) if !r.is_zero() => Some(r),
                _ => return Err(Error::WouldBlock),
            },
            None => None,
        };
        let (mark, restartable) = (self.mark, self.restartable);
        let r = self.s.sluice().wait(remaining, &mut [], &mut || {
            ready() || mark.interrupts(restartable)
        });
        match r {
            Ok(_) => Ok(()),
            Err(Error::Os(libc::EINTR)) => {
                let now = signals::mark();
                if now == self.seen {
                    // A handler installed behind this library's back (the raw system call):
                    // its SA_RESTART is unknown, so the call ends as it did before.
                    return Err(Error::Os(libc::EINTR));
                }
                // Ours: the next wait() decides whether it ends the call.
                self.seen = now;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Runs the call: `attempt` is its non-blocking form (Ok(None): it would block), tried
    /// again whenever the socket may have changed; `ready` says when that is.
    pub fn run<T>(
        mut self,
        mut attempt: impl FnMut() -> Result<Option<T>, Error>,
        mut ready: impl FnMut() -> bool,
    ) -> Result<T, Error> {
        loop {
            if let Some(v) = attempt()? {
                return Ok(v);
            }
            self.wait(&mut ready)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn would_block_means_wait_and_other_errors_stay() {
        assert!(matches!(nonblocking(Ok::<_, Error>(3)), Ok(Some(3))));
        assert!(matches!(
            nonblocking::<usize>(Err(Error::WouldBlock)),
            Ok(None)
        ));
        assert!(matches!(
            nonblocking::<usize>(Err(Error::Os(libc::ECONNRESET))),
            Err(Error::Os(libc::ECONNRESET))
        ));
        assert!(matches!(
            nonblocking::<usize>(Err(Error::InProgress)),
            Err(Error::InProgress)
        ));
    }
}
