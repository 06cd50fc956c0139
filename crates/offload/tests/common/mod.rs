//! The rig both offload suites share: a host (one RDMA stack, its memory, CQ, MR and QP),
//! connecting two hosts, and the real-time clock the stacks run on beside the offload
//! threads.

use std::net::Ipv4Addr;

use sluice_rdma::qp::Memory;
use sluice_rdma::stack::{PeerAddr, QpAttr, RdmaStack, StackConfig};
use sluice_rdma::verbs::{Access, Key, PdId, Region};
use sluice_wire::EthernetAddress;

/// Where each host's region starts.
pub const BASE: u64 = 0x7f00_0000;
/// Its length.
pub const LEN: usize = 1 << 16;

/// One RDMA stack with its memory and its first CQ, MR and QP.
pub struct Host<M> {
    pub stack: RdmaStack,
    pub mem: M,
    pub cq: u32,
    pub qpn: u32,
    pub key: Key,
    pub addr: PeerAddr,
}

/// Host number `n` (10.0.0.n) with `mem` registered at [`BASE`] for local write and
/// remote read/write.
pub fn host<M: Memory>(n: u8, mem: M) -> Host<M> {
    let addr = PeerAddr {
        ip: Ipv4Addr::new(10, 0, 0, n),
        mac: EthernetAddress([2, 0, 0, 0, 0, n]),
    };
    let mut stack = RdmaStack::new(StackConfig::new(addr.mac, addr.ip));
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
    Host {
        stack,
        mem,
        cq,
        qpn,
        key,
        addr,
    }
}

/// RESET -> RTS towards `peer` (its QPN and address), path MTU 4096, 16 READs each way.
pub fn connect<M: Memory>(h: &mut Host<M>, peer: (u32, PeerAddr)) {
    let attr = QpAttr {
        access: 0b111,
        path_mtu: 5, // 4096
        dest_qpn: peer.0,
        rq_psn: 1,
        sq_psn: 1,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 12,
        max_rd_atomic: 16,
        peer: Some(peer.1),
        ..QpAttr::default()
    };
    h.stack.connect_rc(&mut h.mem, h.qpn, &attr).unwrap();
}

/// Nanoseconds since the first call: the stacks run in real time beside the offload
/// threads.
pub fn clock() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
        + 1
}
