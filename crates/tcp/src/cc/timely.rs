//! TIMELY (Mittal et al., "TIMELY: RTT-based Congestion Control for the Datacenter",
//! SIGCOMM 2015, Algorithm 1): a rate from the RTT and its gradient. Below T_low the rate
//! grows additively, above T_high it falls in proportion to how far the RTT is beyond it,
//! in between it follows the normalized gradient, with hyperactive increase (HAI) after
//! several non-positive gradients in a row.
//!
//! The paper updates per completion event; here the control plane updates once per RTT
//! with the latest RTT sample. The rate is what the flow scheduler enforces (it paces the
//! connection with its timing wheel, as TIMELY paces with NIC rate limiters). The window
//! stays as a cap of one SRTT at the rate, rate x SRTT: the pacer spreads the segments, the
//! window bounds what is in flight to what the rate allows per RTT. A looser cap let the
//! first RTTs' bursts (before the rate has reacted) build queue, whose RTT spike crashed
//! the rate: in the 4-sender deep-queue test (crates/sim/tests/tcp_congestion.rs), 2 x
//! rate x SRTT took 36.7 ms (peak queue 104 KB), 1.5 x 31.4 ms, 1 x 29.9 ms (45 KB).

use super::{CcInput, CongestionControl};

/// TIMELY's parameters (defaults: the paper's, for a 10 Gbps data center).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimelyParams {
    /// Below this RTT the rate only grows (additively).
    pub t_low_us: u32,
    /// Above this RTT the rate falls: rate *= 1 - beta (1 - T_high / RTT).
    pub t_high_us: u32,
    /// Additive increment δ, bits per second.
    pub delta_bps: f64,
    /// Multiplicative decrement factor β.
    pub beta: f64,
    /// EWMA weight α of a new RTT difference.
    pub ewma_alpha: f64,
    /// Non-positive gradients in a row before hyperactive increase (N = 5).
    pub hai_threshold: u32,
    /// Lowest rate, bits per second.
    pub min_rate_bps: f64,
    /// Highest rate, bits per second.
    pub max_rate_bps: f64,
}

impl Default for TimelyParams {
    fn default() -> Self {
        TimelyParams {
            t_low_us: 50,
            t_high_us: 500,
            delta_bps: 10e6,
            beta: 0.8,
            ewma_alpha: 0.875,
            hai_threshold: 5,
            min_rate_bps: 10e6,
            max_rate_bps: 100e9,
        }
    }
}

/// TIMELY state.
#[derive(Clone, Debug, PartialEq)]
pub struct Timely {
    p: TimelyParams,
    /// The rate, bits per second; 0 until the first RTT sample sets it from the window.
    rate: f64,
    prev_rtt_us: f64,
    /// EWMA of RTT differences, microseconds.
    rtt_diff_us: f64,
    /// The smallest RTT seen: the gradient's normalizer (the paper's minRTT).
    min_rtt_us: u32,
    /// Non-positive gradients in a row (HAI).
    negative_gradients: u32,
    cwnd: u32,
}

impl Timely {
    /// A connection starting with a window of `cwnd` bytes (its rate follows from the
    /// first RTT sample).
    pub fn new(cwnd: u32, params: TimelyParams) -> Self {
        Timely {
            p: params,
            rate: 0.0,
            prev_rtt_us: 0.0,
            rtt_diff_us: 0.0,
            min_rtt_us: 0,
            negative_gradients: 0,
            cwnd,
        }
    }

    /// The rate in bits per second (0 before the first RTT sample).
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Algorithm 1 for one new RTT sample.
    fn on_rtt(&mut self, new_rtt_us: u32) {
        let p = self.p;
        let new_rtt = new_rtt_us as f64;
        self.min_rtt_us = if self.min_rtt_us == 0 {
            new_rtt_us
        } else {
            self.min_rtt_us.min(new_rtt_us)
        };
        if self.prev_rtt_us == 0.0 {
            self.prev_rtt_us = new_rtt;
        }
        let new_rtt_diff = new_rtt - self.prev_rtt_us;
        self.prev_rtt_us = new_rtt;
        self.rtt_diff_us = (1.0 - p.ewma_alpha) * self.rtt_diff_us + p.ewma_alpha * new_rtt_diff;
        let gradient = self.rtt_diff_us / self.min_rtt_us.max(1) as f64;
        if new_rtt_us < p.t_low_us {
            self.rate += p.delta_bps;
            self.negative_gradients = 0;
        } else if new_rtt_us > p.t_high_us {
            self.rate *= 1.0 - p.beta * (1.0 - p.t_high_us as f64 / new_rtt);
            self.negative_gradients = 0;
        } else if gradient <= 0.0 {
            self.negative_gradients += 1;
            let n = if self.negative_gradients >= p.hai_threshold {
                5.0
            } else {
                1.0
            };
            self.rate += n * p.delta_bps;
        } else {
            self.rate *= 1.0 - p.beta * gradient;
            self.negative_gradients = 0;
        }
        self.rate = self.rate.clamp(p.min_rate_bps, p.max_rate_bps);
    }
}

impl CongestionControl for Timely {
    fn update(&mut self, i: &CcInput) {
        let srtt = if i.srtt_us != 0 {
            i.srtt_us
        } else {
            i.counters.rtt_last_us
        };
        if self.rate == 0.0 && srtt != 0 {
            // The first sample: the initial window's rate.
            self.rate = (self.cwnd as f64 * 8.0 * 1e6 / srtt as f64)
                .clamp(self.p.min_rate_bps, self.p.max_rate_bps);
        }
        if i.timeouts > 0 || i.loss() {
            // TIMELY leaves loss to the transport; halve the rate (as its T_high rule does
            // for an RTT of twice T_high at beta = 1) so a lossy path backs off.
            self.rate = (self.rate / 2.0).max(self.p.min_rate_bps);
        } else if i.counters.rtt_last_us != 0 && self.rate != 0.0 {
            self.on_rtt(i.counters.rtt_last_us);
        }
        if self.rate != 0.0 && srtt != 0 {
            // The scheduler paces to the rate; the window caps at rate x SRTT, at least
            // 2 MSS (see the module docs).
            let w = self.rate / 8.0 * srtt as f64 / 1e6;
            self.cwnd = (w.min(u32::MAX as f64) as u32).max(2 * i.mss);
        }
        if i.timeouts > 0 {
            // RFC 5681 3.1: whatever the policy, one segment after a timeout.
            self.cwnd = i.mss;
        }
    }

    fn window(&self) -> u32 {
        self.cwnd
    }

    fn rate_bps(&self) -> u64 {
        self.rate as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::CcCounters;

    const MSS: u32 = 1000;

    fn sample(rtt_us: u32) -> CcInput {
        CcInput {
            counters: CcCounters {
                acked_bytes: 10 * MSS,
                rtt_samples: 1,
                rtt_last_us: rtt_us,
                rtt_min_us: rtt_us,
                ..Default::default()
            },
            srtt_us: rtt_us,
            mss: MSS,
            ..Default::default()
        }
    }

    fn started(rtt_us: u32) -> Timely {
        // 10 segments over the first RTT set the rate: 10 * 1000 * 8 bits / 40 us = 2 Gbps.
        let mut t = Timely::new(10 * MSS, TimelyParams::default());
        t.update(&sample(rtt_us));
        t
    }

    #[test]
    fn below_t_low_additive_increase() {
        let t = started(40);
        // 2 Gbps from the window, then + δ (40 us < T_low = 50 us).
        assert_eq!(t.rate(), 2e9 + 10e6);
        // The window capping it: rate x SRTT = 2.01e9 / 8 * 40e-6 = 10050 bytes.
        assert_eq!(t.window(), 10_050);
        assert_eq!(t.rate_bps(), 2_010_000_000);
    }

    #[test]
    fn above_t_high_multiplicative_decrease() {
        let mut t = started(40);
        let r0 = t.rate();
        t.update(&sample(1000));
        // rate *= 1 - 0.8 (1 - 500/1000) = 0.6.
        assert!((t.rate() - r0 * 0.6).abs() < 1.0);
    }

    #[test]
    fn gradient_decrease_and_hai() {
        let mut t = started(40);
        let r0 = t.rate();
        // 100 us after 40: new diff 60, EWMA 0.875 * 60 = 52.5, normalized by minRTT 40:
        // 1.3125; rate *= 1 - 0.8 * 1.3125 < 0 -> clamped to the minimum rate.
        t.update(&sample(100));
        assert_eq!(t.rate(), 10e6);
        // Back to a rising-free regime: 5 steady samples in [T_low, T_high] with a negative
        // or zero gradient: +δ four times, then +5δ (HAI).
        let mut t = started(40);
        t.update(&sample(60)); // diff +20: gradient 0.875*20/40 = 0.4375 -> rate *= 0.65
        let r1 = t.rate();
        assert!((r1 - r0 * (1.0 - 0.8 * 0.4375)).abs() < 1.0);
        t.update(&sample(60)); // diff 0: ewma 0.125 * 17.5 = 2.1875 > 0 -> decrease
        let r2 = t.rate();
        assert!((r2 - r1 * (1.0 - 0.8 * 2.1875 / 40.0)).abs() < 1.0);
        t.update(&sample(55)); // diff -5: ewma 0.125*2.1875 - 0.875*5 < 0 -> +δ
        assert!((t.rate() - (r2 + 10e6)).abs() < 1.0);
        for _ in 0..3 {
            t.update(&sample(55)); // ewma stays <= 0: +δ (2nd..4th in a row)
        }
        let r3 = t.rate();
        assert!((r3 - (r2 + 40e6)).abs() < 1.0);
        t.update(&sample(55)); // 5th in a row: HAI, +5δ
        assert!((t.rate() - (r3 + 50e6)).abs() < 1.0);
    }

    #[test]
    fn timeout_falls_to_one_segment() {
        let mut t = started(40);
        t.update(&CcInput {
            timeouts: 1,
            ..sample(40)
        });
        assert_eq!(t.window(), MSS);
    }
}
