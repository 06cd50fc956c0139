//! Posting commands on the calling thread's context, and "post, then wait for the
//! completion" (docs/service.md "Commands"): each command goes to the queue of the engine
//! core flow_group.rs names, and its completion comes back on that core's queue.

use std::sync::Arc;
use std::time::Duration;

use sluice_shm::Command;

use crate::attach::Sluice;
use crate::context::{ContextSlot, Queues};
use crate::error::Error;
use crate::flow_group;

/// A command's answer: `(slot, value)` of Done, or the errno of Failed.
pub(crate) type Answer = Result<(u32, u32), Error>;

impl Sluice {
    /// The engine core whose queue `cmd` goes to (0 when the engine has one).
    pub(crate) fn core_for(&self, cmd: &Command) -> u32 {
        flow_group::core_of(cmd, &self.layout, &self.next_open_core)
    }

    /// Appends a command to engine core `core`'s queue, waiting while it is full (the
    /// engine drains it every loop iteration; if it sleeps, the doorbell wakes it).
    fn push(&self, q: &mut Queues, core: u32, cmd: &Command) -> Result<(), Error> {
        let entry = cmd.encode();
        let mut spins = 0u32;
        loop {
            if q.try_push(core, &entry)? {
                return Ok(());
            }
            self.ring_doorbell_always();
            spins += 1;
            if spins % 1024 == 0 && !self.check_alive() {
                return Err(Error::EngineGone);
            }
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
    }

    /// Posts a command that has no completion (Send, Consumed, Close doorbells).
    pub(crate) fn post(&self, cmd: Command) -> Result<(), Error> {
        if !self.is_alive() {
            return Err(Error::EngineGone);
        }
        let core = self.core_for(&cmd);
        self.with_context(|ctx| {
            self.push(&mut ctx.queues(), core, &cmd)?;
            self.ring_doorbell();
            Ok(())
        })
    }

    /// Posts the command `make(req)` and waits for its completion: `(slot, value)` of Done,
    /// or the errno of Failed.
    pub(crate) fn call(&self, make: impl FnOnce(u32) -> Command) -> Result<(u32, u32), Error> {
        self.call_on_context(make).and_then(|(_, r)| r)
    }

    /// As [`Sluice::call`], also giving the context it was posted on (whose completion
    /// queues receive what the engine reports later about it, as splice reports).
    pub(crate) fn call_on_context(
        &self,
        make: impl FnOnce(u32) -> Command,
    ) -> Result<(Arc<ContextSlot>, Answer), Error> {
        self.call_routed(None, make)
    }

    /// As [`Sluice::call`], to engine core `core` whatever the command names (an `Open`
    /// on a chosen core).
    pub(crate) fn call_on_core(
        &self,
        core: u32,
        make: impl FnOnce(u32) -> Command,
    ) -> Result<(u32, u32), Error> {
        self.call_routed(Some(core), make).and_then(|(_, r)| r)
    }

    /// Posts `make(req)` to `core`, or where flow_group.rs routes it, and waits for the
    /// answer on that core's completion queue.
    fn call_routed(
        &self,
        core: Option<u32>,
        make: impl FnOnce(u32) -> Command,
    ) -> Result<(Arc<ContextSlot>, Answer), Error> {
        if !self.is_alive() {
            return Err(Error::EngineGone);
        }
        self.with_context(|ctx| {
            let mut q = ctx.queues();
            let req = q.next_request();
            let cmd = make(req);
            let core = core.unwrap_or_else(|| self.core_for(&cmd));
            self.push(&mut q, core, &cmd)?;
            self.ring_doorbell();
            loop {
                if let Some(done) = q.completion_for(core, req, ctx.reports_map()) {
                    let done = if matches!(cmd, Command::Open { .. }) {
                        self.check_opened(&mut q, core, done)
                    } else {
                        done
                    };
                    let this = self.context_arc(ctx.index).ok_or(Error::Os(libc::EIO))?;
                    return Ok((this, done));
                }
                let q = &*q;
                self.wait_on(ctx, None, &mut [], &mut || q.has_completion_on(core))?;
            }
        })
    }

    /// An `Open` posted to `core` must be answered with a slot that core serves (the
    /// slot's later commands go there): a mismatch is the engine's bug, so the slot is
    /// given back to the core that allocated it and the open fails with EIO.
    fn check_opened(&self, q: &mut Queues, core: u32, done: Answer) -> Answer {
        let Ok((_, slot)) = done else {
            return done;
        };
        let fits = flow_group::opened_on(&self.layout, core, slot);
        debug_assert!(
            fits,
            "engine core {core} opened slot {slot} of another core"
        );
        if fits {
            return done;
        }
        // On the answering core's queue: the layout would route the Close elsewhere.
        let _ = self.push(q, core, &Command::Close { slot, abort: true });
        Err(Error::Os(libc::EIO))
    }
}
