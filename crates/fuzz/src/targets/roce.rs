//! Properties of the RoCEv2 wire format (sluice-rdma's `wire`), for the `wire_roce` target.
//! The input is an InfiniBand packet as it sits in a UDP payload (BTH .. ICRC). Parsing it
//! never panics; the checked view and the parser agree; what parses is emitted and parses
//! back equal; framed in a fixed Ethernet/IPv4/UDP encapsulation with its ICRC filled, the
//! whole-frame parser gives the same answer; and one flipped invariant bit is caught.

use sluice_rdma::wire::frame::RoceFrameRepr;
use sluice_rdma::wire::packet::pad_for;
use sluice_rdma::wire::{
    icrc, AethRepr, BthRepr, ImmDt, NakCode, Opcode, Psn, RethRepr, RoceError, RocePacket,
    RoceRepr, Syndrome, ROCEV2_UDP_PORT,
};
use sluice_wire::ethernet::{EtherType, EthernetRepr};
use sluice_wire::ipv4::{Ecn, Ipv4Repr};
use sluice_wire::udp::{self, UdpRepr};
use sluice_wire::Ipv4Addr;

/// Ethernet, IPv4 and UDP headers in front of the InfiniBand packet.
const ENCAP_LEN: usize = 14 + 20 + udp::HEADER_LEN;

fn encapsulation() -> (EthernetRepr, Ipv4Repr) {
    let eth = EthernetRepr {
        dst: [2, 0, 0, 0, 0, 2].into(),
        src: [2, 0, 0, 0, 0, 1].into(),
        ethertype: EtherType::Ipv4,
        vlan: None,
    };
    let ip = Ipv4Repr {
        src: Ipv4Addr::new(10, 0, 0, 1),
        dst: Ipv4Addr::new(10, 0, 0, 2),
        protocol: udp::PROTOCOL_UDP,
        payload_len: 0,
        ttl: 64,
        dscp: 26,
        ecn: Ecn::Ect0,
        ident: 1,
        dont_fragment: true,
        more_fragments: false,
        fragment_offset: 0,
    };
    (eth, ip)
}

/// `ib` behind a valid encapsulation, with the ICRC filled when it is long enough.
fn framed(ib: &[u8]) -> Option<Vec<u8>> {
    let (eth, mut ip) = encapsulation();
    let udp_len = udp::HEADER_LEN + ib.len();
    ip.payload_len = u16::try_from(udp_len).ok()?;
    let mut f = vec![0u8; ENCAP_LEN + ib.len()];
    eth.emit(&mut f).ok()?;
    ip.emit(&mut f[14..]).ok()?;
    let u = UdpRepr {
        src_port: 0xC001,
        dst_port: ROCEV2_UDP_PORT,
    };
    u.emit(&mut f[34..], ib.len()).ok()?;
    f[ENCAP_LEN..].copy_from_slice(ib);
    icrc::fill_ipv4(&mut f[14..]).ok()?;
    Some(f)
}

/// The `wire_roce` property on an InfiniBand packet (UDP payload).
pub fn roce(data: &[u8]) {
    let parsed = RoceRepr::parse(data);
    let view = RocePacket::new_checked(data);
    match (&parsed, &view) {
        (Ok((r, p)), Ok(v)) => {
            assert_eq!((v.repr(), v.payload()), (r, *p));
        }
        (Err(e), Err(f)) => assert_eq!(e, f),
        _ => panic!("view and parser disagree on {data:02x?}"),
    }
    // The whole frame parser on arbitrary bytes.
    let _ = RoceFrameRepr::parse(data);

    if let Ok((repr, payload)) = parsed {
        let mut out = vec![0u8; repr.packet_len(payload.len())];
        assert_eq!(repr.emit(&mut out, payload), Ok(out.len()));
        let short = out.len() - 1;
        assert!(matches!(
            repr.emit(&mut out[..short], payload),
            Err(RoceError::BufferTooSmall { .. })
        ));
        let normal = RoceRepr {
            bth: BthRepr {
                pad_count: pad_for(payload.len()),
                ..repr.bth
            },
            ..repr
        };
        assert_eq!(RoceRepr::parse(&out), Ok((normal, payload)), "{repr:?}");
    }

    let Some(frame) = framed(data) else {
        // Only a packet too short for BTH and ICRC (or too long for IPv4) cannot be framed.
        assert!(data.len() < 16 || data.len() > 65_000, "{data:02x?}");
        return;
    };
    let whole = RoceFrameRepr::parse(&frame);
    match (&whole, &parsed) {
        (Ok((f, p)), Ok((r, q))) => assert_eq!((&f.roce, p), (r, q)),
        (Err(e), Err(f)) => assert_eq!(e, f),
        _ => panic!("frame {whole:?} and packet {parsed:?} disagree"),
    }
    if whole.is_ok() {
        // One flipped bit past the BTH's variant byte 4 is refused.
        let at = ENCAP_LEN + 5 + usize::from(data[0]) % (data.len() - 5);
        let mut bad = frame.clone();
        bad[at] ^= 1 << (data[1] % 8);
        assert!(RoceFrameRepr::parse(&bad).is_err(), "flip at {at} passed");
    }
}

/// InfiniBand packets for every opcode, with ACKs, NAKs, odd payload lengths and a few
/// broken ones: the seed corpus of `wire_roce`.
pub fn seeds() -> Vec<Vec<u8>> {
    let syndromes = [
        Syndrome::Ack { credits: 31 },
        Syndrome::Nak(NakCode::PsnSequenceError),
        Syndrome::Nak(NakCode::RemoteAccessError),
        Syndrome::RnrNak { timer: 14 },
    ];
    let mut out = Vec::new();
    for (i, &opcode) in Opcode::ALL.iter().enumerate() {
        let ext = opcode.headers();
        let payload: Vec<u8> = if ext.payload {
            (0..i as u8 * 3).collect()
        } else {
            Vec::new()
        };
        let repr = RoceRepr {
            bth: BthRepr {
                opcode,
                solicited: i % 3 == 0,
                migreq: true,
                pad_count: 0,
                pkey: 0xFFFF,
                fecn: i % 5 == 0,
                becn: false,
                dest_qp: 0x11 + i as u32,
                ack_req: !opcode.is_response(),
                psn: Psn::new(0xFF_FFF0 + i as u32),
            },
            reth: ext.reth.then_some(RethRepr {
                va: 0x7F00_0000_1000,
                rkey: 0x1234,
                dma_len: 4096,
            }),
            aeth: ext.aeth.then_some(AethRepr {
                syndrome: syndromes[i % syndromes.len()],
                msn: i as u32,
            }),
            immdt: ext.immdt.then_some(ImmDt(0xCAFE_F00D)),
        };
        let mut b = vec![0u8; repr.packet_len(payload.len())];
        if repr.emit(&mut b, &payload).is_ok() {
            if let Some(f) = framed(&b) {
                // The ICRC the framed copy computed, so the seed is a packet as sent.
                b.copy_from_slice(&f[ENCAP_LEN..]);
            }
            out.push(b);
        }
    }
    let first = out.first().cloned().unwrap_or_default();
    let mut unknown = first.clone();
    unknown[0] = 0x14; // FETCH_ADD: not supported
    let mut tver = first.clone();
    tver[1] |= 0x01;
    let mut reserved = out[Opcode::Acknowledge as usize].clone();
    reserved[12] = 0x40; // AETH type 10: reserved
    out.extend([unknown, tver, reserved, first[..15].to_vec()]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_parse_and_frame() {
        let seeds = seeds();
        let good: Vec<_> = seeds
            .iter()
            .filter(|s| RoceRepr::parse(s).is_ok())
            .collect();
        assert_eq!(good.len(), Opcode::ALL.len());
        for s in &good {
            let f = framed(s).expect("long enough");
            assert!(RoceFrameRepr::parse(&f).is_ok());
            // The seed carries the ICRC it was sent with.
            assert_eq!(f[ENCAP_LEN..], s[..]);
        }
        for s in &seeds {
            roce(s);
        }
    }
}
