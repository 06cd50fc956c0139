//! Frames the integration tests share: one per RC opcode with distinctive field values.
#![allow(dead_code)] // each test file uses part of it

pub mod host;

use sluice_rdma::wire::frame::{entropy_src_port, RoceFrameRepr};
use sluice_rdma::wire::{
    AethRepr, BthRepr, ImmDt, NakCode, Opcode, Psn, RethRepr, RoceRepr, Syndrome,
};
use sluice_wire::ethernet::{EtherType, EthernetRepr};
use sluice_wire::ipv4::{Ecn, Ipv4Repr};
use sluice_wire::Ipv4Addr;

/// The requester's QP.
pub const SRC_QP: u32 = 0x11;
/// The responder's QP.
pub const DST_QP: u32 = 0x0012_3456;

/// RoCEv2 headers for `opcode` with the extension headers it needs.
pub fn roce(opcode: Opcode, psn: u32, syndrome: Syndrome) -> RoceRepr {
    let ext = opcode.headers();
    RoceRepr {
        bth: BthRepr {
            opcode,
            solicited: matches!(opcode, Opcode::SendOnlyImm),
            migreq: true,
            pad_count: 0,
            pkey: 0xFFFF,
            fecn: false,
            becn: false,
            dest_qp: DST_QP,
            ack_req: !opcode.is_response(),
            psn: Psn::new(psn),
        },
        reth: ext.reth.then_some(RethRepr {
            va: 0x0000_7F00_DEAD_0000,
            rkey: 0x0000_1234,
            dma_len: 4096,
        }),
        aeth: ext.aeth.then_some(AethRepr {
            syndrome,
            msn: 0x00_0042,
        }),
        immdt: ext.immdt.then_some(ImmDt(0xCAFE_F00D)),
    }
}

/// The encapsulation: fixed MACs and addresses, ECT(0), DSCP 26.
pub fn frame_repr(roce: RoceRepr) -> RoceFrameRepr {
    RoceFrameRepr {
        eth: EthernetRepr {
            dst: [0x02, 0, 0, 0, 0, 2].into(),
            src: [0x02, 0, 0, 0, 0, 1].into(),
            ethertype: EtherType::Ipv4,
            vlan: None,
        },
        ip: Ipv4Repr {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
            protocol: 17,
            payload_len: 0,
            ttl: 64,
            dscp: 26,
            ecn: Ecn::Ect0,
            ident: 0x1234,
            dont_fragment: true,
            more_fragments: false,
            fragment_offset: 0,
        },
        src_port: entropy_src_port(SRC_QP, DST_QP),
        roce,
    }
}

/// A whole frame.
pub fn emit(roce: RoceRepr, payload: &[u8]) -> Vec<u8> {
    let f = frame_repr(roce);
    let mut buf = vec![0u8; f.frame_len(payload.len())];
    f.emit(&mut buf, payload).expect("valid repr");
    buf
}

/// One frame per opcode (PSN 100 + its number), with a NAK and an RNR NAK besides.
pub fn sample_frames() -> Vec<(Opcode, Vec<u8>)> {
    let mut out: Vec<(Opcode, Vec<u8>)> = Opcode::ALL
        .iter()
        .map(|&op| {
            let payload: &[u8] = if op.headers().payload {
                b"sluice rdma!!"
            } else {
                b""
            };
            let r = roce(
                op,
                100 + u32::from(op.to_u8()),
                Syndrome::Ack { credits: 31 },
            );
            (op, emit(r, payload))
        })
        .collect();
    for s in [
        Syndrome::Nak(NakCode::RemoteAccessError),
        Syndrome::RnrNak { timer: 14 },
    ] {
        out.push((
            Opcode::Acknowledge,
            emit(roce(Opcode::Acknowledge, 7, s), b""),
        ));
    }
    out
}
