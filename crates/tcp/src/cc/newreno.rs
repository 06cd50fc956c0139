//! NewReno (RFC 5681, RFC 6582) in per-RTT form: the control plane applies a whole
//! interval's acknowledged bytes at once. Retransmission is go-back-N (Laminar, TAS), so
//! the window is not inflated per duplicate ACK; it is set to ssthresh when a fast
//! retransmit starts and held until the recovery ends (RFC 6582 3.2 steps 2-3).

use super::{CcInput, CongestionControl};

/// The window arithmetic NewReno, DCTCP and (in slow start) CUBIC share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reno {
    pub cwnd: u32,
    pub ssthresh: u32,
    /// Bytes acknowledged in congestion avoidance since cwnd last grew (RFC 5681 3.1,
    /// the byte-counting variant).
    pub acked_in_ca: u32,
}

impl Reno {
    pub(super) fn new(cwnd: u32, ssthresh: u32) -> Self {
        Reno {
            cwnd,
            ssthresh,
            acked_in_ca: 0,
        }
    }

    /// Grows the window by `acked` bytes' worth: slow start below ssthresh, then one MSS per
    /// window of data. Returns the bytes left over for congestion avoidance.
    pub(super) fn slow_start(&mut self, acked: u32) -> u32 {
        if self.cwnd >= self.ssthresh {
            return acked;
        }
        // RFC 5681 3.1: in slow start cwnd grows by what is acknowledged (at most doubling
        // per RTT), up to ssthresh; the rest is counted in congestion avoidance.
        let room = self.ssthresh - self.cwnd;
        let grow = acked.min(room);
        self.cwnd = self.cwnd.saturating_add(grow);
        acked - grow
    }

    /// Grows the window for `acked` bytes, to at most `cap` (see [`CcInput::growth_cap`]):
    /// a window at the cap already is not growing because the sender does not use it.
    pub(super) fn grow(&mut self, acked: u32, mss: u32, cap: u32) {
        if self.cwnd >= cap {
            return;
        }
        self.grow_uncapped(acked, mss);
        self.cwnd = self.cwnd.min(cap);
    }

    fn grow_uncapped(&mut self, acked: u32, mss: u32) {
        let acked = self.slow_start(acked);
        if acked == 0 {
            return;
        }
        // RFC 5681 3.1 eq. 3 with byte counting (RFC 3465): one SMSS per cwnd acknowledged.
        self.acked_in_ca = self.acked_in_ca.saturating_add(acked);
        while self.acked_in_ca >= self.cwnd && self.cwnd > 0 {
            self.acked_in_ca -= self.cwnd;
            self.cwnd = self.cwnd.saturating_add(mss);
        }
    }

    /// RFC 5681 eq. 4: ssthresh = max(FlightSize / 2, 2 SMSS); RFC 6582 3.2 step 2 (without
    /// the inflation go-back-N does not need): cwnd = ssthresh.
    pub(super) fn halve(&mut self, flight: u32, mss: u32) {
        self.ssthresh = (flight / 2).max(2 * mss);
        self.cwnd = self.ssthresh;
        self.acked_in_ca = 0;
    }

    /// RFC 5681 3.1 after a retransmission timeout: ssthresh as eq. 4, cwnd = the loss window
    /// of one segment.
    pub(super) fn timeout(&mut self, flight: u32, mss: u32) {
        self.ssthresh = (flight / 2).max(2 * mss);
        self.cwnd = mss;
        self.acked_in_ca = 0;
    }
}

/// NewReno state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewReno {
    reno: Reno,
}

impl NewReno {
    /// A connection starting at `cwnd` bytes with the given ssthresh.
    pub fn new(cwnd: u32, ssthresh: u32) -> Self {
        NewReno {
            reno: Reno::new(cwnd, ssthresh),
        }
    }

    /// The slow-start threshold.
    pub fn ssthresh(&self) -> u32 {
        self.reno.ssthresh
    }
}

impl CongestionControl for NewReno {
    fn update(&mut self, i: &CcInput) {
        if i.timeouts > 0 {
            self.reno.timeout(i.flight, i.mss);
        } else if i.loss() || i.ecn_marked() {
            // RFC 3168 6.1.2: an ECN echo is answered as a loss would be, once per window
            // (an iteration covers about one window).
            self.reno.halve(i.flight, i.mss);
        } else if !i.in_recovery {
            self.reno
                .grow(i.counters.acked_bytes, i.mss, i.growth_cap(self.reno.cwnd));
        }
    }

    fn window(&self) -> u32 {
        self.reno.cwnd
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::CcCounters;

    const MSS: u32 = 1000;

    fn acked(bytes: u32, flight: u32) -> CcInput {
        CcInput {
            counters: CcCounters {
                acked_bytes: bytes,
                max_flight: flight,
                ..Default::default()
            },
            flight,
            mss: MSS,
            ..Default::default()
        }
    }

    #[test]
    fn slow_start_doubles_per_rtt_then_one_mss_per_rtt() {
        let mut cc = NewReno::new(10 * MSS, u32::MAX);
        cc.update(&acked(10 * MSS, 10 * MSS));
        assert_eq!(
            cc.window(),
            20 * MSS,
            "RFC 5681 3.1: slow start doubles per RTT"
        );
        // A timeout with 20 segments in flight: ssthresh 10, cwnd one segment.
        cc.update(&CcInput {
            timeouts: 1,
            ..acked(0, 20 * MSS)
        });
        assert_eq!((cc.window(), cc.ssthresh()), (MSS, 10 * MSS));
        cc.update(&acked(MSS, MSS));
        cc.update(&acked(2 * MSS, 2 * MSS));
        cc.update(&acked(4 * MSS, 4 * MSS));
        assert_eq!(cc.window(), 8 * MSS);
        // Crossing ssthresh: 2 segments fill slow start, 6 go to congestion avoidance.
        cc.update(&acked(8 * MSS, 8 * MSS));
        assert_eq!(cc.window(), 10 * MSS);
        cc.update(&acked(10 * MSS, 10 * MSS));
        assert_eq!(cc.window(), 11 * MSS, "6 + 10 acked >= 10: one MSS");
        cc.update(&acked(11 * MSS, 11 * MSS));
        assert_eq!(cc.window(), 12 * MSS);
    }

    #[test]
    fn fast_retransmit_and_ecn_halve_the_flight() {
        let mut cc = NewReno::new(40 * MSS, u32::MAX);
        let mut i = acked(5 * MSS, 40 * MSS);
        i.counters.fast_retransmits = 1;
        cc.update(&i);
        // RFC 5681 eq. 4: max(FlightSize/2, 2 SMSS).
        assert_eq!((cc.window(), cc.ssthresh()), (20 * MSS, 20 * MSS));
        // No growth during the recovery (RFC 6582).
        cc.update(&CcInput {
            in_recovery: true,
            ..acked(20 * MSS, 20 * MSS)
        });
        assert_eq!(cc.window(), 20 * MSS);
        let mut e = acked(20 * MSS, 3 * MSS);
        e.counters.ecn_bytes = 1000;
        cc.update(&e);
        assert_eq!(cc.window(), 2 * MSS, "floor of 2 SMSS");
    }
}
