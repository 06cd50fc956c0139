//! Forged input: structured TCP segments aimed at the victims' 4-tuples (random flags,
//! options, sequence and acknowledgment numbers near the connection's own or anywhere,
//! payloads true to the stream or not), and fully arbitrary frames including ARP.

use std::net::Ipv4Addr;

use rand::seq::SliceRandom;
use rand::Rng;
use sluice_wire::arp::{ArpOperation, ArpRepr};
use sluice_wire::ethernet::{EtherType, EthernetRepr};
use sluice_wire::ipv4::Ecn;
use sluice_wire::EthernetAddress;

use crate::case::{trace, Case};
use crate::config::SERVICE_PORTS;
use crate::flows::C2S;
use crate::frames::{build_segment, fix_checksums, SegmentSpec, ETH_LEN};
use crate::net::{Packet, Side};
use crate::options::{plausible_options, random_options, Anchors};

/// Flag combinations worth forging, weighted towards the interesting ones.
const FLAGS: [u8; 12] = [
    0x02, // SYN
    0x12, // SYN ACK
    0x04, // RST
    0x14, // RST ACK
    0x11, // FIN ACK
    0x10, // ACK
    0x10, // ACK
    0x18, // PSH ACK
    0x30, // URG ACK
    0x01, // FIN
    0x00, // none
    0x03, // SYN FIN
];

/// Where the victim's sequence spaces are, as far as the case knows.
#[derive(Clone, Copy, Default)]
struct Target {
    /// What the victim expects next from its peer.
    rcv_nxt: u32,
    /// Its oldest unacknowledged and its highest sent sequence numbers.
    snd_una: u32,
    snd_max: u32,
    /// A window-sized span beyond rcv_nxt.
    window: u32,
    /// The latest TSval from the peer.
    ts: u32,
}

impl Case {
    fn near<R: Rng>(rng: &mut R, base: u32, span: u32) -> u32 {
        base.wrapping_add(rng.gen_range(0..=2 * span))
            .wrapping_sub(span)
    }

    /// Picks the victim's tuple and what is known of its sequence spaces.
    fn pick_target(&mut self, to: Side) -> (u16, u16, Option<(usize, usize)>, Target) {
        let mut t = Target {
            window: 65_535,
            ..Default::default()
        };
        let roll = self.rng.gen_range(0..10);
        if roll < 7 && !self.flows.list.is_empty() {
            let fi = self.rng.gen_range(0..self.flows.list.len());
            let f = &self.flows.list[fi];
            let (local, remote) = f.ports_at(to);
            let d = f.dir_into(to);
            if let Some((seq, ack, ts)) = f.last[d] {
                t.rcv_nxt = seq;
                t.snd_una = ack;
                t.snd_max = ack;
                t.ts = ts;
            }
            let handle = if to == f.client {
                f.client_handle
            } else {
                f.server_handle
            };
            if let Some(info) = handle.and_then(|h| {
                let hd = &self.handles[h];
                self.stacks[to.index()].info(hd.id).ok()
            }) {
                t.rcv_nxt = info.rcv_nxt.0;
                t.snd_una = info.snd_una.0;
                t.snd_max = info.snd_max.0;
                t.window = self.stacks[to.index()].config().rx_buffer as u32;
            }
            return (local, remote, Some((fi, d)), t);
        }
        let local = if roll < 9 {
            *SERVICE_PORTS.choose(&mut self.rng).unwrap_or(&80)
        } else {
            self.rng.gen()
        };
        let (lo, hi) = crate::config::ephemeral_ports(to.other());
        let remote = if self.rng.gen() {
            self.rng.gen_range(lo..=hi)
        } else {
            self.rng.gen()
        };
        t.rcv_nxt = self.rng.gen();
        t.snd_una = self.rng.gen();
        t.snd_max = t.snd_una;
        (local, remote, None, t)
    }

    /// A structured TCP segment for a victim's 4-tuple.
    pub(crate) fn inject_segment(&mut self) {
        let to = if self.rng.gen() { Side::A } else { Side::B };
        let (local, remote, flow, t) = self.pick_target(to);
        let rng = &mut self.rng;
        let seq = match rng.gen_range(0..8) {
            0 => rng.gen(),
            1 => t.rcv_nxt,
            2 => t.rcv_nxt.wrapping_add(t.window),
            3 => Self::near(rng, t.rcv_nxt.wrapping_add(t.window), 4),
            _ => Self::near(rng, t.rcv_nxt, 3000),
        };
        let ack = match rng.gen_range(0..8) {
            0 => rng.gen(),
            1 => t.snd_una,
            2 => t.snd_max,
            3 => t.snd_max.wrapping_add(1),
            4 => t.snd_una.wrapping_sub(rng.gen_range(1..100_000)),
            _ => Self::near(rng, t.snd_una, 3000),
        };
        let anchors = Anchors {
            seq: t.snd_una,
            ts: t.ts,
        };
        let options = match rng.gen_range(0..5) {
            0 => Vec::new(),
            1 | 2 => plausible_options(rng, &anchors),
            _ => random_options(rng, &anchors),
        };
        let flags = if rng.gen_bool(0.15) {
            rng.gen()
        } else {
            *FLAGS.choose(rng).unwrap_or(&0x10)
        };
        let window = match rng.gen_range(0..4) {
            0 => 0,
            1 => u16::MAX,
            _ => rng.gen(),
        };
        let src_ip = match rng.gen_range(0..10) {
            0 => Ipv4Addr::from(rng.gen::<u32>()),
            1 => to.ip(),
            _ => to.other().ip(),
        };
        let (seq, payload) = self.forged_payload(flow, seq);
        let rng = &mut self.rng;
        let spec = SegmentSpec {
            src_mac: if rng.gen_bool(0.95) {
                to.other().mac()
            } else {
                EthernetAddress(rng.gen())
            },
            dst_mac: to.mac(),
            src_ip,
            dst_ip: to.ip(),
            ecn: if rng.gen_bool(0.1) {
                Ecn::Ce
            } else {
                Ecn::NotEct
            },
            src_port: remote,
            dst_port: local,
            seq,
            ack,
            flags,
            window,
            urgent: if flags & 0x20 != 0 { rng.gen() } else { 0 },
            options,
            payload,
        };
        let bytes = build_segment(&spec);
        trace!(
            self,
            "inject to {to:?} {local}<-{remote} flags {flags:#04x} seq {seq} ack {ack} len {}",
            spec.payload.len()
        );
        self.forge(to, bytes);
    }

    /// No payload, random bytes, or a slice of the flow's own stream at its true sequence
    /// number (which keeps the flow checkable while exercising overlap and duplicate paths).
    fn forged_payload(&mut self, flow: Option<(usize, usize)>, seq: u32) -> (u32, Vec<u8>) {
        match self.rng.gen_range(0..4) {
            0 | 1 => (seq, Vec::new()),
            2 => {
                let len = self.rng.gen_range(1..1600);
                (seq, (0..len).map(|_| self.rng.gen()).collect())
            }
            _ => {
                let Some((fi, d)) = flow else {
                    return (seq, Vec::new());
                };
                let f = &self.flows.list[fi];
                let iss = if d == C2S {
                    Some(f.client_iss)
                } else {
                    f.server_iss
                };
                let dir = &f.dirs[d];
                let (Some(iss), true) = (iss, dir.written > 0) else {
                    return (seq, Vec::new());
                };
                let offset = self.rng.gen_range(0..dir.written);
                let len = (dir.written - offset).min(self.rng.gen_range(1..1600)) as usize;
                let mut bytes = vec![0u8; len];
                sluice_apps::pattern_fill(dir.seed, offset, &mut bytes);
                (iss.wrapping_add(1).wrapping_add(offset as u32), bytes)
            }
        }
    }

    /// Delivers a forged frame now, or leaves it on the wire for later.
    fn forge(&mut self, to: Side, bytes: Vec<u8>) {
        let p = Packet {
            to,
            bytes,
            pristine: false,
        };
        if self.rng.gen_bool(0.8) {
            self.deliver(to, vec![p]);
        } else {
            self.wire.push(p);
        }
    }

    /// Arbitrary bytes, a valid Ethernet or IPv4 header in front of junk, or ARP.
    pub(crate) fn inject_garbage(&mut self) {
        let to = if self.rng.gen() { Side::A } else { Side::B };
        let rng = &mut self.rng;
        let len = rng.gen_range(0..200);
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        let kind = rng.gen_range(0..4);
        match kind {
            0 => {}
            1 | 2 if bytes.len() >= ETH_LEN + 20 => {
                let eth = EthernetRepr {
                    dst: to.mac(),
                    src: to.other().mac(),
                    ethertype: EtherType::Ipv4,
                    vlan: None,
                };
                let _ = eth.emit(&mut bytes);
                if kind == 2 {
                    // IPv4 to the victim, protocol TCP, plausible lengths; the TCP header
                    // and payload are junk with a good checksum.
                    let total = (bytes.len() - ETH_LEN) as u16;
                    bytes[ETH_LEN] = 0x45;
                    bytes[ETH_LEN + 2..ETH_LEN + 4].copy_from_slice(&total.to_be_bytes());
                    bytes[ETH_LEN + 6] &= 0x40; // no fragment bits except DF
                    bytes[ETH_LEN + 7] = 0;
                    bytes[ETH_LEN + 9] = 6;
                    bytes[ETH_LEN + 12..ETH_LEN + 16].copy_from_slice(&to.other().ip().octets());
                    bytes[ETH_LEN + 16..ETH_LEN + 20].copy_from_slice(&to.ip().octets());
                    fix_checksums(&mut bytes);
                }
            }
            _ => {
                let arp = ArpRepr {
                    operation: match rng.gen_range(0..3) {
                        0 => ArpOperation::Request,
                        1 => ArpOperation::Reply,
                        _ => ArpOperation::Unknown(rng.gen()),
                    },
                    source_mac: EthernetAddress(rng.gen()),
                    source_ip: if rng.gen() {
                        to.other().ip()
                    } else {
                        Ipv4Addr::new(10, 0, 0, rng.gen())
                    },
                    target_mac: EthernetAddress(rng.gen()),
                    target_ip: if rng.gen_bool(0.8) {
                        to.ip()
                    } else {
                        Ipv4Addr::from(rng.gen::<u32>())
                    },
                };
                let eth = EthernetRepr {
                    dst: EthernetAddress::BROADCAST,
                    src: arp.source_mac,
                    ethertype: EtherType::Arp,
                    vlan: None,
                };
                bytes = vec![0u8; ETH_LEN + sluice_wire::arp::PACKET_LEN];
                let _ = eth.emit(&mut bytes);
                let _ = arp.emit(&mut bytes[ETH_LEN..]);
            }
        }
        trace!(self, "garbage ({kind}) of {} bytes to {to:?}", bytes.len());
        self.forge(to, bytes);
    }
}
