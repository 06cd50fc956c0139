//! Taking what the engine completed for an endpoint (docs/mtp.md "Messages in service
//! mode"): send completions, messages placed in its buffers (a buffer is posted again when
//! its message is taken), and waiting for either: poll, then sleep as the thread's context
//! does; or, in a caller's own poll loop, arm the endpoint's eventfd.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

use sluice_shm::mtp::{CqeKind, MtpCqe, MtpStatus};

use crate::lock::lock;
use crate::mtp::endpoint::{Endpoint, Inner, Received, RECV_COOKIE};
use crate::mtp::error::MtpError;

impl Endpoint {
    /// Takes what the engine completed; whether anything new is waiting.
    pub fn poll(&self) -> bool {
        let mut inner = lock(&self.inner);
        let mut reposted = false;
        let mut any = false;
        while let Some(e) = inner.cq.pop() {
            let Ok(c) = MtpCqe::decode(&e) else {
                continue;
            };
            any = true;
            match c.kind {
                CqeKind::Sent => {
                    if let Some(slot) = inner.in_flight.remove(&c.cookie) {
                        inner.free.push(slot);
                    }
                    inner.complete(c);
                }
                CqeKind::Received if c.cookie & RECV_COOKIE != 0 => {
                    let b = (c.cookie & !RECV_COOKIE) as usize;
                    if c.status == MtpStatus::Success && (c.len as usize) <= self.max_message {
                        inner.received.push_back((b, c));
                    } else {
                        inner.complete(c);
                        reposted |= self.post_buffer(&mut inner, b).is_ok();
                    }
                }
                // A raw entry's error completion.
                CqeKind::Received => inner.complete(c),
            }
        }
        inner.cq.publish();
        drop(inner);
        if reposted {
            let _ = self.doorbell();
        }
        any
    }

    /// The next completion of a send (`Sent`, with its status and message id), or of a
    /// buffer or raw entry that failed; None when none is waiting.
    pub fn completion(&self) -> Option<MtpCqe> {
        self.poll();
        lock(&self.inner).completions.pop_front()
    }

    /// Completions dropped because more than 4096 were left untaken.
    pub fn completions_dropped(&self) -> u64 {
        lock(&self.inner).dropped
    }

    /// The next whole received message; None when none is waiting. Its buffer is posted
    /// again.
    pub fn recv_message(&self) -> Option<Received> {
        self.poll();
        let mut inner = lock(&self.inner);
        let (b, c) = inner.received.pop_front()?;
        let mut data = vec![0u8; c.len as usize];
        let at = self.slot_addr(self.slots + b);
        // SAFETY: the buffer lies inside the arena (c.len <= max_message was checked); the
        // engine wrote it before placing the completion and does not touch it again until
        // it is posted anew (below).
        unsafe { std::ptr::copy_nonoverlapping(at as *const u8, data.as_mut_ptr(), data.len()) };
        let reposted = self.post_buffer(&mut inner, b).is_ok();
        drop(inner);
        if reposted {
            let _ = self.doorbell();
        }
        Some(Received {
            src: c.peer,
            msg_id: c.msg_id,
            priority: c.priority,
            tc: c.tc,
            data,
        })
    }

    /// The endpoint's eventfd, for a caller's own poll loop: readable after [`Endpoint::arm`]
    /// once a completion is placed.
    pub fn event_fd(&self) -> BorrowedFd<'_> {
        self.event_fd.as_fd()
    }

    /// Asks the engine to signal [`Endpoint::event_fd`] when it places the next completion
    /// (check the queue once more after arming, then sleep); false when the queue's arm word
    /// is out of the region.
    pub fn arm(&self) -> bool {
        let Some(arm) = self.sluice.region.verbs_arm(self.cq_queue) else {
            return false;
        };
        arm.store(1, Ordering::SeqCst);
        // Pairs with the engine's fence before it reads the arm word.
        fence(Ordering::SeqCst);
        true
    }

    /// Messages sent and not yet completed.
    pub fn in_flight(&self) -> usize {
        lock(&self.inner).in_flight.len()
    }

    /// Waits until a completion or a message is waiting (true), or `timeout` passes
    /// (false; None waits forever): polls, then sleeps on the endpoint's eventfd.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool, MtpError> {
        self.wait_for(timeout, &mut |i| {
            !i.completions.is_empty() || !i.received.is_empty()
        })
    }

    pub(super) fn wait_for(
        &self,
        timeout: Option<Duration>,
        done: &mut dyn FnMut(&Inner) -> bool,
    ) -> Result<bool, MtpError> {
        // The thread's context sleeps and wakes as for sockets: the engine signals a
        // sleeping context of an application it placed completions for. The endpoint's
        // eventfd is for callers' own poll loops; arming it here, before the spin, made the
        // engine write it for every batch of completions this thread was spinning for
        // (issue 17: a system call each way per message).
        let w = self.sluice.wait(timeout, &mut [], &mut || {
            self.poll();
            done(&lock(&self.inner))
        })?;
        Ok(w.ready || done(&lock(&self.inner)))
    }

    /// Waits for send `id` to complete: Ok when every packet was acknowledged, the
    /// engine's status otherwise; completions of other sends met meanwhile are kept.
    pub fn wait_sent(&self, id: u32, timeout: Option<Duration>) -> Result<u32, MtpError> {
        let find = |i: &Inner| {
            i.completions
                .iter()
                .any(|c| c.kind == CqeKind::Sent && c.cookie == u64::from(id))
        };
        if !self.wait_for(timeout, &mut |i| find(i))? {
            return Err(MtpError::TimedOut);
        }
        let mut inner = lock(&self.inner);
        let at = inner
            .completions
            .iter()
            .position(|c| c.kind == CqeKind::Sent && c.cookie == u64::from(id))
            .ok_or(MtpError::TimedOut)?;
        let c = inner.completions.remove(at).expect("found");
        match c.status {
            MtpStatus::Success => Ok(c.msg_id),
            s => Err(MtpError::Failed(s)),
        }
    }
}
