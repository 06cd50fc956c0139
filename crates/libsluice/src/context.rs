//! A thread's context: its command queue to the engine, its completion queue back, and
//! request ids (docs/service.md "Commands"). A leaf: posting and waiting, which need the
//! attachment, are in command.rs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use sluice_shm::idle::IdlePolicy;
use sluice_shm::{
    Completion, Consumer, EventFd, Payload, Producer, QueueKind, Region, SpliceReport,
};

use crate::error::Error;
use crate::lock::lock;

/// One context of the attachment: the queues behind a lock (a context is normally used by
/// one thread, so the lock is uncontended; it matters only when threads outnumber the
/// engine's contexts and share one), and the eventfd the engine signals.
pub(crate) struct ContextSlot {
    /// The context's index in the region.
    pub(crate) index: u32,
    /// Signalled by the engine when it changed something while the context slept.
    pub(crate) eventfd: EventFd,
    /// Threads using this context (more than one only when contexts ran out).
    pub(crate) users: AtomicU32,
    queues: Mutex<Queues>,
    /// The latest splice report per handle, read from the completion queue (bounded by
    /// [`MAX_REPORTS`]; a [`crate::Splice`] removes its own when dropped).
    reports: Mutex<HashMap<u32, SpliceReport>>,
    /// The polling budget its waits have earned (`sluice_shm::idle`); None before the first.
    idle: Mutex<Option<IdlePolicy>>,
}

/// Pure spinning (no yield) for this long before yielding between checks: short waits
/// (an RPC's reply) should not pay a system call.
const SPIN_BEFORE_YIELD: Duration = Duration::from_micros(20);

/// Splice reports a context keeps for handles nobody asked about yet.
pub(crate) const MAX_REPORTS: usize = 4096;

/// A context's queues and its next request id, reached through [`ContextSlot::queues`].
pub(crate) struct Queues {
    commands: Producer,
    completions: Consumer,
    next_req: u32,
}

impl ContextSlot {
    /// The context `index` of `region`, or None if the index is out of range.
    pub(crate) fn new(region: Arc<Region>, index: u32, eventfd: EventFd) -> Option<ContextSlot> {
        let commands = Producer::new(region.clone(), index, QueueKind::Command)?;
        let completions = Consumer::new(region, index, QueueKind::Completion)?;
        Some(ContextSlot {
            index,
            eventfd,
            users: AtomicU32::new(1),
            queues: Mutex::new(Queues {
                commands,
                completions,
                next_req: 1,
            }),
            reports: Mutex::new(HashMap::new()),
            idle: Mutex::new(None),
        })
    }

    /// The context's polling budget, polling at most `max` per wait until waits teach it less.
    pub(crate) fn idle_policy(&self, max: Duration) -> IdlePolicy {
        lock(&self.idle).unwrap_or_else(|| IdlePolicy::new(max, SPIN_BEFORE_YIELD))
    }

    /// Keeps what a wait taught the budget.
    pub(crate) fn keep_idle_policy(&self, policy: IdlePolicy) {
        *lock(&self.idle) = Some(policy);
    }

    /// Whether other threads share this context.
    pub(crate) fn shared(&self) -> bool {
        self.users.load(Ordering::Relaxed) > 1
    }

    /// The context's queues, locked.
    pub(crate) fn queues(&self) -> MutexGuard<'_, Queues> {
        lock(&self.queues)
    }

    /// The context's queues if no other thread holds them.
    pub(crate) fn try_queues(&self) -> Option<MutexGuard<'_, Queues>> {
        match self.queues.try_lock() {
            Ok(q) => Some(q),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// The latest report for splice `handle`, if any came.
    pub(crate) fn report(&self, handle: u32) -> Option<SpliceReport> {
        lock(&self.reports).get(&handle).copied()
    }

    /// Where splice reports are kept.
    pub(crate) fn reports_map(&self) -> &Mutex<HashMap<u32, SpliceReport>> {
        &self.reports
    }

    /// Forgets splice `handle`'s report.
    pub(crate) fn forget_report(&self, handle: u32) {
        lock(&self.reports).remove(&handle);
    }

    /// Reads every completion waiting, keeping splice reports (the caller holds the queues,
    /// so no request of this context waits for the others: they are stale); whether there
    /// were any.
    pub(crate) fn drain(&self, q: &mut Queues) -> bool {
        let any = q.has_completion();
        let _ = q.completion_for(0, &self.reports);
        any
    }
}

impl Queues {
    /// Appends `entry` (an encoded command) to the command queue; false if it is full.
    pub(crate) fn try_push(&mut self, entry: &Payload) -> Result<bool, Error> {
        Ok(self.commands.push(entry)?)
    }

    /// A fresh request id (never 0).
    pub(crate) fn next_request(&mut self) -> u32 {
        let req = self.next_req;
        self.next_req = self.next_req.wrapping_add(1).max(1);
        req
    }

    /// Consumes completions until the one for `req` (0: none): `(slot, value)` of Done, or
    /// the errno of Failed; None when the queue ran dry first. Splice reports met on the
    /// way are kept in `reports`.
    pub(crate) fn completion_for(
        &mut self,
        req: u32,
        reports: &Mutex<HashMap<u32, SpliceReport>>,
    ) -> Option<Result<(u32, u32), Error>> {
        while let Some(entry) = self.completions.pop() {
            self.completions.publish();
            match Completion::decode(&entry) {
                Ok(Completion::Done {
                    req: r,
                    slot,
                    value,
                }) if r == req => return Some(Ok((slot, value))),
                Ok(Completion::Failed { req: r, errno }) if r == req => {
                    return Some(Err(Error::Os(errno)))
                }
                Ok(Completion::Splice(report)) => {
                    let mut m = lock(reports);
                    if m.len() < MAX_REPORTS || m.contains_key(&report.handle) {
                        m.insert(report.handle, report);
                    }
                }
                // A completion for a request nobody waits for any more, or one we
                // cannot read (the engine is trusted; skip rather than fail).
                _ => continue,
            }
        }
        None
    }

    /// Whether a completion waits to be read.
    pub(crate) fn has_completion(&self) -> bool {
        self.completions.has_entry()
    }
}
