//! Flow groups: which of `count` pipelines owns a flow, by a keyed hash of its IPv4 4-tuple
//! (flextoe.txt 3.1: "each pipeline handles a fixed flow-group, determined by a hash on the
//! flow's 4-tuple"; RSS in software). The hash is symmetric, so a frame and its reply map
//! to the same group whichever end computes it, and keyed, so that a peer that does not
//! know the key cannot choose ports that crowd every flow into one group.
//!
//! No-panic contract: [`frame_flow`] reads any byte slice and returns None for what it
//! cannot place; nothing here allocates.

use std::net::Ipv4Addr;

use crate::ethernet::{EtherType, EthernetRepr};
use crate::ipv4::PROTOCOL_TCP;

/// IP protocol number of UDP.
const PROTOCOL_UDP: u8 = 17;

/// How flows are spread over groups: how many groups and the hash key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowGroups {
    /// Number of groups, at least 1.
    pub count: u16,
    /// Key of the hash (from the engine's seed).
    pub key: u64,
}

/// A flow's endpoints as a frame carries them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowEndpoints {
    /// Source address and port.
    pub src: (Ipv4Addr, u16),
    /// Destination address and port.
    pub dst: (Ipv4Addr, u16),
}

impl FlowGroups {
    /// One group: everything in it.
    pub const ONE: FlowGroups = FlowGroups { count: 1, key: 0 };

    /// The group of the flow between `a` and `b`, in either order.
    #[inline]
    pub fn group_of(&self, a: (Ipv4Addr, u16), b: (Ipv4Addr, u16)) -> u16 {
        if self.count <= 1 {
            return 0;
        }
        let hash = self.hash(a, b);
        // Multiply-shift maps the 32-bit hash onto 0..count without a division.
        ((u64::from(hash) * u64::from(self.count)) >> 32) as u16
    }

    /// The group of a frame's flow, if it is IPv4 TCP or UDP and not a fragment.
    #[inline]
    pub fn group_of_frame(&self, frame: &[u8]) -> Option<u16> {
        frame_flow(frame).map(|f| self.group_of(f.src, f.dst))
    }

    /// The keyed symmetric hash of the flow between `a` and `b`.
    pub fn hash(&self, a: (Ipv4Addr, u16), b: (Ipv4Addr, u16)) -> u32 {
        let pack = |(ip, port): (Ipv4Addr, u16)| (u64::from(u32::from(ip)) << 16) | port as u64;
        let (x, y) = (pack(a), pack(b));
        let (lo, hi) = if x <= y { (x, y) } else { (y, x) };
        // Two rounds of a 64-bit finalizer (MurmurHash3's fmix64) over the key and both
        // endpoints: every input bit reaches every output bit.
        let mut h = fmix64(self.key ^ lo);
        h = fmix64(h ^ hi.rotate_left(23));
        (h >> 32) as u32 ^ h as u32
    }
}

/// MurmurHash3's 64-bit finalizer.
#[inline]
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// The endpoints of an Ethernet (optionally 802.1Q-tagged) IPv4 TCP or UDP frame; None for
/// ARP, other protocols, fragments after the first (no ports) and anything malformed.
pub fn frame_flow(frame: &[u8]) -> Option<FlowEndpoints> {
    let (eth, payload) = EthernetRepr::parse(frame).ok()?;
    if eth.ethertype != EtherType::Ipv4 {
        return None;
    }
    let version_ihl = *payload.first()?;
    if version_ihl >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(version_ihl & 0x0f) * 4;
    if ihl < 20 {
        return None;
    }
    let protocol = *payload.get(9)?;
    if protocol != PROTOCOL_TCP && protocol != PROTOCOL_UDP {
        return None;
    }
    // A later fragment has no transport header: it has no flow here.
    let frag = u16::from_be_bytes([*payload.get(6)?, *payload.get(7)?]);
    if frag & 0x1fff != 0 {
        return None;
    }
    let ip = |at: usize| -> Option<Ipv4Addr> {
        let b = payload.get(at..at + 4)?;
        Some(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
    };
    let ports = payload.get(ihl..ihl + 4)?;
    Some(FlowEndpoints {
        src: (ip(12)?, u16::from_be_bytes([ports[0], ports[1]])),
        dst: (ip(16)?, u16::from_be_bytes([ports[2], ports[3]])),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp_frame(src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16), vlan: bool) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[9] = PROTOCOL_TCP;
        ip[12..16].copy_from_slice(&src.0.octets());
        ip[16..20].copy_from_slice(&dst.0.octets());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&src.1.to_be_bytes());
        f.extend_from_slice(&dst.1.to_be_bytes());
        f.extend_from_slice(&[0u8; 16]);
        f
    }

    const A: (Ipv4Addr, u16) = (Ipv4Addr::new(10, 0, 0, 1), 7);
    const B: (Ipv4Addr, u16) = (Ipv4Addr::new(10, 0, 0, 2), 40000);

    #[test]
    fn a_frame_and_its_reply_share_a_group() {
        let g = FlowGroups { count: 4, key: 99 };
        let there = g.group_of_frame(&tcp_frame(A, B, false)).unwrap();
        let back = g.group_of_frame(&tcp_frame(B, A, true)).unwrap();
        assert_eq!(there, back);
        assert_eq!(there, g.group_of(A, B));
        assert_eq!(there, g.group_of(B, A));
    }

    #[test]
    fn flows_spread_over_every_group_about_evenly() {
        let g = FlowGroups { count: 4, key: 7 };
        let mut seen = [0u32; 4];
        for port in 32768..(32768 + 4000) {
            seen[usize::from(g.group_of(A, (B.0, port)))] += 1;
        }
        for n in seen {
            assert!((800..1200).contains(&n), "{seen:?}");
        }
    }

    #[test]
    fn the_key_changes_the_spread() {
        let (g1, g2) = (
            FlowGroups { count: 8, key: 1 },
            FlowGroups { count: 8, key: 2 },
        );
        let differ = (40000..40100)
            .filter(|&p| g1.group_of(A, (B.0, p)) != g2.group_of(A, (B.0, p)))
            .count();
        assert!(differ > 50, "{differ}");
    }

    #[test]
    fn what_has_no_ports_has_no_group() {
        let g = FlowGroups { count: 2, key: 0 };
        let mut later_fragment = tcp_frame(A, B, false);
        later_fragment[14 + 7] = 1;
        assert_eq!(g.group_of_frame(&later_fragment), None);
        let mut arp = tcp_frame(A, B, false);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(g.group_of_frame(&arp), None);
        let full = tcp_frame(A, B, false);
        for len in 0..full.len() {
            // Truncations never panic; a frame cut inside the ports has no group.
            let r = g.group_of_frame(&full[..len]);
            assert_eq!(r.is_some(), len >= 14 + 24, "{len}");
        }
        assert_eq!(FlowGroups::ONE.group_of_frame(&full), Some(0));
    }
}
