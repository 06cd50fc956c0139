//! Configuration values at the edges of their types: house rule 1, a configuration never
//! makes the core panic; it is accepted and honoured, or refused by `Stack::new`.

mod harness;

use std::time::Duration;

use harness::*;
use sluice_tcp::Stack;

#[test]
fn rfc6298_2_4_rto_max_beyond_u32_microseconds_bounds_the_rto_without_panicking() {
    // 2^32 us is about 71.6 minutes; a longer rto_max is a valid configuration.
    for rto_max in [
        Duration::from_micros(u32::MAX as u64 + 1),
        Duration::from_secs(4295),
        Duration::from_secs(7200),
    ] {
        let mut cfg = config();
        cfg.rto_min = Duration::from_millis(200);
        cfg.rto_max = rto_max;
        let mut stack = stack_with(cfg);
        let c = established(&mut stack, ms(0));
        stack.send(c.id, &pattern(100, 1)).unwrap();
        c.peer.recv_one(&mut stack, ms(0));
        // An RTT sample of 10 ms: the RTO is rto_min (RFC 6298 2.4), not a wrapped bound.
        c.peer
            .send(&mut stack, ms(10), c.ack_seg().ack(c.our_nxt + 100u32));
        assert_eq!(
            stack.info(c.id).unwrap().rto,
            Duration::from_millis(200),
            "{rto_max:?}"
        );
    }
}

#[test]
fn queue_and_cache_bounds_beyond_memory_are_refused_not_allocated() {
    let mut cfg = config();
    cfg.control_frame_queue = usize::MAX;
    assert!(Stack::new(cfg).is_err());
    let mut cfg = config();
    cfg.neighbor_cache = usize::MAX;
    assert!(Stack::new(cfg).is_err());
}

#[test]
fn accept_queue_is_bounded_by_the_connection_table() {
    let mut cfg = config();
    cfg.max_accept_queue = usize::MAX;
    let mut stack = stack_with(cfg);
    // No connection slot can wait in an accept queue longer than the table.
    let l = stack.listen(LISTEN_PORT, usize::MAX).unwrap();
    passive_open(
        &mut stack,
        l,
        Peer::new(40000, LISTEN_PORT),
        ms(0),
        1,
        mss_only(1460),
        65535,
    );
}
