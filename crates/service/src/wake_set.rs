//! What a part k > 0 of the service in flow groups sleeps on (docs/service.md, "Sleeping
//! and waking"): one epoll set, its `App::wake_fd`, holding every attached application's
//! doorbell and the part's own link doorbell (src/links.rs). Part 0 sleeps on its control
//! epoll, which holds the same.
//!
//! The doorbells are watched edge-triggered and no part of several reads their counters.
//! An application rings its one doorbell (eventfd) when any part announced its sleep, so
//! every part watching it must see the ring:
//!
//! - every write(2) to an eventfd adds to its counter and wakes its wait queue
//!   (fs/eventfd.c `eventfd_write`: `wake_up_locked_poll(&ctx->wqh, EPOLLIN)`), whether
//!   the counter was zero or not; epoll's callback (`ep_poll_callback`) then puts the
//!   item on the set's ready list again. So with EPOLLET each ring is a new event, even
//!   on a counter that is already non-zero;
//! - but epoll reports (and a poll(2) of the epoll descriptor itself, which is how the
//!   engine sleeps on it) checks each ready item's readiness again (`ep_item_poll`) and
//!   drops the ones no longer readable. A part that drained the counter would so erase
//!   the event for the others before they looked: hence nobody drains it, and each part
//!   takes the events off its ready list with epoll_wait(2) ([`WakeSet::consume`])
//!   before announcing its sleep. The counter only grows (by 1 a ring: 2^64 rings).

use std::os::fd::{AsFd, BorrowedFd};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use sluice_shm::EventFd;

use crate::error::{sys, ServiceError};

/// Events taken per epoll_wait(2) while consuming.
const EVENTS: usize = 32;

/// A part's epoll set of doorbells.
pub(crate) struct WakeSet {
    epoll: Epoll,
}

impl WakeSet {
    /// A set holding the part's link doorbell (level-triggered: the part drains it).
    pub fn new(link_bell: BorrowedFd<'_>) -> Result<WakeSet, ServiceError> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(sys("epoll_create"))?;
        epoll
            .add(link_bell, EpollEvent::new(EpollFlags::EPOLLIN, 0))
            .map_err(sys("epoll_ctl on a part's link doorbell"))?;
        Ok(WakeSet { epoll })
    }

    /// Watches an application's doorbell (this part's own duplicate of it), edge-triggered.
    pub fn watch(&self, doorbell: &EventFd) -> bool {
        let flags = EpollFlags::EPOLLIN | EpollFlags::EPOLLET;
        self.epoll
            .add(doorbell.as_fd(), EpollEvent::new(flags, 1))
            .is_ok()
    }

    /// Stops watching a doorbell (before the descriptor is closed, so no stale entry
    /// stays behind a number the process reuses).
    pub fn unwatch(&self, doorbell: &EventFd) {
        let _ = self.epoll.delete(doorbell.as_fd());
    }

    /// Takes every event off the ready list, so the set is readable again only for a
    /// ring after this call (bounded: the set holds one entry per application).
    pub fn consume(&self) {
        let mut events = [EpollEvent::empty(); EVENTS];
        // At most 4096 applications (ServiceConfig::max_apps) and the link doorbell.
        for _ in 0..=4096 / EVENTS {
            match self.epoll.wait(&mut events, EpollTimeout::ZERO) {
                Ok(n) if n == EVENTS => {}
                _ => break,
            }
        }
    }

    /// The descriptor the engine sleeps on.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.epoll.0.as_fd()
    }
}
