//! DCTCP (RFC 8257): the sender estimates the fraction of bytes that met a congested queue
//! (alpha, from ECN echoes) and cuts its window by alpha/2 once per window with marks.
//! Growth and loss reaction are those of standard TCP (RFC 8257 3.3, 3.5).

use super::newreno::Reno;
use super::{CcInput, CongestionControl};

/// RFC 8257 3.3: the estimation gain g = 1/16.
pub const G: f64 = 1.0 / 16.0;

/// DCTCP state.
#[derive(Clone, Debug, PartialEq)]
pub struct Dctcp {
    reno: Reno,
    alpha: f64,
}

impl Dctcp {
    /// A connection starting at `cwnd` bytes. RFC 8257 3.3: alpha starts at 1, so the first
    /// marks (typically ending slow start) halve the window as standard ECN would.
    pub fn new(cwnd: u32, ssthresh: u32) -> Self {
        Dctcp {
            reno: Reno::new(cwnd, ssthresh),
            alpha: 1.0,
        }
    }

    /// The estimated fraction of marked bytes, in [0, 1].
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// The slow-start threshold.
    pub fn ssthresh(&self) -> u32 {
        self.reno.ssthresh
    }
}

impl CongestionControl for Dctcp {
    fn update(&mut self, i: &CcInput) {
        let c = &i.counters;
        // RFC 8257 3.3 steps 7-9: once per window of data, M = marked / acked bytes and
        // alpha = (1 - g) alpha + g M. The control plane runs once per RTT, so an
        // iteration's counters are one window's.
        if c.acked_bytes > 0 {
            let m = (c.ecn_bytes.min(c.acked_bytes) as f64) / c.acked_bytes as f64;
            self.alpha = (1.0 - G) * self.alpha + G * m;
        }
        if i.timeouts > 0 {
            // RFC 8257 3.5: loss is handled as in standard TCP (RFC 5681).
            self.reno.timeout(i.flight, i.mss);
        } else if i.loss() {
            self.reno.halve(i.flight, i.mss);
        } else if i.ecn_marked() {
            // RFC 8257 3.3 step 10: cwnd = cwnd * (1 - alpha / 2), at most once per window
            // (one iteration), and ssthresh follows so growth resumes in avoidance. Two
            // segments stay the floor, as in Linux.
            let cwnd = (self.reno.cwnd as f64 * (1.0 - self.alpha / 2.0)) as u32;
            self.reno.cwnd = cwnd.max(2 * i.mss);
            self.reno.ssthresh = self.reno.cwnd;
            self.reno.acked_in_ca = 0;
        } else if !i.in_recovery {
            self.reno.grow(c.acked_bytes, i.mss);
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

    fn window(acked: u32, marked: u32) -> CcInput {
        CcInput {
            counters: CcCounters {
                acked_bytes: acked,
                ecn_bytes: marked,
                ..Default::default()
            },
            flight: acked,
            mss: MSS,
            ..Default::default()
        }
    }

    #[test]
    fn alpha_is_the_ewma_of_the_marked_fraction_with_g_one_sixteenth() {
        let mut cc = Dctcp::new(100 * MSS, u32::MAX);
        assert_eq!(cc.alpha(), 1.0);
        // An unmarked window: alpha = 15/16.
        cc.update(&window(100 * MSS, 0));
        assert_eq!(cc.alpha(), 0.9375);
        // Unmarked windows decay alpha geometrically: (15/16)^n.
        for _ in 0..9 {
            cc.update(&window(100 * MSS, 0));
        }
        assert!((cc.alpha() - 0.9375f64.powi(10)).abs() < 1e-12);
        // A window with a quarter of its bytes marked: alpha = 15/16 a + 1/16 * 0.25.
        let before = cc.alpha();
        cc.update(&window(100 * MSS, 25 * MSS));
        assert!((cc.alpha() - (0.9375 * before + 0.015625)).abs() < 1e-12);
    }

    #[test]
    fn marks_cut_the_window_by_alpha_over_two() {
        let mut cc = Dctcp::new(100 * MSS, u32::MAX);
        // alpha = 1: the first marked window is halved (after the update with M = 1).
        cc.update(&window(100 * MSS, 100 * MSS));
        assert_eq!(cc.alpha(), 1.0);
        assert_eq!(cc.window(), 50 * MSS);
        assert_eq!(cc.ssthresh(), 50 * MSS);
        // Drive alpha down to exactly 1/16 from zero: start fresh with alpha forced.
        let mut cc = Dctcp::new(100 * MSS, 100 * MSS);
        cc.alpha = 0.0;
        cc.update(&window(100 * MSS, 100 * MSS));
        assert_eq!(cc.alpha(), 0.0625);
        // cwnd = 100 MSS * (1 - 0.0625/2) = 96.875 MSS.
        assert_eq!(cc.window(), 96_875);
        // Never below two segments.
        let mut cc = Dctcp::new(2 * MSS, u32::MAX);
        cc.update(&window(2 * MSS, 2 * MSS));
        assert_eq!(cc.window(), 2 * MSS);
    }

    #[test]
    fn unmarked_windows_grow_as_reno_and_loss_halves() {
        let mut cc = Dctcp::new(10 * MSS, u32::MAX);
        cc.update(&window(10 * MSS, 0));
        assert_eq!(cc.window(), 20 * MSS);
        let mut loss = window(0, 0);
        loss.flight = 20 * MSS;
        loss.counters.fast_retransmits = 1;
        cc.update(&loss);
        assert_eq!(cc.window(), 10 * MSS);
    }
}
