//! Tests of the SACK scoreboard and RFC 6675 recovery.

use super::*;

const MSS: u32 = 1000;

/// A sender with 20 segments in flight from sequence 0 and a 8-range scoreboard.
fn conn() -> (ProtoState, RecoveryState, [SackedRange; 8]) {
    let ps = ProtoState {
        snd_una: SeqNumber(0),
        snd_nxt: SeqNumber(20 * MSS),
        snd_max: SeqNumber(20 * MSS),
        tx_end: SeqNumber(40 * MSS),
        snd_wnd: 100 * MSS,
        max_snd_wnd: 100 * MSS,
        cwnd: 20 * MSS,
        mss: MSS as u16,
        sack: SackSender {
            flags: sack_flags::ENABLED,
            ..Default::default()
        },
        ..Default::default()
    };
    (ps, RecoveryState::default(), [SackedRange::default(); 8])
}

fn seg(n: u32) -> SeqNumber {
    SeqNumber(n * MSS)
}

fn ranges(ps: &ProtoState, board: &[SackedRange]) -> Vec<(u32, u32)> {
    board[..ps.sack.count as usize]
        .iter()
        .map(|r| (r.start.0 / MSS, r.end.0 / MSS))
        .collect()
}

#[test]
fn rfc6675_update_merges_and_counts_newly_sacked_bytes() {
    let (mut ps, mut rec, mut b) = conn();
    let (n, _) = update(
        &mut ps,
        &mut rec,
        &mut b,
        &[(seg(5), seg(7)), (seg(9), seg(10))],
    );
    assert_eq!(n, 3 * MSS);
    let (n, _) = update(&mut ps, &mut rec, &mut b, &[(seg(6), seg(9))]);
    assert_eq!(n, 2 * MSS, "only 7..9 is new");
    assert_eq!(ranges(&ps, &b), vec![(5, 10)]);
    let (n, _) = update(&mut ps, &mut rec, &mut b, &[(seg(5), seg(10))]);
    assert_eq!(n, 0);
}

#[test]
fn rfc2018_invalid_blocks_are_counted_and_ignored() {
    let (mut ps, mut rec, mut b) = conn();
    ps.snd_una = seg(2);
    let blocks = [
        (seg(5), seg(4)),   // reversed
        (seg(1), seg(2)),   // at or below snd_una: old
        (seg(2), seg(3)),   // claims snd_una
        (seg(19), seg(21)), // beyond snd_max
    ];
    let (n, r) = update(&mut ps, &mut rec, &mut b, &blocks);
    assert_eq!(n, 0);
    assert_eq!((r.received, r.invalid, r.old, r.overflow), (4, 3, 1, 0));
    assert_eq!(ps.sack.count, 0);
}

#[test]
fn scoreboard_is_bounded_and_keeps_the_lowest_ranges() {
    let (mut ps, mut rec, mut b) = conn();
    let mut board = &mut b[..2];
    update(
        &mut ps,
        &mut rec,
        board,
        &[(seg(4), seg(5)), (seg(8), seg(9))],
    );
    let (n, r) = update(&mut ps, &mut rec, board, &[(seg(12), seg(13))]);
    assert_eq!((n, r.overflow), (0, 1), "above all and no room: dropped");
    let (n, r) = update(&mut ps, &mut rec, board, &[(seg(2), seg(3))]);
    assert_eq!((n, r.overflow), (MSS, 1), "below: evicts the highest");
    board = &mut b[..2];
    assert_eq!(ranges(&ps, board), vec![(2, 3), (4, 5)]);
}

#[test]
fn ranges_the_bounded_scoreboard_forgot_are_not_taken_as_lost() {
    // Issue 22: a receiver with more out-of-order intervals than the scoreboard has ranges
    // SACKs what the scoreboard cannot keep; marking those bytes lost resends them needlessly.
    let (mut ps, mut rec, mut b) = conn();
    let board = &mut b[..2];
    update(
        &mut ps,
        &mut rec,
        board,
        &[(seg(4), seg(5)), (seg(6), seg(7))],
    );
    let (_, r) = update(&mut ps, &mut rec, board, &[(seg(10), seg(12))]);
    assert_eq!(r.overflow, 1);
    assert!(enter_recovery(&mut ps, &mut rec));
    // RACK, or the partial-ACK rule, marks everything outstanding lost.
    rec.lost_below = seg(20);
    assert!(
        is_lost(&ps, &rec, board, seg(9)),
        "below the forgotten range"
    );
    assert!(
        !is_lost(&ps, &rec, board, seg(10)),
        "SACKed, then forgotten"
    );
    assert!(
        !is_lost(&ps, &rec, board, seg(14)),
        "above it: not known either"
    );
    // The cumulative ACK passes the forgotten range: the scoreboard is trusted again.
    ps.snd_una = seg(12);
    on_cumulative_ack(&mut ps, &mut rec, board, seg(0));
    assert!(is_lost(&ps, &rec, board, seg(14)));
}

#[test]
fn rfc6675_is_lost_needs_dupthresh_ranges_or_bytes_above() {
    let (mut ps, mut rec, mut b) = conn();
    update(&mut ps, &mut rec, &mut b, &[(seg(3), seg(5))]);
    assert!(!is_lost(&ps, &rec, &b, seg(0)), "2 segments SACKed above");
    update(&mut ps, &mut rec, &mut b, &[(seg(6), seg(7))]);
    assert!(is_lost(&ps, &rec, &b, seg(0)), "3 segments above");
    assert!(is_lost(&ps, &rec, &b, seg(2)));
    assert!(
        !is_lost(&ps, &rec, &b, seg(5)),
        "one segment above the hole at 5"
    );
    // Three small discontiguous ranges are enough too.
    let (mut ps, mut rec, mut b) = conn();
    update(
        &mut ps,
        &mut rec,
        &mut b,
        &[(seg(2), seg(2) + 10u32), (seg(4), seg(4) + 10u32)],
    );
    assert!(!is_lost(&ps, &rec, &b, seg(0)));
    update(&mut ps, &mut rec, &mut b, &[(seg(6), seg(6) + 10u32)]);
    assert!(is_lost(&ps, &rec, &b, seg(0)));
}

#[test]
fn rfc6675_recovery_retransmits_holes_first_then_new_data_under_pipe() {
    let (mut ps, mut rec, mut b) = conn();
    // Segments 0, 5 and 9 lost; the rest of 0..20 SACKed.
    update(
        &mut ps,
        &mut rec,
        &mut b,
        &[(seg(1), seg(5)), (seg(6), seg(9)), (seg(10), seg(20))],
    );
    ps.cwnd = 10 * MSS;
    assert!(enter_recovery(&mut ps, &mut rec));
    assert_eq!(rec.recovery_point, seg(20));
    let mut sent = vec![];
    while let Some(next) = next_segment(&mut ps, &rec, &b, MSS) {
        match next {
            Next::Retransmit(s) => {
                commit_retransmission(&mut ps, &mut rec, &s);
                sent.push(("rxt", s.seq.0 / MSS, s.len));
            }
            Next::Send(s) => {
                tx::commit(&mut ps, &s, 0);
                sent.push(("new", s.seq.0 / MSS, s.len));
            }
            Next::Probe(_) => panic!("no probe in recovery"),
        }
        assert!(sent.len() < 50);
    }
    // Pipe: the three lost holes are not in flight, their retransmissions are: cwnd 10
    // lets 3 retransmissions and 7 new segments out.
    let want: Vec<_> = [("rxt", 0), ("rxt", 5), ("rxt", 9)]
        .into_iter()
        .chain((20..27).map(|n| ("new", n)))
        .map(|(k, n)| (k, n, MSS))
        .collect();
    assert_eq!(sent, want);
    assert_eq!(pipe(&ps, &rec, &b), 10 * MSS);
    // A partial ACK to 5, then the ACK of everything up to the RecoveryPoint ends it.
    ps.snd_una = seg(5);
    on_cumulative_ack(&mut ps, &mut rec, &mut b, seg(0));
    assert!(in_recovery(&ps));
    ps.snd_una = seg(20);
    on_cumulative_ack(&mut ps, &mut rec, &mut b, seg(0));
    assert!(!in_recovery(&ps));
    assert_eq!(ps.sack.count, 0);
}

#[test]
fn without_sack_blocks_a_partial_ack_marks_the_window_lost() {
    // A receiver that keeps no out-of-order data SACKs nothing: after the first
    // retransmission is acknowledged the rest of the window goes within cwnd.
    let (mut ps, mut rec, b) = conn();
    ps.cwnd = 4 * MSS;
    assert!(enter_recovery(&mut ps, &mut rec));
    let Some(Next::Retransmit(s)) = next_segment(&mut ps, &rec, &b, MSS) else {
        panic!("first retransmission")
    };
    commit_retransmission(&mut ps, &mut rec, &s);
    assert_eq!(next_segment(&mut ps, &rec, &b, MSS), None, "pipe is full");
    let mut b = b;
    ps.snd_una = seg(1);
    on_cumulative_ack(&mut ps, &mut rec, &mut b, seg(0));
    let mut rxt = vec![];
    while let Some(Next::Retransmit(s)) = next_segment(&mut ps, &rec, &b, MSS) {
        commit_retransmission(&mut ps, &mut rec, &s);
        rxt.push(s.seq.0 / MSS);
    }
    assert_eq!(rxt, vec![1, 2, 3, 4]);
}

#[test]
fn a_lost_retransmission_goes_again_once_later_data_is_sacked() {
    let (mut ps, mut rec, mut b) = conn();
    update(&mut ps, &mut rec, &mut b, &[(seg(1), seg(5))]);
    ps.cwnd = 10 * MSS;
    assert!(enter_recovery(&mut ps, &mut rec));
    let Some(Next::Retransmit(s)) = next_segment(&mut ps, &rec, &b, MSS) else {
        panic!("first retransmission")
    };
    commit_retransmission(&mut ps, &mut rec, &s);
    assert_eq!(rec.rxt_snd_max, seg(20));
    // Data sent before the retransmission is SACKed: nothing to conclude.
    update(&mut ps, &mut rec, &mut b, &[(seg(5), seg(20))]);
    assert!(!detect_lost_retransmissions(&mut ps, &mut rec, &b));
    // Three segments sent after it are SACKed, snd_una has not moved: it was lost.
    ps.snd_max = seg(23);
    ps.snd_nxt = seg(23);
    update(&mut ps, &mut rec, &mut b, &[(seg(20), seg(23))]);
    assert!(detect_lost_retransmissions(&mut ps, &mut rec, &b));
    let Some(Next::Retransmit(s)) = next_segment(&mut ps, &rec, &b, MSS) else {
        panic!("the hole again")
    };
    assert_eq!((s.seq, s.len), (seg(0), MSS));
}

#[test]
fn rfc6675_5_1_timeout_resets_the_scoreboard_and_blocks_recovery() {
    let (mut ps, mut rec, mut b) = conn();
    update(&mut ps, &mut rec, &mut b, &[(seg(3), seg(9))]);
    assert!(enter_recovery(&mut ps, &mut rec));
    on_timeout(&mut ps, &mut rec);
    assert_eq!(ps.sack.count, 0);
    assert!(!in_recovery(&ps) && !may_enter_recovery(&ps));
    ps.snd_una = seg(20);
    on_cumulative_ack(&mut ps, &mut rec, &mut b, seg(0));
    assert!(may_enter_recovery(&ps));
}

#[test]
fn go_back_n_after_a_timeout_steps_over_sacked_ranges() {
    let (mut ps, mut rec, mut b) = conn();
    ps.snd_nxt = seg(1);
    ps.cwnd = 40 * MSS;
    update(&mut ps, &mut rec, &mut b, &[(seg(2), seg(4))]);
    let mut sent = vec![];
    while let Some(Next::Send(s)) = next_segment(&mut ps, &rec, &b, MSS) {
        tx::commit(&mut ps, &s, 0);
        sent.push(s.seq.0 / MSS);
        if s.seq == seg(6) {
            break;
        }
    }
    assert_eq!(sent, vec![1, 4, 5, 6]);
}

#[test]
fn a_recovery_that_d_sacks_prove_needless_raises_dup_thresh_to_the_reordering_seen() {
    // Segment 0 is held back; 1..12 are SACKed and set off a recovery.
    let (mut ps, mut rec, mut b) = conn();
    assert_eq!(dup_thresh(&rec), DUP_THRESH);
    update(&mut ps, &mut rec, &mut b, &[(seg(1), seg(12))]);
    assert!(is_lost(&ps, &rec, &b, seg(0)));
    assert!(enter_recovery(&mut ps, &mut rec));
    let Some(Next::Retransmit(s)) = next_segment(&mut ps, &rec, &b, MSS) else {
        panic!("first retransmission")
    };
    commit_retransmission(&mut ps, &mut rec, &s);
    // The original arrives: the cumulative ACK jumps over the 11 SACKed segments.
    ps.snd_una = seg(12);
    on_cumulative_ack(&mut ps, &mut rec, &mut b, seg(0));
    assert_eq!(
        dup_thresh(&rec),
        DUP_THRESH,
        "not yet known to be reordering"
    );
    // The retransmission arrives as a duplicate: D-SACK, recovery needless.
    let (_, report) = update(&mut ps, &mut rec, &mut b, &[(seg(0), seg(1))]);
    assert!(report.spurious_recovery);
    assert_eq!(dup_thresh(&rec), 12);
    ps.snd_una = seg(20);
    on_cumulative_ack(&mut ps, &mut rec, &mut b, seg(12));
    assert!(!in_recovery(&ps));
    // Eleven segments SACKed above a hole no longer make it lost; twelve do.
    ps.snd_max = seg(40);
    ps.snd_nxt = seg(40);
    update(&mut ps, &mut rec, &mut b, &[(seg(21), seg(32))]);
    assert!(!is_lost(&ps, &rec, &b, seg(20)));
    update(&mut ps, &mut rec, &mut b, &[(seg(32), seg(33))]);
    assert!(is_lost(&ps, &rec, &b, seg(20)));
}

#[test]
fn a_real_loss_leaves_dup_thresh_alone() {
    let (mut ps, mut rec, mut b) = conn();
    update(&mut ps, &mut rec, &mut b, &[(seg(1), seg(12))]);
    assert!(enter_recovery(&mut ps, &mut rec));
    let Some(Next::Retransmit(s)) = next_segment(&mut ps, &rec, &b, MSS) else {
        panic!("first retransmission")
    };
    commit_retransmission(&mut ps, &mut rec, &s);
    ps.snd_una = seg(12);
    on_cumulative_ack(&mut ps, &mut rec, &mut b, seg(0));
    // No D-SACK ever comes: the retransmission was needed.
    ps.snd_una = seg(20);
    on_cumulative_ack(&mut ps, &mut rec, &mut b, seg(12));
    assert!(!in_recovery(&ps));
    assert_eq!(dup_thresh(&rec), DUP_THRESH);
}

#[test]
fn a_lost_retransmission_at_snd_una_goes_again_while_later_retransmissions_continue() {
    // Holes at 0, 5 and 9; cwnd lets all three go, then new data.
    let (mut ps, mut rec, mut b) = conn();
    update(
        &mut ps,
        &mut rec,
        &mut b,
        &[(seg(1), seg(5)), (seg(6), seg(9)), (seg(10), seg(20))],
    );
    ps.cwnd = 10 * MSS;
    assert!(enter_recovery(&mut ps, &mut rec));
    let Some(Next::Retransmit(s)) = next_segment(&mut ps, &rec, &b, MSS) else {
        panic!("first retransmission")
    };
    commit_retransmission(&mut ps, &mut rec, &s);
    assert_eq!(rec.una_rxt_snd_max, seg(20));
    // New data goes, and another hole is retransmitted later: rxt_snd_max moves on.
    ps.snd_max = seg(24);
    ps.snd_nxt = seg(24);
    let Some(Next::Retransmit(s)) = next_segment(&mut ps, &rec, &b, MSS) else {
        panic!("second retransmission")
    };
    assert_eq!(s.seq, seg(5));
    commit_retransmission(&mut ps, &mut rec, &s);
    assert_eq!(rec.rxt_snd_max, seg(24));
    // Three segments sent after the first retransmission (20..23) are SACKed; snd_una
    // has not moved: that one was lost, though not all data after the latest was SACKed.
    update(&mut ps, &mut rec, &mut b, &[(seg(20), seg(23))]);
    assert!(detect_lost_retransmissions(&mut ps, &mut rec, &b));
    let Some(Next::Retransmit(s)) = next_segment(&mut ps, &rec, &b, MSS) else {
        panic!("snd_una again")
    };
    assert_eq!((s.seq, s.len), (seg(0), MSS));
    commit_retransmission(&mut ps, &mut rec, &s);
    // The hole at 5 is not resent: its retransmission may yet arrive.
    assert_eq!(ps.sack.high_rxt, seg(6));
    assert!(!detect_lost_retransmissions(&mut ps, &mut rec, &b));
}

#[test]
fn a_recovery_that_begins_on_holes_already_retransmitted_does_not_resend_them() {
    // The last recovery retransmitted 20 (new data it had sent, lost) and ended when
    // snd_una reached its RecoveryPoint, 20.
    let (mut ps, mut rec, mut b) = conn();
    ps.snd_una = seg(20);
    ps.snd_max = seg(32);
    ps.snd_nxt = seg(32);
    ps.sack.high_rxt = seg(21);
    rec.rxt_snd_max = seg(28);
    rec.una_rxt_snd_max = seg(28);
    update(&mut ps, &mut rec, &mut b, &[(seg(21), seg(24))]);
    assert!(is_lost(&ps, &rec, &b, seg(20)));
    assert!(enter_recovery(&mut ps, &mut rec));
    // Nothing is resent at once, nor may D-SACKs of earlier repairs undo this one.
    assert!(!ps.sack.has(sack_flags::RXT_FIRST | sack_flags::UNDO_ARMED));
    ps.cwnd = 0;
    assert_eq!(next_segment(&mut ps, &rec, &b, MSS), None);
    // If data sent after that retransmission is SACKed, 20 goes again.
    ps.cwnd = 10 * MSS;
    update(&mut ps, &mut rec, &mut b, &[(seg(28), seg(31))]);
    assert!(detect_lost_retransmissions(&mut ps, &mut rec, &b));
    let Some(Next::Retransmit(s)) = next_segment(&mut ps, &rec, &b, MSS) else {
        panic!("the hole again")
    };
    assert_eq!(s.seq, seg(20));
}

#[test]
fn the_timer_finds_a_lost_retransmission_at_snd_una_once_one_later_segment_is_sacked() {
    let (mut ps, mut rec, mut b) = conn();
    update(&mut ps, &mut rec, &mut b, &[(seg(1), seg(20))]);
    ps.cwnd = 4 * MSS;
    assert!(enter_recovery(&mut ps, &mut rec));
    let Some(Next::Retransmit(s)) = next_segment(&mut ps, &rec, &b, MSS) else {
        panic!("first retransmission")
    };
    commit_retransmission(&mut ps, &mut rec, &s);
    // Nothing sent after it is SACKed: the timeout is a timeout.
    assert!(!una_retransmission_overtaken(&mut ps, &mut rec, &b));
    // One segment sent after it is SACKed (too few for DupThresh): it was lost.
    ps.snd_max = seg(21);
    ps.snd_nxt = seg(21);
    update(&mut ps, &mut rec, &mut b, &[(seg(20), seg(21))]);
    assert!(!detect_lost_retransmissions(&mut ps, &mut rec, &b));
    assert!(una_retransmission_overtaken(&mut ps, &mut rec, &b));
    assert!(in_recovery(&ps));
    let Some(Next::Retransmit(s)) = next_segment(&mut ps, &rec, &b, MSS) else {
        panic!("snd_una again")
    };
    assert_eq!(s.seq, seg(0));
    commit_retransmission(&mut ps, &mut rec, &s);
    // Once only until data sent after this one is SACKed.
    assert!(!una_retransmission_overtaken(&mut ps, &mut rec, &b));
}
