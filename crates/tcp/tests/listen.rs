//! LISTEN and CLOSED (no connection): RFC 9293 3.10.7.1-2, options negotiation (RFC 9293
//! 3.7.1, RFC 7323, RFC 2018).

mod harness;

use harness::*;
use sluice_tcp::{ConnectError, Error, Event, ListenError, TcpState};
use sluice_wire::tcp::{SeqNumber, TcpOptions};

#[test]
fn rfc9293_listen_syn_gets_syn_ack_offering_every_option_the_peer_offered() {
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let peer = Peer::new(40000, LISTEN_PORT);
    peer.send(
        &mut stack,
        ms(0),
        peer.seg(SYN)
            .seq(SeqNumber(1000))
            .win(29200)
            .opts(full_syn_options(1400, 7, 777)),
    );
    let (synack, payload) = peer.recv_one(&mut stack, ms(0));
    assert!(payload.is_empty());
    assert_eq!(synack.flags, SYN | ACK);
    assert_eq!((synack.src_port, synack.dst_port), (LISTEN_PORT, 40000));
    assert_eq!(synack.ack, SeqNumber(1001));
    // RFC 7323 2.2: the window in a SYN is never scaled.
    assert_eq!(synack.window, RX_BUFFER as u16);
    let o = synack.options;
    assert_eq!(o.mss, Some(OUR_MSS), "RFC 9293 MUST-14: we send our MSS");
    assert_eq!(o.window_scale, Some(0), "16 KiB needs no shift");
    assert!(o.sack_permitted);
    let (_, tsecr) = o.timestamp.expect("timestamps offered back");
    assert_eq!(tsecr, 777, "RFC 7323 3.2: TSecr echoes the SYN's TSval");
    assert_eq!(stack.connection_count(), 1);
    assert_eq!(stack.accept(l), Err(Error::WouldBlock), "not until the ACK");
}

#[test]
fn rfc7323_rfc2018_syn_ack_offers_only_options_the_peer_offered() {
    for mask in 0..8u8 {
        let (ws, sack, ts) = (mask & 1 != 0, mask & 2 != 0, mask & 4 != 0);
        let mut stack = stack();
        stack.listen(LISTEN_PORT, 16).unwrap();
        let peer = Peer::new(40000, LISTEN_PORT);
        let offered = TcpOptions {
            mss: Some(1460),
            window_scale: ws.then_some(2),
            sack_permitted: sack,
            timestamp: ts.then_some((5, 0)),
            ..Default::default()
        };
        peer.send(
            &mut stack,
            ms(0),
            peer.seg(SYN).seq(SeqNumber(1)).opts(offered),
        );
        let (synack, _) = peer.recv_one(&mut stack, ms(0));
        let o = synack.options;
        assert_eq!(o.mss, Some(OUR_MSS), "MSS is always sent (mask {mask})");
        assert_eq!(o.window_scale.is_some(), ws, "window scale (mask {mask})");
        assert_eq!(o.sack_permitted, sack, "SACK-permitted (mask {mask})");
        assert_eq!(o.timestamp.is_some(), ts, "timestamps (mask {mask})");
        if ts {
            assert_eq!(o.timestamp.unwrap().1, 5);
        }
    }
}

#[test]
fn rfc9293_must_15_mss_absent_means_536() {
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let peer = Peer::new(40000, LISTEN_PORT);
    let conn = passive_open(
        &mut stack,
        l,
        peer,
        ms(0),
        1000,
        TcpOptions::default(),
        65535,
    );
    let info = stack.info(conn.id).unwrap();
    assert_eq!(info.mss, 536);
    // The stack segments at 536 bytes.
    stack.set_nagle(conn.id, false).unwrap();
    assert_eq!(stack.send(conn.id, &pattern(1000, 1)).unwrap(), 1000);
    let segs = peer.recv_all(&mut stack, ms(0));
    let lens: Vec<usize> = segs.iter().map(|(_, p)| p.len()).collect();
    assert_eq!(lens, vec![536, 464]);
    assert_eq!(segs[0].0.seq, conn.our_isn + 1u32);
    assert_eq!(segs[1].0.seq, conn.our_isn + 537u32);
}

#[test]
fn rfc9293_syn_ack_without_peer_options_carries_only_mss() {
    let mut stack = stack();
    stack.listen(LISTEN_PORT, 16).unwrap();
    let peer = Peer::new(40000, LISTEN_PORT);
    peer.send(&mut stack, ms(0), peer.seg(SYN).seq(SeqNumber(9)));
    let (synack, _) = peer.recv_one(&mut stack, ms(0));
    assert_eq!(
        synack.options,
        TcpOptions {
            mss: Some(OUR_MSS),
            ..Default::default()
        }
    );
}

#[test]
fn rfc9293_listen_options_negotiated_mss_timestamps_and_scaling() {
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let peer = Peer::new(40000, LISTEN_PORT);
    let conn = passive_open(
        &mut stack,
        l,
        peer,
        ms(0),
        1000,
        full_syn_options(1400, 7, 777),
        100,
    );
    let info = stack.info(conn.id).unwrap();
    // The peer's MSS (below ours), less 12 bytes of timestamp option (RFC 7323 2.2 / 3.2).
    assert_eq!(info.mss, 1400 - 12);
    // RFC 7323 2.3: the final ACK's window is scaled by the peer's shift.
    assert_eq!(info.snd_wnd, 100 << 7);
}

#[test]
fn rfc7323_2_3_window_scale_above_14_from_peer_is_used_as_14() {
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let peer = Peer::new(40000, LISTEN_PORT);
    let opts = TcpOptions {
        mss: Some(1460),
        window_scale: Some(15),
        ..Default::default()
    };
    let conn = passive_open(&mut stack, l, peer, ms(0), 1000, opts, 1);
    assert_eq!(stack.info(conn.id).unwrap().snd_wnd, 1 << 14);
    // A later window update is scaled by 14 as well.
    peer.send(&mut stack, ms(1), conn.ack_seg().win(3));
    assert_eq!(stack.info(conn.id).unwrap().snd_wnd, 3 << 14);
}

#[test]
fn rfc9293_listen_ack_completes_handshake_and_accept_returns_established_conn() {
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let peer = Peer::new(40000, LISTEN_PORT);
    peer.send(&mut stack, ms(0), peer.seg(SYN).seq(SeqNumber(1000)));
    let (synack, _) = peer.recv_one(&mut stack, ms(0));
    assert_eq!(stack.accept(l), Err(Error::WouldBlock));
    assert!(events(&mut stack).is_empty());
    peer.send(
        &mut stack,
        ms(1),
        peer.seg(ACK)
            .seq(SeqNumber(1001))
            .ack(synack.seq + 1u32)
            .win(65535),
    );
    peer.recv_nothing(&mut stack, ms(1));
    assert_eq!(events(&mut stack), vec![Event::Acceptable(l)]);
    let id = stack.accept(l).unwrap();
    assert_eq!(stack.state(id), Ok(TcpState::Established));
    let info = stack.info(id).unwrap();
    assert_eq!(info.snd_una, synack.seq + 1u32);
    assert_eq!(info.snd_nxt, synack.seq + 1u32);
    assert_eq!(info.rcv_nxt, SeqNumber(1001));
    assert_eq!(info.snd_wnd, 65535);
    assert_eq!(stack.accept(l), Err(Error::WouldBlock));
}

#[test]
fn rfc9293_listen_ack_with_data_completes_handshake_and_delivers_data() {
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let peer = Peer::new(40000, LISTEN_PORT);
    peer.send(&mut stack, ms(0), peer.seg(SYN).seq(SeqNumber(1000)));
    let (synack, _) = peer.recv_one(&mut stack, ms(0));
    peer.send(
        &mut stack,
        ms(1),
        peer.seg(ACK | PSH)
            .seq(SeqNumber(1001))
            .ack(synack.seq + 1u32)
            .data(b"hello"),
    );
    let (ack, _) = peer.recv_one(&mut stack, ms(1));
    assert_eq!(
        (ack.flags, ack.seq, ack.ack),
        (ACK, synack.seq + 1u32, SeqNumber(1006))
    );
    let id = stack.accept(l).unwrap();
    assert_eq!(read_all(&mut stack, id), b"hello");
}

#[test]
fn rfc9293_3_10_7_2_rst_in_listen_is_ignored() {
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let peer = Peer::new(40000, LISTEN_PORT);
    peer.send(&mut stack, ms(0), peer.seg(RST).seq(SeqNumber(5)));
    peer.send(
        &mut stack,
        ms(0),
        peer.seg(RST | ACK).seq(SeqNumber(5)).ack(SeqNumber(9)),
    );
    peer.recv_nothing(&mut stack, ms(0));
    assert_eq!(stack.connection_count(), 0);
    assert_eq!(stack.counters().rst_sent, 0);
    assert_eq!(stack.accept(l), Err(Error::WouldBlock));
}

#[test]
fn rfc9293_3_10_7_2_ack_in_listen_gets_rst_with_seq_equal_to_ack() {
    let mut stack = stack();
    stack.listen(LISTEN_PORT, 16).unwrap();
    let peer = Peer::new(40000, LISTEN_PORT);
    peer.send(
        &mut stack,
        ms(0),
        peer.seg(ACK).seq(SeqNumber(5000)).ack(SeqNumber(123_456)),
    );
    let (rst, _) = peer.recv_one(&mut stack, ms(0));
    assert_eq!(rst.flags, RST);
    assert_eq!(rst.seq, SeqNumber(123_456));
    assert_eq!((rst.src_port, rst.dst_port), (LISTEN_PORT, 40000));
    assert_eq!(stack.connection_count(), 0);
    let c = stack.counters();
    // No cookie is outstanding: the ACK is not checked as one.
    assert_eq!(
        (c.rst_sent, c.syn_cookies_rejected, c.listen_stray_acks),
        (1, 0, 1)
    );
    // A SYN-ACK to a listener is an ACK in LISTEN too.
    peer.send(
        &mut stack,
        ms(0),
        peer.seg(SYN | ACK).seq(SeqNumber(7)).ack(SeqNumber(99)),
    );
    let (rst, _) = peer.recv_one(&mut stack, ms(0));
    assert_eq!((rst.flags, rst.seq), (RST, SeqNumber(99)));
    assert_eq!(stack.connection_count(), 0);
}

#[test]
fn rfc9293_3_10_7_1_syn_to_closed_port_gets_rst_ack_acknowledging_it() {
    let mut stack = stack();
    let peer = Peer::new(40000, 81);
    peer.send(&mut stack, ms(0), peer.seg(SYN).seq(SeqNumber(4242)));
    let (rst, _) = peer.recv_one(&mut stack, ms(0));
    assert_eq!(rst.flags, RST | ACK);
    assert_eq!(rst.seq, SeqNumber(0));
    assert_eq!(rst.ack, SeqNumber(4243));
    assert_eq!((rst.src_port, rst.dst_port), (81, 40000));
    assert_eq!(rst.window, 0);
    // SEG.LEN counts data and FIN too.
    peer.send(
        &mut stack,
        ms(0),
        peer.seg(FIN).seq(SeqNumber(100)).data(b"abc"),
    );
    let (rst, _) = peer.recv_one(&mut stack, ms(0));
    assert_eq!(
        (rst.flags, rst.seq, rst.ack),
        (RST | ACK, SeqNumber(0), SeqNumber(104))
    );
    assert_eq!(stack.connection_count(), 0);
    assert_eq!(stack.counters().rst_sent, 2);
}

#[test]
fn rfc9293_3_10_7_1_segment_with_ack_to_closed_port_gets_rst_with_seq_equal_to_ack() {
    let mut stack = stack();
    // A listener on another port must not matter.
    stack.listen(LISTEN_PORT, 16).unwrap();
    let peer = Peer::new(40000, 81);
    for seg in [
        peer.seg(ACK).seq(SeqNumber(1)).ack(SeqNumber(77)),
        peer.seg(ACK | PSH)
            .seq(SeqNumber(1))
            .ack(SeqNumber(78))
            .data(b"data"),
        peer.seg(FIN | ACK).seq(SeqNumber(1)).ack(SeqNumber(79)),
    ] {
        let ack = seg.ack;
        peer.send(&mut stack, ms(0), seg);
        let (rst, _) = peer.recv_one(&mut stack, ms(0));
        assert_eq!((rst.flags, rst.seq), (RST, ack));
    }
    assert_eq!(stack.connection_count(), 0);
}

#[test]
fn rfc9293_3_10_7_1_no_rst_in_reply_to_rst() {
    let mut stack = stack();
    stack.listen(LISTEN_PORT, 16).unwrap();
    for port in [81, LISTEN_PORT] {
        let peer = Peer::new(40000, port);
        peer.send(&mut stack, ms(0), peer.seg(RST).seq(SeqNumber(1)));
        peer.send(
            &mut stack,
            ms(0),
            peer.seg(RST | ACK).seq(SeqNumber(1)).ack(SeqNumber(2)),
        );
        peer.send(&mut stack, ms(0), peer.seg(RST | SYN).seq(SeqNumber(1)));
        peer.recv_nothing(&mut stack, ms(0));
    }
    assert_eq!(stack.counters().rst_sent, 0);
    assert_eq!(stack.connection_count(), 0);
}

#[test]
fn rfc9293_connection_reset_before_accept_is_never_returned() {
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let peer = Peer::new(40000, LISTEN_PORT);
    peer.send(&mut stack, ms(0), peer.seg(SYN).seq(SeqNumber(1000)));
    let (synack, _) = peer.recv_one(&mut stack, ms(0));
    peer.send(
        &mut stack,
        ms(1),
        peer.seg(ACK).seq(SeqNumber(1001)).ack(synack.seq + 1u32),
    );
    // Established and queued for accept; then reset by the peer.
    peer.send(&mut stack, ms(2), peer.seg(RST).seq(SeqNumber(1001)));
    peer.recv_nothing(&mut stack, ms(2));
    assert_eq!(stack.accept(l), Err(Error::WouldBlock));
    assert_eq!(stack.connection_count(), 0);
}

#[test]
fn listen_and_connect_errors_name_their_cause() {
    let mut cfg = config();
    cfg.max_listeners = 1;
    let mut stack = stack_with(cfg);
    assert_eq!(stack.listen(0, 16), Err(ListenError::InvalidArgument));
    stack.listen(LISTEN_PORT, 16).unwrap();
    assert_eq!(stack.listen(LISTEN_PORT, 16), Err(ListenError::AddrInUse));
    assert_eq!(
        stack.listen(LISTEN_PORT + 1, 16),
        Err(ListenError::NoResources)
    );
    assert_eq!(
        stack.connect(ms(0), PEER_IP, 0),
        Err(ConnectError::InvalidArgument)
    );
    assert_eq!(
        stack.connect(ms(0), OUR_IP, 80),
        Err(ConnectError::InvalidArgument)
    );
    // Callers that keep one error type convert.
    assert_eq!(Error::from(ListenError::AddrInUse), Error::AddrInUse);
    assert_eq!(Error::from(ConnectError::NoResources), Error::NoResources);
}

/// Issue 23 (`python3 -m http.server`, listen backlog 5): a SYN to a listener whose accept
/// queue is full is dropped, as Linux does (tcp_conn_request, LISTENOVERFLOWS), so the
/// client's connect waits and retries its SYN. It used to be answered: the client believed
/// it was connected, and its ACK and request were dropped until the queue drained, a fast
/// connect and then a stall of the client's RTO backoff (0.2-3 s, or its timeout).
#[test]
fn syn_to_a_full_accept_queue_is_dropped_and_its_retry_is_answered_once_there_is_room() {
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 1).unwrap();
    // The first client fills the accept queue (backlog 1): established, not yet accepted.
    let first = Peer::new(40000, LISTEN_PORT);
    first.send(&mut stack, ms(0), first.seg(SYN).seq(SeqNumber(1000)));
    let (synack, _) = first.recv_one(&mut stack, ms(0));
    first.send(
        &mut stack,
        ms(1),
        first
            .seg(ACK)
            .seq(SeqNumber(1001))
            .ack(synack.seq + 1u32)
            .win(65535),
    );
    first.recv_nothing(&mut stack, ms(1));
    assert_eq!(events(&mut stack), vec![Event::Acceptable(l)]);

    // The second client's SYN gets no SYN-ACK while the queue is full: it is counted.
    let second = Peer::new(40001, LISTEN_PORT);
    second.send(&mut stack, ms(2), second.seg(SYN).seq(SeqNumber(5000)));
    second.recv_nothing(&mut stack, ms(2));
    assert_eq!(stack.counters().accept_queue_overflow, 1);

    // The application accepts; the client's SYN retransmission is answered and its request,
    // sent with the final ACK, is acknowledged and delivered at once.
    let a = stack.accept(l).unwrap();
    assert_eq!(stack.state(a), Ok(TcpState::Established));
    second.send(&mut stack, ms(1002), second.seg(SYN).seq(SeqNumber(5000)));
    let (synack2, _) = second.recv_one(&mut stack, ms(1002));
    assert_eq!(synack2.ack, SeqNumber(5001));
    second.send(
        &mut stack,
        ms(1003),
        second
            .seg(ACK | PSH)
            .seq(SeqNumber(5001))
            .ack(synack2.seq + 1u32)
            .data(b"GET / HTTP/1.0\r\n\r\n"),
    );
    let (ack, _) = second.recv_one(&mut stack, ms(1003));
    assert_eq!(ack.ack, SeqNumber(5001 + 18));
    let b = stack.accept(l).unwrap();
    assert_eq!(read_all(&mut stack, b), b"GET / HTTP/1.0\r\n\r\n");
    assert_eq!(stack.counters().accept_queue_overflow, 1);
}
