//! A host of the offload examples: one RDMA stack with one CQ, one MR and one RC QP,
//! moving whole RoCEv2 frames over a [`Link`], the offload engine beside it on the server.
//! `sluice experiment flexins-offload` runs a client and a server on two threads over an
//! in-memory link ([`ring_link`]); `sluice offload-demo` over the lab's devices.

use std::net::Ipv4Addr;
use std::time::Instant;

use rtrb::{Consumer, Producer, RingBuffer};
use sluice_rdma::qp::{Memory, Nanos, Remote, SendOp, SendWr, Sge};
use sluice_rdma::stack::{PeerAddr, QpAttr, RdmaStack, StackConfig, VerbsError};
use sluice_rdma::verbs::{Access, Key, PdId, Region, WcStatus, WorkCompletion};
use sluice_wire::EthernetAddress;

use crate::engine::OffloadEngine;

/// Where frames go and come from.
pub trait Link {
    /// Sends one frame (dropped if the link is full: the transport retransmits).
    fn send(&mut self, frame: &[u8]);
    /// The next frame received, into `buf`; false if none.
    fn recv(&mut self, buf: &mut Vec<u8>) -> bool;
}

/// One end of an in-memory link: two bounded SPSC rings of frames.
pub struct RingLink {
    tx: Producer<Vec<u8>>,
    rx: Consumer<Vec<u8>>,
}

/// Two ends of an in-memory link holding `cap` frames each way.
pub fn ring_link(cap: usize) -> (RingLink, RingLink) {
    let (a_tx, b_rx) = RingBuffer::new(cap);
    let (b_tx, a_rx) = RingBuffer::new(cap);
    (
        RingLink { tx: a_tx, rx: a_rx },
        RingLink { tx: b_tx, rx: b_rx },
    )
}

impl Link for RingLink {
    fn send(&mut self, frame: &[u8]) {
        let _ = self.tx.push(frame.to_vec());
    }

    fn recv(&mut self, buf: &mut Vec<u8>) -> bool {
        match self.rx.pop() {
            Ok(f) => {
                *buf = f;
                true
            }
            Err(_) => false,
        }
    }
}

/// Why a host call failed.
#[derive(Debug)]
pub enum HostError {
    /// A verbs call.
    Verbs(VerbsError),
    /// A work request completed with this status.
    Completion(WcStatus),
    /// No completion within the time allowed.
    Timeout,
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostError::Verbs(e) => write!(f, "verbs: {e}"),
            HostError::Completion(s) => write!(f, "work request failed: {s:?}"),
            HostError::Timeout => f.write_str("no completion in time"),
        }
    }
}

impl std::error::Error for HostError {}

impl From<VerbsError> for HostError {
    fn from(e: VerbsError) -> HostError {
        HostError::Verbs(e)
    }
}

/// The application address of the first byte of each host's region.
pub const BASE: u64 = 0x7f00_0000;

/// One host: its stack, memory, CQ, QP, region key, address and link.
pub struct Host<M: Memory, L: Link> {
    /// The stack.
    pub stack: RdmaStack,
    /// Its memory (the region registered at [`BASE`]).
    pub mem: M,
    /// The CQ of its QP.
    pub cq: u32,
    /// Its QP.
    pub qpn: u32,
    /// Its region's key (lkey and rkey).
    pub key: Key,
    /// Its address.
    pub addr: PeerAddr,
    link: L,
    /// The offload engine (on the server).
    pub engine: Option<OffloadEngine>,
    /// The path MTU [`Host::connect`] sets (IBV_MTU_* code; 5 = 4096).
    pub path_mtu: u8,
    start: Instant,
    buf: Vec<u8>,
}

impl<M: Memory, L: Link> Host<M, L> {
    /// Host number `n` (10.0.0.n) with `len` bytes of `mem` registered at [`BASE`].
    pub fn new(n: u8, mem: M, len: u64, link: L) -> Result<Host<M, L>, HostError> {
        let addr = PeerAddr {
            ip: Ipv4Addr::new(10, 0, 0, n),
            mac: EthernetAddress([2, 0, 0, 0, 0, n]),
        };
        Host::with_addr(addr, mem, len, link)
    }

    /// A host at `addr` with `len` bytes of `mem` registered at [`BASE`]: its first CQ,
    /// MR (key) and QP, so two hosts made alike have the same QPN and key.
    pub fn with_addr(addr: PeerAddr, mem: M, len: u64, link: L) -> Result<Host<M, L>, HostError> {
        let mut stack = RdmaStack::new(StackConfig {
            line_rate_bps: 0,
            ..StackConfig::new(addr.mac, addr.ip)
        });
        let cq = stack.create_cq(1024)?;
        let key = stack.reg_mr(Region {
            pd: PdId(1),
            addr: BASE,
            len,
            access: Access::LOCAL_WRITE
                .union(Access::REMOTE_WRITE)
                .union(Access::REMOTE_READ),
            backing: 0,
            offset: 0,
        })?;
        let qpn = stack.create_qp(PdId(1), cq, cq, 256, 64)?;
        Ok(Host {
            stack,
            mem,
            cq,
            qpn,
            key,
            addr,
            link,
            engine: None,
            path_mtu: 5,
            start: Instant::now(),
            buf: vec![0; 9216],
        })
    }

    /// RESET -> INIT -> RTR -> RTS towards the peer's QP ([`Host::path_mtu`], 16 READs each
    /// way).
    pub fn connect(&mut self, peer_qpn: u32, peer: PeerAddr) -> Result<(), HostError> {
        let attr = QpAttr {
            access: 0b111,
            path_mtu: self.path_mtu,
            dest_qpn: peer_qpn,
            rq_psn: 1,
            sq_psn: 1,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            peer: Some(peer),
            ..QpAttr::default()
        };
        self.stack.connect_rc(&mut self.mem, self.qpn, &attr)?;
        Ok(())
    }

    /// Nanoseconds since the host was made: the stack's clock.
    pub fn now(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos + 1
    }

    /// One pass: frames in, offload requests to the engine and its responses back, frames
    /// out, timers. True if anything moved.
    pub fn poll(&mut self) -> bool {
        let now = self.now();
        let mut moved = false;
        let mut frame = std::mem::take(&mut self.buf);
        while self.link.recv(&mut frame) {
            self.stack.handle_frame(now, &mut self.mem, &frame);
            moved = true;
        }
        frame.resize(9216, 0);
        if let Some(engine) = self.engine.as_mut() {
            while let Some(req) = self.stack.poll_offload() {
                if let Err(req) = engine.submit(req) {
                    // Every ring is full: answered as busy; the client sees the status.
                    let _ = self.stack.complete_offload(req.qpn, req.psn, 4, &[]);
                }
                moved = true;
            }
            while let Some(r) = engine.poll() {
                self.stack.complete_offload(r.qpn, r.psn, r.status, &r.body);
                moved = true;
            }
        }
        while let Some(n) = self.stack.poll_transmit(now, &mut self.mem, &mut frame) {
            self.link.send(&frame[..n]);
            moved = true;
        }
        if self.stack.poll_timeout().is_some_and(|t| t <= now) {
            self.stack.handle_timeout(now, &mut self.mem);
        }
        self.buf = frame;
        moved
    }

    /// Polls until `want` completions came (or `timeout`), returning them.
    pub fn complete(
        &mut self,
        want: usize,
        timeout: std::time::Duration,
    ) -> Result<Vec<WorkCompletion>, HostError> {
        let deadline = Instant::now() + timeout;
        let mut wcs = Vec::with_capacity(want);
        while wcs.len() < want {
            if !self.poll() {
                if Instant::now() > deadline {
                    return Err(HostError::Timeout);
                }
                // Idle: let a thread waiting for a core (the peer's, an offload thread) run.
                std::thread::yield_now();
            }
            self.stack
                .poll_cq(self.cq, want - wcs.len(), &mut wcs)
                .map_err(HostError::Verbs)?;
        }
        if let Some(w) = wcs.iter().find(|w| w.status != WcStatus::Success) {
            return Err(HostError::Completion(w.status));
        }
        Ok(wcs)
    }

    /// Posts an RDMA READ of `len` bytes at the peer's `addr` into local `local`.
    pub fn post_read(
        &mut self,
        wr_id: u64,
        addr: u64,
        rkey: Key,
        local: u64,
        len: u32,
    ) -> Result<(), HostError> {
        let wr = SendWr {
            wr_id,
            op: SendOp::Read {
                remote: Remote { addr, rkey },
            },
            sge: Sge {
                addr: local,
                len,
                lkey: self.key,
            },
            signaled: true,
            solicited: false,
        };
        Ok(self.stack.post_send(self.qpn, wr)?)
    }

    /// Posts an OFFLOAD request of the `len` bytes at local `req` for `opcode`; the
    /// response goes to local `resp` (at most `resp_len` bytes).
    pub fn post_offload(
        &mut self,
        wr_id: u64,
        opcode: u32,
        req: (u64, u32),
        resp: (u64, u32),
    ) -> Result<(), HostError> {
        let wr = SendWr {
            wr_id,
            op: SendOp::Offload {
                opcode,
                resp: Sge {
                    addr: resp.0,
                    len: resp.1,
                    lkey: self.key,
                },
            },
            sge: Sge {
                addr: req.0,
                len: req.1,
                lkey: self.key,
            },
            signaled: true,
            solicited: false,
        };
        Ok(self.stack.post_send(self.qpn, wr)?)
    }
}
