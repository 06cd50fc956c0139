//! Congestion control, run by the control plane (TAS, FlexTOE appendix D, Laminar 4.2.1).
//!
//! The data-path only counts and enforces: per connection, the post-processor counts
//! acknowledged bytes, ECN-echoed bytes, duplicate ACKs, fast retransmits and RTT samples
//! ([`CcCounters`]). About once per RTT the control plane takes those counters (a snapshot
//! that resets them: the explicit message between the planes), runs the connection's
//! [`Policy`] over them, and programs the result back: a congestion window, which the
//! transmit stage enforces, and for rate-based policies a rate, which the flow scheduler
//! enforces with its timing wheel (datapath/scheduler.rs). Policies are an enum, so no call is virtual; a new policy is a new variant.

mod bbr;
mod cubic;
mod dctcp;
mod newreno;
mod timely;

pub use bbr::{Bbr, Mode as BbrMode};
pub use cubic::Cubic;
pub use dctcp::Dctcp;
pub use newreno::NewReno;
pub use timely::{Timely, TimelyParams};

use core::fmt;
use core::str::FromStr;

use sluice_wire::tcp::SeqNumber;

/// The congestion-control algorithms a connection can run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// DCTCP (RFC 8257): ECN-fraction window scaling; the default, as in TAS and Laminar.
    #[default]
    Dctcp,
    /// TIMELY (Mittal et al., SIGCOMM 2015): a rate from the RTT gradient.
    Timely,
    /// NewReno (RFC 5681, RFC 6582).
    NewReno,
    /// CUBIC (RFC 9438).
    Cubic,
    /// BBR v1 (draft-cardwell-iccrg-bbr-congestion-control-00): a model of the path's
    /// bandwidth and propagation time, not loss, sets the rate.
    Bbr,
}

impl Algorithm {
    /// Every algorithm, in a fixed order.
    pub const ALL: [Algorithm; 5] = [
        Algorithm::Dctcp,
        Algorithm::Timely,
        Algorithm::NewReno,
        Algorithm::Cubic,
        Algorithm::Bbr,
    ];

    /// The name Linux's TCP_CONGESTION uses for it ("reno" for NewReno).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Dctcp => "dctcp",
            Algorithm::Timely => "timely",
            Algorithm::NewReno => "reno",
            Algorithm::Cubic => "cubic",
            Algorithm::Bbr => "bbr",
        }
    }

    /// Whether the algorithm asks for ECN (RFC 3168) in the handshake. Only DCTCP needs
    /// it; the others still react to ECN echoes (RFC 3168 6.1.2) if the peer negotiated it.
    pub fn ecn_capable(self) -> bool {
        matches!(self, Algorithm::Dctcp)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A congestion-control name that maps to no [`Algorithm`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownAlgorithm;

impl fmt::Display for UnknownAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("unknown congestion control (dctcp, timely, reno/newreno, cubic, bbr)")
    }
}

impl std::error::Error for UnknownAlgorithm {}

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;

    /// Case-insensitive; a trailing NUL padding (as a TCP_CONGESTION buffer has) is ignored.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim_end_matches('\0').trim();
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s))
            .or_else(|| {
                s.eq_ignore_ascii_case("newreno")
                    .then_some(Algorithm::NewReno)
            })
            .ok_or(UnknownAlgorithm)
    }
}

/// What the data-path counted for one connection since the control plane last asked: the
/// snapshot message from the post-processor, which owns the counters, to the control plane.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CcCounters {
    /// Bytes newly acknowledged.
    pub acked_bytes: u32,
    /// Of those, bytes acknowledged by ACKs carrying ECE (RFC 8257 3.3 DCTCP.BytesMarked).
    pub ecn_bytes: u32,
    /// Duplicate ACKs (RFC 5681 2).
    pub dupacks: u32,
    /// Fast retransmits started (at most one per window, RFC 6582 3.2 step 1).
    pub fast_retransmits: u32,
    /// RTT samples taken.
    pub rtt_samples: u32,
    /// The latest RTT sample in microseconds (0: none this interval).
    pub rtt_last_us: u32,
    /// The smallest RTT sample of the interval in microseconds (0: none).
    pub rtt_min_us: u32,
    /// The largest flight (bytes outstanding) an ACK of the interval found: how much of the
    /// window the sender used (RFC 7661).
    pub max_flight: u32,
}

/// Everything a policy sees in one control iteration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CcInput {
    /// The data-path's counters for the interval.
    pub counters: CcCounters,
    /// Retransmission timeouts since the last iteration (the control plane's own event).
    pub timeouts: u32,
    /// Smoothed RTT in microseconds (RFC 6298), 0 before the first sample.
    pub srtt_us: u32,
    /// Bytes outstanding (snd_max - snd_una): RFC 5681 FlightSize.
    pub flight: u32,
    /// Sender MSS.
    pub mss: u32,
    /// Oldest unacknowledged sequence number at the iteration (RFC 9293 SND.UNA).
    pub snd_una: SeqNumber,
    /// Highest sequence number sent at the iteration (the end of the data in flight).
    pub snd_max: SeqNumber,
    /// A fast-retransmit recovery is under way (RFC 6582): the window does not grow.
    pub in_recovery: bool,
    /// The time of the iteration in microseconds.
    pub now_us: u64,
    /// Bytes the SACK scoreboard reports received above snd_una (RFC 6675): with the
    /// acknowledged bytes, what was delivered (BBR's delivery rate).
    pub sacked: u32,
}

impl CcInput {
    /// Whether a loss was detected this interval (a timeout is reported separately).
    pub fn loss(&self) -> bool {
        self.counters.fast_retransmits > 0
    }

    /// Whether ECN echoes arrived this interval.
    pub fn ecn_marked(&self) -> bool {
        self.counters.ecn_bytes > 0
    }

    /// The most a window that was `cwnd` before this interval's growth may grow to. RFC 7661
    /// (and RFC 5681 3.1, "only when cwnd-limited"): a window the sender did not fill is
    /// not validated by the ACKs, so growth stops at twice the largest flight seen (what
    /// slow start reaches from a full window; Linux's tcp_is_cwnd_limited rule); a window
    /// already above that is kept, not cut.
    pub fn growth_cap(&self, cwnd: u32) -> u32 {
        self.counters.max_flight.saturating_mul(2).max(cwnd)
    }
}

/// A congestion-control policy, run by the control plane once per control iteration.
pub trait CongestionControl {
    /// One control iteration over the interval's counters.
    fn update(&mut self, input: &CcInput);
    /// The congestion window to enforce, in bytes.
    fn window(&self) -> u32;
    /// The sending rate to enforce in bits per second, for rate-based policies (0: none).
    fn rate_bps(&self) -> u64 {
        0
    }
}

/// The policies a connection can run.
#[derive(Clone, Debug, PartialEq)]
pub enum Policy {
    /// RFC 8257 DCTCP.
    Dctcp(Dctcp),
    /// TIMELY.
    Timely(Timely),
    /// RFC 5681 / RFC 6582 NewReno.
    NewReno(NewReno),
    /// RFC 9438 CUBIC.
    Cubic(Cubic),
    /// BBR v1.
    Bbr(Bbr),
}

impl Policy {
    /// A new connection's policy: the initial window is 10 segments (RFC 6928).
    pub fn new(algorithm: Algorithm, mss: u32) -> Self {
        Self::with_window(algorithm, mss, 10 * mss, u32::MAX)
    }

    /// A policy taking over a connection mid-flight at `cwnd` and `ssthresh` (a change of
    /// algorithm through the API keeps the window the connection has).
    pub fn with_window(algorithm: Algorithm, mss: u32, cwnd: u32, ssthresh: u32) -> Self {
        let cwnd = cwnd.max(mss);
        match algorithm {
            Algorithm::Dctcp => Policy::Dctcp(Dctcp::new(cwnd, ssthresh)),
            Algorithm::Timely => Policy::Timely(Timely::new(cwnd, TimelyParams::default())),
            Algorithm::NewReno => Policy::NewReno(NewReno::new(cwnd, ssthresh)),
            Algorithm::Cubic => Policy::Cubic(Cubic::new(cwnd, ssthresh)),
            Algorithm::Bbr => Policy::Bbr(Bbr::new(cwnd, mss)),
        }
    }

    /// The default policy for a new connection with the given MSS.
    pub fn new_default(mss: u32) -> Self {
        Self::new(Algorithm::default(), mss)
    }

    /// Which algorithm this is.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            Policy::Dctcp(_) => Algorithm::Dctcp,
            Policy::Timely(_) => Algorithm::Timely,
            Policy::NewReno(_) => Algorithm::NewReno,
            Policy::Cubic(_) => Algorithm::Cubic,
            Policy::Bbr(_) => Algorithm::Bbr,
        }
    }

    /// The slow-start threshold in bytes (u32::MAX before the first congestion event; TIMELY
    /// has none).
    pub fn ssthresh(&self) -> u32 {
        match self {
            Policy::Dctcp(p) => p.ssthresh(),
            Policy::Timely(_) => u32::MAX,
            Policy::NewReno(p) => p.ssthresh(),
            Policy::Cubic(p) => p.ssthresh(),
            Policy::Bbr(p) => p.ssthresh(),
        }
    }
}

impl CongestionControl for Policy {
    #[inline]
    fn update(&mut self, input: &CcInput) {
        match self {
            Policy::Dctcp(p) => p.update(input),
            Policy::Timely(p) => p.update(input),
            Policy::NewReno(p) => p.update(input),
            Policy::Cubic(p) => p.update(input),
            Policy::Bbr(p) => p.update(input),
        }
    }
    #[inline]
    fn window(&self) -> u32 {
        match self {
            Policy::Dctcp(p) => p.window(),
            Policy::Timely(p) => p.window(),
            Policy::NewReno(p) => p.window(),
            Policy::Cubic(p) => p.window(),
            Policy::Bbr(p) => p.window(),
        }
    }
    #[inline]
    fn rate_bps(&self) -> u64 {
        match self {
            Policy::Dctcp(p) => p.rate_bps(),
            Policy::Timely(p) => p.rate_bps(),
            Policy::NewReno(p) => p.rate_bps(),
            Policy::Cubic(p) => p.rate_bps(),
            Policy::Bbr(p) => p.rate_bps(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_both_ways() {
        for a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>(), Ok(a));
            assert_eq!(Policy::new(a, 1000).algorithm(), a);
        }
        assert_eq!("NewReno".parse(), Ok(Algorithm::NewReno));
        assert_eq!("DCTCP".parse(), Ok(Algorithm::Dctcp));
        assert_eq!("cubic\0\0\0\0".parse(), Ok(Algorithm::Cubic));
        assert_eq!("BBR".parse(), Ok(Algorithm::Bbr));
        assert_eq!("bbr2".parse::<Algorithm>(), Err(UnknownAlgorithm));
        assert_eq!(Algorithm::default(), Algorithm::Dctcp);
        assert!(Algorithm::Dctcp.ecn_capable() && !Algorithm::Cubic.ecn_capable());
    }
}
