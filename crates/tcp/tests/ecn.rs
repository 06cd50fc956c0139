//! ECN (RFC 3168) and its use by DCTCP (RFC 8257): negotiation on both sides, refusal,
//! the SYN-cookie path, the codepoints of what we send, ECE echo and CWR.

mod harness;

use harness::*;
use sluice_tcp::{Algorithm, Stack};
use sluice_wire::ethernet::{EtherType, EthernetRepr};
use sluice_wire::ipv4::{Ecn, Ipv4Repr};
use sluice_wire::tcp::{ChecksumCheck, SeqNumber, TcpFlags, TcpHeader};

/// What the stack sends at `now`: TCP headers, payload lengths and IP ECN codepoints.
fn sent(stack: &mut Stack, now: sluice_tcp::Instant) -> Vec<(TcpHeader, usize, Ecn)> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 2048];
    while let Some(n) = stack.poll_transmit(now, &mut buf) {
        let (eth, l3) = EthernetRepr::parse(&buf[..n]).unwrap();
        if eth.ethertype != EtherType::Ipv4 {
            continue;
        }
        let (ip, l4) = Ipv4Repr::parse(l3, true).unwrap();
        let (tcp, payload) = TcpHeader::parse(l4, ip.src, ip.dst, ChecksumCheck::Verify).unwrap();
        out.push((tcp, payload.len(), ip.ecn));
    }
    out
}

/// `seg` from `peer` with the IP codepoint `ecn` (the harness sends Not-ECT).
fn send_ecn(stack: &mut Stack, peer: &Peer, now: sluice_tcp::Instant, seg: Seg, ecn: Ecn) {
    let mut frame = peer.frame(&seg);
    let (mut ip, _) = Ipv4Repr::parse(&frame[14..], true).unwrap();
    ip.ecn = ecn;
    ip.emit(&mut frame[14..]).unwrap();
    stack.handle_frame(now, &frame);
}

/// A passive open where the peer's SYN is ECN-setup (ECE and CWR) with `syn_opts`;
/// returns the connection and the SYN-ACK's flags.
fn ecn_passive_open(stack: &mut Stack, syn_opts: sluice_wire::tcp::TcpOptions) -> (Conn, TcpFlags) {
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let peer = Peer::new(40000, LISTEN_PORT);
    let isn = SeqNumber(1000);
    peer.send(
        stack,
        ms(0),
        peer.seg(SYN | ECE | CWR).seq(isn).opts(syn_opts),
    );
    let (synack, _) = peer.recv_one(stack, ms(0));
    let mut ack = peer.seg(ACK).seq(isn + 1u32).ack(synack.seq + 1u32);
    if let (Some((tsval, _)), Some((theirs, _))) = (syn_opts.timestamp, synack.options.timestamp) {
        ack = ack.ts(tsval, theirs);
    }
    peer.send(stack, ms(0), ack);
    peer.recv_nothing(stack, ms(0));
    let id = stack.accept(l).unwrap();
    let conn = Conn {
        id,
        peer,
        peer_isn: isn,
        our_isn: synack.seq,
        peer_nxt: isn + 1u32,
        our_nxt: synack.seq + 1u32,
    };
    (conn, synack.flags)
}

#[test]
fn rfc3168_6_1_1_passive_open_answers_an_ecn_setup_syn_with_ece_only() {
    let mut stack = stack();
    let (c, flags) = ecn_passive_open(&mut stack, mss_only(1460));
    assert_eq!(
        flags,
        SYN | ACK | ECE,
        "ECN-setup SYN-ACK: ECE set, CWR clear"
    );
    let info = stack.info(c.id).unwrap();
    assert!(info.ecn);
    assert_eq!(info.congestion_control, Algorithm::Dctcp);
    assert_eq!(stack.counters().ecn_connections, 1);
    // RFC 3168 6.1.2: new data is ECT(0); 6.1.4: a pure ACK is not.
    stack.send(c.id, &pattern(100, 1)).unwrap();
    let out = sent(&mut stack, ms(1));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].2, Ecn::Ect0);
    c.peer.send(
        &mut stack,
        ms(2),
        c.data_seg(&[1; 10]).ack(c.our_nxt + 100u32),
    );
    let out = sent(&mut stack, ms(2));
    assert_eq!(
        (out[0].1, out[0].2),
        (0, Ecn::NotEct),
        "pure ACK is Not-ECT"
    );
}

#[test]
fn rfc3168_6_1_1_active_open_negotiates_only_with_an_ecn_setup_syn_ack() {
    for (answer, expect) in [
        (SYN | ACK | ECE, true),
        // RFC 3168 6.1.1: a SYN-ACK with both ECE and CWR is not ECN-setup.
        (SYN | ACK | ECE | CWR, false),
        (SYN | ACK, false),
    ] {
        let mut stack = stack();
        let id = stack.connect(ms(0), PEER_IP, 9000).unwrap();
        let (syn, _) = Peer::new(9000, 0).recv_one(&mut stack, ms(0));
        assert_eq!(syn.flags, SYN | ECE | CWR, "RFC 3168 6.1.1 ECN-setup SYN");
        let peer = Peer::new(9000, syn.src_port);
        peer.send(
            &mut stack,
            ms(1),
            peer.seg(answer)
                .seq(SeqNumber(500))
                .ack(syn.seq + 1u32)
                .opts(mss_only(1460)),
        );
        let (ack, _) = peer.recv_one(&mut stack, ms(1));
        assert_eq!(
            ack.flags, ACK,
            "{answer:?}: the handshake's ACK carries no ECN flags"
        );
        assert_eq!(stack.info(id).unwrap().ecn, expect, "{answer:?}");
        stack.send(id, &[7; 50]).unwrap();
        let out = sent(&mut stack, ms(2));
        let want = if expect { Ecn::Ect0 } else { Ecn::NotEct };
        assert_eq!(out[0].2, want, "{answer:?}");
    }
}

#[test]
fn a_side_that_refuses_ecn_keeps_it_off() {
    // Configuration off: an ECN-setup SYN gets a plain SYN-ACK.
    let mut cfg = config();
    cfg.ecn = false;
    let mut stack = stack_with(cfg);
    let (c, flags) = ecn_passive_open(&mut stack, mss_only(1460));
    assert_eq!(flags, SYN | ACK);
    assert!(!stack.info(c.id).unwrap().ecn);
    stack.send(c.id, &[1; 100]).unwrap();
    assert_eq!(sent(&mut stack, ms(1))[0].2, Ecn::NotEct);
    // A policy that does not want ECN (NewReno) neither asks nor accepts.
    let mut cfg = config();
    cfg.congestion_control = Algorithm::NewReno;
    let mut stack = stack_with(cfg);
    stack.connect(ms(0), PEER_IP, 9000).unwrap();
    let (syn, _) = Peer::new(9000, 0).recv_one(&mut stack, ms(0));
    assert_eq!(syn.flags, SYN);
    let mut cfg = config();
    cfg.congestion_control = Algorithm::Cubic;
    let mut stack = stack_with(cfg);
    let (c, flags) = ecn_passive_open(&mut stack, mss_only(1460));
    assert_eq!(flags, SYN | ACK);
    assert_eq!(
        stack.info(c.id).unwrap().congestion_control,
        Algorithm::Cubic
    );
}

#[test]
fn syn_cookies_keep_ecn_in_the_timestamp_and_drop_it_without() {
    for with_ts in [true, false] {
        let mut cfg = config();
        cfg.syn_backlog = 1;
        let mut stack = stack_with(cfg);
        let l = stack.listen(LISTEN_PORT, 16).unwrap();
        // Fill the backlog with one half-open connection: the next SYN gets a cookie.
        let other = Peer::new(50000, LISTEN_PORT);
        other.send(&mut stack, ms(0), other.seg(SYN).seq(SeqNumber(1)));
        other.recv_one(&mut stack, ms(0));
        let peer = Peer::new(40000, LISTEN_PORT);
        let opts = if with_ts {
            full_syn_options(1460, 7, 4242)
        } else {
            mss_only(1460)
        };
        peer.send(
            &mut stack,
            ms(1),
            peer.seg(SYN | ECE | CWR).seq(SeqNumber(1000)).opts(opts),
        );
        let (synack, _) = peer.recv_one(&mut stack, ms(1));
        assert_eq!(stack.counters().syn_cookies_sent, 1);
        // With timestamps the agreement rides in the TSval (as Linux's cookies do);
        // without, the cookie cannot keep it, so ECN is not offered.
        let want = if with_ts { SYN | ACK | ECE } else { SYN | ACK };
        assert_eq!(synack.flags, want, "timestamps {with_ts}");
        let mut ack = peer.seg(ACK).seq(SeqNumber(1001)).ack(synack.seq + 1u32);
        if let Some((theirs, _)) = synack.options.timestamp {
            ack = ack.ts(4243, theirs);
        }
        peer.send(&mut stack, ms(2), ack);
        assert_eq!(stack.counters().syn_cookies_accepted, 1);
        let id = stack.accept(l).unwrap();
        assert_eq!(stack.info(id).unwrap().ecn, with_ts);
    }
}

#[test]
fn rfc8257_3_2_receiver_echoes_ce_per_segment_and_rfc3168_receiver_latches_until_cwr() {
    let mut stack = stack();
    let (mut c, _) = ecn_passive_open(&mut stack, mss_only(1460));
    let data = |stack: &mut Stack, c: &mut Conn, ce: bool, extra: TcpFlags| {
        let seg = c.data_seg(&[5; 100]).flags(ACK | extra);
        let ecn = if ce { Ecn::Ce } else { Ecn::Ect0 };
        send_ecn(stack, &c.peer, ms(1), seg, ecn);
        c.peer_nxt += 100u32;
        let out = sent(stack, ms(1));
        assert_eq!(out.len(), 1);
        out[0].0.flags
    };
    // DCTCP (the default): ECE reflects each segment's CE.
    assert_eq!(data(&mut stack, &mut c, true, TcpFlags(0)), ACK | ECE);
    assert_eq!(data(&mut stack, &mut c, false, TcpFlags(0)), ACK);
    assert_eq!(stack.counters().ecn_ce, 1);
    // RFC 3168: ECE on every ACK from a CE until the peer's CWR.
    stack
        .set_congestion_control(c.id, Algorithm::NewReno)
        .unwrap();
    assert_eq!(data(&mut stack, &mut c, true, TcpFlags(0)), ACK | ECE);
    assert_eq!(data(&mut stack, &mut c, false, TcpFlags(0)), ACK | ECE);
    assert_eq!(data(&mut stack, &mut c, false, CWR), ACK);
}

#[test]
fn rfc3168_6_1_2_echo_reduces_the_window_once_and_the_next_new_data_carries_cwr() {
    let mut stack = stack();
    let (c, _) = ecn_passive_open(&mut stack, mss_only(1460));
    assert_eq!(stack.send(c.id, &pattern(10 * 1460, 3)), Ok(10 * 1460));
    let first = sent(&mut stack, ms(0));
    assert_eq!(first.len(), 10, "initial window: 10 segments (RFC 6928)");
    assert!(first
        .iter()
        .all(|s| s.2 == Ecn::Ect0 && !s.0.flags.contains(CWR)));
    assert_eq!(stack.info(c.id).unwrap().cwnd, 10 * 1460);
    // The peer echoes congestion on the ACK of the whole window, 1 ms later.
    c.peer.send(
        &mut stack,
        ms(1),
        c.ack_seg().ack(c.our_nxt + 10 * 1460u32).flags(ACK | ECE),
    );
    assert_eq!(stack.send(c.id, &pattern(10 * 1460, 4)), Ok(10 * 1460));
    // The data-path only counts; the control plane runs the policy one RTT later: DCTCP
    // with alpha = 1 (RFC 8257 3.3) and every byte marked halves the window.
    assert_eq!(stack.info(c.id).unwrap().cwnd, 10 * 1460);
    let out = run_until(&mut stack, ms(3));
    let info = stack.info(c.id).unwrap();
    assert_eq!(info.cwnd, 5 * 1460);
    assert_eq!(info.ssthresh, 5 * 1460);
    assert!(stack.counters().cc_iterations >= 1);
    // The segments sent after the reduction: the first new one has CWR, only it.
    let data: Vec<_> = out.iter().filter(|(_, s)| !s.1.is_empty()).collect();
    assert_eq!(data.len(), 5, "{out:?}");
    assert!(data[0].1 .0.flags.contains(CWR));
    assert!(data[1..].iter().all(|(_, s)| !s.0.flags.contains(CWR)));
    assert_eq!(stack.counters().ecn_cwr_sent, 1);
}

#[test]
fn congestion_control_is_chosen_per_connection_and_by_name() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    assert_eq!(stack.congestion_control(c.id), Ok(Algorithm::Dctcp));
    for name in ["cubic", "timely", "reno", "newreno", "dctcp"] {
        let a: Algorithm = name.parse().unwrap();
        stack.set_congestion_control(c.id, a).unwrap();
        assert_eq!(stack.congestion_control(c.id), Ok(a));
        assert_eq!(stack.info(c.id).unwrap().congestion_control, a);
        // The window the connection had is kept.
        assert_eq!(stack.info(c.id).unwrap().cwnd, 10 * 1460);
    }
}

/// `seg` from `peer` as a frame with the IP codepoint `ecn`.
fn frame_ecn(peer: &Peer, seg: Seg, ecn: Ecn) -> Vec<u8> {
    let mut frame = peer.frame(&seg);
    let (mut ip, _) = Ipv4Repr::parse(&frame[14..], true).unwrap();
    ip.ecn = ecn;
    ip.emit(&mut frame[14..]).unwrap();
    frame
}

#[test]
fn rfc8257_3_2_delayed_acks_acknowledge_the_segments_before_a_ce_change_with_the_old_ece() {
    let mut cfg = config();
    cfg.ack_policy = sluice_tcp::AckPolicy::Delayed {
        segments: 2,
        timeout: std::time::Duration::from_millis(40),
    };
    let mut stack = stack_with(cfg);
    let (c, _) = ecn_passive_open(&mut stack, mss_only(1460));
    let seg = |i: u32| c.data_seg(&[5; 100]).seq(c.peer_nxt + i * 100);
    let acks = |out: Vec<(TcpHeader, usize, Ecn)>| -> Vec<(u32, bool)> {
        out.iter()
            .map(|(h, _, _)| (h.ack.diff(c.peer_nxt) as u32, h.flags.contains(ECE)))
            .collect()
    };
    // Unmarked: the ACK is delayed. Then CE: RFC 8257 Figure 1 first acknowledges the
    // unmarked segment without ECE, then the marked one with ECE.
    send_ecn(&mut stack, &c.peer, ms(1), seg(0), Ecn::Ect0);
    assert!(sent(&mut stack, ms(1)).is_empty());
    send_ecn(&mut stack, &c.peer, ms(1), seg(1), Ecn::Ce);
    assert_eq!(acks(sent(&mut stack, ms(1))), [(100, false), (200, true)]);
    // Marked, delayed; then unmarked: the marked one is acknowledged with ECE first.
    send_ecn(&mut stack, &c.peer, ms(2), seg(2), Ecn::Ce);
    assert!(sent(&mut stack, ms(2)).is_empty());
    send_ecn(&mut stack, &c.peer, ms(2), seg(3), Ecn::Ect0);
    assert_eq!(acks(sent(&mut stack, ms(2))), [(300, true), (400, false)]);
    // The same within one receive batch; the marked segments after the change share the
    // burst's one ACK.
    let frames = [
        frame_ecn(&c.peer, seg(4), Ecn::Ect0),
        frame_ecn(&c.peer, seg(5), Ecn::Ce),
        frame_ecn(&c.peer, seg(6), Ecn::Ce),
    ];
    let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
    stack.handle_frames(ms(3), &refs);
    assert_eq!(acks(sent(&mut stack, ms(3))), [(500, false), (700, true)]);
    // Without a change the delayed ACK stays delayed and carries the current state.
    send_ecn(&mut stack, &c.peer, ms(4), seg(7), Ecn::Ce);
    assert!(sent(&mut stack, ms(4)).is_empty());
    send_ecn(&mut stack, &c.peer, ms(4), seg(8), Ecn::Ce);
    assert_eq!(acks(sent(&mut stack, ms(4))), [(900, true)]);
}

#[test]
fn rfc8257_3_3_echoes_for_one_window_cut_it_once_across_control_iterations() {
    let mut stack = stack();
    let (c, _) = ecn_passive_open(&mut stack, mss_only(1460));
    assert_eq!(stack.send(c.id, &pattern(10 * 1460, 3)), Ok(10 * 1460));
    assert_eq!(sent(&mut stack, ms(0)).len(), 10);
    // Half the window acknowledged with ECE; the iteration after it halves the window
    // (alpha = 1).
    c.peer.send(
        &mut stack,
        ms(1),
        c.ack_seg().ack(c.our_nxt + 5 * 1460u32).flags(ACK | ECE),
    );
    run_until(&mut stack, ms(3));
    assert_eq!(stack.info(c.id).unwrap().cwnd, 5 * 1460);
    // More of the same window, echoed, reaches a later iteration: that data was sent before
    // the cut, so the window is not cut again.
    c.peer.send(
        &mut stack,
        ms(4),
        c.ack_seg().ack(c.our_nxt + 7 * 1460u32).flags(ACK | ECE),
    );
    let iterations = stack.counters().cc_iterations;
    run_until(&mut stack, ms(6));
    assert!(stack.counters().cc_iterations > iterations);
    assert_eq!(stack.counters().timeouts, 0);
    assert_eq!(stack.info(c.id).unwrap().cwnd, 5 * 1460, "once per window");
}

#[test]
fn rfc3168_6_1_1_ecn_follows_what_the_syns_asked_not_the_algorithm_chosen_since() {
    // A plain SYN (NewReno), DCTCP chosen, then an ECN-setup SYN-ACK: ECN stays off.
    let mut cfg = config();
    cfg.congestion_control = Algorithm::NewReno;
    let mut stack = stack_with(cfg.clone());
    let id = stack.connect(ms(0), PEER_IP, 9000).unwrap();
    let (syn, _) = Peer::new(9000, 0).recv_one(&mut stack, ms(0));
    assert_eq!(syn.flags, SYN);
    stack.set_congestion_control(id, Algorithm::Dctcp).unwrap();
    let peer = Peer::new(9000, syn.src_port);
    peer.send(
        &mut stack,
        ms(1),
        peer.seg(SYN | ACK | ECE)
            .seq(SeqNumber(500))
            .ack(syn.seq + 1u32)
            .opts(mss_only(1460)),
    );
    peer.recv_one(&mut stack, ms(1));
    assert!(!stack.info(id).unwrap().ecn, "the SYN did not ask for ECN");

    // The same with a SYN retransmitted after the change: it stays plain.
    let mut stack = stack_with(cfg);
    let id = stack.connect(ms(0), PEER_IP, 9000).unwrap();
    let (syn, _) = Peer::new(9000, 0).recv_one(&mut stack, ms(0));
    assert_eq!(syn.flags, SYN);
    stack.set_congestion_control(id, Algorithm::Dctcp).unwrap();
    let again = run_until(&mut stack, ms(150));
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(
        again[0].1 .0.flags, SYN,
        "no ECN-setup SYN after a plain one"
    );
    let peer = Peer::new(9000, syn.src_port);
    peer.send(
        &mut stack,
        ms(151),
        peer.seg(SYN | ACK | ECE)
            .seq(SeqNumber(500))
            .ack(syn.seq + 1u32)
            .opts(mss_only(1460)),
    );
    peer.recv_one(&mut stack, ms(151));
    let info = stack.info(id).unwrap();
    assert!(!info.ecn, "a non-ECN-setup SYN was sent");
    assert_eq!(info.congestion_control, Algorithm::Dctcp);
    stack.send(id, &[7; 50]).unwrap();
    assert_eq!(sent(&mut stack, ms(152))[0].2, Ecn::NotEct);

    // An ECN-setup SYN (DCTCP), then NewReno: the retransmission is plain, so ECN is off.
    let mut stack = stack_with(config());
    let id = stack.connect(ms(0), PEER_IP, 9000).unwrap();
    let (syn, _) = Peer::new(9000, 0).recv_one(&mut stack, ms(0));
    assert_eq!(syn.flags, SYN | ECE | CWR);
    stack
        .set_congestion_control(id, Algorithm::NewReno)
        .unwrap();
    let again = run_until(&mut stack, ms(150));
    assert_eq!(again[0].1 .0.flags, SYN);
    let peer = Peer::new(9000, syn.src_port);
    peer.send(
        &mut stack,
        ms(151),
        peer.seg(SYN | ACK | ECE)
            .seq(SeqNumber(500))
            .ack(syn.seq + 1u32)
            .opts(mss_only(1460)),
    );
    peer.recv_one(&mut stack, ms(151));
    assert!(!stack.info(id).unwrap().ecn);
}

#[test]
fn rfc3168_6_1_1_the_syn_ack_follows_the_listeners_algorithm() {
    // An engine defaulting to CUBIC, a listener choosing DCTCP: ECN is accepted in the
    // SYN-ACK, and the connection runs DCTCP from the start.
    let mut cfg = config();
    cfg.congestion_control = Algorithm::Cubic;
    let mut stack = stack_with(cfg.clone());
    let l = stack
        .listen_with(LISTEN_PORT, 16, Some(Algorithm::Dctcp))
        .unwrap();
    let peer = Peer::new(40000, LISTEN_PORT);
    peer.send(
        &mut stack,
        ms(0),
        peer.seg(SYN | ECE | CWR)
            .seq(SeqNumber(1000))
            .opts(mss_only(1460)),
    );
    let (synack, _) = peer.recv_one(&mut stack, ms(0));
    assert_eq!(synack.flags, SYN | ACK | ECE);
    peer.send(
        &mut stack,
        ms(1),
        peer.seg(ACK).seq(SeqNumber(1001)).ack(synack.seq + 1u32),
    );
    let id = stack.accept(l).unwrap();
    let info = stack.info(id).unwrap();
    assert!(info.ecn);
    assert_eq!(info.congestion_control, Algorithm::Dctcp);

    // The other way round, chosen after listen: a DCTCP engine, a NewReno listener.
    let mut stack = stack_with(config());
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    stack
        .set_listener_congestion_control(l, Algorithm::NewReno)
        .unwrap();
    let (synack, _) = {
        peer.send(
            &mut stack,
            ms(0),
            peer.seg(SYN | ECE | CWR)
                .seq(SeqNumber(1000))
                .opts(mss_only(1460)),
        );
        peer.recv_one(&mut stack, ms(0))
    };
    assert_eq!(synack.flags, SYN | ACK);

    // The SYN-cookie path: the cookie keeps the ECN the listener's algorithm accepted.
    cfg.syn_backlog = 1;
    let mut stack = stack_with(cfg);
    let l = stack
        .listen_with(LISTEN_PORT, 16, Some(Algorithm::Dctcp))
        .unwrap();
    let other = Peer::new(50000, LISTEN_PORT);
    other.send(&mut stack, ms(0), other.seg(SYN).seq(SeqNumber(1)));
    other.recv_one(&mut stack, ms(0));
    peer.send(
        &mut stack,
        ms(1),
        peer.seg(SYN | ECE | CWR)
            .seq(SeqNumber(1000))
            .opts(full_syn_options(1460, 7, 4242)),
    );
    let (synack, _) = peer.recv_one(&mut stack, ms(1));
    assert_eq!(stack.counters().syn_cookies_sent, 1);
    assert_eq!(synack.flags, SYN | ACK | ECE);
    let (theirs, _) = synack.options.timestamp.unwrap();
    peer.send(
        &mut stack,
        ms(2),
        peer.seg(ACK)
            .seq(SeqNumber(1001))
            .ack(synack.seq + 1u32)
            .ts(4243, theirs),
    );
    let id = stack.accept(l).unwrap();
    let info = stack.info(id).unwrap();
    assert!(info.ecn);
    assert_eq!(info.congestion_control, Algorithm::Dctcp);
}
