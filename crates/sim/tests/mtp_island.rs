//! One bridged path (mtp.txt 4): two MTP hosts whose only path crosses a TCP-only island
//! between two bridging switches. Inside the island every frame is TCP (the MTP header rides
//! in a TCP option); the hosts exchange messages byte-exact both ways and still get the
//! pathlet feedback of the switch before the island.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use sluice_mtp::stack::{MtpStack, SendOptions, StackConfig};
use sluice_sim::mtp::{MtpDevice, Pathlet};
use sluice_sim::{Host, Instant, LinkConfig, Sim};
use sluice_wire::ethernet::EthernetAddress;

const A_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const B_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

struct Peer(MtpStack);

fn nanos(t: Instant) -> u64 {
    (t - Instant::ZERO).as_nanos() as u64
}

impl Host for Peer {
    fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        self.0.handle_frame(nanos(now), frame);
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.0.poll_transmit(nanos(now), buf)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.0
            .poll_timeout()
            .map(|t| Instant::ZERO + Duration::from_nanos(t))
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.0.handle_timeout(nanos(now));
    }
}

fn peer(mac: [u8; 6], ip: Ipv4Addr, other: (Ipv4Addr, [u8; 6])) -> Peer {
    let mut s = MtpStack::new(StackConfig::new(EthernetAddress(mac), ip)).unwrap();
    s.set_neighbor(other.0, EthernetAddress(other.1));
    Peer(s)
}

/// The IPv4 protocol of every frame in a nanosecond pcap.
fn protocols(pcap: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= pcap.len() {
        let len = u32::from_le_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &pcap[at + 16..at + 16 + len];
        out.push(frame[14 + 9]);
        at += 16 + len;
    }
    out
}

#[test]
fn mtp_crosses_a_tcp_island_between_two_bridges() {
    let mut sim: Sim<Peer> = Sim::new(3);
    let a = sim.add_host(peer(A_MAC, A_IP, (B_IP, B_MAC)));
    let b = sim.add_host(peer(B_MAC, B_IP, (A_IP, A_MAC)));
    let s1 = sim.add_static_switch();
    let s2 = sim.add_static_switch();
    let link = LinkConfig::new(10_000_000_000, Duration::from_micros(2));
    let la = sim.connect(a, s1, link.clone()).unwrap();
    let island = sim.connect(s1, s2, link.clone()).unwrap();
    let lb = sim.connect(s2, b, link).unwrap();
    sim.add_route(s1, B_MAC, &[island]).unwrap();
    sim.add_route(s1, A_MAC, &[la]).unwrap();
    sim.add_route(s2, A_MAC, &[island]).unwrap();
    sim.add_route(s2, B_MAC, &[lb]).unwrap();
    let p1 = sim.switch_port(s1, island).unwrap();
    let p2 = sim.switch_port(s2, island).unwrap();
    let dev1 = MtpDevice::new(0)
        .with_pathlet(p1, Pathlet::ecn(11, 64 * 1024))
        .with_tcp_island(p1);
    sim.set_mtp_device(s1, dev1).unwrap();
    sim.set_mtp_device(s2, MtpDevice::new(0).with_tcp_island(p2))
        .unwrap();
    sim.start_capture(island).unwrap();

    let (ea, eb) = {
        let ea = sim.host_mut(a).unwrap().0.bind(4000).unwrap();
        let eb = sim.host_mut(b).unwrap().0.bind(5000).unwrap();
        (ea, eb)
    };
    let msgs: Vec<Vec<u8>> = (0..20u32)
        .map(|i| {
            (0..(i as usize * 997 % 9000))
                .map(|j| (j as u32 ^ i) as u8)
                .collect()
        })
        .collect();
    for m in &msgs {
        let now = sim.now();
        sim.host_mut(a)
            .unwrap()
            .0
            .send_message(
                nanos(now),
                ea,
                SocketAddrV4::new(B_IP, 5000),
                m,
                SendOptions::default(),
            )
            .unwrap();
    }
    sim.run_for(Duration::from_millis(20));
    let now = sim.now();
    sim.host_mut(b)
        .unwrap()
        .0
        .send_message(
            nanos(now),
            eb,
            SocketAddrV4::new(A_IP, 4000),
            b"back",
            SendOptions::default(),
        )
        .unwrap();
    sim.run_for(Duration::from_millis(20));

    let hb = sim.host_mut(b).unwrap();
    let mut got = Vec::new();
    while let Some(m) = hb.0.recv_message(eb) {
        got.push(m.data);
    }
    got.sort();
    let mut want = msgs.clone();
    want.sort();
    assert_eq!(got, want, "every message byte-exact across the island");
    let ha = sim.host_mut(a).unwrap();
    assert_eq!(
        ha.0.recv_message(ea).map(|m| m.data),
        Some(b"back".to_vec())
    );
    assert!(
        ha.0.pathlets().iter().any(|(p, _)| p.pathlet == 11),
        "the sender learned the pathlet before the island"
    );

    let protos = protocols(&sim.take_capture(island).unwrap());
    assert!(protos.len() > 40, "{}", protos.len());
    assert!(
        protos.iter().all(|&p| p == 6),
        "only TCP inside the island: {protos:?}"
    );
    let (d1, d2) = (
        sim.mtp_device_stats(s1).unwrap(),
        sim.mtp_device_stats(s2).unwrap(),
    );
    assert!(d1.bridged_out > 0 && d2.bridged_in > 0, "{d1:?} {d2:?}");
    assert!(
        d2.bridged_out > 0 && d1.bridged_in > 0,
        "ACKs cross back: {d1:?} {d2:?}"
    );
    assert_eq!(d1.bridge_refused + d2.bridge_refused, 0);
}
