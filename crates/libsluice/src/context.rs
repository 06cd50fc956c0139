//! A thread's context: its command queue to the engine, its completion queue back, request
//! ids, and "post, then wait for the completion" (docs/service.md "Commands").

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_shm::{Command, Completion, Consumer, EventFd, Producer, QueueKind, Region};

use crate::attach::{lock, Sluice};
use crate::error::Error;

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
}

struct Queues {
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
        })
    }

    /// Whether other threads share this context.
    pub(crate) fn shared(&self) -> bool {
        self.users.load(Ordering::Relaxed) > 1
    }
}

impl Queues {
    /// Appends a command, waiting while the queue is full (the engine drains it every loop
    /// iteration; if it sleeps, the doorbell wakes it).
    fn push(&mut self, sluice: &Sluice, cmd: &Command) -> Result<(), Error> {
        let entry = cmd.encode();
        let mut spins = 0u32;
        loop {
            if self.commands.push(&entry)? {
                return Ok(());
            }
            sluice.ring_doorbell_always();
            spins += 1;
            if spins % 1024 == 0 && !sluice.check_alive() {
                return Err(Error::EngineGone);
            }
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
    }
}

impl Sluice {
    /// Posts a command that has no completion (Send, Consumed, Close doorbells).
    pub(crate) fn post(&self, cmd: Command) -> Result<(), Error> {
        if !self.is_alive() {
            return Err(Error::EngineGone);
        }
        self.with_context(|ctx| {
            lock(&ctx.queues).push(self, &cmd)?;
            self.ring_doorbell();
            Ok(())
        })
    }

    /// Posts the command `make(req)` and waits for its completion: `(slot, value)` of Done,
    /// or the errno of Failed.
    pub(crate) fn call(&self, make: impl FnOnce(u32) -> Command) -> Result<(u32, u32), Error> {
        if !self.is_alive() {
            return Err(Error::EngineGone);
        }
        self.with_context(|ctx| {
            let mut q = lock(&ctx.queues);
            let req = q.next_req;
            q.next_req = q.next_req.wrapping_add(1).max(1);
            q.push(self, &make(req))?;
            self.ring_doorbell();
            loop {
                while let Some(entry) = q.completions.pop() {
                    q.completions.publish();
                    match Completion::decode(&entry) {
                        Ok(Completion::Done {
                            req: r,
                            slot,
                            value,
                        }) if r == req => return Ok((slot, value)),
                        Ok(Completion::Failed { req: r, errno }) if r == req => {
                            return Err(Error::Os(errno))
                        }
                        // A completion for a request nobody waits for any more, or one we
                        // cannot read (the engine is trusted; skip rather than fail).
                        _ => continue,
                    }
                }
                let completions = &q.completions;
                self.wait_on(ctx, None, &mut [], &mut || completions.has_entry())?;
            }
        })
    }
}
