//! Properties of the RoCEv2 wire format: emit -> parse gives back every field for every
//! opcode; arbitrary bytes never panic the parsers; every truncation is a typed error; a
//! corrupted byte fails the ICRC (or an earlier check), never passes.

mod common;

use proptest::prelude::*;
use sluice_rdma::wire::frame::RoceFrameRepr;
use sluice_rdma::wire::packet::pad_for;
use sluice_rdma::wire::{
    AethRepr, BthRepr, ImmDt, NakCode, Opcode, Psn, RethRepr, RoceError, RocePacket, RoceRepr,
    Syndrome,
};
use sluice_wire::WireError;

fn arb_syndrome() -> impl Strategy<Value = Syndrome> {
    prop_oneof![
        (0u8..32).prop_map(|credits| Syndrome::Ack { credits }),
        (0u8..32).prop_map(|timer| Syndrome::RnrNak { timer }),
        prop::sample::select(NakCode::ALL.to_vec()).prop_map(Syndrome::Nak),
    ]
}

/// Headers for any opcode with random fields, and a payload if the opcode carries one.
fn arb_packet() -> impl Strategy<Value = (RoceRepr, Vec<u8>)> {
    (
        prop::sample::select(Opcode::ALL.to_vec()),
        (
            any::<bool>(),
            any::<bool>(),
            any::<u16>(),
            any::<bool>(),
            any::<bool>(),
        ),
        (0u32..1 << 24, any::<bool>(), 0u32..1 << 24),
        (any::<u64>(), any::<u32>(), any::<u32>()),
        (arb_syndrome(), 0u32..1 << 24, any::<u32>()),
        prop::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(
            |(
                opcode,
                (se, m, pkey, fecn, becn),
                (qp, ack, psn),
                (va, rkey, len),
                (syn, msn, imm),
                mut payload,
            )| {
                let ext = opcode.headers();
                if !ext.payload {
                    payload.clear();
                }
                let repr = RoceRepr {
                    bth: BthRepr {
                        opcode,
                        solicited: se,
                        migreq: m,
                        pad_count: pad_for(payload.len()),
                        pkey,
                        fecn,
                        becn,
                        dest_qp: qp,
                        ack_req: ack,
                        psn: Psn::new(psn),
                    },
                    reth: ext.reth.then_some(RethRepr {
                        va,
                        rkey,
                        dma_len: len,
                    }),
                    aeth: ext.aeth.then_some(AethRepr { syndrome: syn, msn }),
                    immdt: ext.immdt.then_some(ImmDt(imm)),
                };
                (repr, payload)
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn emit_then_parse_gives_back_every_field((repr, payload) in arb_packet()) {
        let frame = common::emit(repr, &payload);
        prop_assert_eq!((frame.len() - 42) % 4, 0, "the UDP payload is padded to 4 bytes");
        let (got, p) = RoceFrameRepr::parse(&frame).expect("our own frame parses");
        prop_assert_eq!(got.roce, repr);
        prop_assert_eq!(p, &payload[..]);
        let sent = common::frame_repr(repr);
        prop_assert_eq!(got.eth, sent.eth);
        prop_assert_eq!(got.src_port, sent.src_port);
        prop_assert_eq!(
            (got.ip.src, got.ip.dst, got.ip.ttl, got.ip.dscp, got.ip.ecn, got.ip.ident),
            (sent.ip.src, sent.ip.dst, sent.ip.ttl, sent.ip.dscp, sent.ip.ecn, sent.ip.ident)
        );
        // The view over the UDP payload agrees with the parser.
        let view = RocePacket::new_checked(&frame[42..]).expect("valid");
        prop_assert_eq!(view.repr(), &repr);
        prop_assert_eq!(view.payload(), &payload[..]);
        prop_assert_eq!(&view.icrc().to_le_bytes()[..], &frame[frame.len() - 4..]);
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = RoceRepr::parse(&data);
        let _ = RocePacket::new_checked(&data[..]);
        let _ = RoceFrameRepr::parse(&data);
        let _ = sluice_rdma::wire::icrc::compute_ipv4(&data);
        // A valid encapsulation in front of arbitrary InfiniBand bytes reaches the IB parsers.
        let mut framed = common::emit(common::roce(Opcode::SendOnly, 1, Syndrome::Ack { credits: 0 }), &[]);
        framed.truncate(42);
        framed.extend(&data);
        let udp_len = (framed.len() - 34) as u16;
        framed[38..40].copy_from_slice(&udp_len.to_be_bytes());
        framed[16..18].copy_from_slice(&(udp_len + 20).to_be_bytes());
        let _ = RoceFrameRepr::parse(&framed);
    }

    #[test]
    fn every_truncation_is_a_typed_error((repr, payload) in arb_packet()) {
        let frame = common::emit(repr, &payload);
        for cut in 0..frame.len() {
            let e = RoceFrameRepr::parse(&frame[..cut]).expect_err("a cut frame is refused");
            prop_assert!(
                matches!(e, RoceError::Encapsulation(WireError::Truncated) | RoceError::Truncated { .. }),
                "cut at {}: {:?}", cut, e
            );
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn a_corrupted_byte_fails_the_icrc((repr, payload) in arb_packet(), at: prop::sample::Index, bit in 0u8..8) {
        let frame = common::emit(repr, &payload);
        // From the BTH's byte 5 to the end: all invariant (byte 4, FECN/BECN, is not).
        let i = 42 + 5 + at.index(frame.len() - 47);
        let mut bad = frame.clone();
        bad[i] ^= 1 << bit;
        let e = RoceFrameRepr::parse(&bad).expect_err("corruption is caught");
        let header_end = 42 + repr.header_len();
        if i >= header_end {
            // Payload, pad or ICRC: nothing but the ICRC can notice.
            prop_assert!(matches!(e, RoceError::Icrc { .. }), "byte {}: {:?}", i, e);
        }
    }
}

#[test]
fn variant_fields_may_change_in_flight() {
    // What a switch rewrites (ECN CE, TTL, and the IP checksum with them; FECN/BECN) keeps
    // the ICRC good.
    let frame = common::emit(
        common::roce(Opcode::WriteOnly, 9, Syndrome::Ack { credits: 0 }),
        b"abc",
    );
    let mut marked = frame.clone();
    sluice_wire::ipv4::set_ecn_ce(&mut marked[14..]).expect("IPv4");
    marked[14 + 8] -= 1;
    marked[24..26].fill(0);
    let sum = sluice_wire::checksum::checksum(&marked[14..34]);
    marked[24..26].copy_from_slice(&sum.to_be_bytes());
    marked[42 + 4] = 0x80; // FECN
    let (got, p) = RoceFrameRepr::parse(&marked).expect("still valid");
    assert!(got.roce.bth.fecn);
    assert_eq!(got.ip.ttl, 63);
    assert_eq!(p, b"abc");
    let mut bad = marked.clone();
    bad[42 + 12 + 15] ^= 1; // RETH DMA length
    assert!(matches!(
        RoceFrameRepr::parse(&bad),
        Err(RoceError::Icrc { .. })
    ));
}
