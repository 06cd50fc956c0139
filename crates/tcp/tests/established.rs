//! ESTABLISHED: RFC 9293 3.10.7.4 segment processing (acceptability, trimming, ACK field,
//! window updates), RFC 5681 duplicate ACKs and fast retransmit, RFC 6298 retransmission
//! timer, RFC 9293 3.8.3 user timeout, RFC 7323 window scaling.

mod harness;

use harness::*;
use sluice_tcp::{ConnError, Error, TcpState};
use sluice_wire::tcp::{SeqNumber, TcpOptions};

#[test]
fn rfc9293_3_10_7_4_in_order_data_is_delivered_and_each_segment_acked() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    let data = pattern(300, 7);
    let segs: Vec<Seg> = (0..3)
        .map(|i| {
            c.ack_seg()
                .seq(c.peer_nxt + (i * 100) as u32)
                .data(&data[i * 100..(i + 1) * 100])
        })
        .collect();
    c.peer.send_batch(&mut stack, ms(1), &segs);
    let acks = c.peer.recv_all(&mut stack, ms(1));
    assert_eq!(
        acks.len(),
        3,
        "one ACK per segment (AckPolicy::EverySegment)"
    );
    for (i, (h, p)) in acks.iter().enumerate() {
        let n = 100 * (i as u32 + 1);
        assert!(p.is_empty());
        assert_eq!(h.flags, ACK);
        assert_eq!(h.seq, c.our_nxt);
        assert_eq!(h.ack, c.peer_nxt + n);
        assert_eq!(h.window as u32, RX_BUFFER as u32 - n);
    }
    // Each ACK acknowledges its own segment, not the batch: identical ACKs would be
    // duplicate ACKs to the sender.
    let counters = stack.counters();
    assert_eq!((counters.ooo_stored, counters.duplicate_segments), (0, 0));
    assert!(readiness_of(&events(&mut stack), c.id).unwrap().readable());
    assert_eq!(stack.info(c.id).unwrap().readable, 300);
    assert_eq!(read_all(&mut stack, c.id), data);
    assert_eq!(stack.info(c.id).unwrap().rcv_nxt, c.peer_nxt + 300u32);
}

#[test]
fn rfc5681_4_2_out_of_order_segment_gets_duplicate_ack_and_is_merged_when_gap_closes() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    let data = pattern(200, 3);
    c.peer.send(
        &mut stack,
        ms(1),
        c.data_seg(&data[100..]).seq(c.peer_nxt + 100u32),
    );
    let (dup, _) = c.peer.recv_one(&mut stack, ms(1));
    assert_eq!((dup.flags, dup.seq, dup.ack), (ACK, c.our_nxt, c.peer_nxt));
    assert_eq!(dup.window, RX_BUFFER as u16);
    assert_eq!(dup.options.sack_count, 0, "SACK was not negotiated");
    let info = stack.info(c.id).unwrap();
    assert_eq!((info.ooo_intervals, info.readable), (1, 0));
    assert_eq!(info.rcv_nxt, c.peer_nxt);
    assert_eq!(stack.counters().ooo_stored, 1);
    let mut buf = [0u8; 16];
    assert_eq!(stack.recv(c.id, &mut buf), Err(Error::WouldBlock));
    // The gap closes: both segments become readable and are acknowledged at once.
    c.peer.send(&mut stack, ms(2), c.data_seg(&data[..100]));
    let (ack, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(ack.ack, c.peer_nxt + 200u32);
    assert_eq!(ack.window as usize, RX_BUFFER - 200);
    let info = stack.info(c.id).unwrap();
    assert_eq!((info.ooo_intervals, info.readable), (0, 200));
    assert_eq!(read_all(&mut stack, c.id), data);
}

#[test]
fn rfc2018_out_of_order_segment_reported_in_sack_block() {
    let mut stack = stack();
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
    c.peer.send(
        &mut stack,
        ms(1),
        c.data_seg(&[1; 100]).seq(c.peer_nxt + 300u32),
    );
    let (dup, _) = c.peer.recv_one(&mut stack, ms(1));
    assert_eq!(dup.ack, c.peer_nxt);
    assert_eq!(
        dup.options.sacks(),
        &[(c.peer_nxt + 300u32, c.peer_nxt + 400u32)]
    );
    // A second block adjacent to the first widens it (one interval configured).
    c.peer.send(
        &mut stack,
        ms(2),
        c.data_seg(&[1; 100]).seq(c.peer_nxt + 200u32),
    );
    let (dup, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(
        dup.options.sacks(),
        &[(c.peer_nxt + 200u32, c.peer_nxt + 400u32)]
    );
    // A disjoint one finds no free interval slot and is dropped (bounded state).
    c.peer.send(
        &mut stack,
        ms(3),
        c.data_seg(&[1; 50]).seq(c.peer_nxt + 500u32),
    );
    let (dup, _) = c.peer.recv_one(&mut stack, ms(3));
    assert_eq!(dup.ack, c.peer_nxt);
    assert_eq!(dup.options.sack_count, 1);
    assert_eq!(stack.counters().ooo_dropped, 1);
    assert_eq!(stack.counters().duplicate_segments, 0, "not a duplicate");
    c.peer.send(&mut stack, ms(4), c.data_seg(&[1; 200]));
    let (ack, _) = c.peer.recv_one(&mut stack, ms(4));
    assert_eq!(ack.ack, c.peer_nxt + 400u32);
    assert_eq!(ack.options.sack_count, 0);
}

#[test]
fn rfc9293_3_10_7_4_duplicate_segments_are_acked_and_not_delivered_twice() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    let data = pattern(200, 9);
    c.peer.send(&mut stack, ms(1), c.data_seg(&data[..100]));
    c.peer.send(
        &mut stack,
        ms(1),
        c.data_seg(&data[100..]).seq(c.peer_nxt + 100u32),
    );
    assert_eq!(c.peer.recv_all(&mut stack, ms(1)).len(), 2);
    // The latest segment again (the peer missed our ACK): ACK again.
    c.peer.send(
        &mut stack,
        ms(2),
        c.data_seg(&data[100..]).seq(c.peer_nxt + 100u32),
    );
    let (ack, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(
        (ack.flags, ack.seq, ack.ack),
        (ACK, c.our_nxt, c.peer_nxt + 200u32)
    );
    assert_eq!(stack.counters().duplicate_segments, 1);
    // An older segment, wholly below rcv_nxt: not acceptable, answered with an ACK.
    c.peer.send(&mut stack, ms(3), c.data_seg(&data[..100]));
    let (ack, _) = c.peer.recv_one(&mut stack, ms(3));
    assert_eq!((ack.flags, ack.ack), (ACK, c.peer_nxt + 200u32));
    assert_eq!(stack.info(c.id).unwrap().readable, 200);
    assert_eq!(read_all(&mut stack, c.id), data);
}

#[test]
fn rfc9293_3_10_7_4_every_duplicate_data_segment_is_acked_beyond_the_challenge_ack_limit() {
    // A sender whose ACKs were lost retransmits what we already have (a timeout, a tail-loss
    // probe); each is answered, as Linux does: the RFC 5961 7 budget is for challenge ACKs
    // (RST, SYN, bad ACK, pure ACKs out of window), not for data. Throttled, the sender only
    // learns at its next, backed-off, timeout (issue 14's stall).
    let mut cfg = config();
    cfg.challenge_ack_limit = 2;
    let mut stack = stack_with(cfg);
    let c = established(&mut stack, ms(0));
    let data = pattern(200, 3);
    c.peer.send(&mut stack, ms(1), c.data_seg(&data));
    c.peer.recv_one(&mut stack, ms(1));
    for i in 0..10 {
        c.peer.send(&mut stack, ms(2 + i), c.data_seg(&data[..100]));
        let (ack, p) = c.peer.recv_one(&mut stack, ms(2 + i));
        assert!(p.is_empty());
        assert_eq!(
            (ack.flags, ack.ack),
            (ACK, c.peer_nxt + 200u32),
            "retransmission {i}"
        );
    }
    let counters = stack.counters();
    assert_eq!(counters.out_of_window, 10);
    assert_eq!(counters.challenge_acks_suppressed, 0);
    // A pure ACK out of window still draws on the budget (no ACK loop between two hosts).
    for _ in 0..3 {
        c.peer
            .send(&mut stack, ms(20), c.ack_seg().seq(c.peer_nxt + 100_000u32));
    }
    assert_eq!(c.peer.recv_all(&mut stack, ms(20)).len(), 2);
    assert_eq!(stack.counters().challenge_acks_suppressed, 1);
    assert_eq!(read_all(&mut stack, c.id), data);
}

#[test]
fn rfc2883_4_a_segment_wholly_below_rcv_nxt_is_answered_with_a_dsack_block_first() {
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 16).expect("listen");
    let sack_only = TcpOptions {
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
        sack_only,
        65535,
    );
    let data = pattern(400, 4);
    c.peer.send(&mut stack, ms(1), c.data_seg(&data[..200]));
    c.peer.recv_one(&mut stack, ms(1));
    // Out of order: [300, 400) is held in an interval and SACKed.
    c.peer.send(
        &mut stack,
        ms(2),
        c.data_seg(&data[300..]).seq(c.peer_nxt + 300u32),
    );
    c.peer.recv_one(&mut stack, ms(2));
    // [0, 100) again: the answer acknowledges 200 and reports the duplicate first, then
    // the interval (RFC 2883 4: the D-SACK block, then the usual SACK blocks).
    c.peer.send(&mut stack, ms(3), c.data_seg(&data[..100]));
    let (ack, _) = c.peer.recv_one(&mut stack, ms(3));
    assert_eq!(ack.ack, c.peer_nxt + 200u32);
    assert_eq!(
        ack.options.sacks(),
        &[
            (c.peer_nxt, c.peer_nxt + 100u32),
            (c.peer_nxt + 300u32, c.peer_nxt + 400u32)
        ]
    );
}

#[test]
fn rfc9293_3_10_7_4_partially_duplicate_segment_delivers_only_the_new_part() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    let data = pattern(300, 1);
    c.peer.send(&mut stack, ms(1), c.data_seg(&data[..200]));
    c.peer.recv_one(&mut stack, ms(1));
    c.peer.send(
        &mut stack,
        ms(2),
        c.data_seg(&data[150..]).seq(c.peer_nxt + 150u32),
    );
    let (ack, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(ack.ack, c.peer_nxt + 300u32);
    assert_eq!(ack.window as usize, RX_BUFFER - 300);
    assert_eq!(read_all(&mut stack, c.id), data);
}

#[test]
fn rfc9293_3_10_7_4_data_beyond_the_window_is_trimmed() {
    let mut cfg = config();
    cfg.rx_buffer = 4096;
    let mut stack = stack_with(cfg);
    let c = established(&mut stack, ms(0));
    let data = pattern(4200, 5);
    let segs: Vec<Seg> = (0..3)
        .map(|i| {
            c.ack_seg()
                .seq(c.peer_nxt + (i * 1400) as u32)
                .data(&data[i * 1400..(i + 1) * 1400])
        })
        .collect();
    c.peer.send_batch(&mut stack, ms(1), &segs);
    let acks = c.peer.recv_all(&mut stack, ms(1));
    let got: Vec<(SeqNumber, u16)> = acks.iter().map(|(h, _)| (h.ack, h.window)).collect();
    assert_eq!(
        got,
        vec![
            (c.peer_nxt + 1400u32, 4096 - 1400),
            (c.peer_nxt + 2800u32, 4096 - 2800),
            (c.peer_nxt + 4096u32, 0),
        ]
    );
    // The window is closed: more data at rcv_nxt is not accepted, but acknowledged.
    c.peer.send(
        &mut stack,
        ms(2),
        c.data_seg(&data[4096..]).seq(c.peer_nxt + 4096u32),
    );
    let (ack, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!((ack.ack, ack.window), (c.peer_nxt + 4096u32, 0));
    let counters = stack.counters();
    assert_eq!((counters.duplicate_segments, counters.ooo_stored), (0, 0));
    assert_eq!(stack.info(c.id).unwrap().readable, 4096);
    assert_eq!(read_all(&mut stack, c.id), &data[..4096]);
    // Reading opens the window; RFC 9293 MUST-39: the update is sent once it matters.
    let (update, _) = c.peer.recv_one(&mut stack, ms(3));
    assert_eq!(
        (update.flags, update.ack, update.window),
        (ACK, c.peer_nxt + 4096u32, 4096)
    );
}

#[test]
fn rfc9293_3_10_7_4_zero_length_segment_outside_the_window_gets_an_ack() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    let before = stack.info(c.id).unwrap();
    for (i, seq) in [
        c.peer_nxt + 20_000u32,
        c.peer_nxt - 1u32,
        c.peer_nxt - 100_000u32,
    ]
    .into_iter()
    .enumerate()
    {
        c.peer.send(&mut stack, ms(1), c.ack_seg().seq(seq));
        let (ack, _) = c.peer.recv_one(&mut stack, ms(1));
        assert_eq!((ack.flags, ack.seq, ack.ack), (ACK, c.our_nxt, c.peer_nxt));
        assert_eq!(stack.counters().out_of_window, i as u64 + 1);
    }
    // Data outside the window too.
    c.peer.send(
        &mut stack,
        ms(1),
        c.data_seg(b"far").seq(c.peer_nxt + 30_000u32),
    );
    let (ack, _) = c.peer.recv_one(&mut stack, ms(1));
    assert_eq!(ack.ack, c.peer_nxt);
    assert_eq!(stack.info(c.id).unwrap(), before);
    assert_eq!(stack.state(c.id), Ok(TcpState::Established));
}

#[test]
fn rfc9293_3_10_7_4_ack_advances_snd_una() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    let data = pattern(3000, 2);
    assert_eq!(stack.send(c.id, &data).unwrap(), 3000);
    let segs = c.peer.recv_all(&mut stack, ms(0));
    // Two full segments; Nagle (RFC 9293 SHLD-7) holds the 80-byte tail while they fly.
    let got: Vec<(SeqNumber, usize)> = segs.iter().map(|(h, p)| (h.seq, p.len())).collect();
    assert_eq!(got, vec![(c.our_nxt, 1460), (c.our_nxt + 1460u32, 1460)]);
    assert_eq!(segs[0].1, &data[..1460]);
    let info = stack.info(c.id).unwrap();
    assert_eq!(
        (info.snd_una, info.snd_nxt),
        (c.our_nxt, c.our_nxt + 2920u32)
    );
    assert_eq!(info.unacked, 3000);

    c.peer
        .send(&mut stack, ms(10), c.ack_seg().ack(c.our_nxt + 1460u32));
    c.peer.recv_nothing(&mut stack, ms(10));
    let info = stack.info(c.id).unwrap();
    assert_eq!(info.snd_una, c.our_nxt + 1460u32);
    assert_eq!(info.unacked, 3000 - 1460);

    c.peer
        .send(&mut stack, ms(11), c.ack_seg().ack(c.our_nxt + 2920u32));
    let (tail, p) = c.peer.recv_one(&mut stack, ms(11));
    assert_eq!(
        (tail.seq, tail.flags, p.len()),
        (c.our_nxt + 2920u32, ACK | PSH, 80)
    );
    assert_eq!(stack.info(c.id).unwrap().snd_una, c.our_nxt + 2920u32);

    c.peer
        .send(&mut stack, ms(12), c.ack_seg().ack(c.our_nxt + 3000u32));
    let info = stack.info(c.id).unwrap();
    assert_eq!(info.snd_una, c.our_nxt + 3000u32);
    assert_eq!((info.snd_nxt, info.snd_max), (info.snd_una, info.snd_una));
    assert_eq!((info.unacked, info.writable), (0, TX_BUFFER));
    assert!(
        info.srtt > std::time::Duration::ZERO,
        "an RTT sample was taken"
    );
    // Nothing outstanding: no retransmission ever.
    assert!(run_until(&mut stack, ms(60_000)).is_empty());
}

#[test]
fn rfc5681_3_2_three_duplicate_acks_trigger_fast_retransmit_go_back_n() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    let data = pattern(5 * 1460, 4);
    stack.send(c.id, &data).unwrap();
    let segs = c.peer.recv_all(&mut stack, ms(0));
    assert_eq!(segs.len(), 5);
    let una = c.our_nxt + 1460u32;
    c.peer.send(&mut stack, ms(10), c.ack_seg().ack(una));
    c.peer.recv_nothing(&mut stack, ms(10));
    for n in 1..=2 {
        c.peer.send(&mut stack, ms(10 + n), c.ack_seg().ack(una));
        c.peer.recv_nothing(&mut stack, ms(10 + n));
    }
    assert_eq!(stack.counters().fast_retransmits, 0);
    c.peer.send(&mut stack, ms(13), c.ack_seg().ack(una));
    let resent = c.peer.recv_all(&mut stack, ms(13));
    // ssthresh = cwnd = max(FlightSize / 2, 2 SMSS) = 2 segments, resent from snd_una.
    let got: Vec<(SeqNumber, usize)> = resent.iter().map(|(h, p)| (h.seq, p.len())).collect();
    assert_eq!(got, vec![(una, 1460), (una + 1460u32, 1460)]);
    assert_eq!(resent[0].1, &data[1460..2920]);
    let counters = stack.counters();
    assert_eq!(counters.fast_retransmits, 1);
    assert_eq!(counters.retransmitted_bytes, 2920);
    let info = stack.info(c.id).unwrap();
    assert_eq!(info.fast_retransmits, 1);
    assert_eq!(info.snd_una, una);
    assert_eq!(info.snd_nxt, una + 2920u32);
    assert_eq!(info.snd_max, c.our_nxt + 5u32 * 1460);
    // A fourth duplicate ACK does not start another recovery.
    c.peer.send(&mut stack, ms(14), c.ack_seg().ack(una));
    c.peer.recv_nothing(&mut stack, ms(14));
    assert_eq!(stack.counters().fast_retransmits, 1);
    // The cumulative ACK of everything ends it.
    c.peer
        .send(&mut stack, ms(20), c.ack_seg().ack(c.our_nxt + 5u32 * 1460));
    let info = stack.info(c.id).unwrap();
    assert_eq!((info.snd_una, info.unacked), (c.our_nxt + 5u32 * 1460, 0));
}

#[test]
fn rfc6298_5_rto_expiry_retransmits_from_snd_una_with_exponential_backoff() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    stack.send(c.id, &pattern(1000, 8)).unwrap();
    let (first, p) = c.peer.recv_one(&mut stack, ms(0));
    assert_eq!((first.seq, p.len()), (c.our_nxt, 1000));
    let mut at = 0;
    // The handshake, at one instant, measured an RTT of about zero (RFC 6298 2.2): the
    // first RTO is the floor.
    let mut rto = RTO_MIN.as_millis() as u64;
    for n in 1..=10u64 {
        assert!(run_until(&mut stack, ms(at + rto - 1)).is_empty());
        at += rto;
        stack.handle_timeout(ms(at));
        let (again, p) = c.peer.recv_one(&mut stack, ms(at));
        assert_eq!(
            (again.seq, again.ack, p.len()),
            (c.our_nxt, c.peer_nxt, 1000),
            "#{n}"
        );
        assert_eq!(p, pattern(1000, 8));
        // RFC 6298 5.5: back off, bounded by the maximum.
        rto = (rto * 2).min(RTO_MAX.as_millis() as u64);
        assert_eq!(
            stack.info(c.id).unwrap().rto.as_millis() as u64,
            rto,
            "#{n}"
        );
        assert_eq!(stack.counters().timeouts, n);
    }
    // Doubling from 5 ms, the last interval held at RTO_MAX (1.6 s).
    assert_eq!(at, 5 + 10 + 20 + 40 + 80 + 160 + 320 + 640 + 1280 + 1600);
    assert_eq!(stack.counters().retransmitted_bytes, 10_000);
    // The ACK ends it: the timer stops.
    c.peer
        .send(&mut stack, ms(at + 5), c.ack_seg().ack(c.our_nxt + 1000u32));
    assert!(run_until(&mut stack, ms(at + 100_000)).is_empty());
    assert_eq!(stack.state(c.id), Ok(TcpState::Established));
}

#[test]
fn rfc6298_5_4_rto_goes_back_to_snd_una_and_resends_what_followed() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    let data = pattern(3 * 1460, 6);
    stack.send(c.id, &data).unwrap();
    assert_eq!(c.peer.recv_all(&mut stack, ms(0)).len(), 3);
    stack.handle_timeout(ms(100));
    // After a timeout cwnd is one segment (RFC 5681 3.1): only the first is resent.
    let (h, p) = c.peer.recv_one(&mut stack, ms(100));
    assert_eq!((h.seq, p.len()), (c.our_nxt, 1460));
    c.peer
        .send(&mut stack, ms(110), c.ack_seg().ack(c.our_nxt + 1460u32));
    let resent = c.peer.recv_all(&mut stack, ms(110));
    let got: Vec<(SeqNumber, usize)> = resent.iter().map(|(h, p)| (h.seq, p.len())).collect();
    assert_eq!(
        got,
        vec![(c.our_nxt + 1460u32, 1460), (c.our_nxt + 2920u32, 1460)]
    );
    assert_eq!(resent[1].1, &data[2920..]);
    assert_eq!(stack.counters().retransmitted_bytes, 3 * 1460);
}

#[test]
fn rfc9293_3_8_3_must_20_user_timeout_reports_timed_out() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    stack.send(c.id, &pattern(100, 1)).unwrap();
    c.peer.recv_one(&mut stack, ms(0));
    // Retransmissions at 100, 300, 700, 1500, 3100, 4700 ms (RTO capped at 1.6 s).
    for at in [100, 300, 700, 1500, 3100, 4700] {
        stack.handle_timeout(ms(at));
        let (h, _) = c.peer.recv_one(&mut stack, ms(at));
        assert_eq!(h.seq, c.our_nxt);
        assert_eq!(stack.state(c.id), Ok(TcpState::Established), "at {at} ms");
    }
    // At 6300 ms the data has been unacknowledged for more than the 5 s user timeout.
    stack.handle_timeout(ms(6300));
    let (rst, _) = c.peer.recv_one(&mut stack, ms(6300));
    assert_eq!(rst.flags, RST | ACK);
    assert_eq!(rst.seq, c.our_nxt + 100u32);
    assert_eq!(stack.state(c.id), Ok(TcpState::Closed));
    assert_eq!(stack.error(c.id), Ok(Some(ConnError::TimedOut)));
    let mut buf = [0u8; 8];
    assert_eq!(
        stack.recv(c.id, &mut buf),
        Err(Error::Connection(ConnError::TimedOut))
    );
    assert_eq!(
        stack.send(c.id, b"more"),
        Err(Error::Connection(ConnError::TimedOut))
    );
    assert!(readiness_of(&events(&mut stack), c.id).unwrap().error());
    assert_eq!(stack.counters().user_timeouts, 1);
    assert!(run_until(&mut stack, ms(100_000)).is_empty());
}

#[test]
fn rfc7323_2_window_updates_are_scaled_both_ways() {
    let mut cfg = config();
    cfg.rx_buffer = 256 * 1024;
    cfg.rx_buffer_initial = 256 * 1024;
    let mut stack = stack_with(cfg);
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let peer = Peer::new(40000, LISTEN_PORT);
    let opts = TcpOptions {
        mss: Some(1460),
        window_scale: Some(3),
        ..Default::default()
    };
    peer.send(
        &mut stack,
        ms(0),
        peer.seg(SYN).seq(SeqNumber(1000)).opts(opts),
    );
    let (synack, _) = peer.recv_one(&mut stack, ms(0));
    // Our shift: the smallest that lets 256 KiB be advertised.
    assert_eq!(synack.options.window_scale, Some(3));
    assert_eq!(synack.window, 65535, "a SYN's window is not scaled");
    peer.send(
        &mut stack,
        ms(1),
        peer.seg(ACK)
            .seq(SeqNumber(1001))
            .ack(synack.seq + 1u32)
            .win(100),
    );
    let id = stack.accept(l).unwrap();
    assert_eq!(stack.info(id).unwrap().snd_wnd, 800);
    let c = Conn {
        id,
        peer,
        peer_isn: SeqNumber(1000),
        our_isn: synack.seq,
        peer_nxt: SeqNumber(1001),
        our_nxt: synack.seq + 1u32,
    };
    // Our advertised windows are scaled down by our shift.
    c.peer
        .send(&mut stack, ms(2), c.data_seg(&[0; 1000]).win(100));
    let (ack, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(ack.window, ((256 * 1024 - 1000) >> 3) as u16);
    let c = Conn {
        peer_nxt: c.peer_nxt + 1000u32,
        ..c
    };
    // The peer's 800-byte window limits what we send (half its largest window may go).
    stack.send(id, &pattern(2000, 3)).unwrap();
    let (h, p) = c.peer.recv_one(&mut stack, ms(3));
    assert_eq!((h.seq, p.len()), (c.our_nxt, 800));
    // A window update: 2000 << 3 bytes.
    c.peer.send(
        &mut stack,
        ms(4),
        c.ack_seg().ack(c.our_nxt + 800u32).win(2000),
    );
    assert_eq!(stack.info(id).unwrap().snd_wnd, 16000);
    let (h, p) = c.peer.recv_one(&mut stack, ms(4));
    assert_eq!((h.seq, p.len()), (c.our_nxt + 800u32, 1200));
    // An older segment (SND.WL1/WL2 check) does not shrink the window.
    c.peer.send(
        &mut stack,
        ms(5),
        c.ack_seg()
            .seq(c.peer_nxt - 1000u32)
            .ack(c.our_nxt + 800u32)
            .win(1),
    );
    c.peer.recv_all(&mut stack, ms(5));
    assert_eq!(stack.info(id).unwrap().snd_wnd, 16000);
}

#[test]
fn frames_whose_checksum_the_device_vouches_for_are_not_verified_again() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    // A local Linux sender leaves only the pseudo-header sum in the field (CHECKSUM_PARTIAL).
    let mut partial = c.peer.frame(&c.data_seg(b"local"));
    partial[34 + 16..34 + 18].copy_from_slice(&[0x12, 0x34]);
    stack.handle_frame(ms(1), &partial);
    c.peer.recv_nothing(&mut stack, ms(1));
    assert_eq!(stack.counters().bad_checksum, 1, "verified and refused");
    stack.handle_frames_checksum_ok(ms(2), &[&partial]);
    let (ack, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(ack.ack, c.peer_nxt + 5u32, "trusted and taken");
    assert_eq!(stack.counters().bad_checksum, 1);
}

fn delayed_ack_stack() -> sluice_tcp::Stack {
    let mut cfg = config();
    cfg.ack_policy = sluice_tcp::AckPolicy::Delayed {
        segments: 2,
        timeout: std::time::Duration::from_micros(100),
    };
    stack_with(cfg)
}

#[test]
fn rfc9293_3_8_6_3_delayed_ack_rides_on_the_reply() {
    let mut stack = delayed_ack_stack();
    let c = established(&mut stack, ms(0));
    c.peer.send(&mut stack, ms(1), c.data_seg(&[7; 64]));
    // The application answers at once: one segment carries the reply and the ACK.
    assert_eq!(read_all(&mut stack, c.id).len(), 64);
    stack.send(c.id, &[8; 64]).unwrap();
    let (seg, payload) = c.peer.recv_one(&mut stack, ms(1));
    assert_eq!((seg.ack, payload.len()), (c.peer_nxt + 64u32, 64));
    // Nothing is owed any more: the timer sends no pure ACK later.
    let later = run_until(&mut stack, ms(5));
    assert!(later.is_empty(), "{later:?}");
}

#[test]
fn rfc9293_must_40_a_delayed_ack_goes_out_by_its_timer_or_the_second_segment() {
    let mut stack = delayed_ack_stack();
    let c = established(&mut stack, ms(0));
    c.peer.send(&mut stack, ms(1), c.data_seg(&[7; 100]));
    c.peer.recv_nothing(&mut stack, ms(1));
    let sent = run_until(&mut stack, ms(2));
    assert_eq!(sent.len(), 1, "{sent:?}");
    let (at, (seg, _)) = &sent[0];
    assert_eq!(*at, ms(1) + std::time::Duration::from_micros(100));
    assert_eq!(seg.ack, c.peer_nxt + 100u32);
    // Two segments: the second is acknowledged at once (SHLD-19).
    let next = c.peer_nxt + 100u32;
    c.peer
        .send(&mut stack, ms(3), c.data_seg(&[1; 100]).seq(next));
    c.peer.recv_nothing(&mut stack, ms(3));
    c.peer
        .send(&mut stack, ms(3), c.data_seg(&[2; 100]).seq(next + 100u32));
    let (seg, _) = c.peer.recv_one(&mut stack, ms(3));
    assert_eq!(seg.ack, next + 200u32);
}

#[test]
fn a_receive_offload_aggregate_of_several_segments_is_acknowledged_at_once() {
    let mut stack = delayed_ack_stack();
    let c = established(&mut stack, ms(0));
    // A GRO frame: three segments' worth of payload in one frame.
    c.peer
        .send(&mut stack, ms(1), c.data_seg(&pattern(3 * 1460, 5)));
    let (seg, _) = c.peer.recv_one(&mut stack, ms(1));
    assert_eq!(seg.ack, c.peer_nxt + 3 * 1460u32);
}

#[test]
fn endpoints_name_both_ends_of_passive_and_active_opens_and_refuse_stale_handles() {
    use std::net::SocketAddrV4;
    let mut stack = stack();
    let passive = established(&mut stack, ms(0));
    assert_eq!(
        stack.endpoints(passive.id),
        Ok((
            SocketAddrV4::new(OUR_IP, LISTEN_PORT),
            SocketAddrV4::new(PEER_IP, 40000)
        ))
    );
    let active = active_open(&mut stack, ms(1), 8080, 5000, mss_only(1460), 65535);
    let (local, remote) = stack.endpoints(active.id).unwrap();
    assert_eq!(remote, SocketAddrV4::new(PEER_IP, 8080));
    assert_eq!(
        (*local.ip(), local.port()),
        (OUR_IP, active.peer.stack_port)
    );
    stack.abort(active.id).unwrap();
    assert_eq!(stack.endpoints(active.id), Err(Error::InvalidHandle));
}

#[test]
fn send_buffer_starts_at_its_initial_size_and_grows_only_for_the_window() {
    let mut cfg = config();
    cfg.tx_buffer = 1 << 20;
    cfg.tx_buffer_initial = 4096;
    let mut stack = stack_with(cfg);
    let c = established(&mut stack, ms(0));
    let info = stack.info(c.id).unwrap();
    assert_eq!(info.writable, 4096, "the initial size");
    let window = info.cwnd.min(info.snd_wnd) as usize;
    assert!(window < 16 * 1024, "initial window {window}");
    let blob = pattern(256 * 1024, 1);
    // A full buffer grows once, to twice the window (a power of two), and no further: the
    // rest of the megabyte would only hold data the windows cannot send yet.
    assert_eq!(stack.send(c.id, &blob[..4096]), Ok(4096));
    assert_eq!(stack.counters().tx_buffer_grown, 0, "filled, not yet short");
    let taken = stack.send(c.id, &blob[4096..]).unwrap();
    let grown = (2 * window).next_power_of_two();
    assert_eq!(taken, grown - 4096);
    assert_eq!(stack.send(c.id, &blob), Err(Error::WouldBlock));
    assert_eq!(stack.counters().tx_buffer_grown, 1);
    let info = stack.info(c.id).unwrap();
    assert_eq!(info.writable + info.unacked, grown);
    // What was written before the growth goes out intact.
    let segs = c.peer.recv_all(&mut stack, ms(1));
    let sent: Vec<u8> = segs.iter().flat_map(|(_, p)| p.clone()).collect();
    assert!(!sent.is_empty());
    assert_eq!(sent, blob[..sent.len()]);
}

/// A passive connection from peer port 40000 + `i` (MSS 1460, window 65535).
fn open_from(stack: &mut sluice_tcp::Stack, l: sluice_tcp::ListenerId, i: u16) -> Conn {
    passive_open(
        stack,
        l,
        Peer::new(40000 + i, LISTEN_PORT),
        ms(0),
        1000,
        mss_only(1460),
        65535,
    )
}

#[test]
fn send_buffers_grow_only_to_an_equal_share_of_the_send_memory() {
    let mut cfg = config();
    cfg.tx_buffer = 1 << 20;
    cfg.tx_buffer_initial = 4096;
    // Two connections share 48 KB: each may grow to 16 KB (the power of two within 24 KB),
    // though twice its window asks for 32 KB.
    cfg.tx_memory = 48 * 1024;
    let mut stack = stack_with(cfg);
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let conns: Vec<Conn> = (0..2).map(|i| open_from(&mut stack, l, i)).collect();
    let blob = pattern(256 * 1024, 1);
    for c in &conns {
        let info = stack.info(c.id).unwrap();
        assert!(2 * info.cwnd.min(info.snd_wnd) as usize > 16 * 1024);
        assert_eq!(stack.send(c.id, &blob), Ok(16 * 1024));
        let info = stack.info(c.id).unwrap();
        assert_eq!(info.writable + info.unacked, 16 * 1024);
    }
}

#[test]
fn a_send_buffer_grown_early_holds_only_the_share_once_more_connections_open() {
    let mut cfg = config();
    cfg.tx_buffer = 1 << 20;
    cfg.tx_buffer_initial = 4096;
    cfg.tx_memory = 64 * 1024;
    let mut stack = stack_with(cfg);
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let first = open_from(&mut stack, l, 0);
    let blob = pattern(256 * 1024, 1);
    // Alone, it grows to twice its window (32 KB, within its 64 KB share).
    assert_eq!(stack.send(first.id, &blob), Ok(32 * 1024));
    let sent: usize = first
        .peer
        .recv_all(&mut stack, ms(1))
        .iter()
        .map(|(_, p)| p.len())
        .sum();
    // Three more connections: the share is 16 KB each now.
    for i in 1..4 {
        open_from(&mut stack, l, i);
    }
    first.peer.send(
        &mut stack,
        ms(2),
        first.ack_seg().ack(first.our_nxt + sent as u32),
    );
    let info = stack.info(first.id).unwrap();
    assert_eq!(info.unacked, 32 * 1024 - sent);
    assert_eq!(info.writable, (16 * 1024usize).saturating_sub(info.unacked));
    // Once what it holds drains, it takes only up to the share.
    let mut acked = sent;
    for t in 3..20 {
        let more: usize = first
            .peer
            .recv_all(&mut stack, ms(t))
            .iter()
            .map(|(_, p)| p.len())
            .sum();
        acked += more;
        first.peer.send(
            &mut stack,
            ms(t),
            first.ack_seg().ack(first.our_nxt + acked as u32),
        );
    }
    assert_eq!(stack.info(first.id).unwrap().unacked, 0);
    assert_eq!(stack.send(first.id, &blob), Ok(16 * 1024));
}
