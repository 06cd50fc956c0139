//! The protocol stage: RFC 9293 segment processing for synchronized connections, in one pass.
//!
//! It owns the sequence space ([`ProtoState`]) and out-of-order intervals. It decides what of
//! a segment is accepted and where its payload goes, processes the ACK field, and records in
//! the header summary what the post-processor and the control plane must do. It never
//! touches payload bytes, buffers or timers.

use sluice_wire::tcp::{SeqNumber, TcpFlags};

use super::pool::ColdRows;
use super::scoreboard;
use super::state::{flags, sack_flags, Interval, OooState, ProtoState, RecoveryState, SackedRange};
use super::summary::{Actions, HeaderSummary};

/// Processes one segment. `cold` is the connection's pooled row (interval slots, SACK
/// scoreboard, out-of-order and recovery state), touched only by out-of-order data or a
/// FIN, SACK blocks, recovery or a timeout's probe; without one, scratch rows with no
/// interval and no scoreboard range. Without `admit_ooo` (the control plane's memory
/// limit), out-of-order data is kept only where it adds no bytes to what is held.
#[inline]
pub(crate) fn process(
    ps: &mut ProtoState,
    cold: &mut ColdRows<'_>,
    s: &mut HeaderSummary,
    now_us: u32,
    admit_ooo: bool,
) {
    process_segment(ps, cold, s, now_us, admit_ooo);
    // An ACK sent for this segment alone (every-segment policy, FIN changes, rate-limited
    // connections) reports the receive state this segment left, not the one the rest of its
    // batch leaves (RFC 9293 3.10.7.4, RFC 5681 4.2): identical ACKs would be duplicate ACKs
    // to the peer. A burst's one delayed ACK reports the state the burst left (pipeline.rs).
    s.ack_rcv_nxt = ps.rcv_nxt;
    s.ack_rx_avail = ps.rx_avail;
}

#[inline]
fn process_segment(
    ps: &mut ProtoState,
    cold: &mut ColdRows<'_>,
    s: &mut HeaderSummary,
    now_us: u32,
    admit_ooo: bool,
) {
    // RFC 7323 5.3: PAWS. A segment whose TSval is older than TS.Recent is a replay from a
    // previous incarnation of the sequence space: drop it and acknowledge (R1-R2).
    if ps.has(flags::TIMESTAMPS)
        && s.has_timestamp
        && (s.ts_val.wrapping_sub(ps.ts_recent) as i32) < 0
    {
        s.actions.insert(Actions::EXCEPTION);
        s.actions.insert(Actions::PAWS);
        return;
    }

    let fin = s.flags.contains(TcpFlags::FIN);
    let seg_len = s.payload_len as u32 + fin as u32;
    let seg_end = s.seq + seg_len;
    let right_edge = ps.rcv_nxt + ps.rx_avail;

    // RFC 9293 3.10.7.4 first check, as Linux applies it: the segment must overlap
    // [rcv_nxt, rcv_nxt + RCV.WND], a zero-length segment may sit at either edge.
    // RFC 9293 3.10.7.4 "special allowance" for zero windows: a segment at rcv_nxt is kept so
    // its ACK and window are processed even when its data cannot be.
    if seg_end.seq_lt(ps.rcv_nxt) || s.seq.seq_gt(right_edge) {
        s.actions.insert(Actions::EXCEPTION);
        return;
    }

    process_ack(ps, cold.rec, cold.sacked, s, now_us);
    if s.actions.contains(Actions::EXCEPTION) {
        return;
    }

    // RFC 7323 4.3 and 5.3 R3: remember the TSval to echo when the segment covers rcv_nxt,
    // only once it has passed every check, so a segment we drop cannot move TS.Recent
    // (and wedge the connection behind PAWS).
    if s.has_timestamp && s.seq.seq_le(ps.rcv_nxt) {
        ps.ts_recent = s.ts_val;
    }

    // Trim to the window: drop what we already have at the front and what does not fit.
    let mut seq = s.seq;
    let mut offset = s.payload_offset as u32;
    let mut len = s.payload_len as u32;
    let mut fin = fin;
    if seq.seq_lt(ps.rcv_nxt) {
        let dup = (ps.rcv_nxt.diff(seq) as u32).min(len);
        seq += dup;
        offset += dup;
        len -= dup;
        if len == 0 && s.payload_len > 0 && !fin {
            // Entirely duplicate data: the peer missed our ACK; tell it again.
            s.actions.insert(Actions::ACK_NOW);
        }
    }
    if (seq + len).seq_gt(right_edge) {
        len = right_edge.diff(seq).max(0) as u32;
        fin = false; // the FIN lies beyond the window and will be retransmitted
        s.actions.insert(Actions::ACK_NOW);
    }

    if ps.has(flags::FIN_RECEIVED) {
        // Nothing follows the peer's FIN; a retransmitted FIN or data is a duplicate.
        if s.payload_len > 0 || fin {
            s.actions.insert(Actions::ACK_NOW);
        }
        return;
    }

    if len > 0 {
        if seq == ps.rcv_nxt {
            s.place_seq = seq;
            s.place_offset = offset as u16;
            s.place_len = len as u16;
            let before = ps.rcv_nxt;
            ps.rcv_nxt += len;
            if merge_intervals(ps, cold.ooo) {
                s.actions.insert(Actions::OOO_CHANGED);
            }
            let advance = ps.rcv_nxt.diff(before) as u32;
            ps.rx_avail -= advance.min(ps.rx_avail);
            s.rx_advance = advance;
            s.actions.insert(Actions::ACK_DATA);
            if ps.ooo_count > 0 || advance > len {
                // RFC 5681 4.2: ACK at once when a segment fills (part of) a gap.
                s.actions.insert(Actions::ACK_NOW);
            }
        } else {
            let (stored, new_block) =
                insert_interval(ps, cold.oo, cold.ooo, seq, seq + len, admit_ooo);
            if stored {
                s.actions.insert(Actions::OOO_CHANGED);
                s.place_seq = seq;
                s.place_offset = offset as u16;
                s.place_len = len as u16;
            } else if !admit_ooo {
                s.actions.insert(Actions::OOO_OVER_LIMIT);
            }
            if new_block {
                s.actions.insert(Actions::NEW_SACK_BLOCK);
            }
            if fin {
                cold.oo.rx_fin_seq = seq + len;
                ps.set(flags::FIN_PENDING, true);
            }
            // RFC 5681 4.2: an out-of-order segment is acknowledged immediately (a dupack).
            s.actions.insert(Actions::ACK_NOW);
            return;
        }
    } else if fin && seq != ps.rcv_nxt {
        cold.oo.rx_fin_seq = seq;
        ps.set(flags::FIN_PENDING, true);
        s.actions.insert(Actions::ACK_NOW);
        return;
    }

    if fin && seq + len == ps.rcv_nxt {
        ps.set(flags::FIN_PENDING, true);
        cold.oo.rx_fin_seq = ps.rcv_nxt;
    }
    if ps.has(flags::FIN_PENDING) && cold.oo.rx_fin_seq == ps.rcv_nxt {
        // RFC 9293 3.10.7.4 eighth: the FIN advances rcv_nxt by one and is acknowledged.
        ps.rcv_nxt += 1u32;
        // Nothing follows the FIN: out-of-order data stored beyond it (which only a
        // misbehaving peer sends) is discarded rather than left in the interval list.
        if ps.ooo_count > 0 {
            s.actions.insert(Actions::OOO_CHANGED);
        }
        ps.ooo_count = 0;
        ps.set(flags::FIN_PENDING, false);
        ps.set(flags::FIN_RECEIVED, true);
        s.actions.insert(Actions::FIN_RECEIVED);
        s.actions.insert(Actions::ACK_NOW);
    }
}

/// The ACK field (RFC 9293 3.10.7.4 fifth check, RFC 5961 5.2, RFC 5681 duplicate ACKs) and
/// SACK option (RFC 2018, RFC 6675).
#[inline]
fn process_ack(
    ps: &mut ProtoState,
    rec: &mut RecoveryState,
    sacked: &mut [SackedRange],
    s: &mut HeaderSummary,
    now_us: u32,
) {
    let ack = s.ack;
    // RFC 5961 5.2 / RFC 9293 3.10.7.4: an ACK of data never sent is answered with an ACK
    // and the segment dropped.
    if ack.seq_gt(ps.snd_max) {
        s.actions.insert(Actions::EXCEPTION);
        s.actions.insert(Actions::ACK_UNSENT);
        return;
    }
    // RFC 5961 5.2: an ACK older than snd_una - MAX.SND.WND is a blind injection attempt.
    if ack.seq_lt(ps.snd_una - ps.max_snd_wnd) {
        s.actions.insert(Actions::EXCEPTION);
        s.actions.insert(Actions::ACK_TOO_OLD);
        return;
    }

    let window = (s.window as u32) << ps.snd_wscale;
    let old_una = ps.snd_una;
    let advanced = ack.seq_gt(old_una);
    if advanced {
        let mut acked = ack.diff(ps.snd_una) as u32;
        if let Some(fin_seq) = ps.fin_seq() {
            if ack.seq_gt(fin_seq) {
                // Our FIN occupies one sequence number but no buffer byte.
                acked -= 1;
                s.actions.insert(Actions::FIN_ACKED);
            }
        }
        s.tx_freed = acked;
        ps.snd_una = ack;
        if ps.sack.has(sack_flags::RTO_PROBE) {
            ps.sack.set(sack_flags::RTO_PROBE, false);
            let probe = rec.rto_probe;
            // The first ACK for data outstanding at a timeout judges it. Spurious if it
            // echoes an older timestamp than the retransmission's (RFC 3522 Eifel; a zero
            // echo says nothing), or acknowledges data sent only before the timeout and
            // never reported missing (RFC 5682 F-RTO, as Linux applies it): the originals
            // arrived, only late.
            let eifel = ps.has(flags::TIMESTAMPS)
                && s.has_timestamp
                && s.ts_ecr != 0
                && (s.ts_ecr.wrapping_sub(probe.tsval) as i32) < 0;
            let frto = probe
                .frto_above
                .is_some_and(|above| ack.seq_gt(ps.snd_nxt) && ack.seq_gt(above));
            if eifel || frto {
                s.actions.insert(Actions::SPURIOUS_RTO);
                // RFC 4015 3.2 (4): go on with new data rather than resend what the peer
                // has; and fast recovery may start again at once.
                if ps.snd_nxt.seq_lt(ps.snd_max) {
                    ps.snd_nxt = ps.snd_max;
                }
                scoreboard::on_spurious_timeout(ps);
            }
        }
        if ps.snd_nxt.seq_lt(ack) {
            // Go-back-N resent from an older point; the peer already had this.
            ps.snd_nxt = ack;
        }
        ps.dupacks = 0;
        if ps.has(flags::RTT_TIMING) && ack.seq_ge(ps.rtt_seq) {
            // RFC 6298 3 (Karn): the timed segment was not retransmitted, or timing stopped.
            s.rtt_sample_us = now_us.wrapping_sub(ps.rtt_sent_us).max(1);
            ps.set(flags::RTT_TIMING, false);
        }
        s.actions.insert(Actions::WAKE_TX);
    }
    let sack = ps.sack.has(sack_flags::ENABLED);
    if sack && advanced {
        // RFC 6675 5 (A): the cumulative ACK may end recovery, or be a partial ACK.
        scoreboard::on_cumulative_ack(ps, rec, sacked, old_una);
    }
    // RFC 6675 Update(): record what the SACK blocks newly report.
    let newly_sacked = if sack && s.sack_count > 0 {
        let n = usize::from(s.sack_count).min(s.sack_blocks.len());
        let (newly, mut report) = scoreboard::update(ps, rec, sacked, &s.sack_blocks[..n]);
        if newly > 0 {
            report.rxt_lost = scoreboard::detect_lost_retransmissions(ps, rec, sacked);
        }
        if report.spurious_recovery {
            s.actions.insert(Actions::SPURIOUS_RECOVERY);
        }
        s.sack = report;
        newly
    } else {
        0
    };
    if !advanced && ack == ps.snd_una && ps.snd_max != ps.snd_una {
        // RFC 5681 2: a duplicate ACK. RFC 6675 2 also counts an ACK whose SACK blocks
        // report new data, whatever else it carries. An ACK that reports a D-SACK (RFC 2883:
        // a segment the receiver already had) and nothing new signals a needless
        // retransmission, not a loss: it is not counted.
        let rfc5681 = s.payload_len == 0
            && !s.flags.contains(TcpFlags::FIN)
            && window == ps.snd_wnd
            && s.sack.old == 0;
        if rfc5681 || newly_sacked > 0 {
            ps.dupacks = ps.dupacks.saturating_add(1);
            s.actions.insert(Actions::DUPACK);
            if sack {
                // Limited Transmit may send on this one (RFC 6675 5 step 3).
                s.actions.insert(Actions::WAKE_TX);
                // RFC 6675 5 steps 2.a-2.b: DupThresh duplicates, or IsLost(HighACK + 1).
                if scoreboard::may_enter_recovery(ps)
                    && (u32::from(ps.dupacks) >= scoreboard::dup_thresh(rec)
                        || scoreboard::is_lost(ps, rec, sacked, ps.snd_una))
                {
                    s.actions.insert(Actions::FAST_RETRANSMIT);
                }
            } else if ps.dupacks == 3 {
                s.actions.insert(Actions::FAST_RETRANSMIT);
            }
        }
    }
    if newly_sacked > 0 && ps.sack.has(sack_flags::IN_RECOVERY) {
        // RFC 6675 5 (B)-(C): less is in the network; the sender may have room again.
        s.actions.insert(Actions::WAKE_TX);
    }

    // RFC 9293 3.10.7.4: update the send window from the newest segment only. Only a
    // segment that starts at or before rcv_nxt may move SND.WL1: an out-of-order (or
    // forged in-window) segment far ahead would otherwise freeze the window until the peer
    // sends that far. An ACK that advances snd_una always carries a current window (as in
    // Linux's tcp_may_update_window).
    let newer = ps.snd_wl1.seq_lt(s.seq) || (ps.snd_wl1 == s.seq && ps.snd_wl2.seq_le(ack));
    if advanced || (newer && s.seq.seq_le(ps.rcv_nxt)) {
        if window > ps.snd_wnd {
            s.actions.insert(Actions::WAKE_TX);
        }
        ps.snd_wnd = window;
        ps.max_snd_wnd = ps.max_snd_wnd.max(window);
        ps.snd_wl1 = s.seq;
        ps.snd_wl2 = ack;
    }
}

/// Records [start, end) as received out of order. Returns whether it was stored (false:
/// drop the data, it is disjoint from every interval and all interval slots are in use,
/// or, without `admit_new`, some of it lies outside the intervals held: a receiver may
/// drop out-of-order data, the sender keeps it until it is acknowledged, RFC 9293
/// 3.10.7.4), and whether it landed in another interval than the most recently touched
/// one (a new SACK block for the ACKs to report, RFC 2018 4).
fn insert_interval(
    ps: &mut ProtoState,
    oo: &mut OooState,
    ooo: &mut [Interval],
    start: SeqNumber,
    end: SeqNumber,
    admit_new: bool,
) -> (bool, bool) {
    let count = ps.ooo_count as usize;
    oo.ooo_seen = oo.ooo_seen.wrapping_add(1);
    let seen = oo.ooo_seen;
    let used = &mut ooo[..count];
    // Intervals are kept sorted and disjoint, all within the window (so their ends
    // increase in sequence-space order): the first that ends at or after `start`, by
    // binary search. Under loss most segments extend the highest interval, the far end
    // for a scan from the front.
    let i = used.partition_point(|iv| iv.end.seq_lt(start));
    // Whether interval i is not the one out-of-order data touched last.
    let elsewhere = |iv: &Interval| iv.seen != seen.wrapping_sub(1);
    if !admit_new {
        let held = i < used.len() && used[i].start.seq_le(start) && end.seq_le(used[i].end);
        let new_block = held && elsewhere(&used[i]);
        if held {
            used[i].seen = seen;
        }
        return (held, new_block);
    }
    if i < used.len() && used[i].start.seq_le(end) {
        // Overlaps or touches interval i: widen it, then absorb any later ones it reaches.
        let new_block = elsewhere(&used[i]);
        used[i].start = used[i].start.min(start);
        used[i].end = used[i].end.max(end);
        used[i].seen = seen;
        let mut j = i + 1;
        while j < used.len() && used[j].start.seq_le(used[i].end) {
            used[i].end = used[i].end.max(used[j].end);
            j += 1;
        }
        let absorbed = j - (i + 1);
        if absorbed > 0 {
            ooo.copy_within(j..count, i + 1);
            ps.ooo_count -= absorbed as u8;
        }
        return (true, new_block);
    }
    if count == ooo.len() {
        return (false, false);
    }
    ooo.copy_within(i..count, i + 1);
    ooo[i] = Interval { start, end, seen };
    ps.ooo_count += 1;
    (true, true)
}

/// Advances rcv_nxt over intervals the in-order data has reached; true if it took any.
#[inline]
fn merge_intervals(ps: &mut ProtoState, ooo: &mut [Interval]) -> bool {
    let count = ps.ooo_count as usize;
    if count == 0 {
        return false;
    }
    let mut merged = 0;
    while merged < count && ooo[merged].start.seq_le(ps.rcv_nxt) {
        ps.rcv_nxt = ps.rcv_nxt.max(ooo[merged].end);
        merged += 1;
    }
    if merged > 0 {
        ooo.copy_within(merged..count, 0);
        ps.ooo_count -= merged as u8;
    }
    merged > 0
}
