//! The post-processor: payload placement, acknowledged-data accounting, RTT estimation,
//! congestion-control counters, ECN echo, notifications and ACK generation.
//!
//! Congestion control only counts here; the control plane runs the policy over the counters
//! about once per RTT and programs the window back (see `crate::control::congestion`).

use sluice_wire::tcp::{SeqNumber, TcpFlags};

use crate::cc::CcCounters;

use super::ecn;
use super::scoreboard;
use super::state::{post_flags, PostCold, PostState, ProtoState, RecoveryState};
use super::summary::{Actions, HeaderSummary};

/// What the post-processor decided for one segment, for the caller to carry out on buffers,
/// timers and the control plane.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PostOutcome {
    /// Send an ACK now.
    pub ack_now: bool,
    /// Arm the delayed-ACK timer.
    pub arm_delack: bool,
    /// Restart (true) the retransmission timer, or stop it when nothing is outstanding.
    pub rto_restart: bool,
    /// Stop the retransmission timer: everything sent is acknowledged.
    pub rto_stop: bool,
    /// A fast retransmit began loss recovery (go-back-N or SACK): the control plane reacts
    /// now rather than at the end of the interval.
    pub fast_retransmit: bool,
    /// The ACK goes before the next segment is taken, not at the end of the receive
    /// burst: out-of-order data touched as many intervals since the last ACK as one ACK's
    /// SACK blocks can report, it stands for `ACK_SEGMENTS_MAX` segments, or it is a
    /// duplicate ACK for a sender without SACK.
    pub ack_at_once: bool,
}

/// The congestion-control counters since the last call, which resets them: the message
/// from the post-processor, which owns them, to the control plane's policy.
#[inline]
pub(crate) fn take_cc_counters(post: &mut PostState, cold: &mut PostCold) -> CcCounters {
    let c = CcCounters {
        acked_bytes: post.cnt_ackb,
        ecn_bytes: cold.cnt_ecnb,
        dupacks: cold.cnt_dupack.into(),
        fast_retransmits: cold.cnt_fretx.into(),
        rtt_samples: post.cnt_rtt.into(),
        rtt_last_us: post.rtt_last_us,
        rtt_min_us: post.rtt_min_us,
        max_flight: post.max_flight,
    };
    post.max_flight = 0;
    post.cnt_ackb = 0;
    cold.cnt_ecnb = 0;
    cold.cnt_dupack = 0;
    cold.cnt_fretx = 0;
    post.cnt_rtt = 0;
    post.rtt_last_us = 0;
    post.rtt_min_us = 0;
    c
}

/// RFC 6582 3.2 step 1: no new fast retransmit while the previous recovery's data is
/// unacknowledged.
#[inline]
fn may_fast_retransmit(post: &PostState, cold: &PostCold, snd_una: SeqNumber) -> bool {
    !post.has(post_flags::IN_RECOVERY) || snd_una.seq_ge(cold.recover)
}

/// A fast retransmit: loss recovery begins unless one runs (RFC 6582 3.2 step 1). Returns
/// whether it began; the caller restarts the retransmission timer and tells congestion
/// control.
pub(crate) fn begin_recovery(
    ps: &mut ProtoState,
    rec: &mut RecoveryState,
    post: &mut PostState,
    cold: &mut PostCold,
) -> bool {
    if scoreboard::in_recovery(ps) || !may_fast_retransmit(post, cold, ps.snd_una) {
        return false;
    }
    cold.cnt_fretx = cold.cnt_fretx.saturating_add(1);
    cold.total_fretx = cold.total_fretx.wrapping_add(1);
    post.set(post_flags::IN_RECOVERY, true);
    cold.recover = ps.snd_max;
    // RFC 6675 5 step 4 with SACK; else go-back-N from snd_una, as TAS and Laminar do.
    if !scoreboard::enter_recovery(ps, rec) {
        ps.snd_nxt = ps.snd_una;
    }
    // Stop timing (Karn).
    ps.set(super::state::flags::RTT_TIMING, false);
    true
}

/// RFC 6298 2.2-2.3 (RFC 9293 MUST-18): folds an RTT sample into the estimate, from which
/// [`PostState::rto_us`] derives the RTO.
#[inline]
pub(crate) fn rtt_update(post: &mut PostState, sample_us: u32) {
    if post.srtt_us == 0 {
        post.srtt_us = sample_us;
        post.rttvar_us = sample_us / 2;
    } else {
        let err = post.srtt_us.abs_diff(sample_us);
        // RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R'|; SRTT = 7/8 SRTT + 1/8 R'.
        post.rttvar_us = post.rttvar_us - post.rttvar_us / 4 + err / 4;
        post.srtt_us = post.srtt_us - post.srtt_us / 8 + sample_us / 8;
    }
}

/// When received data is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AckRule {
    /// ACK once this many segments are unacknowledged (1: every segment).
    pub segments: u8,
    /// The MSS we announced: a segment longer than this is a receive-offload aggregate.
    pub rcv_mss: u32,
}

/// Segments one ACK may stand for while it waits for the end of their receive burst:
/// past it the ACK goes at once. 44 full segments are what a 64 KB GRO aggregate holds,
/// which Linux acknowledges with one ACK.
pub(crate) const ACK_SEGMENTS_MAX: u8 = 44;

/// RFC 8257 3.2 (Figure 1): when a segment changes a DCTCP receiver's CE state while an
/// ACK is delayed, the segments before it are acknowledged first, with the old ECE, so
/// the sender counts exactly the marked bytes. Returns that ACK, to send before
/// [`process`] takes the segment (and flips ECE).
#[inline]
pub(crate) fn ack_before_ce_change(
    ps: &ProtoState,
    post: &PostState,
    s: &HeaderSummary,
) -> Option<super::tx::AckFields> {
    (post.unacked_segments > 0 && ecn::dctcp_ce_change(ps, s)).then_some(super::tx::AckFields {
        rcv_nxt: post.delack_rcv_nxt,
        rx_avail: post.delack_rx_avail,
    })
}

/// Processes one segment's summary after the protocol stage.
#[inline]
pub(crate) fn process(
    ps: &mut ProtoState,
    rec: &mut RecoveryState,
    post: &mut PostState,
    cold: &mut PostCold,
    s: &HeaderSummary,
    ack_rule: AckRule,
) -> PostOutcome {
    let mut out = PostOutcome::default();
    let ecn_ack_now = ecn::on_receive(ps, s);
    if s.rtt_sample_us != 0 {
        rtt_update(post, s.rtt_sample_us);
        post.rtt_last_us = s.rtt_sample_us;
        post.rtt_min_us = match post.rtt_min_us {
            0 => s.rtt_sample_us,
            m => m.min(s.rtt_sample_us),
        };
        post.cnt_rtt = post.cnt_rtt.saturating_add(1);
    }
    if s.flags.contains(TcpFlags::ACK) {
        // RFC 7661: what the sender had outstanding when this ACK came back (snd_max is as
        // the batch found it; sending happens after the receive batch).
        let flight = ps.snd_max.diff(s.ack).max(0) as u32 + s.tx_freed;
        post.max_flight = post.max_flight.max(flight);
    }
    if s.actions.contains(Actions::DUPACK) {
        cold.cnt_dupack = cold.cnt_dupack.saturating_add(1);
    }
    if s.actions.contains(Actions::WAKE_TX) && s.tx_freed > 0
        || s.actions.contains(Actions::FIN_ACKED)
    {
        post.cnt_ackb = post.cnt_ackb.saturating_add(s.tx_freed);
        let marked = ecn::marked_bytes(ps, s);
        if marked > 0 {
            // Only ACKs that echo ECE count here: the cold row stays untouched otherwise.
            cold.cnt_ecnb = cold.cnt_ecnb.saturating_add(marked);
        }
        if post.has(post_flags::IN_RECOVERY) && ps.snd_una.seq_ge(cold.recover) {
            // RFC 6582 3.2 step 3: a full acknowledgment ends the recovery.
            post.set(post_flags::IN_RECOVERY, false);
        }
        // RFC 6298 5.2-5.3: stop the timer when all is acknowledged, else restart it.
        if ps.snd_una == ps.snd_max {
            out.rto_stop = true;
        } else {
            out.rto_restart = true;
        }
    }
    if s.actions.contains(Actions::FAST_RETRANSMIT) && begin_recovery(ps, rec, post, cold) {
        out.rto_restart = true;
        out.fast_retransmit = true;
    }
    let ack_now = s.actions.contains(Actions::ACK_NOW);
    if !(ack_now || ecn_ack_now || s.actions.contains(Actions::ACK_DATA)) {
        return out;
    }
    if s.actions.contains(Actions::NEW_SACK_BLOCK) {
        post.sack_news = post.sack_news.saturating_add(1);
    }
    // The segment is unacknowledged until an ACK leaves (`Stack::ack_sent` resets the
    // count), and the ACK owed for it acknowledges the state it left.
    post.unacked_segments = post.unacked_segments.saturating_add(1);
    post.delack_rcv_nxt = s.ack_rcv_nxt;
    post.delack_rx_avail = s.ack_rx_avail;
    let sack = ps.has(super::state::flags::SACK);
    let out_of_order = s.payload_len > 0 && s.seq.seq_gt(s.ack_rcv_nxt);
    if sack && sack_news_fill_an_ack(ps, post) {
        // RFC 2018 4: every block must be reported; one more would push one out unseen.
        out.ack_now = true;
        out.ack_at_once = true;
    } else if post.unacked_segments >= ACK_SEGMENTS_MAX {
        out.ack_now = true;
        out.ack_at_once = true;
    } else if ecn_ack_now {
        out.ack_now = true;
    } else if ack_now {
        // RFC 5681 4.2: out-of-order data, a filled gap, a duplicate. A sender without
        // SACK counts the duplicate ACKs (RFC 5681 3.2), so without SACK each
        // out-of-order segment gets its own; with SACK the burst's one ACK reports every
        // interval its segments touched (see `sack_news_fill_an_ack`).
        out.ack_now = true;
        out.ack_at_once = out_of_order && !sack;
    } else if post.unacked_segments >= ack_rule.segments
        || u32::from(s.payload_len) > ack_rule.rcv_mss
    {
        // RFC 9293 3.8.6.3 (SHLD-19): an ACK for at least every second full-sized segment;
        // a receive-offload aggregate (GRO/LRO) of more than one segment is acknowledged
        // at once, as Linux does.
        out.ack_now = true;
    } else {
        out.arm_delack = true;
    }
    out
}

/// Whether the intervals touched since the last ACK fill the SACK option of the next one
/// (three blocks beside a timestamp, four without, RFC 2018 3), the latest reported block
/// kept: a later segment of the burst in another interval would push one of them out
/// before any ACK reported it, and the sender would resend data that arrived. Linux sends
/// a held ACK for the same reason (`tcp_sack_compress_send_ack` in `tcp_sack_new_ofo_skb`).
#[inline]
fn sack_news_fill_an_ack(ps: &ProtoState, post: &PostState) -> bool {
    let room = if ps.has(super::state::flags::TIMESTAMPS) {
        3
    } else {
        sluice_wire::tcp::MAX_SACK_BLOCKS as u8
    };
    post.sack_news >= room - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc6298_a_sample_of_hours_saturates_and_the_rto_stays_within_its_bounds() {
        // Since issue 24 an ACK handled past the RTO deadline gives no sample, but a timed
        // segment whose timer ACKs of earlier data kept restarting may still be measured
        // late: 4 * RTTVAR of a 40-minute sample overflows 32 bits and must saturate.
        let (min, max) = (200_000, 60_000_000);
        let mut post = PostState::default();
        rtt_update(&mut post, 1_000);
        rtt_update(&mut post, 40 * 60 * 1_000_000);
        assert_eq!(post.rto_us((min, max)), max);
        let mut fresh = PostState::default();
        rtt_update(&mut fresh, 40 * 60 * 1_000_000);
        assert_eq!(fresh.srtt_us, 40 * 60 * 1_000_000);
        assert_eq!(fresh.rto_us((min, max)), max);
    }
}
