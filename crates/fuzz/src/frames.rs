//! Frame surgery: finding the headers in a raw frame, recomputing the IPv4 and TCP checksums
//! after a mutation (so that mutants get past checksum verification and reach the deep
//! logic), parsing a frame exactly as the core's pre-processor does, and building TCP
//! segments with arbitrary, even malformed, options.

use std::net::Ipv4Addr;

use sluice_wire::checksum;
use sluice_wire::ethernet::{EtherType, EthernetRepr};
use sluice_wire::ipv4::{Ecn, Ipv4Repr, PROTOCOL_TCP};
use sluice_wire::tcp::{self, ChecksumCheck, TcpFlags, TcpHeader};
use sluice_wire::EthernetAddress;

/// Ethernet header length without a VLAN tag.
pub const ETH_LEN: usize = 14;
/// Largest frame the harness handles (jumbo MTU plus an Ethernet header with a tag).
pub const MAX_FRAME: usize = 9216 + 18;

/// Offsets of the IPv4 and TCP headers in a frame, found from the length fields only
/// (nothing is validated beyond what is needed to index safely).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Start of the IPv4 header.
    pub ip: usize,
    /// Start of the TCP header (IPv4 start + IHL * 4).
    pub tcp: usize,
    /// End of the IPv4 packet (start + total length), clipped to the frame.
    pub end: usize,
}

/// Locates the headers of an IPv4 frame (one optional 802.1Q tag), or None if the frame is
/// too short or not IPv4.
pub fn layout(frame: &[u8]) -> Option<Layout> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let ip = match ethertype {
        0x0800 => ETH_LEN,
        0x8100 if frame.get(16..18)? == [0x08, 0x00] => ETH_LEN + 4,
        _ => return None,
    };
    let ihl = usize::from(frame.get(ip)? & 0x0F) * 4;
    let total = usize::from(u16::from_be_bytes([
        *frame.get(ip + 2)?,
        *frame.get(ip + 3)?,
    ]));
    let end = (ip + total).min(frame.len());
    let tcp = ip + ihl;
    (ihl >= 20 && tcp <= frame.len()).then_some(Layout { ip, tcp, end })
}

/// Recomputes the IPv4 header checksum and the TCP checksum in place, whatever the fields
/// say, so that a mutated frame is judged on its content and not dropped for its checksum.
pub fn fix_checksums(frame: &mut [u8]) {
    let Some(l) = layout(frame) else {
        return;
    };
    if l.tcp > frame.len() {
        return;
    }
    frame[l.ip + 10] = 0;
    frame[l.ip + 11] = 0;
    let c = checksum::checksum(&frame[l.ip..l.tcp]);
    frame[l.ip + 10..l.ip + 12].copy_from_slice(&c.to_be_bytes());
    let src = ipv4_at(frame, l.ip + 12);
    let dst = ipv4_at(frame, l.ip + 16);
    if l.end > l.tcp {
        tcp::fill_checksum(&mut frame[l.tcp..l.end], src, dst);
    }
}

fn ipv4_at(frame: &[u8], at: usize) -> Ipv4Addr {
    Ipv4Addr::new(frame[at], frame[at + 1], frame[at + 2], frame[at + 3])
}

/// A TCP segment as the core's pre-processor would see it.
#[derive(Clone, Copy, Debug)]
pub struct Parsed<'a> {
    /// Sender's address.
    pub src_ip: Ipv4Addr,
    /// Receiver's address.
    pub dst_ip: Ipv4Addr,
    /// The TCP header.
    pub tcp: TcpHeader,
    /// The payload.
    pub payload: &'a [u8],
}

impl Parsed<'_> {
    /// Whether `flag` is set.
    pub fn has(&self, flag: TcpFlags) -> bool {
        self.tcp.flags.contains(flag)
    }
}

/// Parses a frame with the same wire-crate functions and checks the core's classifier uses,
/// so the harness knows exactly which frames reach TCP processing. None means the core drops
/// the frame (or it is not TCP to `to`).
pub fn parse_tcp(frame: &[u8], to: Ipv4Addr, verify: bool) -> Option<Parsed<'_>> {
    let (eth, l3) = EthernetRepr::parse(frame).ok()?;
    if eth.ethertype != EtherType::Ipv4 {
        return None;
    }
    let (ip, l4) = Ipv4Repr::parse(l3, verify).ok()?;
    if ip.dst != to || ip.protocol != PROTOCOL_TCP || ip.is_fragment() {
        return None;
    }
    let check = if verify {
        ChecksumCheck::Verify
    } else {
        ChecksumCheck::Skip
    };
    let (tcp, payload) = TcpHeader::parse(l4, ip.src, ip.dst, check).ok()?;
    Some(Parsed {
        src_ip: ip.src,
        dst_ip: ip.dst,
        tcp,
        payload,
    })
}

/// Everything that goes into a hand-built TCP segment. Options are raw bytes, so they can be
/// malformed; they are padded with zeros (EOL) to a multiple of four.
#[derive(Clone, Debug)]
pub struct SegmentSpec {
    /// Ethernet source.
    pub src_mac: EthernetAddress,
    /// Ethernet destination.
    pub dst_mac: EthernetAddress,
    /// IPv4 source.
    pub src_ip: Ipv4Addr,
    /// IPv4 destination.
    pub dst_ip: Ipv4Addr,
    /// ECN codepoint.
    pub ecn: Ecn,
    /// TCP source port.
    pub src_port: u16,
    /// TCP destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Control bits.
    pub flags: u8,
    /// Window field.
    pub window: u16,
    /// Urgent pointer.
    pub urgent: u16,
    /// Raw option bytes (at most 40 are used).
    pub options: Vec<u8>,
    /// Payload.
    pub payload: Vec<u8>,
}

/// Builds the frame for `spec` with correct checksums.
pub fn build_segment(spec: &SegmentSpec) -> Vec<u8> {
    let opts = &spec.options[..spec.options.len().min(tcp::MAX_OPTIONS_LEN)];
    let opt_len = opts.len().div_ceil(4) * 4;
    let tcp_len = tcp::HEADER_LEN + opt_len + spec.payload.len();
    let eth = EthernetRepr {
        dst: spec.dst_mac,
        src: spec.src_mac,
        ethertype: EtherType::Ipv4,
        vlan: None,
    };
    let ip = Ipv4Repr {
        src: spec.src_ip,
        dst: spec.dst_ip,
        protocol: PROTOCOL_TCP,
        payload_len: tcp_len.min(usize::from(u16::MAX) - 20) as u16,
        ttl: 64,
        dscp: 0,
        ecn: spec.ecn,
        ident: 0,
        dont_fragment: true,
        more_fragments: false,
        fragment_offset: 0,
    };
    let mut frame = vec![0u8; ETH_LEN + 20 + tcp_len];
    // Both emits only fail on a short buffer, which the allocation above rules out.
    let _ = eth.emit(&mut frame);
    let _ = ip.emit(&mut frame[ETH_LEN..]);
    let t = &mut frame[ETH_LEN + 20..];
    t[0..2].copy_from_slice(&spec.src_port.to_be_bytes());
    t[2..4].copy_from_slice(&spec.dst_port.to_be_bytes());
    t[4..8].copy_from_slice(&spec.seq.to_be_bytes());
    t[8..12].copy_from_slice(&spec.ack.to_be_bytes());
    t[12] = (((tcp::HEADER_LEN + opt_len) / 4) as u8) << 4;
    t[13] = spec.flags;
    t[14..16].copy_from_slice(&spec.window.to_be_bytes());
    t[18..20].copy_from_slice(&spec.urgent.to_be_bytes());
    t[20..20 + opts.len()].copy_from_slice(opts);
    t[20 + opt_len..].copy_from_slice(&spec.payload);
    fix_checksums(&mut frame);
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SegmentSpec {
        SegmentSpec {
            src_mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
            src_ip: Ipv4Addr::new(10, 0, 0, 1),
            dst_ip: Ipv4Addr::new(10, 0, 0, 2),
            ecn: Ecn::NotEct,
            src_port: 40000,
            dst_port: 80,
            seq: 7,
            ack: 9,
            flags: TcpFlags::ACK.0,
            window: 100,
            urgent: 0,
            options: vec![1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2],
            payload: b"hello".to_vec(),
        }
    }

    #[test]
    fn built_segments_parse_with_verified_checksums() {
        let frame = build_segment(&spec());
        let p = parse_tcp(&frame, Ipv4Addr::new(10, 0, 0, 2), true).unwrap();
        assert_eq!(p.payload, b"hello");
        assert_eq!(p.tcp.options.timestamp, Some((1, 2)));
        assert_eq!(p.tcp.seq.0, 7);
    }

    #[test]
    fn fixing_checksums_revives_a_mutated_frame() {
        let mut frame = build_segment(&spec());
        let l = layout(&frame).unwrap();
        frame[l.tcp + 4] ^= 0x80; // seq
        assert!(parse_tcp(&frame, Ipv4Addr::new(10, 0, 0, 2), true).is_none());
        fix_checksums(&mut frame);
        let p = parse_tcp(&frame, Ipv4Addr::new(10, 0, 0, 2), true).unwrap();
        assert_eq!(p.tcp.seq.0, 7 ^ 0x8000_0000);
    }

    #[test]
    fn malformed_options_are_kept_raw() {
        let mut s = spec();
        s.options = vec![2, 3, 0]; // MSS with length 3
        let frame = build_segment(&s);
        assert!(parse_tcp(&frame, Ipv4Addr::new(10, 0, 0, 2), true).is_none());
        assert!(layout(&frame).is_some());
    }
}
