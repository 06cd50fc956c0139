//! SACK (RFC 2018) and SACK-based loss recovery (RFC 6675): the receiver's blocks (order,
//! content, bounded intervals, none at all) and the sender's scoreboard (valid, invalid and
//! hostile blocks, its bound, recovery retransmitting only holes), with a property test
//! that no SACK option makes the sender panic or send outside [snd_una, snd_max].

mod harness;

use harness::*;
use proptest::prelude::*;
use sluice_tcp::{Config, Recovery, Stack};
use sluice_wire::tcp::{SeqNumber, TcpOptions};

/// SACK-permitted, no timestamps: four SACK blocks fit in an option.
fn sack_opts() -> TcpOptions {
    TcpOptions {
        mss: Some(1460),
        sack_permitted: true,
        ..Default::default()
    }
}

/// A passive connection on `cfg` whose peer offered SACK (and timestamps if `ts`).
fn sack_conn(cfg: Config, ts: bool) -> (Stack, Conn) {
    let mut stack = stack_with(cfg);
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let opts = if ts {
        TcpOptions {
            timestamp: Some((1, 0)),
            ..sack_opts()
        }
    } else {
        sack_opts()
    };
    let c = passive_open(
        &mut stack,
        l,
        Peer::new(40000, LISTEN_PORT),
        ms(0),
        1000,
        opts,
        65535,
    );
    while stack.poll_event().is_some() {}
    (stack, c)
}

fn with_intervals(n: usize) -> Config {
    let mut cfg = config();
    cfg.ooo_intervals = n;
    cfg
}

/// The SACK blocks of `h` as offsets from `base`.
fn blocks(h: &sluice_wire::tcp::TcpHeader, base: SeqNumber) -> Vec<(i32, i32)> {
    h.options
        .sacks()
        .iter()
        .map(|&(l, r)| (l.diff(base), r.diff(base)))
        .collect()
}

/// Sends 100 bytes at `off` past the peer's next sequence number and returns the ACK.
fn ooo(stack: &mut Stack, c: &Conn, at: u64, off: u32) -> sluice_wire::tcp::TcpHeader {
    c.peer.send(
        stack,
        ms(at),
        c.data_seg(&[off as u8; 100]).seq(c.peer_nxt + off),
    );
    c.peer.recv_one(stack, ms(at)).0
}

#[test]
fn rfc2018_4_first_block_holds_the_latest_segment_then_the_most_recently_reported() {
    let (mut stack, c) = sack_conn(with_intervals(4), false);
    let base = c.peer_nxt;
    let h = ooo(&mut stack, &c, 1, 600);
    assert_eq!(h.ack, base);
    assert_eq!(blocks(&h, base), vec![(600, 700)]);
    let h = ooo(&mut stack, &c, 2, 200);
    assert_eq!(blocks(&h, base), vec![(200, 300), (600, 700)]);
    let h = ooo(&mut stack, &c, 3, 1400);
    assert_eq!(blocks(&h, base), vec![(1400, 1500), (200, 300), (600, 700)]);
    let h = ooo(&mut stack, &c, 4, 1000);
    assert_eq!(
        blocks(&h, base),
        vec![(1000, 1100), (1400, 1500), (200, 300), (600, 700)],
        "four blocks fit without timestamps"
    );
    // Data next to an interval widens it, and that block moves to the front.
    let h = ooo(&mut stack, &c, 5, 700);
    assert_eq!(
        blocks(&h, base),
        vec![(600, 800), (1000, 1100), (1400, 1500), (200, 300)]
    );
    // A segment bridging two intervals merges them into the first block.
    c.peer
        .send(&mut stack, ms(6), c.data_seg(&[9; 300]).seq(base + 1100u32));
    let (h, _) = c.peer.recv_one(&mut stack, ms(6));
    assert_eq!(blocks(&h, base), vec![(1000, 1500), (600, 800), (200, 300)]);
    assert_eq!(stack.info(c.id).unwrap().ooo_intervals, 3);
}

#[test]
fn rfc2018_4_with_timestamps_the_three_most_recent_blocks_are_reported() {
    let (mut stack, c) = sack_conn(with_intervals(4), true);
    let base = c.peer_nxt;
    for (i, off) in [200u32, 600, 1000, 1400].into_iter().enumerate() {
        let seg = c.data_seg(&[1; 100]).seq(base + off).ts(10 + i as u32, 0);
        c.peer.send(&mut stack, ms(1 + i as u64), seg);
        let (h, _) = c.peer.recv_one(&mut stack, ms(1 + i as u64));
        assert!(h.options.timestamp.is_some());
        if off == 1400 {
            assert_eq!(
                blocks(&h, base),
                vec![(1400, 1500), (1000, 1100), (600, 700)],
                "40 bytes of options: timestamps and three blocks"
            );
        }
    }
}

#[test]
fn rfc2018_with_two_intervals_a_third_gap_is_dropped_and_the_ack_repeats_the_others() {
    let (mut stack, c) = sack_conn(with_intervals(2), false);
    let base = c.peer_nxt;
    ooo(&mut stack, &c, 1, 200);
    ooo(&mut stack, &c, 2, 600);
    // Both interval slots are taken: the segment is dropped (bounded state, counted) and
    // its duplicate ACK reports what is held, latest first; it cannot report what it
    // did not keep.
    let h = ooo(&mut stack, &c, 3, 1000);
    assert_eq!(h.ack, base);
    assert_eq!(blocks(&h, base), vec![(600, 700), (200, 300)]);
    assert_eq!(stack.counters().ooo_dropped, 1);
    assert_eq!(stack.counters().ooo_stored, 2);
    // Filling the first gap merges it; the ACK moves to the end of the first interval and
    // reports the second.
    c.peer.send(&mut stack, ms(4), c.data_seg(&[0; 200]));
    let (h, _) = c.peer.recv_one(&mut stack, ms(4));
    assert_eq!(h.ack, base + 300u32);
    assert_eq!(blocks(&h, base), vec![(600, 700)]);
}

#[test]
fn ooo_intervals_0_drops_out_of_order_data_and_sends_a_plain_duplicate_ack() {
    let (mut stack, c) = sack_conn(with_intervals(0), false);
    let base = c.peer_nxt;
    let h = ooo(&mut stack, &c, 1, 100);
    assert_eq!((h.ack, h.options.sack_count), (base, 0));
    let counters = stack.counters();
    assert_eq!((counters.ooo_stored, counters.ooo_dropped), (0, 1));
    assert_eq!(stack.info(c.id).unwrap().ooo_intervals, 0);
    // In-order data is still taken; what was dropped has to come again.
    let data = pattern(200, 1);
    c.peer.send(&mut stack, ms(2), c.data_seg(&data[..100]));
    let (h, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(
        h.ack,
        base + 100u32,
        "the dropped segment is not acknowledged"
    );
    c.peer.send(
        &mut stack,
        ms(3),
        c.data_seg(&data[100..]).seq(base + 100u32),
    );
    let (h, _) = c.peer.recv_one(&mut stack, ms(3));
    assert_eq!(h.ack, base + 200u32);
    assert_eq!(read_all(&mut stack, c.id), data);
}

// ---- the sender ------------------------------------------------------------------------

const MSS: u32 = 1460;

/// A SACK connection that sent `n` full segments (window 65535, cwnd 10 segments).
fn sender(cfg: Config, n: usize) -> (Stack, Conn, Vec<u8>) {
    let (mut stack, c) = sack_conn(cfg, false);
    let data = pattern(n * MSS as usize, 3);
    stack.send(c.id, &data).unwrap();
    let sent = c.peer.recv_all(&mut stack, ms(1));
    assert_eq!(sent.len(), n.min(10));
    (stack, c, data)
}

/// Sequence number of our segment `i`.
fn seg(c: &Conn, i: u32) -> SeqNumber {
    c.our_nxt + i * MSS
}

/// A duplicate ACK of `una` carrying SACK `blocks` (segment indices, [from, to)).
fn sack_ack(c: &Conn, una: u32, blocks: &[(u32, u32)]) -> Seg {
    let mut o = TcpOptions::default();
    for &(a, b) in blocks {
        o.push_sack(seg(c, a), seg(c, b));
    }
    c.ack_seg().ack(seg(c, una)).opts(o)
}

#[test]
fn rfc6675_a_hole_with_three_segments_sacked_above_is_retransmitted_alone() {
    let (mut stack, c, data) = sender(config(), 8);
    // Segment 1 lost; 2, 3 and 4 arrive: three duplicate ACKs with growing SACK blocks.
    c.peer.send(&mut stack, ms(2), c.ack_seg().ack(seg(&c, 1)));
    c.peer.recv_all(&mut stack, ms(2));
    for (i, upto) in [3u32, 4].into_iter().enumerate() {
        c.peer
            .send(&mut stack, ms(3 + i as u64), sack_ack(&c, 1, &[(2, upto)]));
        // Limited Transmit (RFC 3042): new data on the first two duplicates; nothing yet
        // to send here, everything queued is out.
        let out = c.peer.recv_all(&mut stack, ms(3 + i as u64));
        assert!(out.iter().all(|(h, _)| h.seq.seq_ge(seg(&c, 8))), "{out:?}");
    }
    c.peer.send(&mut stack, ms(5), sack_ack(&c, 1, &[(2, 5)]));
    let out = c.peer.recv_all(&mut stack, ms(5));
    let resent: Vec<SeqNumber> = out.iter().map(|(h, _)| h.seq).collect();
    assert_eq!(resent, vec![seg(&c, 1)], "only the hole");
    assert_eq!(out[0].1, &data[MSS as usize..2 * MSS as usize]);
    let k = stack.counters();
    assert_eq!((k.sack_recoveries, k.sack_retransmits), (1, 1));
    assert_eq!(k.sack_blocks_rx, 3);
    // The ACK of everything up to the RecoveryPoint ends recovery.
    c.peer.send(&mut stack, ms(6), c.ack_seg().ack(seg(&c, 8)));
    let info = stack.info(c.id).unwrap();
    assert_eq!((info.snd_una, info.unacked), (seg(&c, 8), 0));
    assert_eq!(stack.counters().timeouts, 0);
}

#[test]
fn rfc6675_5_2b_one_ack_sacking_three_segments_starts_recovery() {
    let (mut stack, c, _) = sender(config(), 8);
    c.peer.send(
        &mut stack,
        ms(2),
        sack_ack(&c, 0, &[(1, 2), (3, 4), (5, 6)]),
    );
    // IsLost(HighACK + 1): three discontiguous SACKed ranges above segment 0. Segments
    // 2 and 4 have only two and one range above: not lost yet, and pipe (cwnd 5 after
    // halving 8) leaves room for nothing more.
    let out = c.peer.recv_all(&mut stack, ms(2));
    let resent: Vec<SeqNumber> = out.iter().map(|(h, _)| h.seq).collect();
    assert_eq!(resent, vec![seg(&c, 0)]);
    assert_eq!(stack.counters().sack_recoveries, 1);
}

#[test]
fn rfc6675_invalid_and_hostile_sack_blocks_are_ignored_with_a_counter() {
    let (mut stack, c, _) = sender(config(), 8);
    let una = seg(&c, 1);
    c.peer.send(&mut stack, ms(2), c.ack_seg().ack(una));
    c.peer.recv_all(&mut stack, ms(2));
    let hostile: [(SeqNumber, SeqNumber); 7] = [
        (seg(&c, 5), seg(&c, 3)),               // reversed
        (seg(&c, 4), seg(&c, 4)),               // empty
        (seg(&c, 6), seg(&c, 20)),              // beyond snd_max
        (una, seg(&c, 3)),                      // claims snd_una, which the ACK denies
        (una - 5000u32, una - 100u32),          // below snd_una: old or D-SACK
        (SeqNumber(0x8000_0000) + una.0, una),  // half the sequence space away
        (seg(&c, 2) + 1u32, seg(&c, 8) + 1u32), // one past snd_max
    ];
    for (i, chunk) in hostile.chunks(4).enumerate() {
        let mut o = TcpOptions::default();
        for &(l, r) in chunk {
            o.push_sack(l, r);
        }
        c.peer
            .send(&mut stack, ms(3 + i as u64), c.ack_seg().ack(una).opts(o));
        let out = c.peer.recv_all(&mut stack, ms(3 + i as u64));
        assert!(
            out.iter().all(|(_, p)| p.is_empty()),
            "no retransmission: {out:?}"
        );
    }
    let k = stack.counters();
    assert_eq!(k.sack_blocks_rx, 7);
    assert_eq!((k.sack_blocks_invalid, k.sack_blocks_old), (5, 2));
    assert_eq!(k.sack_recoveries, 0);
    stack.check_invariants().unwrap();
}

#[test]
fn rfc6675_overlapping_blocks_merge_and_a_full_scoreboard_is_counted() {
    let mut cfg = config();
    cfg.sack_scoreboard = 2;
    let (mut stack, c, _) = sender(cfg, 10);
    // Overlapping and duplicate blocks in one option: one range.
    c.peer.send(
        &mut stack,
        ms(2),
        sack_ack(&c, 0, &[(2, 4), (3, 5), (2, 5)]),
    );
    assert_eq!(stack.counters().sack_scoreboard_full, 0);
    // More disjoint ranges than the scoreboard holds: the highest do not fit.
    c.peer
        .send(&mut stack, ms(3), sack_ack(&c, 0, &[(6, 7), (8, 9)]));
    assert_eq!(stack.counters().sack_scoreboard_full, 1);
    stack.check_invariants().unwrap();
}

#[test]
fn go_back_n_stays_selectable_and_ignores_sack_blocks() {
    let mut cfg = config();
    cfg.recovery = Recovery::GoBackN;
    let (mut stack, c, _) = sender(cfg, 5);
    c.peer.send(&mut stack, ms(2), c.ack_seg().ack(seg(&c, 1)));
    for t in 3..6 {
        c.peer
            .send(&mut stack, ms(t), sack_ack(&c, 1, &[(2, t as u32)]));
    }
    // Three duplicates: go-back-N resends from snd_una, SACKed segments included (cwnd 2).
    let out = c.peer.recv_all(&mut stack, ms(5));
    let resent: Vec<SeqNumber> = out.iter().map(|(h, _)| h.seq).collect();
    assert_eq!(resent, vec![seg(&c, 1), seg(&c, 2)]);
    let k = stack.counters();
    assert_eq!(
        (k.sack_blocks_rx, k.sack_recoveries, k.fast_retransmits),
        (0, 0, 1)
    );
}

#[test]
fn rfc6675_recovery_is_not_left_running_when_the_same_batch_acknowledges_everything() {
    // The protocol stage sees a whole batch before the post stage starts a recovery for
    // its third duplicate: a later ACK of everything in that batch must not leave a
    // recovery behind that no ACK can end (found by the fuzzer: a FIN never went).
    let (mut stack, c, _) = sender(config(), 8);
    let batch = [
        c.ack_seg().ack(seg(&c, 1)),
        sack_ack(&c, 1, &[(2, 3)]),
        sack_ack(&c, 1, &[(2, 4)]),
        sack_ack(&c, 1, &[(2, 5)]),
        c.ack_seg().ack(seg(&c, 8)),
    ];
    c.peer.send_batch(&mut stack, ms(2), &batch);
    c.peer.recv_all(&mut stack, ms(2));
    stack.shutdown(c.id).unwrap();
    let (h, _) = c.peer.recv_one(&mut stack, ms(3));
    assert!(h.flags.contains(FIN) && h.seq == seg(&c, 8), "{h:?}");
}

#[test]
fn config_rejects_an_empty_scoreboard_with_sack_recovery() {
    let mut cfg = config();
    cfg.sack_scoreboard = 0;
    assert!(cfg.validate().is_err());
    cfg.recovery = Recovery::GoBackN;
    assert!(cfg.validate().is_ok());
    cfg.sack_scoreboard = 65;
    assert!(cfg.validate().is_err());
}

#[test]
fn the_cold_pool_follows_max_connections_within_its_bounds_and_refuses_more_than_a_handle_holds() {
    let mut cfg = config();
    cfg.max_connections = 100_000;
    assert_eq!(cfg.cold_pool(), 12_500, "an eighth of the connections");
    cfg.max_connections = 100;
    assert_eq!(cfg.cold_pool(), 100, "never more rows than connections");
    cfg.max_connections = 4096;
    assert_eq!(cfg.cold_pool(), 512);
    cfg.max_connections = 1 << 24;
    assert_eq!(cfg.cold_pool(), 65_535, "what a 2-byte handle indexes");
    cfg.cold_pool_rows = Some(7);
    assert_eq!(cfg.cold_pool(), 7);
    assert!(cfg.validate().is_ok());
    cfg.cold_pool_rows = Some(65_536);
    assert!(cfg.validate().is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Arbitrary SACK blocks, some near the window and some anywhere in the sequence space,
    /// on duplicate and advancing ACKs: the sender never panics, its invariants hold, and
    /// everything it sends starts within [snd_una, snd_max] as the ACKs left them.
    #[test]
    fn arbitrary_sack_blocks_never_panic_nor_move_retransmission_out_of_the_window(
        acks in prop::collection::vec(
            (0u32..12, prop::collection::vec((any::<bool>(), -3i64..16, -3i64..16, any::<u32>(), any::<u32>()), 0..=4)),
            1..40,
        ),
        scoreboard in 1usize..6,
    ) {
        let mut cfg = config();
        cfg.sack_scoreboard = scoreboard;
        let (mut stack, c, _) = sender(cfg, 10);
        let mut una = 0u32;
        let mut t = 2;
        for (ack, blocks) in acks {
            // Cumulative ACKs only move forward and never past what was sent.
            let info = stack.info(c.id).unwrap();
            let max_seg = (info.snd_max.diff(c.our_nxt) / MSS as i32) as u32;
            una = una.max(ack.min(max_seg));
            let mut o = TcpOptions::default();
            for (near, a, b, x, y) in blocks {
                let (l, r) = if near {
                    (c.our_nxt + (a * MSS as i64) as u32, c.our_nxt + (b * MSS as i64) as u32)
                } else {
                    (SeqNumber(x), SeqNumber(y))
                };
                o.push_sack(l, r);
            }
            c.peer.send(&mut stack, ms(t), c.ack_seg().ack(seg(&c, una)).opts(o));
            let before = stack.info(c.id).unwrap();
            for (h, p) in c.peer.recv_all(&mut stack, ms(t)) {
                if p.is_empty() {
                    continue;
                }
                prop_assert!(h.seq.seq_ge(before.snd_una), "{} below snd_una {}", h.seq, before.snd_una);
                prop_assert!(h.seq.seq_le(before.snd_max), "{} beyond snd_max {}", h.seq, before.snd_max);
            }
            stack
                .check_invariants()
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            t += 1;
            if t % 7 == 0 {
                // Now and then the retransmission timer fires too.
                stack.handle_timeout(ms(t + 1000));
                c.peer.recv_all(&mut stack, ms(t + 1000));
                t += 1001;
            }
        }
    }
}

#[test]
fn rfc3708_a_d_sack_for_every_retransmission_undoes_the_window_cut() {
    let (mut stack, c, _) = sender(config(), 8);
    // Segment 1 is only late: 2, 3 and 4 overtake it.
    c.peer.send(&mut stack, ms(2), c.ack_seg().ack(seg(&c, 1)));
    for (i, upto) in [3u32, 4, 5].into_iter().enumerate() {
        let at = ms(3 + i as u64);
        c.peer.send(&mut stack, at, sack_ack(&c, 1, &[(2, upto)]));
    }
    let cwnd_before = {
        // The window at recovery entry is the one the cut is measured from.
        let out = c.peer.recv_all(&mut stack, ms(5));
        assert_eq!(
            out.iter().map(|(h, _)| h.seq).collect::<Vec<_>>(),
            vec![seg(&c, 1)]
        );
        stack.info(c.id).unwrap().cwnd
    };
    assert_eq!(stack.counters().sack_recoveries, 1);
    // The late original arrives, then the retransmission: the peer acknowledges all and
    // reports the retransmission as a duplicate (RFC 2883).
    c.peer.send(&mut stack, ms(6), c.ack_seg().ack(seg(&c, 8)));
    let cut = stack.info(c.id).unwrap().cwnd;
    let mut dsack = TcpOptions::default();
    dsack.push_sack(seg(&c, 1), seg(&c, 2));
    c.peer
        .send(&mut stack, ms(7), c.ack_seg().ack(seg(&c, 8)).opts(dsack));
    let k = stack.counters();
    assert_eq!(k.spurious_recoveries, 1);
    let undone = stack.info(c.id).unwrap().cwnd;
    assert!(
        undone > cut && undone >= cwnd_before,
        "the cut is undone: {cwnd_before} at recovery, {cut} after, {undone} now"
    );
    // A second D-SACK for the same data undoes nothing more.
    c.peer
        .send(&mut stack, ms(8), c.ack_seg().ack(seg(&c, 8)).opts(dsack));
    assert_eq!(stack.counters().spurious_recoveries, 1);
}

#[test]
fn rfc3708_a_recovery_with_a_retransmission_not_reported_twice_keeps_its_cut() {
    let (mut stack, c, _) = sender(config(), 8);
    // Segments 1 and 2 are lost; 3 to 6 arrive.
    c.peer.send(&mut stack, ms(2), c.ack_seg().ack(seg(&c, 1)));
    let mut resent = Vec::new();
    for (i, upto) in [4u32, 5, 6, 7].into_iter().enumerate() {
        let at = ms(3 + i as u64);
        c.peer.send(&mut stack, at, sack_ack(&c, 1, &[(3, upto)]));
        resent.extend(
            c.peer
                .recv_all(&mut stack, at)
                .into_iter()
                .map(|(h, _)| h.seq),
        );
    }
    assert!(
        resent.contains(&seg(&c, 1)) && resent.contains(&seg(&c, 2)),
        "both holes resent: {resent:?}"
    );
    c.peer.send(&mut stack, ms(8), c.ack_seg().ack(seg(&c, 8)));
    let cut = stack.info(c.id).unwrap().cwnd;
    // Only the first retransmission turns out needless.
    let mut dsack = TcpOptions::default();
    dsack.push_sack(seg(&c, 1), seg(&c, 2));
    c.peer
        .send(&mut stack, ms(9), c.ack_seg().ack(seg(&c, 8)).opts(dsack));
    assert_eq!(stack.counters().spurious_recoveries, 0);
    assert_eq!(stack.info(c.id).unwrap().cwnd, cut);
}
