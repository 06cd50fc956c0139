//! Property: whatever arrives from the wire and whatever an application posts, a QP never
//! panics and never reads or writes memory outside a registered region (issue 16, "Bad
//! input"). Arbitrary packets (every opcode, PSNs around the expected one, forged keys,
//! addresses and lengths, payloads of any size) and arbitrary work requests are fed to a
//! QP whose memory records every access.

use proptest::prelude::*;
use sluice_rdma::qp::{Cqs, Ctx, Memory, QpConfig, QueuePair, RecvWr, Remote, SendOp, SendWr, Sge};
use sluice_rdma::verbs::{Access, CompletionQueue, Key, MrTable, PdId, Region};
use sluice_rdma::wire::{
    AethRepr, BthRepr, ImmDt, NakCode, Opcode, Psn, RethRepr, RoceRepr, Syndrome,
};

/// The registered window of the backing: [LO, HI).
const LO: u64 = 16 * 1024;
const HI: u64 = 48 * 1024;

/// 64 KiB of backing; every access outside [LO, HI) is a failure.
struct Guarded {
    bytes: Vec<u8>,
    outside: usize,
}

impl Memory for Guarded {
    fn read(&self, backing: u32, offset: u64, out: &mut [u8]) -> bool {
        assert!(
            backing == 0 && offset >= LO && offset + out.len() as u64 <= HI,
            "read outside the region: {offset} + {}",
            out.len()
        );
        out.copy_from_slice(&self.bytes[offset as usize..offset as usize + out.len()]);
        true
    }
    fn write(&mut self, backing: u32, offset: u64, data: &[u8]) -> bool {
        if backing != 0 || offset < LO || offset + data.len() as u64 > HI {
            self.outside += 1;
            return false;
        }
        self.bytes[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        true
    }
}

fn opcode() -> impl Strategy<Value = Opcode> {
    (0usize..Opcode::ALL.len()).prop_map(|i| Opcode::ALL[i])
}

fn packet() -> impl Strategy<Value = (RoceRepr, Vec<u8>)> {
    (
        opcode(),
        -4i32..40,
        any::<(u64, u32, u32)>(),
        prop_oneof![Just(0x1000u64), any::<u64>(), 0x1000u64..0x9000],
        any::<u32>(),
        0u8..4,
        proptest::collection::vec(any::<u8>(), 0..2100),
        any::<bool>(),
    )
        .prop_map(
            |(op, psn_off, (_, rkey, len), va, imm, syn, payload, ack_req)| {
                let h = op.headers();
                let key = if rkey % 3 == 0 { 0x101 } else { rkey };
                let repr = RoceRepr {
                    bth: BthRepr {
                        opcode: op,
                        solicited: false,
                        migreq: false,
                        pad_count: 0,
                        pkey: 0xffff,
                        fecn: false,
                        becn: false,
                        dest_qp: 1,
                        ack_req,
                        psn: Psn::new((100i32 + psn_off) as u32),
                    },
                    reth: h.reth.then_some(RethRepr {
                        va,
                        rkey: key,
                        dma_len: len % 70_000,
                    }),
                    aeth: h.aeth.then_some(AethRepr {
                        syndrome: match syn {
                            0 => Syndrome::Ack { credits: 31 },
                            1 => Syndrome::RnrNak { timer: 1 },
                            2 => Syndrome::Nak(NakCode::PsnSequenceError),
                            _ => Syndrome::Nak(NakCode::RemoteAccessError),
                        },
                        msn: 0,
                    }),
                    immdt: h.immdt.then_some(ImmDt(imm)),
                };
                let payload = if h.payload { payload } else { Vec::new() };
                (repr, payload)
            },
        )
}

fn send_wr() -> impl Strategy<Value = SendWr> {
    (
        0u8..3,
        prop_oneof![Just(0x1000u64), any::<u64>(), 0x1000u64..0x9000],
        0u32..40_000,
        prop_oneof![Just(0x101u32), any::<u32>()],
        prop_oneof![Just(0x1000u64), any::<u64>()],
    )
        .prop_map(|(kind, addr, len, key, raddr)| {
            let remote = Remote {
                addr: raddr,
                rkey: Key(key),
            };
            SendWr {
                wr_id: u64::from(len),
                op: match kind {
                    0 => SendOp::Send { imm: None },
                    1 => SendOp::Write {
                        remote,
                        imm: Some(1),
                    },
                    _ => SendOp::Read { remote },
                },
                sge: Sge {
                    addr,
                    len,
                    lkey: Key(key),
                },
                signaled: true,
                solicited: false,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    #[test]
    fn no_packet_or_work_request_reaches_outside_registered_memory(
        packets in proptest::collection::vec(packet(), 1..40),
        sends in proptest::collection::vec(send_wr(), 0..6),
        recvs in proptest::collection::vec((0x1000u64..0xa000, 0u32..20_000), 0..4),
    ) {
        let mut mrs = MrTable::new(4);
        let all = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE).union(Access::REMOTE_READ);
        let key = mrs
            .register(Region { pd: PdId(1), addr: 0x1000, len: HI - LO, access: all, backing: 0, offset: LO })
            .unwrap();
        prop_assert_eq!(key, Key(0x101));
        let mut mem = Guarded { bytes: vec![0; 64 * 1024], outside: 0 };
        let (mut scq, mut rcq) = (CompletionQueue::new(64), CompletionQueue::new(64));
        let mut qp = QueuePair::new(QpConfig {
            qpn: 1,
            dest_qpn: 2,
            pd: PdId(1),
            mtu: 1024,
            sq_psn: Psn::new(100),
            rq_psn: Psn::new(100),
            ack_timeout: 1000,
            retry_cnt: 2,
            rnr_retry: 1,
            min_rnr_timer: 1,
            max_inflight: 16,
            max_rd_atomic: 16,
            sq_cap: 8,
            rq_cap: 8,
        });
        for (addr, len) in recvs {
            let _ = qp.post_recv(RecvWr { wr_id: 9, sge: Sge { addr, len, lkey: key } });
        }
        for wr in sends {
            let _ = qp.post_send(wr);
        }
        let mut buf = vec![0u8; 4096];
        let mut now = 0;
        for (repr, payload) in &packets {
            now += 500;
            let mut ctx = Ctx { mrs: &mrs, mem: &mut mem, cqs: Cqs::Split { send: &mut scq, recv: &mut rcq }, now };
            qp.handle_packet(&mut ctx, repr, payload);
            for _ in 0..4 {
                if qp.poll_transmit(&mut ctx, &mut buf).is_none() {
                    break;
                }
            }
            qp.handle_timeout(&mut ctx);
        }
        prop_assert_eq!(mem.outside, 0, "a write outside the region was attempted");
    }
}
