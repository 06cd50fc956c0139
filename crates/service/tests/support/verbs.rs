//! Verbs for the tests: the raw client's control-path verbs, memfds, verbs queues and
//! doorbells (docs/verbs.md), and the peer's plain RDMA stack with Vec-backed memory.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Instant as StdInstant;

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::memfd::{memfd_create, MFdFlags};
use nix::unistd::ftruncate;
use sluice_engine::Transport;
use sluice_rdma::qp::{RecvWr, SendWr};
use sluice_rdma::stack::{PeerAddr, QpAttr, RdmaStack, StackConfig};
use sluice_rdma::verbs::{Access, AttrMask, Key, PdId, QpState, Region, WorkCompletion};
use sluice_shm::control::{recv_message, send_message, Reply, Request};
use sluice_shm::verbs::wqe::{inline_entries, send_flags};
use sluice_shm::verbs::{Cqe, QpAttrs, RecvWqe, SendWqe, VerbsReply, VerbsRequest, INLINE_CHUNK};
use sluice_shm::{Command, Consumer, Producer};
use sluice_tcp::Instant;
use sluice_wire::EthernetAddress;

use super::client::{Client, WAIT};

/// Where the peer's one region starts, as it addresses it, and its length.
pub const PEER_BASE: u64 = 0x5000_0000;
pub const PEER_LEN: usize = 64 << 10;
/// Every right.
pub const ALL_ACCESS: u32 = 0b111;

/// The peer's memory: one buffer.
pub use sluice_rdma::qp::VecMemory as PeerMem;

/// The peer's RDMA transport: one CQ, one region, one QP.
pub struct PeerRdma {
    pub stack: RdmaStack,
    pub mem: PeerMem,
    pub cq: u32,
    pub key: Key,
    pub qpn: u32,
}

impl Transport for PeerRdma {
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

impl PeerRdma {
    /// A stack at `mac`/`ip` with its CQ, region and QP.
    pub fn new(mac: EthernetAddress, ip: Ipv4Addr) -> PeerRdma {
        let mut stack = RdmaStack::new(StackConfig {
            max_qps: 4,
            max_cqs: 4,
            max_mrs: 4,
            max_cqe: 256,
            max_wr: 64,
            max_inflight: 64,
            ..StackConfig::new(mac, ip)
        });
        let cq = stack.create_cq(256).unwrap();
        let key = stack
            .reg_mr(Region {
                pd: PdId(1),
                addr: PEER_BASE,
                len: PEER_LEN as u64,
                access: Access(ALL_ACCESS),
                backing: 0,
                offset: 0,
            })
            .unwrap();
        let qpn = stack.create_qp(PdId(1), cq, cq, 64, 64).unwrap();
        PeerRdma {
            stack,
            mem: PeerMem(vec![0; PEER_LEN]),
            cq,
            key,
            qpn,
        }
    }

    /// RESET -> INIT -> RTR -> RTS towards the engine's QP `remote`.
    pub fn connect(&mut self, remote: u32, engine: PeerAddr) {
        let attr = QpAttr {
            access: ALL_ACCESS,
            path_mtu: 3,
            dest_qpn: remote,
            timeout: 10,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            peer: Some(engine),
            ..QpAttr::default()
        };
        for (state, mask) in [
            (QpState::Init, MASK_INIT),
            (QpState::Rtr, MASK_RTR),
            (QpState::Rts, MASK_RTS),
        ] {
            self.stack
                .modify_qp(&mut self.mem, self.qpn, state, AttrMask(mask), &attr)
                .unwrap();
        }
    }

    /// Posts a receive of `len` bytes at `off` of the region.
    pub fn post_recv(&mut self, wr_id: u64, off: u64, len: u32) {
        let sge = sluice_rdma::qp::Sge {
            addr: PEER_BASE + off,
            len,
            lkey: self.key,
        };
        self.stack
            .post_recv(self.qpn, RecvWr { wr_id, sge })
            .unwrap();
    }

    /// Posts a send work request.
    pub fn post_send(&mut self, wr: SendWr) {
        self.stack.post_send(self.qpn, wr).unwrap();
    }

    /// Completions so far.
    pub fn poll(&mut self) -> Vec<WorkCompletion> {
        let mut out = Vec::new();
        self.stack.poll_cq(self.cq, 64, &mut out).unwrap();
        out
    }
}

/// ibv_modify_qp masks: RESET -> INIT, INIT -> RTR, RTR -> RTS.
pub const MASK_INIT: u32 = 1 | 1 << 3 | 1 << 4 | 1 << 5;
pub const MASK_RTR: u32 = 1 | 1 << 7 | 1 << 8 | 1 << 12 | 1 << 15 | 1 << 17 | 1 << 20;
pub const MASK_RTS: u32 = 1 | 1 << 9 | 1 << 10 | 1 << 11 | 1 << 13 | 1 << 16;

/// Asks a control-path verb with descriptors; the reply.
pub fn ask(c: &Client, req: VerbsRequest, fds: &[BorrowedFd<'_>]) -> VerbsReply {
    send_message(c.sock.as_fd(), &Request::Verbs(req), fds).expect("send verbs request");
    let mut pfd = [PollFd::new(c.sock.as_fd(), PollFlags::POLLIN)];
    let n = poll(&mut pfd, PollTimeout::try_from(WAIT).unwrap()).expect("poll");
    assert!(n > 0, "the engine did not answer a verb within {WAIT:?}");
    match recv_message::<Reply>(c.sock.as_fd()).expect("a reply") {
        Some((Reply::Verbs(r), _)) => r,
        other => panic!("unexpected reply {other:?}"),
    }
}

/// The errno of a refused verb.
pub fn errno(r: VerbsReply) -> i32 {
    match r {
        VerbsReply::Failed { errno } => errno,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A memfd of `len` bytes, sealed against shrinking if `sealed`.
pub fn memfd(len: u64, sealed: bool) -> OwnedFd {
    let fd = memfd_create(c"mr", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING).unwrap();
    ftruncate(&fd, len as i64).unwrap();
    if sealed {
        fcntl(&fd, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK)).unwrap();
    }
    fd
}

/// The application's end of a QP.
pub struct AppQp {
    pub qpn: u32,
    pub sq: Producer,
    pub rq: Producer,
}

/// The application's end of a CQ.
pub struct AppCq {
    pub cq: u32,
    pub queue: u32,
    pub cons: Consumer,
}

/// Creates a CQ of `cqe` entries (optionally with a completion channel).
pub fn create_cq(c: &Client, cqe: u32, eventfd: Option<BorrowedFd<'_>>) -> AppCq {
    let fds: Vec<BorrowedFd<'_>> = eventfd.into_iter().collect();
    match ask(c, VerbsRequest::CreateCq { cqe, token: 1 }, &fds) {
        VerbsReply::Cq {
            cq,
            queue,
            cqe: got,
        } => {
            assert_eq!(got, cqe);
            AppCq {
                cq,
                queue,
                cons: Consumer::verbs(c.region.clone(), queue).unwrap(),
            }
        }
        other => panic!("CreateCq: {other:?}"),
    }
}

/// Creates an RC QP with `max_inline` inline bytes.
pub fn create_qp(c: &Client, pd: u32, cq: u32, max_inline: u32) -> AppQp {
    let req = VerbsRequest::CreateQp {
        pd,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 16,
        max_recv_wr: 16,
        max_inline,
    };
    match ask(c, req, &[]) {
        VerbsReply::Qp { qpn, sq, rq, .. } => AppQp {
            qpn,
            sq: Producer::verbs(c.region.clone(), sq).unwrap(),
            rq: Producer::verbs(c.region.clone(), rq).unwrap(),
        },
        other => panic!("CreateQp: {other:?}"),
    }
}

/// A modify of the engine's QP towards the peer (`to`: 1 INIT, 2 RTR, 3 RTS).
pub fn modify(c: &Client, qpn: u32, to: u32, peer_qpn: u32, peer_ip: Ipv4Addr) -> VerbsReply {
    let mask = [MASK_INIT, MASK_RTR, MASK_RTS][to as usize - 1];
    let attrs = QpAttrs {
        qp_state: to,
        access: ALL_ACCESS,
        path_mtu: 3,
        dest_qpn: peer_qpn,
        timeout: 10,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 1,
        dest_ip: Some(peer_ip),
        ..QpAttrs::default()
    };
    ask(c, VerbsRequest::ModifyQp { qpn, mask, attrs }, &[])
}

/// Writes a send work request (and its inline bytes) into the send queue.
pub fn post_send(qp: &mut AppQp, wqe: SendWqe, inline: &[u8]) {
    let mut wqe = wqe;
    if !inline.is_empty() {
        wqe.flags |= send_flags::INLINE;
        wqe.inline_len = inline.len() as u16;
        wqe.sge = None;
    }
    assert!(qp.sq.push(&wqe.encode()).unwrap());
    assert_eq!(
        inline.chunks(INLINE_CHUNK).count(),
        inline_entries(inline.len())
    );
    for chunk in inline.chunks(INLINE_CHUNK) {
        assert!(qp.sq.push(&SendWqe::encode_inline(chunk)).unwrap());
    }
}

/// Writes a receive work request into the receive queue.
pub fn post_recv(qp: &mut AppQp, wqe: RecvWqe) {
    assert!(qp.rq.push(&wqe.encode()).unwrap());
}

/// Rings the engine for `qpn` on context `ctx`.
pub fn ring(c: &mut Client, ctx: u32, qpn: u32) {
    c.post(ctx, Command::QpDoorbell { qpn });
}

/// Waits for the next completion of `cq`, pumping meanwhile.
pub fn next_cqe(cq: &mut AppCq, pump: &mut dyn FnMut()) -> Cqe {
    let deadline = StdInstant::now() + WAIT;
    loop {
        if let Some(e) = cq.cons.pop() {
            cq.cons.publish();
            return Cqe::decode(&e).expect("the engine writes valid completions");
        }
        assert!(
            StdInstant::now() < deadline,
            "no completion within {WAIT:?}"
        );
        pump();
    }
}
