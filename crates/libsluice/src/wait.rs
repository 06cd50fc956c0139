//! Poll, then sleep (Laminar 5, docs/service.md "Sleeping and waking"): a waiting thread
//! checks its condition for up to the engine's `app_idle_us` (less while its core is
//! contended: `sluice_shm::idle`), then sets its context's sleeping
//! flag, fences, re-checks, and sleeps in poll(2) on the context eventfd, the control socket
//! (its hang-up is the engine dying) and the caller's own descriptors.
//!
//! An engine on several data-path cores has one completion queue per core in each context
//! but still one sleeping flag and one eventfd, which any of its cores signals. The
//! re-check after the flag is the caller's `ready()`, so it must read every queue that can
//! hold what it waits for: a command's answer comes only on the queue of the core it went
//! to (`Queues::has_completion_on`), splice reports on any (`Queues::has_completion`).

use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use sluice_shm::idle::{IdlePolicy, IdleSpell, IdleStep};

use crate::attach::Sluice;
use crate::context::ContextSlot;
use crate::error::Error;

/// How a [`Sluice::wait`] ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wait {
    /// The condition became true.
    pub ready: bool,
    /// Kernel descriptors with events (their `revents` are filled in).
    pub fds_ready: usize,
    /// The timeout passed first.
    pub timed_out: bool,
}

/// Kernel descriptors are polled once per this many checks while spinning.
const FD_POLL_EVERY: u32 = 32;
/// A context shared by several threads cannot rely on its eventfd waking the right one.
const SHARED_SLEEP_SLICE_MS: i32 = 1;

impl Sluice {
    /// The calling thread waits until `ready()` is true, a kernel descriptor in `fds` has
    /// revents (filled in, as poll(2) does), `timeout` passes (None = forever), or the
    /// engine dies: polls for the engine's app_idle_us, then sleeps in poll(2) on the
    /// thread's context eventfd + the control socket + `fds`.
    ///
    /// `ready()` is checked first and last. Once the engine is gone and `ready()` is still
    /// false, only `fds` are waited for, and with none the result is `Err(EngineGone)`
    /// (socket readiness reports every event once the engine is gone, so socket waiters see
    /// `ready`). A signal interrupting the sleep is `Err(Os(EINTR))`.
    pub fn wait(
        &self,
        timeout: Option<Duration>,
        fds: &mut [libc::pollfd],
        ready: &mut dyn FnMut() -> bool,
    ) -> Result<Wait, Error> {
        self.usable()?;
        for f in fds.iter_mut() {
            f.revents = 0;
        }
        if ready() {
            return Ok(Wait {
                ready: true,
                ..Wait::default()
            });
        }
        if !self.is_alive() {
            return fds_only(timeout.map(|t| Instant::now() + t), fds);
        }
        self.with_context(|ctx| self.wait_on(ctx, timeout, fds, ready))
    }

    /// [`Sluice::wait`] on a given context (the caller may hold the context's queues).
    pub(crate) fn wait_on(
        &self,
        ctx: &ContextSlot,
        timeout: Option<Duration>,
        fds: &mut [libc::pollfd],
        ready: &mut dyn FnMut() -> bool,
    ) -> Result<Wait, Error> {
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let mut policy = ctx.idle_policy(Duration::from_micros(self.engine().app_idle_us));
        let mut spell = policy.begin(start);
        let r = self.poll_then_sleep(ctx, deadline, fds, ready, &mut policy, &mut spell);
        match r {
            Ok(w) if w.timed_out => policy.timed_out(&spell, Instant::now()),
            _ => policy.end(&spell, Instant::now()),
        }
        ctx.keep_idle_policy(policy);
        r
    }

    /// Polls (spinning, then yielding) while the context's budget allows, then sleeps.
    fn poll_then_sleep(
        &self,
        ctx: &ContextSlot,
        deadline: Option<Instant>,
        fds: &mut [libc::pollfd],
        ready: &mut dyn FnMut() -> bool,
        policy: &mut IdlePolicy,
        spell: &mut IdleSpell,
    ) -> Result<Wait, Error> {
        let done = |w: Wait| Ok(w);
        let is_ready = Wait {
            ready: true,
            ..Wait::default()
        };

        // Poll.
        let mut i = 0u32;
        loop {
            if ready() {
                return done(is_ready);
            }
            if !fds.is_empty() && i % FD_POLL_EVERY == 0 {
                let n = poll(fds, 0)?;
                if n > 0 {
                    return done(Wait {
                        fds_ready: n,
                        ..Wait::default()
                    });
                }
            }
            i = i.wrapping_add(1);
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                break;
            }
            match policy.step(spell, now) {
                IdleStep::Spin => std::hint::spin_loop(),
                IdleStep::Yield => std::thread::yield_now(),
                IdleStep::Sleep => break,
            }
        }

        // Sleep.
        let sleeping = self
            .region
            .context_sleeping(ctx.index)
            .ok_or(Error::Os(libc::EINVAL))?;
        let mut pfds = Vec::with_capacity(2 + fds.len());
        loop {
            let remaining = match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return done(Wait {
                            timed_out: true,
                            ..Wait::default()
                        });
                    }
                    Some(d - now)
                }
                None => None,
            };
            sleeping.store(1, Ordering::Relaxed);
            // Pairs with the engine's fence between changing a socket/posting a completion
            // and reading our flag: either it sees the flag and signals, or we see its change.
            fence(Ordering::SeqCst);
            if ready() {
                sleeping.store(0, Ordering::Relaxed);
                return done(is_ready);
            }
            pfds.clear();
            pfds.push(libc::pollfd {
                fd: std::os::fd::AsRawFd::as_raw_fd(&ctx.eventfd),
                events: libc::POLLIN,
                revents: 0,
            });
            // No events asked: POLLHUP/POLLERR are always reported, and a reply to another
            // thread's NewContext must not wake us.
            pfds.push(libc::pollfd {
                fd: self.control_fd(),
                events: 0,
                revents: 0,
            });
            pfds.extend(fds.iter().map(|f| libc::pollfd { revents: 0, ..*f }));
            let mut ms = remaining.map_or(-1, ceil_ms);
            if ctx.shared() {
                ms = if ms < 0 {
                    SHARED_SLEEP_SLICE_MS
                } else {
                    ms.min(SHARED_SLEEP_SLICE_MS)
                };
            }
            let r = poll(&mut pfds, ms);
            sleeping.store(0, Ordering::Relaxed);
            let n = r?;
            if n > 0 && pfds[0].revents != 0 {
                ctx.eventfd.drain();
            }
            if pfds[1].revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                self.mark_dead();
                return if ready() {
                    done(is_ready)
                } else {
                    fds_only(deadline, fds)
                };
            }
            let mut fds_ready = 0;
            for (f, p) in fds.iter_mut().zip(&pfds[2..]) {
                f.revents = p.revents;
                fds_ready += usize::from(p.revents != 0);
            }
            if ready() {
                return done(Wait {
                    ready: true,
                    fds_ready,
                    timed_out: false,
                });
            }
            if fds_ready > 0 {
                return done(Wait {
                    fds_ready,
                    ..Wait::default()
                });
            }
        }
    }
}

/// Once the engine is gone only the caller's kernel descriptors are left to wait for;
/// with none, the wait is over: `Err(EngineGone)`.
fn fds_only(deadline: Option<Instant>, fds: &mut [libc::pollfd]) -> Result<Wait, Error> {
    if fds.is_empty() {
        return Err(Error::EngineGone);
    }
    let ms = deadline.map_or(-1, |d| ceil_ms(d.saturating_duration_since(Instant::now())));
    let n = poll(fds, ms)?;
    Ok(Wait {
        ready: false,
        fds_ready: n,
        timed_out: n == 0,
    })
}

/// Milliseconds for poll(2), rounded up so a wait never ends early.
fn ceil_ms(d: Duration) -> i32 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    ms.min(i32::MAX as u128) as i32
}

/// poll(2); EINTR is the caller's to see (a signal handler may want the call to return).
fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> Result<usize, Error> {
    // SAFETY: fds is a valid, exclusively borrowed array of pollfd of the given length.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if r < 0 {
        Err(Error::Os(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        ))
    } else {
        Ok(r as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_round_up_to_whole_milliseconds() {
        assert_eq!(ceil_ms(Duration::ZERO), 0);
        assert_eq!(ceil_ms(Duration::from_micros(1)), 1);
        assert_eq!(ceil_ms(Duration::from_millis(5)), 5);
        assert_eq!(ceil_ms(Duration::from_micros(5001)), 6);
        assert_eq!(ceil_ms(Duration::from_secs(u64::MAX / 4)), i32::MAX);
    }
}
