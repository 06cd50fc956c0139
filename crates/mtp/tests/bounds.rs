//! Bad input: a flood of never-completed messages, message-id conflicts, over-long
//! feedback lists, and arbitrary frames, against the configured bounds.

mod common;

use common::{config, Pair, IP_A, IP_B, MAC_A, MAC_B};
use proptest::prelude::*;
use sluice_mtp::stack::{MtpStack, StackConfig};
use sluice_mtp::wire::edit::Summary;
use sluice_mtp::wire::{
    Encap, Feedback, FeedbackKind, List, MtpFrameRepr, MtpRepr, PathletTc, FLAG_ACK, FLAG_DATA,
};
use sluice_wire::ethernet::{EtherType, EthernetRepr};
use sluice_wire::ipv4::{Ecn, Ipv4Repr};

const PORT: u16 = 7000;

fn frame(mtp: MtpRepr<'_>, payload: &[u8]) -> Vec<u8> {
    let repr = MtpFrameRepr {
        eth: EthernetRepr {
            dst: MAC_B,
            src: MAC_A,
            ethertype: EtherType::Ipv4,
            vlan: None,
        },
        ip: Ipv4Repr {
            src: IP_A,
            dst: IP_B,
            protocol: 0,
            payload_len: 0,
            ttl: 64,
            dscp: 0,
            ecn: Ecn::NotEct,
            ident: 0,
            dont_fragment: true,
            more_fragments: false,
            fragment_offset: 0,
        },
        encap: Encap::Ip,
        mtp,
    };
    let mut buf = vec![0; repr.frame_len(payload.len()).unwrap()];
    repr.emit(&mut buf, payload).unwrap();
    buf
}

fn first_packet(msg_id: u32, msg_len: u32, pkts: u16, payload: &[u8]) -> Vec<u8> {
    frame(
        MtpRepr {
            src_port: 4000,
            dst_port: PORT,
            flags: FLAG_DATA,
            msg_id,
            msg_len,
            msg_pkts: pkts,
            pkt_num: 0,
            pkt_offset: 0,
            pkt_len: payload.len() as u16,
            feedback_slots: 4,
            ..MtpRepr::default()
        },
        payload,
    )
}

fn receiver(cfg: StackConfig) -> MtpStack {
    let mut b = MtpStack::new(cfg).unwrap();
    b.bind(PORT).unwrap();
    b.set_neighbor(IP_A, MAC_A);
    b
}

#[test]
fn a_flood_of_first_packets_evicts_the_oldest_and_stays_bounded() {
    let mut cfg = config(MAC_B, IP_B);
    cfg.reassembly_messages = 16;
    cfg.reassembly_bytes = 64 * 1024;
    cfg.max_message_len = 16 * 1024;
    let mut b = receiver(cfg);
    let mut buf = vec![0; 2048];
    for id in 0..10_000u32 {
        b.handle_frame(u64::from(id), &first_packet(id, 10_000, 8, &[1; 1000]));
        while b.poll_transmit(0, &mut buf).is_some() {}
        let u = b.usage();
        assert!(
            u.reassembly_messages <= 16 && u.reassembly_bytes <= 64 * 1024,
            "{u:?}"
        );
    }
    let c = b.counters();
    // 6 messages of 10 000 bytes fit in 64 KiB: every later one evicts the oldest.
    assert_eq!(c.reassembly_evictions, 10_000 - 6);
    assert_eq!(b.usage().reassembly_messages, 6);
    // The newest is still there: its second packet is taken, the oldest's is not.
    let second = |id: u32| {
        frame(
            MtpRepr {
                src_port: 4000,
                dst_port: PORT,
                flags: FLAG_DATA,
                msg_id: id,
                msg_len: 10_000,
                msg_pkts: 8,
                pkt_num: 1,
                pkt_offset: 1000,
                pkt_len: 1000,
                feedback_slots: 4,
                ..MtpRepr::default()
            },
            &[2; 1000],
        )
    };
    b.handle_frame(0, &second(9_999));
    assert_eq!(b.counters().reassembly_evictions, 10_000 - 6);
    b.handle_frame(0, &second(0));
    assert_eq!(b.counters().reassembly_evictions, 10_000 - 5);
    // Too long for max_message_len: refused outright.
    b.handle_frame(0, &first_packet(77_777, 20_000, 20, &[1; 1000]));
    assert_eq!(b.counters().too_long, 1);
}

#[test]
fn a_packet_disagreeing_with_its_message_id_is_refused() {
    let mut b = receiver(config(MAC_B, IP_B));
    b.handle_frame(0, &first_packet(5, 3000, 3, &[1; 1000]));
    b.handle_frame(0, &first_packet(5, 4000, 4, &[1; 1000]));
    assert_eq!(b.counters().msg_id_conflicts, 1);
    b.handle_frame(0, &first_packet(5, 3000, 4, &[1; 1000]));
    assert_eq!(b.counters().msg_id_conflicts, 2);
    assert_eq!(b.usage().reassembly_messages, 1);
    // 65535 packets for 10 bytes: refused (its bitmap would escape the byte bound).
    b.handle_frame(0, &first_packet(6, 10, u16::MAX, &[1; 10]));
    assert_eq!(b.counters().malformed, 1);
    assert_eq!(b.usage().reassembly_messages, 1);
}

#[test]
fn feedback_longer_than_the_bound_is_truncated_with_a_counter() {
    let mut cb = config(MAC_B, IP_B);
    cb.max_feedback = 2;
    let mut b = receiver(cb);
    let mut f = first_packet(9, 10, 1, &[3; 10]);
    let s = Summary::read(&f).unwrap();
    for i in 0..4 {
        let fb = Feedback {
            at: PathletTc { pathlet: i, tc: 0 },
            kind: FeedbackKind::Ecn,
            value: 0,
        };
        assert!(s.push_feedback(&mut f, fb));
    }
    b.handle_frame(0, &f);
    assert_eq!(b.counters().feedback_truncated, 1);
    let mut buf = vec![0; 2048];
    let n = b.poll_transmit(0, &mut buf).expect("an ACK");
    let (ack, _) = MtpFrameRepr::parse(&buf[..n], true).unwrap();
    assert!(ack.mtp.is_ack());
    assert_eq!(ack.mtp.ack_feedback.len(), 2, "echoed up to the bound");

    // And at the sender: an ACK with more SACK runs and feedback than its bounds.
    let mut ca = config(MAC_A, IP_A);
    ca.max_sack_runs = 2;
    let mut p = Pair::with(ca, config(MAC_B, IP_B), 1);
    let runs: Vec<_> = (0..5)
        .map(|i| sluice_mtp::wire::PacketRun {
            msg_id: i,
            first: 0,
            count: 1,
        })
        .collect();
    let ack = frame(
        MtpRepr {
            src_port: 1,
            dst_port: 2,
            flags: FLAG_ACK,
            sack: List::Items(&runs),
            ..MtpRepr::default()
        },
        &[],
    );
    // Addressed to B (the rig's frame helper), so B is the sender here.
    let mut cb = config(MAC_B, IP_B);
    cb.max_sack_runs = 2;
    p.b = MtpStack::new(cb).unwrap();
    p.b.handle_frame(0, &ack);
    assert_eq!(p.b.counters().feedback_truncated, 1);
    assert_eq!(
        p.b.counters().stale_acks,
        2,
        "only max_sack_runs runs looked at"
    );
}

#[test]
fn frames_not_for_us_or_corrupt_are_counted() {
    let mut b = receiver(config(MAC_B, IP_B));
    let mut f = first_packet(1, 10, 1, &[3; 10]);
    let last = f.len() - 1;
    f[last] ^= 0xff;
    b.handle_frame(0, &f);
    assert_eq!(b.counters().bad_checksum, 1);
    b.handle_frame(0, &[0u8; 10]);
    assert_eq!(b.counters().malformed, 1);
    let mut other = receiver(config(MAC_B, std::net::Ipv4Addr::new(10, 0, 0, 9)));
    other.handle_frame(0, &first_packet(1, 10, 1, &[3; 10]));
    assert_eq!(other.counters().not_for_us, 1);
    let f = first_packet(1, 10, 1, &[3; 10]);
    let mut unbound = MtpStack::new(config(MAC_B, IP_B)).unwrap();
    unbound.handle_frame(0, &f);
    assert_eq!(unbound.counters().unknown_port, 1);
}

fn bounded() -> StackConfig {
    let mut cfg = config(MAC_B, IP_B);
    cfg.reassembly_messages = 8;
    cfg.reassembly_bytes = 32 * 1024;
    cfg.max_message_len = 16 * 1024;
    cfg.completed_ids = 8;
    cfg.ack_queue = 8;
    cfg.endpoint_queue = 4;
    cfg.max_pathlets = 8;
    cfg
}

fn check_bounds(b: &MtpStack) {
    let u = b.usage();
    assert!(
        u.reassembly_messages <= 8 && u.reassembly_bytes <= 32 * 1024,
        "{u:?}"
    );
    assert!(
        u.remembered_ids <= 8 && u.acks_queued <= 8 && u.queued_messages <= 4,
        "{u:?}"
    );
    assert!(u.pathlets <= 8, "{u:?}");
}

proptest! {
    /// Arbitrary bytes into handle_frame: no panic, state within the configured bounds.
    #[test]
    fn arbitrary_frames_never_panic_or_grow(frames in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..40)) {
        let mut b = receiver(bounded());
        let mut buf = vec![0; 2048];
        for (i, f) in frames.iter().enumerate() {
            b.handle_frame(i as u64, f);
            let _ = b.poll_transmit(i as u64, &mut buf);
            b.handle_timeout(i as u64 * 1_000_000);
            check_bounds(&b);
        }
    }

    /// Well-formed data and ACK frames with arbitrary fields (the checksum is right, so
    /// they reach the deep paths): no panic, state within bounds.
    #[test]
    fn arbitrary_mtp_headers_never_panic_or_grow(
        pkts in prop::collection::vec((any::<u32>(), 0u32..40_000, 1u16..40, any::<u16>(), 0usize..1200, any::<bool>(), 0u16..64), 0..60)
    ) {
        let mut b = receiver(bounded());
        let mut buf = vec![0; 2048];
        for (i, (id, len, npk, pn, plen, ack, first)) in pkts.into_iter().enumerate() {
            let id = id % 16;
            let pn = pn % npk;
            let plen = plen.min(len as usize);
            let off = (len as usize - plen) as u32;
            let runs = [sluice_mtp::wire::PacketRun { msg_id: id, first, count: 3 }];
            let mtp = MtpRepr {
                src_port: 4000,
                dst_port: PORT,
                flags: FLAG_DATA | if ack { FLAG_ACK } else { 0 },
                msg_id: id,
                msg_len: len,
                msg_pkts: npk,
                pkt_num: pn,
                pkt_offset: off,
                pkt_len: plen as u16,
                feedback_slots: 2,
                sack: List::Items(if ack { &runs } else { &[] }),
                nack: List::Items(if ack { &runs } else { &[] }),
                ..MtpRepr::default()
            };
            b.handle_frame(i as u64, &frame(mtp, &vec![9; plen]));
            while b.poll_transmit(i as u64, &mut buf).is_some() {}
            check_bounds(&b);
        }
    }
}
