//! Connection timers: each connection's [`TimerTable`] of deadlines keyed by [`Timer`]
//! (quinn-proto's pattern), and one lazily-updated deadline per connection slot in a
//! bounded min-heap, the [`TimerQueue`].
//!
//! Re-arming a timer later (the RTO restarting on every ACK) costs nothing: the earlier heap
//! entry fires, the owner finds nothing due and arms again. Only an earlier deadline pushes.
//! Stale entries are bounded by rebuilding the heap when it outgrows twice the slot count.

use core::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::time::Instant;

/// The timers of one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Timer {
    /// Retransmission (handshake, data, FIN).
    Rto = 0,
    /// Delayed ACK.
    DelayedAck = 1,
    /// Zero-window probe, or the silly-window override.
    Persist = 2,
    /// TIME-WAIT expiry, or an orphan's bounded lifetime in FIN-WAIT.
    TimeWait = 3,
    /// The next congestion-control iteration (control/congestion.rs).
    Congestion = 4,
    /// The tail loss probe (RFC 8985 7): PTO after the last transmission or ACK.
    Probe = 5,
    /// RACK's reordering timer (RFC 8985 6.3).
    Reorder = 6,
}

impl Timer {
    /// How many timers a connection has (the last variant's index plus one).
    const COUNT: usize = Timer::Reorder as usize + 1;
}

/// A connection's deadlines, one per [`Timer`]; `Instant::MAX` is a stopped timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimerTable([Instant; Timer::COUNT]);

impl Default for TimerTable {
    fn default() -> Self {
        TimerTable([Instant::MAX; Timer::COUNT])
    }
}

impl TimerTable {
    /// The timer's deadline, if it runs.
    #[inline]
    pub(crate) fn get(&self, timer: Timer) -> Option<Instant> {
        let at = self.0[timer as usize];
        (at != Instant::MAX).then_some(at)
    }

    /// Whether the timer runs.
    #[inline]
    pub(crate) fn is_set(&self, timer: Timer) -> bool {
        self.0[timer as usize] != Instant::MAX
    }

    /// Whether the timer's deadline is at or before `now` (never for a stopped one short of
    /// the end of time).
    #[inline]
    pub(crate) fn is_expired(&self, timer: Timer, now: Instant) -> bool {
        self.0[timer as usize] <= now
    }

    /// Sets (or moves) the timer's deadline.
    #[inline]
    pub(crate) fn set(&mut self, timer: Timer, at: Instant) {
        self.0[timer as usize] = at;
    }

    /// Stops the timer.
    #[inline]
    pub(crate) fn stop(&mut self, timer: Timer) {
        self.0[timer as usize] = Instant::MAX;
    }

    /// Stops every timer.
    #[inline]
    pub(crate) fn stop_all(&mut self) {
        self.0 = [Instant::MAX; Timer::COUNT];
    }

    /// The earliest deadline, `Instant::MAX` when every timer is stopped.
    #[inline]
    pub(crate) fn next_deadline(&self) -> Instant {
        self.0.iter().copied().fold(Instant::MAX, Instant::min)
    }
}

/// A min-heap of (deadline, slot) with at most one live entry per slot.
pub(crate) struct TimerQueue {
    heap: BinaryHeap<Reverse<(Instant, u32)>>,
    armed: Box<[Instant]>,
}

impl TimerQueue {
    /// Creates a queue for `slots` slots.
    pub(crate) fn new(slots: usize) -> Self {
        TimerQueue {
            heap: BinaryHeap::with_capacity(2 * slots + 1),
            armed: vec![Instant::MAX; slots].into_boxed_slice(),
        }
    }

    /// Ensures `slot` is woken no later than `deadline`.
    #[inline]
    pub(crate) fn arm(&mut self, slot: u32, deadline: Instant) {
        let Some(armed) = self.armed.get_mut(slot as usize) else {
            return;
        };
        if deadline >= *armed {
            return;
        }
        *armed = deadline;
        if self.heap.len() >= 2 * self.armed.len() {
            self.rebuild();
        }
        self.heap.push(Reverse((deadline, slot)));
    }

    /// Forgets `slot`'s deadline (its entry goes stale).
    pub(crate) fn disarm(&mut self, slot: u32) {
        if let Some(armed) = self.armed.get_mut(slot as usize) {
            *armed = Instant::MAX;
        }
    }

    /// The earliest deadline (possibly of a stale entry, which only causes an early wake-up).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((t, _))| *t)
    }

    /// Pops a slot whose deadline is at or before `now`.
    pub(crate) fn pop_expired(&mut self, now: Instant) -> Option<u32> {
        while let Some(&Reverse((deadline, slot))) = self.heap.peek() {
            if deadline > now {
                return None;
            }
            self.heap.pop();
            if self.armed[slot as usize] == deadline {
                self.armed[slot as usize] = Instant::MAX;
                return Some(slot);
            }
        }
        None
    }

    fn rebuild(&mut self) {
        self.heap.clear();
        for (slot, &deadline) in self.armed.iter().enumerate() {
            if deadline != Instant::MAX {
                self.heap.push(Reverse((deadline, slot as u32)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_keeps_one_deadline_per_timer() {
        let mut t = TimerTable::default();
        assert_eq!(t.next_deadline(), Instant::MAX);
        t.set(Timer::Rto, Instant::from_millis(30));
        t.set(Timer::DelayedAck, Instant::from_millis(10));
        assert_eq!(t.next_deadline(), Instant::from_millis(10));
        assert!(t.is_expired(Timer::DelayedAck, Instant::from_millis(10)));
        assert!(!t.is_expired(Timer::Persist, Instant::from_millis(10)));
        t.stop(Timer::DelayedAck);
        assert_eq!(t.get(Timer::DelayedAck), None);
        assert_eq!(t.get(Timer::Rto), Some(Instant::from_millis(30)));
        t.stop_all();
        assert!(!t.is_set(Timer::Rto));
    }

    #[test]
    fn earliest_fires_first_and_later_rearm_is_lazy() {
        let mut q = TimerQueue::new(4);
        q.arm(1, Instant::from_millis(10));
        q.arm(2, Instant::from_millis(5));
        q.arm(1, Instant::from_millis(20)); // later: no new entry
        assert_eq!(q.next_deadline(), Some(Instant::from_millis(5)));
        assert_eq!(q.pop_expired(Instant::from_millis(4)), None);
        assert_eq!(q.pop_expired(Instant::from_millis(10)), Some(2));
        assert_eq!(q.pop_expired(Instant::from_millis(10)), Some(1));
        assert_eq!(q.pop_expired(Instant::from_millis(10)), None);
    }

    #[test]
    fn heap_stays_bounded_under_many_earlier_rearms() {
        let mut q = TimerQueue::new(2);
        for i in (0..1000).rev() {
            q.arm(0, Instant::from_millis(i));
        }
        assert!(q.heap.len() <= 5);
        q.disarm(0);
        assert_eq!(q.pop_expired(Instant::MAX), None);
    }
}
