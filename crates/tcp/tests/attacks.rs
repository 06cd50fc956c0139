//! Attacks and hostile peers: RFC 5961 (blind RST, SYN and data injection, challenge-ACK
//! rate limiting), RFC 9293 3.10.7.4 ACK checks, RFC 7323 PAWS and window-scale bounds,
//! malformed options, a zero window held forever (RFC 9293 3.8.6.1), SYN floods and SYN
//! cookies (AccelTCP 4.1).

mod harness;

use harness::*;
use sluice_tcp::{ConnError, Error, Stack, TcpState};
use sluice_wire::tcp::{SeqNumber, TcpHeader, TcpOptions};

/// The challenge ACK a connection sends: our snd_nxt, the peer's rcv_nxt, no data.
fn assert_challenge_ack(seg: &TcpHeader, payload: &[u8], c: &Conn) {
    assert!(payload.is_empty());
    assert_eq!(seg.flags, ACK);
    assert_eq!((seg.seq, seg.ack), (c.our_nxt, c.peer_nxt));
    assert_eq!((seg.src_port, seg.dst_port), (LISTEN_PORT, c.peer.port));
}

#[test]
fn rfc5961_3_2_in_window_rst_gets_challenge_ack() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    for seg in [
        c.ack_seg().seq(c.peer_nxt + 1u32).flags(RST),
        c.ack_seg().seq(c.peer_nxt + 1000u32).flags(RST | ACK),
        c.ack_seg()
            .seq(c.peer_nxt + (RX_BUFFER as u32 - 1))
            .flags(RST),
    ] {
        c.peer.send(&mut stack, ms(1), seg);
        let (h, p) = c.peer.recv_one(&mut stack, ms(1));
        assert_challenge_ack(&h, &p, &c);
    }
    assert_eq!(stack.state(c.id), Ok(TcpState::Established));
    assert_eq!(stack.error(c.id), Ok(None));
    let counters = stack.counters();
    assert_eq!((counters.challenge_acks, counters.rst_received), (3, 0));
    // The connection still works.
    c.peer.send(&mut stack, ms(2), c.data_seg(b"still here"));
    let (ack, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(ack.ack, c.peer_nxt + 10u32);
    assert_eq!(read_all(&mut stack, c.id), b"still here");
}

#[test]
fn rfc5961_3_2_rst_outside_the_window_is_dropped_silently() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    for seq in [c.peer_nxt - 1u32, c.peer_nxt + (RX_BUFFER as u32 + 10)] {
        c.peer
            .send(&mut stack, ms(1), c.ack_seg().seq(seq).flags(RST));
    }
    c.peer.recv_nothing(&mut stack, ms(1));
    assert_eq!(stack.state(c.id), Ok(TcpState::Established));
    assert_eq!(stack.counters().out_of_window, 2);
}

#[test]
fn rfc5961_3_2_rst_with_exact_rcv_nxt_resets_the_connection() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    c.peer.send(&mut stack, ms(1), c.ack_seg().flags(RST));
    c.peer.recv_nothing(&mut stack, ms(1));
    assert_eq!(stack.state(c.id), Ok(TcpState::Closed));
    assert_eq!(stack.error(c.id), Ok(Some(ConnError::Reset)));
    let mut buf = [0u8; 4];
    assert_eq!(
        stack.recv(c.id, &mut buf),
        Err(Error::Connection(ConnError::Reset))
    );
    assert_eq!(
        stack.send(c.id, b"x"),
        Err(Error::Connection(ConnError::Reset))
    );
    assert!(readiness_of(&events(&mut stack), c.id).unwrap().error());
    assert_eq!(stack.counters().rst_received, 1);
    stack.close(c.id).unwrap();
    assert_eq!(stack.connection_count(), 0);
}

#[test]
fn rfc5961_4_2_syn_in_established_gets_challenge_ack() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    for seg in [
        c.peer.seg(SYN).seq(c.peer_nxt + 10u32),
        c.peer.seg(SYN).seq(c.peer_isn),
        c.peer.seg(SYN).seq(c.peer_nxt + 5_000_000u32),
        c.ack_seg().flags(SYN | ACK),
    ] {
        c.peer.send(&mut stack, ms(1), seg);
        let (h, p) = c.peer.recv_one(&mut stack, ms(1));
        assert_challenge_ack(&h, &p, &c);
    }
    assert_eq!(stack.state(c.id), Ok(TcpState::Established));
    assert_eq!(stack.counters().challenge_acks, 4);
    assert_eq!(stack.counters().rst_sent, 0);
}

#[test]
fn rfc5961_7_challenge_ack_rate_limit_is_per_connection() {
    let mut cfg = config();
    cfg.challenge_ack_limit = 3;
    let mut stack = stack_with(cfg);
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let a = passive_open(
        &mut stack,
        l,
        Peer::new(40000, LISTEN_PORT),
        ms(0),
        1000,
        mss_only(1460),
        65535,
    );
    let b = passive_open(
        &mut stack,
        l,
        Peer::new(40001, LISTEN_PORT),
        ms(0),
        9000,
        mss_only(1460),
        65535,
    );
    let rst = |c: &Conn| c.ack_seg().seq(c.peer_nxt + 7u32).flags(RST);
    for _ in 0..3 {
        a.peer.send(&mut stack, ms(10), rst(&a));
        let (h, p) = a.peer.recv_one(&mut stack, ms(10));
        assert_challenge_ack(&h, &p, &a);
    }
    // A's budget for this second is spent.
    a.peer.send(&mut stack, ms(10), rst(&a));
    a.peer.recv_nothing(&mut stack, ms(10));
    assert_eq!(stack.counters().challenge_acks_suppressed, 1);
    // B's is not.
    b.peer.send(&mut stack, ms(10), rst(&b));
    let (h, p) = b.peer.recv_one(&mut stack, ms(10));
    assert_challenge_ack(&h, &p, &b);
    let counters = stack.counters();
    assert_eq!(
        (counters.challenge_acks, counters.challenge_acks_suppressed),
        (4, 1)
    );
    // A new second refills A's budget.
    a.peer.send(&mut stack, ms(1010), rst(&a));
    let (h, p) = a.peer.recv_one(&mut stack, ms(1010));
    assert_challenge_ack(&h, &p, &a);
    assert_eq!(stack.state(a.id), Ok(TcpState::Established));
    assert_eq!(stack.state(b.id), Ok(TcpState::Established));
}

#[test]
fn rfc5961_5_2_ack_below_snd_una_minus_max_window_is_dropped() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    let before = stack.info(c.id).unwrap();
    // MAX.SND.WND is the peer's 65535.
    c.peer.send(
        &mut stack,
        ms(1),
        c.data_seg(b"injected").ack(c.our_nxt - 65536u32),
    );
    let (h, p) = c.peer.recv_one(&mut stack, ms(1));
    assert_challenge_ack(&h, &p, &c);
    assert_eq!(stack.info(c.id).unwrap(), before, "no state change");
    assert_eq!(stack.counters().bad_acks, 1);
    assert_eq!(stack.counters().challenge_acks, 1);
    // At exactly SND.UNA - MAX.SND.WND the ACK is acceptable: the data is taken.
    c.peer.send(
        &mut stack,
        ms(2),
        c.data_seg(b"fine").ack(c.our_nxt - 65535u32),
    );
    let (h, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(h.ack, c.peer_nxt + 4u32);
    assert_eq!(read_all(&mut stack, c.id), b"fine");
    assert_eq!(stack.counters().bad_acks, 1);
}

#[test]
fn rfc9293_3_10_7_4_ack_of_unsent_data_gets_ack_and_segment_dropped() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    stack.send(c.id, b"abc").unwrap();
    c.peer.recv_one(&mut stack, ms(0));
    let c = Conn {
        our_nxt: c.our_nxt + 3u32,
        ..c
    };
    let before = stack.info(c.id).unwrap();
    c.peer.send(
        &mut stack,
        ms(1),
        c.data_seg(b"injected").ack(c.our_nxt + 1u32),
    );
    let (h, p) = c.peer.recv_one(&mut stack, ms(1));
    assert_challenge_ack(&h, &p, &c);
    assert_eq!(stack.info(c.id).unwrap(), before);
    assert_eq!(stack.info(c.id).unwrap().readable, 0);
    assert_eq!(stack.counters().bad_acks, 1);
    assert_eq!(stack.state(c.id), Ok(TcpState::Established));
}

#[test]
fn rfc7323_5_3_paws_drops_segment_with_older_tsval() {
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let c = passive_open(
        &mut stack,
        l,
        Peer::new(40000, LISTEN_PORT),
        ms(0),
        1000,
        full_syn_options(1460, 0, 100),
        65535,
    );
    c.peer
        .send(&mut stack, ms(1), c.data_seg(b"new").ts(200, 0));
    let (ack, _) = c.peer.recv_one(&mut stack, ms(1));
    assert_eq!(ack.ack, c.peer_nxt + 3u32);
    assert_eq!(
        ack.options.timestamp.map(|t| t.1),
        Some(200),
        "TSecr echoes TS.Recent"
    );
    let c = Conn {
        peer_nxt: c.peer_nxt + 3u32,
        ..c
    };
    let before = stack.info(c.id).unwrap();
    // An old duplicate from a previous wrap of the sequence space: older TSval.
    c.peer
        .send(&mut stack, ms(2), c.data_seg(b"old").ts(150, 0));
    let (ack, p) = c.peer.recv_one(&mut stack, ms(2));
    assert!(p.is_empty());
    assert_eq!((ack.flags, ack.ack), (ACK, c.peer_nxt));
    assert_eq!(ack.options.timestamp.map(|t| t.1), Some(200));
    assert_eq!(stack.counters().paws_drops, 1);
    assert_eq!(stack.info(c.id).unwrap(), before);
    // Only the accepted data is readable; newer timestamps pass again.
    assert_eq!(read_all(&mut stack, c.id), b"new");
    c.peer
        .send(&mut stack, ms(3), c.data_seg(b"next").ts(201, 0));
    let (ack, _) = c.peer.recv_one(&mut stack, ms(3));
    assert_eq!(ack.ack, c.peer_nxt + 4u32);
    assert_eq!(read_all(&mut stack, c.id), b"next");
}

/// Option areas that must be refused: (description, bytes).
const MALFORMED_OPTIONS: &[(&str, &[u8])] = &[
    ("length 0", &[8, 0, 0, 0]),
    ("length 1", &[8, 1, 0, 0]),
    ("length overruns the option area", &[2, 10, 5, 0]),
    ("timestamp overruns", &[1, 1, 8, 10, 0, 0, 0, 0]),
    ("MSS with length 3", &[2, 3, 5, 1]),
    ("MSS with length 6", &[2, 6, 5, 0, 0, 0, 1, 1]),
    ("window scale with length 4", &[3, 4, 1, 1]),
    ("SACK-permitted with length 3", &[4, 3, 0, 1]),
    ("SACK with no block", &[1, 1, 5, 2]),
    ("kind without a length byte", &[1, 1, 1, 2]),
];

#[test]
fn rfc9293_must_7_malformed_options_on_established_connection_are_dropped_and_counted() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    let before = stack.info(c.id).unwrap();
    for (i, (what, raw)) in MALFORMED_OPTIONS.iter().enumerate() {
        c.peer
            .send(&mut stack, ms(1), c.data_seg(b"evil").raw_opts(raw));
        c.peer.recv_nothing(&mut stack, ms(1));
        assert_eq!(stack.counters().malformed, 3 * i as u64 + 1, "{what}");
        // RST and SYN with bad options are dropped before any processing too.
        c.peer
            .send(&mut stack, ms(1), c.ack_seg().flags(RST).raw_opts(raw));
        c.peer
            .send(&mut stack, ms(1), c.peer.seg(SYN).raw_opts(raw));
        c.peer.recv_nothing(&mut stack, ms(1));
        assert_eq!(stack.counters().malformed, 3 * i as u64 + 3, "{what}");
        assert_eq!(stack.state(c.id), Ok(TcpState::Established), "{what}");
    }
    assert_eq!(
        stack.counters().malformed,
        3 * MALFORMED_OPTIONS.len() as u64
    );
    assert_eq!(stack.info(c.id).unwrap(), before, "connection unaffected");
    // The same data with well-formed options goes through.
    c.peer.send(
        &mut stack,
        ms(2),
        c.data_seg(b"good").raw_opts(&[1, 1, 1, 0]),
    );
    let (ack, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(ack.ack, c.peer_nxt + 4u32);
    assert_eq!(read_all(&mut stack, c.id), b"good");
}

#[test]
fn rfc9293_must_7_malformed_options_in_syn_to_listener_are_dropped_without_state() {
    let mut stack = stack();
    stack.listen(LISTEN_PORT, 16).unwrap();
    let peer = Peer::new(40000, LISTEN_PORT);
    for (i, (what, raw)) in MALFORMED_OPTIONS.iter().enumerate() {
        peer.send(
            &mut stack,
            ms(0),
            peer.seg(SYN).seq(SeqNumber(77)).raw_opts(raw),
        );
        peer.recv_nothing(&mut stack, ms(0));
        assert_eq!(stack.counters().malformed, i as u64 + 1, "{what}");
        assert_eq!(stack.connection_count(), 0, "{what}");
    }
}

#[test]
fn rfc7323_5_3_a_reordered_pure_ack_failing_paws_is_dropped_without_an_answer() {
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let c = passive_open(
        &mut stack,
        l,
        Peer::new(40001, LISTEN_PORT),
        ms(0),
        1000,
        full_syn_options(1460, 0, 100),
        65535,
    );
    c.peer.send(&mut stack, ms(1), c.ack_seg().ts(200, 0));
    c.peer.recv_nothing(&mut stack, ms(1));
    let before = stack.info(c.id).unwrap();
    // The pure ACK sent just before, overtaken on the way: older TSval, nothing new.
    c.peer.send(&mut stack, ms(2), c.ack_seg().ts(199, 0));
    c.peer.recv_nothing(&mut stack, ms(2));
    assert_eq!(stack.counters().paws_drops, 1);
    assert_eq!(
        stack.counters().challenge_acks,
        0,
        "no ACK answers a disordered ACK"
    );
    assert_eq!(stack.info(c.id).unwrap(), before);
    // A replayed data segment failing PAWS is still answered (RFC 7323 5.3 R1).
    c.peer
        .send(&mut stack, ms(3), c.data_seg(b"old").ts(150, 0));
    let (ack, p) = c.peer.recv_one(&mut stack, ms(3));
    assert!(p.is_empty());
    assert_eq!(ack.ack, c.peer_nxt);
}

#[test]
fn rfc7323_2_3_window_scale_far_above_14_is_used_as_14() {
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let opts = TcpOptions {
        mss: Some(1460),
        window_scale: Some(255),
        ..Default::default()
    };
    let c = passive_open(
        &mut stack,
        l,
        Peer::new(40000, LISTEN_PORT),
        ms(0),
        1,
        opts,
        0xffff,
    );
    assert_eq!(stack.info(c.id).unwrap().snd_wnd, 0xffff << 14);
}

#[test]
fn rfc9293_3_8_6_1_must_37_zero_window_forever_keeps_probing_with_backoff_and_never_times_out() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    stack.send(c.id, &pattern(1000, 1)).unwrap();
    c.peer.recv_one(&mut stack, ms(0));
    // The peer takes the data and closes its window, within the first RTO (an ACK handled
    // past the RTO deadline would give no RTT sample, RFC 6298 3).
    c.peer.send(
        &mut stack,
        ms(4),
        c.ack_seg().ack(c.our_nxt + 1000u32).win(0),
    );
    let c = Conn {
        our_nxt: c.our_nxt + 1000u32,
        ..c
    };
    assert_eq!(stack.send(c.id, &pattern(5000, 2)).unwrap(), 5000);
    c.peer.recv_nothing(&mut stack, ms(10));
    let first = stack.info(c.id).unwrap().rto;
    // RFC 6298 2.2-2.4: the handshake's ~0 us sample, then 4 ms: SRTT 0.5 ms, RTTVAR 1 ms,
    // 4.5 ms, raised to the floor.
    assert_eq!(
        first, RTO_MIN,
        "RTO from the handshake and one 4 ms RTT sample"
    );

    // Answer every probe with a zero window for 20 user timeouts of virtual time.
    let end = ms(10) + USER_TIMEOUT * 20;
    let mut probes = Vec::new();
    let mut now = ms(10);
    loop {
        let next = stack
            .poll_timeout()
            .expect("a persist deadline is always armed");
        assert!(next <= now + RTO_MAX, "no deadline beyond rto_max");
        if next > end {
            break;
        }
        now = next;
        stack.handle_timeout(now);
        let segs = c.peer.recv_all(&mut stack, now);
        assert!(segs.len() <= 1, "at most one probe per expiry: {segs:?}");
        for (h, p) in segs {
            // RFC 9293 3.8.6.1: a segment the peer must acknowledge, carrying no new data.
            assert_eq!(h.flags, ACK);
            assert_eq!(h.seq, c.our_nxt - 1u32);
            assert!(p.is_empty());
            probes.push(now);
            c.peer.send(&mut stack, now, c.ack_seg().win(0));
            c.peer.recv_nothing(&mut stack, now);
        }
        assert_eq!(stack.state(c.id), Ok(TcpState::Established));
    }
    // Intervals: the RTO, then doubling up to rto_max, then rto_max forever.
    let mut expected = Vec::new();
    let mut t = ms(10) + first;
    let mut interval = first;
    while t <= end {
        expected.push(t);
        interval = (interval * 2).min(RTO_MAX);
        t += interval;
    }
    assert_eq!(probes, expected);
    assert!(probes.len() > 50);
    let counters = stack.counters();
    assert_eq!(counters.window_probes, probes.len() as u64);
    assert_eq!((counters.user_timeouts, counters.timeouts), (0, 0));
    assert_eq!(stack.error(c.id), Ok(None));
    // Bounded: one connection, the data still queued once, invariants hold.
    assert_eq!(stack.connection_count(), 1);
    let info = stack.info(c.id).unwrap();
    assert_eq!(
        (info.unacked, info.snd_nxt, info.snd_una),
        (5000, c.our_nxt, c.our_nxt)
    );
    stack.check_invariants().unwrap();
    // The window opens: the data flows.
    c.peer.send(&mut stack, now, c.ack_seg().win(65535));
    let segs = c.peer.recv_all(&mut stack, now);
    let lens: Vec<usize> = segs.iter().map(|(_, p)| p.len()).collect();
    // Nagle holds the 620-byte tail until the full segments are acknowledged.
    assert_eq!(lens, vec![1460, 1460, 1460]);
    assert_eq!(segs[0].0.seq, c.our_nxt);
    c.peer
        .send(&mut stack, now, c.ack_seg().ack(c.our_nxt + 4380u32));
    let (tail, p) = c.peer.recv_one(&mut stack, now);
    assert_eq!((tail.seq, p.len()), (c.our_nxt + 4380u32, 620));
}

#[test]
fn rfc9293_3_8_6_must_35_must_37_window_shrunk_to_zero_with_data_outstanding_never_times_out() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    stack.send(c.id, &pattern(2920, 1)).unwrap();
    assert_eq!(c.peer.recv_all(&mut stack, ms(0)).len(), 2);
    // The peer shrinks its window to zero without acknowledging the data in flight.
    c.peer.send(&mut stack, ms(10), c.ack_seg().win(0));
    c.peer.recv_nothing(&mut stack, ms(10));
    let end = ms(10) + USER_TIMEOUT * 20;
    let mut probes = Vec::new();
    let mut now = ms(10);
    while let Some(next) = stack.poll_timeout() {
        if next > end {
            break;
        }
        now = next;
        stack.handle_timeout(now);
        for (h, p) in c.peer.recv_all(&mut stack, now) {
            // Nothing can be resent into a zero window; only probes go out.
            assert_eq!((h.flags, h.seq, p.len()), (ACK, c.our_nxt - 1u32, 0));
            probes.push(now);
            c.peer.send(&mut stack, now, c.ack_seg().win(0));
        }
        assert_eq!(stack.state(c.id), Ok(TcpState::Established), "at {now:?}");
    }
    assert!(probes.len() > 50, "{} probes", probes.len());
    assert!(probes.windows(2).all(|w| w[1] - w[0] <= RTO_MAX));
    let counters = stack.counters();
    assert_eq!(counters.window_probes, probes.len() as u64);
    assert_eq!(counters.user_timeouts, 0);
    assert_eq!(stack.error(c.id), Ok(None));
    // The window opens: retransmission resumes from snd_una.
    c.peer.send(&mut stack, now, c.ack_seg().win(65535));
    let (h, p) = c.peer.recv_one(&mut stack, now);
    assert_eq!((h.seq, p.len()), (c.our_nxt, 1460));
}

/// Sends `n` SYNs from ports `first..first + n` and returns their SYN-ACKs (drained).
fn syn_burst(stack: &mut Stack, first: u16, n: u16) -> Vec<TcpHeader> {
    let mut out = Vec::new();
    for port in first..first + n {
        let p = Peer::new(port, LISTEN_PORT);
        p.send(stack, ms(1), p.seg(SYN).seq(SeqNumber(port as u32 * 1000)));
        let segs = p.recv_all(stack, ms(1));
        assert_eq!(segs.len(), 1);
        out.push(segs[0].0);
    }
    out
}

#[test]
fn acceltcp_4_1_syn_flood_gets_cookies_and_legitimate_client_is_accepted() {
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    // The SYN backlog (8) fills with half-open connections.
    let half_open = syn_burst(&mut stack, 50000, 8);
    assert!(half_open.iter().all(|h| h.flags == SYN | ACK));
    assert_eq!(stack.connection_count(), 8);
    assert_eq!(stack.counters().syn_cookies_sent, 0);
    // The flood goes on: cookies, and no new table entries.
    let cookies = syn_burst(&mut stack, 50008, 200);
    assert!(cookies.iter().all(|h| h.flags == SYN | ACK));
    assert_eq!(stack.counters().syn_cookies_sent, 200);
    assert_eq!(stack.connection_count(), 8);

    // A legitimate client with every option.
    let client = Peer::new(60000, LISTEN_PORT);
    client.send(
        &mut stack,
        ms(2),
        client
            .seg(SYN)
            .seq(SeqNumber(777_000))
            .opts(full_syn_options(1400, 7, 4242)),
    );
    let (synack, _) = client.recv_one(&mut stack, ms(2));
    assert_eq!(synack.flags, SYN | ACK);
    assert_eq!(synack.ack, SeqNumber(777_001));
    assert_eq!(synack.options.mss, Some(OUR_MSS));
    assert_eq!(synack.options.window_scale, Some(0));
    assert!(synack.options.sack_permitted);
    let (cookie_tsval, tsecr) = synack.options.timestamp.unwrap();
    assert_eq!(tsecr, 4242);
    assert_eq!(stack.counters().syn_cookies_sent, 201);
    assert_eq!(stack.connection_count(), 8);

    client.send(
        &mut stack,
        ms(3),
        client
            .seg(ACK)
            .seq(SeqNumber(777_001))
            .ack(synack.seq + 1u32)
            .win(10)
            .ts(4243, cookie_tsval),
    );
    client.recv_nothing(&mut stack, ms(3));
    assert_eq!(stack.counters().syn_cookies_accepted, 1);
    assert_eq!(stack.connection_count(), 9);
    let id = stack.accept(l).expect("the cookie connection is accepted");
    assert_eq!(stack.state(id), Ok(TcpState::Established));
    let info = stack.info(id).unwrap();
    assert_eq!(info.mss, 1400 - 12, "MSS decoded from the cookie");
    assert_eq!(info.snd_wnd, 10 << 7, "window scale decoded from the TSecr");
    assert_eq!(
        (info.snd_una, info.rcv_nxt),
        (synack.seq + 1u32, SeqNumber(777_001))
    );
    let c = Conn {
        id,
        peer: client,
        peer_isn: SeqNumber(777_000),
        our_isn: synack.seq,
        peer_nxt: SeqNumber(777_001),
        our_nxt: synack.seq + 1u32,
    };
    // SACK decoded: an out-of-order segment is reported in a SACK block.
    c.peer.send(
        &mut stack,
        ms(4),
        c.data_seg(b"later")
            .seq(c.peer_nxt + 10u32)
            .win(10)
            .ts(4244, 0),
    );
    let (dup, _) = c.peer.recv_one(&mut stack, ms(4));
    assert_eq!(dup.ack, c.peer_nxt);
    assert_eq!(
        dup.options.sacks(),
        &[(c.peer_nxt + 10u32, c.peer_nxt + 15u32)]
    );
    // RFC 7323 4.3: an out-of-order segment does not update TS.Recent.
    assert_eq!(dup.options.timestamp.map(|t| t.1), Some(4243));

    // The flood's half-open connections expire after their SYN-ACK retries; the backlog
    // drains and new SYNs get real connections again.
    let later = ms(10_000);
    let resent = run_until(&mut stack, later);
    // Each of the 8 half-open connections retransmits its SYN-ACK syn_retries times.
    assert_eq!(resent.len(), 8 * SYN_RETRIES as usize);
    assert!(resent.iter().all(|(_, (h, _))| h.flags == SYN | ACK));
    assert_eq!(
        stack.connection_count(),
        1,
        "only the accepted connection is left"
    );
    let p = Peer::new(62000, LISTEN_PORT);
    p.send(&mut stack, later, p.seg(SYN).seq(SeqNumber(1)));
    p.recv_one(&mut stack, later);
    assert_eq!(stack.connection_count(), 2);
    assert_eq!(stack.counters().syn_cookies_sent, 201);
}

#[test]
fn acceltcp_4_1_cookie_without_timestamps_keeps_mss_only() {
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    syn_burst(&mut stack, 50000, 8);
    let client = Peer::new(60001, LISTEN_PORT);
    let opts = TcpOptions {
        mss: Some(1300),
        window_scale: Some(5),
        sack_permitted: true,
        ..Default::default()
    };
    client.send(
        &mut stack,
        ms(2),
        client.seg(SYN).seq(SeqNumber(5)).opts(opts),
    );
    let (synack, _) = client.recv_one(&mut stack, ms(2));
    assert_eq!(stack.counters().syn_cookies_sent, 1);
    // Without timestamps there is nowhere to keep scaling and SACK: they are not offered.
    assert_eq!(
        synack.options,
        TcpOptions {
            mss: Some(OUR_MSS),
            ..Default::default()
        }
    );
    client.send(
        &mut stack,
        ms(3),
        client
            .seg(ACK)
            .seq(SeqNumber(6))
            .ack(synack.seq + 1u32)
            .win(1000),
    );
    let id = stack.accept(l).unwrap();
    let info = stack.info(id).unwrap();
    assert_eq!((info.mss, info.snd_wnd), (1300, 1000));
}

#[test]
fn rfc7323_5_4_cookie_syn_ack_tsval_never_runs_ahead_of_later_tsvals() {
    // The cookie's option bits live in the TSval's low bits; they must not make the SYN-ACK's
    // TSval newer than the segments that follow, or the peer's PAWS drops those.
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 64).unwrap();
    syn_burst(&mut stack, 50000, 8);
    for i in 0..32u16 {
        let now = ms(100 + i as u64);
        let client = Peer::new(61000 + i, LISTEN_PORT);
        client.send(
            &mut stack,
            now,
            client
                .seg(SYN)
                .seq(SeqNumber(1))
                .opts(full_syn_options(1460, 14, 9)),
        );
        let (synack, _) = client.recv_one(&mut stack, now);
        let (cookie_tsval, _) = synack.options.timestamp.unwrap();
        client.send(
            &mut stack,
            now,
            client
                .seg(ACK)
                .seq(SeqNumber(2))
                .ack(synack.seq + 1u32)
                .ts(10, cookie_tsval),
        );
        let id = stack.accept(l).unwrap();
        stack.send(id, b"x").unwrap();
        let (data, _) = client.recv_one(&mut stack, now);
        let (tsval, tsecr) = data.options.timestamp.unwrap();
        assert_eq!(tsecr, 10);
        assert!(
            tsval.wrapping_sub(cookie_tsval) as i32 >= 0,
            "client {i}: data TSval {tsval} older than the cookie SYN-ACK's {cookie_tsval}"
        );
    }
}

/// Fills the listener's backlog (8 half-open connections), then has port 60000 send a SYN
/// with ISN 1000 at 2 ms: it is answered with a SYN cookie, returned with the client.
fn cookie_from_a_full_backlog(stack: &mut Stack) -> (Peer, SeqNumber) {
    syn_burst(stack, 50000, 8);
    let client = Peer::new(60000, LISTEN_PORT);
    client.send(
        stack,
        ms(2),
        client.seg(SYN).seq(SeqNumber(1000)).opts(mss_only(1460)),
    );
    let (synack, _) = client.recv_one(stack, ms(2));
    (client, synack.seq)
}

#[test]
fn acceltcp_4_1_forged_cookie_ack_gets_rst_and_no_connection() {
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let (client, cookie) = cookie_from_a_full_backlog(&mut stack);
    let forged = [
        // A guessed cookie.
        client.seg(ACK).seq(SeqNumber(1001)).ack(cookie + 2u32),
        // The right cookie for another ISN.
        client.seg(ACK).seq(SeqNumber(5001)).ack(cookie + 1u32),
        // The right cookie replayed from another port.
        client
            .seg(ACK)
            .src_port(60002)
            .seq(SeqNumber(1001))
            .ack(cookie + 1u32),
    ];
    for (i, seg) in forged.into_iter().enumerate() {
        let ack = seg.ack;
        client.send(&mut stack, ms(3), seg);
        let (rst, _) = client.recv_one(&mut stack, ms(3));
        assert_eq!((rst.flags, rst.seq), (RST, ack), "forgery {i}");
        assert_eq!(stack.counters().syn_cookies_rejected, i as u64 + 1);
    }
    assert_eq!(stack.connection_count(), 8);
    assert_eq!(stack.counters().syn_cookies_accepted, 0);
    assert_eq!(stack.accept(l), Err(Error::WouldBlock));
    // The genuine ACK still works.
    client.send(
        &mut stack,
        ms(4),
        client.seg(ACK).seq(SeqNumber(1001)).ack(cookie + 1u32),
    );
    assert!(stack.accept(l).is_ok());
}

#[test]
fn acceltcp_4_1_acks_are_checked_as_cookies_only_while_one_may_be_valid() {
    // Linux's tcp_synq_no_recent_overflow: with no cookie sent in the last two cookie
    // periods (128 s), an ACK in LISTEN cannot carry a valid one; it gets its RST unchecked,
    // so a flood of ACKs cannot search the 24-bit cookie space meanwhile.
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let (client, cookie) = cookie_from_a_full_backlog(&mut stack);
    assert_eq!(stack.counters().syn_cookies_sent, 1);
    // While the cookie may be valid, a wrong one is checked and rejected.
    let guess = client.seg(ACK).seq(SeqNumber(1001)).ack(cookie + 2u32);
    client.send(&mut stack, ms(3), guess.clone());
    client.recv_one(&mut stack, ms(3));
    let c = stack.counters();
    assert_eq!((c.syn_cookies_rejected, c.listen_stray_acks), (1, 0));
    // 129 s later (the half-open entries expired long ago), nothing is checked: even the
    // genuine cookie, expired by now, is a stray ACK.
    let later = ms(129_000);
    for seg in [
        guess,
        client.seg(ACK).seq(SeqNumber(1001)).ack(cookie + 1u32),
    ] {
        let ack = seg.ack;
        client.send(&mut stack, later, seg);
        let (rst, _) = client.recv_one(&mut stack, later);
        assert_eq!((rst.flags, rst.seq), (RST, ack));
    }
    let c = stack.counters();
    assert_eq!((c.syn_cookies_rejected, c.listen_stray_acks), (1, 2));
    assert_eq!(c.syn_cookies_accepted, 0);
    assert_eq!(stack.accept(l), Err(Error::WouldBlock));
}

#[test]
fn rfc9293_must_3_truncated_and_corrupted_frames_are_dropped_and_counted() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    let before = stack.info(c.id).unwrap();
    let frame = c.peer.frame(&c.data_seg(b"payload"));
    for n in 0..frame.len() {
        stack.handle_frame(ms(1), &frame[..n]);
    }
    c.peer.recv_nothing(&mut stack, ms(1));
    assert_eq!(stack.counters().malformed, frame.len() as u64);
    // A flipped payload bit fails the TCP checksum.
    let mut bad = frame.clone();
    *bad.last_mut().unwrap() ^= 1;
    stack.handle_frame(ms(1), &bad);
    c.peer.recv_nothing(&mut stack, ms(1));
    assert_eq!(stack.counters().bad_checksum, 1);
    assert_eq!(stack.info(c.id).unwrap(), before);
    // The intact frame is taken.
    stack.handle_frame(ms(2), &frame);
    let (ack, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(ack.ack, c.peer_nxt + 7u32);
}

#[test]
fn acceltcp_4_1_cookie_ack_wins_over_a_half_open_entry_from_the_retransmitted_syn() {
    // Under a burst of connects the backlog is full when a SYN arrives (cookie SYN-ACK), has
    // room when the same SYN is retransmitted (half-open entry, another ISN), and the peer,
    // established on the cookie, ACKs the cookie. That ACK must complete the connection, not
    // draw a RST for a connection the peer already uses.
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 64).unwrap();
    let half_open = syn_burst(&mut stack, 50000, 8);
    let client = Peer::new(60000, LISTEN_PORT);
    let syn = client
        .seg(SYN)
        .seq(SeqNumber(777_000))
        .opts(full_syn_options(1460, 7, 100));
    client.send(&mut stack, ms(2), syn.clone());
    let (cookie_synack, _) = client.recv_one(&mut stack, ms(2));
    assert_eq!(stack.counters().syn_cookies_sent, 1);
    // The backlog drains: the burst's handshakes complete.
    for (i, h) in half_open.iter().enumerate() {
        let port = 50000 + i as u16;
        let p = Peer::new(port, LISTEN_PORT);
        p.send(
            &mut stack,
            ms(3),
            p.seg(ACK)
                .seq(SeqNumber(port as u32 * 1000 + 1))
                .ack(h.seq + 1u32),
        );
    }
    // The retransmitted SYN now gets a half-open entry and a SYN-ACK with a different ISN.
    client.send(&mut stack, ms(4), syn.ts(101, 0));
    let (stateful_synack, _) = client.recv_one(&mut stack, ms(4));
    assert_eq!(stack.counters().syn_cookies_sent, 1);
    assert_ne!(stateful_synack.seq, cookie_synack.seq);
    let count = stack.connection_count();

    // The peer took the first SYN-ACK: it ACKs the cookie.
    let (cookie_tsval, _) = cookie_synack.options.timestamp.unwrap();
    client.send(
        &mut stack,
        ms(5),
        client
            .seg(ACK)
            .seq(SeqNumber(777_001))
            .ack(cookie_synack.seq + 1u32)
            .ts(102, cookie_tsval),
    );
    client.recv_nothing(&mut stack, ms(5));
    let counters = stack.counters();
    assert_eq!(counters.syn_cookies_accepted, 1);
    assert_eq!(counters.half_open_replaced_by_cookie, 1);
    assert_eq!(stack.connection_count(), count, "replaced, not added");
    let mut accepted = Vec::new();
    while let Ok(id) = stack.accept(l) {
        accepted.push(id);
    }
    assert_eq!(accepted.len(), 9);
    let id = *accepted.last().unwrap();
    let info = stack.info(id).unwrap();
    assert_eq!(
        (info.snd_una, info.rcv_nxt),
        (cookie_synack.seq + 1u32, SeqNumber(777_001))
    );
    // And the connection carries data on the cookie's sequence space.
    stack.send(id, b"hello").unwrap();
    let (data, payload) = client.recv_one(&mut stack, ms(6));
    assert_eq!(
        (data.seq, &payload[..]),
        (cookie_synack.seq + 1u32, &b"hello"[..])
    );

    // An ACK that fits neither ISN is still refused with a RST (RFC 9293 3.10.7.4).
    let other = Peer::new(60001, LISTEN_PORT);
    other.send(&mut stack, ms(7), other.seg(SYN).seq(SeqNumber(5)));
    let (synack, _) = other.recv_one(&mut stack, ms(7));
    other.send(
        &mut stack,
        ms(8),
        other.seg(ACK).seq(SeqNumber(6)).ack(synack.seq + 7u32),
    );
    let (rst, _) = other.recv_one(&mut stack, ms(8));
    assert_eq!(rst.flags, RST);
    assert_eq!(stack.counters().half_open_replaced_by_cookie, 1);
}

#[test]
fn a_full_table_refuses_syns_and_late_cookie_acks_with_rst() {
    let mut cfg = config();
    cfg.max_connections = 4;
    cfg.syn_backlog = 2;
    let mut stack = stack_with(cfg);
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    // Two half-open connections fill the SYN backlog; the next three SYNs get cookies
    // while the table still has two free slots.
    let half_open = syn_burst(&mut stack, 100, 2);
    let cookies = syn_burst(&mut stack, 102, 3);
    assert!(half_open
        .iter()
        .chain(&cookies)
        .all(|h| h.flags == SYN | ACK));
    assert_eq!(stack.counters().syn_cookies_sent, 3);
    assert_eq!(stack.connection_count(), 2);
    let cookie_ack = |stack: &mut Stack, port: u16, synack: &TcpHeader| {
        let p = Peer::new(port, LISTEN_PORT);
        p.send(
            stack,
            ms(2),
            p.seg(ACK)
                .seq(SeqNumber(port as u32 * 1000 + 1))
                .ack(synack.seq + 1u32),
        );
        p.recv_all(stack, ms(2))
    };
    // Two cookies come back and take the last slots.
    for (port, synack) in [(102, &cookies[0]), (103, &cookies[1])] {
        assert!(cookie_ack(&mut stack, port, synack).is_empty());
    }
    assert_eq!(stack.connection_count(), 4);
    assert_eq!(stack.counters().syn_cookies_accepted, 2);
    // The third cookie finds the table full: the client, which believes it is connected,
    // is told it is not (no black hole).
    let answer = cookie_ack(&mut stack, 104, &cookies[2]);
    assert_eq!(answer.len(), 1);
    assert_eq!(answer[0].0.flags, RST);
    assert_eq!(answer[0].0.seq, cookies[2].seq + 1u32);
    assert_eq!(stack.connection_count(), 4);
    // A new SYN is refused at once, with no SYN-ACK and no cookie.
    let p = Peer::new(105, LISTEN_PORT);
    p.send(&mut stack, ms(3), p.seg(SYN).seq(SeqNumber(105_000)));
    let answer = p.recv_all(&mut stack, ms(3));
    assert_eq!(answer.len(), 1);
    assert_eq!(answer[0].0.flags, RST | ACK);
    assert_eq!(answer[0].0.ack, SeqNumber(105_001));
    let counters = stack.counters();
    assert_eq!(counters.conn_table_full, 2);
    assert_eq!(
        counters.syn_cookies_sent, 3,
        "no cookie for a table that is full"
    );
    // Once a connection is gone, SYNs are served again.
    let accepted = stack.accept(l).unwrap();
    stack.abort(accepted).unwrap();
    let rst = Peer::new(102, LISTEN_PORT).recv_all(&mut stack, ms(4));
    assert_eq!(rst.len(), 1, "the aborted connection's RST");
    let p = Peer::new(106, LISTEN_PORT);
    p.send(&mut stack, ms(4), p.seg(SYN).seq(SeqNumber(106_000)));
    let (synack, _) = p.recv_one(&mut stack, ms(4));
    assert_eq!(synack.flags, SYN | ACK);
}
