//! The MTP header: round trips, the no-panic contract on arbitrary bytes, and the device edits.

use std::net::Ipv4Addr;

use proptest::prelude::*;
use sluice_mtp::wire::edit::Summary;
use sluice_mtp::wire::{
    Encap, Feedback, FeedbackKind, List, MtpError, MtpFrameRepr, MtpRepr, PacketRun, PathletTc,
    FIXED_LEN, FLAG_ACK, FLAG_DATA,
};
use sluice_wire::ethernet::EthernetAddress;

const SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const DST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

fn data_repr<'a>(exclude: &'a [PathletTc], payload_len: u16) -> MtpRepr<'a> {
    MtpRepr {
        src_port: 4000,
        dst_port: 5000,
        flags: FLAG_DATA,
        priority: 3,
        tc: 1,
        msg_id: 77,
        msg_len: 10_000,
        msg_pkts: 8,
        pkt_num: 2,
        pkt_offset: 2 * 1400,
        pkt_len: payload_len,
        exclude: List::Items(exclude),
        feedback_slots: 4,
        ..MtpRepr::default()
    }
}

fn frame(mtp: MtpRepr<'_>, encap: Encap, payload: &[u8]) -> Vec<u8> {
    let repr = MtpFrameRepr::new(
        (EthernetAddress([2, 0, 0, 0, 0, 1]), SRC),
        (EthernetAddress([2, 0, 0, 0, 0, 2]), DST),
        encap,
        mtp,
    );
    let mut buf = vec![0u8; repr.frame_len(payload.len()).unwrap()];
    let n = repr.emit(&mut buf, payload).unwrap();
    assert_eq!(n, buf.len());
    buf
}

#[test]
fn data_packet_round_trips_in_both_encapsulations() {
    let exclude = [PathletTc { pathlet: 9, tc: 1 }];
    let payload = vec![0xab; 1400];
    for encap in [Encap::Ip, Encap::Udp { src_port: 1234 }] {
        let f = frame(data_repr(&exclude, 1400), encap, &payload);
        let (parsed, body) = MtpFrameRepr::parse(&f, true).unwrap();
        assert_eq!(parsed.encap, encap);
        assert_eq!(parsed.mtp, data_repr(&exclude, 1400));
        assert_eq!(body, &payload[..]);
        assert_eq!(parsed.mtp.header_len().unwrap(), FIXED_LEN + 4 + 4 * 8);
    }
}

#[test]
fn ack_lists_round_trip() {
    let fb = [Feedback {
        at: PathletTc { pathlet: 3, tc: 0 },
        kind: FeedbackKind::Ecn,
        value: 1,
    }];
    let sack = [PacketRun {
        msg_id: 5,
        first: 0,
        count: 3,
    }];
    let nack = [PacketRun {
        msg_id: 5,
        first: 3,
        count: 1,
    }];
    let repr = MtpRepr {
        src_port: 5000,
        dst_port: 4000,
        flags: FLAG_ACK,
        ack_feedback: List::Items(&fb),
        sack: List::Items(&sack),
        nack: List::Items(&nack),
        ..MtpRepr::default()
    };
    let f = frame(repr, Encap::Ip, &[]);
    let (parsed, body) = MtpFrameRepr::parse(&f, true).unwrap();
    assert!(body.is_empty());
    assert_eq!(parsed.mtp, repr);
    assert_eq!(
        parsed
            .mtp
            .sack
            .get(0)
            .unwrap()
            .packets()
            .collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
}

#[test]
fn a_corrupted_payload_fails_the_checksum() {
    let mut f = frame(data_repr(&[], 100), Encap::Ip, &[7u8; 100]);
    let last = f.len() - 1;
    f[last] ^= 1;
    assert_eq!(
        MtpFrameRepr::parse(&f, true).unwrap_err(),
        MtpError::Checksum
    );
    assert!(MtpFrameRepr::parse(&f, false).is_ok());
}

#[test]
fn devices_append_feedback_without_breaking_the_checksum_until_slots_run_out() {
    let exclude = [PathletTc { pathlet: 9, tc: 1 }];
    let mut f = frame(data_repr(&exclude, 10), Encap::Ip, &[1u8; 10]);
    let s = Summary::read(&f).unwrap();
    assert_eq!((s.msg_id, s.msg_len, s.tc, s.pkt_num), (77, 10_000, 1, 2));
    assert!(s.excludes(&f, PathletTc { pathlet: 9, tc: 1 }));
    assert!(!s.excludes(&f, PathletTc { pathlet: 9, tc: 0 }));
    for i in 0..4u16 {
        let fb = Feedback {
            at: PathletTc { pathlet: i, tc: 0 },
            kind: FeedbackKind::Rate,
            value: u32::from(i) * 1000,
        };
        assert!(s.push_feedback(&mut f, fb));
    }
    let full = Feedback {
        at: PathletTc { pathlet: 99, tc: 0 },
        kind: FeedbackKind::Ecn,
        value: 1,
    };
    assert!(!s.push_feedback(&mut f, full));
    let (parsed, _) = MtpFrameRepr::parse(&f, true).unwrap();
    assert_eq!(parsed.mtp.feedback.len(), 4);
    assert_eq!(parsed.mtp.feedback.get(3).unwrap().value, 3000);
    assert_ne!(
        parsed.mtp.device_flags & sluice_mtp::wire::DEVICE_FEEDBACK_FULL,
        0
    );
}

#[test]
fn trimming_keeps_a_valid_header_only_packet() {
    for encap in [Encap::Ip, Encap::Udp { src_port: 7 }] {
        let mut f = frame(data_repr(&[], 1000), encap, &[5u8; 1000]);
        let s = Summary::read(&f).unwrap();
        let len = s.trim(&mut f).unwrap();
        f.truncate(len);
        let (parsed, body) = MtpFrameRepr::parse(&f, true).unwrap();
        assert!(parsed.mtp.is_trimmed());
        assert_eq!(
            parsed.mtp.pkt_len, 1000,
            "the trimmed packet still says what it carried"
        );
        assert!(body.is_empty());
        assert!(
            Summary::read(&f).unwrap().trim(&mut f).is_none(),
            "trimmed once only"
        );
    }
}

#[test]
fn emit_refuses_a_packet_outside_its_message() {
    let mut r = data_repr(&[], 10);
    r.pkt_num = 8;
    let mut buf = [0u8; 256];
    assert_eq!(
        r.emit(&mut buf, SRC, DST, &[0; 10]).unwrap_err(),
        MtpError::OutsideMessage
    );
}

fn arb_repr() -> impl Strategy<Value = (u16, u16, u8, u8, u8, u32, u32, u16, u16, u32, u16, u8)> {
    (
        any::<u16>(),
        any::<u16>(),
        0u8..4,
        any::<u8>(),
        any::<u8>(),
        any::<u32>(),
        any::<u32>(),
        any::<u16>(),
        any::<u16>(),
        any::<u32>(),
        0u16..200,
        0u8..4,
    )
}

proptest! {
    /// Any bytes parse to an error or to a header that re-emits to the same bytes (reserved
    /// byte and unfilled slots zeroed) and verifies.
    #[test]
    fn any_bytes_parse_to_an_error_or_re_emit(mut bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        if bytes.len() > 4 {
            bytes[4] = 0x10 | (bytes[4] & 0x0f);
        }
        if let Ok((repr, payload)) = MtpRepr::parse(&bytes, SRC, DST, false) {
            let mut out = vec![0u8; bytes.len()];
            let n = repr.emit(&mut out, SRC, DST, payload).unwrap();
            prop_assert_eq!(n, bytes.len());
            let (again, p2) = MtpRepr::parse(&out, SRC, DST, true).unwrap();
            prop_assert_eq!(again, repr);
            prop_assert_eq!(p2, payload);
            // Outside the checksum, the reserved byte and the unfilled slots, bytes are kept.
            let hdr = repr.header_len().unwrap();
            let filled_end = FIXED_LEN + 4 * repr.exclude.len() + 8 * repr.feedback.len();
            let slots_end = FIXED_LEN + 4 * repr.exclude.len() + 8 * usize::from(repr.feedback_slots);
            for i in 0..bytes.len() {
                let skip = (26..28).contains(&i) || i == 35 || (filled_end..slots_end).contains(&i);
                if !skip {
                    prop_assert_eq!(out[i], bytes[i], "byte {} of {}", i, hdr);
                }
            }
        }
    }

    /// Headers built from fields round-trip through emit and parse.
    #[test]
    fn built_headers_round_trip(
        f in arb_repr(),
        exclude in proptest::collection::vec((any::<u16>(), any::<u8>()), 0..6),
        sack in proptest::collection::vec((any::<u32>(), any::<u16>(), any::<u16>()), 0..6),
    ) {
        let (src_port, dst_port, flags, priority, tc, msg_id, _, _, _, _, pkt_len, slots) = f;
        let exclude: Vec<_> = exclude.into_iter().map(|(pathlet, tc)| PathletTc { pathlet, tc }).collect();
        let sack: Vec<_> = sack.into_iter().map(|(msg_id, first, count)| PacketRun { msg_id, first, count }).collect();
        let data = flags & FLAG_DATA != 0;
        let repr = MtpRepr {
            src_port, dst_port, flags, priority, tc, msg_id,
            msg_len: if data { u32::from(pkt_len) } else { 0 },
            msg_pkts: u16::from(data),
            pkt_len: if data { pkt_len } else { 0 },
            exclude: List::Items(&exclude),
            feedback_slots: slots,
            sack: List::Items(&sack),
            ..MtpRepr::default()
        };
        let payload = vec![0x5a; usize::from(repr.pkt_len)];
        let mut buf = vec![0u8; 2048];
        let n = repr.emit(&mut buf, SRC, DST, &payload).unwrap();
        let (parsed, body) = MtpRepr::parse(&buf[..n], SRC, DST, true).unwrap();
        prop_assert_eq!(parsed, repr);
        prop_assert_eq!(body, &payload[..]);
    }
}

#[test]
fn a_bridge_carries_mtp_across_a_tcp_island_byte_for_byte() {
    use sluice_mtp::wire::tcp_bridge::{is_bridged, mtp_to_tcp, tcp_to_mtp, TCP_OPTION_KIND};
    let exclude = [PathletTc { pathlet: 9, tc: 1 }];
    let payload: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
    let mut original = frame(data_repr(&exclude, 1000), Encap::Ip, &payload);
    let s = Summary::read(&original).unwrap();
    let fb = Feedback {
        at: PathletTc { pathlet: 1, tc: 0 },
        kind: FeedbackKind::Ecn,
        value: 1,
    };
    assert!(s.push_feedback(&mut original, fb));
    let mut tcp = vec![0u8; 2048];
    let n = mtp_to_tcp(&original, &mut tcp).unwrap();
    tcp.truncate(n);
    assert!(is_bridged(&tcp));
    // A TCP-only device sees TCP: protocol 6, data offset 14 words, our option first.
    assert_eq!(tcp[14 + 9], 6);
    assert_eq!(tcp[14 + 20 + 12] >> 4, 14);
    assert_eq!(tcp[14 + 20 + 20], TCP_OPTION_KIND);
    let mut back = vec![0u8; 2048];
    let m = tcp_to_mtp(&tcp, &mut back).unwrap();
    back.truncate(m);
    assert_eq!(
        back, original,
        "the island's far side gets the packet back, byte for byte"
    );
    let (parsed, body) = MtpFrameRepr::parse(&back, true).unwrap();
    assert_eq!(parsed.mtp.feedback.get(0), Some(fb));
    assert_eq!(body, &payload[..]);
    // A segment damaged inside the island is refused, not turned into bad MTP.
    let mut bad = tcp.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0x80;
    assert_eq!(tcp_to_mtp(&bad, &mut back).unwrap_err(), MtpError::Checksum);
}

proptest! {
    /// The bridge takes any bytes in either direction without panicking.
    #[test]
    fn the_bridge_takes_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        use sluice_mtp::wire::tcp_bridge::{mtp_to_tcp, tcp_to_mtp};
        let mut out = vec![0u8; 512];
        let _ = mtp_to_tcp(&bytes, &mut out);
        let _ = tcp_to_mtp(&bytes, &mut out);
        let _ = Summary::read(&bytes);
    }
}
