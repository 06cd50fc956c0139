//! Two RDMA stacks joined by whole RoCEv2 frames (Ethernet, IPv4, UDP 4791, ICRC), driven
//! through the verbs calls in the order ibv_rc_pingpong makes them: CQ, MR, QP, receives
//! posted in INIT, RESET -> INIT -> RTR -> RTS, then SEND, RDMA WRITE with immediate and
//! RDMA READ. Bad frames (a flipped bit, an unknown QP, a stranger) are counted, never taken.

mod common;

use common::host::{connect, host, run, Mem, BASE};
use sluice_rdma::qp::{RecvWr, Remote, SendOp, SendWr, Sge};
use sluice_rdma::stack::VerbsError;
use sluice_rdma::verbs::{WcOpcode, WcStatus};

#[test]
fn verbs_in_pingpong_order_move_exact_bytes_over_rocev2_frames() {
    let (mut a, mut b) = (host(1), host(2));
    let (qa, qb) = ((a.qpn, a.addr), (b.qpn, b.addr));
    connect(&mut a, qb, (0x00_1000, 0x77_0000), &[]);
    connect(
        &mut b,
        qa,
        (0x77_0000, 0x00_1000),
        &[(BASE + 0x8_0000, 8192), (BASE + 0x9_0000, 16)],
    );
    let (ka, kb) = (a.key, b.key);
    let sends = [
        SendWr {
            wr_id: 1,
            op: SendOp::Send { imm: Some(9) },
            sge: Sge {
                addr: BASE,
                len: 5000,
                lkey: ka,
            },
            signaled: true,
            solicited: false,
        },
        SendWr {
            wr_id: 2,
            op: SendOp::Write {
                remote: Remote {
                    addr: BASE + 0x1_0000,
                    rkey: kb,
                },
                imm: Some(7),
            },
            sge: Sge {
                addr: BASE + 0x2000,
                len: 70_000,
                lkey: ka,
            },
            signaled: true,
            solicited: false,
        },
        SendWr {
            wr_id: 3,
            op: SendOp::Read {
                remote: Remote {
                    addr: BASE + 0x4_0000,
                    rkey: kb,
                },
            },
            sge: Sge {
                addr: BASE + 0x6_0000,
                len: 9000,
                lkey: ka,
            },
            signaled: true,
            solicited: false,
        },
    ];
    for wr in sends {
        a.stack.post_send(a.qpn, wr).unwrap();
    }
    run(&mut a, &mut b, 1, &mut |_| {});
    let mut wc = Vec::new();
    a.stack.poll_cq(a.cq, 16, &mut wc).unwrap();
    assert_eq!(
        wc.iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect::<Vec<_>>(),
        [
            (1, WcStatus::Success, WcOpcode::Send),
            (2, WcStatus::Success, WcOpcode::RdmaWrite),
            (3, WcStatus::Success, WcOpcode::RdmaRead)
        ]
    );
    let mut rc = Vec::new();
    b.stack.poll_cq(b.cq, 16, &mut rc).unwrap();
    assert_eq!(
        rc.iter()
            .map(|w| (w.wr_id, w.opcode, w.byte_len, w.imm))
            .collect::<Vec<_>>(),
        [
            (100, WcOpcode::Recv, 5000, Some(9)),
            (101, WcOpcode::RecvRdmaWithImm, 70_000, Some(7))
        ]
    );
    let at = |m: &Mem, addr: u64, len: usize| {
        m.0[(addr - BASE) as usize..(addr - BASE) as usize + len].to_vec()
    };
    // The regions' addresses are the application's; the backing offset is addr - BASE
    // (Region::offset 0 at BASE).
    assert_eq!(at(&b.mem, BASE + 0x8_0000, 5000), at(&a.mem, BASE, 5000));
    assert_eq!(
        at(&b.mem, BASE + 0x1_0000, 70_000),
        at(&a.mem, BASE + 0x2000, 70_000)
    );
    assert_eq!(
        at(&a.mem, BASE + 0x6_0000, 9000),
        at(&b.mem, BASE + 0x4_0000, 9000)
    );
    assert!(a.stack.counters.frames_tx > 70 && b.stack.counters.frames_rx > 70);
}

#[test]
fn bad_frames_are_counted_and_never_taken() {
    let (mut a, mut b) = (host(1), host(2));
    let (qa, qb) = ((a.qpn, a.addr), (b.qpn, b.addr));
    connect(&mut a, qb, (10, 20), &[]);
    connect(&mut b, qa, (20, 10), &[(BASE, 4096)]);
    let ka = a.key;
    a.stack
        .post_send(
            a.qpn,
            SendWr {
                wr_id: 1,
                op: SendOp::Send { imm: None },
                sge: Sge {
                    addr: BASE,
                    len: 100,
                    lkey: ka,
                },
                signaled: true,
                solicited: false,
            },
        )
        .unwrap();
    // Every frame from a has one payload bit flipped: the ICRC refuses it.
    run(&mut a, &mut b, 1, &mut |f| {
        let last = f.len() - 8;
        f[last] ^= 1;
    });
    assert!(b.stack.counters.malformed > 0);
    assert_eq!(b.stack.counters.frames_rx, 0);
    let mut rc = Vec::new();
    b.stack.poll_cq(b.cq, 16, &mut rc).unwrap();
    assert!(rc.is_empty());
    // A frame for a QP that does not exist, and one from a stranger, both counted.
    let mut buf = vec![0u8; 2048];
    a.stack.handle_timeout(10_000_000_000, &mut a.mem);
    let n = a
        .stack
        .poll_transmit(10_000_000_000, &mut a.mem, &mut buf)
        .expect("the retransmission");
    let mut f = buf[..n].to_vec();
    b.stack.handle_frame(1, &mut b.mem, &f);
    assert_eq!(
        b.stack.counters.frames_rx, 1,
        "the clean retransmission is taken"
    );
    // A header bit flipped: the IPv4 checksum refuses it.
    f[29] ^= 0x08;
    b.stack.handle_frame(1, &mut b.mem, &f);
    assert_eq!(b.stack.counters.frames_rx, 1);
    // A stranger (another host) talking to b's QP: well-formed, but not its peer.
    let mut c = host(3);
    connect(&mut c, (b.qpn, b.addr), (10, 20), &[]);
    let kc = c.key;
    c.stack
        .post_send(
            c.qpn,
            SendWr {
                wr_id: 5,
                op: SendOp::Send { imm: None },
                sge: Sge {
                    addr: BASE,
                    len: 10,
                    lkey: kc,
                },
                signaled: true,
                solicited: false,
            },
        )
        .unwrap();
    let n = c.stack.poll_transmit(1, &mut c.mem, &mut buf).unwrap();
    b.stack.handle_frame(1, &mut b.mem, &buf[..n]);
    assert_eq!(b.stack.counters.wrong_peer, 1);
    assert_eq!(b.stack.counters.frames_rx, 1);
    // To a QP b does not have.
    let mut d = host(4);
    connect(&mut d, (0x4242, b.addr), (10, 20), &[]);
    let kd = d.key;
    d.stack
        .post_send(
            d.qpn,
            SendWr {
                wr_id: 6,
                op: SendOp::Send { imm: None },
                sge: Sge {
                    addr: BASE,
                    len: 10,
                    lkey: kd,
                },
                signaled: true,
                solicited: false,
            },
        )
        .unwrap();
    let n = d.stack.poll_transmit(1, &mut d.mem, &mut buf).unwrap();
    b.stack.handle_frame(1, &mut b.mem, &buf[..n]);
    assert_eq!(b.stack.counters.no_qp, 1);
    // A verbs call on an unknown QP.
    assert_eq!(
        b.stack.post_recv(
            0xabc,
            RecvWr {
                wr_id: 0,
                sge: Sge {
                    addr: BASE,
                    len: 1,
                    lkey: ka
                }
            }
        ),
        Err(VerbsError::NoSuchQp)
    );
}

#[test]
fn destroying_a_qp_flushes_its_receives_and_a_cq_in_use_is_busy() {
    let (mut a, b) = (host(1), host(2));
    connect(
        &mut a,
        (b.qpn, b.addr),
        (1, 2),
        &[(BASE, 64), (BASE + 64, 64)],
    );
    assert_eq!(a.stack.destroy_cq(a.cq), Err(VerbsError::Busy));
    a.stack.destroy_qp(&mut a.mem, a.qpn).unwrap();
    let mut wc = Vec::new();
    a.stack.poll_cq(a.cq, 16, &mut wc).unwrap();
    assert_eq!(wc.len(), 2);
    assert!(wc.iter().all(|w| w.status == WcStatus::WrFlushErr));
    assert_eq!(a.stack.qp_state(a.qpn), None);
    a.stack.destroy_cq(a.cq).unwrap();
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Arbitrary bytes, and valid frames with bytes after the BTH changed, into a
        /// connected stack: never a panic, and no changed frame is taken (the ICRC).
        #[test]
        fn arbitrary_frames_never_panic(
            junk in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..1600), 0..8),
            edits in proptest::collection::vec((any::<u16>(), any::<u8>()), 0..6),
        ) {
            let (mut a, mut b) = (host(1), host(2));
            let (qa, qb) = ((a.qpn, a.addr), (b.qpn, b.addr));
            connect(&mut a, qb, (5, 6), &[]);
            connect(&mut b, qa, (6, 5), &[(BASE, 4096)]);
            for f in &junk {
                b.stack.handle_frame(1, &mut b.mem, f);
            }
            let ka = a.key;
            a.stack
                .post_send(a.qpn, SendWr { wr_id: 1, op: SendOp::Write { remote: Remote { addr: BASE, rkey: b.key }, imm: None }, sge: Sge { addr: BASE, len: 3000, lkey: ka }, signaled: true, solicited: false })
                .unwrap();
            let mut buf = vec![0u8; 2048];
            while let Some(n) = a.stack.poll_transmit(1, &mut a.mem, &mut buf) {
                let mut f = buf[..n].to_vec();
                // After the BTH (Ethernet, the ECN bits and FECN/BECN may change in flight):
                // extension headers, payload and ICRC, which the ICRC covers.
                for &(at, v) in &edits {
                    let i = 54 + usize::from(at) % (f.len() - 54);
                    f[i] ^= v;
                }
                b.stack.handle_frame(1, &mut b.mem, &f);
            }
            let changed = edits.iter().any(|&(_, v)| v != 0);
            if changed {
                prop_assert_eq!(b.stack.counters.frames_rx, 0, "a changed frame was taken");
            }
        }
    }
}

/// max_rd_atomic bounds the READs a requester has outstanding (IBA 9.4.4; the QP here got
/// none in its RTS modify, taken as 1): the second READ, and the WRITE posted after it,
/// wait until the first one's response is in, then go, and all three complete in order.
#[test]
fn reads_beyond_max_rd_atomic_wait_for_the_responses() {
    let (mut a, mut b) = (host(1), host(2));
    let (qa, qb) = ((a.qpn, a.addr), (b.qpn, b.addr));
    connect(&mut a, qb, (0x10, 0x20), &[]);
    connect(&mut b, qa, (0x20, 0x10), &[]);
    let (ka, kb) = (a.key, b.key);
    let read = |wr_id, at: u64| SendWr {
        wr_id,
        op: SendOp::Read {
            remote: Remote {
                addr: BASE + 0x4_0000 + at,
                rkey: kb,
            },
        },
        sge: Sge {
            addr: BASE + 0x6_0000 + at,
            len: 3000,
            lkey: ka,
        },
        signaled: true,
        solicited: false,
    };
    let write = SendWr {
        wr_id: 3,
        op: SendOp::Write {
            remote: Remote {
                addr: BASE + 0x1_0000,
                rkey: kb,
            },
            imm: None,
        },
        sge: Sge {
            addr: BASE,
            len: 100,
            lkey: ka,
        },
        signaled: true,
        solicited: false,
    };
    for wr in [read(1, 0), read(2, 0x1000), write] {
        a.stack.post_send(a.qpn, wr).unwrap();
    }
    let mut buf = vec![0u8; 2048];
    let first = a.stack.poll_transmit(1, &mut a.mem, &mut buf);
    assert!(first.is_some(), "the first READ goes");
    let request = buf[..first.unwrap()].to_vec();
    assert_eq!(
        a.stack.poll_transmit(1, &mut a.mem, &mut buf),
        None,
        "a second READ (and the WRITE behind it) waits for the first's response"
    );
    b.stack.handle_frame(1, &mut b.mem, &request);
    run(&mut a, &mut b, 1, &mut |_| {});
    let mut wc = Vec::new();
    a.stack.poll_cq(a.cq, 16, &mut wc).unwrap();
    assert_eq!(
        wc.iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect::<Vec<_>>(),
        [
            (1, WcStatus::Success, WcOpcode::RdmaRead),
            (2, WcStatus::Success, WcOpcode::RdmaRead),
            (3, WcStatus::Success, WcOpcode::RdmaWrite)
        ]
    );
}
