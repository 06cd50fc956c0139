//! The post-processor: payload placement, acknowledged-data accounting, RTT estimation,
//! congestion-control input, notifications and ACK generation.

use crate::cc::{CongestionControl, Policy};

use super::scoreboard;
use super::state::{PostState, ProtoState};
use super::summary::{Actions, HeaderSummary};

/// What the post-processor decided for one segment, for the caller to carry out on buffers,
/// timers and the control plane.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PostOutcome {
    /// Send an ACK now.
    pub ack_now: bool,
    /// Arm the delayed-ACK timer.
    pub arm_delack: bool,
    /// Restart (true) the retransmission timer, or stop it when nothing is outstanding.
    pub rto_restart: bool,
    /// Stop the retransmission timer: everything sent is acknowledged.
    pub rto_stop: bool,
    /// A fast retransmit began loss recovery (go-back-N or SACK).
    pub fast_retransmit: bool,
}

/// RFC 6298 2.2-2.3 (RFC 9293 MUST-18): folds an RTT sample into the estimate and
/// recomputes the RTO.
#[inline]
pub fn rtt_update(post: &mut PostState, sample_us: u32, rto_min_us: u32, rto_max_us: u32) {
    if post.srtt_us == 0 {
        post.srtt_us = sample_us;
        post.rttvar_us = sample_us / 2;
    } else {
        let err = post.srtt_us.abs_diff(sample_us);
        // RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R'|; SRTT = 7/8 SRTT + 1/8 R'.
        post.rttvar_us = post.rttvar_us - post.rttvar_us / 4 + err / 4;
        post.srtt_us = post.srtt_us - post.srtt_us / 8 + sample_us / 8;
    }
    // RTO = SRTT + max(G, 4 RTTVAR) with clock granularity G = 1 us; RFC 6298 2.4-2.5 bounds.
    // Saturating: a sample of over ~36 minutes (an ACK after a long outage) would overflow
    // 4 * RTTVAR in 32 bits; the RFC 6298 2.5 maximum bounds the result anyway.
    let rto = post
        .srtt_us
        .saturating_add(post.rttvar_us.saturating_mul(4).max(1));
    post.rto_us = rto.clamp(rto_min_us, rto_max_us);
}

/// When received data is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckRule {
    /// ACK once this many segments are unacknowledged (1: every segment).
    pub segments: u8,
    /// The MSS we announced: a segment longer than this is a receive-offload aggregate.
    pub rcv_mss: u32,
}

/// Processes one segment's summary after the protocol stage.
#[inline]
pub fn process(
    ps: &mut ProtoState,
    post: &mut PostState,
    cc: &mut Policy,
    s: &HeaderSummary,
    ack_rule: AckRule,
    rto_bounds_us: (u32, u32),
) -> PostOutcome {
    let mut out = PostOutcome::default();
    let mss = ps.mss as u32;
    if s.ecn_ce {
        post.cnt_ecnb = post.cnt_ecnb.wrapping_add(s.payload_len as u32);
    }
    if s.rtt_sample_us != 0 {
        rtt_update(post, s.rtt_sample_us, rto_bounds_us.0, rto_bounds_us.1);
    }
    if s.actions.contains(Actions::WAKE_TX) && s.tx_freed > 0
        || s.actions.contains(Actions::FIN_ACKED)
    {
        post.cnt_ackb = post.cnt_ackb.wrapping_add(s.tx_freed);
        cc.on_ack(s.ack, s.tx_freed, mss);
        ps.cwnd = cc.window();
        // RFC 6298 5.2-5.3: stop the timer when all is acknowledged, else restart it.
        if ps.snd_una == ps.snd_max {
            out.rto_stop = true;
        } else {
            out.rto_restart = true;
        }
    }
    if s.actions.contains(Actions::FAST_RETRANSMIT)
        && !scoreboard::in_recovery(ps)
        && cc.may_fast_retransmit(ps.snd_una)
    {
        post.cnt_fretx = post.cnt_fretx.wrapping_add(1);
        cc.on_fast_retransmit(ps.snd_max.diff(ps.snd_una).max(0) as u32, mss, ps.snd_max);
        ps.cwnd = cc.window();
        // RFC 6675 5 step 4 with SACK; else go-back-N from snd_una, as TAS and Laminar do.
        if !scoreboard::enter_recovery(ps) {
            ps.snd_nxt = ps.snd_una;
        }
        // Stop timing (Karn).
        ps.set(super::state::flags::RTT_TIMING, false);
        out.rto_restart = true;
        out.fast_retransmit = true;
    }
    if s.actions.contains(Actions::ACK_NOW) {
        out.ack_now = true;
    } else if s.actions.contains(Actions::ACK_DATA) {
        post.unacked_segments = post.unacked_segments.saturating_add(1);
        // RFC 9293 3.8.6.3 (SHLD-19): an ACK for at least every second full-sized segment;
        // a receive-offload aggregate (GRO/LRO) of more than one segment is acknowledged
        // at once, as Linux does.
        if post.unacked_segments >= ack_rule.segments || u32::from(s.payload_len) > ack_rule.rcv_mss
        {
            out.ack_now = true;
        } else {
            out.arm_delack = true;
        }
    }
    if out.ack_now {
        post.unacked_segments = 0;
    }
    out
}
