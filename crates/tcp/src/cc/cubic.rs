//! CUBIC (RFC 9438) in per-RTT form. The window follows W_cubic(t) = C (t - K)^3 + W_max
//! after a congestion event (in segments, t in seconds), never below the Reno-friendly
//! estimate W_est. Slow start is standard (RFC 9438 4.10).

use super::newreno::Reno;
use super::{CcInput, CongestionControl};

/// RFC 9438 5: C = 0.4.
pub(super) const C: f64 = 0.4;
/// RFC 9438 5: β_cubic = 0.7.
pub(super) const BETA: f64 = 0.7;
/// RFC 9438 4.3: α_cubic = 3 (1 - β) / (1 + β).
pub(super) const ALPHA: f64 = 3.0 * (1.0 - BETA) / (1.0 + BETA);

/// CUBIC state. Windows in the cubic arithmetic are in segments, as in the RFC.
#[derive(Clone, Debug, PartialEq)]
pub struct Cubic {
    reno: Reno,
    /// W_max: the window before the last reduction, segments.
    w_max: f64,
    /// K: seconds from the epoch start until W_cubic reaches W_max.
    k: f64,
    /// Start of the current congestion-avoidance epoch, microseconds (None: not started).
    epoch_start_us: Option<u64>,
    /// W_est: the Reno-friendly estimate, segments.
    w_est: f64,
}

/// RFC 9438 eq. 1: W_cubic(t) = C (t - K)^3 + W_max.
pub(super) fn w_cubic(t: f64, k: f64, w_max: f64) -> f64 {
    C * (t - k).powi(3) + w_max
}

/// RFC 9438 eq. 2: K = cbrt((W_max - cwnd_epoch) / C).
pub(super) fn k_of(w_max: f64, cwnd_epoch: f64) -> f64 {
    ((w_max - cwnd_epoch).max(0.0) / C).cbrt()
}

impl Cubic {
    /// A connection starting at `cwnd` bytes.
    pub fn new(cwnd: u32, ssthresh: u32) -> Self {
        Cubic {
            reno: Reno::new(cwnd, ssthresh),
            w_max: 0.0,
            k: 0.0,
            epoch_start_us: None,
            w_est: 0.0,
        }
    }

    /// The slow-start threshold.
    pub fn ssthresh(&self) -> u32 {
        self.reno.ssthresh
    }

    /// W_max in segments.
    pub fn w_max(&self) -> f64 {
        self.w_max
    }

    /// K in seconds.
    pub fn k(&self) -> f64 {
        self.k
    }

    /// RFC 9438 4.6-4.7: a congestion event (loss or ECN echo).
    fn reduce(&mut self, i: &CcInput) {
        let mss = i.mss as f64;
        let cwnd = self.reno.cwnd as f64 / mss;
        // RFC 9438 4.7 fast convergence: a flow whose window stopped short of the previous
        // W_max releases bandwidth to newer flows.
        self.w_max = if cwnd < self.w_max {
            cwnd * (1.0 + BETA) / 2.0
        } else {
            cwnd
        };
        // RFC 9438 4.6: ssthresh = cwnd * β_cubic (at least 2 segments); cwnd = ssthresh.
        let ssthresh = ((self.reno.cwnd as f64 * BETA).round() as u32).max(2 * i.mss);
        self.reno.ssthresh = ssthresh;
        self.reno.cwnd = ssthresh;
        self.reno.acked_in_ca = 0;
        self.epoch_start_us = None;
    }

    /// RFC 9438 4.2-4.5: congestion avoidance for one interval.
    fn avoid(&mut self, i: &CcInput, acked: u32) {
        let mss = i.mss as f64;
        let cwnd = self.reno.cwnd as f64 / mss;
        let epoch = match self.epoch_start_us {
            Some(t) => t,
            None => {
                // RFC 9438 4.2: a new epoch; if cwnd is already above W_max, K = 0 and
                // W_max = cwnd. W_est starts at cwnd (4.3).
                self.epoch_start_us = Some(i.now_us);
                if cwnd >= self.w_max {
                    self.w_max = cwnd;
                }
                self.k = k_of(self.w_max, cwnd);
                self.w_est = cwnd;
                i.now_us
            }
        };
        let t = i.now_us.saturating_sub(epoch) as f64 / 1e6;
        let rtt = i.srtt_us as f64 / 1e6;
        let acked_segments = acked as f64 / mss;
        // RFC 9438 4.3: W_est += α_cubic * segments acked / cwnd; α_cubic becomes 1 once
        // W_est passes W_max.
        let alpha = if self.w_est >= self.w_max { 1.0 } else { ALPHA };
        self.w_est += alpha * acked_segments / cwnd;
        let cubic = w_cubic(t, self.k, self.w_max);
        let next = if cubic < self.w_est {
            // RFC 9438 4.3: the Reno-friendly region.
            self.w_est
        } else {
            // RFC 9438 4.4-4.5: grow toward W_cubic(t + RTT), the target clamped to
            // [cwnd, 1.5 cwnd], by (target - cwnd) / cwnd per segment acknowledged.
            let target = w_cubic(t + rtt, self.k, self.w_max).clamp(cwnd, 1.5 * cwnd);
            cwnd + (target - cwnd) * acked_segments / cwnd
        };
        let bytes = (next * mss).min(u32::MAX as f64) as u32;
        self.reno.cwnd = bytes.max(self.reno.cwnd);
    }
}

impl CongestionControl for Cubic {
    fn update(&mut self, i: &CcInput) {
        if i.timeouts > 0 {
            // RFC 9438 4.8: a timeout is a congestion event, then cwnd is the loss window
            // (RFC 5681) and slow start runs up to the new ssthresh.
            self.reduce(i);
            self.reno.cwnd = i.mss;
        } else if i.loss() || i.ecn_marked() {
            self.reduce(i);
        } else if !i.in_recovery {
            // RFC 9438 5.8 / RFC 7661: no growth beyond what the sender uses.
            let cap = i.growth_cap(self.reno.cwnd);
            if self.reno.cwnd >= cap {
                return;
            }
            let rest = self.reno.slow_start(i.counters.acked_bytes);
            if rest > 0 {
                self.avoid(i, rest);
            }
            self.reno.cwnd = self.reno.cwnd.min(cap);
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

    fn at(now_us: u64, acked: u32, srtt_us: u32) -> CcInput {
        CcInput {
            counters: CcCounters {
                acked_bytes: acked,
                max_flight: acked,
                ..Default::default()
            },
            srtt_us,
            flight: acked,
            mss: MSS,
            now_us,
            ..Default::default()
        }
    }

    #[test]
    fn rfc_constants_and_formulas() {
        assert!((ALPHA - 0.529_411_764_7).abs() < 1e-9, "3 * 0.3 / 1.7");
        // W_max 100, cwnd after the cut 70: K = cbrt(30 / 0.4) = cbrt(75) = 4.2172 s.
        let k = k_of(100.0, 70.0);
        assert!((k - 4.217_163_326_5).abs() < 1e-9);
        assert!((w_cubic(0.0, k, 100.0) - 70.0).abs() < 1e-9);
        assert!((w_cubic(k, k, 100.0) - 100.0).abs() < 1e-12);
        // One second past K: 100 + 0.4.
        assert!((w_cubic(k + 1.0, k, 100.0) - 100.4).abs() < 1e-9);
    }

    #[test]
    fn loss_multiplies_by_beta_and_sets_w_max_with_fast_convergence() {
        let mut cc = Cubic::new(100 * MSS, 50 * MSS);
        let mut loss = at(0, 0, 1000);
        loss.counters.fast_retransmits = 1;
        cc.update(&loss);
        assert_eq!((cc.window(), cc.ssthresh()), (70 * MSS, 70 * MSS));
        assert_eq!(cc.w_max(), 100.0);
        // A second loss below W_max: fast convergence, W_max = 70 * 1.7 / 2 = 59.5.
        cc.update(&loss);
        assert_eq!(cc.window(), 49 * MSS);
        assert!((cc.w_max() - 59.5).abs() < 1e-12);
    }

    #[test]
    fn concave_growth_toward_w_max_and_reno_friendly_floor() {
        let mut cc = Cubic::new(100 * MSS, 50 * MSS);
        let mut loss = at(0, 0, 100_000);
        loss.counters.fast_retransmits = 1;
        cc.update(&loss);
        // Epoch starts at the first avoidance interval: K = cbrt(30/0.4) = 4.2172 s.
        cc.update(&at(0, 70 * MSS, 100_000));
        assert!((cc.k() - k_of(100.0, 70.0)).abs() < 1e-12);
        // At t = 0 the target is W_cubic(0.1 s) = 70 + 0.4 (4.2172^3 - 4.1172^3) = 70.51;
        // one window acknowledged moves cwnd by (target - cwnd) * 70 / 70. W_est has grown
        // by α_cubic = 0.529 to 70.529, which is above W_cubic(0) = 70: Reno-friendly.
        let w = cc.window() as f64 / MSS as f64;
        assert!((w - (70.0 + ALPHA)).abs() < 1e-3, "{w}");
        // Near K the cubic curve is above the Reno estimate and cwnd approaches W_max.
        let t_k = (cc.k() * 1e6) as u64;
        cc.update(&at(t_k, cc.window(), 100_000));
        let w = cc.window() as f64 / MSS as f64;
        let target = w_cubic(cc.k() + 0.1, cc.k(), 100.0);
        assert!(w > 70.5 && w <= target + 1e-6, "{w} vs target {target}");
    }

    #[test]
    fn rfc9438_5_8_an_application_limited_flow_does_not_grow() {
        // Three segments in flight against a window of ten: no growth, no cut.
        let mut cc = Cubic::new(10 * MSS, 5 * MSS);
        cc.update(&at(0, 3 * MSS, 100_000));
        assert_eq!(cc.window(), 10 * MSS);
        // Slow start stops at twice the flight used (RFC 7661).
        let mut cc = Cubic::new(4 * MSS, u32::MAX);
        cc.update(&at(0, 3 * MSS, 100_000));
        assert_eq!(cc.window(), 6 * MSS);
    }
}
