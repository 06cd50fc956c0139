//! Two RDMA stacks joined by whole RoCEv2 frames (Ethernet, IPv4, UDP 4791, ICRC), driven
//! through the verbs calls in the order ibv_rc_pingpong makes them: CQ, MR, QP, receives
//! posted in INIT, RESET -> INIT -> RTR -> RTS, then SEND, RDMA WRITE with immediate and
//! RDMA READ. Bad frames (a flipped bit, an unknown QP, a stranger) are counted, never taken.

use std::net::Ipv4Addr;

use sluice_rdma::qp::{Memory, Nanos, RecvWr, Remote, SendOp, SendWr, Sge};
use sluice_rdma::stack::{PeerAddr, QpAttr, RdmaStack, StackConfig, VerbsError};
use sluice_rdma::verbs::{Access, AttrMask, Key, PdId, QpState, Region, WcOpcode, WcStatus};
use sluice_rdma::wire::frame::RoceFrameRepr;
use sluice_rdma::wire::Opcode;
use sluice_wire::ipv4::Ecn;
use sluice_wire::EthernetAddress;

const BASE: u64 = 0x7f00_0000;
const LEN: usize = 1 << 20;

struct Mem(Vec<u8>);

impl Memory for Mem {
    fn read(&self, _b: u32, offset: u64, out: &mut [u8]) -> bool {
        match self.0.get(offset as usize..offset as usize + out.len()) {
            Some(s) => {
                out.copy_from_slice(s);
                true
            }
            None => false,
        }
    }
    fn write(&mut self, _b: u32, offset: u64, data: &[u8]) -> bool {
        match self
            .0
            .get_mut(offset as usize..offset as usize + data.len())
        {
            Some(d) => {
                d.copy_from_slice(data);
                true
            }
            None => false,
        }
    }
}

struct Host {
    stack: RdmaStack,
    mem: Mem,
    cq: u32,
    qpn: u32,
    key: Key,
    addr: PeerAddr,
}

/// A host whose QPs are unpaced (these tests run at one instant).
fn host(n: u8) -> Host {
    host_at(n, 0)
}

/// A host whose QPs start at `line_rate_bps` (0: unpaced).
fn host_at(n: u8, line_rate_bps: u64) -> Host {
    let addr = PeerAddr {
        ip: Ipv4Addr::new(10, 0, 0, n),
        mac: EthernetAddress([2, 0, 0, 0, 0, n]),
    };
    let mut stack = RdmaStack::new(StackConfig {
        max_qps: 4,
        max_cqs: 4,
        max_mrs: 4,
        max_cqe: 256,
        max_wr: 64,
        line_rate_bps,
        ..StackConfig::new(addr.mac, addr.ip)
    });
    let cq = stack.create_cq(128).unwrap();
    let key = stack
        .reg_mr(Region {
            pd: PdId(1),
            addr: BASE,
            len: LEN as u64,
            access: Access::LOCAL_WRITE
                .union(Access::REMOTE_WRITE)
                .union(Access::REMOTE_READ),
            backing: 0,
            offset: 0,
        })
        .unwrap();
    let qpn = stack.create_qp(PdId(1), cq, cq, 32, 32).unwrap();
    let mem = Mem((0..LEN)
        .map(|i| (i as u32).wrapping_mul(u32::from(n) * 7 + 1) as u8)
        .collect());
    Host {
        stack,
        mem,
        cq,
        qpn,
        key,
        addr,
    }
}

/// RESET -> INIT -> RTR -> RTS towards `peer`, with `recvs` posted in INIT.
fn connect(h: &mut Host, peer: (u32, PeerAddr), psns: (u32, u32), recvs: &[(u64, u32)]) {
    let init = AttrMask::STATE
        .union(AttrMask::PKEY_INDEX)
        .union(AttrMask::PORT)
        .union(AttrMask::ACCESS_FLAGS);
    let attr = QpAttr {
        access: 0b111,
        path_mtu: 3, // 1024
        dest_qpn: peer.0,
        rq_psn: psns.1,
        sq_psn: psns.0,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 12,
        peer: Some(peer.1),
        ..QpAttr::default()
    };
    h.stack
        .modify_qp(&mut h.mem, h.qpn, QpState::Init, init, &attr)
        .unwrap();
    for (i, &(addr, len)) in recvs.iter().enumerate() {
        h.stack
            .post_recv(
                h.qpn,
                RecvWr {
                    wr_id: 100 + i as u64,
                    sge: Sge {
                        addr,
                        len,
                        lkey: h.key,
                    },
                },
            )
            .unwrap();
    }
    let rtr = [
        AttrMask::AV,
        AttrMask::PATH_MTU,
        AttrMask::DEST_QPN,
        AttrMask::RQ_PSN,
        AttrMask::MAX_DEST_RD_ATOMIC,
        AttrMask::MIN_RNR_TIMER,
    ]
    .into_iter()
    .fold(AttrMask::STATE, AttrMask::union);
    h.stack
        .modify_qp(&mut h.mem, h.qpn, QpState::Rtr, rtr, &attr)
        .unwrap();
    let rts = [
        AttrMask::SQ_PSN,
        AttrMask::TIMEOUT,
        AttrMask::RETRY_CNT,
        AttrMask::RNR_RETRY,
        AttrMask::MAX_QP_RD_ATOMIC,
    ]
    .into_iter()
    .fold(AttrMask::STATE, AttrMask::union);
    h.stack
        .modify_qp(&mut h.mem, h.qpn, QpState::Rts, rts, &attr)
        .unwrap();
    assert_eq!(h.stack.qp_state(h.qpn), Some(QpState::Rts));
}

/// Moves frames both ways until neither has any; `tamper` may change a frame (a to b).
fn run(a: &mut Host, b: &mut Host, now: Nanos, tamper: &mut dyn FnMut(&mut Vec<u8>)) {
    let mut buf = vec![0u8; 2048];
    loop {
        let mut moved = false;
        while let Some(n) = a.stack.poll_transmit(now, &mut a.mem, &mut buf) {
            let mut f = buf[..n].to_vec();
            tamper(&mut f);
            b.stack.handle_frame(now, &mut b.mem, &f);
            moved = true;
        }
        while let Some(n) = b.stack.poll_transmit(now, &mut b.mem, &mut buf) {
            a.stack.handle_frame(now, &mut a.mem, &buf[..n]);
            moved = true;
        }
        if !moved {
            return;
        }
    }
}

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

/// Sets CE on a frame's IPv4 header, as a congested switch does, and recomputes the header
/// checksum (the ICRC does not cover the ECN bits).
fn mark_ce(f: &mut [u8]) {
    f[15] |= 0b11;
    f[24..26].fill(0);
    let sum: u32 = f[14..34]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

const G10: u64 = 10_000_000_000;

/// Nanoseconds a frame of `n` bytes takes at `bps`.
fn gap(n: usize, bps: u64) -> u64 {
    (n as u64 * 8 * 1_000_000_000).div_ceil(bps)
}

/// Frames b sends at `now` go to a; the CNPs among them are returned.
fn b_to_a(a: &mut Host, b: &mut Host, now: Nanos) -> Vec<RoceFrameRepr> {
    let mut buf = vec![0u8; 2048];
    let mut cnps = Vec::new();
    while let Some(n) = b.stack.poll_transmit(now, &mut b.mem, &mut buf) {
        let (repr, _) = RoceFrameRepr::parse(&buf[..n]).expect("b's frames parse");
        if repr.roce.bth.opcode == Opcode::Cnp {
            cnps.push(repr);
        }
        a.stack.handle_frame(now, &mut a.mem, &buf[..n]);
    }
    cnps
}

/// a's next request, CE-marked on the way to b; its length.
fn ce_request(a: &mut Host, b: &mut Host, now: Nanos) -> usize {
    let mut buf = vec![0u8; 2048];
    let n = a
        .stack
        .poll_transmit(now, &mut a.mem, &mut buf)
        .expect("a request is due");
    let mut f = buf[..n].to_vec();
    mark_ce(&mut f);
    b.stack.handle_frame(now, &mut b.mem, &f);
    n
}

#[test]
fn ce_makes_one_cnp_per_interval_and_the_requester_cuts_paces_and_recovers() {
    let (mut a, mut b) = (host_at(1, G10), host_at(2, G10));
    let (qa, qb) = ((a.qpn, a.addr), (b.qpn, b.addr));
    connect(&mut a, qb, (1, 2), &[]);
    connect(&mut b, qa, (2, 1), &[]);
    let (ka, kb) = (a.key, b.key);
    let write = SendWr {
        wr_id: 1,
        op: SendOp::Write {
            remote: Remote {
                addr: BASE,
                rkey: kb,
            },
            imm: None,
        },
        sge: Sge {
            addr: BASE,
            len: 60 * 1024,
            lkey: ka,
        },
        signaled: true,
        solicited: false,
    };
    a.stack.post_send(a.qpn, write).unwrap();
    assert_eq!(a.stack.qp_rate_bps(a.qpn), Some(G10));
    let mut buf = vec![0u8; 2048];
    // Paced at line rate: one request now, the next once its transmission time is over.
    let t0: Nanos = 1_000_000;
    let n = ce_request(&mut a, &mut b, t0);
    assert!(a.stack.poll_transmit(t0, &mut a.mem, &mut buf).is_none());
    let mut now = t0 + gap(n, G10);
    assert_eq!(a.stack.poll_timeout(), Some(now), "the pacing time");
    for _ in 0..4 {
        let n = ce_request(&mut a, &mut b, now);
        assert!(a.stack.poll_transmit(now, &mut a.mem, &mut buf).is_none());
        now += gap(n, G10);
        assert_eq!(a.stack.poll_timeout(), Some(now));
    }
    // Five CE-marked packets within 5 us: one CNP (A17.9, at most one per 50 us).
    assert_eq!(b.stack.counters.ce_rx, 5);
    let t_cnp = now;
    let cnps = b_to_a(&mut a, &mut b, t_cnp);
    assert_eq!(cnps.len(), 1);
    let c = cnps[0];
    assert_eq!(
        (c.roce.bth.dest_qp, c.roce.bth.becn, c.ip.ecn),
        (a.qpn, true, Ecn::NotEct),
        "to the requester's QP, BECN set, not ECN-capable"
    );
    assert_eq!((b.stack.counters.cnp_tx, a.stack.counters.cnp_rx), (1, 1));
    // The cut: alpha starts at 1, so Rc = 10G (1 - 1/2).
    assert_eq!(a.stack.qp_rate_bps(a.qpn), Some(G10 / 2));
    // Paced at 5G now: twice the gap.
    let n = ce_request(&mut a, &mut b, now);
    assert!(a.stack.poll_transmit(now, &mut a.mem, &mut buf).is_none());
    assert_eq!(a.stack.poll_timeout(), Some(now + gap(n, G10 / 2)));
    assert!(
        b_to_a(&mut a, &mut b, now).is_empty(),
        "within the interval"
    );
    // 50 us after the first: the next CE makes the second CNP; Rc = 2.5G, Rt = 5G.
    now = t_cnp + 50_000;
    ce_request(&mut a, &mut b, now);
    assert_eq!(b_to_a(&mut a, &mut b, now).len(), 1);
    assert_eq!(a.stack.qp_rate_bps(a.qpn), Some(G10 / 4));
    assert_eq!(b.stack.counters.ce_rx, 7);
    // No more CNPs: the timers raise the rate back to line rate, never down; the first
    // increase (55 us on) is fast recovery, Rc = (2.5G + 5G) / 2.
    let mut rates = Vec::new();
    while let Some(t) = a.stack.poll_timeout() {
        if t > now + 20_000_000 || rates.last() == Some(&G10) {
            break;
        }
        a.stack.handle_timeout(t, &mut a.mem);
        let r = a.stack.qp_rate_bps(a.qpn).unwrap();
        if rates.last() != Some(&r) {
            rates.push(r);
        }
    }
    assert_eq!(rates[0], 3_750_000_000);
    assert!(rates.windows(2).all(|w| w[0] < w[1]), "{rates:?}");
    assert_eq!(rates.last(), Some(&G10), "{rates:?}");
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
