//! Posting commands on the calling thread's context, and "post, then wait for the
//! completion" (docs/service.md "Commands").

use std::sync::Arc;
use std::time::Duration;

use sluice_shm::Command;

use crate::attach::Sluice;
use crate::context::{ContextSlot, Queues};
use crate::error::Error;

/// A command's answer: `(slot, value)` of Done, or the errno of Failed.
pub(crate) type Answer = Result<(u32, u32), Error>;

impl Sluice {
    /// Appends a command, waiting while the queue is full (the engine drains it every loop
    /// iteration; if it sleeps, the doorbell wakes it).
    fn push(&self, q: &mut Queues, cmd: &Command) -> Result<(), Error> {
        let entry = cmd.encode();
        let mut spins = 0u32;
        loop {
            if q.try_push(&entry)? {
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
        self.with_context(|ctx| {
            self.push(&mut ctx.queues(), &cmd)?;
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
    /// queue receives what the engine reports later about it, as splice reports).
    pub(crate) fn call_on_context(
        &self,
        make: impl FnOnce(u32) -> Command,
    ) -> Result<(Arc<ContextSlot>, Answer), Error> {
        if !self.is_alive() {
            return Err(Error::EngineGone);
        }
        self.with_context(|ctx| {
            let mut q = ctx.queues();
            let req = q.next_request();
            self.push(&mut q, &make(req))?;
            self.ring_doorbell();
            loop {
                if let Some(done) = q.completion_for(req, ctx.reports_map()) {
                    let this = self.context_arc(ctx.index).ok_or(Error::Os(libc::EIO))?;
                    return Ok((this, done));
                }
                let q = &*q;
                self.wait_on(ctx, None, &mut [], &mut || q.has_completion())?;
            }
        })
    }
}
