//! The sender's SACK scoreboard and loss recovery (RFC 6675, on RFC 2018 SACK blocks).
//!
//! Per connection: a bounded, sorted list of SACKed ranges (a slice of a pooled row, `datapath/pool.rs`,
//! allocated up front) and [`SackSender`] in the protocol stage's state. The protocol stage
//! validates and records SACK blocks (Update()) and decides when recovery starts and ends;
//! the TX workflow asks [`next_segment`] what to send (NextSeg() under the pipe limit).
//! Everything here is bounded by the scoreboard size and allocates nothing; any SACK block a
//! peer sends, however hostile, is either recorded within (snd_una, snd_max] or counted and
//! ignored, so retransmissions never leave [snd_una, snd_max).

use sluice_wire::tcp::SeqNumber;

use super::state::{flags, sack_flags, ProtoState, RecoveryState, SackSender, SackedRange};
use super::summary::SackReport;
use super::tx::{self, Segment};

/// RFC 6675 2: DupThresh, the duplicate ACKs (or SACKed segments) that signal a loss,
/// until the connection has seen reordering.
pub(crate) const DUP_THRESH: u32 = 3;

/// The largest DupThresh reordering may raise a connection's to (Linux's
/// tcp_max_reordering is 300): a larger one leaves more losses to the timer.
pub(crate) const MAX_REORDERING: u32 = 127;

/// This connection's DupThresh. RFC 6675 2 lets a sender adapt it to the reordering it
/// measures (as RFC 4653 and Linux's tcp_check_sack_reordering do): after D-SACKs proved a
/// recovery needless, it is one more than the segments SACKed beyond the late original.
#[inline]
pub(crate) fn dup_thresh(rec: &RecoveryState) -> u32 {
    u32::from(rec.reordering).max(DUP_THRESH)
}

/// Whether `ps` is in SACK-based loss recovery.
#[inline]
pub(crate) fn in_recovery(ps: &ProtoState) -> bool {
    ps.sack.has(sack_flags::IN_RECOVERY)
}

/// Whether a new recovery may begin: SACK recovery is on, none is running, and no timeout
/// is being recovered from (RFC 6675 5.1: not before snd_una reaches the RecoveryPoint).
#[inline]
pub(crate) fn may_enter_recovery(ps: &ProtoState) -> bool {
    let f = ps.sack.flags;
    f & sack_flags::ENABLED != 0 && f & (sack_flags::IN_RECOVERY | sack_flags::AFTER_RTO) == 0
}

/// RFC 6675 Update(): validates `blocks` (one ACK's SACK option; snd_una already reflects
/// its cumulative ACK) and records the valid ones. Returns the bytes newly SACKed and what
/// became of the blocks.
pub(crate) fn update(
    ps: &mut ProtoState,
    rec: &mut RecoveryState,
    board: &mut [SackedRange],
    blocks: &[(SeqNumber, SeqNumber)],
) -> (u32, SackReport) {
    let mut report = SackReport::default();
    let mut newly = 0u32;
    for &(left, right) in blocks {
        report.received = report.received.saturating_add(1);
        if !left.seq_lt(right) {
            // RFC 2018 3: a block is a left edge and a right edge one past it; an empty or
            // reversed one means nothing.
            report.invalid = report.invalid.saturating_add(1);
        } else if right.seq_le(ps.snd_una) {
            // A D-SACK (RFC 2883) or an old ACK overtaken by a newer one.
            report.old = report.old.saturating_add(1);
            report.spurious_recovery |= dsack_undo(ps, rec, left, right);
        } else if !left.seq_gt(ps.snd_una) || right.seq_gt(ps.snd_max) {
            // RFC 6675 Update() records only octets between HighACK and HighData: a block
            // that claims snd_una itself (then the ACK would cover it) or data never sent
            // is a broken or hostile peer's.
            report.invalid = report.invalid.saturating_add(1);
        } else {
            let (added, lost) = insert(&mut ps.sack, board, left, right);
            newly = newly.saturating_add(added);
            if let Some((start, end)) = lost {
                report.overflow = report.overflow.saturating_add(1);
                forget(ps.snd_una, rec, start, end);
            }
        }
    }
    (newly, report)
}

/// RFC 3708 2 with RFC 2883: a D-SACK for [left, right), data the latest fast recovery
/// retransmitted, shows that many of its retransmissions needless. True when that was the
/// last of them: the loss was reordering, and the window cut is to be undone (as Linux's
/// tcp_try_undo_dsack). A duplicate made by the network counts too, as in Linux.
fn dsack_undo(
    ps: &mut ProtoState,
    rec: &mut RecoveryState,
    left: SeqNumber,
    right: SeqNumber,
) -> bool {
    let sb = &mut ps.sack;
    if !sb.has(sack_flags::UNDO_ARMED) || rec.undo_rxt == 0 || right.seq_gt(rec.recovery_point) {
        // Only D-SACKs of this recovery's retransmissions judge it.
        return false;
    }
    let mss = u32::from(ps.mss).max(1);
    let segments = (right.diff(left) as u32).div_ceil(mss);
    let left_over = u32::from(rec.undo_rxt).saturating_sub(segments);
    rec.undo_rxt = left_over as u16;
    if left_over > 0 {
        return false;
    }
    sb.set(sack_flags::UNDO_ARMED, false);
    // The original arrived after `reorder_seen` - 1 later segments: a DupThresh of
    // `reorder_seen` would not have set this recovery off.
    let degree = u32::from(rec.reorder_seen).min(MAX_REORDERING);
    rec.reordering = rec.reordering.max(degree as u8);
    true
}

/// A SACKed range [start, end) was lost to the scoreboard's bound: the region the sender
/// cannot judge grows to cover it (see `RecoveryState::forgotten_from`).
fn forget(una: SeqNumber, rec: &mut RecoveryState, start: SeqNumber, end: SeqNumber) {
    if rec.forgotten_to.seq_gt(una) {
        rec.forgotten_from = rec.forgotten_from.min(start);
        rec.forgotten_to = rec.forgotten_to.max(end);
    } else {
        rec.forgotten_from = start;
        rec.forgotten_to = end;
    }
}

/// Adds [start, end) to the sorted, disjoint ranges, merging what it overlaps or touches.
/// Returns the bytes it added and the range lost to the bound, if one was. When full, a
/// range below the highest one evicts the highest: holes near snd_una are retransmitted
/// first, and the sender stops trusting its scoreboard from the lost range on
/// ([`forget`]).
fn insert(
    sb: &mut SackSender,
    board: &mut [SackedRange],
    start: SeqNumber,
    end: SeqNumber,
) -> (u32, Option<(SeqNumber, SeqNumber)>) {
    let count = usize::from(sb.count).min(board.len());
    let mut i = 0;
    while i < count && board[i].end.seq_lt(start) {
        i += 1;
    }
    if i < count && board[i].start.seq_le(end) {
        // Overlaps or touches range i and perhaps later ones: they become one range.
        let mut covered = 0u32;
        let mut new_end = end;
        let mut j = i;
        while j < count && board[j].start.seq_le(end) {
            covered += overlap(board[j], start, end);
            new_end = new_end.max(board[j].end);
            j += 1;
        }
        board[i].start = board[i].start.min(start);
        board[i].end = new_end;
        let absorbed = j - (i + 1);
        if absorbed > 0 {
            board.copy_within(j..count, i + 1);
            sb.count -= absorbed as u8;
        }
        return (end.diff(start) as u32 - covered, None);
    }
    let mut count = count;
    let mut lost = None;
    if count == board.len() {
        if i == count {
            return (0, Some((start, end))); // the highest of all and no room: dropped
        }
        count -= 1; // evict the highest
        lost = Some((board[count].start, board[count].end));
    }
    board.copy_within(i..count, i + 1);
    board[i] = SackedRange { start, end };
    sb.count = (count + 1) as u8;
    (end.diff(start) as u32, lost)
}

/// Bytes of `r` within [start, end).
#[inline]
fn overlap(r: SackedRange, start: SeqNumber, end: SeqNumber) -> u32 {
    let lo = r.start.max(start);
    let hi = r.end.min(end);
    hi.diff(lo).max(0) as u32
}

/// The cumulative ACK moved snd_una from `old_una`: forget what it covers, and end recovery
/// or handle a partial ACK (RFC 6675 5 (A)).
pub(crate) fn on_cumulative_ack(
    ps: &mut ProtoState,
    rec: &mut RecoveryState,
    board: &mut [SackedRange],
    old_una: SeqNumber,
) {
    let una = ps.snd_una;
    let count = usize::from(ps.sack.count).min(board.len());
    let armed = sack_flags::IN_RECOVERY | sack_flags::UNDO_ARMED;
    if count > 0 && ps.sack.flags & armed == armed && rec.reorder_seen == 0 {
        // The hole that began the recovery is filled while SACKed data lies this far beyond
        // it: if the recovery proves needless, its original came this late (Linux's
        // tcp_check_sack_reordering). Later holes of a long recovery say less.
        let mss = u32::from(ps.mss).max(1);
        let beyond = (board[count - 1].end.diff(old_una).max(0) as u32 / mss).saturating_sub(1);
        rec.reorder_seen = (beyond + 1).min(u32::from(u8::MAX)) as u8;
    }
    // Ranges the ACK covered go. So does one it reached into, which only a receiver that
    // reneged (RFC 2018 8) or a broken one sends: SACK information is advisory, and what
    // is forgotten is at worst sent again.
    let mut gone = 0;
    while gone < count && board[gone].start.seq_le(una) {
        gone += 1;
    }
    if gone > 0 {
        board.copy_within(gone..count, 0);
        ps.sack.count -= gone as u8;
    }
    let sb = &mut ps.sack;
    if una.seq_lt(sb.high_rxt) {
        // snd_una moved onto a hole retransmitted at some time up to the latest
        // retransmission: take the latest, which can only make the loss test later.
        rec.una_rxt_snd_max = rec.rxt_snd_max;
    }
    if sb.has(sack_flags::IN_RECOVERY) {
        if una.seq_ge(rec.recovery_point) {
            // RFC 6675 5 (A): a cumulative ACK of the RecoveryPoint ends recovery.
            sb.set(sack_flags::IN_RECOVERY | sack_flags::RXT_FIRST, false);
        } else if una.seq_ge(sb.high_rxt) && !sb.has(sack_flags::RXT_FIRST) {
            // A partial ACK that covers every retransmission so far: whatever was
            // outstanding at entry and is neither acknowledged nor SACKed was sent before
            // those retransmissions and is lost (RFC 6582 3.2 step 5 retransmits the next
            // hole at once; this lets NextSeg() retransmit all of them within cwnd, which
            // a receiver that keeps few or no out-of-order intervals needs).
            rec.lost_below = rec.lost_below.max(rec.recovery_point);
        }
    }
    if sb.has(sack_flags::AFTER_RTO) && una.seq_ge(rec.recovery_point) {
        sb.set(sack_flags::AFTER_RTO, false);
    }
}

/// The boundary below which IsLost() holds for every unSACKed sequence number (RFC 6675 4:
/// DupThresh discontiguous SACKed ranges, or more than (DupThresh - 1) * SMSS SACKed bytes,
/// above it). IsLost() is monotone, so one boundary describes it. snd_una when none.
#[inline]
fn sack_boundary(ps: &ProtoState, rec: &RecoveryState, board: &[SackedRange]) -> SeqNumber {
    let used = &board[..usize::from(ps.sack.count).min(board.len())];
    let dup_thresh = dup_thresh(rec);
    let threshold = (dup_thresh - 1) * u32::from(ps.mss);
    let mut bytes = 0u32;
    for (n, r) in used.iter().rev().enumerate() {
        bytes = bytes.saturating_add(r.end.diff(r.start) as u32);
        if n as u32 + 1 >= dup_thresh || bytes > threshold {
            return r.start;
        }
    }
    ps.snd_una
}

/// Lost retransmissions, which RFC 6675 leaves to the timer: when DupThresh worth of data
/// sent after the latest retransmission is SACKed (IsLost() of the sequence number that was
/// next to send then), every retransmission before it had time to arrive, so the holes
/// still unSACKed below HighRxt lost theirs. HighRxt goes back to snd_una and NextSeg()
/// retransmits them again (as Linux does with its per-segment retransmission marks).
/// Returns whether that happened.
pub(crate) fn detect_lost_retransmissions(
    ps: &mut ProtoState,
    rec: &mut RecoveryState,
    board: &[SackedRange],
) -> bool {
    if !repairing_in_recovery(ps) {
        return false;
    }
    let sb = &ps.sack;
    if !rec.rxt_snd_max.seq_gt(sb.high_rxt) || !sacked_beyond(ps, rec, board, rec.rxt_snd_max) {
        // Under steady loss new retransmissions keep moving rxt_snd_max on, and the test
        // above may never pass while the hole at snd_una, whose retransmission was lost,
        // holds the window until the timer fires. Its own test: data sent after its
        // retransmission is SACKed.
        let una_lost = rec.una_rxt_snd_max.seq_gt(ps.snd_una)
            && sacked_beyond(ps, rec, board, rec.una_rxt_snd_max);
        if una_lost {
            resend_una(ps, rec);
        }
        return una_lost;
    }
    // snd_una itself is below HighRxt and never SACKed: NextSeg() retransmitted every hole
    // below HighRxt, and at least that one is still missing.
    ps.sack.high_rxt = ps.snd_una;
    rec.rxt_snd_max = ps.snd_una;
    true
}

/// RFC 8985 6.2's test for the retransmission of the segment at snd_una, when the
/// retransmission timer finds recovery stuck there: data sent after it was SACKed, so the
/// path delivers and that retransmission, older than a round trip, is lost. Marks it to go
/// again at once, the recovery and its window kept (RACK would have found it a reordering
/// window after a round trip; the timer found it later). False when nothing says so: the
/// timeout is then a timeout.
pub(crate) fn una_retransmission_overtaken(
    ps: &mut ProtoState,
    rec: &mut RecoveryState,
    board: &[SackedRange],
) -> bool {
    let sb = &ps.sack;
    let used = &board[..usize::from(sb.count).min(board.len())];
    let overtaken = repairing_in_recovery(ps)
        && rec.una_rxt_snd_max.seq_gt(ps.snd_una)
        && used
            .last()
            .is_some_and(|r| r.end.seq_gt(rec.una_rxt_snd_max));
    if overtaken {
        resend_una(ps, rec);
    }
    overtaken
}

/// In recovery, with the segment at snd_una retransmitted already and not about to go again.
#[inline]
fn repairing_in_recovery(ps: &ProtoState) -> bool {
    let sb = &ps.sack;
    sb.has(sack_flags::IN_RECOVERY)
        && !sb.has(sack_flags::RXT_FIRST)
        && sb.high_rxt.seq_gt(ps.snd_una)
}

/// The retransmission of the segment at snd_una was lost: it goes again at once (as
/// RXT_FIRST, one segment), and its loss test starts over from what is sent after it.
#[inline]
fn resend_una(ps: &mut ProtoState, rec: &mut RecoveryState) {
    rec.una_rxt_snd_max = ps.snd_max;
    ps.sack.set(sack_flags::RXT_FIRST, true);
}

/// Whether DupThresh discontiguous ranges, or more than (DupThresh - 1) * SMSS bytes,
/// are SACKed at or beyond `seq` (IsLost() of the sequence number just below it).
fn sacked_beyond(
    ps: &ProtoState,
    rec: &RecoveryState,
    board: &[SackedRange],
    seq: SeqNumber,
) -> bool {
    let used = &board[..usize::from(ps.sack.count).min(board.len())];
    let dup_thresh = dup_thresh(rec);
    let threshold = (dup_thresh - 1) * u32::from(ps.mss);
    let mut bytes = 0u32;
    for (n, r) in used.iter().rev().enumerate() {
        if r.end.seq_le(seq) {
            break;
        }
        bytes = bytes.saturating_add(r.end.diff(r.start.max(seq)) as u32);
        if n as u32 + 1 >= dup_thresh || bytes > threshold {
            return true;
        }
    }
    false
}

/// The boundary: IsLost() by DupThresh (RFC 6675 4), and what [`SackSender::lost_below`]
/// marks (recovery's rules, and RACK's by time, RFC 8985 6.2), below what the scoreboard
/// can judge ([`trusted_below`]).
#[inline]
fn lost_boundary(ps: &ProtoState, rec: &RecoveryState, board: &[SackedRange]) -> SeqNumber {
    let b = sack_boundary(ps, rec, board);
    let marked = rec.lost_below;
    let b = if marked.seq_gt(b) && marked.seq_le(ps.snd_max) {
        marked
    } else {
        b
    };
    b.min(trusted_below(ps, rec))
}

/// Where the scoreboard stops knowing what arrived: snd_max, or, after SACKed ranges were
/// lost to its bound, the start of the region they were in. There a byte that looks
/// unSACKed may have arrived, and marking it lost (RACK by time, the partial-ACK rule)
/// would send it again for nothing; only the segment at snd_una, which the cumulative ACK
/// shows missing, is lost there (RFC 6582 3.2 step 5), one partial ACK at a time.
#[inline]
fn trusted_below(ps: &ProtoState, rec: &RecoveryState) -> SeqNumber {
    if !rec.forgotten_to.seq_gt(ps.snd_una) {
        return ps.snd_max;
    }
    if rec.forgotten_from.seq_gt(ps.snd_una) {
        rec.forgotten_from
    } else {
        (ps.snd_una + u32::from(ps.mss)).min(rec.forgotten_to)
    }
}

/// RFC 6675 IsLost(seq) for an unSACKed `seq`.
#[inline]
pub(crate) fn is_lost(
    ps: &ProtoState,
    rec: &RecoveryState,
    board: &[SackedRange],
    seq: SeqNumber,
) -> bool {
    seq.seq_lt(lost_boundary(ps, rec, board))
}

/// The unSACKed holes in [snd_una, snd_max), in order.
fn holes<'a>(
    ps: &ProtoState,
    board: &'a [SackedRange],
) -> impl Iterator<Item = (SeqNumber, SeqNumber)> + 'a {
    let used = &board[..usize::from(ps.sack.count).min(board.len())];
    let (una, max) = (ps.snd_una, ps.snd_max);
    let mut prev = una;
    let mut ranges = used.iter();
    let mut done = false;
    core::iter::from_fn(move || {
        while !done {
            let (start, end) = match ranges.next() {
                Some(r) => (r.start, r.end),
                None => {
                    done = true;
                    (max, max)
                }
            };
            let hole = (prev, start.min(max));
            prev = prev.max(end);
            if hole.0.seq_lt(hole.1) {
                return Some(hole);
            }
        }
        None
    })
}

/// RFC 6675 SetPipe(): the sender's estimate of the bytes in the network. Every unSACKed
/// byte in [snd_una, snd_max) counts once unless it is lost, and once more if it was
/// retransmitted in this recovery (below HighRxt).
pub(crate) fn pipe(ps: &ProtoState, rec: &RecoveryState, board: &[SackedRange]) -> u32 {
    let lost = lost_boundary(ps, rec, board);
    let high_rxt = ps.sack.high_rxt.max(ps.snd_una);
    let mut pipe = 0u32;
    for (a, b) in holes(ps, board) {
        let not_lost = b.diff(a.max(lost)).max(0) as u32;
        let rxt = b.min(high_rxt).diff(a).max(0) as u32;
        pipe = pipe.saturating_add(not_lost).saturating_add(rxt);
    }
    pipe
}

/// Starts SACK-based loss recovery (RFC 6675 5 step 4) if this connection uses it: the
/// caller has told congestion control (step 4.2). Returns false for go-back-N.
pub(crate) fn enter_recovery(ps: &mut ProtoState, rec: &mut RecoveryState) -> bool {
    // Nothing outstanding: a later ACK of the same batch (the protocol stage runs over the
    // whole batch before this stage) acknowledged everything; no recovery could end.
    if !may_enter_recovery(ps) || !ps.snd_una.seq_lt(ps.snd_max) {
        return false;
    }
    let sb = &mut ps.sack;
    // RFC 6675 5 step 4.1: RecoveryPoint = HighData.
    rec.recovery_point = ps.snd_max;
    // Data sent during the last recovery, above its RecoveryPoint, may have been lost and
    // retransmitted already: those retransmissions are in flight and the holes they fill
    // are what set this recovery off. They are not sent again (as Linux keeps its
    // retransmitted marks), unless found lost (`detect_lost_retransmissions`); nor can
    // D-SACKs judge a recovery whose repairs began before it.
    let repairing = sb.high_rxt.seq_gt(ps.snd_una) && sb.high_rxt.seq_le(ps.snd_max);
    // What RACK found lost before the recovery (RFC 8985 6.2) stays lost.
    let rack = rec.lost_below.max(ps.snd_una).min(ps.snd_max);
    if repairing {
        rec.lost_below = rack;
    } else {
        sb.high_rxt = ps.snd_una;
        // Step 4.3: the first segment is retransmitted now, taken as lost whatever the
        // scoreboard says (three plain duplicate ACKs may carry no SACK block).
        rec.lost_below = rack.max(ps.snd_una + u32::from(ps.mss));
        sb.set(sack_flags::RXT_FIRST, true);
    }
    sb.set(sack_flags::IN_RECOVERY, true);
    sb.set(sack_flags::TLP_PROBE, false);
    sb.set(sack_flags::UNDO_ARMED, !repairing);
    rec.undo_rxt = 0;
    rec.reorder_seen = 0;
    // New data goes out from HighData; the scoreboard, not snd_nxt, says what to resend.
    ps.snd_nxt = ps.snd_max;
    true
}

/// RFC 6675 5.1 on a retransmission timeout: recovery ends, RecoveryPoint = HighData, and
/// none starts again until snd_una passes it. RFC 2018 8: the SACKed ranges are forgotten,
/// as the receiver may have reneged; go-back-N resends from snd_una, skipping what new
/// SACK blocks report.
pub(crate) fn on_timeout(ps: &mut ProtoState, rec: &mut RecoveryState) {
    let sb = &mut ps.sack;
    if !sb.has(sack_flags::ENABLED) {
        return;
    }
    sb.count = 0;
    rec.recovery_point = ps.snd_max;
    // The marks of lost data go with the recovery: go-back-N resends all. So does what
    // the scoreboard forgot: it forgets everything now.
    rec.lost_below = ps.snd_una;
    rec.forgotten_to = ps.snd_una;
    // The timeout's go-back-N resends what D-SACKs would count: undo is the timeout's
    // detection's business now (RFC 3522, 5682).
    sb.set(
        sack_flags::IN_RECOVERY | sack_flags::RXT_FIRST | sack_flags::UNDO_ARMED,
        false,
    );
    sb.set(sack_flags::AFTER_RTO, true);
}

/// The timeout proved spurious (RFC 3522/5682): no recovery point to wait for.
pub(crate) fn on_spurious_timeout(ps: &mut ProtoState) {
    ps.sack.set(sack_flags::AFTER_RTO, false);
}

/// Bytes the scoreboard holds SACKed above snd_una.
pub(crate) fn sacked_bytes(ps: &ProtoState, board: &[SackedRange]) -> u32 {
    board[..usize::from(ps.sack.count).min(board.len())]
        .iter()
        .map(|r| {
            let start = if r.start.seq_lt(ps.snd_una) {
                ps.snd_una
            } else {
                r.start
            };
            r.end.diff(start).max(0) as u32
        })
        .fold(0u32, u32::saturating_add)
}

/// UnSACKed bytes of [from, to).
pub(crate) fn unsacked_bytes(
    ps: &ProtoState,
    board: &[SackedRange],
    from: SeqNumber,
    to: SeqNumber,
) -> u32 {
    holes(ps, board)
        .map(|(a, b)| b.min(to).diff(a.max(from)).max(0) as u32)
        .fold(0u32, u32::saturating_add)
}

/// The highest sequence number the scoreboard reports SACKed, if any.
pub(crate) fn highest_sacked(ps: &ProtoState, board: &[SackedRange]) -> Option<SeqNumber> {
    board[..usize::from(ps.sack.count).min(board.len())]
        .iter()
        .map(|r| r.end)
        .reduce(|a, b| if b.seq_gt(a) { b } else { a })
}

/// What the TX workflow sends next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// New data (or a FIN, or go-back-N): commit with `tx::commit`.
    Send(Segment),
    /// A retransmission chosen by NextSeg() in recovery: commit with
    /// [`commit_retransmission`].
    Retransmit(Segment),
    /// A tail loss probe (RFC 8985 7.3): commit with `tlp::commit_probe`.
    Probe(Segment),
}

/// The next segment to send, at most `max_len` payload bytes (the MSS, or more for a
/// segmentation-offload device): NextSeg() in recovery, else the usual segment from snd_nxt
/// (after a timeout, go-back-N stepping over SACKed ranges).
#[inline]
pub(crate) fn next_segment(
    ps: &mut ProtoState,
    rec: &RecoveryState,
    board: &[SackedRange],
    max_len: u32,
) -> Option<Next> {
    if ps.sack.flags & (sack_flags::TLP_PROBE | sack_flags::IN_RECOVERY) == sack_flags::TLP_PROBE {
        match super::tlp::probe_segment(ps) {
            Some(seg) => return Some(Next::Probe(seg)),
            None => ps.sack.set(sack_flags::TLP_PROBE, false),
        }
    }
    if ps.sack.has(sack_flags::IN_RECOVERY) {
        if ps.snd_una.seq_lt(rec.recovery_point) {
            return next_seg(ps, rec, board, max_len);
        }
        // Recovery must not outlive its RecoveryPoint (RFC 6675 5 (A)), whatever order
        // the stages saw a batch's ACKs in.
        ps.sack
            .set(sack_flags::IN_RECOVERY | sack_flags::RXT_FIRST, false);
    }
    if !ps.snd_nxt.seq_lt(ps.snd_max) {
        // dupacks first: an ACK that is no duplicate leaves the cold row alone.
        if ps.sack.has(sack_flags::ENABLED)
            && ps.dupacks > 0
            && u32::from(ps.dupacks) < dup_thresh(rec)
        {
            // RFC 6675 5 step 3, RFC 3042 (RFC 5681 3.2 step 1) Limited Transmit: on the
            // first DupThresh - 1 duplicate ACKs a new segment may go if the flight stays
            // within cwnd + that many SMSS (RFC 4653 4.2 extends it to a raised DupThresh).
            // Its ACK is the duplicate that a small window would otherwise lack, leaving
            // loss to the retransmission timer.
            let extra = u32::from(ps.dupacks) * u32::from(ps.mss);
            let window = ps.snd_wnd.min(ps.cwnd.saturating_add(extra));
            let usable = window.saturating_sub(ps.in_flight());
            return tx::segment_within(ps, max_len.min(u32::from(ps.mss)), usable).map(Next::Send);
        }
        return tx::next_segment(ps, max_len).map(Next::Send);
    }
    if ps.sack.count == 0 {
        return tx::next_segment(ps, max_len).map(Next::Send);
    }
    // Go-back-N after a timeout: what the receiver SACKed since need not go again
    // (RFC 6675 5.1 lets Update() inform the retransmissions after an RTO).
    let used = &board[..usize::from(ps.sack.count).min(board.len())];
    let mut limit = ps.snd_max;
    for r in used {
        if r.end.seq_le(ps.snd_nxt) {
            continue;
        }
        if r.start.seq_le(ps.snd_nxt) {
            ps.snd_nxt = r.end.min(ps.snd_max);
            continue;
        }
        limit = r.start;
        break;
    }
    let mut seg = tx::next_segment(ps, max_len)?;
    if ps.snd_nxt.seq_lt(limit) && (seg.seq + seg.len).seq_gt(limit) {
        seg.len = limit.diff(seg.seq) as u32;
        seg.fin = false;
        seg.push = false;
    }
    Some(Next::Send(seg))
}

/// RFC 6675 NextSeg() under the pipe limit of step (C).
fn next_seg(
    ps: &ProtoState,
    rec: &RecoveryState,
    board: &[SackedRange],
    max_len: u32,
) -> Option<Next> {
    let mss = u32::from(ps.mss).max(1);
    let from = ps.sack.high_rxt.max(ps.snd_una);
    if ps.sack.has(sack_flags::RXT_FIRST) {
        // Step 4.3: the segment at snd_una goes first, whatever pipe says.
        let (a, b) = holes(ps, board).next()?;
        return tx::retransmission(ps, a, b, mss).map(Next::Retransmit);
    }
    // Step (C): send only while cwnd - pipe >= 1 SMSS.
    let room = ps.cwnd.saturating_sub(pipe(ps, rec, board));
    if room < mss {
        return None;
    }
    let cap = max_len.max(mss).min(room);
    let lost = lost_boundary(ps, rec, board);
    // Rule 1: the first unSACKed sequence number above HighRxt that IsLost().
    for (a, b) in holes(ps, board) {
        if b.seq_le(from) {
            continue;
        }
        let s = a.max(from);
        if !s.seq_lt(lost) {
            break;
        }
        return tx::retransmission(ps, s, b.min(lost), cap).map(Next::Retransmit);
    }
    // Rule 2: new data, as much as the receive window and cwnd - pipe allow.
    let rwnd = ps
        .snd_wnd
        .saturating_sub(ps.snd_max.diff(ps.snd_una).max(0) as u32);
    if ps.snd_nxt == ps.snd_max {
        if let Some(seg) = tx::segment_within(ps, max_len, room.min(rwnd)) {
            return Some(Next::Send(seg));
        }
    }
    // Rule 3: an unSACKed sequence number above HighRxt below the highest SACKed one.
    let count = usize::from(ps.sack.count).min(board.len());
    let highest = board[..count].last()?.start.min(trusted_below(ps, rec));
    for (a, b) in holes(ps, board) {
        if b.seq_le(from) {
            continue;
        }
        let s = a.max(from);
        if !s.seq_lt(highest) {
            break;
        }
        return tx::retransmission(ps, s, b.min(highest), cap).map(Next::Retransmit);
    }
    // Rule 4 (RescueRxt) is optional and not used: the timer covers the tail.
    None
}

/// Records that NextSeg()'s retransmission `seg` was sent (RFC 6675 5 step C.2: HighRxt).
#[inline]
pub(crate) fn commit_retransmission(ps: &mut ProtoState, rec: &mut RecoveryState, seg: &Segment) {
    let end = seg.seq + seg.len + seg.fin as u32;
    let sb = &mut ps.sack;
    if end.seq_gt(sb.high_rxt) {
        sb.high_rxt = end;
    }
    rec.rxt_snd_max = ps.snd_max;
    if seg.seq == ps.snd_una {
        rec.una_rxt_snd_max = ps.snd_max;
    }
    sb.set(sack_flags::RXT_FIRST, false);
    if sb.has(sack_flags::UNDO_ARMED) {
        // Counted in segments, as D-SACKs are: a retransmission may be several (TSO).
        let segments = seg.len.div_ceil(u32::from(ps.mss).max(1)).max(1);
        match u16::try_from(segments)
            .ok()
            .and_then(|n| rec.undo_rxt.checked_add(n))
        {
            Some(n) => rec.undo_rxt = n,
            // Too many to account for: no undo for this recovery.
            None => sb.set(sack_flags::UNDO_ARMED, false),
        }
    }
    ps.set(flags::FORCE_SEND, false);
}

#[cfg(test)]
mod tests;
