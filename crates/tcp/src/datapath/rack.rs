//! RACK (RFC 8985 6): time-based loss detection. A segment is lost when a segment sent
//! sufficiently later has been delivered: sent more than RACK.rtt + reo_wnd before the most
//! recently sent segment that was acknowledged or SACKed (RACK.xmit_ts).
//!
//! The core keeps no per-segment state, so transmit times are kept coarsely and bounded:
//! each connection has `Config::rack_marks` transmit marks (a slice of `DataPath::xmit`),
//! sorted by sequence, each saying that the new data below its `end` (and above the
//! previous mark's) was last sent at `sent_us` or earlier. A new transmission within
//! min_rtt / 8 of the newest mark, or with every mark in use, extends that mark and takes
//! the later time: a loss is then found up to that much later, never earlier. Marks cover
//! original transmissions only; retransmissions are judged by the scoreboard
//! (`scoreboard::detect_lost_retransmissions`), and a timeout forgets the marks. Cost: 8 B
//! per mark (64 B for the default 8) and [`RackState`]'s 32 B per connection, in their own
//! tables, off the in-order path. RACK's verdict is the scoreboard's `lost_below`.

use sluice_wire::tcp::SeqNumber;

use super::pool::ColdRows;
use super::scoreboard;
use super::state::{sack_flags, ProtoState};
use super::summary::{Actions, HeaderSummary};

/// New data up to `end` was sent at `sent_us` or earlier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct XmitMark {
    /// One past the last sequence number the mark covers.
    pub end: SeqNumber,
    /// When that data was sent (microseconds, truncated).
    pub sent_us: u32,
}

/// One connection's RACK state (RFC 8985 6.1), owned by the protocol stage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RackState {
    /// RACK.xmit_ts: when the most recently sent of the delivered segments was sent.
    pub xmit_us: u32,
    /// RACK.end_seq: that segment's end.
    pub end_seq: SeqNumber,
    /// RACK.rtt: the round trip it measured.
    pub rtt_us: u32,
    /// The smallest RACK.rtt seen (RFC 8985 6.2 step 4's min_RTT).
    pub min_rtt_us: u32,
    /// Where the first mark begins: data below it has no mark (sent before a timeout).
    pub marks_from: SeqNumber,
    /// snd_max when reo_wnd_mult last grew: it grows at most once per round trip.
    pub dsack_round: SeqNumber,
    /// Marks in use.
    pub count: u8,
    /// RACK.reo_wnd_mult (0 reads as 1).
    pub reo_wnd_mult: u8,
    /// RACK.reo_wnd_persist: recoveries left before reo_wnd_mult falls back to 1.
    pub reo_wnd_persist: u8,
    /// RACK.xmit_ts is set (a delivered segment was timed).
    pub valid: bool,
}

/// Largest reo_wnd_mult: reo_wnd is capped at SRTT anyway.
const MAX_REO_WND_MULT: u8 = 64;

/// RFC 8985 6.2 step 4: recoveries a grown reordering window persists for.
const REO_WND_PERSIST: u8 = 16;

/// Wrapping "a is after b" on the microsecond clock.
#[inline]
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// New data [start, end) left at `now_us`.
pub(crate) fn on_sent(
    rk: &mut RackState,
    marks: &mut [XmitMark],
    start: SeqNumber,
    end: SeqNumber,
    now_us: u32,
) {
    if marks.is_empty() || !end.seq_gt(start) {
        return;
    }
    let n = usize::from(rk.count).min(marks.len());
    if n == 0 {
        rk.marks_from = start;
    } else {
        let full = n == marks.len();
        let last = &mut marks[n - 1];
        let merge_us = (rk.min_rtt_us / 8).max(1);
        if full || now_us.wrapping_sub(last.sent_us) < merge_us {
            last.end = end;
            last.sent_us = now_us;
            return;
        }
    }
    marks[n] = XmitMark {
        end,
        sent_us: now_us,
    };
    rk.count = (n + 1) as u8;
}

/// A retransmission timeout: go-back-N resends everything, and the marks' times are
/// no longer the last transmissions'.
pub(crate) fn on_timeout(rk: &mut RackState, snd_max: SeqNumber) {
    rk.count = 0;
    rk.marks_from = snd_max;
}

/// When the data at `seq` was sent, if a mark covers it.
fn sent_time(rk: &RackState, marks: &[XmitMark], seq: SeqNumber) -> Option<u32> {
    if seq.seq_lt(rk.marks_from) {
        return None;
    }
    marks[..usize::from(rk.count).min(marks.len())]
        .iter()
        .find(|m| m.end.seq_gt(seq))
        .map(|m| m.sent_us)
}

/// RFC 8985 6.2 step 2 for the delivered (cumulatively ACKed or SACKed) byte at `seq`.
/// A retransmitted one (below `high_rxt`) is skipped: which transmission arrived is
/// ambiguous.
pub(crate) fn on_delivered(
    rk: &mut RackState,
    marks: &[XmitMark],
    seq: SeqNumber,
    high_rxt: SeqNumber,
    now_us: u32,
) {
    if seq.seq_lt(high_rxt) {
        return;
    }
    let Some(sent) = sent_time(rk, marks, seq) else {
        return;
    };
    let end = seq + 1u32;
    if rk.valid && !after(sent, rk.xmit_us) && !(sent == rk.xmit_us && end.seq_gt(rk.end_seq)) {
        return;
    }
    let rtt = now_us.wrapping_sub(sent).max(1);
    rk.xmit_us = sent;
    rk.end_seq = end;
    rk.rtt_us = rtt;
    rk.min_rtt_us = if rk.min_rtt_us == 0 {
        rtt
    } else {
        rk.min_rtt_us.min(rtt)
    };
    rk.valid = true;
}

/// The cumulative ACK reached `una`: marks wholly below it go.
pub(crate) fn on_cumulative_ack(rk: &mut RackState, marks: &mut [XmitMark], una: SeqNumber) {
    let n = usize::from(rk.count).min(marks.len());
    let gone = marks[..n].iter().take_while(|m| m.end.seq_le(una)).count();
    if gone > 0 {
        rk.marks_from = marks[gone - 1].end;
        marks.copy_within(gone..n, 0);
        rk.count = (n - gone) as u8;
    }
}

/// RFC 8985 6.2 step 4 on a D-SACK: the reordering window grows, once per round trip,
/// and stays grown for 16 recoveries.
pub(crate) fn on_dsack(rk: &mut RackState, snd_una: SeqNumber, snd_max: SeqNumber) {
    if rk.reo_wnd_mult != 0 && snd_una.seq_lt(rk.dsack_round) {
        return;
    }
    rk.reo_wnd_mult = rk
        .reo_wnd_mult
        .max(1)
        .saturating_add(1)
        .min(MAX_REO_WND_MULT);
    rk.dsack_round = snd_max;
    rk.reo_wnd_persist = REO_WND_PERSIST;
}

/// A loss recovery ended (RFC 8985 6.2 step 4: reo_wnd_persist counts them down).
pub(crate) fn on_recovery_end(rk: &mut RackState) {
    rk.reo_wnd_persist = rk.reo_wnd_persist.saturating_sub(1);
    if rk.reo_wnd_persist == 0 {
        rk.reo_wnd_mult = 1;
    }
}

/// RFC 8985 6.2 step 4: reo_wnd = min(reo_wnd_mult * min_RTT / 4, SRTT).
pub(crate) fn reo_wnd(rk: &RackState, srtt_us: u32) -> u32 {
    let w = u32::from(rk.reo_wnd_mult.max(1)).saturating_mul(rk.min_rtt_us / 4);
    if srtt_us == 0 {
        w
    } else {
        w.min(srtt_us)
    }
}

/// RFC 8985 6.2 step 5, RACK_detect_loss(): the end of the newest mark sent before
/// RACK.xmit_ts and more than RACK.rtt + reo_wnd ago (every unSACKed sequence number below
/// it is lost), and how long until the next mark sent before RACK.xmit_ts is (the
/// reordering timer, RFC 8985 6.3).
pub(crate) fn detect_loss(
    rk: &RackState,
    marks: &[XmitMark],
    now_us: u32,
    srtt_us: u32,
) -> (Option<SeqNumber>, Option<u32>) {
    if !rk.valid {
        return (None, None);
    }
    let wait = rk.rtt_us.saturating_add(reo_wnd(rk, srtt_us));
    let mut lost = None;
    for m in &marks[..usize::from(rk.count).min(marks.len())] {
        let before =
            after(rk.xmit_us, m.sent_us) || (m.sent_us == rk.xmit_us && m.end.seq_le(rk.end_seq));
        if !before {
            break;
        }
        let elapsed = now_us.wrapping_sub(m.sent_us);
        if elapsed >= wait {
            lost = Some(m.end);
        } else {
            return (lost, Some(wait - elapsed));
        }
    }
    (lost, None)
}

/// The protocol stage's RACK step for an ACK `s` that `protocol::process` took (with
/// SACK recovery on): the delivered data times RACK.xmit_ts (step 2), D-SACKs and ended
/// recoveries adapt reo_wnd (step 4), losses are detected (step 5) into the scoreboard's
/// boundary, which may start a recovery; `s.rack_timer_us` asks for the reordering timer.
/// The caller calls [`on_recovery_end`] if the ACK ended a recovery. Returns the segments
/// newly found lost.
pub(crate) fn process_ack(
    ps: &mut ProtoState,
    cold: &mut ColdRows<'_>,
    rk: &mut RackState,
    marks: &mut [XmitMark],
    s: &mut HeaderSummary,
    now_us: u32,
    srtt_us: u32,
) -> u32 {
    let high_rxt = ps.sack.high_rxt;
    if s.tx_freed > 0 || s.actions.contains(Actions::FIN_ACKED) {
        on_delivered(rk, marks, ps.snd_una - 1u32, high_rxt, now_us);
    }
    let n = usize::from(s.sack_count).min(s.sack_blocks.len());
    for &(left, right) in &s.sack_blocks[..n] {
        if left.seq_lt(right) && right.seq_gt(ps.snd_una) && right.seq_le(ps.snd_max) {
            on_delivered(rk, marks, right - 1u32, high_rxt, now_us);
        }
    }
    on_cumulative_ack(rk, marks, ps.snd_una);
    if s.sack.old > 0 {
        on_dsack(rk, ps.snd_una, ps.snd_max);
    }
    detect(ps, cold, rk, marks, s, now_us, srtt_us)
}

/// RACK_detect_loss() into the scoreboard: raises `lost_below`, starts a recovery if
/// the segment at snd_una is lost, and sets `s.rack_timer_us` for what is not yet.
/// Returns the segments newly found lost.
pub(crate) fn detect(
    ps: &mut ProtoState,
    cold: &mut ColdRows<'_>,
    rk: &RackState,
    marks: &[XmitMark],
    s: &mut HeaderSummary,
    now_us: u32,
    srtt_us: u32,
) -> u32 {
    s.rack_timer_us = 0;
    let (rec, board) = (&mut *cold.rec, &*cold.sacked);
    if ps.sack.count == 0 && !scoreboard::in_recovery(ps) {
        // Nothing delivered beyond a hole: no reordering to judge (TLP's business).
        return 0;
    }
    if scoreboard::dup_thresh(rec) > scoreboard::DUP_THRESH {
        // D-SACKs showed reordering deeper than DupThresh: a window capped at SRTT cannot
        // cover a path that holds segments that long (many RTTs), so the raised DupThresh
        // alone judges (RFC 6675 2, RFC 4653).
        return 0;
    }
    let (lost, timer) = detect_loss(rk, marks, now_us, srtt_us);
    s.rack_timer_us = timer.unwrap_or(0);
    let Some(lost) = lost.map(|b| b.min(ps.snd_max)) else {
        return 0;
    };
    let from = rec.lost_below.max(ps.snd_una);
    if !lost.seq_gt(from) {
        return 0;
    }
    rec.lost_below = lost;
    let mss = u32::from(ps.mss).max(1);
    let newly = scoreboard::unsacked_bytes(ps, board, from, lost).div_ceil(mss);
    if scoreboard::may_enter_recovery(ps) {
        // RFC 8985 6.2: the segment at snd_una is lost, whatever DupThresh says.
        s.actions.insert(Actions::FAST_RETRANSMIT);
    }
    if ps.sack.has(sack_flags::IN_RECOVERY) || s.actions.contains(Actions::FAST_RETRANSMIT) {
        s.actions.insert(Actions::WAKE_TX);
    }
    newly
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(n: u32) -> SeqNumber {
        SeqNumber(n * 1000)
    }

    /// Ten segments, one every 10 us from t = 0, each its own mark (min RTT unknown).
    fn sent() -> (RackState, [XmitMark; 16]) {
        let mut rk = RackState::default();
        let mut m = [XmitMark::default(); 16];
        for i in 0..10 {
            on_sent(&mut rk, &mut m, seq(i), seq(i + 1), i * 10);
        }
        (rk, m)
    }

    #[test]
    fn rfc8985_6_2_a_segment_sent_rtt_plus_reo_wnd_before_a_delivered_one_is_lost() {
        let (mut rk, m) = sent();
        assert_eq!(rk.count, 10);
        // Segment 3 (sent at 30) is SACKed at 130: RTT 100, reo_wnd 25.
        on_delivered(&mut rk, &m, seq(4) - 1u32, seq(0), 130);
        assert_eq!((rk.xmit_us, rk.rtt_us, reo_wnd(&rk, 100)), (30, 100, 25));
        // At 130 segment 0 (sent at 0) has waited past 125 us: lost; segment 1 in 5 us.
        let (lost, timer) = detect_loss(&rk, &m, 130, 100);
        assert_eq!((lost, timer), (Some(seq(1)), Some(5)));
        // At 145, segments 0, 1 and 2 (sent at 0, 10, 20) are lost.
        let (lost, _) = detect_loss(&rk, &m, 145, 100);
        assert_eq!(lost, Some(seq(3)));
        // Later segments, sent after RACK.xmit_ts, are never judged by it.
        let (lost, _) = detect_loss(&rk, &m, 10_000, 100);
        assert_eq!(lost, Some(seq(4)));
    }

    #[test]
    fn rfc8985_6_2_step_4_reo_wnd_grows_with_dsacks_once_a_round_and_is_capped_at_srtt() {
        let mut rk = RackState {
            min_rtt_us: 100,
            ..Default::default()
        };
        assert_eq!(reo_wnd(&rk, 1000), 25);
        on_dsack(&mut rk, seq(0), seq(10));
        assert_eq!(reo_wnd(&rk, 1000), 50);
        on_dsack(&mut rk, seq(5), seq(12));
        assert_eq!(reo_wnd(&rk, 1000), 50, "the same round trip");
        on_dsack(&mut rk, seq(10), seq(20));
        assert_eq!(reo_wnd(&rk, 1000), 75);
        assert_eq!(reo_wnd(&rk, 60), 60, "capped at SRTT");
        for _ in 0..REO_WND_PERSIST {
            on_recovery_end(&mut rk);
        }
        assert_eq!(reo_wnd(&rk, 1000), 25);
    }

    #[test]
    fn marks_are_bounded_and_coarsen_to_later_times() {
        let mut rk = RackState::default();
        let mut m = [XmitMark::default(); 4];
        for i in 0..10 {
            on_sent(&mut rk, &mut m, seq(i), seq(i + 1), i * 10);
        }
        assert_eq!(rk.count, 4);
        assert_eq!(
            m[3],
            XmitMark {
                end: seq(10),
                sent_us: 90
            }
        );
        // Data of the merged mark takes its latest time; ACKed marks go.
        on_cumulative_ack(&mut rk, &mut m, seq(2));
        assert_eq!((rk.count, rk.marks_from), (2, seq(2)));
        on_delivered(&mut rk, &m, seq(5), seq(0), 190);
        assert_eq!((rk.xmit_us, rk.rtt_us), (90, 100));
        // A retransmitted byte says nothing; a timeout forgets the marks.
        let before = rk;
        on_delivered(&mut rk, &m, seq(9), seq(10), 500);
        assert_eq!(rk, before);
        on_timeout(&mut rk, seq(10));
        on_delivered(&mut rk, &m, seq(9), seq(0), 500);
        assert_eq!(
            rk.xmit_us, 90,
            "no mark covers data sent before the timeout"
        );
    }
}
