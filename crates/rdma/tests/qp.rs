//! Two reliable-connected QPs in virtual time, their packets serialized and parsed by the
//! wire code and carried by a link that can lose and duplicate them: SEND, WRITE and READ
//! move exact bytes to exact addresses, completions come in order with the right status,
//! and the error paths (a forged rkey, no receive posted) do what the IBA says.

use sluice_rdma::qp::{
    Cqs, Ctx, Memory, Nanos, QpConfig, QueuePair, RecvWr, Remote, SendOp, SendWr, Sge,
};
use sluice_rdma::verbs::{
    Access, CompletionQueue, Key, MrTable, PdId, QpState, Region, WcOpcode, WcStatus,
    WorkCompletion,
};
use sluice_rdma::wire::{Psn, RoceRepr};

const MTU: u32 = 1024;
const BUF: usize = 256 * 1024;

struct Mem(Vec<Vec<u8>>);

impl Memory for Mem {
    fn read(&self, backing: u32, offset: u64, out: &mut [u8]) -> bool {
        let Some(b) = self.0.get(backing as usize) else {
            return false;
        };
        let Some(src) = b.get(offset as usize..offset as usize + out.len()) else {
            return false;
        };
        out.copy_from_slice(src);
        true
    }
    fn write(&mut self, backing: u32, offset: u64, data: &[u8]) -> bool {
        let Some(b) = self.0.get_mut(backing as usize) else {
            return false;
        };
        let Some(dst) = b.get_mut(offset as usize..offset as usize + data.len()) else {
            return false;
        };
        dst.copy_from_slice(data);
        true
    }
}

/// One side: a QP, its regions, its memory and its completion queues.
struct Side {
    qp: QueuePair,
    mrs: MrTable,
    mem: Mem,
    scq: CompletionQueue,
    rcq: CompletionQueue,
    /// Key of the whole buffer (all rights), and of a read-only window.
    key: Key,
}

impl Side {
    fn new(qpn: u32, dest: u32, sq_psn: u32, rq_psn: u32) -> Side {
        let mut mrs = MrTable::new(8);
        let all = Access::LOCAL_WRITE
            .union(Access::REMOTE_WRITE)
            .union(Access::REMOTE_READ);
        let key = mrs
            .register(Region {
                pd: PdId(1),
                addr: 0x10_0000,
                len: BUF as u64,
                access: all,
                backing: 0,
                offset: 0,
            })
            .unwrap();
        let mem = Mem(vec![(0..BUF)
            .map(|i| (i as u32).wrapping_mul(qpn) as u8)
            .collect()]);
        Side {
            qp: QueuePair::new(QpConfig {
                qpn,
                dest_qpn: dest,
                pd: PdId(1),
                mtu: MTU,
                sq_psn: Psn::new(sq_psn),
                rq_psn: Psn::new(rq_psn),
                ack_timeout: 200_000,
                retry_cnt: 7,
                rnr_retry: 7,
                min_rnr_timer: 1,
                max_inflight: 64,
                max_rd_atomic: 16,
                sq_cap: 64,
                rq_cap: 64,
            }),
            mrs,
            mem,
            scq: CompletionQueue::new(256),
            rcq: CompletionQueue::new(256),
            key,
        }
    }

    fn ctx(&mut self, now: Nanos) -> (Ctx<'_, Mem>, &mut QueuePair) {
        (
            Ctx {
                mrs: &self.mrs,
                mem: &mut self.mem,
                cqs: Cqs::Split {
                    send: &mut self.scq,
                    recv: &mut self.rcq,
                },
                now,
            },
            &mut self.qp,
        )
    }

    fn bytes(&self, addr: u64, len: usize) -> &[u8] {
        let off = (addr - 0x10_0000) as usize;
        &self.mem.0[0][off..off + len]
    }

    fn completions(cq: &mut CompletionQueue) -> Vec<WorkCompletion> {
        let mut out = Vec::new();
        cq.poll(usize::MAX, &mut out);
        out
    }
}

/// A link: each packet is lost with probability `loss` and duplicated with `dup` (seeded).
struct Link {
    seed: u64,
    loss: f64,
    dup: f64,
    delivered: u64,
}

impl Link {
    fn rand(&mut self) -> f64 {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        (self.seed >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Runs both sides until `done` or 10 s of virtual time; every packet goes through the
/// wire code (emit, then parse). `QP_TRACE=1` prints every packet.
fn run(
    a: &mut Side,
    b: &mut Side,
    link: &mut Link,
    mut done: impl FnMut(&mut Side, &mut Side) -> bool,
) {
    let mut now: Nanos = 0;
    let mut payload = vec![0u8; MTU as usize];
    let mut wire = vec![0u8; 2 * MTU as usize];
    while now < 10_000_000_000 {
        let mut moved = false;
        for dir in 0..2 {
            let (from, to) = if dir == 0 {
                (&mut *a, &mut *b)
            } else {
                (&mut *b, &mut *a)
            };
            for _ in 0..8 {
                let (mut ctx, qp) = from.ctx(now);
                let Some((repr, n)) = qp.poll_transmit(&mut ctx, &mut payload) else {
                    break;
                };
                moved = true;
                let len = repr.emit(&mut wire, &payload[..n]).unwrap();
                let lost = link.rand() < link.loss;
                if std::env::var_os("QP_TRACE").is_some() {
                    eprintln!(
                        "t={now} dir={dir} {:?} psn={} lost={lost} aeth={:?}",
                        repr.bth.opcode, repr.bth.psn, repr.aeth
                    );
                }
                if lost {
                    continue;
                }
                let copies = if link.rand() < link.dup { 2 } else { 1 };
                for _ in 0..copies {
                    let (r, p) = RoceRepr::parse(&wire[..len]).unwrap();
                    assert_eq!(r.bth.dest_qp, to.qp.qpn());
                    let (mut ctx, qp) = to.ctx(now);
                    qp.handle_packet(&mut ctx, &r, p);
                    link.delivered += 1;
                }
            }
        }
        if done(a, b) {
            return;
        }
        if !moved {
            // Idle: jump to the next deadline.
            let next = [a.qp.poll_timeout(), b.qp.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) if t > now => now = t,
                Some(_) => {}
                None => now += 1_000_000,
            }
            for s in [&mut *a, &mut *b] {
                let (mut ctx, qp) = s.ctx(now);
                qp.handle_timeout(&mut ctx);
            }
        } else {
            now += 1_000;
        }
    }
    panic!(
        "not done after 10 s of virtual time: a {:?} b {:?}",
        a.qp.counters, b.qp.counters
    );
}

fn pair() -> (Side, Side) {
    // PSNs near the 24-bit wrap, so that every exchange crosses it.
    (
        Side::new(0x11, 0x22, 0xff_fff0, 0xff_ffe0),
        Side::new(0x22, 0x11, 0xff_ffe0, 0xff_fff0),
    )
}

/// SEND 10,000 B, WRITE 50,000 B (with immediate), READ 30,000 B, from a to b.
fn exchange(loss: f64, dup: f64, seed: u64) -> (Side, Side, Link) {
    let (mut a, mut b) = pair();
    let mut link = Link {
        seed,
        loss,
        dup,
        delivered: 0,
    };
    let base = 0x10_0000;
    let (ka, kb) = (a.key, b.key);
    for (wr_id, addr) in [(100, base + 0x2_0000), (101, base + 0x3_0000)] {
        b.qp.post_recv(RecvWr {
            wr_id,
            sge: Sge {
                addr,
                len: 16_384,
                lkey: kb,
            },
        })
        .unwrap();
    }
    let sends = [
        (1, SendOp::Send { imm: None }, base, 10_000),
        (
            2,
            SendOp::Write {
                remote: Remote {
                    addr: base + 0x1_0000,
                    rkey: kb,
                },
                imm: Some(0xabcd),
            },
            base + 0x4000,
            50_000,
        ),
        (
            3,
            SendOp::Read {
                remote: Remote {
                    addr: base + 0x2_8000,
                    rkey: kb,
                },
            },
            base + 0x2_0000,
            30_000,
        ),
    ];
    for (wr_id, op, addr, len) in sends {
        a.qp.post_send(SendWr {
            wr_id,
            op,
            sge: Sge {
                addr,
                len,
                lkey: ka,
            },
            signaled: true,
            solicited: false,
        })
        .unwrap();
    }
    let mut got = Vec::new();
    run(&mut a, &mut b, &mut link, |a, _| {
        got.extend(Side::completions(&mut a.scq));
        got.len() == 3
    });
    assert_eq!(
        got.iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect::<Vec<_>>(),
        [
            (1, WcStatus::Success, WcOpcode::Send),
            (2, WcStatus::Success, WcOpcode::RdmaWrite),
            (3, WcStatus::Success, WcOpcode::RdmaRead),
        ],
        "seed {seed} loss {loss}: a {:?} b {:?}",
        a.qp.counters,
        b.qp.counters
    );
    (a, b, link)
}

fn check_bytes(a: &Side, b: &Side) {
    let base = 0x10_0000;
    assert_eq!(
        b.bytes(base + 0x2_0000, 10_000),
        a.bytes(base, 10_000),
        "SEND"
    );
    assert_eq!(
        b.bytes(base + 0x1_0000, 50_000),
        a.bytes(base + 0x4000, 50_000),
        "WRITE"
    );
    assert_eq!(
        a.bytes(base + 0x2_0000, 30_000),
        b.bytes(base + 0x2_8000, 30_000),
        "READ"
    );
}

#[test]
fn send_write_and_read_move_exact_bytes_and_complete_in_order() {
    let (a, mut b, _) = exchange(0.0, 0.0, 1);
    check_bytes(&a, &b);
    let recvs = Side::completions(&mut b.rcq);
    assert_eq!(recvs.len(), 2, "{recvs:?}");
    assert_eq!(
        (recvs[0].wr_id, recvs[0].opcode, recvs[0].byte_len),
        (100, WcOpcode::Recv, 10_000)
    );
    assert_eq!(
        (
            recvs[1].wr_id,
            recvs[1].opcode,
            recvs[1].byte_len,
            recvs[1].imm
        ),
        (101, WcOpcode::RecvRdmaWithImm, 50_000, Some(0xabcd))
    );
    assert_eq!(a.qp.counters.retransmits, 0);
    assert_eq!(b.qp.counters.duplicates, 0);
}

/// 60 seeds, alternately 5 % and 20 % loss each way, 3 % duplication.
#[test]
fn loss_and_duplication_are_recovered_by_go_back_n() {
    for seed in 1..=60 {
        let loss = [0.05, 0.2][seed as usize % 2];
        let (a, mut b, _) = exchange(loss, 0.03, seed);
        check_bytes(&a, &b);
        let recvs = Side::completions(&mut b.rcq);
        assert_eq!(
            recvs.len(),
            2,
            "seed {seed}: each receive completes once: {recvs:?}"
        );
        assert!(
            a.qp.counters.retransmits > 0,
            "seed {seed}: loss was recovered"
        );
        assert_eq!(a.qp.state(), QpState::Rts);
    }
}

#[test]
fn a_forged_rkey_gets_a_remote_access_nak_and_both_qps_go_to_error() {
    let (mut a, mut b) = pair();
    let mut link = Link {
        seed: 9,
        loss: 0.0,
        dup: 0.0,
        delivered: 0,
    };
    let ka = a.key;
    let before = b.bytes(0x10_0000, 4096).to_vec();
    for (wr_id, rkey) in [(1, Key(0xdead_be01)), (2, b.key)] {
        a.qp.post_send(SendWr {
            wr_id,
            op: SendOp::Write {
                remote: Remote {
                    addr: 0x10_0000,
                    rkey,
                },
                imm: None,
            },
            sge: Sge {
                addr: 0x10_0000,
                len: 4096,
                lkey: ka,
            },
            signaled: true,
            solicited: false,
        })
        .unwrap();
    }
    let mut got = Vec::new();
    run(&mut a, &mut b, &mut link, |a, _| {
        got.extend(Side::completions(&mut a.scq));
        got.len() == 2
    });
    assert_eq!(got[0].status, WcStatus::RemAccessErr);
    assert_eq!(got[1].status, WcStatus::WrFlushErr, "the rest is flushed");
    assert_eq!(a.qp.state(), QpState::Error);
    assert_eq!(b.qp.state(), QpState::Error);
    assert_eq!(
        b.bytes(0x10_0000, 4096),
        before.as_slice(),
        "nothing written"
    );
    assert!(a
        .qp
        .post_send(SendWr {
            wr_id: 3,
            op: SendOp::Send { imm: None },
            sge: Sge {
                addr: 0x10_0000,
                len: 1,
                lkey: ka
            },
            signaled: true,
            solicited: false,
        })
        .is_err());
}

#[test]
fn a_send_without_a_posted_receive_waits_for_one_through_rnr_naks() {
    let (mut a, mut b) = pair();
    let mut link = Link {
        seed: 13,
        loss: 0.0,
        dup: 0.0,
        delivered: 0,
    };
    let (ka, kb) = (a.key, b.key);
    a.qp.post_send(SendWr {
        wr_id: 7,
        op: SendOp::Send { imm: Some(5) },
        sge: Sge {
            addr: 0x10_0000,
            len: 3000,
            lkey: ka,
        },
        signaled: true,
        solicited: true,
    })
    .unwrap();
    let mut rounds = 0;
    let mut got = Vec::new();
    run(&mut a, &mut b, &mut link, |a, b| {
        rounds += 1;
        if rounds == 50 {
            // The receiver posts its buffer late.
            b.qp.post_recv(RecvWr {
                wr_id: 70,
                sge: Sge {
                    addr: 0x10_8000,
                    len: 4096,
                    lkey: kb,
                },
            })
            .unwrap();
        }
        got.extend(Side::completions(&mut a.scq));
        got.len() == 1
    });
    assert_eq!((got[0].wr_id, got[0].status), (7, WcStatus::Success));
    assert!(b.qp.counters.naks_tx > 0, "RNR NAKs were sent");
    let recv = Side::completions(&mut b.rcq);
    assert_eq!(
        (
            recv[0].wr_id,
            recv[0].byte_len,
            recv[0].imm,
            recv[0].solicited
        ),
        (70, 3000, Some(5), true)
    );
    assert_eq!(b.bytes(0x10_8000, 3000), a.bytes(0x10_0000, 3000));
}

/// SQD (IBA 10.3.1): a QP moved to SQD while a WRITE is under way finishes that WRITE,
/// retransmissions included (5 % loss), starts none of the work requests behind it (one
/// posted before, one posted in SQD), and says it is drained; back in RTS, both go.
#[test]
fn sqd_finishes_started_requests_and_holds_the_rest_until_rts() {
    let (mut a, mut b) = pair();
    let mut link = Link {
        seed: 7,
        loss: 0.05,
        dup: 0.0,
        delivered: 0,
    };
    let base = 0x10_0000;
    let (ka, kb) = (a.key, b.key);
    let write = |wr_id: u64, dst: u64, src: u64, len: u32| SendWr {
        wr_id,
        op: SendOp::Write {
            remote: Remote {
                addr: dst,
                rkey: kb,
            },
            imm: None,
        },
        sge: Sge {
            addr: src,
            len,
            lkey: ka,
        },
        signaled: true,
        solicited: false,
    };
    a.qp.post_send(write(1, base + 0x1_0000, base, 40_000))
        .unwrap();
    a.qp.post_send(write(2, base + 0x2_0000, base + 0xa000, 8_000))
        .unwrap();
    let before = b.bytes(base + 0x2_0000, 0x1_0000).to_vec();
    // One round: some packets of WRITE 1 go, not all of its 40.
    run(&mut a, &mut b, &mut link, |a, _| {
        a.qp.counters.packets_tx > 0
    });
    assert!(a.qp.counters.packets_tx < 40);
    a.qp.drain();
    assert_eq!(a.qp.state(), QpState::Sqd);
    a.qp.post_send(write(3, base + 0x2_8000, base + 0xc000, 3_000))
        .unwrap();
    let resent = a.qp.counters.retransmits;
    run(&mut a, &mut b, &mut link, |a, _| a.qp.is_drained());
    assert!(
        a.qp.counters.retransmits > resent,
        "losses were recovered in SQD"
    );
    let wc = Side::completions(&mut a.scq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success)]
    );
    assert_eq!(
        b.bytes(base + 0x1_0000, 40_000),
        a.bytes(base, 40_000),
        "the started WRITE finished exact"
    );
    // Drained: nothing more goes, and WRITEs 2 and 3 have not touched b.
    let mut payload = vec![0u8; MTU as usize];
    let (mut ctx, qp) = a.ctx(11_000_000_000);
    assert!(qp.poll_transmit(&mut ctx, &mut payload).is_none());
    assert_eq!(b.bytes(base + 0x2_0000, 0x1_0000), &before[..]);
    a.qp.resume();
    assert_eq!(a.qp.state(), QpState::Rts);
    let mut wc = Vec::new();
    run(&mut a, &mut b, &mut link, |a, _| {
        wc.extend(Side::completions(&mut a.scq));
        wc.len() == 2
    });
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(2, WcStatus::Success), (3, WcStatus::Success)]
    );
    assert_eq!(
        b.bytes(base + 0x2_0000, 8_000),
        a.bytes(base + 0xa000, 8_000)
    );
    assert_eq!(
        b.bytes(base + 0x2_8000, 3_000),
        a.bytes(base + 0xc000, 3_000)
    );
}
