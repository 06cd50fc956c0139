//! Congestion control: a trait for policies and the policies themselves.
//!
//! The data-path calls the policy through [`Policy`], an enum, so the hot path makes no
//! virtual call; a new policy is a new variant. The policy's output, the congestion window,
//! is programmed into the protocol stage, which enforces it.

mod newreno;

pub use newreno::NewReno;

use sluice_wire::tcp::SeqNumber;

/// What a congestion-control policy is told and what it decides.
pub trait CongestionControl {
    /// New data was cumulatively acknowledged: `acked` bytes, up to `ack`.
    fn on_ack(&mut self, ack: SeqNumber, acked: u32, mss: u32);
    /// Three duplicate ACKs: a fast retransmit starts; `flight` bytes were outstanding and
    /// `snd_max` is the highest sequence sent.
    fn on_fast_retransmit(&mut self, flight: u32, mss: u32, snd_max: SeqNumber);
    /// The retransmission timer expired with `flight` bytes outstanding.
    fn on_timeout(&mut self, flight: u32, mss: u32);
    /// The congestion window in bytes.
    fn window(&self) -> u32;
    /// Whether a fast retransmit may start now (not already recovering this window).
    fn may_fast_retransmit(&self, snd_una: SeqNumber) -> bool;
}

/// The policies a connection can run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Policy {
    /// RFC 5681 / RFC 6582 NewReno.
    NewReno(NewReno),
}

impl Policy {
    /// The default policy for a new connection with the given MSS.
    pub fn new_default(mss: u32) -> Self {
        Policy::NewReno(NewReno::new(mss))
    }
}

impl CongestionControl for Policy {
    #[inline]
    fn on_ack(&mut self, ack: SeqNumber, acked: u32, mss: u32) {
        match self {
            Policy::NewReno(p) => p.on_ack(ack, acked, mss),
        }
    }
    #[inline]
    fn on_fast_retransmit(&mut self, flight: u32, mss: u32, snd_max: SeqNumber) {
        match self {
            Policy::NewReno(p) => p.on_fast_retransmit(flight, mss, snd_max),
        }
    }
    #[inline]
    fn on_timeout(&mut self, flight: u32, mss: u32) {
        match self {
            Policy::NewReno(p) => p.on_timeout(flight, mss),
        }
    }
    #[inline]
    fn window(&self) -> u32 {
        match self {
            Policy::NewReno(p) => p.window(),
        }
    }
    #[inline]
    fn may_fast_retransmit(&self, snd_una: SeqNumber) -> bool {
        match self {
            Policy::NewReno(p) => p.may_fast_retransmit(snd_una),
        }
    }
}
