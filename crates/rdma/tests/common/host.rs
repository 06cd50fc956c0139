//! Two RDMA stacks' set-up, shared by the stack-level tests: a host with one CQ, one MR over
//! its memory and one QP; the modify sequence of ibv_rc_pingpong; moving frames between two.

use std::net::Ipv4Addr;

use sluice_rdma::qp::{Nanos, RecvWr, Sge};
use sluice_rdma::stack::{PeerAddr, QpAttr, RdmaStack, RxPath, StackConfig, TxPath};
use sluice_rdma::verbs::{Access, AttrMask, Key, PdId, QpState, Region};
use sluice_wire::EthernetAddress;

pub const BASE: u64 = 0x7f00_0000;
pub const LEN: usize = 1 << 20;

pub use sluice_rdma::qp::VecMemory as Mem;

pub struct Host {
    pub stack: RdmaStack,
    pub mem: Mem,
    pub cq: u32,
    pub qpn: u32,
    pub key: Key,
    pub addr: PeerAddr,
}

/// A host whose QPs are unpaced (these tests run at one instant).
pub fn host(n: u8) -> Host {
    host_at(n, 0)
}

/// A host whose QPs start at `line_rate_bps` (0: unpaced).
pub fn host_at(n: u8, line_rate_bps: u64) -> Host {
    host_with(n, line_rate_bps, TxPath::default(), RxPath::default())
}

/// An unpaced host whose payloads take the paths given.
pub fn host_paths(n: u8, tx_path: TxPath, rx_path: RxPath) -> Host {
    host_with(n, 0, tx_path, rx_path)
}

fn host_with(n: u8, line_rate_bps: u64, tx_path: TxPath, rx_path: RxPath) -> Host {
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
        tx_path,
        rx_path,
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
pub fn connect(h: &mut Host, peer: (u32, PeerAddr), psns: (u32, u32), recvs: &[(u64, u32)]) {
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
pub fn run(a: &mut Host, b: &mut Host, now: Nanos, tamper: &mut dyn FnMut(&mut Vec<u8>)) {
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
