//! SYN-RECEIVED: RFC 9293 3.10.7.4 before synchronization, SYN-ACK retransmission.

mod harness;

use harness::*;
use sluice_tcp::{ConnError, Error, Stack, TcpState};
use sluice_wire::tcp::{SeqNumber, TcpHeader};

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
