//! SYN-SENT: RFC 9293 3.10.7.3, simultaneous open (3.5 figure 7), SYN retransmission
//! (RFC 6298) and giving up (RFC 9293 3.8.3, MUST-20).

mod harness;

use harness::*;
use sluice_tcp::{ConnError, Error, TcpState};
use sluice_wire::tcp::{SeqNumber, TcpOptions};

const REMOTE_PORT: u16 = 9000;

/// connect() and the SYN it sends.
fn open(stack: &mut sluice_tcp::Stack) -> (sluice_tcp::ConnId, Peer, sluice_wire::tcp::TcpHeader) {
    let id = stack.connect(ms(0), PEER_IP, REMOTE_PORT).unwrap();
    let (syn, _) = Peer::new(REMOTE_PORT, 0).recv_one(stack, ms(0));
    (id, Peer::new(REMOTE_PORT, syn.src_port), syn)
}

#[test]
fn rfc9293_3_10_7_3_connect_sends_syn_with_our_options() {
    let mut stack = stack();
    let (id, _, syn) = open(&mut stack);
    // RFC 3168 6.1.1: DCTCP, the default, asks for ECN with an ECN-setup SYN.
    assert_eq!(syn.flags, SYN | ECE | CWR);
    assert_eq!(syn.dst_port, REMOTE_PORT);
    assert_eq!(syn.ack, SeqNumber(0));
    assert_eq!(syn.window, RX_BUFFER as u16);
    assert_eq!(syn.options.mss, Some(OUR_MSS));
    assert_eq!(syn.options.window_scale, Some(0));
    assert!(syn.options.sack_permitted);
    assert_eq!(syn.options.timestamp.map(|t| t.1), Some(0));
    assert_eq!(stack.state(id), Ok(TcpState::SynSent));
    assert_eq!(stack.send(id, b"x"), Err(Error::WouldBlock));
    assert_eq!(stack.connection_count(), 1);
}

#[test]
fn rfc9293_3_10_7_3_syn_ack_establishes_acks_and_reports_connected() {
    let mut stack = stack();
    let (id, peer, syn) = open(&mut stack);
    let (our_ts, _) = syn.options.timestamp.unwrap();
    peer.send(
        &mut stack,
        ms(10),
        peer.seg(SYN | ACK)
            .seq(SeqNumber(5000))
            .ack(syn.seq + 1u32)
            .win(20000)
            .opts(full_syn_options(1400, 2, 31337))
            .ts(31337, our_ts),
    );
    let (ack, payload) = peer.recv_one(&mut stack, ms(10));
    assert!(payload.is_empty());
    assert_eq!(ack.flags, ACK);
    assert_eq!(ack.seq, syn.seq + 1u32);
    assert_eq!(ack.ack, SeqNumber(5001));
    assert_eq!(ack.window, RX_BUFFER as u16);
    assert_eq!(ack.options.timestamp.map(|t| t.1), Some(31337));
    assert_eq!(stack.state(id), Ok(TcpState::Established));
    let evs = events(&mut stack);
    let r = readiness_of(&evs, id).expect("an event for the connection");
    assert!(r.connected() && r.writable() && !r.error());
    let info = stack.info(id).unwrap();
    // The SYN-ACK's window is not scaled (RFC 7323 2.2).
    assert_eq!(info.snd_wnd, 20000);
    assert_eq!(info.mss, 1400 - 12);
    assert_eq!(info.rcv_nxt, SeqNumber(5001));
    assert_eq!(
        (info.snd_una, info.snd_nxt),
        (syn.seq + 1u32, syn.seq + 1u32)
    );
}

#[test]
fn rfc7323_2_3_syn_ack_window_scale_15_is_used_as_14() {
    let mut stack = stack();
    let (id, peer, syn) = open(&mut stack);
    let opts = TcpOptions {
        mss: Some(1460),
        window_scale: Some(15),
        ..Default::default()
    };
    peer.send(
        &mut stack,
        ms(1),
        peer.seg(SYN | ACK)
            .seq(SeqNumber(5000))
            .ack(syn.seq + 1u32)
            .win(1000)
            .opts(opts),
    );
    peer.recv_one(&mut stack, ms(1));
    assert_eq!(stack.info(id).unwrap().snd_wnd, 1000);
    peer.send(
        &mut stack,
        ms(2),
        peer.seg(ACK)
            .seq(SeqNumber(5001))
            .ack(syn.seq + 1u32)
            .win(2),
    );
    assert_eq!(stack.info(id).unwrap().snd_wnd, 2 << 14);
}

#[test]
fn rfc9293_3_10_7_3_rst_with_acceptable_ack_refuses_the_connection() {
    let mut stack = stack();
    let (id, peer, syn) = open(&mut stack);
    peer.send(
        &mut stack,
        ms(1),
        peer.seg(RST | ACK).seq(SeqNumber(0)).ack(syn.seq + 1u32),
    );
    peer.recv_nothing(&mut stack, ms(1));
    assert_eq!(stack.state(id), Ok(TcpState::Closed));
    assert_eq!(stack.error(id), Ok(Some(ConnError::Refused)));
    let mut buf = [0u8; 8];
    assert_eq!(
        stack.recv(id, &mut buf),
        Err(Error::Connection(ConnError::Refused))
    );
    assert_eq!(
        stack.send(id, b"x"),
        Err(Error::Connection(ConnError::Refused))
    );
    let evs = events(&mut stack);
    let r = readiness_of(&evs, id).unwrap();
    assert!(r.error() && !r.connected());
    assert_eq!(stack.counters().rst_received, 1);
    // No retransmission follows.
    assert!(run_until(&mut stack, ms(10_000)).is_empty());
    stack.close(id).unwrap();
    assert_eq!(stack.connection_count(), 0);
}

#[test]
fn rfc9293_3_10_7_3_rst_without_ack_or_with_unacceptable_ack_is_dropped() {
    let mut stack = stack();
    let (id, peer, syn) = open(&mut stack);
    peer.send(&mut stack, ms(1), peer.seg(RST).seq(SeqNumber(0)));
    peer.send(
        &mut stack,
        ms(1),
        peer.seg(RST | ACK).seq(SeqNumber(0)).ack(syn.seq + 2u32),
    );
    peer.recv_nothing(&mut stack, ms(1));
    assert_eq!(stack.state(id), Ok(TcpState::SynSent));
    assert_eq!(stack.error(id), Ok(None));
    assert_eq!(stack.counters().rst_sent, 0);
}

#[test]
fn rfc9293_3_10_7_3_unacceptable_ack_in_syn_sent_gets_rst() {
    let mut stack = stack();
    let (id, peer, syn) = open(&mut stack);
    for bad in [syn.seq, syn.seq + 2u32, syn.seq - 1000u32] {
        peer.send(
            &mut stack,
            ms(1),
            peer.seg(SYN | ACK).seq(SeqNumber(5000)).ack(bad),
        );
        let (rst, _) = peer.recv_one(&mut stack, ms(1));
        assert_eq!((rst.flags, rst.seq), (RST, bad), "ack {bad}");
        peer.send(
            &mut stack,
            ms(1),
            peer.seg(ACK).seq(SeqNumber(5000)).ack(bad),
        );
        let (rst, _) = peer.recv_one(&mut stack, ms(1));
        assert_eq!((rst.flags, rst.seq), (RST, bad), "ack {bad}");
    }
    assert_eq!(stack.state(id), Ok(TcpState::SynSent));
    // The real SYN-ACK still completes the handshake.
    peer.send(
        &mut stack,
        ms(2),
        peer.seg(SYN | ACK).seq(SeqNumber(5000)).ack(syn.seq + 1u32),
    );
    let (ack, _) = peer.recv_one(&mut stack, ms(2));
    assert_eq!((ack.flags, ack.ack), (ACK, SeqNumber(5001)));
    assert_eq!(stack.state(id), Ok(TcpState::Established));
}

#[test]
fn rfc9293_3_5_must_10_simultaneous_open_syn_gets_syn_ack_then_syn_ack_establishes() {
    let mut stack = stack();
    let (id, peer, syn) = open(&mut stack);
    // Figure 7 line 3: the peer's SYN crosses ours.
    peer.send(
        &mut stack,
        ms(1),
        peer.seg(SYN).seq(SeqNumber(300)).opts(mss_only(1460)),
    );
    let (synack, _) = peer.recv_one(&mut stack, ms(1));
    assert_eq!(synack.flags, SYN | ACK);
    assert_eq!(synack.seq, syn.seq, "the SYN-ACK repeats our ISN");
    assert_eq!(synack.ack, SeqNumber(301));
    assert_eq!(stack.state(id), Ok(TcpState::SynReceived));
    assert!(events(&mut stack).is_empty());
    // Line 6: the peer's SYN-ACK acknowledges our SYN.
    peer.send(
        &mut stack,
        ms(2),
        peer.seg(SYN | ACK)
            .seq(SeqNumber(300))
            .ack(syn.seq + 1u32)
            .opts(mss_only(1460)),
    );
    peer.recv_nothing(&mut stack, ms(2));
    assert_eq!(stack.state(id), Ok(TcpState::Established));
    let evs = events(&mut stack);
    assert!(readiness_of(&evs, id).unwrap().connected());
    let info = stack.info(id).unwrap();
    assert_eq!(info.rcv_nxt, SeqNumber(301));
    assert_eq!(info.snd_una, syn.seq + 1u32);
    // Data flows.
    peer.send(
        &mut stack,
        ms(3),
        peer.seg(ACK)
            .seq(SeqNumber(301))
            .ack(syn.seq + 1u32)
            .data(b"hi"),
    );
    let (ack, _) = peer.recv_one(&mut stack, ms(3));
    assert_eq!(ack.ack, SeqNumber(303));
    assert_eq!(read_all(&mut stack, id), b"hi");
}

#[test]
fn rfc9293_3_5_must_10_simultaneous_open_completed_by_plain_ack() {
    let mut stack = stack();
    let (id, peer, syn) = open(&mut stack);
    peer.send(&mut stack, ms(1), peer.seg(SYN).seq(SeqNumber(300)));
    peer.recv_one(&mut stack, ms(1));
    peer.send(
        &mut stack,
        ms(2),
        peer.seg(ACK).seq(SeqNumber(301)).ack(syn.seq + 1u32),
    );
    peer.recv_nothing(&mut stack, ms(2));
    assert_eq!(stack.state(id), Ok(TcpState::Established));
    assert!(readiness_of(&events(&mut stack), id).unwrap().connected());
}

#[test]
fn rfc6298_syn_retransmitted_with_backoff_then_timed_out_after_syn_retries() {
    let mut stack = stack();
    let (id, peer, syn) = open(&mut stack);
    // RTO 100 ms, doubling: retransmissions at 100, 300, 700 ms; failure at 1500 ms.
    let mut at = 0u64;
    let mut interval = RTO_INITIAL.as_millis() as u64;
    for n in 1..=SYN_RETRIES as u64 {
        assert!(run_until(&mut stack, ms(at + interval - 1)).is_empty());
        at += interval;
        stack.handle_timeout(ms(at));
        let (again, _) = peer.recv_one(&mut stack, ms(at));
        assert_eq!(again.flags, syn.flags, "retransmission {n}");
        assert_eq!(again.seq, syn.seq, "retransmission {n} reuses the ISN");
        assert_eq!(again.options.mss, syn.options.mss);
        assert_eq!(stack.state(id), Ok(TcpState::SynSent));
        interval *= 2;
    }
    assert_eq!(at, 700);
    stack.handle_timeout(ms(at + interval - 1));
    assert_eq!(stack.state(id), Ok(TcpState::SynSent));
    assert!(run_until(&mut stack, ms(at + interval)).is_empty());
    assert_eq!(stack.state(id), Ok(TcpState::Closed));
    assert_eq!(stack.error(id), Ok(Some(ConnError::TimedOut)));
    let mut buf = [0u8; 4];
    assert_eq!(
        stack.recv(id, &mut buf),
        Err(Error::Connection(ConnError::TimedOut))
    );
    assert!(readiness_of(&events(&mut stack), id).unwrap().error());
    let c = stack.counters();
    assert_eq!((c.timeouts, c.user_timeouts), (SYN_RETRIES as u64, 1));
    // Nothing more happens, and closing frees the slot.
    assert!(run_until(&mut stack, ms(100_000)).is_empty());
    stack.close(id).unwrap();
    assert_eq!(stack.connection_count(), 0);
    assert_eq!(stack.state(id), Err(Error::InvalidHandle));
}

#[test]
fn rfc9293_3_10_4_close_in_syn_sent_deletes_the_tcb_without_rst() {
    let mut stack = stack();
    let (id, peer, syn) = open(&mut stack);
    stack.close(id).unwrap();
    assert_eq!(stack.connection_count(), 0);
    assert_eq!(stack.state(id), Err(Error::InvalidHandle));
    assert!(
        run_until(&mut stack, ms(10_000)).is_empty(),
        "no retransmission"
    );
    // A late SYN-ACK meets no connection: RST.
    peer.send(
        &mut stack,
        ms(10_001),
        peer.seg(SYN | ACK).seq(SeqNumber(5000)).ack(syn.seq + 1u32),
    );
    let (rst, _) = peer.recv_one(&mut stack, ms(10_001));
    assert_eq!((rst.flags, rst.seq), (RST, syn.seq + 1u32));
}

#[test]
fn rfc9293_3_10_4_close_in_simultaneous_open_syn_received_sends_fin_once_established() {
    let mut stack = stack();
    let (id, peer, syn) = open(&mut stack);
    peer.send(&mut stack, ms(1), peer.seg(SYN).seq(SeqNumber(300)));
    peer.recv_one(&mut stack, ms(1));
    assert_eq!(stack.state(id), Ok(TcpState::SynReceived));
    // RFC 9293 3.10.4 CLOSE in SYN-RECEIVED: the FIN is queued until ESTABLISHED.
    stack.shutdown(id).unwrap();
    peer.recv_nothing(&mut stack, ms(1));
    peer.send(
        &mut stack,
        ms(2),
        peer.seg(SYN | ACK).seq(SeqNumber(300)).ack(syn.seq + 1u32),
    );
    let (fin, _) = peer.recv_one(&mut stack, ms(2));
    assert_eq!(fin.flags, FIN | ACK);
    assert_eq!((fin.seq, fin.ack), (syn.seq + 1u32, SeqNumber(301)));
    assert_eq!(stack.state(id), Ok(TcpState::FinWait1));
    peer.send(
        &mut stack,
        ms(3),
        peer.seg(FIN | ACK).seq(SeqNumber(301)).ack(syn.seq + 2u32),
    );
    let (ack, _) = peer.recv_one(&mut stack, ms(3));
    assert_eq!((ack.flags, ack.ack), (ACK, SeqNumber(302)));
    assert_eq!(stack.state(id), Ok(TcpState::TimeWait));
}

#[test]
fn rfc9293_3_10_4_close_in_syn_received_that_never_completes_frees_the_slot() {
    let mut stack = stack();
    let (id, peer, _) = open(&mut stack);
    peer.send(&mut stack, ms(1), peer.seg(SYN).seq(SeqNumber(300)));
    peer.recv_one(&mut stack, ms(1));
    stack.close(id).unwrap();
    // The peer vanishes: the SYN-ACK retries run out and nothing is left behind.
    run_until(&mut stack, ms(60_000));
    assert_eq!(stack.connection_count(), 0);
}

#[test]
fn new_connection_in_a_reused_slot_sees_nothing_of_the_previous_connections_data() {
    // A connection closed with unread data (an abort, RFC 9293 3.10.4) frees its slot; the
    // next connect takes the same slot and its payload rings. Before the handshake
    // completes, nothing the previous connection received may be readable, and no
    // end-of-stream may be reported.
    let mut stack = stack();
    let old = established(&mut stack, ms(0));
    old.peer.send(
        &mut stack,
        ms(1),
        old.data_seg(b"secret of the old connection"),
    );
    old.peer.recv_all(&mut stack, ms(1));
    stack.close(old.id).unwrap();
    let (rst, _) = old.peer.recv_one(&mut stack, ms(1));
    assert!(rst.flags.contains(RST));
    assert_eq!(stack.connection_count(), 0);

    let id = stack.connect(ms(2), PEER_IP, REMOTE_PORT).unwrap();
    assert_eq!(id.slot(), old.id.slot(), "the test needs the slot reused");
    let (syn, _) = Peer::new(REMOTE_PORT, 0).recv_one(&mut stack, ms(2));
    let mut buf = [0u8; 64];
    assert_eq!(stack.recv(id, &mut buf), Err(Error::WouldBlock));
    assert_eq!(stack.peek(id), Ok((&[][..], &[][..])));
    assert_eq!(stack.info(id).unwrap().readable, 0);

    // Refused: the error is reported, not stale bytes.
    let peer = Peer::new(REMOTE_PORT, syn.src_port);
    peer.send(&mut stack, ms(3), peer.seg(RST | ACK).ack(syn.seq + 1u32));
    assert_eq!(
        stack.recv(id, &mut buf),
        Err(Error::Connection(ConnError::Refused))
    );
}

#[test]
fn new_connection_in_a_reused_slot_is_not_at_end_of_stream() {
    // The previous connection saw the peer's FIN (eof) and was closed after reading it all.
    let mut stack = stack();
    let old = established(&mut stack, ms(0));
    old.peer
        .send(&mut stack, ms(1), old.ack_seg().flags(ACK | FIN));
    old.peer.recv_all(&mut stack, ms(1));
    let mut buf = [0u8; 64];
    assert_eq!(stack.recv(old.id, &mut buf), Ok(0));
    stack.abort(old.id).unwrap();
    old.peer.recv_all(&mut stack, ms(1));
    assert_eq!(stack.connection_count(), 0);

    let id = stack.connect(ms(2), PEER_IP, REMOTE_PORT).unwrap();
    assert_eq!(id.slot(), old.id.slot(), "the test needs the slot reused");
    assert_eq!(stack.recv(id, &mut buf), Err(Error::WouldBlock));
}

/// The peer on port 80 answers `syn` with a SYN-ACK at `at`; the application then sends 12
/// bytes, whose segment is returned (and left unacknowledged).
fn synack_then_first_flight(
    stack: &mut sluice_tcp::Stack,
    id: sluice_tcp::ConnId,
    syn: &sluice_wire::tcp::TcpHeader,
    at: sluice_tcp::Instant,
) -> sluice_wire::tcp::TcpHeader {
    let peer = Peer::new(80, syn.src_port);
    peer.send(
        stack,
        at,
        peer.seg(SYN | ACK)
            .seq(SeqNumber(9000))
            .ack(syn.seq + 1u32)
            .win(65535)
            .opts(mss_only(1460)),
    );
    peer.recv_all(stack, at);
    stack.send(id, b"first flight").unwrap();
    peer.recv_one(stack, at).0
}

#[test]
fn rfc6298_2_2_the_handshake_round_trip_is_the_first_rtt_measurement() {
    // A 2 ms handshake: the first data's RTO comes from it (SRTT 2 ms, RTTVAR 1 ms:
    // 6 ms), not from the 100 ms initial RTO, so a loss in the first flight costs a few
    // round trips rather than a second in a real configuration.
    let mut stack = stack();
    let id = stack.connect(ms(0), PEER_IP, 80).expect("connect");
    let probe = Peer::new(80, 0);
    let (syn, _) = probe.recv_one(&mut stack, ms(0));
    let data = synack_then_first_flight(&mut stack, id, &syn, ms(2));
    assert_eq!(data.seq, syn.seq + 1u32);
    // Lost: retransmitted once the handshake's RTO runs out, not RTO_INITIAL.
    let resent = run_until(&mut stack, ms(50));
    let (at, (h, p)) = &resent[0];
    assert_eq!((h.seq, p.len()), (data.seq, 12));
    assert_eq!(*at, ms(2 + 6), "RTO = 2 ms + 4 x 1 ms");
}

#[test]
fn karns_rule_a_retransmitted_syn_gives_no_rtt_measurement() {
    let mut stack = stack();
    let id = stack.connect(ms(0), PEER_IP, 80).expect("connect");
    let probe = Peer::new(80, 0);
    let (syn, _) = probe.recv_one(&mut stack, ms(0));
    // The SYN is retransmitted after RTO_INITIAL; the SYN-ACK that follows could answer
    // either copy.
    let resent = run_until(&mut stack, ms(100));
    assert_eq!(resent.len(), 1);
    synack_then_first_flight(&mut stack, id, &syn, ms(101));
    let resent = run_until(&mut stack, ms(400));
    assert_eq!(
        resent[0].0,
        ms(101 + 100),
        "the initial RTO again (RFC 6298 5.7)"
    );
}

#[test]
fn a_syn_ack_from_a_damaged_ethernet_source_does_not_move_the_next_hop() {
    // No checksum covers the Ethernet header: the next hop is the neighbor table's, resolved
    // before the SYN went, not whatever source the SYN-ACK arrived with.
    let mut stack = stack();
    let (id, peer, syn) = open(&mut stack);
    let mut damaged = PEER_MAC;
    damaged.0[4] ^= 0x01;
    let bent = Peer {
        mac: damaged,
        ..peer
    };
    bent.send(
        &mut stack,
        ms(10),
        peer.seg(SYN | ACK)
            .seq(SeqNumber(5000))
            .ack(syn.seq + 1u32)
            .opts(mss_only(1400)),
    );
    // The harness's drain insists the ACK and the data go to PEER_MAC.
    let (ack, _) = peer.recv_one(&mut stack, ms(10));
    assert_eq!((ack.flags, ack.ack), (ACK, SeqNumber(5001)));
    assert_eq!(stack.state(id), Ok(TcpState::Established));
    stack.send(id, b"hello").unwrap();
    let (data, payload) = peer.recv_one(&mut stack, ms(11));
    assert_eq!(
        (data.seq, payload.as_slice()),
        (syn.seq + 1u32, &b"hello"[..])
    );
}
