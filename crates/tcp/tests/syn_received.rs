//! SYN-RECEIVED: RFC 9293 3.10.7.4 before synchronization, SYN-ACK retransmission, SYNs of
//! the same 4-tuple (a retransmission, a new ISN).

mod harness;

use harness::*;
use sluice_tcp::{ConnError, Error, Stack, TcpState};
use sluice_wire::ethernet::EthernetRepr;
use sluice_wire::ipv4::Ipv4Repr;
use sluice_wire::tcp::{ChecksumCheck, SeqNumber, TcpHeader};
use sluice_wire::EthernetAddress;

/// A listener and a peer whose SYN (ISN 1000) was answered; returns the SYN-ACK.
fn half_open(stack: &mut Stack) -> (sluice_tcp::ListenerId, Peer, TcpHeader) {
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let peer = Peer::new(40000, LISTEN_PORT);
    peer.send(
        stack,
        ms(0),
        peer.seg(SYN).seq(SeqNumber(1000)).opts(mss_only(1460)),
    );
    let (synack, _) = peer.recv_one(stack, ms(0));
    assert_eq!(synack.flags, SYN | ACK);
    (l, peer, synack)
}

#[test]
fn rfc9293_3_10_7_4_retransmitted_syn_in_syn_received_gets_the_syn_ack_again() {
    let mut stack = stack();
    let (l, peer, synack) = half_open(&mut stack);
    peer.send(
        &mut stack,
        ms(50),
        peer.seg(SYN).seq(SeqNumber(1000)).opts(mss_only(1460)),
    );
    let (again, _) = peer.recv_one(&mut stack, ms(50));
    assert_eq!(again.flags, SYN | ACK);
    assert_eq!((again.seq, again.ack), (synack.seq, SeqNumber(1001)));
    assert_eq!(again.options, synack.options);
    assert_eq!(stack.connection_count(), 1);
    assert_eq!(stack.accept(l), Err(Error::WouldBlock));
}

#[test]
fn rfc9293_3_10_7_4_unacceptable_ack_in_syn_received_gets_rst() {
    let mut stack = stack();
    let (l, peer, synack) = half_open(&mut stack);
    for bad in [synack.seq, synack.seq + 2u32, synack.seq + 100_000u32] {
        peer.send(
            &mut stack,
            ms(1),
            peer.seg(ACK).seq(SeqNumber(1001)).ack(bad),
        );
        let (rst, _) = peer.recv_one(&mut stack, ms(1));
        assert_eq!((rst.flags, rst.seq), (RST, bad), "ack {bad}");
        assert_eq!((rst.src_port, rst.dst_port), (LISTEN_PORT, 40000));
    }
    assert_eq!(stack.accept(l), Err(Error::WouldBlock));
    assert_eq!(
        stack.connection_count(),
        1,
        "the half-open connection stays"
    );
    // The right ACK still completes it.
    peer.send(
        &mut stack,
        ms(2),
        peer.seg(ACK).seq(SeqNumber(1001)).ack(synack.seq + 1u32),
    );
    peer.recv_nothing(&mut stack, ms(2));
    let id = stack.accept(l).unwrap();
    assert_eq!(stack.state(id), Ok(TcpState::Established));
}

#[test]
fn rfc5961_3_2_rst_in_syn_received_with_exact_seq_removes_the_connection() {
    let mut stack = stack();
    let (l, peer, _) = half_open(&mut stack);
    // Not exactly rcv_nxt: ignored.
    peer.send(&mut stack, ms(1), peer.seg(RST).seq(SeqNumber(1005)));
    peer.recv_nothing(&mut stack, ms(1));
    assert_eq!(stack.connection_count(), 1);
    // Exactly rcv_nxt: back to LISTEN, nothing left behind.
    peer.send(&mut stack, ms(2), peer.seg(RST).seq(SeqNumber(1001)));
    peer.recv_nothing(&mut stack, ms(2));
    assert_eq!(stack.connection_count(), 0);
    assert_eq!(stack.accept(l), Err(Error::WouldBlock));
    assert_eq!(stack.counters().rst_received, 1);
    // No SYN-ACK retransmission afterwards.
    assert!(run_until(&mut stack, ms(10_000)).is_empty());
    // The listener still works for the same tuple.
    peer.send(&mut stack, ms(10_001), peer.seg(SYN).seq(SeqNumber(7000)));
    let (synack, _) = peer.recv_one(&mut stack, ms(10_001));
    assert_eq!((synack.flags, synack.ack), (SYN | ACK, SeqNumber(7001)));
}

#[test]
fn rfc9293_3_10_7_4_rst_in_simultaneous_open_syn_received_refuses() {
    let mut stack = stack();
    let id = stack.connect(ms(0), PEER_IP, 9000).unwrap();
    let (syn, _) = Peer::new(9000, 0).recv_one(&mut stack, ms(0));
    let peer = Peer::new(9000, syn.src_port);
    peer.send(&mut stack, ms(1), peer.seg(SYN).seq(SeqNumber(300)));
    peer.recv_one(&mut stack, ms(1));
    assert_eq!(stack.state(id), Ok(TcpState::SynReceived));
    peer.send(&mut stack, ms(2), peer.seg(RST).seq(SeqNumber(301)));
    assert_eq!(stack.state(id), Ok(TcpState::Closed));
    assert_eq!(stack.error(id), Ok(Some(ConnError::Refused)));
    assert!(readiness_of(&events(&mut stack), id).unwrap().error());
}

#[test]
fn rfc6298_syn_ack_retransmitted_on_timeout_then_half_open_connection_dropped() {
    let mut stack = stack();
    let (l, peer, synack) = half_open(&mut stack);
    let mut at = 0u64;
    let mut interval = RTO_INITIAL.as_millis() as u64;
    for n in 1..=SYN_RETRIES as u64 {
        assert!(run_until(&mut stack, ms(at + interval - 1)).is_empty());
        at += interval;
        stack.handle_timeout(ms(at));
        let (again, _) = peer.recv_one(&mut stack, ms(at));
        assert_eq!(again.flags, SYN | ACK, "retransmission {n}");
        assert_eq!((again.seq, again.ack), (synack.seq, SeqNumber(1001)));
        interval *= 2;
    }
    assert_eq!(stack.connection_count(), 1);
    assert!(run_until(&mut stack, ms(at + interval)).is_empty());
    assert_eq!(
        stack.connection_count(),
        0,
        "the half-open connection is forgotten"
    );
    assert_eq!(stack.counters().timeouts, SYN_RETRIES as u64);
    assert_eq!(stack.accept(l), Err(Error::WouldBlock));
    // A late ACK now meets LISTEN: not a cookie, so RST.
    let late = ms(at + interval + 1);
    peer.send(
        &mut stack,
        late,
        peer.seg(ACK).seq(SeqNumber(1001)).ack(synack.seq + 1u32),
    );
    let (rst, _) = peer.recv_one(&mut stack, late);
    assert_eq!((rst.flags, rst.seq), (RST, synack.seq + 1u32));
    assert_eq!(stack.connection_count(), 0);
}

#[test]
fn rfc9293_syn_received_syn_ack_retransmission_stops_once_established() {
    let mut stack = stack();
    let (l, peer, synack) = half_open(&mut stack);
    peer.send(
        &mut stack,
        ms(10),
        peer.seg(ACK).seq(SeqNumber(1001)).ack(synack.seq + 1u32),
    );
    let id = stack.accept(l).unwrap();
    assert!(run_until(&mut stack, ms(5_000)).is_empty());
    assert_eq!(stack.state(id), Ok(TcpState::Established));
}

/// Every frame the stack sends at `now`: the Ethernet destination and the TCP header
/// (the harness's drain insists on the peer's MAC; these tests look at it).
fn frames_to(stack: &mut Stack, now: sluice_tcp::Instant) -> Vec<(EthernetAddress, TcpHeader)> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 2048];
    while let Some(n) = stack.poll_transmit(now, &mut buf) {
        let (eth, l3) = EthernetRepr::parse(&buf[..n]).expect("valid ethernet");
        let (ip, l4) = Ipv4Repr::parse(l3, true).expect("valid ipv4");
        let (tcp, _) =
            TcpHeader::parse(l4, ip.src, ip.dst, ChecksumCheck::Verify).expect("valid tcp");
        out.push((eth.dst, tcp));
    }
    out
}

#[test]
fn rfc9293_3_10_7_4_retransmitted_syn_in_syn_received_corrects_a_damaged_next_hop_mac() {
    // The soak's connect timeouts: a bit flipped in the first SYN's Ethernet source (no
    // checksum covers it) made every SYN-ACK go to a stranger, the peer's retransmitted SYNs
    // were answered there too, and the half-open entry held the 4-tuple until it timed out.
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let peer = Peer::new(40000, LISTEN_PORT);
    let mut damaged = PEER_MAC;
    damaged.0[3] ^= 0x10;
    let bent = Peer {
        mac: damaged,
        ..peer
    };
    let syn = peer.seg(SYN).seq(SeqNumber(1000)).opts(mss_only(1460));
    bent.send(&mut stack, ms(0), syn.clone());
    let first = frames_to(&mut stack, ms(0));
    assert_eq!(first.len(), 1);
    assert_eq!(
        first[0].0, damaged,
        "the first SYN is all there is to go by"
    );
    let iss = first[0].1.seq;
    // The SYN-ACK never arrived: the peer retransmits its SYN, undamaged this time.
    peer.send(&mut stack, ms(50), syn);
    let again = frames_to(&mut stack, ms(50));
    assert_eq!(again.len(), 1);
    let (dst, synack) = again[0];
    assert_eq!(
        dst, PEER_MAC,
        "the SYN-ACK goes where the retransmitted SYN came from"
    );
    assert_eq!(synack.flags, SYN | ACK);
    assert_eq!((synack.seq, synack.ack), (iss, SeqNumber(1001)));
    assert_eq!(stack.counters().handshake_mac_relearned, 1);
    // The timer's retransmissions follow it (run_until's drain checks the MAC), and the
    // connection keeps it once established.
    let later = run_until(&mut stack, ms(50) + RTO_INITIAL * 2);
    assert!(!later.is_empty(), "the SYN-ACK timer still runs");
    assert!(later.iter().all(|(_, (h, _))| h.flags == SYN | ACK));
    peer.send(
        &mut stack,
        ms(300),
        peer.seg(ACK).seq(SeqNumber(1001)).ack(iss + 1u32),
    );
    let id = stack.accept(l).expect("established");
    stack.send(id, b"reply").unwrap();
    let (data, payload) = peer.recv_one(&mut stack, ms(300));
    assert_eq!((data.seq, payload.as_slice()), (iss + 1u32, &b"reply"[..]));
    assert_eq!(stack.counters().handshake_mac_relearned, 1);
}

#[test]
fn rfc9293_3_10_7_4_retransmitted_syn_from_a_multicast_source_keeps_the_next_hop() {
    let mut stack = stack();
    let (_, peer, synack) = half_open(&mut stack);
    let mut multicast = PEER_MAC;
    multicast.0[0] |= 0x01;
    let bent = Peer {
        mac: multicast,
        ..peer
    };
    bent.send(
        &mut stack,
        ms(50),
        peer.seg(SYN).seq(SeqNumber(1000)).opts(mss_only(1460)),
    );
    let (again, _) = peer.recv_one(&mut stack, ms(50));
    assert_eq!((again.flags, again.seq), (SYN | ACK, synack.seq));
    assert_eq!(stack.counters().handshake_mac_relearned, 0);
}

#[test]
fn rfc9293_3_10_7_4_syn_with_a_new_isn_meets_a_stale_half_open_entry_and_is_answered() {
    // A half-open entry for ISN 1000 (an old SYN that came late, after its connection had
    // closed); the peer now opens a new connection from the same port, ISN 900_000.
    let mut stack = stack();
    let (l, peer, synack) = half_open(&mut stack);
    let new_syn = peer.seg(SYN).seq(SeqNumber(900_000)).opts(mss_only(1460));
    peer.send(&mut stack, ms(100), new_syn.clone());
    // RFC 9293 3.10.7.4 first check: <SEQ=ISS+1><ACK=IRS+1><CTL=ACK> (silence left every
    // SYN of the new connection unanswered until the entry timed out).
    let (ack, payload) = peer.recv_one(&mut stack, ms(100));
    assert!(payload.is_empty());
    assert_eq!(
        (ack.flags, ack.seq, ack.ack),
        (ACK, synack.seq + 1u32, SeqNumber(1001))
    );
    assert_eq!(stack.counters().syn_in_syn_received, 1);
    assert_eq!(stack.connection_count(), 1, "a SYN alone frees nothing");
    // The peer, in SYN-SENT, answers the unacceptable ACK with <SEQ=SEG.ACK><CTL=RST>:
    // RFC 5961 3.2's exact match, back to LISTEN.
    peer.send(&mut stack, ms(101), peer.seg(RST).seq(ack.ack));
    peer.recv_nothing(&mut stack, ms(101));
    assert_eq!(stack.connection_count(), 0);
    // Its next SYN opens the new connection.
    peer.send(&mut stack, ms(102), new_syn);
    let (fresh, _) = peer.recv_one(&mut stack, ms(102));
    assert_eq!((fresh.flags, fresh.ack), (SYN | ACK, SeqNumber(900_001)));
    peer.send(
        &mut stack,
        ms(103),
        peer.seg(ACK).seq(SeqNumber(900_001)).ack(fresh.seq + 1u32),
    );
    assert!(stack.accept(l).is_ok());
}

#[test]
fn rfc5961_7_answers_to_new_syns_in_syn_received_are_rate_limited() {
    let mut stack = stack();
    let (_, peer, _) = half_open(&mut stack);
    let limit = config().challenge_ack_limit as usize;
    let mut answered = 0;
    for i in 0..(limit as u32 + 5) {
        let syn = peer.seg(SYN).seq(SeqNumber(50_000 + i * 7919));
        peer.send(&mut stack, ms(10), syn);
        answered += peer.recv_all(&mut stack, ms(10)).len();
    }
    assert_eq!(answered, limit);
    assert_eq!(stack.counters().challenge_acks_suppressed, 5);
    assert_eq!(stack.connection_count(), 1);
}
