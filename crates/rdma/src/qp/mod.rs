//! Reliable-connected queue pairs (IBA vol. 1 ch. 9-10, the RC transport), sans-IO: a QP is
//! given the packets addressed to it, work requests and the time, and returns packets to
//! send, completions and its next deadline. The two halves own their state (DESIGN.md: a
//! variable belongs to one stage): the requester (`requester.rs`: the send queue, PSNs,
//! retransmission, READ responses) and the responder (`responder.rs`: the receive queue,
//! the expected PSN, placement, ACK/NAK and READ responses).
//!
//! Payload goes through [`Memory`], addressed by the placement [`MrTable::check`] returns:
//! the QP never touches bytes that check did not allow.

pub mod offload;
mod packetize;
mod payload;
mod requester;
mod responder;
pub mod wr;

use crate::verbs::{CompletionQueue, MrTable, PdId, QpState, WcStatus};
use crate::wire::{Psn, RoceRepr};
pub use offload::{OffloadCounters, OffloadRegisterError, OffloadRequest};
pub use payload::PayloadDst;
use requester::Requester;
use responder::Responder;
pub use wr::{PostError, RecvWr, Remote, SendOp, SendWr, Sge};

/// A BTH of this QP's connection: the default partition, no flags set.
fn bth(opcode: crate::wire::Opcode, dest_qp: u32, psn: Psn) -> crate::wire::BthRepr {
    crate::wire::BthRepr {
        opcode,
        solicited: false,
        migreq: false,
        pad_count: 0,
        pkey: crate::wire::bth::DEFAULT_PKEY,
        fecn: false,
        becn: false,
        dest_qp,
        ack_req: false,
        psn,
    }
}

/// RDMA READs a responder keeps at once: the max_dest_rd_atomic it honours (a device's
/// max_qp_rd_atom).
pub const MAX_DEST_RD_ATOMIC: usize = responder::MAX_READS;

/// Time in nanoseconds, from the caller's clock (virtual in tests).
pub type Nanos = u64;

/// The memory behind registered regions: `backing` names one (an application's shared
/// region in the engine, a buffer in tests), offsets are within it.
pub trait Memory {
    /// Copies the bytes at `offset` of `backing` into `out`; false if they are not there.
    fn read(&self, backing: u32, offset: u64, out: &mut [u8]) -> bool;
    /// Copies `data` to `offset` of `backing`; false if it does not fit there.
    fn write(&mut self, backing: u32, offset: u64, data: &[u8]) -> bool;
}

/// [`Memory`] over one buffer that every backing names (offsets index it): the simulator's
/// hosts, the tests, a peer without an engine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VecMemory(pub Vec<u8>);

impl Memory for VecMemory {
    fn read(&self, _backing: u32, offset: u64, out: &mut [u8]) -> bool {
        let Some(s) = usize::try_from(offset)
            .ok()
            .and_then(|o| self.0.get(o..o.checked_add(out.len())?))
        else {
            return false;
        };
        out.copy_from_slice(s);
        true
    }

    fn write(&mut self, _backing: u32, offset: u64, data: &[u8]) -> bool {
        let Some(d) = usize::try_from(offset)
            .ok()
            .and_then(|o| self.0.get_mut(o..o.checked_add(data.len())?))
        else {
            return false;
        };
        d.copy_from_slice(data);
        true
    }
}

/// A connected QP's parameters (the attributes of INIT -> RTR -> RTS).
#[derive(Clone, Copy, Debug)]
pub struct QpConfig {
    /// This QP's number.
    pub qpn: u32,
    /// The peer QP's number.
    pub dest_qpn: u32,
    /// Its protection domain.
    pub pd: PdId,
    /// Path MTU in bytes (256 to 4096).
    pub mtu: u32,
    /// First PSN this QP sends.
    pub sq_psn: Psn,
    /// First PSN it expects.
    pub rq_psn: Psn,
    /// Local ACK timeout (IBA: 4.096 us x 2^timeout).
    pub ack_timeout: Nanos,
    /// Retransmissions on timeout before the QP fails (0-7).
    pub retry_cnt: u8,
    /// Retries after receiver-not-ready (7: forever).
    pub rnr_retry: u8,
    /// The RNR NAK timer code it sends when its receive queue is empty.
    pub min_rnr_timer: u8,
    /// Packets the requester keeps unacknowledged.
    pub max_inflight: u32,
    /// RDMA READs the requester has outstanding at most (max_rd_atomic; the responder's
    /// max_dest_rd_atomic bounds it on the other side).
    pub max_rd_atomic: u8,
    /// Send and receive queue capacities.
    pub sq_cap: usize,
    /// Receive queue capacity.
    pub rq_cap: usize,
}

/// Where a QP's completions go: its send and receive completion queues, which may be one.
pub enum Cqs<'a> {
    /// One queue for both.
    Same(&'a mut CompletionQueue),
    /// Two queues.
    Split {
        /// Send completions.
        send: &'a mut CompletionQueue,
        /// Receive completions.
        recv: &'a mut CompletionQueue,
    },
}

impl Cqs<'_> {
    /// The send completion queue.
    pub fn send(&mut self) -> &mut CompletionQueue {
        match self {
            Cqs::Same(q) => q,
            Cqs::Split { send, .. } => send,
        }
    }

    /// The receive completion queue.
    pub fn recv(&mut self) -> &mut CompletionQueue {
        match self {
            Cqs::Same(q) => q,
            Cqs::Split { recv, .. } => recv,
        }
    }
}

/// What a QP needs of the stack around it for one call.
pub struct Ctx<'a, M: Memory> {
    /// The registered regions.
    pub mrs: &'a MrTable,
    /// Their memory.
    pub mem: &'a mut M,
    /// Its completion queues.
    pub cqs: Cqs<'a>,
    /// The time.
    pub now: Nanos,
}

/// Counters of one QP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCounters {
    /// Packets sent (requests and responses, retransmissions included).
    pub packets_tx: u64,
    /// Packets retransmitted by the requester.
    pub retransmits: u64,
    /// Requester timeouts.
    pub timeouts: u64,
    /// NAKs sent (sequence, RNR, errors).
    pub naks_tx: u64,
    /// Duplicate requests the responder saw.
    pub duplicates: u64,
    /// Packets refused (out of sequence, wrong opcode order, bad keys).
    pub refused: u64,
}

/// A reliable-connected queue pair in RTS (or gone to error).
pub struct QueuePair {
    cfg: QpConfig,
    state: QpState,
    req: Requester,
    resp: Responder,
    /// Counters.
    pub counters: QpCounters,
}

impl QueuePair {
    /// A QP connected by `cfg`, ready to send and receive.
    pub fn new(cfg: QpConfig) -> QueuePair {
        QueuePair {
            req: Requester::new(&cfg),
            resp: Responder::new(&cfg),
            cfg,
            state: QpState::Rts,
            counters: QpCounters::default(),
        }
    }

    /// A QP in INIT: it takes receive work requests; nothing moves until
    /// [`QueuePair::ready_to_receive`].
    pub fn initialized(cfg: QpConfig) -> QueuePair {
        QueuePair {
            state: QpState::Init,
            ..QueuePair::new(cfg)
        }
    }

    /// INIT -> RTR with the receive side's attributes: it answers the peer's requests;
    /// receives posted in INIT are kept.
    pub fn ready_to_receive(&mut self, dest_qpn: u32, rq_psn: Psn, mtu: u32, min_rnr_timer: u8) {
        self.cfg.dest_qpn = dest_qpn;
        self.cfg.rq_psn = rq_psn;
        self.cfg.mtu = mtu;
        self.cfg.min_rnr_timer = min_rnr_timer;
        self.resp.restart(rq_psn);
        if self.state == QpState::Init {
            self.state = QpState::Rtr;
        }
    }

    /// The READs it may have outstanding from now on (ibv_modify_qp's max_rd_atomic; 0 is
    /// taken as 1, so that a READ posted anyway completes rather than waits for ever).
    pub fn set_max_rd_atomic(&mut self, n: u8) {
        self.cfg.max_rd_atomic = n.max(1);
    }

    /// RTR -> RTS with the send side's attributes (nothing was posted to send before).
    pub fn ready_to_send(&mut self, sq_psn: Psn, ack_timeout: Nanos, retry_cnt: u8, rnr_retry: u8) {
        self.cfg.sq_psn = sq_psn;
        self.cfg.ack_timeout = ack_timeout;
        self.cfg.retry_cnt = retry_cnt;
        self.cfg.rnr_retry = rnr_retry;
        self.req = Requester::new(&self.cfg);
        if self.state == QpState::Rtr {
            self.state = QpState::Rts;
        }
    }

    /// RTS -> SQD (send queue drain, IBA 10.3.1): the send work requests already started
    /// finish, no new one starts; receives go on.
    pub fn drain(&mut self) {
        if self.state == QpState::Rts {
            self.state = QpState::Sqd;
            self.req.drain();
        }
    }

    /// SQD -> RTS: the send queue moves again.
    pub fn resume(&mut self) {
        if self.state == QpState::Sqd {
            self.state = QpState::Rts;
            self.req.resume();
        }
    }

    /// In SQD, whether the drain is over (every started request acknowledged; the IBA's
    /// "SQ drained" event).
    pub fn is_drained(&self) -> bool {
        self.state == QpState::Sqd && self.req.drained()
    }

    /// Its state.
    pub fn state(&self) -> QpState {
        self.state
    }

    /// Its path MTU in bytes: the most payload one packet carries.
    pub fn mtu(&self) -> u32 {
        self.cfg.mtu
    }

    /// Its number.
    pub fn qpn(&self) -> u32 {
        self.cfg.qpn
    }

    /// Queues a send work request.
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), PostError> {
        // In SQD work requests queue and wait for RTS (IBA 10.3.1).
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            return Err(PostError::WrongState);
        }
        self.req.post(wr, &self.cfg)
    }

    /// Queues a receive work request.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        if self.state == QpState::Error {
            return Err(PostError::WrongState);
        }
        self.resp.post(wr, &self.cfg)
    }

    /// Registers offload opcode `opcode` on this QP: its OFFLOAD requests are handed out by
    /// [`QueuePair::poll_offload`] (Table 2's register_opcode, flexins.txt 3.5).
    pub fn register_offload(&mut self, opcode: u32) -> Result<(), OffloadRegisterError> {
        self.resp.offload.register(opcode)
    }

    /// Unregisters `opcode`: later requests for it are NAKed. False if it was not there.
    pub fn unregister_offload(&mut self, opcode: u32) -> bool {
        self.resp.offload.unregister(opcode)
    }

    /// The next OFFLOAD request received and not yet handed out.
    pub fn poll_offload(&mut self) -> Option<OffloadRequest> {
        self.resp.offload.poll()
    }

    /// The response to the OFFLOAD request at `psn`: `status` (0 for success) and `body`,
    /// which goes back in PSN order. False (and counted) if there is no such request or the
    /// body is over the capacity the requester gave.
    pub fn complete_offload(&mut self, psn: Psn, status: u32, body: &[u8]) -> bool {
        self.state != QpState::Error && self.resp.offload.complete(psn, status, body)
    }

    /// Its offload counters.
    pub fn offload_counters(&self) -> OffloadCounters {
        self.resp.offload.counters
    }

    /// A packet addressed to this QP (its headers parsed, its payload without pad).
    pub fn handle_packet<M: Memory>(
        &mut self,
        ctx: &mut Ctx<'_, M>,
        repr: &RoceRepr,
        payload: &[u8],
    ) {
        // A CNP is the stack's (its congestion control), never the transport's.
        if self.state == QpState::Error || repr.bth.opcode.is_cnp() {
            return;
        }
        let failed = if repr.bth.opcode.is_response() {
            self.req
                .on_response(ctx, &self.cfg, repr, payload, &mut self.counters)
        } else {
            self.resp
                .on_request(ctx, &self.cfg, repr, payload, &mut self.counters)
        };
        if failed {
            self.fail(ctx, None);
        }
    }

    /// The next packet to send: its headers, and its payload written to the front of
    /// `payload` (length returned). Responses first, then requests.
    pub fn poll_transmit<M: Memory>(
        &mut self,
        ctx: &mut Ctx<'_, M>,
        payload: &mut [u8],
    ) -> Option<(RoceRepr, usize)> {
        self.poll_transmit_paced(ctx, payload, true)
    }

    /// [`QueuePair::poll_transmit`], with request packets only if `requests` (the pacer
    /// allows one now); responses are never held back.
    pub fn poll_transmit_paced<M: Memory>(
        &mut self,
        ctx: &mut Ctx<'_, M>,
        payload: &mut [u8],
        requests: bool,
    ) -> Option<(RoceRepr, usize)> {
        self.poll_transmit_into(ctx, &mut PayloadDst::Staging(payload), requests)
    }

    /// [`QueuePair::poll_transmit_paced`] with the payload read to `dst`: a staging buffer,
    /// or the frame after its headers (header-only TX).
    pub fn poll_transmit_into<M: Memory>(
        &mut self,
        ctx: &mut Ctx<'_, M>,
        dst: &mut PayloadDst<'_>,
        requests: bool,
    ) -> Option<(RoceRepr, usize)> {
        // In error, only the responder's last NAK still goes out.
        if let Some(out) = self.resp.transmit(ctx, &self.cfg, dst) {
            self.counters.packets_tx += 1;
            return Some(out);
        }
        if !requests {
            return None;
        }
        match self.req.transmit(ctx, &self.cfg, dst, &mut self.counters) {
            Ok(Some(out)) => {
                self.counters.packets_tx += 1;
                Some(out)
            }
            Ok(None) => None,
            Err(status) => {
                self.fail(ctx, Some(status));
                None
            }
        }
    }

    /// Whether a request packet would go now if the pacer allowed it (one is queued, the
    /// window has room, no RNR wait).
    pub fn wants_to_send(&self, now: Nanos) -> bool {
        matches!(self.state, QpState::Rts | QpState::Sqd) && self.req.ready(now, &self.cfg)
    }

    /// One line of state, for traces.
    pub fn describe(&self) -> String {
        format!("{:?} {}", self.state, self.req.describe())
    }

    /// When [`QueuePair::handle_timeout`] next has work.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        if self.state == QpState::Error {
            return None;
        }
        self.req.deadline()
    }

    /// Runs the retransmission timer.
    pub fn handle_timeout<M: Memory>(&mut self, ctx: &mut Ctx<'_, M>) {
        if self.state == QpState::Error {
            return;
        }
        if let Err(status) = self.req.on_timeout(ctx.now, &mut self.counters) {
            self.fail(ctx, Some(status));
        }
    }

    /// To the error state (a modify to ERR): everything outstanding completes flushed.
    pub fn to_error<M: Memory>(&mut self, ctx: &mut Ctx<'_, M>) {
        if self.state != QpState::Error {
            self.fail(ctx, None);
        }
    }

    /// To the error state: the send queue's front completes with `status` (if given) and
    /// everything else outstanding, both queues, completes flushed (IBA 10.3.1).
    fn fail<M: Memory>(&mut self, ctx: &mut Ctx<'_, M>, status: Option<WcStatus>) {
        self.state = QpState::Error;
        self.req.flush(ctx, &self.cfg, status);
        self.resp.flush(ctx, &self.cfg);
    }
}
