//! Delayed and piggybacked ACKs (RFC 9293 3.8.6.3, RFC 5681 4.2, Laminar 7 "Delayed ACKs"):
//! an ACK for every second full segment (SHLD-19), a timer well under 0.5 s (MUST-40),
//! immediate ACKs for out-of-order and gap-filling segments, and ACKs riding on data.

mod harness;

use std::time::Duration;

use harness::*;
use sluice_tcp::{AckPolicy, Stack};

const DELAY: Duration = Duration::from_millis(40);

fn delayed(segments: u8) -> Stack {
    let mut cfg = config();
    cfg.ack_policy = AckPolicy::Delayed {
        segments,
        timeout: DELAY,
    };
    stack_with(cfg)
}

#[test]
fn rfc9293_shld_19_a_stream_of_full_segments_is_acked_every_second_segment() {
    let mut stack = delayed(2);
    let c = established(&mut stack, ms(0));
    let mut acks = Vec::new();
    for i in 0..6u32 {
        c.peer.send(
            &mut stack,
            ms(1),
            c.data_seg(&[i as u8; 1460]).seq(c.peer_nxt + i * 1460),
        );
        acks.extend(c.peer.recv_all(&mut stack, ms(1)));
    }
    let got: Vec<_> = acks.iter().map(|(h, _)| h.ack).collect();
    let want: Vec<_> = [2u32, 4, 6].iter().map(|n| c.peer_nxt + n * 1460).collect();
    assert_eq!(got, want);
    // Nothing is owed: the timer sends nothing more.
    assert!(run_until(&mut stack, ms(200)).is_empty());
}

#[test]
fn delayed_acks_every_m_segments_as_configured() {
    // Laminar's "every M segments": M = 4 here.
    let mut stack = delayed(4);
    let c = established(&mut stack, ms(0));
    let mut acks = Vec::new();
    for i in 0..8u32 {
        c.peer.send(
            &mut stack,
            ms(1),
            c.data_seg(&[1; 1000]).seq(c.peer_nxt + i * 1000),
        );
        acks.extend(c.peer.recv_all(&mut stack, ms(1)));
    }
    let got: Vec<_> = acks.iter().map(|(h, _)| h.ack).collect();
    assert_eq!(got, vec![c.peer_nxt + 4000u32, c.peer_nxt + 8000u32]);
}

#[test]
fn rfc9293_must_40_the_timer_sends_a_lone_segments_ack_after_the_delay() {
    let mut stack = delayed(2);
    let c = established(&mut stack, ms(0));
    c.peer.send(&mut stack, ms(10), c.data_seg(&[5; 100]));
    c.peer.recv_nothing(&mut stack, ms(10));
    assert_eq!(stack.poll_timeout(), Some(ms(10) + DELAY));
    let sent = run_until(&mut stack, ms(1000));
    assert_eq!(sent.len(), 1, "{sent:?}");
    let (at, (h, p)) = &sent[0];
    assert_eq!(*at, ms(10) + DELAY);
    assert!(*at - ms(10) < Duration::from_millis(500), "MUST-40");
    assert_eq!((h.ack, p.len()), (c.peer_nxt + 100u32, 0));
}

#[test]
fn rfc9293_must_40_config_refuses_a_delay_of_half_a_second() {
    let mut cfg = config();
    cfg.ack_policy = AckPolicy::Delayed {
        segments: 2,
        timeout: Duration::from_millis(500),
    };
    assert!(cfg.validate().is_err());
}

#[test]
fn rfc5681_4_2_an_out_of_order_segment_is_acked_at_once_and_settles_what_was_owed() {
    let mut stack = delayed(2);
    let c = established(&mut stack, ms(0));
    c.peer.send(&mut stack, ms(1), c.data_seg(&[1; 100]));
    c.peer.recv_nothing(&mut stack, ms(1));
    // A gap: the duplicate ACK goes now and acknowledges the first segment too.
    c.peer.send(
        &mut stack,
        ms(2),
        c.data_seg(&[3; 100]).seq(c.peer_nxt + 200u32),
    );
    let (h, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(h.ack, c.peer_nxt + 100u32);
    // RFC 5681 4.2: the segment that fills the gap is acknowledged at once as well.
    c.peer.send(
        &mut stack,
        ms(3),
        c.data_seg(&[2; 100]).seq(c.peer_nxt + 100u32),
    );
    let (h, _) = c.peer.recv_one(&mut stack, ms(3));
    assert_eq!(h.ack, c.peer_nxt + 300u32);
    // The delayed-ACK timer armed by the first segment finds nothing owed.
    assert!(run_until(&mut stack, ms(500)).is_empty());
}

#[test]
fn an_ack_rides_on_outgoing_data_and_cancels_the_delayed_ack() {
    let mut stack = delayed(2);
    let c = established(&mut stack, ms(0));
    c.peer.send(&mut stack, ms(1), c.data_seg(&[1; 300]));
    c.peer.recv_nothing(&mut stack, ms(1));
    // Data the application sends before the timer carries the ACK.
    stack.send(c.id, &pattern(500, 2)).unwrap();
    let (h, p) = c.peer.recv_one(&mut stack, ms(5));
    assert_eq!((h.ack, p.len()), (c.peer_nxt + 300u32, 500));
    // The peer acknowledges the reply (a pure ACK, which is not itself acknowledged).
    c.peer.send(
        &mut stack,
        ms(6),
        c.ack_seg().seq(c.peer_nxt + 300u32).ack(c.our_nxt + 500u32),
    );
    let later = run_until(&mut stack, ms(500));
    assert!(later.is_empty(), "no pure ACK later: {later:?}");
    // A second exchange: one more segment is owed, the reply carries it again.
    c.peer.send(
        &mut stack,
        ms(600),
        c.data_seg(&[1; 100])
            .seq(c.peer_nxt + 300u32)
            .ack(c.our_nxt + 500u32),
    );
    stack.send(c.id, &[7; 10]).unwrap();
    let (h, p) = c.peer.recv_one(&mut stack, ms(600));
    assert_eq!((h.ack, p.len()), (c.peer_nxt + 400u32, 10));
    c.peer.send(
        &mut stack,
        ms(601),
        c.ack_seg().seq(c.peer_nxt + 400u32).ack(c.our_nxt + 510u32),
    );
    assert!(run_until(&mut stack, ms(1200)).is_empty());
}

#[test]
fn every_segment_policy_acks_each_segment_at_once() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    for i in 0..3u32 {
        c.peer.send(
            &mut stack,
            ms(1),
            c.data_seg(&[1; 100]).seq(c.peer_nxt + i * 100),
        );
        let (h, _) = c.peer.recv_one(&mut stack, ms(1));
        assert_eq!(h.ack, c.peer_nxt + (i + 1) * 100);
    }
}
