//! SO_REUSEPORT in the core: several listeners on one port, each SYN to the member its
//! 4-tuple's hash picks (Linux's reuseport_select_sock), the SYN cookie's ACK to the same
//! member, and the AddrInUse rules of a shared port.

mod harness;

use harness::*;
use sluice_tcp::{Config, Error, ListenError, ListenerId, Stack, TcpState};
use sluice_wire::tcp::SeqNumber;

/// Client ports the tests connect from (40 distinct 4-tuples).
const CLIENTS: std::ops::Range<u16> = 40000..40040;

/// A full handshake from `port` (no cookie: the backlog has room); returns the one
/// listener of `ls` whose accept queue took the connection, checking it is established.
fn connect_from(stack: &mut Stack, port: u16, ls: &[ListenerId], now: u64) -> usize {
    let peer = Peer::new(port, LISTEN_PORT);
    let isn = SeqNumber(u32::from(port) * 1000);
    peer.send(stack, ms(now), peer.seg(SYN).seq(isn).opts(mss_only(1460)));
    let (synack, _) = peer.recv_one(stack, ms(now));
    assert_eq!(synack.flags, SYN | ACK, "port {port}");
    let ack = peer.seg(ACK).seq(isn + 1u32).ack(synack.seq + 1u32);
    peer.send(stack, ms(now), ack);
    peer.recv_nothing(stack, ms(now));
    accepted_by(stack, ls, port)
}

/// Which listener of `ls` has the connection from `port` ready; exactly one must.
fn accepted_by(stack: &mut Stack, ls: &[ListenerId], port: u16) -> usize {
    let mut got = Vec::new();
    for (i, &l) in ls.iter().enumerate() {
        match stack.accept(l) {
            Ok(id) => {
                assert_eq!(stack.state(id), Ok(TcpState::Established));
                let (_, remote) = stack.endpoints(id).unwrap();
                assert_eq!(remote.port(), port);
                got.push(i);
            }
            Err(e) => assert_eq!(e, Error::WouldBlock),
        }
    }
    assert_eq!(got.len(), 1, "port {port}: accepted by {got:?}");
    got[0]
}

#[test]
fn two_reuseport_listeners_share_a_port_and_both_get_connections() {
    let mut stack = stack();
    let a = stack.listen_reuseport(LISTEN_PORT, 64, None).unwrap();
    let b = stack.listen_reuseport(LISTEN_PORT, 64, None).unwrap();
    assert_ne!(a, b);
    let mut per = [0usize; 2];
    let mut picked = Vec::new();
    for port in CLIENTS {
        let i = connect_from(&mut stack, port, &[a, b], 0);
        per[i] += 1;
        picked.push((port, i));
    }
    assert_eq!(per[0] + per[1], CLIENTS.len());
    assert!(per[0] >= 5 && per[1] >= 5, "both members serve: {per:?}");

    // The pick is a function of the 4-tuple: a second stack with the same seed and the
    // same group sends each tuple to the same member.
    let mut again = stack_with(config());
    let a2 = again.listen_reuseport(LISTEN_PORT, 64, None).unwrap();
    let b2 = again.listen_reuseport(LISTEN_PORT, 64, None).unwrap();
    for &(port, i) in &picked {
        assert_eq!(
            connect_from(&mut again, port, &[a2, b2], 0),
            i,
            "port {port}"
        );
    }
}

#[test]
fn unlisten_of_one_member_sends_every_new_syn_to_the_other() {
    let mut stack = stack();
    let a = stack.listen_reuseport(LISTEN_PORT, 64, None).unwrap();
    let b = stack.listen_reuseport(LISTEN_PORT, 64, None).unwrap();
    let first = connect_from(&mut stack, 39000, &[a, b], 0);
    let kept = [a, b][first];
    let gone = [a, b][1 - first];
    stack.unlisten(gone).unwrap();
    assert_eq!(stack.accept(gone), Err(Error::InvalidHandle));
    for port in CLIENTS {
        assert_eq!(connect_from(&mut stack, port, &[kept], 1), 0, "port {port}");
    }
    // The last member's unlisten frees the port: a SYN is reset (RFC 9293 3.10.7.1).
    stack.unlisten(kept).unwrap();
    let peer = Peer::new(41000, LISTEN_PORT);
    peer.send(&mut stack, ms(2), peer.seg(SYN).seq(SeqNumber(5)));
    let (rst, _) = peer.recv_one(&mut stack, ms(2));
    assert!(rst.flags.contains(RST));
    assert!(
        stack.listen(LISTEN_PORT, 4).is_ok(),
        "the port is free again"
    );
}

#[test]
fn a_shared_port_refuses_listeners_without_reuseport_and_the_other_way_round() {
    let mut stack = stack();
    let plain = stack.listen(LISTEN_PORT, 4).unwrap();
    assert_eq!(stack.listen(LISTEN_PORT, 4), Err(ListenError::AddrInUse));
    assert_eq!(
        stack.listen_reuseport(LISTEN_PORT, 4, None),
        Err(ListenError::AddrInUse),
        "a reuseport listener may not join a port held without reuseport"
    );
    let shared = stack.listen_reuseport(81, 4, None).unwrap();
    assert_eq!(stack.listen_with(81, 4, None), Err(ListenError::AddrInUse));
    stack.unlisten(plain).unwrap();
    assert!(stack.listen_reuseport(LISTEN_PORT, 4, None).is_ok());
    stack.unlisten(shared).unwrap();
    assert!(stack.listen(81, 4).is_ok());
}

#[test]
fn listener_indexes_come_back_to_the_free_list() {
    // The harness allows 4 listeners.
    let mut stack = stack();
    let ls: Vec<ListenerId> = (0..4)
        .map(|_| stack.listen_reuseport(LISTEN_PORT, 4, None).unwrap())
        .collect();
    assert_eq!(
        stack.listen_reuseport(LISTEN_PORT, 4, None),
        Err(ListenError::NoResources)
    );
    assert_eq!(stack.listen(90, 4), Err(ListenError::NoResources));
    stack.unlisten(ls[2]).unwrap();
    let l = stack.listen(90, 4).unwrap();
    assert_eq!(l.port(), 90);
    assert_eq!(stack.listen(91, 4), Err(ListenError::NoResources));
}

/// A core whose listeners answer every SYN past their first with a cookie.
fn cookie_config() -> Config {
    let mut cfg = config();
    cfg.syn_backlog = 1;
    cfg
}

#[test]
fn acceltcp_4_1_a_cookie_ack_reaches_the_member_its_syn_picked() {
    // Where each tuple goes without cookies.
    let mut plain = stack_with(config());
    let pa = plain.listen_reuseport(LISTEN_PORT, 64, None).unwrap();
    let pb = plain.listen_reuseport(LISTEN_PORT, 64, None).unwrap();
    let expected: Vec<(u16, usize)> = CLIENTS
        .map(|port| (port, connect_from(&mut plain, port, &[pa, pb], 0)))
        .collect();

    let mut stack = stack_with(cookie_config());
    let a = stack.listen_reuseport(LISTEN_PORT, 64, None).unwrap();
    let b = stack.listen_reuseport(LISTEN_PORT, 64, None).unwrap();
    // Half-open entries from ports no test client uses fill both members' backlogs.
    for port in 50000..50016 {
        let peer = Peer::new(port, LISTEN_PORT);
        peer.send(&mut stack, ms(0), peer.seg(SYN).seq(SeqNumber(9)));
        let _ = peer.recv_all(&mut stack, ms(0));
    }
    let half_open = stack.connection_count();
    assert_eq!(
        half_open, 2,
        "one half-open entry a member; the rest got cookies"
    );
    for &(port, i) in &expected {
        let peer = Peer::new(port, LISTEN_PORT);
        let isn = SeqNumber(u32::from(port) * 1000);
        peer.send(
            &mut stack,
            ms(1),
            peer.seg(SYN).seq(isn).opts(mss_only(1460)),
        );
        let (synack, _) = peer.recv_one(&mut stack, ms(1));
        assert_eq!(synack.flags, SYN | ACK);
        let ack = peer.seg(ACK).seq(isn + 1u32).ack(synack.seq + 1u32);
        peer.send(&mut stack, ms(1), ack);
        peer.recv_nothing(&mut stack, ms(1));
        assert_eq!(accepted_by(&mut stack, &[a, b], port), i, "port {port}");
    }
    let c = stack.counters();
    assert_eq!(c.syn_cookies_accepted, CLIENTS.len() as u64);
    assert_eq!(c.syn_cookies_rejected, 0);
}
