//! Poll, then sleep, adaptively (docs/service.md "Sleeping and waking"): the policy both sides
//! of the shared region follow while they wait — the engine for frames and commands, an
//! application thread for completions and readiness.
//!
//! Polling is what makes a round trip through the engine fast, but only while it is free: on
//! a machine whose cores are all taken (two cores shared by the engine, an application and
//! its clients, or by compilers) a polling thread is descheduled for a whole time slice at a
//! time, and a sleeping thread that is woken is scheduled ahead of it. So a waiting thread:
//!
//! - polls without giving up its core for `spin_before_yield` (a reply that comes back within
//!   a round trip is met at once);
//! - then yields its core between polls, so that a thread woken onto the same core (the peer
//!   it is waiting for, often) runs at once instead of waiting for this one's time slice;
//! - and takes a gap between two of its polls longer than [`PREEMPTED_GAP`] (it was
//!   descheduled, or its yield let another thread run that long) as proof that the core is
//!   contended: it halves its polling budget and sleeps now;
//! - and learns from how long its waits last: a wait that ends (work arrived) within the
//!   configured budget would have been met by polling, so it doubles the budget back up to
//!   the configured one; a longer wait, met by a sleep anyway, made its polling a waste of a
//!   core, so it halves the budget. A thread with a reply due in microseconds keeps polling;
//!   one serving a request every 20 ms soon sleeps at once, as a kernel socket's reader does.
//!
//! Pure logic with time passed in, so it is tested without a clock.

use std::time::{Duration, Instant};

/// A gap between two polls of one idle spell at least this long means another thread held
/// this core: longer than any poll takes, shorter than a scheduler's time slice.
pub const PREEMPTED_GAP: Duration = Duration::from_micros(50);

/// The budget grows back from zero by at least this much per uncontended wait.
const GROW_FROM_ZERO: Duration = Duration::from_micros(2);

/// What a waiting thread does after an idle poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleStep {
    /// Poll again at once.
    Spin,
    /// Give up the core (`sched_yield`), then poll again.
    Yield,
    /// Stop polling: arrange to be woken and sleep.
    Sleep,
}

/// A thread's polling budget across its waits.
#[derive(Clone, Copy, Debug)]
pub struct IdlePolicy {
    max: Duration,
    spin_before_yield: Duration,
    budget: Duration,
    /// Idle spells cut short because another thread held the core.
    pub preemptions: u64,
}

/// One idle spell: from the first poll that found nothing to do until work or sleep.
#[derive(Clone, Copy, Debug)]
pub struct IdleSpell {
    start: Instant,
    last: Instant,
    cut_short: bool,
}

impl IdlePolicy {
    /// Polls up to `max` per spell, the first `spin_before_yield` of it without yielding.
    pub fn new(max: Duration, spin_before_yield: Duration) -> Self {
        IdlePolicy {
            max,
            spin_before_yield,
            budget: max,
            preemptions: 0,
        }
    }

    /// How long the next spell may poll.
    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// Starts a spell at `now` (the first poll that found nothing to do).
    pub fn begin(&self, now: Instant) -> IdleSpell {
        IdleSpell {
            start: now,
            last: now,
            cut_short: false,
        }
    }

    /// After an idle poll at `now`: poll again, yield first, or sleep.
    pub fn step(&mut self, spell: &mut IdleSpell, now: Instant) -> IdleStep {
        let gap = now.saturating_duration_since(spell.last);
        spell.last = now;
        if gap >= PREEMPTED_GAP {
            self.budget /= 2;
            self.preemptions += 1;
            spell.cut_short = true;
            return IdleStep::Sleep;
        }
        let idle = now.saturating_duration_since(spell.start);
        if idle >= self.budget {
            IdleStep::Sleep
        } else if idle >= self.spin_before_yield {
            IdleStep::Yield
        } else {
            IdleStep::Spin
        }
    }

    /// The spell ended at `now` with nothing to do (a wait's timeout passed): polling that
    /// took a while was a waste, so the budget halves; a check that barely polled leaves it.
    pub fn timed_out(&mut self, spell: &IdleSpell, now: Instant) {
        if !spell.cut_short && now.saturating_duration_since(spell.start) >= self.spin_before_yield
        {
            self.budget /= 2;
        }
    }

    /// The spell ended at `now` (work arrived, while polling or after a sleep): one that
    /// polling would have met earns the budget back, a longer one halves it.
    pub fn end(&mut self, spell: &IdleSpell, now: Instant) {
        if spell.cut_short {
            return;
        }
        if now.saturating_duration_since(spell.start) <= self.max {
            self.budget = (self.budget * 2).max(GROW_FROM_ZERO).min(self.max);
        } else {
            self.budget /= 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn a_quiet_core_spins_then_yields_then_sleeps_at_the_budget() {
        let mut p = IdlePolicy::new(100 * US, 20 * US);
        let t0 = Instant::now();
        let mut s = p.begin(t0);
        let mut steps = Vec::new();
        for i in 1..=100u32 {
            let step = p.step(&mut s, t0 + i * 2 * US);
            steps.push(step);
            if step == IdleStep::Sleep {
                break;
            }
        }
        assert_eq!(steps[0], IdleStep::Spin);
        assert_eq!(steps[9], IdleStep::Yield, "20 us in: yield between polls");
        assert_eq!(steps.last(), Some(&IdleStep::Sleep));
        assert_eq!(steps.len(), 50, "sleeps once 100 us have passed");
        p.end(&s, t0 + 100 * US);
        assert_eq!(
            p.budget(),
            100 * US,
            "work polling would have met keeps the budget"
        );
        p.end(&p.begin(t0), t0 + 101 * US);
        assert_eq!(
            p.budget(),
            50 * US,
            "work that came after a sleep anyway halves it"
        );
        assert_eq!(p.preemptions, 0);
    }

    #[test]
    fn a_long_gap_between_polls_halves_the_budget_and_sleeps_at_once() {
        let mut p = IdlePolicy::new(10_000 * US, 20 * US);
        let t0 = Instant::now();
        let mut s = p.begin(t0);
        assert_eq!(p.step(&mut s, t0 + 30 * US), IdleStep::Yield);
        assert_eq!(
            p.step(&mut s, t0 + 30 * US + PREEMPTED_GAP),
            IdleStep::Sleep
        );
        p.end(&s, t0 + 40 * US + PREEMPTED_GAP);
        assert_eq!(p.budget(), 5_000 * US, "contention halves the budget");
        assert_eq!(p.preemptions, 1);
    }

    #[test]
    fn the_budget_falls_to_nothing_under_contention_and_grows_back_when_it_ends() {
        let mut p = IdlePolicy::new(1_000 * US, 20 * US);
        let mut t = Instant::now();
        for _ in 0..20 {
            let mut s = p.begin(t);
            t += PREEMPTED_GAP;
            assert_eq!(p.step(&mut s, t), IdleStep::Sleep);
            p.end(&s, t);
        }
        assert_eq!(p.budget(), Duration::ZERO);
        // A zero budget sleeps on the first idle poll.
        let mut s = p.begin(t);
        assert_eq!(p.step(&mut s, t + US), IdleStep::Sleep);
        p.end(&s, t + 2 * US);
        let mut uncontended = 1;
        while p.budget() < 1_000 * US {
            let mut s = p.begin(t);
            t += US;
            p.step(&mut s, t);
            p.end(&s, t);
            uncontended += 1;
        }
        assert!(
            uncontended <= 11,
            "doubling from 2 us: {uncontended} spells"
        );
    }

    #[test]
    fn timeouts_that_polled_halve_the_budget_and_quick_checks_leave_it() {
        let mut p = IdlePolicy::new(10_000 * US, 20 * US);
        let t0 = Instant::now();
        p.timed_out(&p.begin(t0), t0);
        assert_eq!(p.budget(), 10_000 * US, "a non-blocking check");
        p.timed_out(&p.begin(t0), t0 + 1_000 * US);
        assert_eq!(p.budget(), 5_000 * US, "1 ms polled for nothing");
    }

    #[test]
    fn waits_longer_than_the_budget_teach_it_to_sleep_at_once() {
        // A request every 20 ms against 10 ms of polling: each spin is wasted.
        let mut p = IdlePolicy::new(10_000 * US, 20 * US);
        let mut t = Instant::now();
        let mut spells = 0;
        while p.budget() > Duration::ZERO {
            let s = p.begin(t);
            t += 20_000 * US;
            p.end(&s, t);
            spells += 1;
        }
        assert!(
            spells <= 25,
            "{spells} wasted spins before sleeping at once"
        );
        // Then a burst of quick replies brings polling back.
        for _ in 0..14 {
            let s = p.begin(t);
            t += 50 * US;
            p.end(&s, t);
        }
        assert_eq!(p.budget(), 10_000 * US);
    }
}
