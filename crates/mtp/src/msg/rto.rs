//! The retransmission timeout of one destination, RFC 6298 style: srtt and rttvar from
//! acknowledgements of packets never retransmitted (Karn), doubled per timeout.

use crate::time::Nanos;

/// RTT estimate and RTO of a destination.
#[derive(Clone, Copy, Debug)]
pub struct RttEstimator {
    /// Smoothed RTT (None before the first sample).
    pub srtt: Option<Nanos>,
    /// RTT variation.
    pub rttvar: Nanos,
    rto: Nanos,
    backoff: u32,
    min: Nanos,
    max: Nanos,
}

impl RttEstimator {
    /// Before any sample: `initial` (RFC 6298 2.1), bounded by `min`..`max`.
    pub fn new(initial: Nanos, min: Nanos, max: Nanos) -> RttEstimator {
        RttEstimator {
            srtt: None,
            rttvar: 0,
            rto: initial.clamp(min, max),
            backoff: 0,
            min,
            max,
        }
    }

    /// A sample `r` (RFC 6298 2.2, 2.3: alpha 1/8, beta 1/4, K 4); ends any backoff.
    pub fn sample(&mut self, r: Nanos) {
        let r = r.max(1);
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                self.rttvar = (3 * self.rttvar + s.abs_diff(r)) / 4;
                self.srtt = Some((7 * s + r) / 8);
            }
        }
        let s = self.srtt.unwrap_or(r);
        // RFC 6298 2.4: the floor (there 1 s) is configured for a data center.
        self.rto = (s + (4 * self.rttvar).max(1)).clamp(self.min, self.max);
        self.backoff = 0;
    }

    /// A timeout fired: back off (RFC 6298 5.5).
    pub fn back_off(&mut self) {
        self.backoff = (self.backoff + 1).min(16);
    }

    /// The current RTO, backoff included.
    pub fn rto(&self) -> Nanos {
        self.rto.saturating_mul(1 << self.backoff).min(self.max)
    }

    /// The smoothed RTT, or the RTO before any sample (for the rate law and cut spacing).
    pub fn srtt_or_rto(&self) -> Nanos {
        self.srtt.unwrap_or(self.rto)
    }
}
