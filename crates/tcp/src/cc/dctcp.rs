//! DCTCP (RFC 8257): the sender estimates the fraction of bytes that met a congested queue
//! (alpha, from ECN echoes) and cuts its window by alpha/2 once per window with marks.
//! Growth and loss reaction are those of standard TCP (RFC 8257 3.3, 3.5).

use sluice_wire::tcp::SeqNumber;

use super::newreno::Reno;
use super::{CcInput, CongestionControl};

/// RFC 8257 3.3: the estimation gain g = 1/16.
pub(super) const G: f64 = 1.0 / 16.0;

/// DCTCP state.
#[derive(Clone, Debug, PartialEq)]
pub struct Dctcp {
    reno: Reno,
    alpha: f64,
    /// RFC 8257 3.3 DCTCP.WindowEnd: alpha is next updated once snd_una passes it (None:
    /// at the first iteration with acknowledged data).
    window_end: Option<SeqNumber>,
    /// RFC 8257 3.3 DCTCP.BytesAcked and DCTCP.BytesMarked of the observation window so
    /// far (iterations run about once per RTT, but not once per window of data).
    bytes_acked: u64,
    bytes_marked: u64,
    /// snd_max at the last window reduction: no other reduction until snd_una reaches it
    /// (RFC 8257 3.3, RFC 3168 6.1.2: at most once per window of data).
    cut_end: Option<SeqNumber>,
}

impl Dctcp {
    /// A connection starting at `cwnd` bytes. RFC 8257 3.3: alpha starts at 1, so the first
    /// marks (typically ending slow start) halve the window as standard ECN would.
    pub fn new(cwnd: u32, ssthresh: u32) -> Self {
        Dctcp {
            reno: Reno::new(cwnd, ssthresh),
            alpha: 1.0,
            window_end: None,
            bytes_acked: 0,
            bytes_marked: 0,
            cut_end: None,
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

impl Dctcp {
    /// Whether a window reduction is allowed: the data outstanding at the last one has
    /// been acknowledged.
    fn may_cut(&self, i: &CcInput) -> bool {
        self.cut_end.is_none_or(|end| i.snd_una.seq_ge(end))
    }
}

impl CongestionControl for Dctcp {
    fn update(&mut self, i: &CcInput) {
        let c = &i.counters;
        // RFC 8257 3.3 steps 1-12: bytes are counted as they are acknowledged; once the
        // window's data is acknowledged (step 7, read as Linux does: snd_una at or past
        // WindowEnd), M = marked / acked, alpha = (1 - g) alpha + g M, and WindowEnd =
        // SND.NXT. An iteration may cover less or more than a window (a loss runs one at
        // once), so the window end, not the iteration, decides.
        self.bytes_acked += u64::from(c.acked_bytes);
        self.bytes_marked += u64::from(c.ecn_bytes.min(c.acked_bytes));
        let window_done = self.window_end.is_none_or(|end| i.snd_una.seq_ge(end));
        if window_done && self.bytes_acked > 0 {
            let m = self.bytes_marked as f64 / self.bytes_acked as f64;
            self.alpha = (1.0 - G) * self.alpha + G * m;
            self.window_end = Some(i.snd_max);
            self.bytes_acked = 0;
            self.bytes_marked = 0;
        }
        if i.timeouts > 0 {
            // RFC 8257 3.5: loss is handled as in standard TCP (RFC 5681).
            self.reno.timeout(i.flight, i.mss);
            self.cut_end = Some(i.snd_max);
        } else if i.loss() {
            // RFC 6582 already allows one fast retransmit per window.
            self.reno.halve(i.flight, i.mss);
            self.cut_end = Some(i.snd_max);
        } else if i.ecn_marked() {
            // RFC 8257 3.3 step 10: cwnd = cwnd * (1 - alpha / 2), at most once per window
            // of data, and ssthresh follows so growth resumes in avoidance. Two segments
            // stay the floor, as in Linux. RFC 3168 6.1.2: an echo never grows the window.
            if self.may_cut(i) {
                let cwnd = (self.reno.cwnd as f64 * (1.0 - self.alpha / 2.0)) as u32;
                self.reno.cwnd = cwnd.max(2 * i.mss);
                self.reno.ssthresh = self.reno.cwnd;
                self.reno.acked_in_ca = 0;
                self.cut_end = Some(i.snd_max);
            }
        } else if !i.in_recovery {
            self.reno
                .grow(c.acked_bytes, i.mss, i.growth_cap(self.reno.cwnd));
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

    /// One iteration of a sender that acknowledged `acked` bytes (`marked` of them with
    /// ECE) and has `in_flight` more outstanding; snd_una starts at 0.
    fn at(una: &mut u32, acked: u32, marked: u32, in_flight: u32) -> CcInput {
        *una += acked;
        CcInput {
            counters: CcCounters {
                acked_bytes: acked,
                ecn_bytes: marked,
                max_flight: acked,
                ..Default::default()
            },
            flight: in_flight,
            mss: MSS,
            snd_una: SeqNumber(*una),
            snd_max: SeqNumber(*una + in_flight),
            ..Default::default()
        }
    }

    /// A fresh sender's iteration that acknowledges one whole window.
    fn window(acked: u32, marked: u32) -> CcInput {
        at(&mut 0, acked, marked, acked)
    }

    #[test]
    fn alpha_is_the_ewma_of_the_marked_fraction_with_g_one_sixteenth() {
        let mut cc = Dctcp::new(100 * MSS, u32::MAX);
        let una = &mut 0;
        assert_eq!(cc.alpha(), 1.0);
        // An unmarked window: alpha = 15/16.
        cc.update(&at(una, 100 * MSS, 0, 100 * MSS));
        assert_eq!(cc.alpha(), 0.9375);
        // Unmarked windows decay alpha geometrically: (15/16)^n.
        for _ in 0..9 {
            cc.update(&at(una, 100 * MSS, 0, 100 * MSS));
        }
        assert!((cc.alpha() - 0.9375f64.powi(10)).abs() < 1e-12);
        // A window with a quarter of its bytes marked: alpha = 15/16 a + 1/16 * 0.25.
        let before = cc.alpha();
        cc.update(&at(una, 100 * MSS, 25 * MSS, 100 * MSS));
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

    #[test]
    fn rfc8257_3_3_alpha_and_the_cut_happen_once_per_window_of_data() {
        let mut cc = Dctcp::new(100 * MSS, 100 * MSS);
        let una = &mut 0;
        // A whole unmarked window: alpha = 15/16, WindowEnd = 200 000; avoidance growth.
        cc.update(&at(una, 100 * MSS, 0, 100 * MSS));
        assert_eq!((cc.alpha(), cc.window()), (0.9375, 101 * MSS));
        // An iteration over half the next window (a loss or a late timer runs one off the
        // RTT beat), every byte marked: one cut with the alpha so far; alpha waits for the
        // window's end.
        cc.update(&at(una, 50 * MSS, 50 * MSS, 100 * MSS));
        assert_eq!(cc.alpha(), 0.9375, "RFC 8257 3.3 step 7: window not over");
        let cut = (101.0 * MSS as f64 * (1.0 - 0.9375 / 2.0)) as u32;
        assert_eq!(cc.window(), cut);
        // The rest of that window, marked too: alpha once, with M over the whole window;
        // no second cut (the data outstanding at the cut is not all acknowledged).
        cc.update(&at(una, 50 * MSS, 50 * MSS, 10 * MSS));
        assert_eq!(cc.alpha(), 0.9375 * 0.9375 + 0.0625);
        assert_eq!(cc.window(), cut, "at most one cut per window");
        // Past the data sent at the cut: marks cut again.
        cc.update(&at(una, 60 * MSS, 60 * MSS, 40 * MSS));
        assert!(cc.window() < cut);
        // A loss, then marks for data sent before it: no second reduction.
        let mut loss = at(una, 0, 0, 40 * MSS);
        loss.counters.fast_retransmits = 1;
        cc.update(&loss);
        assert_eq!(cc.window(), 20 * MSS);
        cc.update(&at(una, 10 * MSS, 10 * MSS, 30 * MSS));
        assert_eq!(cc.window(), 20 * MSS, "RFC 3168 6.1.2: once per window");
    }

    #[test]
    fn rfc7661_no_growth_beyond_twice_the_flight_used() {
        let mut cc = Dctcp::new(10 * MSS, u32::MAX);
        let una = &mut 0;
        // The application keeps 3 segments in flight: slow start stops at 6.
        for _ in 0..4 {
            cc.update(&at(una, 3 * MSS, 0, 3 * MSS));
        }
        assert_eq!(
            cc.window(),
            10 * MSS,
            "above 2 x 3 segments already: kept, not cut"
        );
        let mut cc = Dctcp::new(4 * MSS, u32::MAX);
        cc.update(&at(una, 3 * MSS, 0, 3 * MSS));
        assert_eq!(cc.window(), 6 * MSS);
        cc.update(&at(una, 3 * MSS, 0, 3 * MSS));
        assert_eq!(cc.window(), 6 * MSS);
        // A flight filling the window grows it again.
        cc.update(&at(una, 6 * MSS, 0, 6 * MSS));
        assert_eq!(cc.window(), 12 * MSS);
    }
}
