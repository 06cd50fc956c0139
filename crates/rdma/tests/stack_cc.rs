//! Congestion control and SQD through two RDMA stacks joined by whole RoCEv2 frames: a
//! CE-marked request makes the responder send one CNP per interval, the requester cuts its
//! rate, paces its requests and recovers without CNPs (docs/notes/issue-16/congestion.md);
//! a QP in SQD finishes what it started and holds the rest until RTS.

mod common;

use common::host::{connect, host, host_at, run, Host, BASE};
use sluice_rdma::qp::{Nanos, Remote, SendOp, SendWr, Sge};
use sluice_rdma::stack::QpAttr;
use sluice_rdma::verbs::{AttrMask, QpState, WcStatus};
use sluice_rdma::wire::frame::RoceFrameRepr;
use sluice_rdma::wire::Opcode;
use sluice_wire::ipv4::Ecn;

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

/// ibv_modify_qp(RTS -> SQD) with a WRITE under way: it finishes, the WRITE behind it
/// waits, the QP reports drained; ibv_modify_qp(SQD -> RTS) lets it go.
#[test]
fn sqd_through_modify_qp_drains_then_resumes() {
    let (mut a, mut b) = (host(1), host(2));
    let (qa, qb) = ((a.qpn, a.addr), (b.qpn, b.addr));
    connect(&mut a, qb, (3, 4), &[]);
    connect(&mut b, qa, (4, 3), &[]);
    let (ka, kb) = (a.key, b.key);
    let write = |wr_id: u64, off: u64, len: u32| SendWr {
        wr_id,
        op: SendOp::Write {
            remote: Remote {
                addr: BASE + 0x8_0000 + off,
                rkey: kb,
            },
            imm: None,
        },
        sge: Sge {
            addr: BASE + off,
            len,
            lkey: ka,
        },
        signaled: true,
        solicited: false,
    };
    a.stack.post_send(a.qpn, write(1, 0, 20_000)).unwrap();
    a.stack.post_send(a.qpn, write(2, 0x8000, 5_000)).unwrap();
    // Three of WRITE 1's twenty packets go before the drain.
    let mut buf = vec![0u8; 2048];
    for _ in 0..3 {
        let n = a.stack.poll_transmit(1, &mut a.mem, &mut buf).unwrap();
        b.stack.handle_frame(1, &mut b.mem, &buf[..n]);
    }
    let attr = QpAttr::default();
    a.stack
        .modify_qp(&mut a.mem, a.qpn, QpState::Sqd, AttrMask::STATE, &attr)
        .unwrap();
    assert_eq!(a.stack.qp_state(a.qpn), Some(QpState::Sqd));
    assert_eq!(a.stack.sq_drained(a.qpn), Some(false));
    run(&mut a, &mut b, 2, &mut |_| {});
    assert_eq!(a.stack.sq_drained(a.qpn), Some(true));
    let mut wc = Vec::new();
    a.stack.poll_cq(a.cq, 16, &mut wc).unwrap();
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success)]
    );
    let at = |h: &Host, addr: u64, len: usize| {
        h.mem.0[(addr - BASE) as usize..(addr - BASE) as usize + len].to_vec()
    };
    assert!(at(&b, BASE + 0x8_0000, 20_000) == at(&a, BASE, 20_000));
    assert!(
        at(&b, BASE + 0x8_8000, 5_000) != at(&a, BASE + 0x8000, 5_000),
        "WRITE 2 waited"
    );
    a.stack
        .modify_qp(&mut a.mem, a.qpn, QpState::Rts, AttrMask::STATE, &attr)
        .unwrap();
    run(&mut a, &mut b, 3, &mut |_| {});
    wc.clear();
    a.stack.poll_cq(a.cq, 16, &mut wc).unwrap();
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(2, WcStatus::Success)]
    );
    assert!(at(&b, BASE + 0x8_8000, 5_000) == at(&a, BASE + 0x8000, 5_000));
}
