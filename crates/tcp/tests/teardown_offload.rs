//! Teardown offload (acceltcp.txt 4.2): a connection closed with the option set moves to the
//! teardown stage, which sends its remaining data and FIN, retransmits, answers the peer's
//! FIN and keeps TIME-WAIT (RFC 9293 3.6, 3.10.7.4; RFC 5961; RFC 1337; RFC 6191) while its
//! slot is free at once.

mod harness;

use harness::*;
use sluice_tcp::{Error, Stack, TcpState};
use sluice_wire::tcp::{SeqNumber, TcpHeader};

fn offloaded(stack: &mut Stack, c: &Conn) {
    stack.set_teardown_offload(c.id, true).unwrap();
    stack.close(c.id).unwrap();
    assert_eq!(stack.counters().teardown_offloaded, 1);
    assert_eq!(stack.connection_count(), 0, "the slot is freed at handover");
    assert_eq!(stack.teardown_flows(), 1);
    assert_eq!(stack.state(c.id), Err(Error::InvalidHandle));
    stack.check_invariants().unwrap();
}

/// Concatenates the payloads of `segs`, checking they are contiguous from `from`.
fn stream_of(segs: &[(TcpHeader, Vec<u8>)], from: SeqNumber) -> Vec<u8> {
    let mut next = from;
    let mut out = Vec::new();
    for (h, p) in segs {
        assert_eq!(h.seq, next, "segments are contiguous");
        next += p.len();
        out.extend_from_slice(p);
    }
    out
}

#[test]
fn the_stage_sends_the_unsent_tail_and_fin_then_keeps_time_wait() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    let data = pattern(3000, 7);
    assert_eq!(stack.send(c.id, &data), Ok(3000));
    offloaded(&mut stack, &c);
    let segs = c.peer.recv_all(&mut stack, ms(1));
    assert_eq!(
        segs.len(),
        3,
        "two full segments and the rest with FIN: {segs:?}"
    );
    assert_eq!(stream_of(&segs, c.our_nxt), data);
    let (last, _) = segs.last().unwrap();
    assert!(last.flags.contains(FIN));
    assert!(segs[..2].iter().all(|(h, _)| !h.flags.contains(FIN)));
    assert!(segs
        .iter()
        .all(|(h, _)| h.ack == c.peer_nxt && h.window > 0));
    let fin_end = c.our_nxt + 3001u32;
    // The peer acknowledges everything: FIN-WAIT-2.
    c.peer.send(&mut stack, ms(2), c.ack_seg().ack(fin_end));
    c.peer.recv_nothing(&mut stack, ms(2));
    assert_eq!(stack.closing().awaiting_peer_fin, 1);
    // The peer's FIN: acknowledged, TIME-WAIT.
    c.peer
        .send(&mut stack, ms(3), c.ack_seg().ack(fin_end).flags_fin());
    let (ack, _) = c.peer.recv_one(&mut stack, ms(3));
    assert_eq!(ack.flags, ACK);
    assert_eq!((ack.seq, ack.ack), (fin_end, c.peer_nxt + 1u32));
    assert!(stack.closing().is_empty());
    assert_eq!(stack.teardown_flows(), 1, "TIME-WAIT is kept");
    stack.check_invariants().unwrap();
    // TIME-WAIT lasts the configured time, not less.
    assert!(run_until(&mut stack, ms(1) + TIME_WAIT).is_empty());
    assert_eq!(stack.teardown_flows(), 1);
    assert!(run_until(&mut stack, ms(10) + TIME_WAIT).is_empty());
    assert_eq!(stack.teardown_flows(), 0);
    assert_eq!(stack.counters().teardown_completed, 1);
    stack.check_invariants().unwrap();
}

#[test]
fn data_already_sent_goes_again_only_on_the_stage_rto() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    let data = pattern(1000, 3);
    stack.send(c.id, &data).unwrap();
    let sent = c.peer.recv_all(&mut stack, ms(1));
    assert_eq!(stream_of(&sent, c.our_nxt), data);
    offloaded(&mut stack, &c);
    // Only the FIN goes out now.
    let (fin, p) = c.peer.recv_one(&mut stack, ms(1));
    assert!(p.is_empty());
    assert_eq!((fin.flags, fin.seq), (FIN | ACK, c.our_nxt + 1000u32));
    // Nothing acknowledged: the RTO sends the data and the FIN again, go-back-N.
    let later = run_until(&mut stack, ms(400));
    assert!(!later.is_empty());
    let first_round: Vec<_> = later
        .iter()
        .take_while(|(t, _)| *t == later[0].0)
        .map(|(_, s)| s.clone())
        .collect();
    assert_eq!(stream_of(&first_round, c.our_nxt), data);
    assert!(first_round.last().unwrap().0.flags.contains(FIN));
    assert!(stack.counters().teardown_retransmits >= 1);
    // An ACK of part of the tail: the next round starts from it.
    c.peer
        .send(&mut stack, ms(401), c.ack_seg().ack(c.our_nxt + 500u32));
    c.peer.recv_nothing(&mut stack, ms(401));
    let again = run_until(&mut stack, ms(2000));
    let (t0, (h0, p0)) = &again[0];
    assert!(*t0 > ms(401));
    assert_eq!((h0.seq, p0.as_slice()), (c.our_nxt + 500u32, &data[500..]));
    stack.check_invariants().unwrap();
}

#[test]
fn retransmissions_back_off_and_end_in_a_reset() {
    let mut cfg = config();
    cfg.teardown_retries = 3;
    let mut stack = stack_with(cfg);
    let c = established(&mut stack, ms(0));
    stack.send(c.id, b"last words").unwrap();
    offloaded(&mut stack, &c);
    let (first, p) = c.peer.recv_one(&mut stack, ms(0));
    assert_eq!(
        (first.flags, p.as_slice()),
        (FIN | ACK | PSH, &b"last words"[..])
    );
    let sent = run_until(&mut stack, ms(60_000));
    let fins: Vec<_> = sent
        .iter()
        .filter(|(_, (h, _))| h.flags.contains(FIN))
        .map(|(t, (h, p))| (*t, h.seq, p.len()))
        .collect();
    assert_eq!(fins.len(), 3, "three retransmissions: {sent:?}");
    assert!(fins
        .iter()
        .all(|&(_, seq, len)| seq == c.our_nxt && len == 10));
    let gaps: Vec<u64> = [ms(0)]
        .iter()
        .chain(fins.iter().map(|(t, _, _)| t))
        .collect::<Vec<_>>()
        .windows(2)
        .map(|w| w[1].saturating_since(*w[0]).as_millis() as u64)
        .collect();
    assert!(
        gaps[1] >= 2 * gaps[0] - 1 && gaps[2] >= 2 * gaps[1] - 1,
        "backoff: {gaps:?}"
    );
    let (_, (rst, _)) = sent.last().unwrap();
    assert_eq!(rst.flags, RST | ACK);
    assert_eq!(stack.counters().teardown_timed_out, 1);
    assert_eq!(stack.teardown_flows(), 0);
    stack.check_invariants().unwrap();
}

#[test]
fn the_peer_closing_first_ends_in_last_ack() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    c.peer.send(&mut stack, ms(1), c.ack_seg().flags_fin());
    let (ack, _) = c.peer.recv_one(&mut stack, ms(1));
    assert_eq!(ack.ack, c.peer_nxt + 1u32);
    assert_eq!(stack.state(c.id), Ok(TcpState::CloseWait));
    assert_eq!(read_all(&mut stack, c.id), b"");
    stack.send(c.id, b"bye").unwrap();
    offloaded(&mut stack, &c);
    let (fin, p) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!((fin.flags, p.as_slice()), (FIN | ACK | PSH, &b"bye"[..]));
    assert_eq!(fin.ack, c.peer_nxt + 1u32);
    assert_eq!(stack.closing().fin_unacked, 1);
    c.peer.send(
        &mut stack,
        ms(3),
        c.ack_seg().seq(c.peer_nxt + 1u32).ack(c.our_nxt + 4u32),
    );
    c.peer.recv_nothing(&mut stack, ms(3));
    assert_eq!(stack.teardown_flows(), 0, "LAST-ACK ends at the FIN's ACK");
    assert_eq!(stack.counters().teardown_completed, 1);
}

#[test]
fn data_after_close_is_answered_with_a_reset() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    offloaded(&mut stack, &c);
    let (fin, _) = c.peer.recv_one(&mut stack, ms(1));
    assert_eq!(fin.flags, FIN | ACK);
    // Old data (a retransmission of bytes already received) is only acknowledged.
    c.peer.send(
        &mut stack,
        ms(2),
        c.ack_seg().seq(c.peer_nxt - 5u32).data(b"olddd"),
    );
    let (ack, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!((ack.flags, ack.ack), (ACK, c.peer_nxt));
    assert_eq!(stack.teardown_flows(), 1);
    // New data nobody can read: RFC 9293 3.10.7.4 / RFC 2525 2.17.
    c.peer.send(&mut stack, ms(3), c.data_seg(b"more"));
    let (rst, _) = c.peer.recv_one(&mut stack, ms(3));
    assert_eq!(rst.flags, RST | ACK);
    assert_eq!(rst.seq, c.our_nxt);
    assert_eq!(stack.counters().teardown_data_after_close, 1);
    assert_eq!(stack.teardown_flows(), 0);
    stack.check_invariants().unwrap();
}

#[test]
fn rfc5961_only_an_exact_reset_ends_the_flow() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    offloaded(&mut stack, &c);
    c.peer.recv_one(&mut stack, ms(1));
    c.peer
        .send(&mut stack, ms(2), c.peer.seg(RST).seq(c.peer_nxt + 100u32));
    let (challenge, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(challenge.flags, ACK);
    c.peer.send(
        &mut stack,
        ms(2),
        c.peer.seg(RST).seq(c.peer_nxt + 1_000_000u32),
    );
    c.peer.recv_nothing(&mut stack, ms(2));
    assert_eq!(stack.teardown_flows(), 1);
    c.peer
        .send(&mut stack, ms(3), c.peer.seg(RST).seq(c.peer_nxt));
    c.peer.recv_nothing(&mut stack, ms(3));
    assert_eq!(stack.teardown_flows(), 0);
    assert_eq!(stack.counters().teardown_reset, 1);
}

/// An offloaded connection in TIME-WAIT at ms(3); returns the sequence number after our FIN.
fn in_time_wait(stack: &mut Stack, c: &Conn) -> SeqNumber {
    offloaded(stack, c);
    c.peer.recv_one(stack, ms(1));
    let end = c.our_nxt + 1u32;
    c.peer.send(stack, ms(2), c.ack_seg().ack(end).flags_fin());
    let (ack, _) = c.peer.recv_one(stack, ms(2));
    assert_eq!(ack.ack, c.peer_nxt + 1u32);
    assert!(stack.closing().is_empty());
    end
}

#[test]
fn rfc9293_time_wait_acks_a_retransmitted_fin_and_rfc1337_ignores_resets() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    let end = in_time_wait(&mut stack, &c);
    c.peer
        .send(&mut stack, ms(500), c.ack_seg().ack(end).flags_fin());
    let (ack, _) = c.peer.recv_one(&mut stack, ms(500));
    assert_eq!((ack.seq, ack.ack), (end, c.peer_nxt + 1u32));
    c.peer
        .send(&mut stack, ms(600), c.peer.seg(RST).seq(c.peer_nxt + 1u32));
    c.peer.recv_nothing(&mut stack, ms(600));
    assert_eq!(stack.teardown_flows(), 1, "RFC 1337: no assassination");
    // The retransmitted FIN restarted the 2 MSL.
    run_until(&mut stack, ms(499) + TIME_WAIT);
    assert_eq!(stack.teardown_flows(), 1);
    run_until(&mut stack, ms(510) + TIME_WAIT);
    assert_eq!(stack.teardown_flows(), 0);
}

#[test]
fn rfc6191_a_new_syn_reopens_time_wait_and_an_old_one_is_acked() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    let end = in_time_wait(&mut stack, &c);
    // An old duplicate SYN (at or below RCV.NXT): ACK, stays.
    c.peer
        .send(&mut stack, ms(10), c.peer.seg(SYN).seq(c.peer_isn));
    let (ack, _) = c.peer.recv_one(&mut stack, ms(10));
    assert_eq!((ack.flags, ack.ack), (ACK, c.peer_nxt + 1u32));
    assert_eq!(stack.counters().time_wait_syn_refused, 1);
    assert_eq!(stack.teardown_flows(), 1);
    // A SYN above RCV.NXT: a new incarnation, ISS above everything the old one used.
    let isn = c.peer_nxt + 100_000u32;
    c.peer.send(
        &mut stack,
        ms(20),
        c.peer.seg(SYN).seq(isn).opts(mss_only(1460)),
    );
    let (synack, _) = c.peer.recv_one(&mut stack, ms(20));
    assert_eq!(synack.flags, SYN | ACK);
    assert_eq!(synack.ack, isn + 1u32);
    assert!(synack.seq.seq_gt(end + 65535u32));
    assert_eq!(stack.teardown_flows(), 0);
    assert_eq!(stack.counters().time_wait_reopened, 1);
    assert_eq!(stack.connection_count(), 1);
    stack.check_invariants().unwrap();
}

#[test]
fn timestamps_echo_ts_recent_and_paws_drops_old_segments() {
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 4).unwrap();
    let peer = Peer::new(40000, LISTEN_PORT);
    let c = passive_open(
        &mut stack,
        l,
        peer,
        ms(0),
        5000,
        full_syn_options(1460, 7, 1000),
        65535,
    );
    offloaded(&mut stack, &c);
    let (fin, _) = c.peer.recv_one(&mut stack, ms(5));
    let (tsval, tsecr) = fin.options.timestamp.expect("timestamps kept");
    assert_eq!(tsecr, 1000, "TS.Recent echoed");
    // A newer TSval updates TS.Recent; an older one is a PAWS drop, answered by an ACK.
    c.peer.send(
        &mut stack,
        ms(6),
        c.ack_seg().ack(c.our_nxt + 1u32).ts(2000, tsval),
    );
    c.peer.recv_nothing(&mut stack, ms(6));
    c.peer.send(
        &mut stack,
        ms(7),
        c.ack_seg()
            .ack(c.our_nxt + 1u32)
            .ts(1500, tsval)
            .flags_fin(),
    );
    let (ack, _) = c.peer.recv_one(&mut stack, ms(7));
    assert_eq!(ack.ack, c.peer_nxt, "the old FIN was not taken");
    assert_eq!(ack.options.timestamp.unwrap().1, 2000);
    assert_eq!(stack.counters().paws_drops, 1);
    assert_eq!(stack.closing().awaiting_peer_fin, 1);
}

#[test]
fn a_tail_beyond_the_send_window_takes_the_normal_path() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    // The peer's window shrinks to 1000 bytes.
    c.peer.send(&mut stack, ms(1), c.ack_seg().win(1000));
    stack.send(c.id, &pattern(3000, 1)).unwrap();
    stack.set_teardown_offload(c.id, true).unwrap();
    stack.close(c.id).unwrap();
    assert_eq!(stack.counters().teardown_offloaded, 0);
    assert_eq!(stack.counters().teardown_refused_state, 1);
    assert_eq!(stack.connection_count(), 1, "the normal path closes it");
    assert_eq!(stack.teardown_flows(), 0);
}

#[test]
fn over_the_flow_limit_closes_take_the_normal_path() {
    let mut cfg = config();
    cfg.teardown_flows = 1;
    let mut stack = stack_with(cfg);
    let l = stack.listen(LISTEN_PORT, 4).unwrap();
    let a = passive_open(
        &mut stack,
        l,
        Peer::new(40000, LISTEN_PORT),
        ms(0),
        1,
        mss_only(1460),
        65535,
    );
    let b = passive_open(
        &mut stack,
        l,
        Peer::new(40001, LISTEN_PORT),
        ms(0),
        1,
        mss_only(1460),
        65535,
    );
    for c in [&a, &b] {
        stack.set_teardown_offload(c.id, true).unwrap();
        stack.close(c.id).unwrap();
    }
    assert_eq!(stack.counters().teardown_offloaded, 1);
    assert_eq!(stack.counters().teardown_refused_full, 1);
    assert_eq!(stack.teardown_flows(), 1);
    assert_eq!(stack.connection_count(), 1);
    // Both FINs go out, one from each path.
    let segs = drain(&mut stack, ms(1), None);
    assert_eq!(
        segs.iter().filter(|(h, _)| h.flags.contains(FIN)).count(),
        2
    );
}

#[test]
fn connect_does_not_take_a_tuple_the_stage_holds() {
    let mut cfg = config();
    cfg.ephemeral_ports = (50000, 50000);
    let mut stack = stack_with(cfg);
    let c = active_open(&mut stack, ms(0), 8080, 9000, mss_only(1460), 65535);
    offloaded(&mut stack, &c);
    assert_eq!(
        stack.connect(ms(1), PEER_IP, 8080).map(|_| ()),
        Err(sluice_tcp::ConnectError::NoResources)
    );
}

#[test]
fn a_close_after_shutdown_is_offloaded_in_whatever_state_it_reached() {
    // FIN-WAIT-1: the FIN went out at shutdown; the stage only retransmits it.
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    stack.shutdown(c.id).unwrap();
    let (fin, _) = c.peer.recv_one(&mut stack, ms(1));
    assert_eq!(fin.flags, FIN | ACK);
    offloaded(&mut stack, &c);
    c.peer.recv_nothing(&mut stack, ms(1));
    let again = run_until(&mut stack, ms(1000));
    let (_, (h, _)) = again.first().expect("the RTO resends the FIN");
    assert_eq!((h.flags, h.seq), (FIN | ACK, c.our_nxt));
    assert_eq!(stack.closing().fin_unacked, 1);

    // FIN-WAIT-2: the FIN was acknowledged before close.
    let mut stack = self::stack();
    let c = established(&mut stack, ms(0));
    stack.shutdown(c.id).unwrap();
    c.peer.recv_one(&mut stack, ms(1));
    c.peer
        .send(&mut stack, ms(2), c.ack_seg().ack(c.our_nxt + 1u32));
    assert_eq!(stack.state(c.id), Ok(TcpState::FinWait2));
    offloaded(&mut stack, &c);
    assert_eq!(stack.closing().awaiting_peer_fin, 1);
    c.peer.send(
        &mut stack,
        ms(3),
        c.ack_seg().ack(c.our_nxt + 1u32).flags_fin(),
    );
    let (ack, _) = c.peer.recv_one(&mut stack, ms(3));
    assert_eq!((ack.seq, ack.ack), (c.our_nxt + 1u32, c.peer_nxt + 1u32));
    assert!(stack.closing().is_empty());
    run_until(&mut stack, ms(10) + TIME_WAIT);
    assert_eq!(stack.teardown_flows(), 0);
    stack.check_invariants().unwrap();
}

#[test]
fn a_connection_in_time_wait_moves_to_the_stage_when_its_application_closes_it() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    stack.shutdown(c.id).unwrap();
    c.peer.recv_one(&mut stack, ms(1));
    c.peer.send(
        &mut stack,
        ms(2),
        c.ack_seg().ack(c.our_nxt + 1u32).flags_fin(),
    );
    c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(stack.state(c.id), Ok(TcpState::TimeWait));
    assert_eq!(
        stack.connection_count(),
        1,
        "the handle holds the slot in TIME-WAIT"
    );
    offloaded(&mut stack, &c);
    // The stage answers a retransmitted FIN as TIME-WAIT does.
    c.peer.send(
        &mut stack,
        ms(5),
        c.ack_seg().ack(c.our_nxt + 1u32).flags_fin(),
    );
    let (ack, _) = c.peer.recv_one(&mut stack, ms(5));
    assert_eq!((ack.flags, ack.ack), (ACK, c.peer_nxt + 1u32));
    run_until(&mut stack, ms(10) + TIME_WAIT);
    assert_eq!(stack.teardown_flows(), 0);
}
