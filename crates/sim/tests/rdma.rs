//! The RDMA transport (issue 16) in the simulator: two RdmaStacks as simulated hosts on a
//! 10 Gbit/s link that loses, reorders, duplicates and corrupts frames both ways. RDMA
//! WRITE, READ and SEND move exact bytes to exact addresses, and every work request
//! completes once, in order, successfully.

use std::net::Ipv4Addr;
use std::time::Duration;

use sluice_rdma::qp::{RecvWr, Remote, SendOp, SendWr, Sge};
use sluice_rdma::stack::{PeerAddr, QpAttr, RdmaStack, StackConfig};
use sluice_rdma::verbs::{
    Access, AttrMask, Key, PdId, QpState, Region, WcOpcode, WcStatus, WorkCompletion,
};
use sluice_sim::{Host, Impairment, Instant, LinkConfig, LinkStats, Sim};
use sluice_wire::EthernetAddress;

const BASE: u64 = 0x1000_0000;
const LEN: usize = 16 << 20;

use sluice_rdma::qp::VecMemory as Mem;

/// An RDMA stack with its memory, as a simulated host.
struct RdmaHost {
    stack: RdmaStack,
    mem: Mem,
    cq: u32,
    qpn: u32,
    key: Key,
    addr: PeerAddr,
}

impl Host for RdmaHost {
    fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        self.stack
            .handle_frame(now.as_nanos(), &mut self.mem, frame);
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.stack.poll_transmit(now.as_nanos(), &mut self.mem, buf)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.stack.poll_timeout().map(Instant::from_nanos)
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.stack.handle_timeout(now.as_nanos(), &mut self.mem);
    }
}

fn rdma_host(n: u8) -> RdmaHost {
    rdma_host_with(n, 10_000_000_000, 64)
}

/// A host whose QPs start at `line_rate_bps` (0: unpaced, no reaction to CNPs) and keep
/// `max_inflight` packets unacknowledged.
fn rdma_host_with(n: u8, line_rate_bps: u64, max_inflight: u32) -> RdmaHost {
    let addr = PeerAddr {
        ip: Ipv4Addr::new(10, 0, 0, n),
        mac: EthernetAddress([2, 0, 0, 0, 0, n]),
    };
    let mut stack = RdmaStack::new(StackConfig {
        max_qps: 4,
        max_cqs: 4,
        max_mrs: 4,
        max_cqe: 1024,
        max_wr: 256,
        max_inflight,
        line_rate_bps,
        ..StackConfig::new(addr.mac, addr.ip)
    });
    let cq = stack.create_cq(512).unwrap();
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
    let qpn = stack.create_qp(PdId(1), cq, cq, 128, 128).unwrap();
    let mem = Mem((0..LEN)
        .map(|i| ((i as u64).wrapping_mul(0x9e37_79b9) >> (8 + n)) as u8)
        .collect());
    RdmaHost {
        stack,
        mem,
        cq,
        qpn,
        key,
        addr,
    }
}

fn connect(h: &mut RdmaHost, peer: (u32, PeerAddr), psns: (u32, u32), recvs: &[(u64, u32)]) {
    let qpn = h.qpn;
    connect_qp(h, qpn, peer, psns, recvs);
}

/// RESET -> INIT -> RTR -> RTS of `qpn` towards `peer`, with `recvs` posted in INIT.
fn connect_qp(
    h: &mut RdmaHost,
    qpn: u32,
    peer: (u32, PeerAddr),
    psns: (u32, u32),
    recvs: &[(u64, u32)],
) {
    let attr = QpAttr {
        access: 0b111,
        path_mtu: 3,
        dest_qpn: peer.0,
        rq_psn: psns.1,
        sq_psn: psns.0,
        timeout: 12, // 16.8 ms
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 1,
        peer: Some(peer.1),
        ..QpAttr::default()
    };
    let m = |bits: &[AttrMask]| bits.iter().fold(AttrMask::STATE, |a, &b| a.union(b));
    h.stack
        .modify_qp(
            &mut h.mem,
            qpn,
            QpState::Init,
            m(&[AttrMask::PKEY_INDEX, AttrMask::PORT, AttrMask::ACCESS_FLAGS]),
            &attr,
        )
        .unwrap();
    for (i, &(addr, len)) in recvs.iter().enumerate() {
        let wr = RecvWr {
            wr_id: 100 + i as u64,
            sge: Sge {
                addr,
                len,
                lkey: h.key,
            },
        };
        h.stack.post_recv(qpn, wr).unwrap();
    }
    let rtr = [
        AttrMask::AV,
        AttrMask::PATH_MTU,
        AttrMask::DEST_QPN,
        AttrMask::RQ_PSN,
        AttrMask::MAX_DEST_RD_ATOMIC,
        AttrMask::MIN_RNR_TIMER,
    ];
    h.stack
        .modify_qp(&mut h.mem, qpn, QpState::Rtr, m(&rtr), &attr)
        .unwrap();
    let rts = [
        AttrMask::SQ_PSN,
        AttrMask::TIMEOUT,
        AttrMask::RETRY_CNT,
        AttrMask::RNR_RETRY,
        AttrMask::MAX_QP_RD_ATOMIC,
    ];
    h.stack
        .modify_qp(&mut h.mem, qpn, QpState::Rts, m(&rts), &attr)
        .unwrap();
}

fn at(m: &Mem, addr: u64, len: usize) -> &[u8] {
    &m.0[(addr - BASE) as usize..(addr - BASE) as usize + len]
}

/// WRITE 6 MiB (three 2 MiB requests), READ 3 MiB, SEND 64 KiB, from a to b over `imp`.
/// Returns the virtual time it took and the frames both stacks refused as malformed.
fn run(seed: u64, imp: Impairment) -> (Duration, u64) {
    let mut sim: Sim<RdmaHost> = Sim::new(seed);
    let mut a = rdma_host(1);
    let mut b = rdma_host(2);
    let (qa, qb) = ((a.qpn, a.addr), (b.qpn, b.addr));
    connect(&mut a, qb, (0xff_fff0, 0x12_3456), &[]);
    connect(
        &mut b,
        qa,
        (0x12_3456, 0xff_fff0),
        &[(BASE + 0xf0_0000, 1 << 16)],
    );
    let (ka, kb) = (a.key, b.key);
    let mut wrs = Vec::new();
    for i in 0..3u64 {
        wrs.push(SendWr {
            wr_id: i,
            op: SendOp::Write {
                remote: Remote {
                    addr: BASE + 0x40_0000 + (i << 21),
                    rkey: kb,
                },
                imm: None,
            },
            sge: Sge {
                addr: BASE + (i << 21),
                len: 2 << 20,
                lkey: ka,
            },
            signaled: true,
            solicited: false,
        });
    }
    wrs.push(SendWr {
        wr_id: 3,
        op: SendOp::Read {
            remote: Remote {
                addr: BASE + 0xa0_0000,
                rkey: kb,
            },
        },
        sge: Sge {
            addr: BASE + 0x60_0000,
            len: 3 << 20,
            lkey: ka,
        },
        signaled: true,
        solicited: false,
    });
    wrs.push(SendWr {
        wr_id: 4,
        op: SendOp::Send { imm: Some(0x5eed) },
        sge: Sge {
            addr: BASE + 0xe0_0000,
            len: 1 << 16,
            lkey: ka,
        },
        signaled: true,
        solicited: true,
    });
    for wr in wrs {
        a.stack.post_send(a.qpn, wr).unwrap();
    }
    let ia = sim.add_host(a);
    let ib = sim.add_host(b);
    let link = LinkConfig::new(10_000_000_000, Duration::from_micros(10))
        .with_queue(1 << 20)
        .with_impairment(imp);
    sim.connect(ia, ib, link).unwrap();
    let start = sim.now();
    let mut done: Vec<WorkCompletion> = Vec::new();
    let r = sim.run_until(start + Duration::from_secs(120), |_, hosts| {
        let a = hosts.get_mut(ia).unwrap();
        let cq = a.cq;
        a.stack.poll_cq(cq, 64, &mut done).unwrap();
        done.len() == 5
    });
    assert!(
        r.is_ok(),
        "seed {seed}: {r:?}, {} of 5 completed: {done:?}",
        done.len()
    );
    let elapsed = sim.now().saturating_since(start);
    assert_eq!(
        done.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        (0..5).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>(),
        "seed {seed}"
    );
    let malformed = sim.host(ia).unwrap().stack.counters.malformed
        + sim.host(ib).unwrap().stack.counters.malformed;
    let a_mem = std::mem::replace(&mut sim.host_mut(ia).unwrap().mem, Mem(Vec::new()));
    check(&a_mem, sim.host_mut(ib).unwrap());
    (elapsed, malformed)
}

fn check(a: &Mem, b: &mut RdmaHost) {
    assert!(
        at(&b.mem, BASE + 0x40_0000, 6 << 20) == at(a, BASE, 6 << 20),
        "WRITE"
    );
    assert!(
        at(a, BASE + 0x60_0000, 3 << 20) == at(&b.mem, BASE + 0xa0_0000, 3 << 20),
        "READ"
    );
    assert!(
        at(&b.mem, BASE + 0xf0_0000, 1 << 16) == at(a, BASE + 0xe0_0000, 1 << 16),
        "SEND"
    );
    let mut rc = Vec::new();
    let cq = b.cq;
    b.stack.poll_cq(cq, 16, &mut rc).unwrap();
    assert_eq!(
        rc.iter()
            .map(|w| (w.wr_id, w.opcode, w.byte_len, w.imm, w.solicited))
            .collect::<Vec<_>>(),
        [(100, WcOpcode::Recv, 1 << 16, Some(0x5eed), true)]
    );
}

#[test]
fn write_read_and_send_move_exact_bytes_on_a_clean_link() {
    let (elapsed, malformed) = run(1, Impairment::default());
    assert_eq!(malformed, 0);
    // 9 MiB of payload at 10 Gbit/s with a 64-packet window over a 20 us RTT: tens of ms.
    assert!(elapsed < Duration::from_secs(1), "{elapsed:?}");
}

#[test]
fn loss_reorder_duplication_and_corruption_are_recovered() {
    for seed in [2, 3] {
        let imp = Impairment::default()
            .with_loss(0.01)
            .with_reorder(0.01, Duration::from_micros(30))
            .with_duplicate(0.01)
            .with_corrupt(0.001);
        let (_, malformed) = run(seed, imp);
        assert!(
            malformed > 0,
            "seed {seed}: corrupted frames were refused by the ICRC"
        );
    }
}

/// Two senders' QPs write 4 MiB each into one receiver through a switch whose port to the
/// receiver is the bottleneck (10 Gbit/s in, 2 x 10 Gbit/s offered), marking CE above
/// `K`. Returns the bottleneck's stats, the CNPs the receiver sent, and each sender's
/// rate sampled every 20 us while both send.
fn incast_2(line_rate_bps: u64) -> (LinkStats, u64, Vec<Vec<u64>>) {
    const K: usize = 32 << 10;
    const WRITE: u32 = 4 << 20;
    let mut sim: Sim<RdmaHost> = Sim::new(16);
    let mut senders = [
        rdma_host_with(1, line_rate_bps, 512),
        rdma_host_with(2, line_rate_bps, 512),
    ];
    let mut b = rdma_host_with(3, line_rate_bps, 512);
    let qb2 = b.stack.create_qp(PdId(1), b.cq, b.cq, 128, 128).unwrap();
    for (i, (a, qb)) in senders.iter_mut().zip([b.qpn, qb2]).enumerate() {
        let psn = 0x10 + i as u32;
        connect(a, (qb, b.addr), (psn, psn), &[]);
        connect_qp(&mut b, qb, (a.qpn, a.addr), (psn, psn), &[]);
        let (ka, kb) = (a.key, b.key);
        let wr = SendWr {
            wr_id: i as u64,
            op: SendOp::Write {
                remote: Remote {
                    addr: BASE + (i as u64 * u64::from(WRITE)),
                    rkey: kb,
                },
                imm: None,
            },
            sge: Sge {
                addr: BASE + 0x80_0000,
                len: WRITE,
                lkey: ka,
            },
            signaled: true,
            solicited: false,
        };
        let qa = a.qpn;
        a.stack.post_send(qa, wr).unwrap();
    }
    let [a1, a2] = senders;
    let qpns = [a1.qpn, a2.qpn];
    let (ia1, ia2, ib) = (sim.add_host(a1), sim.add_host(a2), sim.add_host(b));
    let sw = sim.add_switch();
    let link = LinkConfig::new(10_000_000_000, Duration::from_micros(2))
        .with_queue(4 << 20)
        .with_ecn(K);
    sim.connect(ia1, sw, link.clone()).unwrap();
    sim.connect(ia2, sw, link.clone()).unwrap();
    let bottleneck = sim.connect(sw, ib, link).unwrap();
    let start = sim.now();
    let mut done: Vec<WorkCompletion> = Vec::new();
    let mut rates = vec![Vec::new(), Vec::new()];
    let mut next_sample = start;
    let r = sim.run_until(start + Duration::from_secs(10), |now, hosts| {
        for (k, id) in [ia1, ia2].into_iter().enumerate() {
            let a = hosts.get_mut(id).unwrap();
            let cq = a.cq;
            a.stack.poll_cq(cq, 8, &mut done).unwrap();
            if now >= next_sample && done.is_empty() {
                if let Some(r) = a.stack.qp_rate_bps(qpns[k]) {
                    rates[k].push(r);
                }
            }
        }
        if now >= next_sample {
            next_sample = now + Duration::from_micros(20);
        }
        done.len() == 2
    });
    assert!(r.is_ok(), "{r:?}: {done:?}");
    assert!(
        done.iter().all(|w| w.status == WcStatus::Success),
        "{done:?}"
    );
    let b = sim.host(ib).unwrap();
    for (i, id) in [ia1, ia2].into_iter().enumerate() {
        let a = sim.host(id).unwrap();
        let at_b = at(&b.mem, BASE + i as u64 * u64::from(WRITE), WRITE as usize);
        assert!(
            at_b == at(&a.mem, BASE + 0x80_0000, WRITE as usize),
            "sender {i}: every byte exact"
        );
    }
    let (to_b, _) = sim.link_stats(bottleneck);
    (to_b, b.stack.counters.cnp_tx, rates)
}

#[test]
fn dcqcn_holds_the_bottleneck_queue_below_the_uncontrolled_one() {
    let (plain, plain_cnps, _) = incast_2(0);
    let (cc, cnps, rates) = incast_2(10_000_000_000);
    let mean = |v: &[u64]| v.iter().sum::<u64>() / v.len().max(1) as u64;
    eprintln!(
        "2 -> 1 incast, 2 x 4 MiB: max queue {} KB without CC ({} CE marks, {} CNPs \
         ignored), {} KB with DCQCN ({} CE marks, {} CNPs); drops {} / {}; mean sampled \
         rates {} / {} Mbit/s, lowest {} / {} Mbit/s",
        plain.max_queue_bytes >> 10,
        plain.ecn_marked,
        plain_cnps,
        cc.max_queue_bytes >> 10,
        cc.ecn_marked,
        cnps,
        plain.queue_drops,
        cc.queue_drops,
        mean(&rates[0]) / 1_000_000,
        mean(&rates[1]) / 1_000_000,
        rates[0].iter().min().copied().unwrap_or(0) / 1_000_000,
        rates[1].iter().min().copied().unwrap_or(0) / 1_000_000,
    );
    assert!(cnps > 0 && cc.ecn_marked > 0, "CNPs flowed");
    assert!(
        cc.max_queue_bytes < plain.max_queue_bytes,
        "{} vs {}",
        cc.max_queue_bytes,
        plain.max_queue_bytes
    );
    // Bounded near K (32 KB) plus a round trip of reaction, far below the windows' worth.
    assert!(cc.max_queue_bytes < 128 << 10, "{}", cc.max_queue_bytes);
    let (m0, m1) = (mean(&rates[0]), mean(&rates[1]));
    for r in &rates {
        assert!(!r.is_empty());
        assert!(mean(r) < 10_000_000_000, "below line rate: {r:?}");
    }
    // The two converge to like shares, together about the bottleneck's 10 Gbit/s.
    assert!(m0.abs_diff(m1) < m0.max(m1) / 5, "{m0} vs {m1}");
    assert!(m0 + m1 < 12_000_000_000, "{m0} + {m1}");
}
