//! A data-path thread's doorbell (issue 20; docs/multicore.md, "Idle threads"): how a thread
//! with nothing to do sleeps, and how whoever hands one of its roles work wakes it. The
//! thread announces its sleep in a flag, looks at its links once more, then sleeps on an
//! eventfd (with its device and its applications' doorbells, Laminar 5's poll -> sleep); a
//! producer that pushes a batch to it rings the eventfd only if the flag is up, so a thread
//! that is awake costs its producers no system call.
//!
//! Why no wake-up is lost (the two sides of a Dekker handshake, each with a SeqCst fence
//! between its store and its load):
//!
//! - the sleeper stores `asleep = true`, fences, then steps every role once more (the
//!   re-check) and sleeps only if that pass found nothing;
//! - a producer pushes its batch (the ring's Release store), fences, then loads `asleep`.
//!
//! The two fences are ordered one way or the other. If the sleeper's comes first, the
//! producer's load sees `asleep = true` and rings; if the producer's comes first, the
//! re-check sees the batch. The eventfd keeps a ring until it is drained, so a ring that
//! lands before the sleeper is in poll(2) makes that poll return at once.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::time::TimeSpec;
use sluice_device::{Device, DeviceError};
use sluice_shm::{EventFd, ShmError};

/// Why a thread could not make its doorbell or sleep on it.
#[derive(Debug)]
pub enum DoorbellError {
    /// The eventfd could not be made.
    Create(ShmError),
    /// A system call of the sleep failed.
    Os {
        /// What it was doing.
        op: &'static str,
        /// The error.
        errno: Errno,
    },
    /// The device's wait failed.
    Device(DeviceError),
}

impl std::fmt::Display for DoorbellError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DoorbellError::Create(e) => write!(f, "a data-path thread's doorbell: {e}"),
            DoorbellError::Os { op, errno } => write!(f, "cannot {op}: {errno}"),
            DoorbellError::Device(e) => write!(f, "device: {e}"),
        }
    }
}

impl std::error::Error for DoorbellError {}

/// A thread's sleeps and wake-ups so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SleepCounters {
    /// Times the thread slept (waited in poll(2) or on its device).
    pub sleeps: u64,
    /// Sleeps its doorbell ended (a batch, an empty batch or a control message for it).
    pub woken: u64,
    /// Sleeps called off: the re-check after the announcement found work, or an
    /// application said no (`App::prepare_sleep`).
    pub cancelled: u64,
    /// Times another thread rang it (pushed to it while it had announced its sleep).
    pub rings: u64,
}

/// One data-path thread's doorbell, shared with every producer that hands its roles work.
#[derive(Debug)]
pub struct Doorbell {
    asleep: AtomicBool,
    bell: EventFd,
    sleeps: AtomicU64,
    woken: AtomicU64,
    cancelled: AtomicU64,
    rings: AtomicU64,
}

impl Doorbell {
    /// A doorbell whose thread is awake.
    pub fn new() -> Result<Self, DoorbellError> {
        Ok(Doorbell {
            asleep: AtomicBool::new(false),
            bell: EventFd::new().map_err(DoorbellError::Create)?,
            sleeps: AtomicU64::new(0),
            woken: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            rings: AtomicU64::new(0),
        })
    }

    /// After pushing work for the thread: wakes it if it announced its sleep. No system
    /// call while it is awake (a fence and a load).
    #[inline]
    pub fn ring_if_asleep(&self) {
        // Pairs with the fence in `announce` (module doc): the push before it is seen by
        // the sleeper's re-check, or this load sees its flag.
        fence(Ordering::SeqCst);
        // The swap lets one producer of several ring it; the eventfd stays readable until
        // the sleeper drains it, so the others need not.
        if self.asleep.load(Ordering::Relaxed) && self.asleep.swap(false, Ordering::Relaxed) {
            self.rings.fetch_add(1, Ordering::Relaxed);
            self.bell.signal();
        }
    }

    /// Wakes the thread whether or not it sleeps (the run stops).
    pub fn ring(&self) {
        self.bell.signal();
    }

    /// The thread is about to sleep: the next pass over its roles is the re-check.
    pub fn announce(&self) {
        self.asleep.store(true, Ordering::Relaxed);
        // Pairs with the fence in `ring_if_asleep`.
        fence(Ordering::SeqCst);
    }

    /// The re-check or an application found work: the sleep is called off.
    pub fn cancel(&self) {
        self.asleep.store(false, Ordering::Relaxed);
        self.cancelled.fetch_add(1, Ordering::Relaxed);
    }

    /// The thread goes to sleep (counted when it starts, so a long sleep shows).
    fn enter(&self) {
        self.sleeps.fetch_add(1, Ordering::Relaxed);
    }

    /// The thread woke (from its doorbell, a descriptor, its device or a timeout): lowers
    /// the flag and clears the eventfd. Returns whether it had been rung.
    pub fn woke(&self) -> bool {
        self.asleep.store(false, Ordering::Relaxed);
        let rung = self.bell.drain();
        if rung {
            self.woken.fetch_add(1, Ordering::Relaxed);
        }
        rung
    }

    /// Whether the thread announced its sleep and has not been rung or woken since.
    pub fn announced(&self) -> bool {
        self.asleep.load(Ordering::Relaxed)
    }

    /// The eventfd the thread sleeps on.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.bell.as_fd()
    }

    /// Sleeps and wakes so far.
    pub fn counters(&self) -> SleepCounters {
        SleepCounters {
            sleeps: self.sleeps.load(Ordering::Relaxed),
            woken: self.woken.load(Ordering::Relaxed),
            cancelled: self.cancelled.load(Ordering::Relaxed),
            rings: self.rings.load(Ordering::Relaxed),
        }
    }

    /// Sleeps (after [`Doorbell::announce`] and a re-check that found nothing) until the
    /// doorbell rings, one of `also` is readable or `timeout` passes, then [`Doorbell::woke`].
    /// ppoll(2): to the nanosecond, as a paced connection's next slot needs.
    pub fn sleep(&self, also: &[BorrowedFd<'_>], timeout: Duration) -> Result<bool, DoorbellError> {
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(1 + also.len());
        fds.push(PollFd::new(self.bell.as_fd(), PollFlags::POLLIN));
        fds.extend(also.iter().map(|fd| PollFd::new(*fd, PollFlags::POLLIN)));
        self.enter();
        match nix::poll::ppoll(&mut fds, Some(TimeSpec::from_duration(timeout)), None) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(errno) => {
                self.woke();
                return Err(DoorbellError::Os {
                    op: "sleep on a data-path thread's doorbell",
                    errno,
                });
            }
        }
        Ok(self.woke())
    }
}

/// What a thread that holds the NIC role sleeps on: its device, with its doorbell and its
/// applications' descriptors gathered into one epoll set when there are several (a device
/// waits on one extra descriptor).
#[derive(Default)]
pub struct DeviceSleep {
    epoll: Option<Epoll>,
}

impl DeviceSleep {
    /// Like [`Doorbell::sleep`], on `device` too.
    pub fn sleep<D: Device>(
        &mut self,
        bell: &Doorbell,
        device: &mut D,
        also: &[BorrowedFd<'_>],
        timeout: Duration,
    ) -> Result<bool, DoorbellError> {
        if also.is_empty() {
            bell.enter();
            let r = device.wait_also(bell.fd(), Some(timeout));
            let rung = bell.woke();
            return r.map(|()| rung).map_err(DoorbellError::Device);
        }
        let os = |op| move |errno| DoorbellError::Os { op, errno };
        if self.epoll.is_none() {
            let e = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(os("make an epoll set"))?;
            e.add(bell.fd(), EpollEvent::new(EpollFlags::EPOLLIN, 0))
                .map_err(os("add the doorbell to the epoll set"))?;
            self.epoll = Some(e);
        }
        let Some(epoll) = self.epoll.as_ref() else {
            return Ok(false);
        };
        // The applications' descriptors only for this sleep: one closed and its number
        // reused meanwhile must not stay in the set.
        let mut added = 0;
        let mut result = Ok(());
        for fd in also {
            match epoll.add(*fd, EpollEvent::new(EpollFlags::EPOLLIN, 1)) {
                Ok(()) => added += 1,
                Err(Errno::EEXIST) => {}
                Err(e) => {
                    result = Err(os("add an application's descriptor to the epoll set")(e));
                    break;
                }
            }
        }
        if result.is_ok() {
            bell.enter();
            result = device
                .wait_also(epoll.0.as_fd(), Some(timeout))
                .map_err(DoorbellError::Device);
        }
        for fd in also.iter().take(added) {
            let _ = epoll.delete(*fd);
        }
        let rung = bell.woke();
        result.map(|()| rung)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_reaches_only_an_announced_sleeper_and_ends_its_sleep() {
        let bell = Doorbell::new().unwrap();
        bell.ring_if_asleep();
        assert_eq!(bell.counters().rings, 0, "awake: no system call, no ring");
        bell.announce();
        assert!(bell.announced());
        bell.ring_if_asleep();
        bell.ring_if_asleep();
        assert_eq!(bell.counters().rings, 1, "one ring is enough");
        // A sleep of an hour returns at once: the ring waits in the eventfd.
        assert!(bell.sleep(&[], Duration::from_secs(3600)).unwrap());
        let c = bell.counters();
        assert_eq!((c.sleeps, c.woken), (1, 1));
        assert!(!bell.announced());
        // Drained: the next sleep times out unrung.
        bell.announce();
        assert!(!bell.sleep(&[], Duration::from_millis(1)).unwrap());
        assert_eq!(bell.counters().woken, 1);
    }

    #[test]
    fn a_readable_descriptor_ends_a_sleep_too() {
        let bell = Doorbell::new().unwrap();
        let other = EventFd::new().unwrap();
        other.signal();
        bell.announce();
        let rung = bell
            .sleep(&[other.as_fd()], Duration::from_secs(3600))
            .unwrap();
        assert!(!rung, "woken by the other descriptor, not the doorbell");
        assert_eq!(bell.counters().sleeps, 1);
    }
}
