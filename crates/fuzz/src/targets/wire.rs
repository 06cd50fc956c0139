//! Properties of the wire parsers (sluice-wire): Ethernet with one 802.1Q tag, ARP, IPv4, the
//! TCP header and its option area. For arbitrary bytes, parsing never panics; whatever parses
//! is emitted, parsed again and must be equal; the checked views and the parsers agree; and
//! the checksums computed from field values match the bytes written. Also software
//! segmentation ([`gso`]): the segments give back the original payload and headers. The
//! RoCEv2 format (sluice-rdma) is `wire_roce`, whose property lives in [`super::roce`].
//!
//! Emitting is canonical, not byte-exact, where the format allows several spellings: IPv4
//! options and the reserved flag are dropped, and TCP options are re-laid out in Linux's order
//! with SACK blocks trimmed to what fits in 40 bytes ([`TcpOptions::emitted_sack_count`]). The
//! round trip is therefore checked against the parsed value in that canonical form, and a
//! second emit must give the same bytes as the first.

use std::net::Ipv4Addr;

use sluice_wire::arp::{self, ArpOperation, ArpRepr};
use sluice_wire::checksum;
use sluice_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr};
use sluice_wire::gso::segment_tcp4;
use sluice_wire::ipv4::{self, Ecn, Ipv4Packet, Ipv4Repr};
use sluice_wire::tcp::{
    self, ChecksumCheck, SeqNumber, TcpFlags, TcpHeader, TcpOptions, TcpSegment,
};
use sluice_wire::{EthernetAddress, WireError};

/// The wire targets, by the names `cargo fuzz list` gives them.
pub const TARGETS: [&str; 7] = [
    "wire_ethernet",
    "wire_arp",
    "wire_ipv4",
    "wire_tcp",
    "wire_tcp_options",
    "wire_gso",
    "wire_roce",
];

/// The pseudo-header addresses the TCP properties checksum against.
pub const TCP_SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
/// See [`TCP_SRC`].
pub const TCP_DST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

/// Runs the property of the target named `name` on `data`; false if no such target.
pub fn run(name: &str, data: &[u8]) -> bool {
    match name {
        "wire_ethernet" => ethernet(data),
        "wire_arp" => arp(data),
        "wire_ipv4" => ipv4(data),
        "wire_tcp" => tcp(data),
        "wire_tcp_options" => tcp_options(data),
        "wire_gso" => gso(data),
        "wire_roce" => super::roce::roce(data),
        _ => return false,
    }
    true
}

/// Ethernet II with at most one 802.1Q tag: a parsed frame is emitted back byte for byte.
pub fn ethernet(data: &[u8]) {
    let view = EthernetFrame::new_checked(data);
    let Ok((repr, payload)) = EthernetRepr::parse(data) else {
        if let Ok(v) = view {
            // Only a tagged frame cut inside its tag passes the view and fails the parser.
            assert_eq!(v.ethertype(), EtherType::Vlan, "view accepted {data:02x?}");
        }
        return;
    };
    let view = view.expect("a frame the parser accepts passes the view's check");
    assert_eq!((view.dst(), view.src()), (repr.dst, repr.src));
    let outer = if repr.vlan.is_some() {
        EtherType::Vlan
    } else {
        repr.ethertype
    };
    assert_eq!(view.ethertype(), outer);
    assert_eq!(view.payload().len(), data.len() - 14);

    let mut out = vec![0u8; repr.header_len() + payload.len()];
    let short = repr.emit(&mut out[..repr.header_len() - 1]);
    assert_eq!(short, Err(WireError::BufferTooSmall));
    assert_eq!(repr.emit(&mut out), Ok(repr.header_len()));
    out[repr.header_len()..].copy_from_slice(payload);
    // Every header bit is represented, so nothing may change.
    assert_eq!(out, data, "emit changed the frame of {repr:?}");
    assert_eq!(EthernetRepr::parse(&out), Ok((repr, payload)));
}

/// ARP for Ethernet/IPv4: a parsed packet is emitted back byte for byte (padding aside).
pub fn arp(data: &[u8]) {
    let Ok(repr) = ArpRepr::parse(data) else {
        return;
    };
    let mut out = [0u8; arp::PACKET_LEN];
    let short = repr.emit(&mut out[..arp::PACKET_LEN - 1]);
    assert_eq!(short, Err(WireError::BufferTooSmall));
    assert_eq!(repr.emit(&mut out), Ok(arp::PACKET_LEN));
    assert_eq!(Some(&out[..]), data.get(..arp::PACKET_LEN), "{repr:?}");
    assert_eq!(ArpRepr::parse(&out), Ok(repr));
}

/// IPv4: the parser with and without checksum verification, the checked view and the
/// incremental checksum updates agree; the header re-emitted (without options) parses to
/// the same value with a valid checksum.
pub fn ipv4(data: &[u8]) {
    let skipped = Ipv4Repr::parse(data, false);
    let verified = Ipv4Repr::parse(data, true);
    let view = Ipv4Packet::new_checked(data);
    assert_eq!(view.is_ok(), skipped.is_ok(), "view and parser disagree");
    match verified {
        Ok(v) => assert_eq!(Ok(v), skipped),
        Err(WireError::Checksum) => {
            assert!(skipped.is_ok());
            assert!(view.as_ref().is_ok_and(|v| !v.verify_checksum()));
        }
        Err(e) => assert_eq!(skipped, Err(e)),
    }
    let Ok((repr, payload)) = skipped else {
        return;
    };
    let view = view.expect("checked above");
    assert_eq!(view.verify_checksum(), verified.is_ok());
    assert_eq!(
        (
            view.src_addr(),
            view.dst_addr(),
            view.protocol(),
            view.ttl()
        ),
        (repr.src, repr.dst, repr.protocol, repr.ttl)
    );
    assert_eq!(
        (view.dscp(), view.ecn(), view.ident()),
        (repr.dscp, repr.ecn, repr.ident)
    );
    assert_eq!(
        (
            view.dont_fragment(),
            view.more_fragments(),
            view.fragment_offset()
        ),
        (
            repr.dont_fragment,
            repr.more_fragments,
            repr.fragment_offset
        )
    );
    assert_eq!(view.payload(), payload);
    assert_eq!(
        view.header_len() + payload.len(),
        usize::from(view.total_len())
    );
    assert_eq!(view.options().len(), view.header_len() - ipv4::HEADER_LEN);

    let mut out = vec![0u8; ipv4::HEADER_LEN + payload.len()];
    let short = repr.emit(&mut out[..ipv4::HEADER_LEN - 1]);
    assert_eq!(short, Err(WireError::BufferTooSmall));
    // A payload that would not fit the 16-bit total length is refused (a parsed one fits).
    let too_long = Ipv4Repr {
        payload_len: u16::MAX - ipv4::HEADER_LEN as u16 + 1,
        ..repr
    };
    assert_eq!(too_long.emit(&mut out), Err(WireError::Malformed));
    assert_eq!(repr.emit(&mut out), Ok(ipv4::HEADER_LEN));
    out[ipv4::HEADER_LEN..].copy_from_slice(payload);
    assert_eq!(Ipv4Repr::parse(&out, true), Ok((repr, payload)));
    let mut again = vec![0u8; out.len()];
    assert_eq!(repr.emit(&mut again), Ok(ipv4::HEADER_LEN));
    again[ipv4::HEADER_LEN..].copy_from_slice(payload);
    assert_eq!(again, out, "a second emit differs");

    // RFC 1624: TTL and ECN rewritten in place keep a valid checksum valid, options or not.
    if verified.is_ok() {
        let mut m = data.to_vec();
        let ttl = repr.ttl.wrapping_sub(1);
        let ecn = Ecn::from_tos(repr.ident as u8);
        let mut v = Ipv4Packet::new_checked(&mut m[..]).expect("same bytes");
        v.set_ttl(ttl);
        v.set_ecn(ecn);
        assert!(v.verify_checksum(), "incremental update broke {repr:?}");
        let expected = Ipv4Repr { ttl, ecn, ..repr };
        assert_eq!(Ipv4Repr::parse(&m, true), Ok((expected, payload)));
        // Cut inside the fixed header: refused, nothing marked.
        let cut = ipv4::HEADER_LEN - 1;
        assert_eq!(ipv4::set_ecn_ce(&mut m[..cut]), Err(WireError::Truncated));
        assert_eq!(ipv4::set_ecn_ce(&mut m), Ok(()));
        let marked = Ipv4Repr {
            ecn: Ecn::Ce,
            ..expected
        };
        assert_eq!(Ipv4Repr::parse(&m, true), Ok((marked, payload)));
    }
}

/// `o` as [`TcpHeader::emit`] writes it back: SACK blocks past the emitted ones dropped.
pub fn canonical_options(mut o: TcpOptions) -> TcpOptions {
    let n = o.emitted_sack_count();
    for b in o.sack_blocks.iter_mut().skip(n) {
        *b = Default::default();
    }
    o.sack_count = n as u8;
    o
}

/// A TCP segment (header, options, payload): parsing with and without checksum verification
/// and through the view agree; the re-emitted segment, checksummed from field values
/// ([`TcpHeader::sum`]), verifies, matches `fill_checksum`, and parses to the canonical form.
pub fn tcp(data: &[u8]) {
    let skipped = TcpHeader::parse(data, TCP_SRC, TCP_DST, ChecksumCheck::Skip);
    let verified = TcpHeader::parse(data, TCP_SRC, TCP_DST, ChecksumCheck::Verify);
    let view = TcpSegment::new_checked(data);
    match verified {
        Ok(v) => assert_eq!(Ok(v), skipped),
        Err(WireError::Checksum) => {
            assert!(view.is_ok());
            assert!(!tcp::verify_checksum(data, TCP_SRC, TCP_DST));
        }
        Err(e) => assert_eq!(skipped, Err(e)),
    }
    if let Ok(v) = &view {
        // The view checks the structure only; the options parse the same either way.
        assert_eq!(skipped.map(|(h, _)| h.options), v.parse_options());
    } else {
        assert!(skipped.is_err());
    }
    let Ok((h, payload)) = skipped else {
        return;
    };
    let view = view.expect("checked above");
    assert_eq!(
        (view.src_port(), view.dst_port(), view.seq(), view.ack()),
        (h.src_port, h.dst_port, h.seq, h.ack)
    );
    assert_eq!(
        (view.flags(), view.window(), view.urgent()),
        (h.flags, h.window, h.urgent)
    );
    assert_eq!(view.payload(), payload);
    assert_eq!(view.header_len() + payload.len(), data.len());

    let len = h.header_len();
    assert!(len <= tcp::HEADER_LEN + tcp::MAX_OPTIONS_LEN && len % 4 == 0);
    let mut out = vec![0u8; len + payload.len()];
    // One byte short of the header is refused, not written in part.
    assert_eq!(h.emit(&mut out[..len - 1]), Err(WireError::BufferTooSmall));
    assert_eq!(h.emit(&mut out), Ok(len));
    out[len..].copy_from_slice(payload);
    let c = tcp::segment_checksum(h.sum(), len, payload, TCP_SRC, TCP_DST);
    let mut filled = out.clone();
    tcp::fill_checksum(&mut filled, TCP_SRC, TCP_DST);
    out[16..18].copy_from_slice(&c.to_be_bytes());
    assert_eq!(
        out, filled,
        "the field-value checksum differs from the bytes' for {h:?}"
    );
    let expected = TcpHeader {
        options: canonical_options(h.options),
        ..h
    };
    let reparsed = TcpHeader::parse(&out, TCP_SRC, TCP_DST, ChecksumCheck::Verify);
    assert_eq!(reparsed, Ok((expected, payload)));
    let mut again = vec![0u8; expected.header_len()];
    assert_eq!(expected.emit(&mut again), Ok(len));
    assert_eq!(again[..16], out[..16]);
    assert_eq!(again[18..], out[18..len], "a second emit differs");
}

/// A TCP option area alone: a leading NOP changes nothing (it also takes the parser off its
/// timestamp fast path, so the two paths are compared); parsed options re-emit within 40
/// bytes, parse back to their canonical form, and the header sum matches the bytes.
pub fn tcp_options(data: &[u8]) {
    let parsed = TcpOptions::parse(data);
    let mut nop = Vec::with_capacity(data.len() + 1);
    nop.push(1);
    nop.extend_from_slice(data);
    assert_eq!(
        TcpOptions::parse(&nop),
        parsed,
        "a leading NOP changed the parse"
    );
    let Ok(o) = parsed else {
        return;
    };
    assert!(o.sacks().len() <= tcp::MAX_SACK_BLOCKS);
    let h = TcpHeader {
        src_port: 1,
        dst_port: 2,
        seq: SeqNumber(3),
        ack: SeqNumber(4),
        flags: TcpFlags::ACK,
        window: 5,
        urgent: 0,
        options: o,
    };
    let len = o.emitted_len();
    assert!(
        len <= tcp::MAX_OPTIONS_LEN && len % 4 == 0,
        "{len} option bytes"
    );
    let mut out = [0u8; tcp::HEADER_LEN + tcp::MAX_OPTIONS_LEN];
    assert_eq!(h.emit(&mut out), Ok(tcp::HEADER_LEN + len));
    let area = &out[tcp::HEADER_LEN..tcp::HEADER_LEN + len];
    let canonical = canonical_options(o);
    assert_eq!(TcpOptions::parse(area), Ok(canonical));
    assert_eq!(canonical_options(canonical), canonical);
    // Both sums are nonzero, so equal modulo 0xFFFF means equal once folded.
    let bytes = checksum::sum(&out[..tcp::HEADER_LEN + len]);
    assert_eq!(checksum::fold(h.sum()), checksum::fold(bytes), "{o:?}");
}

/// The fixed part of a `wire_gso` input: the GSO size and the scratch buffer's length (two
/// big-endian u16 each), followed by the frame.
pub const GSO_PREFIX: usize = 4;

/// Software segmentation (`sluice_wire::gso`): never panics; a frame that is an unfragmented
/// IPv4 TCP segment is cut into segments of at most the GSO size whose payloads concatenate
/// to the original payload, whose IPv4 and TCP checksums verify, whose sequence numbers
/// advance by the segment lengths and whose other header bytes are the original's (ident + k,
/// PSH/FIN on the last only, CWR on the first only); anything else is an error, and the only
/// error a segmentable frame may give is a scratch buffer too small for its first segment.
pub fn gso(data: &[u8]) {
    let Some((prefix, frame)) = data.split_first_chunk::<GSO_PREFIX>() else {
        return;
    };
    let gso_size = usize::from(u16::from_be_bytes([prefix[0], prefix[1]]));
    let mut scratch = vec![0u8; usize::from(u16::from_be_bytes([prefix[2], prefix[3]]))];
    let mut segments: Vec<Vec<u8>> = Vec::new();
    let result = segment_tcp4(frame, gso_size, &mut scratch, |s| segments.push(s.to_vec()));
    let original = Segmentable::parse(frame);
    let (count, o) = match (result, original) {
        (Err(e), o) => {
            // Every segment after the first is no longer than it: a failure comes first.
            assert!(
                segments.is_empty(),
                "{e:?} after {} segments",
                segments.len()
            );
            if let (Some(o), true) = (o, gso_size > 0) {
                let first = o.headers + o.payload.len().min(gso_size);
                assert_eq!(e, WireError::BufferTooSmall, "a segmentable frame refused");
                assert!(scratch.len() < first, "refused with room for {first} bytes");
            }
            return;
        }
        (Ok(_), None) => panic!("segmented a frame that is not an IPv4 TCP segment"),
        (Ok(_), Some(_)) if gso_size == 0 => panic!("segmented with a GSO size of 0"),
        (Ok(n), Some(o)) => (n, o),
    };
    assert_eq!(count, segments.len(), "the count returned");
    assert_eq!(count, o.payload.len().div_ceil(gso_size).max(1));
    let mut payload = Vec::with_capacity(o.payload.len());
    for (k, seg) in segments.iter().enumerate() {
        let (eth, packet) = EthernetRepr::parse(seg).expect("a segment's Ethernet header");
        assert_eq!(eth, o.eth);
        let (ip, l4) = Ipv4Repr::parse(packet, true).expect("a segment's IPv4 checksum verifies");
        assert_eq!(
            packet.len(),
            usize::from(ip.payload_len) + o.ihl,
            "no padding"
        );
        assert_eq!(ip.ident, o.ip.ident.wrapping_add(k as u16));
        assert_eq!(
            Ipv4Repr {
                ident: o.ip.ident,
                payload_len: 0,
                ..ip
            },
            Ipv4Repr {
                payload_len: 0,
                ..o.ip
            }
        );
        assert!(
            tcp::verify_checksum(l4, ip.src, ip.dst),
            "segment {k}'s TCP checksum"
        );
        let view = TcpSegment::new_checked(l4).expect("a segment's TCP header");
        let body = view.payload();
        assert!(
            body.len() <= gso_size,
            "segment {k} carries {} > {gso_size}",
            body.len()
        );
        assert!(
            k + 1 == count || body.len() == gso_size,
            "only the last is short"
        );
        let seq = SeqNumber(o.seq.0.wrapping_add(payload.len() as u32));
        assert_eq!(view.seq(), seq, "segment {k}'s sequence number");
        let mut flags = o.flags.0;
        if k + 1 < count {
            flags &= !(TcpFlags::PSH.0 | TcpFlags::FIN.0);
        }
        if k > 0 {
            flags &= !TcpFlags::CWR.0;
        }
        assert_eq!(view.flags().0, flags, "segment {k}'s flags");
        // Everything else in the headers (ports, ack, window, urgent, options) is copied.
        let h = &l4[..o.thl];
        let oh = &o.tcp_header;
        assert_eq!(
            (&h[..4], &h[8..13], &h[14..16], &h[18..]),
            (&oh[..4], &oh[8..13], &oh[14..16], &oh[18..])
        );
        assert_eq!(
            &packet[ipv4::HEADER_LEN..o.ihl],
            o.ip_options,
            "IPv4 options copied"
        );
        payload.extend_from_slice(body);
    }
    assert_eq!(
        payload, o.payload,
        "the payloads concatenate to the original"
    );
}

/// A frame `segment_tcp4` must accept, read with the parsers (the property's oracle).
struct Segmentable<'a> {
    eth: EthernetRepr,
    ip: Ipv4Repr,
    ihl: usize,
    ip_options: &'a [u8],
    thl: usize,
    tcp_header: &'a [u8],
    headers: usize,
    seq: SeqNumber,
    flags: TcpFlags,
    payload: &'a [u8],
}

impl<'a> Segmentable<'a> {
    fn parse(frame: &'a [u8]) -> Option<Segmentable<'a>> {
        let (eth, packet) = EthernetRepr::parse(frame).ok()?;
        if eth.ethertype != EtherType::Ipv4 {
            return None;
        }
        let (ip, l4) = Ipv4Repr::parse(packet, false).ok()?;
        if ip.protocol != ipv4::PROTOCOL_TCP || ip.is_fragment() {
            return None;
        }
        let view = TcpSegment::new_checked(l4).ok()?;
        let ihl = usize::from(packet[0] & 0x0F) * 4;
        let thl = view.header_len();
        Some(Segmentable {
            eth,
            ip,
            ihl,
            ip_options: &packet[ipv4::HEADER_LEN..ihl],
            thl,
            tcp_header: &l4[..thl],
            headers: eth.header_len() + ihl + thl,
            seq: view.seq(),
            flags: view.flags(),
            payload: &l4[thl..],
        })
    }
}

/// A GSO seed: which of [`tcp_headers`], the payload length, the VLAN, the IPv4 options,
/// the GSO size and the scratch length.
type GsoCase = (usize, usize, Option<u16>, &'static [u8], u16, u16);

/// Frames for the GSO target: TCP segments with payloads of a few sizes, with and without a
/// VLAN tag and IPv4 options, Ethernet padding after the packet; each with GSO sizes and
/// scratch lengths around the payload's (`GSO_PREFIX` bytes before the frame).
fn gso_inputs() -> Vec<Vec<u8>> {
    let base = Ipv4Repr {
        src: TCP_SRC,
        dst: TCP_DST,
        protocol: ipv4::PROTOCOL_TCP,
        payload_len: 0,
        ttl: 64,
        dscp: 0,
        ecn: Ecn::Ect0,
        ident: 0xFFFE,
        dont_fragment: true,
        more_fragments: false,
        fragment_offset: 0,
    };
    let headers = tcp_headers();
    let cases: [GsoCase; 12] = [
        (4, 1500, None, &[], 400, 600),
        (5, 100, None, &[], 1000, 2000),
        (3, 3, Some(5), &[], 1, 100),
        (2, 64, None, &[1, 1, 1, 0], 16, 200),
        (8, 37, None, &[], 7, 90),
        (11, 500, Some(100), &[], 499, 600),
        (3, 200, None, &[], 50, 60),
        (0, 0, None, &[], 1460, 100),
        (17, 90, None, &[148, 4, 0, 0], 30, 200),
        (9, 6, Some(0x0FFF), &[], 3, 80),
        (6, 10, None, &[], 0, 200),
        (4, 256, None, &[], 128, 0xFFFF),
    ];
    let mut out = Vec::new();
    for (i, (h, len, vlan, ip_options, gso_size, scratch)) in cases.into_iter().enumerate() {
        let (mut header, _) = headers[h].clone();
        // Every flag the segmentation treats specially, on the first input.
        if i == 0 {
            header.flags = header.flags | TcpFlags::CWR | TcpFlags::PSH | TcpFlags::FIN;
        }
        let payload: Vec<u8> = (0..len).map(|b| (b * 7) as u8).collect();
        let packet = ip_packet(base, ip_options, &tcp_segment(header, &payload));
        let eth = EthernetRepr {
            dst: mac(2),
            src: mac(1),
            ethertype: EtherType::Ipv4,
            vlan,
        };
        let mut input = Vec::new();
        input.extend_from_slice(&gso_size.to_be_bytes());
        input.extend_from_slice(&scratch.to_be_bytes());
        let mut f = vec![0u8; eth.header_len()];
        eth.emit(&mut f).expect("room");
        input.extend_from_slice(&f);
        input.extend_from_slice(&packet);
        if i == 1 {
            input.extend_from_slice(&[0; 6]);
        }
        out.push(input);
    }
    out
}

fn mac(last: u8) -> EthernetAddress {
    EthernetAddress([0x02, 0, 0, 0, 0, last])
}

fn ip_packet(repr: Ipv4Repr, options: &[u8], payload: &[u8]) -> Vec<u8> {
    let ihl = ipv4::HEADER_LEN + options.len();
    let mut p = vec![0u8; ihl + payload.len()];
    let r = Ipv4Repr {
        payload_len: (options.len() + payload.len()) as u16,
        ..repr
    };
    r.emit(&mut p).expect("room for the header");
    p[ipv4::HEADER_LEN..ihl].copy_from_slice(options);
    p[ihl..].copy_from_slice(payload);
    // The header now carries options: fix the IHL and the checksum over them.
    p[0] = 0x40 | (ihl / 4) as u8;
    let mut v = Ipv4Packet::new_checked(&mut p[..]).expect("well formed");
    v.fill_checksum();
    p
}

fn tcp_segment(h: TcpHeader, payload: &[u8]) -> Vec<u8> {
    let len = h.header_len();
    let mut s = vec![0u8; len + payload.len()];
    h.emit(&mut s).expect("room for the header");
    s[len..].copy_from_slice(payload);
    tcp::fill_checksum(&mut s, TCP_SRC, TCP_DST);
    s
}

fn base_tcp(flags: TcpFlags, options: TcpOptions) -> TcpHeader {
    TcpHeader {
        src_port: 40000,
        dst_port: 80,
        seq: SeqNumber(0x1000_0000),
        ack: SeqNumber(0x2000_0000),
        flags,
        window: 65535,
        urgent: 0,
        options,
    }
}

/// TCP headers as real stacks send them: Linux's SYN and SYN-ACK options, data segments with
/// timestamps and one to four SACK blocks, FIN, RST, URG, bare ACKs.
fn tcp_headers() -> Vec<(TcpHeader, Vec<u8>)> {
    let syn_opts = TcpOptions {
        mss: Some(1460),
        window_scale: Some(7),
        sack_permitted: true,
        timestamp: Some((0x0102_0304, 0)),
        ..Default::default()
    };
    let ts = TcpOptions {
        timestamp: Some((1000, 999)),
        ..Default::default()
    };
    let mut out = vec![
        (base_tcp(TcpFlags::SYN, syn_opts), vec![]),
        (
            base_tcp(
                TcpFlags::SYN | TcpFlags::ACK,
                TcpOptions {
                    timestamp: Some((77, 0x0102_0304)),
                    window_scale: Some(14),
                    ..syn_opts
                },
            ),
            vec![],
        ),
        (
            base_tcp(
                TcpFlags::SYN | TcpFlags::ECE | TcpFlags::CWR,
                TcpOptions {
                    mss: Some(536),
                    ..Default::default()
                },
            ),
            vec![],
        ),
        (base_tcp(TcpFlags::ACK, ts), vec![]),
        (
            base_tcp(TcpFlags::ACK | TcpFlags::PSH, ts),
            b"GET / HTTP/1.1\r\n".to_vec(),
        ),
        (base_tcp(TcpFlags::ACK | TcpFlags::FIN, ts), vec![]),
        (base_tcp(TcpFlags::RST, TcpOptions::default()), vec![]),
        (
            base_tcp(TcpFlags::ACK | TcpFlags::RST, TcpOptions::default()),
            vec![],
        ),
        (
            TcpHeader {
                urgent: 3,
                ..base_tcp(TcpFlags::ACK | TcpFlags::URG, TcpOptions::default())
            },
            b"abcdef".to_vec(),
        ),
        (
            TcpHeader {
                window: 0,
                ..base_tcp(TcpFlags::ACK | TcpFlags::ECE, ts)
            },
            vec![0; 1],
        ),
    ];
    for n in 1..=4u32 {
        for with_ts in [false, true] {
            let mut o = if with_ts { ts } else { TcpOptions::default() };
            for i in 0..n {
                let left = 0x2000_0000u32.wrapping_add(i * 3000 + 1460);
                o.push_sack(SeqNumber(left), SeqNumber(left + 1460));
            }
            out.push((base_tcp(TcpFlags::ACK, o), vec![]));
        }
    }
    out
}

/// Option areas that stacks send but Sluice does not emit: unknown kinds (MD5, TFO, MPTCP),
/// EOL before the end, odd NOP padding, a lone window scale or MSS.
const RAW_OPTIONS: [&[u8]; 8] = [
    &[
        19, 18, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 1, 1,
    ],
    &[2, 4, 5, 0xb4, 34, 10, 1, 2, 3, 4, 5, 6, 7, 8, 1, 1],
    &[30, 12, 0, 0x81, 1, 2, 3, 4, 5, 6, 7, 8],
    &[2, 4, 5, 0xb4, 0, 0, 0, 0],
    &[3, 3, 8, 0],
    &[1, 1, 1, 4, 2, 1, 1, 1],
    &[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2],
    &[8, 10, 0, 0, 0, 1, 0, 0, 0, 2, 1, 1],
];

/// IPv4 packets: TCP and other protocols, ECN codepoints, DSCP, fragments, options.
fn ip_packets() -> Vec<Vec<u8>> {
    let base = Ipv4Repr {
        src: Ipv4Addr::new(10, 0, 0, 1),
        dst: Ipv4Addr::new(10, 0, 0, 2),
        protocol: ipv4::PROTOCOL_TCP,
        payload_len: 0,
        ttl: 64,
        dscp: 0,
        ecn: Ecn::NotEct,
        ident: 0x1234,
        dont_fragment: true,
        more_fragments: false,
        fragment_offset: 0,
    };
    let mut out = Vec::new();
    for (i, (h, payload)) in tcp_headers().into_iter().take(6).enumerate() {
        let ecn = [Ecn::NotEct, Ecn::Ect0, Ecn::Ect1, Ecn::Ce][i % 4];
        out.push(ip_packet(
            Ipv4Repr { ecn, ..base },
            &[],
            &tcp_segment(h, &payload),
        ));
    }
    let others = [
        Ipv4Repr {
            protocol: 17,
            dscp: 46,
            ttl: 1,
            ..base
        },
        Ipv4Repr {
            protocol: 1,
            dont_fragment: false,
            more_fragments: true,
            ..base
        },
        Ipv4Repr {
            dont_fragment: false,
            fragment_offset: 185,
            ..base
        },
        Ipv4Repr {
            ttl: 255,
            dscp: 10,
            ecn: Ecn::Ce,
            ident: 0,
            ..base
        },
    ];
    for r in others {
        out.push(ip_packet(r, &[], b"\x08\x00payload"));
    }
    // Router alert; NOPs and EOL; a record-route option with room for two addresses.
    for options in [
        &[148, 4, 0, 0][..],
        &[1, 1, 1, 0],
        &[7, 11, 4, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    ] {
        out.push(ip_packet(base, options, b"opts"));
    }
    out
}

fn arp_packets() -> Vec<Vec<u8>> {
    let req = ArpRepr {
        operation: ArpOperation::Request,
        source_mac: mac(1),
        source_ip: Ipv4Addr::new(10, 0, 0, 1),
        target_mac: EthernetAddress::default(),
        target_ip: Ipv4Addr::new(10, 0, 0, 2),
    };
    let reply = ArpRepr {
        operation: ArpOperation::Reply,
        source_mac: mac(2),
        source_ip: req.target_ip,
        target_mac: req.source_mac,
        target_ip: req.source_ip,
    };
    let gratuitous = ArpRepr {
        target_ip: req.source_ip,
        ..req
    };
    let rarp = ArpRepr {
        operation: ArpOperation::Unknown(3),
        ..req
    };
    // RFC 5227's probe: no sender address yet.
    let probe = ArpRepr {
        source_ip: Ipv4Addr::UNSPECIFIED,
        ..req
    };
    let announce = ArpRepr {
        target_mac: EthernetAddress::BROADCAST,
        operation: ArpOperation::Unknown(0xffff),
        ..gratuitous
    };
    let mut out = Vec::new();
    for r in [req, reply, gratuitous, rarp, probe, announce] {
        let mut p = vec![0u8; arp::PACKET_LEN];
        r.emit(&mut p).expect("28 bytes");
        out.push(p.clone());
        // Padded to Ethernet's minimum frame.
        p.resize(46, 0);
        out.push(p);
    }
    out
}

fn ethernet_frames() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let frame = |dst, ethertype, vlan, payload: &[u8]| {
        let r = EthernetRepr {
            dst,
            src: mac(1),
            ethertype,
            vlan,
        };
        let mut f = vec![0u8; r.header_len() + payload.len()];
        let n = r.emit(&mut f).expect("room");
        f[n..].copy_from_slice(payload);
        f
    };
    let arps = arp_packets();
    let ips = ip_packets();
    for (i, vlan) in [None, Some(100), Some(0xA064), Some(0x0FFF)]
        .into_iter()
        .enumerate()
    {
        out.push(frame(
            EthernetAddress::BROADCAST,
            EtherType::Arp,
            vlan,
            &arps[2 * i],
        ));
        out.push(frame(mac(2), EtherType::Ipv4, vlan, &ips[i]));
    }
    out.push(frame(
        mac(2),
        EtherType::Other(0x86dd),
        None,
        &[0x60, 0, 0, 0],
    ));
    out.push(frame(
        mac(2),
        EtherType::Vlan,
        Some(7),
        &[0x81, 0, 0, 8, 8, 0],
    ));
    out.push(frame(
        [1, 0, 0x5e, 0, 0, 1].into(),
        EtherType::Ipv4,
        None,
        &ips[6],
    ));
    out.push(frame(mac(2), EtherType::Other(0x88cc), None, &[]));
    out
}

/// A few dozen small valid inputs for the target named `name`, made by emitting real headers:
/// the checked-in seed corpus (`fuzz/corpus/<name>/`) and the stable tests' starting points.
pub fn seeds(name: &str) -> Vec<Vec<u8>> {
    match name {
        "wire_ethernet" => ethernet_frames(),
        "wire_arp" => arp_packets(),
        "wire_ipv4" => ip_packets(),
        "wire_tcp" => tcp_headers()
            .into_iter()
            .map(|(h, p)| tcp_segment(h, &p))
            .collect(),
        "wire_gso" => gso_inputs(),
        "wire_roce" => super::roce::seeds(),
        "wire_tcp_options" => {
            let mut out: Vec<Vec<u8>> = tcp_headers()
                .into_iter()
                .map(|(h, _)| {
                    let mut b = vec![0u8; h.header_len()];
                    h.emit(&mut b).expect("room");
                    b.split_off(tcp::HEADER_LEN)
                })
                .filter(|o| !o.is_empty())
                .collect();
            out.extend(RAW_OPTIONS.iter().map(|o| o.to_vec()));
            out
        }
        _ => Vec::new(),
    }
}
