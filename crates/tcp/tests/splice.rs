//! Connection splicing (acceltcp.txt 4.3) at the core's API: what `Stack::splice` refuses,
//! draining before the handover, the rewrite of each peer's frames for the other (ports,
//! sequence and acknowledgment numbers, checksums), and a RST ending the splice only if it
//! is in the receiver's window (RFC 5961 3.2).

mod harness;

use harness::*;
use sluice_tcp::{SpliceEnd, SpliceError, SpliceEvent};
use sluice_wire::tcp::SeqNumber;

#[test]
fn splice_refuses_what_it_cannot_join_and_changes_nothing() {
    let mut stack = stack();
    let (a, b) = two_accepted(&mut stack);
    assert_eq!(stack.splice(a.id, a.id), Err(SpliceError::SameConnection));
    // A connection still in its handshake.
    let c = stack.connect(ms(1), PEER_IP, 9).unwrap();
    assert_eq!(stack.splice(a.id, c), Err(SpliceError::NotEstablished));
    // A closed handle.
    stack.abort(c).unwrap();
    assert_eq!(stack.splice(a.id, c), Err(SpliceError::InvalidHandle));
    drain(&mut stack, ms(1), None);
    // A peer whose MSS is below ours could not take the other's segments.
    let l = stack.listen(81, 4).unwrap();
    let small = passive_open(
        &mut stack,
        l,
        Peer::new(40002, 81),
        ms(2),
        1,
        mss_only(536),
        65535,
    );
    assert_eq!(stack.splice(a.id, small.id), Err(SpliceError::MssMismatch));
    // Timestamps on one side only.
    let ts = passive_open(
        &mut stack,
        l,
        Peer::new(40003, 81),
        ms(2),
        1,
        full_syn_options(1460, 7, 100),
        65535,
    );
    assert_eq!(
        stack.splice(a.id, ts.id),
        Err(SpliceError::TimestampsMismatch)
    );
    assert_eq!(stack.splice_count(), 0);
    assert_eq!(stack.poll_splice_event(), None);
    // Still the application's.
    stack.send(a.id, b"x").unwrap();
    stack.send(b.id, b"y").unwrap();
    let mut off = config();
    off.splice_max = 0;
    let mut off = stack_with(off);
    let (a, b) = two_accepted(&mut off);
    assert_eq!(off.splice(a.id, b.id), Err(SpliceError::Full));
}

#[test]
fn an_idle_pair_is_handed_over_at_once_and_each_peers_frames_go_to_the_other() {
    let mut stack = stack();
    let (a, b) = two_accepted(&mut stack);
    let id = stack.splice(a.id, b.id).unwrap();
    assert_eq!(stack.poll_splice_event(), Some(SpliceEvent::Installed(id)));
    assert_eq!(stack.connection_count(), 0, "both slots freed");
    assert_eq!(stack.splice_count(), 1);
    // The handover's last ACKs (one per connection).
    let acks = drain(&mut stack, ms(1), None);
    assert_eq!(acks.len(), 2, "{acks:?}");
    // The first peer's data leaves towards the second, as the second connection's.
    a.peer
        .send(&mut stack, ms(2), a.data_seg(b"hello through the splice"));
    let out = drain(&mut stack, ms(2), None);
    assert_eq!(out.len(), 1, "{out:?}");
    let (h, p) = &out[0];
    assert_eq!((h.src_port, h.dst_port), (LISTEN_PORT, 40001));
    assert_eq!(h.seq, b.our_nxt, "the second connection's sequence space");
    assert_eq!(h.ack, b.peer_nxt, "acknowledging what the second peer sent");
    assert_eq!(p.as_slice(), b"hello through the splice");
    // The reply the other way, acknowledging it in its own space.
    b.peer.send(
        &mut stack,
        ms(3),
        b.data_seg(b"reply").ack(b.our_nxt + 24u32),
    );
    let out = drain(&mut stack, ms(3), None);
    let (h, p) = &out[0];
    assert_eq!((h.src_port, h.dst_port), (LISTEN_PORT, 40000));
    assert_eq!((h.seq, h.ack), (a.our_nxt, a.peer_nxt + 24u32));
    assert_eq!(p.as_slice(), b"reply");
    assert_eq!(stack.counters().splice_frames_relayed, 2);
    stack.check_invariants().unwrap();
    // A new connection cannot take a spliced tuple: the SYN of one is dropped.
    a.peer
        .send(&mut stack, ms(4), a.peer.seg(SYN).seq(SeqNumber(7)));
    assert!(drain(&mut stack, ms(4), None).is_empty());
    assert_eq!(stack.counters().splice_out_of_window, 1);
}

#[test]
fn rfc9293_a_new_syn_on_a_lingering_splices_tuple_reopens_it_for_the_listener() {
    let mut stack = stack();
    let (a, b) = two_accepted(&mut stack);
    let id = stack.splice(a.id, b.id).unwrap();
    stack.poll_splice_event();
    drain(&mut stack, ms(1), None);
    // Both peers close, and each FIN is acknowledged by the other peer: the splice lingers
    // (min(2 s, TIME-WAIT)) to relay retransmitted FINs.
    a.peer.send(&mut stack, ms(2), a.ack_seg().flags_fin());
    b.peer.send(
        &mut stack,
        ms(3),
        b.ack_seg().ack(b.our_nxt + 1u32).flags_fin(),
    );
    a.peer.send(
        &mut stack,
        ms(4),
        a.ack_seg().seq(a.peer_nxt + 1u32).ack(a.our_nxt + 1u32),
    );
    drain(&mut stack, ms(4), None);
    assert_eq!(stack.splice_count(), 1, "lingering");
    // A SYN at or before the old connection's FIN is an old duplicate: dropped.
    a.peer
        .send(&mut stack, ms(5), a.peer.seg(SYN).seq(a.peer_nxt));
    assert!(drain(&mut stack, ms(5), None).is_empty());
    assert_eq!(stack.counters().splice_reopened, 0);
    // The first peer reuses its port for a new connection (a Linux client does within the
    // linger): its ISN is past the old FIN, so the splice is forgotten and the listener
    // answers, as from a TIME-WAIT (RFC 9293 3.10.7.4).
    a.peer.send(
        &mut stack,
        ms(6),
        a.peer.seg(SYN).seq(a.peer_nxt + 100_000u32),
    );
    let out = drain(&mut stack, ms(6), None);
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(out[0].0.flags.contains(SYN) && out[0].0.flags.contains(ACK));
    assert_eq!(out[0].0.ack, a.peer_nxt + 100_001u32);
    assert_eq!(stack.counters().splice_reopened, 1);
    assert_eq!(stack.splice_count(), 0);
    match stack.poll_splice_event() {
        Some(SpliceEvent::Ended(e, SpliceEnd::Closed, _)) => assert_eq!(e, id),
        other => panic!("{other:?}"),
    }
    stack.check_invariants().unwrap();
}

#[test]
fn buffered_bytes_are_relayed_and_acknowledged_before_the_handover() {
    let mut stack = stack();
    let (a, b) = two_accepted(&mut stack);
    // The first peer sent bytes the application never read.
    a.peer.send(&mut stack, ms(1), a.data_seg(b"unread"));
    drain(&mut stack, ms(1), None);
    let id = stack.splice(a.id, b.id).unwrap();
    assert_eq!(
        stack.poll_splice_event(),
        None,
        "waiting for the second peer's ACK"
    );
    let out = drain(&mut stack, ms(2), None);
    let data: Vec<_> = out.iter().filter(|(_, p)| !p.is_empty()).collect();
    assert_eq!(data.len(), 1, "{out:?}");
    assert_eq!(data[0].0.dst_port, 40001);
    assert_eq!(data[0].1.as_slice(), b"unread");
    b.peer
        .send(&mut stack, ms(3), b.ack_seg().ack(b.our_nxt + 6u32));
    assert_eq!(stack.poll_splice_event(), Some(SpliceEvent::Installed(id)));
    // Sequence spaces line up after the relayed bytes.
    a.peer.send(
        &mut stack,
        ms(4),
        a.data_seg(b"more").seq(a.peer_nxt + 6u32),
    );
    let out = drain(&mut stack, ms(4), None);
    let relayed = out.iter().find(|(_, p)| p.as_slice() == b"more").unwrap();
    assert_eq!(relayed.0.seq, b.our_nxt + 6u32);
}

#[test]
fn rfc5961_only_a_reset_in_the_receivers_window_ends_the_splice() {
    let mut stack = stack();
    let (a, b) = two_accepted(&mut stack);
    let id = stack.splice(a.id, b.id).unwrap();
    stack.poll_splice_event();
    drain(&mut stack, ms(1), None);
    // Far outside the second peer's window: dropped.
    a.peer.send(
        &mut stack,
        ms(2),
        a.peer.seg(RST).seq(a.peer_nxt + 10_000_000u32),
    );
    assert!(drain(&mut stack, ms(2), None).is_empty());
    assert_eq!(stack.counters().splice_rst_out_of_window, 1);
    assert_eq!(stack.splice_count(), 1);
    // At the edge: relayed, and the splice ends.
    a.peer
        .send(&mut stack, ms(3), a.peer.seg(RST).seq(a.peer_nxt));
    let out = drain(&mut stack, ms(3), None);
    assert_eq!(out.len(), 1);
    assert!(out[0].0.flags.contains(RST));
    assert_eq!((out[0].0.dst_port, out[0].0.seq), (40001, b.our_nxt));
    match stack.poll_splice_event() {
        Some(SpliceEvent::Ended(e, SpliceEnd::Reset(true), stats)) => {
            assert_eq!(e, id);
            assert_eq!((stats.a_to_b, stats.b_to_a), (0, 0));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(stack.splice_count(), 0);
    // The tuples are free again: the first peer's next segment meets no connection.
    a.peer.send(&mut stack, ms(4), a.data_seg(b"late"));
    let out = drain(&mut stack, ms(4), None);
    assert!(out[0].0.flags.contains(RST), "{out:?}");
}

#[test]
fn both_peers_closing_while_the_splice_drains_ends_it_without_resets() {
    let mut stack = stack();
    let (a, b) = two_accepted(&mut stack);
    // The first peer's request, unread, and its FIN: the splice waits to relay them.
    a.peer.send(&mut stack, ms(1), a.data_seg(b"GET /"));
    a.peer.send(
        &mut stack,
        ms(1),
        a.ack_seg().seq(a.peer_nxt + 5u32).flags_fin(),
    );
    drain(&mut stack, ms(1), None);
    let id = stack.splice(a.id, b.id).unwrap();
    let out = drain(&mut stack, ms(2), None);
    let to_b: Vec<_> = out.iter().filter(|(h, _)| h.dst_port == 40001).collect();
    assert!(
        to_b.iter().any(|(_, p)| p.as_slice() == b"GET /"),
        "{out:?}"
    );
    assert!(
        to_b.iter().any(|(h, _)| h.flags.contains(FIN)),
        "the FIN follows: {out:?}"
    );
    // The second peer answers, acknowledges and closes too.
    b.peer.send(
        &mut stack,
        ms(3),
        b.data_seg(b"200 OK").ack(b.our_nxt + 6u32).flags_fin(),
    );
    let out = drain(&mut stack, ms(3), None);
    let to_a: Vec<_> = out.iter().filter(|(h, _)| h.dst_port == 40000).collect();
    assert!(
        to_a.iter().any(|(_, p)| p.as_slice() == b"200 OK"),
        "{out:?}"
    );
    // The first peer acknowledges the answer and our FIN: its connection is closed.
    a.peer.send(
        &mut stack,
        ms(4),
        a.ack_seg().seq(a.peer_nxt + 6u32).ack(a.our_nxt + 7u32),
    );
    assert!(drain(&mut stack, ms(4), None)
        .iter()
        .all(|(h, _)| !h.flags.contains(RST)));
    match stack.poll_splice_event() {
        Some(SpliceEvent::Ended(e, SpliceEnd::Closed, _)) => assert_eq!(e, id),
        other => panic!("{other:?}"),
    }
    assert_eq!(stack.counters().splices_failed, 0);
    assert_eq!(stack.counters().rst_sent, 0);
    stack.check_invariants().unwrap();
}

#[test]
fn splice_events_nobody_reads_are_bounded_and_counted() {
    let mut cfg = config();
    cfg.splice_max = 1;
    let mut stack = stack_with(cfg);
    let l = stack.listen(LISTEN_PORT, 8).unwrap();
    let mut ids = Vec::new();
    for port in [40000u16, 40002] {
        let a = passive_open(
            &mut stack,
            l,
            Peer::new(port, LISTEN_PORT),
            ms(0),
            1000,
            mss_only(1460),
            65535,
        );
        let b = passive_open(
            &mut stack,
            l,
            Peer::new(port + 1, LISTEN_PORT),
            ms(0),
            5000,
            mss_only(1460),
            65535,
        );
        while stack.poll_event().is_some() {}
        ids.push(stack.splice(a.id, b.id).unwrap());
        drain(&mut stack, ms(1), None);
        a.peer
            .send(&mut stack, ms(2), a.peer.seg(RST).seq(a.peer_nxt));
        drain(&mut stack, ms(2), None);
    }
    // Two events per splice the stage may hold: the first splice's were dropped.
    assert_eq!(stack.counters().splice_events_dropped, 2);
    assert_eq!(
        stack.poll_splice_event(),
        Some(SpliceEvent::Installed(ids[1]))
    );
    assert!(matches!(stack.poll_splice_event(), Some(SpliceEvent::Ended(e, _, _)) if e == ids[1]));
    assert_eq!(stack.poll_splice_event(), None);
}
