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

#[test]
fn tso_payload_must_be_off_or_between_the_mss_and_the_ipv4_limit() {
    for (tso, ok) in [
        (0, true),
        (1000, false),
        (1460, true),
        (65_455, true),
        (65_456, false),
        (u32::MAX, false),
    ] {
        let mut cfg = config();
        cfg.tso_max_payload = tso;
        assert_eq!(Stack::new(cfg).is_ok(), ok, "tso_max_payload {tso}");
    }
}

#[test]
fn poll_transmit_offload_with_tso_off_sends_what_poll_transmit_would() {
    let mut cfg = config();
    cfg.tx_checksum_offload = false;
    let mut stack = stack_with(cfg);
    let c = established(&mut stack, ms(0));
    stack.send(c.id, &pattern(5000, 3)).unwrap();
    let mut buf = vec![0u8; 65_536];
    let t = stack.poll_transmit_offload(ms(0), &mut buf).unwrap();
    assert_eq!((t.gso_size, t.csum_partial), (0, false));
    assert!(t.len <= 1514, "one MSS-sized frame, got {}", t.len);
}

#[test]
fn a_flow_group_member_opens_only_connections_steered_back_to_it() {
    use sluice_tcp::FlowGroupMember;
    use sluice_wire::flow_group::FlowGroups;
    let groups = FlowGroups {
        count: 3,
        key: 0x5eed,
    };
    for index in 0..3 {
        let mut cfg = config();
        cfg.flow_group = Some(FlowGroupMember { groups, index });
        let mut stack = stack_with(cfg);
        for i in 0..50u16 {
            let peer = std::net::Ipv4Addr::new(10, 0, 0, 2 + (i % 3) as u8);
            let id = stack.connect(ms(0), peer, 80 + i).unwrap();
            let (local, remote) = stack.endpoints(id).unwrap();
            assert_eq!(
                groups.group_of((*local.ip(), local.port()), (*remote.ip(), remote.port())),
                index,
                "{local} -> {remote}"
            );
        }
    }
    // A group beyond the count is refused.
    let mut cfg = config();
    cfg.flow_group = Some(FlowGroupMember { groups, index: 3 });
    assert!(Stack::new(cfg).is_err());
}
