//! Spurious retransmission timeouts: RFC 3522 Eifel detection with timestamps, RFC 5682
//! F-RTO's test (data never retransmitted is acknowledged), and the RFC 4015 response (the window and threshold come back, transmission goes on with new
//! data rather than resending what the peer already has).

mod harness;

use harness::*;
use std::time::Duration;

use sluice_wire::tcp::TcpOptions;

/// The RTO of the first data: the handshake (at one instant) measured an RTT of about
/// zero (RFC 6298 2.2), so the RTO is its floor.
const FIRST_RTO: Duration = RTO_MIN;

/// An established connection with timestamps (and SACK) negotiated.
fn ts_conn(stack: &mut sluice_tcp::Stack) -> Conn {
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    passive_open(
        stack,
        l,
        Peer::new(40000, LISTEN_PORT),
        ms(0),
        1000,
        full_syn_options(1460, 0, 100),
        65535,
    )
}

/// Sends four segments at 10 ms and lets the retransmission timer fire; returns the
/// original segments' TSval, the retransmission's TSval, and the window before the timeout.
fn timeout_after_four_segments(stack: &mut sluice_tcp::Stack, c: &Conn) -> (u32, u32, u32, u32) {
    let mss = stack.info(c.id).unwrap().mss as usize;
    assert_eq!(stack.send(c.id, &pattern(4 * mss, 1)), Ok(4 * mss));
    let sent = c.peer.recv_all(stack, ms(10));
    assert_eq!(sent.len(), 4);
    let original_tsval = sent[0].0.options.timestamp.unwrap().0;
    let cwnd_before = stack.info(c.id).unwrap().cwnd;
    let resent = run_until(stack, ms(10) + FIRST_RTO + Duration::from_millis(1));
    assert_eq!(resent.len(), 1, "one retransmission from snd_una");
    let (h, _) = &resent[0].1;
    assert_eq!(h.seq, c.our_nxt);
    let rtx_tsval = h.options.timestamp.unwrap().0;
    assert!(rtx_tsval > original_tsval);
    assert_eq!(stack.counters().timeouts, 1);
    assert!(
        stack.info(c.id).unwrap().cwnd < cwnd_before,
        "the timeout cut the window"
    );
    (original_tsval, rtx_tsval, cwnd_before, mss as u32)
}

#[test]
fn rfc3522_an_ack_echoing_the_original_timestamp_undoes_the_timeout() {
    let mut stack = stack();
    let c = ts_conn(&mut stack);
    let (original, _, cwnd_before, mss) = timeout_after_four_segments(&mut stack, &c);
    let now = ms(10) + FIRST_RTO + Duration::from_millis(2);
    // The originals were only late: the peer acknowledges the first two, echoing their
    // timestamp (RFC 7323 TS.Recent), not the retransmission's.
    c.peer.send(
        &mut stack,
        now,
        c.ack_seg().ack(c.our_nxt + 2 * mss).ts(200, original),
    );
    assert_eq!(stack.counters().spurious_timeouts, 1);
    assert_eq!(
        stack.info(c.id).unwrap().cwnd,
        cwnd_before,
        "RFC 4015: window restored"
    );
    // RFC 4015 3.2 (4): segments 3 and 4 are still on their way; they are not sent again.
    c.peer.recv_nothing(&mut stack, now);
    // New data goes out at once, after the old snd_max.
    assert_eq!(
        stack.send(c.id, &pattern(mss as usize, 2)),
        Ok(mss as usize)
    );
    let (h, _) = c.peer.recv_one(&mut stack, now);
    assert_eq!(h.seq, c.our_nxt + 4 * mss);
}

#[test]
fn rfc3522_an_ack_echoing_the_retransmission_keeps_the_timeout_response() {
    let mut stack = stack();
    let c = ts_conn(&mut stack);
    let (_, rtx, cwnd_before, mss) = timeout_after_four_segments(&mut stack, &c);
    let now = ms(10) + FIRST_RTO + Duration::from_millis(2);
    // The original was lost; the retransmission filled the hole.
    c.peer.send(
        &mut stack,
        now,
        c.ack_seg().ack(c.our_nxt + mss).ts(200, rtx),
    );
    assert_eq!(stack.counters().spurious_timeouts, 0);
    assert!(stack.info(c.id).unwrap().cwnd < cwnd_before);
    // Go-back-N goes on from the new snd_una: segment 2 is resent.
    let out = c.peer.recv_all(&mut stack, now);
    assert!(!out.is_empty());
    assert_eq!(out[0].0.seq, c.our_nxt + mss);
}

#[test]
fn rfc5682_an_ack_for_data_never_retransmitted_undoes_the_timeout_whatever_it_echoes() {
    // What a CPU-starved Linux receiver does in the lab: it processes the late originals and
    // the retransmission in one batch and echoes the retransmission's timestamp, but its
    // cumulative ACK covers segments 2-4, which were sent only before the timeout.
    let mut stack = stack();
    let c = ts_conn(&mut stack);
    let (_, rtx, cwnd_before, mss) = timeout_after_four_segments(&mut stack, &c);
    let now = ms(10) + FIRST_RTO + Duration::from_millis(2);
    c.peer.send(
        &mut stack,
        now,
        c.ack_seg().ack(c.our_nxt + 4 * mss).ts(200, rtx),
    );
    assert_eq!(stack.counters().spurious_timeouts, 1);
    assert_eq!(stack.info(c.id).unwrap().cwnd, cwnd_before);
}

/// A connection with SACK but no timestamps: F-RTO's test alone decides.
fn sack_conn(stack: &mut sluice_tcp::Stack) -> Conn {
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let opts = TcpOptions {
        mss: Some(1460),
        sack_permitted: true,
        ..Default::default()
    };
    passive_open(
        stack,
        l,
        Peer::new(40000, LISTEN_PORT),
        ms(0),
        1000,
        opts,
        65535,
    )
}

/// Sends three segments at 10 ms; `before_timeout` may answer them before the timer fires.
/// Then the timeout, and the peer's cumulative ACK of `acked_segments`. Returns the
/// spurious-timeout count, the window after, and the window before the timeout.
fn three_segments_then_timeout(
    acked_segments: u32,
    before_timeout: impl Fn(&mut sluice_tcp::Stack, &Conn, u32),
) -> (u64, u32, u32) {
    let mut stack = stack();
    let c = sack_conn(&mut stack);
    let mss = stack.info(c.id).unwrap().mss as u32;
    assert_eq!(
        stack.send(c.id, &pattern(3 * mss as usize, 1)),
        Ok(3 * mss as usize)
    );
    assert_eq!(c.peer.recv_all(&mut stack, ms(10)).len(), 3);
    before_timeout(&mut stack, &c, mss);
    let cwnd_before = stack.info(c.id).unwrap().cwnd;
    let resent = run_until(&mut stack, ms(10) + FIRST_RTO + Duration::from_millis(1));
    assert_eq!(resent.len(), 1, "one retransmission from snd_una");
    assert_eq!(resent[0].1 .0.seq, c.our_nxt);
    let now = ms(10) + FIRST_RTO + Duration::from_millis(2);
    c.peer.send(
        &mut stack,
        now,
        c.ack_seg().ack(c.our_nxt + acked_segments * mss),
    );
    let cwnd = stack.info(c.id).unwrap().cwnd;
    (stack.counters().spurious_timeouts, cwnd, cwnd_before)
}

#[test]
fn rfc5682_without_timestamps_an_ack_of_never_retransmitted_data_decides() {
    let nothing = |_: &mut sluice_tcp::Stack, _: &Conn, _: u32| {};
    // Only the retransmitted segment acknowledged: no verdict, the response stays.
    let (spurious, cwnd, before) = three_segments_then_timeout(1, nothing);
    assert_eq!(spurious, 0);
    assert!(cwnd < before);
    // Segments 2 and 3, sent only before the timeout and never reported missing, are
    // acknowledged: the originals arrived.
    let (spurious, cwnd, before) = three_segments_then_timeout(3, nothing);
    assert_eq!(spurious, 1);
    assert_eq!(cwnd, before);
}

#[test]
fn rfc5682_a_real_loss_reported_by_sack_before_the_timeout_is_not_undone() {
    // Segment 1 is lost; 2 and 3 arrive and are SACKed (too few for a fast retransmit);
    // the timeout resends 1, which fills the hole, and the ACK jumps past 3. That is a
    // real loss: the jump covers only data the peer had SACKed.
    let sacked = |stack: &mut sluice_tcp::Stack, c: &Conn, mss: u32| {
        let block = TcpOptions {
            sack_blocks: [
                (c.our_nxt + mss, c.our_nxt + 3 * mss),
                Default::default(),
                Default::default(),
                Default::default(),
            ],
            sack_count: 1,
            ..Default::default()
        };
        c.peer
            .send(stack, ms(11), c.ack_seg().ack(c.our_nxt).opts(block));
    };
    let (spurious, cwnd, before) = three_segments_then_timeout(3, sacked);
    assert_eq!(spurious, 0);
    assert!(cwnd < before);
}

#[test]
fn rfc4015_3_2_6_a_spurious_timeout_teaches_the_estimator_the_late_round_trip() {
    // A peer that holds its ACK 10 ms (a delayed ACK) after the handshake's ~0 RTT set a
    // 5 ms RTO: the timeout fires once, and the late ACK shows it spurious. The next RTO
    // covers the 10 ms, so the following exchange does not time out again.
    let mut stack = stack();
    let c = ts_conn(&mut stack);
    let mss = stack.info(c.id).unwrap().mss as usize;
    stack.send(c.id, &pattern(mss, 1)).unwrap();
    let sent = c.peer.recv_all(&mut stack, ms(10));
    let original = sent[0].0.options.timestamp.unwrap().0;
    let resent = run_until(&mut stack, ms(19));
    assert_eq!(resent.len(), 1, "the 5 ms RTO fired once");
    c.peer.send(
        &mut stack,
        ms(20),
        c.ack_seg().ack(c.our_nxt + mss as u32).ts(300, original),
    );
    assert_eq!(stack.counters().spurious_timeouts, 1);
    // SRTT = 10 ms, RTTVAR = 5 ms: RTO = 30 ms.
    assert_eq!(stack.info(c.id).unwrap().rto, Duration::from_millis(30));
    let before = stack.counters().timeouts;
    stack.send(c.id, &pattern(mss, 2)).unwrap();
    c.peer.recv_all(&mut stack, ms(20));
    assert!(
        run_until(&mut stack, ms(20 + 29)).is_empty(),
        "no retransmission within the learned RTO"
    );
    assert_eq!(stack.counters().timeouts, before);
}
