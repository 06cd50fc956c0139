//! Initial sequence numbers: RFC 9293 3.4.1 MUST-8 (a clock-driven ISN generator) and SHLD-1
//! (RFC 6528: ISN = M + F(4-tuple, secret)).

mod harness;

use std::collections::HashSet;
use std::net::Ipv4Addr;

use harness::*;
use sluice_tcp::{Instant, Stack};
use sluice_wire::tcp::SeqNumber;

/// The ISN the stack picks for a passive open from `peer` at `now` (the half-open
/// connection is then reset away).
fn passive_isn(stack: &mut Stack, peer: Peer, now: Instant) -> SeqNumber {
    peer.send(stack, now, peer.seg(SYN).seq(SeqNumber(5000)));
    let (synack, _) = peer.recv_one(stack, now);
    assert_eq!(synack.flags, SYN | ACK);
    peer.send(stack, now, peer.seg(RST).seq(SeqNumber(5001)));
    assert_eq!(stack.connection_count(), 0);
    synack.seq
}

#[test]
fn rfc9293_must_8_shld_1_isns_differ_per_four_tuple() {
    let mut stack = stack();
    stack.listen(LISTEN_PORT, 16).unwrap();
    stack.listen(LISTEN_PORT + 1, 16).unwrap();
    let mut seen = HashSet::new();
    // Different peer ports, our ports and peer addresses, all at the same instant.
    for port in 40000..40016 {
        assert!(seen.insert(passive_isn(&mut stack, Peer::new(port, LISTEN_PORT), ms(0))));
    }
    assert!(seen.insert(passive_isn(
        &mut stack,
        Peer::new(40000, LISTEN_PORT + 1),
        ms(0)
    )));
    let other_host = Peer {
        ip: Ipv4Addr::new(10, 0, 0, 3),
        ..Peer::new(40000, LISTEN_PORT)
    };
    assert!(seen.insert(passive_isn(&mut stack, other_host, ms(0))));
    // Active opens too.
    for remote_port in [9000, 9001, 9002] {
        stack.connect(ms(0), PEER_IP, remote_port).unwrap();
        let (syn, _) = Peer::new(remote_port, 0).recv_one(&mut stack, ms(0));
        assert!(seen.insert(syn.seq), "ISN {} repeated", syn.seq);
    }
    // Not only distinct but spread over the sequence space, as a keyed hash spreads them.
    let mut isns: Vec<u32> = seen.iter().map(|s| s.0).collect();
    isns.sort_unstable();
    let close = isns.windows(2).filter(|w| w[1] - w[0] < 1_000).count();
    assert_eq!(close, 0, "ISNs cluster: {isns:?}");
}

#[test]
fn rfc9293_must_8_isn_advances_with_the_clock_for_the_same_tuple() {
    let mut stack = stack();
    stack.listen(LISTEN_PORT, 16).unwrap();
    let peer = Peer::new(40000, LISTEN_PORT);
    let t0 = passive_isn(&mut stack, peer, ms(0));
    // RFC 9293 3.4.1: the clock part ticks every 4 microseconds.
    assert_eq!(
        passive_isn(&mut stack, peer, ms(0)),
        t0,
        "same tuple, same instant"
    );
    assert_eq!(passive_isn(&mut stack, peer, ms(4)).diff(t0), 1000);
    assert_eq!(passive_isn(&mut stack, peer, ms(1000)).diff(t0), 250_000);
    assert_eq!(
        passive_isn(&mut stack, peer, Instant::from_micros(1_000_004)).diff(t0),
        250_001
    );
}

#[test]
fn rfc9293_shld_1_isn_depends_on_the_secret_seed() {
    let isn_with_seed = |seed: u64| {
        let mut cfg = config();
        cfg.seed = seed;
        let mut stack = stack_with(cfg);
        stack.listen(LISTEN_PORT, 16).unwrap();
        passive_isn(&mut stack, Peer::new(40000, LISTEN_PORT), ms(0))
    };
    let a = isn_with_seed(1);
    assert_eq!(isn_with_seed(1), a, "deterministic for a seed");
    assert_ne!(isn_with_seed(2), a, "unpredictable without the secret");
}

#[test]
fn rfc6528_a_restarted_stack_continues_its_isn_and_timestamp_clocks_from_its_epoch() {
    // The same host (same secrets) started again 10 s later, as the engine does with
    // Config::clock_epoch = time since boot: its SYN for the same tuple carries an ISN
    // 10 s of 4 us ticks higher and a TSval 10,000 ms higher, so a peer still in TIME-WAIT
    // with the old incarnation takes it (RFC 6191).
    let syn = |epoch_s: u64| {
        let mut cfg = config();
        cfg.ephemeral_ports = (40000, 40000);
        cfg.clock_epoch = std::time::Duration::from_secs(epoch_s);
        let mut s = stack_with(cfg);
        s.connect(ms(0), PEER_IP, 80).unwrap();
        let (h, _) = Peer::new(80, 40000).recv_one(&mut s, ms(0));
        (h.seq, h.options.timestamp.unwrap().0)
    };
    let (isn1, ts1) = syn(100);
    let (isn2, ts2) = syn(110);
    assert_eq!(isn2.0.wrapping_sub(isn1.0), 10_000_000 / 4);
    assert_eq!(ts2.wrapping_sub(ts1), 10_000);
}
