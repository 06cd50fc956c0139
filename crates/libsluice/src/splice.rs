//! Connection splicing (acceltcp.txt 4.3; docs/service.md, Splice): two established
//! sockets handed to the engine's splice stage, which relays their peers' frames to each
//! other without waking the application; the engine reports the splice's end with its
//! byte counts on the context that asked (on any of its cores' completion queues, when the
//! engine has several: `ContextSlot::drain` reads them all).

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_shm::{flags, Command, Dir, SpliceReport};

use crate::attach::Sluice;
use crate::context::ContextSlot;
use crate::error::Error;
use crate::socket::Socket;

/// Times a splice refused for bytes still in the rings is asked again (forwarding them in
/// between) before [`SpliceError::Busy`].
const TRIES: u32 = 1000;

/// Why [`Socket::splice`] failed (nothing changed: both sockets stay the application's).
#[derive(Debug)]
pub enum SpliceError {
    /// A socket is closed, or belongs to another attachment (EBADF).
    BadSocket,
    /// A socket spliced to itself, or a listener (EINVAL).
    Invalid,
    /// A socket is not connected, failed, or was shut down for writing (ENOTCONN).
    NotConnected,
    /// A socket is already spliced (EALREADY).
    AlreadySpliced,
    /// The two connections cannot be joined: a peer's MSS is below ours, timestamps are on
    /// one side only, or the engine serves them on different data-path cores (EOPNOTSUPP;
    /// a caller relays the bytes itself instead).
    Incompatible,
    /// The engine's splice table is full (ENOBUFS).
    Full,
    /// Bytes kept arriving faster than they could be forwarded before the splice (EAGAIN).
    Busy,
    /// Another failure (the engine went away, ...).
    Other(Error),
}

impl SpliceError {
    /// The Linux errno it stands for (the C API's and the shim's).
    pub fn errno(&self) -> i32 {
        match self {
            SpliceError::BadSocket => libc::EBADF,
            SpliceError::Invalid => libc::EINVAL,
            SpliceError::NotConnected => libc::ENOTCONN,
            SpliceError::AlreadySpliced => libc::EALREADY,
            SpliceError::Incompatible => libc::EOPNOTSUPP,
            SpliceError::Full => libc::ENOBUFS,
            SpliceError::Busy => libc::EAGAIN,
            SpliceError::Other(e) => e.errno(),
        }
    }

    fn from_errno(e: Error) -> SpliceError {
        match e.errno() {
            libc::EBADF => SpliceError::BadSocket,
            libc::EINVAL => SpliceError::Invalid,
            libc::ENOTCONN => SpliceError::NotConnected,
            libc::EALREADY => SpliceError::AlreadySpliced,
            libc::EOPNOTSUPP => SpliceError::Incompatible,
            libc::ENOBUFS => SpliceError::Full,
            libc::EAGAIN => SpliceError::Busy,
            _ => SpliceError::Other(e),
        }
    }
}

impl fmt::Display for SpliceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpliceError::BadSocket => f.write_str("socket closed or of another attachment"),
            SpliceError::Invalid => f.write_str("cannot splice a socket to itself or a listener"),
            SpliceError::NotConnected => f.write_str("socket not connected"),
            SpliceError::AlreadySpliced => f.write_str("socket already spliced"),
            SpliceError::Incompatible => {
                f.write_str("connections cannot be joined (MSS, timestamps or cores differ)")
            }
            SpliceError::Full => f.write_str("the engine's splice table is full"),
            SpliceError::Busy => f.write_str("bytes kept arriving before the splice"),
            SpliceError::Other(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for SpliceError {}

/// A splice the engine granted. Dropping it stops listening for its reports; the splice
/// goes on (the engine owns it).
pub struct Splice {
    sluice: Arc<Sluice>,
    ctx: Arc<ContextSlot>,
    handle: u32,
    forwarded: (u64, u64),
}

impl fmt::Debug for Splice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Splice")
            .field("handle", &self.handle)
            .field("forwarded", &self.forwarded)
            .finish_non_exhaustive()
    }
}

impl Splice {
    /// The engine's handle for it.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// Bytes the library forwarded itself before the splice (what sat unread in the first
    /// socket's ring went to the second, and the other way): (a to b, b to a). The
    /// engine's counts cover only what the splice relayed.
    pub fn forwarded(&self) -> (u64, u64) {
        self.forwarded
    }

    /// The latest report without waiting: None before the engine installed the splice,
    /// then Installed, then its end (Closed, a reset or Failed) with the byte counts.
    pub fn poll(&self) -> Option<SpliceReport> {
        if let Some(mut q) = self.ctx.try_queues() {
            if self.ctx.drain(&mut q) {
                // Room in the completion queue: a sleeping engine may hold reports for it.
                self.sluice.ring_doorbell();
            }
        }
        self.ctx.report(self.handle)
    }

    /// Waits until the splice ended (its final report) or `timeout` passed (None: forever);
    /// Ok(None) on a timeout.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<Option<SpliceReport>, Error> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(r) = self.poll().filter(|r| r.outcome.is_final()) {
                return Ok(Some(r));
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Ok(None),
                },
                None => None,
            };
            // Sleeps in slices: the completion queue may be read by another thread of
            // this context, which keeps the report for us.
            let slice = left.map_or(Duration::from_millis(50), |l| {
                l.min(Duration::from_millis(50))
            });
            let ctx = &self.ctx;
            let handle = self.handle;
            self.sluice.wait_on(ctx, Some(slice), &mut [], &mut || {
                ctx.try_queues().is_some_and(|q| q.has_completion())
                    || ctx.report(handle).is_some_and(|r| r.outcome.is_final())
            })?;
        }
    }
}

impl Drop for Splice {
    fn drop(&mut self) {
        self.ctx.forget_report(self.handle);
    }
}

impl Socket {
    /// Whether the socket was given to a splice (reads and writes then fail with EBADFD).
    pub fn is_spliced(&self) -> bool {
        self.block().flags().load(Ordering::Acquire) & flags::SPLICED != 0
    }

    /// Splices this connection to `other` (acceltcp.txt 4.3): the engine joins the two
    /// peers directly; this socket's peer is `a` in the byte counts. Bytes still unread
    /// in either socket's ring are forwarded to the other first (they are counted in
    /// [`Splice::forwarded`]), as are bytes already written. Afterwards reads and writes
    /// fail with EBADFD; closing the sockets is allowed and does not touch the splice.
    pub fn splice(&self, other: &Socket) -> Result<Splice, SpliceError> {
        if !Arc::ptr_eq(self.sluice(), other.sluice()) {
            return Err(SpliceError::BadSocket);
        }
        let sluice = self.sluice().clone();
        let mut forwarded = (0, 0);
        let mut held = false;
        let mut outcome = Err(SpliceError::Busy);
        for _ in 0..TRIES {
            let r = sluice.call_on_context(|req| Command::Splice {
                req,
                slot_a: self.slot(),
                slot_b: other.slot(),
            });
            match r {
                Ok((ctx, Ok((_, handle)))) => {
                    return Ok(Splice {
                        sluice,
                        ctx,
                        handle,
                        forwarded,
                    })
                }
                Ok((_, Err(e))) if e.errno() == libc::EAGAIN => {
                    // The engine holds both RX rings now: forward what they have.
                    held = true;
                    let moved =
                        forward(self, other).and_then(|ab| forward(other, self).map(|ba| (ab, ba)));
                    match moved {
                        Ok((ab, ba)) => {
                            forwarded.0 += ab;
                            forwarded.1 += ba;
                        }
                        Err(e) => {
                            outcome = Err(SpliceError::Other(e));
                            break;
                        }
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                Ok((_, Err(e))) => {
                    outcome = Err(SpliceError::from_errno(e));
                    break;
                }
                Err(e) => {
                    outcome = Err(SpliceError::Other(e));
                    break;
                }
            }
        }
        if held {
            // Not spliced after all: the engine fills the rings again.
            for s in [self, other] {
                let _ = sluice.post(Command::Consumed { slot: s.slot() });
            }
        }
        outcome
    }
}

/// Moves what `from`'s RX ring holds into `to` (a blocking send), without telling the
/// engine it may refill the ring (it holds it for the splice); returns the bytes moved.
fn forward(from: &Socket, to: &Socket) -> Result<u64, Error> {
    let block = from.block();
    let bytes = {
        let mut line = from.lock_line();
        let tail = block.rx_tail().load(Ordering::Acquire);
        let avail = tail.saturating_sub(line.rx_head).min(from.ring_size());
        let mut bytes = vec![0u8; avail as usize];
        from.ring(Dir::Rx).read(line.rx_head, &mut bytes);
        line.rx_head += avail;
        block.rx_head().store(line.rx_head, Ordering::Release);
        bytes
    };
    let mut sent = 0;
    while sent < bytes.len() {
        sent += to.send(&bytes[sent..])?;
    }
    Ok(bytes.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_splice_across_cores_is_incompatible_as_the_shim_reports_it() {
        // The engine answers EOPNOTSUPP for two slots on different cores: callers that
        // relay the bytes themselves on Incompatible (the shim's errno) keep doing so.
        let e = SpliceError::from_errno(Error::Os(libc::EOPNOTSUPP));
        assert!(matches!(e, SpliceError::Incompatible));
        assert_eq!(e.errno(), libc::EOPNOTSUPP);
        assert!(matches!(
            SpliceError::from_errno(Error::Os(libc::EAGAIN)),
            SpliceError::Busy
        ));
    }
}
