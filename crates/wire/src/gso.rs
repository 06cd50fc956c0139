//! Software segmentation of a large TCP/IPv4 frame (what TSO/GSO does in a NIC or the kernel).
//!
//! A sender that hands a device one large segment with a GSO size expects it cut into
//! segments of that many payload bytes, each with the same headers except: sequence number
//! advanced, IPv4 total length and ident per segment (ident + k), PSH and FIN only on the
//! last, CWR only on the first, and both checksums computed. Linux does the same in
//! `tcp_gso_segment` / `inet_gso_segment`. Devices without offload use this to accept large
//! segments anyway; tests use it as the reference for what the kernel puts on the wire.
//!
//! No panics on any input: a frame that is not an unfragmented IPv4 TCP segment, or whose
//! lengths disagree, is an error.

use crate::checksum;
use crate::ethernet::{EtherType, EthernetRepr};
use crate::ipv4::{self, PROTOCOL_TCP};
use crate::tcp::{self, TcpFlags};
use crate::WireError;

/// Cuts `frame` (Ethernet + IPv4 + TCP with a payload) into segments of at most `gso_size`
/// payload bytes, writing each one into `scratch` and passing it to `emit`. Returns the
/// number of segments. A frame whose payload already fits is passed on unchanged (its
/// checksums completed).
pub fn segment_tcp4(
    frame: &[u8],
    gso_size: usize,
    scratch: &mut [u8],
    mut emit: impl FnMut(&[u8]),
) -> Result<usize, WireError> {
    let (eth, _) = EthernetRepr::parse(frame)?;
    if eth.ethertype != EtherType::Ipv4 {
        return Err(WireError::Malformed);
    }
    let ip_at = eth.header_len();
    let packet = frame.get(ip_at..).ok_or(WireError::Truncated)?;
    let ihl = usize::from(packet.first().ok_or(WireError::Truncated)? & 0x0F) * 4;
    let (ip, l4) = ipv4::Ipv4Repr::parse(packet, false)?;
    if ip.protocol != PROTOCOL_TCP || ip.is_fragment() {
        return Err(WireError::Malformed);
    }
    let tcp_at = ip_at + ihl;
    let thl = usize::from(l4.get(12).ok_or(WireError::Truncated)? >> 4) * 4;
    if thl < tcp::HEADER_LEN || thl > l4.len() || gso_size == 0 {
        return Err(WireError::Malformed);
    }
    let headers = tcp_at + thl;
    let payload = &l4[thl..];
    let count = payload.len().div_ceil(gso_size).max(1);
    let seq0 = u32::from_be_bytes([l4[4], l4[5], l4[6], l4[7]]);
    let flags0 = l4[13];
    let ident0 = u16::from_be_bytes([packet[4], packet[5]]);
    for k in 0..count {
        let start = k * gso_size;
        let chunk = &payload[start.min(payload.len())..(start + gso_size).min(payload.len())];
        let len = headers + chunk.len();
        let out = scratch.get_mut(..len).ok_or(WireError::BufferTooSmall)?;
        out[..headers].copy_from_slice(&frame[..headers]);
        out[headers..].copy_from_slice(chunk);
        let ip_len = u16::try_from(ihl + thl + chunk.len()).map_err(|_| WireError::Malformed)?;
        let ip_hdr = &mut out[ip_at..tcp_at];
        ip_hdr[2..4].copy_from_slice(&ip_len.to_be_bytes());
        ip_hdr[4..6].copy_from_slice(&ident0.wrapping_add(k as u16).to_be_bytes());
        ip_hdr[10..12].fill(0);
        let ip_sum = checksum::checksum(ip_hdr);
        ip_hdr[10..12].copy_from_slice(&ip_sum.to_be_bytes());
        let seg = &mut out[tcp_at..];
        seg[4..8].copy_from_slice(&seq0.wrapping_add(start as u32).to_be_bytes());
        let mut flags = flags0;
        if k + 1 < count {
            flags &= !(TcpFlags::PSH.0 | TcpFlags::FIN.0);
        }
        if k > 0 {
            flags &= !TcpFlags::CWR.0;
        }
        seg[13] = flags;
        tcp::fill_checksum(seg, ip.src, ip.dst);
        emit(out);
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ethernet::EthernetRepr;
    use crate::ipv4::{Ecn, Ipv4Repr};
    use crate::tcp::{SeqNumber, TcpHeader, TcpOptions};
    use crate::{EthernetAddress, Ipv4Addr};

    fn large_frame(payload: &[u8], flags: TcpFlags) -> Vec<u8> {
        let header = TcpHeader {
            src_port: 1,
            dst_port: 2,
            seq: SeqNumber(u32::MAX - 100),
            ack: SeqNumber(7),
            flags,
            window: 100,
            urgent: 0,
            options: TcpOptions {
                timestamp: Some((1, 2)),
                ..TcpOptions::default()
            },
        };
        let tcp_len = header.header_len() + payload.len();
        let mut f = vec![0u8; 14 + 20 + tcp_len];
        EthernetRepr {
            dst: EthernetAddress([2, 0, 0, 0, 0, 1]),
            src: EthernetAddress([2, 0, 0, 0, 0, 2]),
            ethertype: EtherType::Ipv4,
            vlan: None,
        }
        .emit(&mut f)
        .unwrap();
        Ipv4Repr {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
            protocol: PROTOCOL_TCP,
            payload_len: tcp_len as u16,
            ttl: 64,
            dscp: 0,
            ecn: Ecn::NotEct,
            ident: 0xFFFF,
            dont_fragment: true,
            more_fragments: false,
            fragment_offset: 0,
        }
        .emit(&mut f[14..])
        .unwrap();
        header.emit(&mut f[34..]).unwrap();
        f[34 + header.header_len()..].copy_from_slice(payload);
        f
    }

    #[test]
    fn cuts_at_gso_size_with_per_segment_fields() {
        let payload: Vec<u8> = (0..2500u32).map(|i| i as u8).collect();
        let frame = large_frame(&payload, TcpFlags::ACK | TcpFlags::PSH | TcpFlags::FIN);
        let mut scratch = vec![0u8; 2000];
        let mut segs = Vec::new();
        let n = segment_tcp4(&frame, 1000, &mut scratch, |s| segs.push(s.to_vec())).unwrap();
        assert_eq!(n, 3);
        let mut data = Vec::new();
        for (k, s) in segs.iter().enumerate() {
            let (ip, l4) = Ipv4Repr::parse(&s[14..], true).expect("IPv4 checksum verifies");
            assert!(
                tcp::verify_checksum(l4, ip.src, ip.dst),
                "TCP checksum verifies"
            );
            assert_eq!(ip.ident, 0xFFFFu16.wrapping_add(k as u16));
            let (h, body) =
                TcpHeader::parse(l4, ip.src, ip.dst, tcp::ChecksumCheck::Verify).unwrap();
            assert_eq!(h.seq, SeqNumber(u32::MAX - 100) + (k as u32 * 1000));
            let last = k == 2;
            assert_eq!(h.flags.contains(TcpFlags::FIN), last);
            assert_eq!(h.flags.contains(TcpFlags::PSH), last);
            assert_eq!(h.options.timestamp, Some((1, 2)));
            data.extend_from_slice(body);
        }
        assert_eq!(data, payload);
    }

    #[test]
    fn bad_frames_are_errors_not_panics() {
        let mut scratch = vec![0u8; 100];
        assert!(segment_tcp4(&[0u8; 10], 1000, &mut scratch, |_| {}).is_err());
        let frame = large_frame(&[0u8; 300], TcpFlags::ACK);
        assert_eq!(
            segment_tcp4(&frame, 100, &mut scratch, |_| {}),
            Err(WireError::BufferTooSmall)
        );
        assert!(segment_tcp4(&frame, 0, &mut scratch, |_| {}).is_err());
        for cut in 0..frame.len() {
            let _ = segment_tcp4(&frame[..cut], 100, &mut scratch, |_| {});
        }
    }
}

#[cfg(test)]
mod proptests {
    use super::segment_tcp4;
    use proptest::prelude::*;

    proptest! {
        /// Plausible IPv4/TCP frames with arbitrary header lengths, total lengths, GSO sizes
        /// and scratch sizes: an error or segments, never a panic.
        #[test]
        fn segment_tcp4_never_panics(
            mut frame in proptest::collection::vec(any::<u8>(), 0..400),
            gso in 0usize..600,
            scratch_len in 0usize..700,
            ihl in 5u8..16,
            thl in 0u8..16,
            total in 0u16..420,
        ) {
            if frame.len() >= 14 + 20 {
                frame[12] = 0x08;
                frame[13] = 0x00;
                frame[14] = 0x40 | ihl;
                frame[16..18].copy_from_slice(&total.to_be_bytes());
                frame[20] = 0;
                frame[21] = 0;
                frame[23] = 6;
                let tcp = 14 + usize::from(ihl) * 4;
                if frame.len() > tcp + 12 {
                    frame[tcp + 12] = thl << 4;
                }
            }
            let mut scratch = vec![0u8; scratch_len];
            let _ = segment_tcp4(&frame, gso, &mut scratch, |_| {});
            let _ = segment_tcp4(&frame, usize::MAX, &mut scratch, |_| {});
        }
    }
}
