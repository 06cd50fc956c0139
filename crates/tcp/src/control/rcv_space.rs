//! Receive-buffer autotuning's measurement (the idea of Linux's `tcp_rcv_space_adjust`
//! with its timestamp-free RTT estimate `tcp_rcv_rtt_measure`). A receiver cannot see the
//! sender's flight, only how fast whole windows arrive: it times how long the sender takes
//! to deliver one ring's worth of data. A sender held back by the window delivers a window
//! per round trip, the fastest any window arrives, so a window that arrives about as fast
//! as the fastest seen means the ring is the limit and should double. A sender limited by
//! its congestion window, its application or the link takes longer once the ring is
//! bigger than what it delivers per round trip, and growth stops by itself.

use sluice_wire::tcp::SeqNumber;

use crate::time::Instant;

/// One connection's measurement: the sequence number that ends the window being timed,
/// when timing began, and the fastest window so far.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RcvSpace {
    end: SeqNumber,
    start: Instant,
    fastest_us: u64,
}

impl Default for RcvSpace {
    fn default() -> Self {
        RcvSpace {
            end: SeqNumber(0),
            start: Instant::MAX,
            fastest_us: u64::MAX,
        }
    }
}

impl RcvSpace {
    /// Looks at the in-order data received so far (`rcv_nxt`) with a ring of `capacity`
    /// bytes; true when a whole ring's worth arrived within 1.5 times the fastest window,
    /// i.e. the ring should grow. Starts the next measurement whenever one ends.
    pub(crate) fn sample(&mut self, rcv_nxt: SeqNumber, capacity: u32, now: Instant) -> bool {
        if self.start == Instant::MAX {
            self.restart(rcv_nxt, capacity, now);
            return false;
        }
        if rcv_nxt.seq_lt(self.end) {
            return false;
        }
        let took = now.saturating_since(self.start).as_micros() as u64;
        let fast = took.saturating_mul(2) <= self.fastest_us.saturating_mul(3);
        self.fastest_us = self.fastest_us.min(took);
        self.restart(rcv_nxt, capacity, now);
        fast
    }

    /// Times the next ring's worth after a change of capacity (growth), from now.
    pub(crate) fn restart(&mut self, rcv_nxt: SeqNumber, capacity: u32, now: Instant) {
        self.end = rcv_nxt + capacity;
        self.start = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Instant {
        Instant::from_micros(n)
    }

    #[test]
    fn a_window_limited_sender_keeps_the_ring_growing_and_a_paced_one_stops_it() {
        let mut r = RcvSpace::default();
        let cap = 1000;
        assert!(
            !r.sample(SeqNumber(0), cap, us(0)),
            "the first look starts timing"
        );
        assert!(
            !r.sample(SeqNumber(999), cap, us(50)),
            "not a whole ring yet"
        );
        // A ring per 100 us round trip: the first window is the fastest so far.
        assert!(r.sample(SeqNumber(1000), cap, us(100)));
        // The ring doubled; the window-limited sender fills it in a round trip again.
        r.restart(SeqNumber(1000), 2 * cap, us(100));
        assert!(r.sample(SeqNumber(3000), 2 * cap, us(210)));
        // Now the sender is limited by something else: 4000 bytes take 400 us.
        r.restart(SeqNumber(3000), 4 * cap, us(210));
        assert!(!r.sample(SeqNumber(7000), 4 * cap, us(610)));
        assert!(!r.sample(SeqNumber(11_000), 4 * cap, us(1010)));
    }

    #[test]
    fn sequence_wrap_is_followed() {
        let mut r = RcvSpace::default();
        let start = SeqNumber(u32::MAX - 100);
        r.sample(start, 1000, us(0));
        assert!(!r.sample(start + 500u32, 1000, us(10)));
        assert!(r.sample(start + 1000u32, 1000, us(20)));
    }
}
