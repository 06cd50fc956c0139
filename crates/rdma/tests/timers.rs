//! The stack's timers visit only the QPs due (flexins.txt 3.4: engine CPU flat in the
//! number of QPs): 2,000 idle QPs and one busy one.

use std::net::Ipv4Addr;

use sluice_rdma::qp::{SendOp, SendWr, Sge, VecMemory};
use sluice_rdma::stack::{PeerAddr, QpAttr, RdmaStack, StackConfig};
use sluice_rdma::verbs::{Access, AttrMask, PdId, QpState, Region};
use sluice_wire::EthernetAddress;

const BASE: u64 = 0x7f00_0000;
const IDLE: usize = 2_000;

/// RESET -> INIT -> RTR -> RTS towards a peer that never answers.
fn to_rts(stack: &mut RdmaStack, mem: &mut VecMemory, qpn: u32, peer: PeerAddr) {
    let attr = QpAttr {
        access: 0b111,
        path_mtu: 3,
        dest_qpn: 0x100 + qpn,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        peer: Some(peer),
        ..QpAttr::default()
    };
    let init = AttrMask::STATE
        .union(AttrMask::PKEY_INDEX)
        .union(AttrMask::PORT)
        .union(AttrMask::ACCESS_FLAGS);
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
    let rts = [
        AttrMask::SQ_PSN,
        AttrMask::TIMEOUT,
        AttrMask::RETRY_CNT,
        AttrMask::RNR_RETRY,
        AttrMask::MAX_QP_RD_ATOMIC,
    ]
    .into_iter()
    .fold(AttrMask::STATE, AttrMask::union);
    for (state, mask) in [
        (QpState::Init, init),
        (QpState::Rtr, rtr),
        (QpState::Rts, rts),
    ] {
        stack.modify_qp(mem, qpn, state, mask, &attr).unwrap();
    }
}

#[test]
fn handle_timeout_visits_only_the_due_qp_among_2000_idle_ones() {
    let peer = PeerAddr {
        ip: Ipv4Addr::new(10, 0, 0, 2),
        mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
    };
    let mut stack = RdmaStack::new(StackConfig {
        max_qps: IDLE + 1,
        ..StackConfig::new(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            Ipv4Addr::new(10, 0, 0, 1),
        )
    });
    let mut mem = VecMemory(vec![7u8; 4096]);
    let cq = stack.create_cq(64).unwrap();
    let key = stack
        .reg_mr(Region {
            pd: PdId(1),
            addr: BASE,
            len: 4096,
            access: Access::LOCAL_WRITE,
            backing: 0,
            offset: 0,
        })
        .unwrap();
    let qpns: Vec<u32> = (0..=IDLE)
        .map(|_| stack.create_qp(PdId(1), cq, cq, 4, 4).unwrap())
        .collect();
    for &q in &qpns {
        to_rts(&mut stack, &mut mem, q, peer);
    }
    assert_eq!(stack.poll_timeout(), None, "idle QPs arm nothing");

    let busy = qpns[IDLE / 2];
    stack
        .post_send(
            busy,
            SendWr {
                wr_id: 1,
                op: SendOp::Send { imm: None },
                sge: Sge {
                    addr: BASE,
                    len: 64,
                    lkey: key,
                },
                signaled: true,
                solicited: false,
            },
        )
        .unwrap();
    let mut buf = vec![0u8; 2048];
    let now = 1_000;
    assert!(stack.poll_transmit(now, &mut mem, &mut buf).is_some());
    assert!(stack.poll_transmit(now, &mut mem, &mut buf).is_none());
    // The SEND is unacknowledged: its retransmission timer (4.096 us x 2^14) is the one
    // deadline.
    let deadline = stack
        .poll_timeout()
        .expect("the busy QP's retransmission timer");
    assert_eq!(deadline, now + (4096 << 14));

    stack.handle_timeout(deadline - 1, &mut mem);
    assert_eq!(stack.counters.timer_visits, 0, "nothing due yet");

    stack.handle_timeout(deadline, &mut mem);
    assert_eq!(
        stack.counters.timer_visits, 1,
        "only the busy QP is visited"
    );
    assert_eq!(stack.qp_counters().timeouts, 1);
    // The timeout re-sends and re-arms the busy QP only.
    assert!(stack.poll_transmit(deadline, &mut mem, &mut buf).is_some());
    let next = stack.poll_timeout().expect("re-armed");
    assert!(next > deadline);
    stack.handle_timeout(next, &mut mem);
    assert_eq!(stack.counters.timer_visits, 2);

    // A destroyed QP's timer goes with it; its flushed SEND lists its CQ, once.
    let mut ready = Vec::new();
    stack.take_ready_cqs(&mut ready);
    assert!(ready.is_empty(), "no completion yet");
    stack.destroy_qp(&mut mem, busy).unwrap();
    assert_eq!(stack.poll_timeout(), None);
    stack.take_ready_cqs(&mut ready);
    assert_eq!(ready, [cq]);
    assert_eq!(stack.cq_len(cq), 1);
    ready.clear();
    stack.take_ready_cqs(&mut ready);
    assert!(ready.is_empty(), "listed once until taken");
}

/// `poll_transmit` visits only the QPs that got something to send (the active list), not
/// every QP in turn: with 2,000 idle QPs in RTS, a SEND on one costs two visits (the packet,
/// then the look that finds nothing more), and so does its retransmission.
#[test]
fn poll_transmit_visits_only_the_active_qp_among_2000_idle_ones() {
    let peer = PeerAddr {
        ip: Ipv4Addr::new(10, 0, 0, 2),
        mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
    };
    let mut stack = RdmaStack::new(StackConfig {
        max_qps: IDLE + 1,
        ..StackConfig::new(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            Ipv4Addr::new(10, 0, 0, 1),
        )
    });
    let mut mem = VecMemory(vec![7u8; 4096]);
    let cq = stack.create_cq(64).unwrap();
    let key = stack
        .reg_mr(Region {
            pd: PdId(1),
            addr: BASE,
            len: 4096,
            access: Access::LOCAL_WRITE,
            backing: 0,
            offset: 0,
        })
        .unwrap();
    let qpns: Vec<u32> = (0..=IDLE)
        .map(|_| stack.create_qp(PdId(1), cq, cq, 4, 4).unwrap())
        .collect();
    for &q in &qpns {
        to_rts(&mut stack, &mut mem, q, peer);
    }
    let mut buf = vec![0u8; 2048];
    // Each state change listed its QP: the first poll looks at each once, finds nothing,
    // and drops them all.
    assert!(stack.poll_transmit(0, &mut mem, &mut buf).is_none());
    assert_eq!(stack.counters.tx_visits, (IDLE + 1) as u64);
    assert!(stack.poll_transmit(0, &mut mem, &mut buf).is_none());
    assert_eq!(
        stack.counters.tx_visits,
        (IDLE + 1) as u64,
        "nothing listed"
    );

    let busy = qpns[IDLE / 3];
    let send_on = |stack: &mut RdmaStack, qpn, wr_id| {
        stack
            .post_send(
                qpn,
                SendWr {
                    wr_id,
                    op: SendOp::Send { imm: None },
                    sge: Sge {
                        addr: BASE,
                        len: 64,
                        lkey: key,
                    },
                    signaled: true,
                    solicited: false,
                },
            )
            .unwrap();
    };
    send_on(&mut stack, busy, 1);
    let before = stack.counters.tx_visits;
    let now = 1_000;
    assert!(stack.poll_transmit(now, &mut mem, &mut buf).is_some());
    assert!(stack.poll_transmit(now, &mut mem, &mut buf).is_none());
    assert_eq!(stack.counters.tx_visits - before, 2, "the busy QP only");

    // SENDs on two other QPs take turns, each visited for its packet and once more.
    send_on(&mut stack, qpns[2 * IDLE / 3], 2);
    send_on(&mut stack, qpns[IDLE], 3);
    let before = stack.counters.tx_visits;
    let mut frames = 0;
    while stack.poll_transmit(now, &mut mem, &mut buf).is_some() {
        frames += 1;
    }
    assert_eq!(frames, 2);
    assert_eq!(stack.counters.tx_visits - before, 4);

    // The retransmission timer lists the QPs it ran, and nothing else.
    let deadline = stack.poll_timeout().expect("retransmission timers");
    stack.handle_timeout(deadline, &mut mem);
    let before = stack.counters.tx_visits;
    let mut resent = 0;
    while stack.poll_transmit(deadline, &mut mem, &mut buf).is_some() {
        resent += 1;
    }
    assert!(resent >= 1, "the timed-out SENDs go again");
    assert!(
        stack.counters.tx_visits - before <= 2 * resent + 2,
        "{} visits for {resent} frames",
        stack.counters.tx_visits - before
    );

    // A destroyed QP leaves the list.
    send_on(&mut stack, qpns[0], 4);
    stack.destroy_qp(&mut mem, qpns[0]).unwrap();
    let before = stack.counters.tx_visits;
    assert!(stack.poll_transmit(deadline, &mut mem, &mut buf).is_none());
    assert!(stack.counters.tx_visits - before <= 1);
}
