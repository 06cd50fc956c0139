//! RTT measurement across a host that ran late (issue 24): a segment handled after the
//! retransmission timer's deadline, before `handle_timeout` ran it, ends the measurement
//! without a sample (and so does a handshake completed so).
//! A host that ran the timer on time would have retransmitted the timed segment, and Karn's
//! rule (RFC 6298 3) would have discarded the sample; the late ACK's round trip measures how
//! long the host was away (a clock jump, a suspended VM), not the path. Taken, it made the
//! smoothed RTT hours long (the 32-bit microsecond sample wrapped a 12,795 s outage to
//! 4,205 s) and put the congestion-control tick, which runs once per SRTT, hours away.

mod harness;

use harness::*;
use std::time::Duration;

use sluice_tcp::TcpState;

/// The outage of issue 24's first seed: 12,795 s, more than 2^32 microseconds.
const OUTAGE: Duration = Duration::from_secs(12_795);

/// An established passive connection whose handshake took no time (the SYN-ACK's round
/// trip is the first RTT measurement, RFC 6298 2.2: 1 us).
fn conn(stack: &mut sluice_tcp::Stack) -> Conn {
    let c = established(stack, ms(0));
    assert_eq!(stack.info(c.id).unwrap().srtt, Duration::from_micros(1));
    c
}

/// Sends one segment at 10 ms and returns its length.
fn send_one_segment(stack: &mut sluice_tcp::Stack, c: &Conn) -> u32 {
    assert_eq!(stack.send(c.id, &pattern(1114, 1)), Ok(1114));
    let (h, payload) = c.peer.recv_one(stack, ms(10));
    assert_eq!(h.seq, c.our_nxt);
    payload.len() as u32
}

#[test]
fn rfc6298_karn_an_ack_after_the_rto_deadline_gives_no_rtt_sample() {
    let mut stack = stack();
    let c = conn(&mut stack);
    let len = send_one_segment(&mut stack, &c);
    // The host sleeps through the retransmission timer; the first thing it handles when it
    // wakes is the peer's ACK of the original segment.
    let late = ms(10) + OUTAGE;
    assert!(stack.poll_timeout().is_some_and(|t| t < late));
    c.peer
        .send(&mut stack, late, c.ack_seg().ack(c.our_nxt + len));
    let info = stack.info(c.id).unwrap();
    assert_eq!(info.snd_una, c.our_nxt + len, "the ACK was taken");
    assert_eq!(
        info.srtt,
        Duration::from_micros(1),
        "the outage is not a round trip"
    );
    assert!(info.rto <= RTO_MAX);
    // No timer of the connection is hours away (the congestion-control tick follows SRTT).
    let next = stack.poll_timeout();
    assert!(
        next.is_none_or(|t| t <= late + RTO_MAX),
        "next timer {next:?}, now {late:?}"
    );
    // The connection goes on normally: new data, measured, acknowledged on time.
    assert_eq!(stack.send(c.id, &pattern(100, 2)), Ok(100));
    let (h, _) = c.peer.recv_one(&mut stack, late);
    assert_eq!(h.seq, c.our_nxt + len);
    let later = late + Duration::from_millis(3);
    c.peer
        .send(&mut stack, later, c.ack_seg().ack(c.our_nxt + len + 100u32));
    let srtt = stack.info(c.id).unwrap().srtt;
    assert!(
        srtt > Duration::from_micros(300) && srtt < Duration::from_micros(400),
        "RFC 6298 2.3: 7/8 of 1 us plus 1/8 of the 3 ms sample, got {srtt:?}"
    );
}

#[test]
fn rfc6298_karn_a_partial_ack_after_the_rto_deadline_stops_the_rtt_measurement() {
    // A fuzz case after the first fix: the ACK of an untimed segment, handled past the
    // deadline, restarted the timer; the timed segment's ACK, handled at the same instant,
    // then found the timer running and measured the 13,764 s outage (wrapped to 879 s).
    let mut stack = stack();
    let c = conn(&mut stack);
    let mss = stack.info(c.id).unwrap().mss as usize;
    // Z at 10 ms (timed), A at 11 ms (not timed: Z is), Z acknowledged at 12 ms (a sample),
    // then B at 13 ms (timed).
    assert_eq!(stack.send(c.id, &pattern(mss, 1)), Ok(mss));
    c.peer.recv_one(&mut stack, ms(10));
    assert_eq!(stack.send(c.id, &pattern(mss, 2)), Ok(mss));
    c.peer.recv_one(&mut stack, ms(11));
    c.peer
        .send(&mut stack, ms(12), c.ack_seg().ack(c.our_nxt + mss as u32));
    let srtt = stack.info(c.id).unwrap().srtt;
    assert!(
        srtt > Duration::from_micros(200),
        "Z's 2 ms sample: {srtt:?}"
    );
    assert_eq!(stack.send(c.id, &pattern(mss, 3)), Ok(mss));
    c.peer.recv_one(&mut stack, ms(13));
    // The host sleeps through the timer; then A's ACK and B's ACK come in.
    let late = ms(13) + Duration::from_secs(13_764);
    assert!(stack.poll_timeout().is_some_and(|t| t < late));
    c.peer.send(
        &mut stack,
        late,
        c.ack_seg().ack(c.our_nxt + 2 * mss as u32),
    );
    c.peer.send(
        &mut stack,
        late,
        c.ack_seg().ack(c.our_nxt + 3 * mss as u32),
    );
    let info = stack.info(c.id).unwrap();
    assert_eq!(info.snd_una, c.our_nxt + 3 * mss as u32);
    assert_eq!(info.srtt, srtt, "the outage is not a round trip");
}

#[test]
fn rfc6298_an_ack_within_the_rto_still_gives_a_sample() {
    let mut stack = stack();
    let c = conn(&mut stack);
    let len = send_one_segment(&mut stack, &c);
    // The first RTO is the floor (RTO_MIN, 5 ms); the ACK comes 3 ms after the data.
    c.peer
        .send(&mut stack, ms(13), c.ack_seg().ack(c.our_nxt + len));
    let srtt = stack.info(c.id).unwrap().srtt;
    assert!(
        srtt > Duration::from_micros(300) && srtt < Duration::from_micros(400),
        "RFC 6298 2.3: 7/8 of 1 us plus 1/8 of the 3 ms sample, got {srtt:?}"
    );
}

#[test]
fn rfc6298_karn_a_syn_ack_after_the_syn_rto_deadline_gives_no_rtt_sample() {
    let mut stack = stack();
    let id = stack.connect(ms(0), PEER_IP, 8080).expect("connect");
    let probe = Peer::new(8080, 0);
    let (syn, _) = probe.recv_one(&mut stack, ms(0));
    let peer = Peer::new(8080, syn.src_port);
    // The host sleeps through the SYN's retransmission timer; the SYN-ACK is the first
    // thing it handles when it wakes.
    let late = ms(0) + OUTAGE;
    peer.send(
        &mut stack,
        late,
        peer.seg(SYN | ACK)
            .seq(sluice_wire::tcp::SeqNumber(5000))
            .ack(syn.seq + 1u32)
            .opts(mss_only(1460)),
    );
    let info = stack.info(id).unwrap();
    assert_eq!(info.state, TcpState::Established);
    assert_eq!(info.srtt, Duration::ZERO, "no RTT measured yet");
    assert_eq!(info.rto, RTO_INITIAL, "RFC 6298 2.1 until the first sample");
}

#[test]
fn rfc6298_karn_a_handshake_ack_after_the_syn_ack_rto_deadline_gives_no_rtt_sample() {
    let mut stack = stack();
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let peer = Peer::new(40000, LISTEN_PORT);
    let isn = sluice_wire::tcp::SeqNumber(1000);
    peer.send(
        &mut stack,
        ms(0),
        peer.seg(SYN).seq(isn).opts(mss_only(1460)),
    );
    let (synack, _) = peer.recv_one(&mut stack, ms(0));
    let late = ms(0) + OUTAGE;
    peer.send(
        &mut stack,
        late,
        peer.seg(ACK).seq(isn + 1u32).ack(synack.seq + 1u32),
    );
    let id = stack.accept(l).expect("handshake completed");
    let info = stack.info(id).unwrap();
    assert_eq!(info.srtt, Duration::ZERO, "no RTT measured yet");
    assert_eq!(info.rto, RTO_INITIAL, "RFC 6298 2.1 until the first sample");
}
