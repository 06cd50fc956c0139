//! Completing checksums that a local sender left to offload (CHECKSUM_PARTIAL).
//!
//! When Linux sends TCP or UDP over veth, a bridge or a TAP, it usually does not compute the
//! transport checksum: the field holds only the pseudo-header sum and the "hardware" is
//! expected to finish it. A packet socket sees such frames with `TP_STATUS_CSUMNOTREADY`, a
//! TAP reader with `VIRTIO_NET_HDR_F_NEEDS_CSUM`; an AF_XDP reader gets no sign but the field
//! itself ([`complete_if_partial`]). A device completes them in software when its consumer
//! verifies checksums.

use sluice_wire::checksum;
use sluice_wire::ethernet::{EtherType, EthernetRepr};
use sluice_wire::ipv4::{self, Ipv4Repr};
use sluice_wire::tcp;

use crate::{DeviceStats, RxChecksum};

/// IP protocol number of UDP.
const PROTOCOL_UDP: u8 = 17;

/// Where an Ethernet/IPv4 frame's TCP or UDP segment lies, and what its pseudo header holds.
struct Transport {
    protocol: u8,
    src: std::net::Ipv4Addr,
    dst: std::net::Ipv4Addr,
    /// The segment's range in the frame (bounded by the IPv4 total length, so Ethernet
    /// padding is left out).
    start: usize,
    end: usize,
}

/// Parses Ethernet (one optional 802.1Q tag) and IPv4 down to an unfragmented TCP or UDP
/// segment long enough to hold its checksum field; None for anything else.
fn transport(frame: &[u8]) -> Option<Transport> {
    let (eth, _) = EthernetRepr::parse(frame).ok()?;
    if eth.ethertype != EtherType::Ipv4 {
        return None;
    }
    let l3_start = eth.header_len();
    let packet = frame.get(l3_start..)?;
    let (ip, l4) = Ipv4Repr::parse(packet, false).ok()?;
    if ip.is_fragment() {
        return None;
    }
    let min_len = match ip.protocol {
        ipv4::PROTOCOL_TCP => tcp::HEADER_LEN,
        PROTOCOL_UDP => 8,
        _ => return None,
    };
    if l4.len() < min_len {
        return None;
    }
    let start = l3_start + usize::from(packet.first()? & 0x0F) * 4;
    Some(Transport {
        protocol: ip.protocol,
        src: ip.src,
        dst: ip.dst,
        start,
        end: start + l4.len(),
    })
}

/// Offset of the checksum field in a TCP or UDP header.
fn checksum_field(protocol: u8) -> usize {
    if protocol == PROTOCOL_UDP {
        6
    } else {
        16
    }
}

/// Fills the checksum of the located segment.
fn fill(frame: &mut [u8], t: &Transport) -> bool {
    let Some(segment) = frame.get_mut(t.start..t.end) else {
        return false;
    };
    if t.protocol == ipv4::PROTOCOL_TCP {
        tcp::fill_checksum(segment, t.src, t.dst);
        return true;
    }
    let Ok(len) = u16::try_from(segment.len()) else {
        return false;
    };
    segment[6] = 0;
    segment[7] = 0;
    let pseudo = checksum::pseudo_header_v4(t.src, t.dst, PROTOCOL_UDP, len);
    let mut c = !checksum::fold(pseudo + checksum::sum(segment));
    if c == 0 {
        // RFC 768: a computed zero is sent as all ones (zero means "no checksum").
        c = 0xFFFF;
    }
    segment[6..8].copy_from_slice(&c.to_be_bytes());
    true
}

/// Recomputes the TCP or UDP checksum of an Ethernet/IPv4 frame in place.
///
/// Parses Ethernet (one optional 802.1Q tag) and IPv4, then fills the transport checksum over
/// the pseudo header and the segment (bounded by the IPv4 total length, so Ethernet padding
/// is ignored). Returns `false`, leaving the frame untouched, when the frame is not an
/// unfragmented IPv4 TCP or UDP packet or is truncated.
pub fn complete_partial_checksum(frame: &mut [u8]) -> bool {
    transport(frame).is_some_and(|t| fill(frame, &t))
}

/// Completes the TCP or UDP checksum of an Ethernet/IPv4 frame whose checksum field holds
/// exactly the pseudo-header sum, as a local Linux sender leaves it for offload
/// (CHECKSUM_PARTIAL). Returns whether it did.
///
/// For devices that pass no checksum metadata (AF_XDP) the field value is the only sign. A
/// correct checksum equal to the pseudo-header sum is recomputed to the same value.
pub fn complete_if_partial(frame: &mut [u8]) -> bool {
    let Some(t) = transport(frame) else {
        return false;
    };
    let at = t.start + checksum_field(t.protocol);
    let (Some(field), Ok(len)) = (frame.get(at..at + 2), u16::try_from(t.end - t.start)) else {
        return false;
    };
    let field = u16::from_be_bytes([field[0], field[1]]);
    let pseudo = checksum::fold(checksum::pseudo_header_v4(t.src, t.dst, t.protocol, len));
    field == pseudo && fill(frame, &t)
}

/// What a device learned about a received frame's transport checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RxEvidence {
    /// Nothing: the consumer verifies.
    None,
    /// Verified by the kernel or hardware.
    Valid,
    /// Left partial by a local sender, with where the sum starts and is stored (virtio-net).
    PartialAt { start: usize, offset: usize },
    /// Left partial by a local sender, place unknown (packet status): found by parsing.
    Partial,
}

/// The frame's [`RxChecksum`] from `evidence`; a partial checksum is completed in place when
/// `complete` is set, and counted.
pub(crate) fn rx_checksum(
    evidence: RxEvidence,
    frame: &mut [u8],
    complete: bool,
    stats: &mut DeviceStats,
) -> RxChecksum {
    let done = match evidence {
        RxEvidence::None => return RxChecksum::Unverified,
        RxEvidence::Valid => return RxChecksum::Verified,
        // Left for the consumer to trust: see RxChecksum::Partial.
        _ if !complete => return RxChecksum::Partial,
        RxEvidence::PartialAt { start, offset } => complete_checksum_at(frame, start, offset),
        RxEvidence::Partial => complete_partial_checksum(frame),
    };
    if done {
        stats.rx_checksum_completed += 1;
    } else {
        stats.rx_checksum_incomplete += 1;
    }
    RxChecksum::Partial
}

/// Completes a partial checksum the way the kernel does (`skb_checksum_help`).
///
/// The field at `csum_start + csum_offset` already holds the pseudo-header sum; the
/// one's-complement sum from `csum_start` to the end of `frame` is folded, inverted and
/// stored there (zero is stored as 0xFFFF). Works for any protocol (TCP, UDP, IPv6). Returns
/// `false`, leaving the frame untouched, if the offsets do not fit in the frame.
pub fn complete_checksum_at(frame: &mut [u8], csum_start: usize, csum_offset: usize) -> bool {
    let Some(field) = csum_start.checked_add(csum_offset) else {
        return false;
    };
    match field.checked_add(2) {
        Some(end) if end <= frame.len() => {}
        _ => return false,
    }
    let Some(covered) = frame.get(csum_start..) else {
        return false;
    };
    let mut c = !checksum::fold(checksum::sum(covered));
    if c == 0 {
        c = 0xFFFF;
    }
    frame[field..field + 2].copy_from_slice(&c.to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::ethernet::EthernetFrame;
    use sluice_wire::ipv4::Ecn;
    use sluice_wire::tcp::{SeqNumber, TcpFlags, TcpHeader, TcpOptions};
    use sluice_wire::{EthernetAddress, Ipv4Addr};

    const SRC: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
    const DST: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
    const ETH: usize = 14;
    const IP: usize = 20;

    fn ip_repr(protocol: u8, payload_len: usize) -> Ipv4Repr {
        Ipv4Repr {
            src: SRC,
            dst: DST,
            protocol,
            payload_len: payload_len as u16,
            ttl: 64,
            dscp: 0,
            ecn: Ecn::NotEct,
            ident: 7,
            dont_fragment: true,
            more_fragments: false,
            fragment_offset: 0,
        }
    }

    fn eth_header(buf: &mut [u8]) {
        let mut f = EthernetFrame::new_checked(buf).unwrap();
        f.set_dst(EthernetAddress([2, 0x77, 0, 0, 0, 1]));
        f.set_src(EthernetAddress([2, 0x77, 0, 0, 0, 2]));
        f.set_ethertype(EtherType::Ipv4);
    }

    /// An Ethernet/IPv4/TCP frame with options and `payload`, checksum filled; returns its length.
    fn tcp_frame(buf: &mut [u8], payload: &[u8]) -> usize {
        let options = TcpOptions {
            mss: Some(1460),
            window_scale: Some(7),
            ..TcpOptions::default()
        };
        let header = TcpHeader {
            src_port: 40000,
            dst_port: 5001,
            seq: SeqNumber(0x0102_0304),
            ack: SeqNumber(0xA0B0_C0D0),
            flags: TcpFlags::ACK | TcpFlags::PSH,
            window: 512,
            urgent: 0,
            options,
        };
        let tcp_len = header.header_len() + payload.len();
        eth_header(buf);
        ip_repr(ipv4::PROTOCOL_TCP, tcp_len)
            .emit(&mut buf[ETH..])
            .unwrap();
        let hl = header.emit(&mut buf[ETH + IP..]).unwrap();
        buf[ETH + IP + hl..ETH + IP + tcp_len].copy_from_slice(payload);
        tcp::fill_checksum(&mut buf[ETH + IP..ETH + IP + tcp_len], SRC, DST);
        ETH + IP + tcp_len
    }

    fn tcp_verifies(frame: &[u8]) -> bool {
        tcp::verify_checksum(&frame[ETH + IP..], SRC, DST)
    }

    /// Writes what Linux leaves in a CHECKSUM_PARTIAL TCP segment: the folded pseudo-header sum.
    fn make_partial(frame: &mut [u8]) {
        let len = (frame.len() - ETH - IP) as u16;
        let seed = checksum::fold(checksum::pseudo_header_v4(SRC, DST, 6, len));
        frame[ETH + IP + 16..ETH + IP + 18].copy_from_slice(&seed.to_be_bytes());
    }

    #[test]
    fn completes_zeroed_tcp_checksum() {
        for payload_len in [0usize, 1, 2, 3, 100, 1448, 1449] {
            let mut buf = vec![0u8; 2048];
            let payload: Vec<u8> = (0..payload_len).map(|i| (i * 7 + 3) as u8).collect();
            let n = tcp_frame(&mut buf, &payload);
            let frame = &mut buf[..n];
            let good = frame.to_vec();
            frame[ETH + IP + 16] = 0;
            frame[ETH + IP + 17] = 0;
            assert!(!tcp_verifies(frame) || good[ETH + IP + 16..ETH + IP + 18] == [0, 0]);
            assert!(complete_partial_checksum(frame));
            assert!(tcp_verifies(frame), "payload {payload_len}");
            assert_eq!(frame, &good[..]);
        }
    }

    #[test]
    fn completes_partial_tcp_checksum_both_ways() {
        let mut buf = vec![0u8; 2048];
        let n = tcp_frame(&mut buf, b"hello, partial checksum");
        let good = buf[..n].to_vec();
        make_partial(&mut buf[..n]);
        assert!(!tcp_verifies(&buf[..n]));
        let mut by_offsets = buf[..n].to_vec();
        assert!(complete_partial_checksum(&mut buf[..n]));
        assert!(tcp_verifies(&buf[..n]));
        assert_eq!(&buf[..n], &good[..]);
        // The kernel's way: sum from csum_start over the seeded field.
        assert!(complete_checksum_at(&mut by_offsets, ETH + IP, 16));
        assert!(tcp_verifies(&by_offsets));
        assert_eq!(by_offsets, good);
    }

    #[test]
    fn ignores_ethernet_padding() {
        // A bare ACK is 54 bytes; on a real wire it is padded to 60 with junk.
        let mut buf = vec![0u8; 2048];
        let n = tcp_frame(&mut buf, b"");
        buf[n..n + 6].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef, 1, 2]);
        make_partial(&mut buf[..n]);
        assert!(complete_partial_checksum(&mut buf[..n + 6]));
        assert!(tcp_verifies(&buf[..n]));
    }

    #[test]
    fn completes_udp_checksum() {
        let payload = b"udp over veth";
        let udp_len = 8 + payload.len();
        let mut buf = vec![0u8; ETH + IP + udp_len];
        eth_header(&mut buf);
        ip_repr(PROTOCOL_UDP, udp_len)
            .emit(&mut buf[ETH..])
            .unwrap();
        let udp = &mut buf[ETH + IP..];
        udp[0..2].copy_from_slice(&5353u16.to_be_bytes());
        udp[2..4].copy_from_slice(&9u16.to_be_bytes());
        udp[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
        udp[8..].copy_from_slice(payload);
        assert!(complete_partial_checksum(&mut buf));
        let pseudo = checksum::pseudo_header_v4(SRC, DST, PROTOCOL_UDP, udp_len as u16);
        assert_eq!(
            checksum::fold(pseudo + checksum::sum(&buf[ETH + IP..])),
            0xFFFF
        );
        assert_ne!(&buf[ETH + IP + 6..ETH + IP + 8], &[0, 0]);
    }

    #[test]
    fn refuses_what_it_cannot_complete() {
        let mut buf = vec![0u8; 2048];
        let n = tcp_frame(&mut buf, b"x");
        // Truncated below the IPv4 total length.
        let mut short = buf[..n - 1].to_vec();
        assert!(!complete_partial_checksum(&mut short));
        // Not IPv4.
        let mut arp = buf[..n].to_vec();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert!(!complete_partial_checksum(&mut arp));
        // A fragment.
        let mut frag = buf[..n].to_vec();
        frag[ETH + 6] |= 0x20;
        assert!(!complete_partial_checksum(&mut frag));
        // Unknown transport protocol.
        let mut icmp = buf[..n].to_vec();
        icmp[ETH + 9] = 1;
        assert!(!complete_partial_checksum(&mut icmp));
        // Garbage never panics.
        for len in 0..80 {
            let mut junk: Vec<u8> = (0..len).map(|i| (i * 31) as u8).collect();
            let _ = complete_partial_checksum(&mut junk);
            let _ = complete_checksum_at(&mut junk, len / 2, 16);
        }
        assert!(!complete_checksum_at(&mut buf[..n], n - 1, 0));
        assert!(!complete_checksum_at(&mut buf[..n], usize::MAX, 2));
    }
}
