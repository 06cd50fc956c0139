//! A pathlet (mtp.txt 3.1.3): the resource an egress port is to MTP senders, its id, and the
//! feedback the device appends for it, including RCP's explicit rate.

use std::time::Duration;

use sluice_mtp::wire::PathletId;

/// What feedback a pathlet gives MTP data packets as they are enqueued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeedbackPolicy {
    /// `Ecn`: 1 when the egress queue holds more than `k_bytes` as the packet is enqueued,
    /// else 0 (the DCTCP-like law's input).
    Ecn {
        /// The marking threshold K in bytes.
        k_bytes: usize,
    },
    /// `Rate`: the port's RCP fair rate in Mbit/s (the RCP-like law's input).
    Rate,
    /// `QueueBytes`: the egress queue's bytes as the packet is enqueued.
    QueueBytes,
}

/// One egress port's pathlet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pathlet {
    /// The id senders key their windows by.
    pub id: PathletId,
    /// The traffic class feedback is tagged with; None: the packet's own.
    pub tc: Option<u8>,
    /// What feedback it gives.
    pub feedback: FeedbackPolicy,
}

impl Pathlet {
    /// A pathlet with ECN feedback at `k_bytes`, tagged with the packet's TC.
    pub fn ecn(id: PathletId, k_bytes: usize) -> Pathlet {
        Pathlet {
            id,
            tc: None,
            feedback: FeedbackPolicy::Ecn { k_bytes },
        }
    }

    /// A pathlet with RCP rate feedback, tagged with the packet's TC.
    pub fn rate(id: PathletId) -> Pathlet {
        Pathlet {
            id,
            tc: None,
            feedback: FeedbackPolicy::Rate,
        }
    }
}

/// RCP's parameters (Dukkipati et al., "Processor Sharing Flows in the Internet", IWQoS
/// 2005, equation 1): gains and the round-trip time the rate is computed for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RcpParams {
    /// Gain on spare capacity (the paper's alpha, 0.1 for stability).
    pub alpha: f64,
    /// Gain on draining the queue (the paper's beta, 1).
    pub beta: f64,
    /// The average round-trip time d0; the control interval T is min(d0, ...) = d0.
    pub rtt: Duration,
}

impl Default for RcpParams {
    fn default() -> Self {
        RcpParams {
            alpha: 0.1,
            beta: 1.0,
            rtt: Duration::from_micros(20),
        }
    }
}

/// One port's RCP rate: R updated once per control interval from the arrival rate y and
/// the queue q measured over it:
///
/// R(t) = R(t - T) * [1 + (T/d0) * (alpha * (C - y(t)) - beta * q(t)/d0) / C]
///
/// clamped to [C/1000, C] (RCP's rate never exceeds the link, and a floor keeps a
/// multiplicative law from sticking at zero).
#[derive(Clone, Copy, Debug)]
pub struct RcpRate {
    /// The current rate in bit/s (None until the capacity is known).
    rate_bps: Option<f64>,
    /// Bytes that arrived since `since`.
    arrived: u64,
    /// Start of the current control interval.
    since: Duration,
}

impl Default for RcpRate {
    fn default() -> Self {
        RcpRate {
            rate_bps: None,
            arrived: 0,
            since: Duration::ZERO,
        }
    }
}

impl RcpRate {
    /// Counts a frame of `len` bytes arriving for the port at `now`, and ends the control
    /// interval when it is over, with the queue at `queued_bytes` and line rate
    /// `capacity_bps` (0: unlimited, nothing to compute).
    pub fn arrive(
        &mut self,
        now: Duration,
        len: usize,
        queued_bytes: usize,
        capacity_bps: u64,
        p: &RcpParams,
    ) {
        self.arrived = self.arrived.saturating_add(len as u64);
        if capacity_bps == 0 {
            return;
        }
        let c = capacity_bps as f64;
        let Some(r) = self.rate_bps else {
            // Start at the line rate (RCP's initial rate for a lone flow).
            self.rate_bps = Some(c);
            self.since = now;
            self.arrived = 0;
            return;
        };
        let elapsed = now.saturating_sub(self.since);
        let d0 = p.rtt.as_secs_f64().max(1e-9);
        if elapsed < p.rtt {
            return;
        }
        let t = elapsed.as_secs_f64();
        let y = self.arrived as f64 * 8.0 / t;
        let q = queued_bytes as f64 * 8.0;
        // T/d0 is capped at 1 so a long idle spell does not jump the rate in one step.
        let gain = (t / d0).min(1.0);
        let next = r * (1.0 + gain * (p.alpha * (c - y) - p.beta * q / d0) / c);
        self.rate_bps = Some(next.clamp(c / 1000.0, c));
        self.since = now;
        self.arrived = 0;
    }

    /// The rate in Mbit/s for the feedback TLV (u32::MAX when not yet known or unlimited).
    pub fn mbps(&self) -> u32 {
        self.rate_bps.map_or(u32::MAX, |r| {
            (r / 1e6).round().clamp(1.0, f64::from(u32::MAX)) as u32
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rcp_falls_under_overload_and_recovers_when_idle() {
        let p = RcpParams::default();
        let c = 10_000_000_000u64; // 10 Gbit/s: 25 KB per 20 us.
        let mut r = RcpRate::default();
        r.arrive(Duration::ZERO, 1500, 0, c, &p);
        assert_eq!(r.mbps(), 10_000);
        // Twice the capacity arrives with a growing queue: the rate falls.
        let mut now = Duration::ZERO;
        for i in 1..=10u64 {
            now = Duration::from_micros(20 * i);
            r.arrived = 50_000;
            r.arrive(now, 0, 25_000 * i as usize, c, &p);
        }
        let low = r.mbps();
        assert!(low < 5_000, "rate {low}");
        // Idle, empty queue: it climbs back towards C, never above.
        for i in 1..=200u64 {
            r.arrive(now + Duration::from_micros(20 * i), 0, 0, c, &p);
        }
        assert!(r.mbps() > low && r.mbps() <= 10_000, "rate {}", r.mbps());
    }
}
