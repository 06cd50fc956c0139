//! MTP devices in the simulator: two hosts that emit MTP frames, a static switch with two
//! paths to the receiver and the message balancer, pathlet feedback and path exclusion.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::Ipv4Addr;
use std::time::Duration;

use sluice_mtp::wire::{Encap, FeedbackKind, List, MtpFrameRepr, MtpRepr, PathletTc, FLAG_DATA};
use sluice_sim::mtp::{Balancer, MtpDevice, Pathlet};
use sluice_sim::{Host, Instant, LinkConfig, Sim};
use sluice_wire::ethernet::EthernetAddress;
use sluice_wire::ipv4::Ecn;

const GBPS: u64 = 1_000_000_000;
const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
const B: [u8; 6] = [2, 0, 0, 0, 0, 2];
const PAYLOAD: usize = 1000;

/// A host that sends the frames it was given at once and keeps what it receives.
#[derive(Default)]
struct Peer {
    out: VecDeque<Vec<u8>>,
    got: Vec<Vec<u8>>,
}

impl Host for Peer {
    fn handle_frame(&mut self, _now: Instant, frame: &[u8]) {
        self.got.push(frame.to_vec());
    }
    fn poll_transmit(&mut self, _now: Instant, buf: &mut [u8]) -> Option<usize> {
        let f = self.out.pop_front()?;
        buf.get_mut(..f.len())?.copy_from_slice(&f);
        Some(f.len())
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn handle_timeout(&mut self, _now: Instant) {}
}

/// The frames of message `msg` (`pkts` packets) from A to B, excluding `exclude`.
fn message(msg: u32, pkts: u16, exclude: &[PathletTc]) -> Vec<Vec<u8>> {
    (0..pkts)
        .map(|pkt| {
            let mut repr = MtpFrameRepr::new(
                (EthernetAddress(A), Ipv4Addr::new(10, 0, 0, 1)),
                (EthernetAddress(B), Ipv4Addr::new(10, 0, 0, 2)),
                Encap::Udp { src_port: 7000 },
                MtpRepr {
                    src_port: 4000,
                    dst_port: 5000,
                    flags: FLAG_DATA,
                    tc: 1,
                    msg_id: msg,
                    msg_len: u32::from(pkts) * PAYLOAD as u32,
                    msg_pkts: pkts,
                    pkt_num: pkt,
                    pkt_offset: u32::from(pkt) * PAYLOAD as u32,
                    pkt_len: PAYLOAD as u16,
                    exclude: List::Items(exclude),
                    feedback_slots: 4,
                    ..MtpRepr::default()
                },
            );
            // ECN-capable, so the links' marking applies as to the stack's traffic.
            repr.ip.ecn = Ecn::Ect0;
            let mut buf = vec![0u8; repr.frame_len(PAYLOAD).unwrap()];
            repr.emit(&mut buf, &[0x5a; PAYLOAD]).unwrap();
            buf
        })
        .collect()
}

#[test]
fn the_message_balancer_keeps_messages_whole_spreads_them_and_honours_exclusion() {
    let mut sim: Sim<Peer> = Sim::new(1);
    let a = sim.add_host(Peer::default());
    let b = sim.add_host(Peer::default());
    let s1 = sim.add_static_switch();
    let s2 = sim.add_static_switch();
    let fast = LinkConfig::new(100 * GBPS, Duration::from_micros(1));
    let slow = LinkConfig::new(10 * GBPS, Duration::from_micros(1));
    let la = sim.connect(a, s1, fast.clone()).unwrap();
    let up1 = sim.connect(s1, s2, slow.clone()).unwrap();
    let up2 = sim.connect(s1, s2, slow).unwrap();
    let lb = sim.connect(s2, b, fast).unwrap();
    sim.add_route(s1, B, &[up1, up2]).unwrap();
    sim.add_route(s1, A, &[la]).unwrap();
    sim.add_route(s2, B, &[lb]).unwrap();
    sim.add_route(s2, A, &[up1]).unwrap();
    let (p1, p2) = (
        sim.switch_port(s1, up1).unwrap(),
        sim.switch_port(s1, up2).unwrap(),
    );
    let dev = MtpDevice::new(0)
        .with_pathlet(p1, Pathlet::ecn(1, 8 * 1024))
        .with_pathlet(p2, Pathlet::ecn(2, 8 * 1024))
        .with_balancer(Balancer::Message);
    sim.set_mtp_device(s1, dev).unwrap();
    // Eight messages of 16 packets; messages 6 and 7 exclude pathlet 1 (any TC).
    let excl = [PathletTc {
        pathlet: 1,
        tc: 255,
    }];
    let host = sim.host_mut(a).unwrap();
    for msg in 0..8u32 {
        let exclude: &[PathletTc] = if msg >= 6 { &excl } else { &[] };
        host.out.extend(message(msg, 16, exclude));
    }
    sim.run_for(Duration::from_millis(1));

    let got = &sim.host(b).unwrap().got;
    assert_eq!(got.len(), 8 * 16, "every packet arrives");
    let mut paths: BTreeMap<u32, BTreeSet<u16>> = BTreeMap::new();
    let mut congested = 0;
    for f in got {
        let (p, payload) = MtpFrameRepr::parse(f, true).expect("checksums valid after feedback");
        assert_eq!(payload.len(), PAYLOAD);
        let fb: Vec<_> = p.mtp.feedback.iter().collect();
        assert_eq!(fb.len(), 1, "one device on the path appends one TLV");
        assert_eq!(fb[0].kind, FeedbackKind::Ecn);
        assert_eq!(fb[0].at.tc, 1);
        congested += fb[0].value;
        paths
            .entry(p.mtp.msg_id)
            .or_default()
            .insert(fb[0].at.pathlet);
    }
    // Each message took one path; both paths were used; exclusion honoured.
    assert!(paths.values().all(|p| p.len() == 1), "{paths:?}");
    let used: BTreeSet<u16> = paths.values().flatten().copied().collect();
    assert_eq!(used, BTreeSet::from([1, 2]));
    assert_eq!(paths[&6], BTreeSet::from([2]));
    assert_eq!(paths[&7], BTreeSet::from([2]));
    // The two 10 Gbit/s uplinks queue the 100 Gbit/s burst: some packets saw a queue above K.
    assert!(congested > 0);
    let stats = sim.mtp_device_stats(s1).unwrap();
    assert_eq!((stats.pins, stats.pin_hits), (8, 8 * 15));
    assert_eq!(stats.feedback_appended, 8 * 16);
    assert!(stats.exclusions_honoured >= 1);
    // Switches without a device still have none; a host is not a switch.
    assert!(sim.mtp_device_stats(s2).is_none());
    assert!(sim.set_mtp_device(a, MtpDevice::new(1)).is_err());
}
