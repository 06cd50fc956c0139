//! Teardown: RFC 9293 3.6 (closing a connection, figures 12 and 13), 3.10.4 CLOSE,
//! 3.10.7.4 FIN processing and TIME-WAIT, RFC 2525 2.17 (close with unread data), RFC 1337.

mod harness;

use std::time::Duration;

use harness::*;
use sluice_tcp::{Error, Instant, Stack, TcpState};
use sluice_wire::tcp::SeqNumber;

/// Shuts down our side at `now` and returns the FIN we sent.
fn send_fin(stack: &mut Stack, c: &Conn, now: Instant) -> sluice_wire::tcp::TcpHeader {
    stack.shutdown(c.id).unwrap();
    let (fin, p) = c.peer.recv_one(stack, now);
    assert!(p.is_empty());
    assert_eq!(fin.flags, FIN | ACK);
    assert_eq!((fin.seq, fin.ack), (c.our_nxt, c.peer_nxt));
    fin
}

#[test]
fn rfc9293_3_6_active_close_fin_wait_1_fin_wait_2_time_wait_closed() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    send_fin(&mut stack, &c, ms(1));
    assert_eq!(stack.state(c.id), Ok(TcpState::FinWait1));
    assert_eq!(stack.send(c.id, b"late"), Err(Error::NotConnected));
    // The FIN is acknowledged.
    c.peer
        .send(&mut stack, ms(2), c.ack_seg().ack(c.our_nxt + 1u32));
    c.peer.recv_nothing(&mut stack, ms(2));
    assert_eq!(stack.state(c.id), Ok(TcpState::FinWait2));
    // Half-closed: the peer may still send data, which is delivered.
    c.peer
        .send(&mut stack, ms(3), c.data_seg(b"tail").ack(c.our_nxt + 1u32));
    let (ack, _) = c.peer.recv_one(&mut stack, ms(3));
    assert_eq!((ack.seq, ack.ack), (c.our_nxt + 1u32, c.peer_nxt + 4u32));
    assert_eq!(read_all(&mut stack, c.id), b"tail");
    // The peer's FIN.
    c.peer.send(
        &mut stack,
        ms(4),
        c.ack_seg()
            .seq(c.peer_nxt + 4u32)
            .ack(c.our_nxt + 1u32)
            .flags_fin(),
    );
    let (ack, _) = c.peer.recv_one(&mut stack, ms(4));
    assert_eq!(ack.flags, ACK);
    assert_eq!((ack.seq, ack.ack), (c.our_nxt + 1u32, c.peer_nxt + 5u32));
    assert_eq!(stack.state(c.id), Ok(TcpState::TimeWait));
    let mut buf = [0u8; 8];
    assert_eq!(stack.recv(c.id, &mut buf), Ok(0), "end of stream");
    let r = readiness_of(&events(&mut stack), c.id).unwrap();
    assert!(r.readable());
    // TIME-WAIT lasts exactly the configured time.
    stack.handle_timeout(ms(4) + (TIME_WAIT - Duration::from_nanos(1)));
    assert_eq!(stack.state(c.id), Ok(TcpState::TimeWait));
    assert!(run_until(&mut stack, ms(4) + TIME_WAIT).is_empty());
    assert_eq!(stack.state(c.id), Ok(TcpState::Closed));
    assert!(readiness_of(&events(&mut stack), c.id).unwrap().closed());
    assert_eq!(stack.error(c.id), Ok(None));
    assert_eq!(
        stack.connection_count(),
        1,
        "the handle still holds the slot"
    );
    stack.close(c.id).unwrap();
    assert_eq!(stack.connection_count(), 0);
}

#[test]
fn rfc9293_3_10_4_close_then_teardown_frees_the_connection_after_time_wait() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    stack.close(c.id).unwrap();
    assert_eq!(stack.state(c.id), Err(Error::InvalidHandle));
    let (fin, _) = c.peer.recv_one(&mut stack, ms(1));
    assert_eq!((fin.flags, fin.seq), (FIN | ACK, c.our_nxt));
    c.peer.send(
        &mut stack,
        ms(2),
        c.ack_seg().ack(c.our_nxt + 1u32).flags_fin(),
    );
    let (ack, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!((ack.flags, ack.ack), (ACK, c.peer_nxt + 1u32));
    assert_eq!(stack.connection_count(), 1, "in TIME-WAIT");
    stack.handle_timeout(ms(2) + TIME_WAIT);
    assert_eq!(stack.connection_count(), 0);
}

#[test]
fn rfc9293_3_10_4_orphaned_fin_wait_2_is_bounded() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    stack.close(c.id).unwrap();
    c.peer.recv_one(&mut stack, ms(0));
    c.peer
        .send(&mut stack, ms(1), c.ack_seg().ack(c.our_nxt + 1u32));
    assert_eq!(stack.connection_count(), 1);
    // The peer never sends its FIN: the orphan does not hold the slot forever.
    stack.handle_timeout(ms(1) + TIME_WAIT.max(Duration::from_secs(1)));
    assert_eq!(stack.connection_count(), 0);
}

#[test]
fn rfc9293_3_10_7_4_our_fin_is_retransmitted_on_timeout() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    send_fin(&mut stack, &c, ms(0));
    stack.handle_timeout(ms(100));
    let (again, _) = c.peer.recv_one(&mut stack, ms(100));
    assert_eq!((again.flags, again.seq), (FIN | ACK, c.our_nxt));
    assert_eq!(stack.state(c.id), Ok(TcpState::FinWait1));
}

#[test]
fn rfc9293_3_6_passive_close_close_wait_last_ack_closed() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    c.peer
        .send(&mut stack, ms(1), c.data_seg(b"bye").flags_fin());
    let (ack, _) = c.peer.recv_one(&mut stack, ms(1));
    assert_eq!(
        (ack.flags, ack.seq, ack.ack),
        (ACK, c.our_nxt, c.peer_nxt + 4u32)
    );
    assert_eq!(stack.state(c.id), Ok(TcpState::CloseWait));
    assert!(readiness_of(&events(&mut stack), c.id).unwrap().readable());
    assert_eq!(read_all(&mut stack, c.id), b"bye");
    let mut buf = [0u8; 4];
    assert_eq!(stack.recv(c.id, &mut buf), Ok(0));
    // CLOSE-WAIT may still send; the FIN follows the data in the same segment.
    assert_eq!(stack.send(c.id, b"ok").unwrap(), 2);
    stack.shutdown(c.id).unwrap();
    assert_eq!(stack.state(c.id), Ok(TcpState::LastAck));
    let (fin, p) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(fin.flags, FIN | ACK | PSH);
    assert_eq!((fin.seq, fin.ack), (c.our_nxt, c.peer_nxt + 4u32));
    assert_eq!(p, b"ok");
    c.peer.send(
        &mut stack,
        ms(3),
        c.ack_seg().seq(c.peer_nxt + 4u32).ack(c.our_nxt + 3u32),
    );
    c.peer.recv_nothing(&mut stack, ms(3));
    assert_eq!(stack.state(c.id), Ok(TcpState::Closed));
    assert_eq!(stack.error(c.id), Ok(None));
    assert!(readiness_of(&events(&mut stack), c.id).unwrap().closed());
    stack.close(c.id).unwrap();
    assert_eq!(stack.connection_count(), 0);
}

#[test]
fn rfc9293_3_6_passive_close_with_close_frees_on_last_ack() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    c.peer.send(&mut stack, ms(1), c.ack_seg().flags_fin());
    c.peer.recv_one(&mut stack, ms(1));
    stack.close(c.id).unwrap();
    let (fin, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(
        (fin.flags, fin.seq, fin.ack),
        (FIN | ACK, c.our_nxt, c.peer_nxt + 1u32)
    );
    assert_eq!(stack.connection_count(), 1, "LAST-ACK");
    c.peer.send(
        &mut stack,
        ms(3),
        c.ack_seg().seq(c.peer_nxt + 1u32).ack(c.our_nxt + 1u32),
    );
    assert_eq!(
        stack.connection_count(),
        0,
        "no TIME-WAIT for the passive closer"
    );
}

#[test]
fn rfc9293_3_6_simultaneous_close_fin_wait_1_closing_time_wait() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    send_fin(&mut stack, &c, ms(1));
    // The peer's FIN crosses ours: it does not acknowledge our FIN.
    c.peer.send(&mut stack, ms(2), c.ack_seg().flags_fin());
    let (ack, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(
        (ack.flags, ack.seq, ack.ack),
        (ACK, c.our_nxt + 1u32, c.peer_nxt + 1u32)
    );
    assert_eq!(stack.state(c.id), Ok(TcpState::Closing));
    // Now the ACK of our FIN.
    c.peer.send(
        &mut stack,
        ms(3),
        c.ack_seg().seq(c.peer_nxt + 1u32).ack(c.our_nxt + 1u32),
    );
    c.peer.recv_nothing(&mut stack, ms(3));
    assert_eq!(stack.state(c.id), Ok(TcpState::TimeWait));
    stack.handle_timeout(ms(3) + TIME_WAIT);
    assert_eq!(stack.state(c.id), Ok(TcpState::Closed));
}

#[test]
fn rfc9293_3_10_7_4_fin_ack_in_fin_wait_1_goes_straight_to_time_wait() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    send_fin(&mut stack, &c, ms(1));
    c.peer.send(
        &mut stack,
        ms(2),
        c.ack_seg().ack(c.our_nxt + 1u32).flags_fin(),
    );
    let (ack, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(
        (ack.flags, ack.seq, ack.ack),
        (ACK, c.our_nxt + 1u32, c.peer_nxt + 1u32)
    );
    assert_eq!(stack.state(c.id), Ok(TcpState::TimeWait));
}

/// Brings `c` to TIME-WAIT at `at` (active close, FIN+ACK from the peer).
fn to_time_wait(stack: &mut Stack, c: &Conn, at: Instant) {
    send_fin(stack, c, at);
    c.peer
        .send(stack, at, c.ack_seg().ack(c.our_nxt + 1u32).flags_fin());
    c.peer.recv_one(stack, at);
    assert_eq!(stack.state(c.id), Ok(TcpState::TimeWait));
}

#[test]
fn rfc9293_3_10_7_4_retransmitted_fin_in_time_wait_is_acked_and_restarts_2msl() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    to_time_wait(&mut stack, &c, ms(10));
    // Our last ACK was lost; the peer retransmits its FIN.
    c.peer.send(
        &mut stack,
        ms(500),
        c.ack_seg().ack(c.our_nxt + 1u32).flags_fin(),
    );
    let (ack, _) = c.peer.recv_one(&mut stack, ms(500));
    assert_eq!(
        (ack.flags, ack.seq, ack.ack),
        (ACK, c.our_nxt + 1u32, c.peer_nxt + 1u32)
    );
    stack.handle_timeout(ms(10) + TIME_WAIT);
    assert_eq!(
        stack.state(c.id),
        Ok(TcpState::TimeWait),
        "the timer restarted"
    );
    stack.handle_timeout(ms(500) + TIME_WAIT);
    assert_eq!(stack.state(c.id), Ok(TcpState::Closed));
}

#[test]
fn rfc1337_rst_in_time_wait_is_ignored() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    to_time_wait(&mut stack, &c, ms(10));
    c.peer.send(
        &mut stack,
        ms(20),
        c.ack_seg().seq(c.peer_nxt + 1u32).flags(RST),
    );
    c.peer.recv_nothing(&mut stack, ms(20));
    assert_eq!(stack.state(c.id), Ok(TcpState::TimeWait));
    assert_eq!(stack.error(c.id), Ok(None));
}

#[test]
fn rfc9293_must_13_time_wait_lasts_the_configured_time() {
    for tw in [Duration::from_millis(2500), Duration::from_secs(7)] {
        let mut cfg = config();
        cfg.time_wait = tw;
        let mut stack = stack_with(cfg);
        let c = established(&mut stack, ms(0));
        to_time_wait(&mut stack, &c, ms(10));
        stack.handle_timeout(ms(10) + (tw - Duration::from_nanos(1)));
        assert_eq!(stack.state(c.id), Ok(TcpState::TimeWait), "{tw:?}");
        stack.handle_timeout(ms(10) + tw);
        assert_eq!(stack.state(c.id), Ok(TcpState::Closed), "{tw:?}");
    }
}

#[test]
fn rfc9293_3_10_4_rfc2525_2_17_close_with_unread_data_sends_rst() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    c.peer.send(&mut stack, ms(1), c.data_seg(b"unread"));
    c.peer.recv_one(&mut stack, ms(1));
    stack.close(c.id).unwrap();
    let (rst, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(rst.flags, RST | ACK);
    assert_eq!((rst.seq, rst.ack), (c.our_nxt, c.peer_nxt + 6u32));
    assert_eq!(stack.connection_count(), 0);
    assert_eq!(stack.state(c.id), Err(Error::InvalidHandle));
    // Anything further from the peer meets CLOSED: RST.
    c.peer.send(
        &mut stack,
        ms(3),
        c.data_seg(b"more").seq(c.peer_nxt + 6u32),
    );
    let (rst, _) = c.peer.recv_one(&mut stack, ms(3));
    assert_eq!((rst.flags, rst.seq), (RST, c.our_nxt));
}

#[test]
fn rfc9293_3_10_7_4_data_after_close_resets() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    stack.close(c.id).unwrap();
    c.peer.recv_one(&mut stack, ms(0));
    c.peer
        .send(&mut stack, ms(1), c.data_seg(b"nobody reads this"));
    let (rst, _) = c.peer.recv_one(&mut stack, ms(1));
    assert_eq!(rst.flags, RST | ACK);
    assert_eq!(rst.seq, c.our_nxt + 1u32);
    assert_eq!(stack.connection_count(), 0);
}

/// Drives a fresh established connection into `target` and returns it.
fn in_state(stack: &mut Stack, target: TcpState) -> Conn {
    let c = established(stack, ms(0));
    let now = ms(1);
    let fin_from_peer = |stack: &mut Stack| {
        c.peer.send(stack, now, c.ack_seg().flags_fin());
        c.peer.recv_one(stack, now);
    };
    match target {
        TcpState::Established => {}
        TcpState::FinWait1 => {
            send_fin(stack, &c, now);
        }
        TcpState::FinWait2 => {
            send_fin(stack, &c, now);
            c.peer.send(stack, now, c.ack_seg().ack(c.our_nxt + 1u32));
        }
        TcpState::CloseWait => fin_from_peer(stack),
        TcpState::Closing => {
            send_fin(stack, &c, now);
            fin_from_peer(stack);
        }
        TcpState::LastAck => {
            fin_from_peer(stack);
            stack.shutdown(c.id).unwrap();
            c.peer.recv_one(stack, now);
        }
        other => panic!("not a synchronized state: {other:?}"),
    }
    assert_eq!(stack.state(c.id), Ok(target));
    c
}

const SYNCHRONIZED: [TcpState; 6] = [
    TcpState::Established,
    TcpState::FinWait1,
    TcpState::FinWait2,
    TcpState::CloseWait,
    TcpState::Closing,
    TcpState::LastAck,
];

#[test]
fn rfc5961_3_2_4_2_in_window_rst_and_syn_get_challenge_ack_in_every_synchronized_state() {
    for target in SYNCHRONIZED {
        let mut stack = stack();
        let c = in_state(&mut stack, target);
        let info = stack.info(c.id).unwrap();
        for seg in [
            c.peer.seg(RST).seq(info.rcv_nxt + 1u32),
            c.peer.seg(SYN).seq(info.rcv_nxt + 1u32),
        ] {
            c.peer.send(&mut stack, ms(2), seg);
            let (h, p) = c.peer.recv_one(&mut stack, ms(2));
            assert!(p.is_empty());
            assert_eq!(
                (h.flags, h.seq, h.ack),
                (ACK, info.snd_nxt, info.rcv_nxt),
                "{target:?}"
            );
            assert_eq!(stack.state(c.id), Ok(target));
        }
    }
}

#[test]
fn rfc9293_3_10_7_4_rst_with_exact_seq_closes_every_synchronized_state() {
    for target in SYNCHRONIZED {
        let mut stack = stack();
        let c = in_state(&mut stack, target);
        let rcv_nxt = stack.info(c.id).unwrap().rcv_nxt;
        c.peer.send(&mut stack, ms(2), c.peer.seg(RST).seq(rcv_nxt));
        c.peer.recv_nothing(&mut stack, ms(2));
        assert_eq!(stack.state(c.id), Ok(TcpState::Closed), "{target:?}");
        if !matches!(target, TcpState::Closing | TcpState::LastAck) {
            // RFC 9293 3.10.7.4: the user is told "connection reset".
            assert_eq!(stack.error(c.id), Ok(Some(sluice_tcp::ConnError::Reset)));
        }
        assert!(run_until(&mut stack, ms(100_000)).is_empty(), "{target:?}");
        stack.close(c.id).unwrap();
        assert_eq!(stack.connection_count(), 0, "{target:?}");
    }
}

#[test]
fn rfc9293_3_10_7_4_a_reset_connection_frees_its_tuple_before_its_application_closes() {
    // After a RST the TCB is gone (RFC 9293 3.10.7.4: "enter the CLOSED state, delete the
    // TCB"); only the application's handle remains, to report the reset. A new SYN from the
    // same port (a client reusing it at once) reaches the listener, as on Linux, instead of
    // being refused by the old connection's CLOSED state.
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    c.peer
        .send(&mut stack, ms(1), c.peer.seg(RST).seq(c.peer_nxt));
    assert_eq!(stack.state(c.id), Ok(TcpState::Closed));
    // The same 4-tuple again, with a new ISN.
    c.peer
        .send(&mut stack, ms(2), c.peer.seg(SYN).seq(SeqNumber(900_000)));
    let (synack, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!((synack.flags, synack.ack), (SYN | ACK, SeqNumber(900_001)));
    c.peer.send(
        &mut stack,
        ms(2),
        c.peer
            .seg(ACK)
            .seq(SeqNumber(900_001))
            .ack(synack.seq + 1u32),
    );
    assert_eq!(
        stack.connection_count(),
        2,
        "the old handle and the new connection"
    );
    // The old handle still tells the reset; closing it leaves the new connection alone.
    assert_eq!(stack.error(c.id), Ok(Some(sluice_tcp::ConnError::Reset)));
    stack.close(c.id).unwrap();
    assert_eq!(stack.connection_count(), 1);
    c.peer.send(
        &mut stack,
        ms(3),
        c.peer
            .seg(ACK)
            .seq(SeqNumber(900_001))
            .ack(synack.seq + 1u32)
            .data(b"hello"),
    );
    let (ack, _) = c.peer.recv_one(&mut stack, ms(3));
    assert_eq!(ack.ack, SeqNumber(900_006), "the new connection takes data");
}

#[test]
fn rfc9293_3_10_5_abort_sends_rst_and_frees_the_connection() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    stack.abort(c.id).unwrap();
    let (rst, _) = c.peer.recv_one(&mut stack, ms(1));
    assert_eq!(
        (rst.flags, rst.seq, rst.ack),
        (RST | ACK, c.our_nxt, c.peer_nxt)
    );
    assert_eq!(stack.connection_count(), 0);
    assert_eq!(stack.state(c.id), Err(Error::InvalidHandle));
}

/// A connection whose peer (port 40000, ISN 1000) offered timestamps (TSval 500 in its SYN,
/// 600 on its FIN), brought to TIME-WAIT by our close at 10 ms, its handle released.
fn time_wait_with_timestamps(stack: &mut Stack) -> Conn {
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let peer = Peer::new(40000, LISTEN_PORT);
    let c = passive_open(
        stack,
        l,
        peer,
        ms(0),
        1000,
        full_syn_options(1460, 7, 500),
        65535,
    );
    while stack.poll_event().is_some() {}
    stack.close(c.id).unwrap();
    let (fin, _) = c.peer.recv_one(stack, ms(10));
    assert_eq!(fin.flags, FIN | ACK);
    let their = fin.options.timestamp.expect("timestamps in use").0;
    let fin_ack = c.ack_seg().ack(c.our_nxt + 1u32).flags_fin().ts(600, their);
    c.peer.send(stack, ms(10), fin_ack);
    c.peer.recv_one(stack, ms(10));
    assert_eq!(stack.connection_count(), 1, "held in TIME-WAIT");
    c
}

#[test]
fn rfc6191_a_syn_with_a_newer_timestamp_reopens_time_wait_whatever_its_isn() {
    let mut stack = stack();
    let c = time_wait_with_timestamps(&mut stack);
    // ISN 10 lies below RCV.NXT (1002), as a Linux client's ISN for a reused port can
    // after a fast transfer; its TSval (700) is newer than the last one seen (600).
    let syn = c
        .peer
        .seg(SYN)
        .seq(SeqNumber(10))
        .opts(full_syn_options(1460, 7, 700));
    c.peer.send(&mut stack, ms(20), syn);
    let (synack, _) = c.peer.recv_one(&mut stack, ms(20));
    assert_eq!((synack.flags, synack.ack), (SYN | ACK, SeqNumber(11)));
    // RFC 1122 4.2.2.13 (1): the new ISS lies above everything the old incarnation sent
    // (its FIN was our_nxt), by Linux's margin of 65535 + 2.
    assert_eq!(synack.seq, c.our_nxt + 1u32 + 65537u32);
    assert_eq!(stack.counters().time_wait_reopened, 1);
    assert_eq!(
        stack.connection_count(),
        1,
        "the new incarnation replaced the old"
    );
}

#[test]
fn rfc6191_a_syn_with_an_older_timestamp_does_not_reopen_time_wait() {
    let mut stack = stack();
    let c = time_wait_with_timestamps(&mut stack);
    // A higher sequence number, but an older TSval (550 < 600): an old duplicate for all
    // RFC 6191 can tell. It stays in TIME-WAIT, and the SYN is answered with an ACK.
    let syn = c
        .peer
        .seg(SYN)
        .seq(c.peer_nxt + 100_000u32)
        .opts(full_syn_options(1460, 7, 550));
    c.peer.send(&mut stack, ms(20), syn);
    let (ack, _) = c.peer.recv_one(&mut stack, ms(20));
    assert_eq!(
        (ack.flags, ack.seq, ack.ack),
        (ACK, c.our_nxt + 1u32, c.peer_nxt + 1u32)
    );
    assert_eq!(stack.counters().time_wait_reopened, 0);
    assert_eq!(stack.counters().time_wait_syn_refused, 1);
    // Equal timestamps: the sequence number decides (RFC 6191 2, second rule).
    let same = c
        .peer
        .seg(SYN)
        .seq(c.peer_nxt + 100_000u32)
        .opts(full_syn_options(1460, 7, 600));
    c.peer.send(&mut stack, ms(30), same);
    let (synack, _) = c.peer.recv_one(&mut stack, ms(30));
    assert_eq!(synack.flags, SYN | ACK);
    assert_eq!(stack.counters().time_wait_reopened, 1);
}

#[test]
fn rfc1122_4_2_2_13_without_timestamps_only_a_higher_isn_reopens_time_wait() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    to_time_wait(&mut stack, &c, ms(10));
    stack.close(c.id).unwrap();
    // At or below RCV.NXT: refused (an ACK), the connection stays.
    c.peer
        .send(&mut stack, ms(20), c.peer.seg(SYN).seq(c.peer_nxt + 1u32));
    let (ack, _) = c.peer.recv_one(&mut stack, ms(20));
    assert_eq!(ack.flags, ACK);
    assert_eq!(stack.counters().time_wait_syn_refused, 1);
    // Above it: reopened.
    c.peer
        .send(&mut stack, ms(30), c.peer.seg(SYN).seq(c.peer_nxt + 50u32));
    let (synack, _) = c.peer.recv_one(&mut stack, ms(30));
    assert_eq!((synack.flags, synack.ack), (SYN | ACK, c.peer_nxt + 51u32));
    assert_eq!(stack.counters().time_wait_reopened, 1);
}

#[test]
fn rfc9293_may_2_time_wait_is_not_reopened_while_the_application_holds_the_handle() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    to_time_wait(&mut stack, &c, ms(10));
    c.peer
        .send(&mut stack, ms(20), c.peer.seg(SYN).seq(c.peer_nxt + 50u32));
    let (ack, _) = c.peer.recv_one(&mut stack, ms(20));
    assert_eq!(ack.flags, ACK);
    assert_eq!(
        stack.state(c.id),
        Ok(TcpState::TimeWait),
        "the handle stays valid"
    );
}

#[test]
fn rfc5961_4_a_reused_port_frees_the_old_connection_in_every_synchronized_state() {
    // A peer that forgot the connection (its TIME-WAIT reused, a lost RST) opens a new one
    // from the same port. RFC 5961 4.2: the SYN gets a challenge ACK; the peer, in SYN-SENT,
    // answers <SEQ=SEG.ACK><CTL=RST>, which is exactly RCV.NXT (RFC 5961 3.2), and the
    // old connection goes; the peer's next SYN then finds LISTEN.
    for target in SYNCHRONIZED {
        let mut stack = stack();
        let c = in_state(&mut stack, target);
        let held = matches!(target, TcpState::Established | TcpState::CloseWait);
        if !held {
            stack.close(c.id).unwrap();
        }
        let new_syn = c.peer.seg(SYN).seq(SeqNumber(77_000_000));
        c.peer.send(&mut stack, ms(5), new_syn.clone());
        let (challenge, _) = c.peer.recv_one(&mut stack, ms(5));
        assert_eq!(challenge.flags, ACK, "{target:?}");
        c.peer
            .send(&mut stack, ms(6), c.peer.seg(RST).seq(challenge.ack));
        c.peer.recv_nothing(&mut stack, ms(6));
        if held {
            // The application is told, and its close releases the 4-tuple.
            assert_eq!(stack.state(c.id), Ok(TcpState::Closed), "{target:?}");
            assert_eq!(stack.error(c.id), Ok(Some(sluice_tcp::ConnError::Reset)));
            stack.close(c.id).unwrap();
        }
        assert_eq!(stack.connection_count(), 0, "{target:?}");
        c.peer.send(&mut stack, ms(7), new_syn);
        let (synack, _) = c.peer.recv_one(&mut stack, ms(7));
        assert_eq!(
            (synack.flags, synack.ack),
            (SYN | ACK, SeqNumber(77_000_001)),
            "{target:?}"
        );
    }
}
