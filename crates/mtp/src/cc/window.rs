//! One (pathlet, TC) window and the laws that evolve it from feedback (mtp.txt 3.1.3):
//! `Ecn` marks drive DCTCP (alpha, the EWMA of the marked fraction per window of data, and
//! a cut by alpha/2 at most once per RTT), `Rate` drives RCP (window = rate x srtt).

use super::params::CcParams;
use crate::time::Nanos;

/// Which law a pathlet's feedback selected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Law {
    /// No feedback kind we act on yet: the initial window holds.
    Unknown,
    /// DCTCP-like, from `Ecn` feedback.
    Dctcp,
    /// RCP-like, from `Rate` feedback.
    Rcp,
}

/// A pathlet's window state (what `MtpStack::pathlets` reports).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    /// The law in force.
    pub law: Law,
    /// The congestion window, bytes.
    pub cwnd: u64,
    /// Bytes charged to this pathlet and not yet acknowledged.
    pub inflight: u64,
    /// Slow-start threshold, bytes.
    pub ssthresh: u64,
    /// DCTCP's alpha (marked fraction EWMA), 0..=1.
    pub alpha: f64,
    /// RCP's advertised rate, Mbit/s (0 when none).
    pub rate_mbps: u32,
    /// Window cuts so far.
    pub cuts: u64,
    acked_in_window: u64,
    marked_in_window: u64,
    last_cut: Option<Nanos>,
}

impl Window {
    /// A new window of `initial` bytes.
    pub fn new(initial: u64) -> Window {
        Window {
            law: Law::Unknown,
            cwnd: initial,
            inflight: 0,
            ssthresh: u64::MAX,
            alpha: 0.0,
            rate_mbps: 0,
            cuts: 0,
            acked_in_window: 0,
            marked_in_window: 0,
            last_cut: None,
        }
    }

    /// Whether `bytes` more may be charged (an idle pathlet always admits one packet, so a
    /// window below one packet cannot stall).
    pub fn has_room(&self, bytes: u64) -> bool {
        self.inflight == 0 || self.inflight + bytes <= self.cwnd
    }

    /// Whether it counts as congested for path exclusion.
    pub fn congested(&self, bytes: u64, p: &CcParams) -> bool {
        !self.has_room(bytes) || (self.law == Law::Dctcp && self.alpha > p.exclude_alpha)
    }

    /// DCTCP on an acknowledgement of `bytes` whose packet was `marked` (RFC 8257 3.3).
    pub fn on_ecn(
        &mut self,
        now: Nanos,
        bytes: u64,
        marked: bool,
        srtt: Nanos,
        mss: u64,
        p: &CcParams,
    ) {
        self.law = Law::Dctcp;
        self.acked_in_window += bytes;
        if marked {
            self.marked_in_window += bytes;
        }
        // RFC 8257 3.3: alpha is updated once per window of acknowledged data.
        if self.acked_in_window >= self.cwnd.max(mss) {
            let f = self.marked_in_window as f64 / self.acked_in_window as f64;
            let g = 1.0 / f64::from(1u32 << p.g_shift);
            self.alpha = ((1.0 - g) * self.alpha + g * f).clamp(0.0, 1.0);
            self.acked_in_window = 0;
            self.marked_in_window = 0;
        }
        if marked {
            let may_cut = self.last_cut.is_none_or(|t| now.saturating_sub(t) >= srtt);
            if may_cut {
                let cut = (self.cwnd as f64 * (1.0 - self.alpha / 2.0)) as u64;
                self.cwnd = cut.max(mss);
                self.ssthresh = self.cwnd;
                self.last_cut = Some(now);
                self.cuts += 1;
            }
        } else if self.cwnd < self.ssthresh {
            self.cwnd += bytes;
        } else {
            // +1 MSS per window of acknowledged bytes.
            self.cwnd += (mss * bytes).div_ceil(self.cwnd.max(1));
        }
        self.cwnd = self.cwnd.clamp(mss, p.max_cwnd);
    }

    /// RCP: the window is the advertised rate times the smoothed RTT, at least one MSS.
    pub fn on_rate(&mut self, rate_mbps: u32, srtt: Nanos, mss: u64, p: &CcParams) {
        self.law = Law::Rcp;
        self.rate_mbps = rate_mbps;
        // Mbit/s x ns = 1e6 bit/s x 1e-9 s = 1e-3 bit; / 8000 gives bytes.
        let w = u128::from(rate_mbps) * u128::from(srtt) / 8000;
        self.cwnd = (w.min(u128::from(p.max_cwnd)) as u64).max(mss);
    }

    /// Charges `bytes` sent.
    pub fn charge(&mut self, bytes: u64) {
        self.inflight += bytes;
    }

    /// Releases `bytes` acknowledged or lost.
    pub fn release(&mut self, bytes: u64) {
        self.inflight = self.inflight.saturating_sub(bytes);
    }
}
