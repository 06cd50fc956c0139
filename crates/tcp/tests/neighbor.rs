//! Neighbor lookup for the other transports on the device (the RDMA transport's peers):
//! `Stack::neighbor` and `Stack::resolve_neighbor`, whose ARP requests are rate-limited
//! (RFC 1122 2.3.2.1).

mod harness;

use std::net::Ipv4Addr;

use harness::*;
use sluice_wire::arp::{ArpOperation, ArpRepr};
use sluice_wire::ethernet::{EtherType, EthernetRepr};
use sluice_wire::EthernetAddress;

const OTHER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 9);
const OTHER_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x09]);

/// The ARP requests the stack sends at `now`, by target.
fn arp_requests(stack: &mut sluice_tcp::Stack, now: sluice_tcp::Instant) -> Vec<Ipv4Addr> {
    let mut buf = vec![0u8; 2048];
    let mut out = Vec::new();
    while let Some(n) = stack.poll_transmit(now, &mut buf) {
        let (eth, l3) = EthernetRepr::parse(&buf[..n]).unwrap();
        assert_eq!(eth.ethertype, EtherType::Arp);
        assert_eq!(eth.dst, EthernetAddress::BROADCAST);
        let arp = ArpRepr::parse(l3).unwrap();
        assert_eq!(arp.operation, ArpOperation::Request);
        assert_eq!(arp.source_ip, OUR_IP);
        out.push(arp.target_ip);
    }
    out
}

fn reply_from(stack: &mut sluice_tcp::Stack, now: sluice_tcp::Instant, ip: Ipv4Addr) {
    let mut f = vec![0u8; 14 + 28];
    EthernetRepr {
        dst: OUR_MAC,
        src: OTHER_MAC,
        ethertype: EtherType::Arp,
        vlan: None,
    }
    .emit(&mut f)
    .unwrap();
    ArpRepr {
        operation: ArpOperation::Reply,
        source_mac: OTHER_MAC,
        source_ip: ip,
        target_mac: OUR_MAC,
        target_ip: OUR_IP,
    }
    .emit(&mut f[14..])
    .unwrap();
    stack.handle_frame(now, &f);
}

#[test]
fn neighbor_gives_static_and_learned_entries_only() {
    let mut stack = stack();
    assert_eq!(stack.neighbor(PEER_IP), Some(PEER_MAC));
    assert_eq!(stack.neighbor(OTHER_IP), None);
    reply_from(&mut stack, ms(1), OTHER_IP);
    assert_eq!(stack.neighbor(OTHER_IP), Some(OTHER_MAC));
}

#[test]
fn rfc1122_2_3_2_1_resolve_neighbor_asks_at_most_once_a_second_per_target() {
    let mut stack = stack();
    let before = stack.counters().arp_requests;
    assert!(stack.resolve_neighbor(OTHER_IP, ms(0)));
    assert_eq!(arp_requests(&mut stack, ms(0)), [OTHER_IP]);
    // Asked again within the second: nothing goes out.
    assert!(!stack.resolve_neighbor(OTHER_IP, ms(500)));
    assert!(arp_requests(&mut stack, ms(500)).is_empty());
    // Another target is not held back by the first.
    let third = Ipv4Addr::new(10, 0, 0, 10);
    assert!(stack.resolve_neighbor(third, ms(600)));
    assert_eq!(arp_requests(&mut stack, ms(600)), [third]);
    // A second later the first may be asked again.
    assert!(stack.resolve_neighbor(OTHER_IP, ms(1000)));
    assert_eq!(arp_requests(&mut stack, ms(1000)), [OTHER_IP]);
    assert_eq!(stack.counters().arp_requests, before + 3);
    // Broadcast and unspecified addresses are never asked for.
    assert!(!stack.resolve_neighbor(Ipv4Addr::BROADCAST, ms(3000)));
    assert!(!stack.resolve_neighbor(Ipv4Addr::UNSPECIFIED, ms(3000)));
    assert!(arp_requests(&mut stack, ms(3000)).is_empty());
    // The answer is learned.
    reply_from(&mut stack, ms(3001), OTHER_IP);
    assert_eq!(stack.neighbor(OTHER_IP), Some(OTHER_MAC));
}

#[test]
fn many_targets_each_get_their_request_and_the_memory_stays_bounded() {
    let mut stack = stack();
    for i in 0..40u8 {
        let ip = Ipv4Addr::new(10, 0, 1, i);
        assert!(stack.resolve_neighbor(ip, ms(u64::from(i))));
        assert_eq!(arp_requests(&mut stack, ms(u64::from(i))), [ip]);
    }
}
