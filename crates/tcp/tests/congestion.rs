//! Congestion-window validation (RFC 7661): the window grows only as far as the sender
//! uses it.

mod harness;

use harness::*;

#[test]
fn rfc7661_an_application_limited_sender_does_not_grow_its_window() {
    let mut stack = stack();
    let c = established(&mut stack, ms(0));
    assert_eq!(stack.info(c.id).unwrap().cwnd, 10 * 1460);
    // Two segments per round trip, each round acknowledged: the initial window of ten is
    // never used, so slow start must not grow it (it would by the acknowledged bytes).
    let mut acked = 0u32;
    for round in 0..10u64 {
        let t = ms(2 * round);
        assert_eq!(stack.send(c.id, &pattern(2 * 1460, 1)), Ok(2 * 1460));
        let out = c.peer.recv_all(&mut stack, t);
        assert_eq!(out.len(), 2);
        acked += 2 * 1460;
        c.peer.send(
            &mut stack,
            t + std::time::Duration::from_millis(1),
            c.ack_seg().ack(c.our_nxt + acked),
        );
        run_until(&mut stack, ms(2 * round + 2));
    }
    assert!(stack.counters().cc_iterations >= 5);
    assert_eq!(stack.info(c.id).unwrap().cwnd, 10 * 1460);
    // A sender that fills the window grows it: slow start doubles it in one round.
    assert_eq!(stack.send(c.id, &pattern(10 * 1460, 2)), Ok(10 * 1460));
    let t = ms(20);
    assert_eq!(c.peer.recv_all(&mut stack, t).len(), 10);
    acked += 10 * 1460;
    c.peer.send(
        &mut stack,
        t + std::time::Duration::from_millis(1),
        c.ack_seg().ack(c.our_nxt + acked),
    );
    run_until(&mut stack, ms(23));
    assert_eq!(stack.info(c.id).unwrap().cwnd, 20 * 1460);
}
