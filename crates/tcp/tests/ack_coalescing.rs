//! ACKs per receive burst under the delayed-ACK policy (RFC 5681 4.2, RFC 9293 3.8.6.3,
//! RFC 2018 4): the segments handled between two polls for frames to send get one ACK, in
//! order or not, sent in that poll, and no full segment but a lone last one waits for the
//! timer; an ACK stands for at most 44 segments (a 64 KB GRO aggregate); out-of-order data
//! is acknowledged with the latest SACK block first, and before a block could be pushed
//! out unreported; without SACK every out-of-order segment gets its own duplicate ACK.

mod harness;

use std::time::Duration;

use harness::*;
use sluice_tcp::{AckPolicy, Stack};
use sluice_wire::tcp::{SeqNumber, TcpHeader, TcpOptions};

const DELAY: Duration = Duration::from_millis(40);
const MSS: u32 = 1460;

fn delayed_cfg() -> sluice_tcp::Config {
    let mut cfg = config();
    cfg.ack_policy = AckPolicy::Delayed {
        segments: 2,
        timeout: DELAY,
    };
    // Room for several holes, as the engine has (64).
    cfg.ooo_intervals = 8;
    cfg
}

/// An established connection on the delayed-ACK policy whose peer offered only an MSS.
fn plain() -> (Stack, Conn) {
    let mut stack = stack_with(delayed_cfg());
    let c = established(&mut stack, ms(0));
    (stack, c)
}

/// An established connection on the delayed-ACK policy whose peer offered SACK (no
/// timestamps, so an ACK has room for four blocks).
fn with_sack() -> (Stack, Conn) {
    sack_conn(None)
}

/// The same with timestamps offered (`tsval`): three SACK blocks fit beside them.
fn sack_conn(tsval: Option<u32>) -> (Stack, Conn) {
    let mut stack = stack_with(delayed_cfg());
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let opts = TcpOptions {
        mss: Some(1460),
        sack_permitted: true,
        timestamp: tsval.map(|v| (v, 0)),
        ..Default::default()
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

/// A full-sized segment `i` segments past the peer's next sequence number.
fn full(c: &Conn, i: u32) -> Seg {
    c.data_seg(&[i as u8; MSS as usize])
        .seq(c.peer_nxt + i * MSS)
}

/// 100 bytes at `off` past the peer's next sequence number.
fn small(c: &Conn, off: u32) -> Seg {
    c.data_seg(&[off as u8; 100]).seq(c.peer_nxt + off)
}

/// The SACK blocks of `h` as offsets from `base`.
fn blocks(h: &TcpHeader, base: SeqNumber) -> Vec<(i32, i32)> {
    h.options
        .sacks()
        .iter()
        .map(|&(l, r)| (l.diff(base), r.diff(base)))
        .collect()
}

#[test]
fn rfc5681_4_2_n_in_order_segments_of_one_burst_get_one_ack_and_none_waits_for_the_timer() {
    for n in 1..=10u32 {
        let (mut stack, c) = plain();
        let segs: Vec<Seg> = (0..n).map(|i| full(&c, i)).collect();
        c.peer.send_batch(&mut stack, ms(1), &segs);
        let acks = c.peer.recv_all(&mut stack, ms(1));
        let end = c.peer_nxt + n * MSS;
        if n == 1 {
            // A lone segment waits for the delayed-ACK timer (RFC 9293 MUST-40: < 0.5 s).
            assert!(acks.is_empty(), "{acks:?}");
            let later = run_until(&mut stack, ms(1000));
            assert_eq!(later.len(), 1, "{later:?}");
            assert_eq!(later[0].0, ms(1) + DELAY);
            assert_eq!(later[0].1 .0.ack, end);
            continue;
        }
        // At most one ACK per two segments (here one for all), acknowledging every one of
        // them: none is left for the timer, so RFC 5681 4.2's "at least every second
        // full-sized segment" holds once the burst is handled.
        assert!(acks.len() as u32 <= n.div_ceil(2), "n {n}: {acks:?}");
        assert_eq!(acks.len(), 1, "n {n}: {acks:?}");
        let (h, p) = &acks[0];
        assert!(p.is_empty());
        assert_eq!(h.ack, end, "n {n}");
        assert_eq!(u32::from(h.window), RX_BUFFER as u32 - n * MSS, "n {n}");
        assert!(
            run_until(&mut stack, ms(1000)).is_empty(),
            "n {n}: nothing is owed after the burst"
        );
        assert_eq!(read_all(&mut stack, c.id).len() as u32, n * MSS);
    }
}

#[test]
fn no_ack_stands_for_more_than_44_segments_as_a_64_kb_gro_aggregate() {
    let mut cfg = delayed_cfg();
    cfg.rx_buffer = 1 << 20;
    cfg.rx_buffer_initial = 1 << 20;
    let mut stack = stack_with(cfg);
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let c = passive_open(
        &mut stack,
        l,
        Peer::new(40000, LISTEN_PORT),
        ms(0),
        1000,
        TcpOptions {
            mss: Some(1460),
            window_scale: Some(7),
            ..Default::default()
        },
        65535,
    );
    let segs: Vec<Seg> = (0..100).map(|i| full(&c, i)).collect();
    c.peer.send_batch(&mut stack, ms(1), &segs);
    let got: Vec<SeqNumber> = c
        .peer
        .recv_all(&mut stack, ms(1))
        .iter()
        .map(|(h, _)| h.ack)
        .collect();
    assert_eq!(got, [44u32, 88, 100].map(|i| c.peer_nxt + i * MSS));
}

#[test]
fn frames_handed_one_at_a_time_before_the_next_poll_are_one_burst() {
    // The engine hands the frames of a device burst to the core one by one, then polls
    // for frames to send: that is one burst, and its segments share one ACK.
    let (mut stack, c) = plain();
    for i in 0..5 {
        c.peer.send(&mut stack, ms(1), full(&c, i));
    }
    let acks = c.peer.recv_all(&mut stack, ms(1));
    assert_eq!(acks.len(), 1, "{acks:?}");
    assert_eq!(acks[0].0.ack, c.peer_nxt + 5 * MSS);
    // Polled after each frame, the bursts are single segments: every second one is
    // acknowledged (RFC 9293 SHLD-19).
    let mut acks = Vec::new();
    for i in 5..9 {
        c.peer.send(&mut stack, ms(2), full(&c, i));
        acks.extend(c.peer.recv_all(&mut stack, ms(2)));
    }
    let got: Vec<SeqNumber> = acks.iter().map(|(h, _)| h.ack).collect();
    assert_eq!(got, [7u32, 9].map(|i| c.peer_nxt + i * MSS));
}

#[test]
fn the_ack_of_a_burst_rides_on_the_data_the_application_sends_before_the_poll() {
    let (mut stack, c) = plain();
    c.peer
        .send_batch(&mut stack, ms(1), &[full(&c, 0), full(&c, 1)]);
    // The application answers before the engine polls for frames to send.
    stack.send(c.id, &pattern(300, 4)).unwrap();
    let (h, p) = c.peer.recv_one(&mut stack, ms(1));
    assert_eq!((h.ack, p.len()), (c.peer_nxt + 2 * MSS, 300));
    assert!(run_until(&mut stack, ms(1000))
        .iter()
        .all(|(_, (_, p))| !p.is_empty()));
}

#[test]
fn rfc5681_4_2_out_of_order_segments_of_one_burst_get_one_ack_at_once_latest_block_first() {
    let (mut stack, c) = with_sack();
    // A hole at [0, 1460), then three more segments in three intervals, in one burst.
    let burst = [full(&c, 1), full(&c, 3), full(&c, 5)];
    c.peer.send_batch(&mut stack, ms(1), &burst);
    let (h, _) = c.peer.recv_one(&mut stack, ms(1));
    assert_eq!(h.ack, c.peer_nxt, "a duplicate ACK");
    // RFC 2018 4: the first block holds the most recent segment, then the most recently
    // reported ones.
    let m = MSS as i32;
    assert_eq!(
        blocks(&h, c.peer_nxt),
        [(5 * m, 6 * m), (3 * m, 4 * m), (m, 2 * m)]
    );
    // RFC 5681 4.2: the segment that fills the first gap is acknowledged at once.
    c.peer.send(&mut stack, ms(2), full(&c, 0));
    let (h, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(h.ack, c.peer_nxt + 2 * MSS);
    assert_eq!(blocks(&h, c.peer_nxt), [(5 * m, 6 * m), (3 * m, 4 * m)]);
}

#[test]
fn rfc2018_4_a_burst_acks_before_a_new_block_could_push_an_unreported_one_out() {
    // With timestamps an ACK has room for three SACK blocks: once the out-of-order data of
    // a burst has touched two intervals besides the one the last ACK reported first, an
    // ACK goes at once, so no block is dropped before the sender saw it.
    let (mut stack, c) = sack_conn(Some(7));
    let (h, _) = {
        c.peer.send(&mut stack, ms(1), small(&c, 100).ts(8, 0));
        c.peer.recv_one(&mut stack, ms(1))
    };
    let echo = h.options.timestamp.map_or(0, |(v, _)| v);
    // One burst; the intervals become [100, 300), [400, 500), [700, 900), [1000, 1200).
    for off in [200, 400, 700, 800, 1000, 1100] {
        c.peer.send(&mut stack, ms(2), small(&c, off).ts(9, echo));
    }
    let acks = c.peer.recv_all(&mut stack, ms(2));
    let got: Vec<Vec<(i32, i32)>> = acks.iter().map(|(h, _)| blocks(h, c.peer_nxt)).collect();
    assert_eq!(
        got,
        [
            // 400 and 700 were news besides 100..300, which the last ACK reported.
            vec![(700, 800), (400, 500), (100, 300)],
            // 1000 is one piece of news: the burst's ACK reports it at the burst's end.
            vec![(1000, 1200), (700, 900), (400, 500)],
        ],
        "{acks:?}"
    );
    assert!(acks.iter().all(|(h, _)| h.ack == c.peer_nxt));
}

#[test]
fn without_sack_every_out_of_order_segment_gets_its_duplicate_ack_at_once() {
    // A sender without SACK counts duplicate ACKs (RFC 5681 3.2): none is held.
    let (mut stack, c) = plain();
    for k in 1..=10u32 {
        c.peer
            .send(&mut stack, ms(u64::from(k)), small(&c, 100 * k));
        let (h, _) = c.peer.recv_one(&mut stack, ms(u64::from(k)));
        assert_eq!(h.ack, c.peer_nxt, "duplicate {k}");
        assert!(h.options.sacks().is_empty());
    }
}

#[test]
fn every_segment_policy_keeps_an_immediate_duplicate_ack_per_out_of_order_segment() {
    let mut stack = stack_with(config());
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let opts = TcpOptions {
        mss: Some(1460),
        sack_permitted: true,
        ..Default::default()
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
    let burst: Vec<Seg> = (1..=6).map(|k| small(&c, 100 * k)).collect();
    c.peer.send_batch(&mut stack, ms(1), &burst);
    let acks = c.peer.recv_all(&mut stack, ms(1));
    assert_eq!(acks.len(), 6, "AckPolicy::EverySegment: one each");
    assert!(acks
        .iter()
        .all(|(h, _)| h.ack == c.peer_nxt && !h.options.sacks().is_empty()));
}
