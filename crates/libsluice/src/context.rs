//! A thread's context: its command queues to the engine, its completion queues back, and
//! request ids (docs/service.md "Commands"). An engine on N data-path cores gives the
//! context one queue pair per core (flow_group.rs says which command goes where); the lock,
//! the request ids, the sleeping flag and the eventfd stay one per context. A leaf: posting
//! and waiting, which need the attachment, are in command.rs.

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
    /// One per engine core, indexed by core (core 0's is the context's own pair).
    pairs: Box<[Pair]>,
    next_req: u32,
}

/// The command queue to one engine core and the completion queue back from it.
struct Pair {
    commands: Producer,
    completions: Consumer,
}

impl ContextSlot {
    /// The context `index` of `region`, or None if the index is out of range.
    pub(crate) fn new(region: Arc<Region>, index: u32, eventfd: EventFd) -> Option<ContextSlot> {
        let pairs = (0..region.layout().queue_cores.max(1))
            .map(|core| {
                Some(Pair {
                    commands: Producer::on_core(region.clone(), index, core, QueueKind::Command)?,
                    completions: Consumer::on_core(
                        region.clone(),
                        index,
                        core,
                        QueueKind::Completion,
                    )?,
                })
            })
            .collect::<Option<Box<[Pair]>>>()?;
        Some(ContextSlot {
            index,
            eventfd,
            users: AtomicU32::new(1),
            queues: Mutex::new(Queues { pairs, next_req: 1 }),
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

    /// Reads every completion waiting on every core's queue, keeping splice reports (the
    /// caller holds the queues, so no request of this context waits for the others: they
    /// are stale); whether there were any.
    pub(crate) fn drain(&self, q: &mut Queues) -> bool {
        let any = q.has_completion();
        for core in 0..q.pairs.len() as u32 {
            let _ = q.completion_for(core, 0, &self.reports);
        }
        any
    }
}

impl Queues {
    /// Appends `entry` (an encoded command) to engine core `core`'s command queue; false if
    /// it is full.
    pub(crate) fn try_push(&mut self, core: u32, entry: &Payload) -> Result<bool, Error> {
        Ok(self.pair_mut(core)?.commands.push(entry)?)
    }

    /// Core `core`'s queue pair (flow_group.rs never names a core beyond the layout's).
    fn pair_mut(&mut self, core: u32) -> Result<&mut Pair, Error> {
        self.pairs
            .get_mut(core as usize)
            .ok_or(Error::Os(libc::EIO))
    }

    /// A fresh request id (never 0).
    pub(crate) fn next_request(&mut self) -> u32 {
        let req = self.next_req;
        self.next_req = self.next_req.wrapping_add(1).max(1);
        req
    }

    /// Consumes completions on engine core `core`'s queue until the one for `req` (0:
    /// none): `(slot, value)` of Done, or the errno of Failed; None when the queue ran dry
    /// first. Splice reports met on the way are kept in `reports`.
    pub(crate) fn completion_for(
        &mut self,
        core: u32,
        req: u32,
        reports: &Mutex<HashMap<u32, SpliceReport>>,
    ) -> Option<Result<(u32, u32), Error>> {
        let completions = match self.pair_mut(core) {
            Ok(p) => &mut p.completions,
            Err(e) => return Some(Err(e)),
        };
        while let Some(entry) = completions.pop() {
            completions.publish();
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

    /// Whether a completion waits to be read on any core's queue (splice reports come on
    /// any of them).
    pub(crate) fn has_completion(&self) -> bool {
        match &*self.pairs {
            [one] => one.completions.has_entry(),
            all => all.iter().any(|p| p.completions.has_entry()),
        }
    }

    /// Whether a completion waits on engine core `core`'s queue (where the answer to a
    /// command posted to that core comes).
    pub(crate) fn has_completion_on(&self, core: u32) -> bool {
        self.pairs
            .get(core as usize)
            .is_some_and(|p| p.completions.has_entry())
    }
}
