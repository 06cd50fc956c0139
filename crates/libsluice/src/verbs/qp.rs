//! Queue pairs (`ibv_create_qp`, `ibv_modify_qp`, `ibv_query_qp`, `ibv_post_send`,
//! `ibv_post_recv`, `ibv_destroy_qp`): reliable connected, over the engine's RoCEv2 transport.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_shm::verbs::pipe::{
    flag, PackedRecv, PipeRecv, PipeSend, PIPE_MAX_INLINE, RECVS_PER_LINE,
};
use sluice_shm::verbs::wqe::send_flags;
use sluice_shm::verbs::{QpAttrs, SendWqe, VerbsReply, VerbsRequest, WrOpcode, INLINE_CHUNK};
use sluice_shm::{Command, PipeProducer, Producer};

use crate::attach::Sluice;
use crate::lock::lock;
use crate::verbs::control::{self, unexpected};
use crate::verbs::cq::{CompletionQueue, CqInner};
use crate::verbs::device::{PdInner, ProtectionDomain};
use crate::verbs::error::{PostError, VerbsError};
use crate::verbs::pipes::WorkPipe;
use crate::verbs::wr::{encode_recv, encode_send, RecvWr, SendWr};

/// How long a modify to RTR is retried while the engine resolves the peer's MAC (EAGAIN).
const RTR_RETRY: Duration = Duration::from_secs(1);

/// `ibv_qp_state`.
pub mod qp_state {
    /// IBV_QPS_RESET.
    pub const RESET: u32 = 0;
    /// IBV_QPS_INIT.
    pub const INIT: u32 = 1;
    /// IBV_QPS_RTR.
    pub const RTR: u32 = 2;
    /// IBV_QPS_RTS.
    pub const RTS: u32 = 3;
    /// IBV_QPS_SQD.
    pub const SQD: u32 = 4;
    /// IBV_QPS_SQE.
    pub const SQE: u32 = 5;
    /// IBV_QPS_ERR.
    pub const ERR: u32 = 6;
}

/// `ibv_qp_attr_mask` bits.
pub mod qp_mask {
    /// IBV_QP_STATE.
    pub const STATE: u32 = 1;
    /// IBV_QP_CUR_STATE.
    pub const CUR_STATE: u32 = 1 << 1;
    /// IBV_QP_ACCESS_FLAGS.
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    /// IBV_QP_PKEY_INDEX.
    pub const PKEY_INDEX: u32 = 1 << 4;
    /// IBV_QP_PORT.
    pub const PORT: u32 = 1 << 5;
    /// IBV_QP_AV (the peer's address).
    pub const AV: u32 = 1 << 7;
    /// IBV_QP_PATH_MTU.
    pub const PATH_MTU: u32 = 1 << 8;
    /// IBV_QP_TIMEOUT.
    pub const TIMEOUT: u32 = 1 << 9;
    /// IBV_QP_RETRY_CNT.
    pub const RETRY_CNT: u32 = 1 << 10;
    /// IBV_QP_RNR_RETRY.
    pub const RNR_RETRY: u32 = 1 << 11;
    /// IBV_QP_RQ_PSN.
    pub const RQ_PSN: u32 = 1 << 12;
    /// IBV_QP_MAX_QP_RD_ATOMIC.
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    /// IBV_QP_MIN_RNR_TIMER.
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    /// IBV_QP_SQ_PSN.
    pub const SQ_PSN: u32 = 1 << 16;
    /// IBV_QP_MAX_DEST_RD_ATOMIC.
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    /// IBV_QP_DEST_QPN.
    pub const DEST_QPN: u32 = 1 << 20;
}

/// What a QP is created with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInit {
    /// Send work requests outstanding at most.
    pub max_send_wr: u32,
    /// Receive work requests outstanding at most.
    pub max_recv_wr: u32,
    /// Inline bytes per send work request at most.
    pub max_inline: u32,
}

/// What the QP holds (at least what was asked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    /// The QP's number.
    pub qpn: u32,
    /// Send work requests it holds.
    pub max_send_wr: u32,
    /// Receive work requests it holds.
    pub max_recv_wr: u32,
    /// Inline bytes it takes per send work request.
    pub max_inline: u32,
}

/// A reliable-connected queue pair. Dropping it destroys it (outstanding work is flushed).
pub struct QueuePair {
    pd: Arc<PdInner>,
    _send_cq: Arc<CqInner>,
    _recv_cq: Arc<CqInner>,
    caps: QpCaps,
    /// The send queue's producer: the QP's posting threads take turns (None in pipe mode).
    sq: Option<Mutex<Producer>>,
    /// The receive queue's producer (None in pipe mode).
    rq: Option<Mutex<Producer>>,
    /// Pipe mode: the work-request pipe it shares with the other QPs placed there, and the
    /// tag of its next receive.
    pipe: Option<(WorkPipe, AtomicU32)>,
    /// The state the last successful modify or query set (posting in RESET is refused here,
    /// as an RNIC's library does; the engine's own state may have moved to ERR since).
    state: AtomicU32,
    destroyed: AtomicBool,
}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair")
            .field("caps", &self.caps)
            .finish_non_exhaustive()
    }
}

impl ProtectionDomain {
    /// An RC QP in RESET whose completions go to `send_cq` and `recv_cq`.
    pub fn create_qp(
        &self,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        init: QpInit,
    ) -> Result<QueuePair, VerbsError> {
        let sluice = &self.0.sluice;
        let req = VerbsRequest::CreateQp {
            pd: self.0.pd,
            send_cq: send_cq.0.cq,
            recv_cq: recv_cq.0.cq,
            max_send_wr: init.max_send_wr,
            max_recv_wr: init.max_recv_wr,
            max_inline: init.max_inline,
        };
        match control::call(sluice, req, &[])? {
            VerbsReply::Qp {
                qpn,
                sq,
                rq,
                max_send_wr,
                max_recv_wr,
                max_inline,
            } => {
                let producer = |q: u32| {
                    Producer::verbs(sluice.region.clone(), q)
                        .ok_or_else(|| VerbsError::Protocol(format!("work queue {q} out of range")))
                };
                let qp = QueuePair {
                    pd: self.0.clone(),
                    _send_cq: send_cq.0.clone(),
                    _recv_cq: recv_cq.0.clone(),
                    caps: QpCaps {
                        qpn,
                        max_send_wr,
                        max_recv_wr,
                        max_inline,
                    },
                    sq: Some(Mutex::new(producer(sq)?)),
                    rq: Some(Mutex::new(producer(rq)?)),
                    pipe: None,
                    state: AtomicU32::new(qp_state::RESET),
                    destroyed: AtomicBool::new(false),
                };
                Ok(qp)
            }
            other => Err(unexpected(other)),
        }
    }
}

impl ProtectionDomain {
    /// A pipe-mode RC QP in RESET (docs/verbs.md "Notification pipes"): its work requests
    /// go in the calling thread's context's work-request pipe of the engine core the engine
    /// placed it on, shared with the other QPs there, and need no doorbell; both CQs must
    /// be pipe-mode ones ([`Device::create_pipe_cq`](crate::verbs::Device::create_pipe_cq)).
    pub fn create_pipe_qp(
        &self,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        init: QpInit,
    ) -> Result<QueuePair, VerbsError> {
        let sluice = &self.0.sluice;
        let context = sluice
            .with_context(|ctx| Ok(ctx.index))
            .map_err(VerbsError::Library)?;
        let req = VerbsRequest::CreatePipeQp {
            pd: self.0.pd,
            send_cq: send_cq.0.cq,
            recv_cq: recv_cq.0.cq,
            max_send_wr: init.max_send_wr,
            max_recv_wr: init.max_recv_wr,
            max_inline: init.max_inline,
            context,
        };
        match control::call(sluice, req, &[])? {
            VerbsReply::PipeQp {
                qpn,
                core,
                max_send_wr,
                max_recv_wr,
                max_inline,
            } => {
                let pipe = sluice.pipes().work_pipe(context, core)?;
                Ok(QueuePair {
                    pd: self.0.clone(),
                    _send_cq: send_cq.0.clone(),
                    _recv_cq: recv_cq.0.clone(),
                    caps: QpCaps {
                        qpn,
                        max_send_wr,
                        max_recv_wr,
                        max_inline,
                    },
                    sq: None,
                    rq: None,
                    pipe: Some((pipe, AtomicU32::new(0))),
                    state: AtomicU32::new(qp_state::RESET),
                    destroyed: AtomicBool::new(false),
                })
            }
            other => Err(unexpected(other)),
        }
    }
}

impl QueuePair {
    /// Whether it is a pipe-mode QP.
    pub fn is_piped(&self) -> bool {
        self.pipe.is_some()
    }

    /// The QP's number.
    pub fn qpn(&self) -> u32 {
        self.caps.qpn
    }

    /// The attachment its control calls go through.
    pub(crate) fn sluice(&self) -> &Sluice {
        &self.pd.sluice
    }

    /// What it holds.
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    /// The state as this process last set or queried it ([`qp_state`]).
    pub fn state(&self) -> u32 {
        self.state.load(Ordering::Relaxed)
    }

    /// `ibv_modify_qp`: the attributes `mask` ([`qp_mask`]) names. A move to RTR is retried
    /// for up to a second while the engine resolves the peer's MAC (EAGAIN).
    pub fn modify(&self, attrs: &QpAttrs, mask: u32) -> Result<(), VerbsError> {
        let req = VerbsRequest::ModifyQp {
            qpn: self.caps.qpn,
            mask,
            attrs: *attrs,
        };
        let start = Instant::now();
        loop {
            match control::call_done(&self.pd.sluice, req) {
                Err(VerbsError::Refused(libc::EAGAIN)) if start.elapsed() < RTR_RETRY => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(()) => {
                    if mask & qp_mask::STATE != 0 {
                        self.state.store(attrs.qp_state, Ordering::Relaxed);
                    }
                    return Ok(());
                }
                r => return r,
            }
        }
    }

    /// `ibv_query_qp`: its attributes and state.
    pub fn query(&self) -> Result<QpAttrs, VerbsError> {
        match control::call(
            &self.pd.sluice,
            VerbsRequest::QueryQp { qpn: self.caps.qpn },
            &[],
        )? {
            VerbsReply::QpAttrs(a) => {
                self.state.store(a.qp_state, Ordering::Relaxed);
                Ok(a)
            }
            other => Err(unexpected(other)),
        }
    }

    /// Posts send work requests in order, then rings the engine once. Stops at the first
    /// that is wrong (EINVAL) or does not fit in the send queue (ENOMEM); those before it
    /// are posted. EINVAL for all while the QP is in RESET, INIT or RTR.
    pub fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        let state = self.state.load(Ordering::Relaxed);
        if !wrs.is_empty() && matches!(state, qp_state::RESET | qp_state::INIT | qp_state::RTR) {
            return Err(PostError {
                index: 0,
                error: VerbsError::Invalid("QP state (sends need RTS)"),
            });
        }
        if let Some((pipe, _)) = &self.pipe {
            return self.post_send_piped(pipe, wrs);
        }
        let Some(sq) = &self.sq else {
            return Ok(());
        };
        let mut sq = lock(sq);
        let mut posted = 0;
        let result = (|| {
            for (i, wr) in wrs.iter().enumerate() {
                let fail = |error| PostError { index: i, error };
                let e = encode_send(wr, self.caps.max_inline).map_err(fail)?;
                push_all(&mut sq, e.as_slice()).map_err(fail)?;
                posted += 1;
            }
            Ok(())
        })();
        drop(sq);
        self.doorbell(posted, result)
    }

    /// Pipe mode: each request as a line naming the QP (and its inline continuation lines),
    /// then the engine is woken only if it announced it sleeps.
    fn post_send_piped(&self, pipe: &WorkPipe, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        let mut p = lock(pipe);
        let mut posted = 0;
        let result = (|| {
            for (i, wr) in wrs.iter().enumerate() {
                let fail = |error| PostError { index: i, error };
                let mut e = encode_send(wr, self.caps.max_inline).map_err(fail)?;
                let wqe = SendWqe::decode(&e.entries[0])
                    .map_err(|err| fail(VerbsError::Protocol(err.to_string())))?;
                e.entries[0] = PipeSend {
                    qpn: self.caps.qpn,
                    wqe,
                }
                .encode();
                push_pipe(&mut p, e.as_slice()).map_err(fail)?;
                posted += 1;
            }
            Ok(())
        })();
        drop(p);
        if posted > 0 {
            self.pd.sluice.ring_doorbell();
        }
        result
    }

    /// The low-latency inline QP (flexins.txt 3.4; docs/verbs.md "The inline QP"): an RDMA
    /// WRITE of `data` and the flag trailer, carried inline in the pipe, placed so that
    /// the trailer ends at the end of the peer's slot `slot_addr .. slot_addr + slot_len`
    /// (key `rkey`); the peer learns of it by polling the trailer's valid byte
    /// ([`MemoryRegion::poll_inline_recv`](crate::verbs::MemoryRegion::poll_inline_recv)),
    /// with no receive posted and no completion. `signaled` asks for a completion here.
    /// EINVAL unless the QP is a pipe-mode one in RTS and data and trailer fit its
    /// `max_inline` (one MTU at most) and the slot.
    pub fn post_send_inline_flagged(
        &self,
        wr_id: u64,
        data: &[u8],
        slot_addr: u64,
        slot_len: usize,
        rkey: u32,
        signaled: bool,
    ) -> Result<(), VerbsError> {
        let Some((pipe, _)) = &self.pipe else {
            return Err(VerbsError::Invalid(
                "flagged inline sends need a pipe-mode QP",
            ));
        };
        if self.state.load(Ordering::Relaxed) != qp_state::RTS {
            return Err(VerbsError::Invalid("QP state (sends need RTS)"));
        }
        let total = data.len() + flag::TRAILER_BYTES;
        if total > self.caps.max_inline as usize || total > slot_len {
            return Err(VerbsError::Invalid(
                "inline length past max_inline or the slot",
            ));
        }
        let wqe = SendWqe {
            wr_id,
            opcode: WrOpcode::RdmaWrite,
            flags: send_flags::INLINE | if signaled { send_flags::SIGNALED } else { 0 },
            sge: None,
            inline_len: total as u16,
            remote_addr: slot_addr + (slot_len - total) as u64,
            rkey,
            imm: 0,
            resp_len: 0,
        };
        let mut lines = [[0u8; sluice_shm::PAYLOAD_BYTES]; 1 + INLINE_LINES];
        lines[0] = PipeSend {
            qpn: self.caps.qpn,
            wqe,
        }
        .encode();
        let trailer = flag::trailer(data.len() as u32);
        let bytes = data.iter().chain(trailer.iter());
        let mut chunk = [0u8; INLINE_CHUNK];
        let mut n = 0;
        for (i, &b) in bytes.enumerate() {
            chunk[i % INLINE_CHUNK] = b;
            if i % INLINE_CHUNK == INLINE_CHUNK - 1 || i == total - 1 {
                n += 1;
                lines[n] = SendWqe::encode_inline(&chunk[..=i % INLINE_CHUNK]);
            }
        }
        push_pipe(&mut lock(pipe), &lines[..=n])?;
        self.pd.sluice.ring_doorbell();
        Ok(())
    }

    /// Pipe mode: receives grouped up to four to a line (those in a row with the same key),
    /// each with a tag the library maps back to its `wr_id` when it completes.
    fn post_recv_piped(
        &self,
        pipe: &WorkPipe,
        next_tag: &AtomicU32,
        wrs: &[RecvWr],
    ) -> Result<(), PostError> {
        let pipes = self.pd.sluice.pipes();
        let qpn = self.caps.qpn;
        let mut p = lock(pipe);
        let mut i = 0;
        let mut result = Ok(());
        while i < wrs.len() {
            let key = |wr: &RecvWr| wr.sge.map_or(0, |s| s.lkey);
            let lkey = key(&wrs[i]);
            let n = wrs[i..]
                .iter()
                .take(RECVS_PER_LINE)
                .take_while(|w| key(w) == lkey)
                .count();
            let tag = next_tag.load(Ordering::Relaxed);
            let mut line = PipeRecv {
                qpn,
                lkey,
                tag,
                count: n as u8,
                recvs: [PackedRecv::default(); RECVS_PER_LINE],
            };
            for (k, wr) in wrs[i..i + n].iter().enumerate() {
                if let Some(s) = wr.sge {
                    line.recvs[k] = PackedRecv {
                        addr: s.addr,
                        length: s.length,
                    };
                }
            }
            // Known before the engine can complete them.
            let tags = (0..n as u32).map(|k| tag.wrapping_add(k));
            pipes.add_tags(qpn, tags.clone().zip(wrs[i..i + n].iter().map(|w| w.wr_id)));
            if let Err(error) = push_pipe(&mut p, &[line.encode()]) {
                pipes.remove_tags(qpn, tags);
                result = Err(PostError { index: i, error });
                break;
            }
            next_tag.store(tag.wrapping_add(n as u32), Ordering::Relaxed);
            i += n;
        }
        drop(p);
        if i > 0 {
            self.pd.sluice.ring_doorbell();
        }
        result
    }

    /// Posts receive work requests in order, then rings the engine once (as
    /// [`QueuePair::post_send`]).
    pub fn post_recv(&self, wrs: &[RecvWr]) -> Result<(), PostError> {
        if !wrs.is_empty() && self.state.load(Ordering::Relaxed) == qp_state::RESET {
            return Err(PostError {
                index: 0,
                error: VerbsError::Invalid("QP state (RESET)"),
            });
        }
        if let Some((pipe, tag)) = &self.pipe {
            return self.post_recv_piped(pipe, tag, wrs);
        }
        let Some(rq) = &self.rq else {
            return Ok(());
        };
        let mut rq = lock(rq);
        let mut posted = 0;
        let result = (|| {
            for (i, wr) in wrs.iter().enumerate() {
                push_all(&mut rq, &[encode_recv(wr)])
                    .map_err(|error| PostError { index: i, error })?;
                posted += 1;
            }
            Ok(())
        })();
        drop(rq);
        self.doorbell(posted, result)
    }

    /// One QpDoorbell on the calling thread's context if anything was posted.
    fn doorbell(&self, posted: usize, result: Result<(), PostError>) -> Result<(), PostError> {
        if posted > 0 {
            let rang = self
                .pd
                .sluice
                .post(Command::QpDoorbell { qpn: self.caps.qpn });
            if let Err(e) = rang {
                return Err(PostError {
                    index: 0,
                    error: e.into(),
                });
            }
        }
        result
    }

    /// Destroys it now (outstanding work completes with IBV_WC_WR_FLUSH_ERR first).
    pub fn destroy(self) -> Result<(), VerbsError> {
        self.destroy_once()
    }

    fn destroy_once(&self) -> Result<(), VerbsError> {
        if self.destroyed.swap(true, Ordering::Relaxed) || !self.pd.sluice.is_alive() {
            return Ok(());
        }
        let r = control::call_done(
            &self.pd.sluice,
            VerbsRequest::DestroyQp { qpn: self.caps.qpn },
        );
        if self.pipe.is_some() {
            self.pd.sluice.pipes().remove_qp(self.caps.qpn);
        }
        r
    }
}

/// Appends a work request's entries, all or none: ENOMEM when they do not all fit.
fn push_all(q: &mut Producer, entries: &[sluice_shm::Payload]) -> Result<(), VerbsError> {
    let free = q
        .free()
        .map_err(|e| VerbsError::Protocol(format!("work queue: {e}")))?;
    if free < entries.len() as u64 {
        return Err(VerbsError::QueueFull);
    }
    for e in entries {
        let pushed = q
            .push(e)
            .map_err(|e| VerbsError::Protocol(format!("work queue: {e}")))?;
        if !pushed {
            return Err(VerbsError::QueueFull);
        }
    }
    Ok(())
}

/// Continuation lines of the longest flagged inline send.
const INLINE_LINES: usize = PIPE_MAX_INLINE.div_ceil(INLINE_CHUNK);

/// Appends a request's lines to a pipe, all or none: ENOMEM when they do not all fit.
fn push_pipe(p: &mut PipeProducer, lines: &[sluice_shm::Payload]) -> Result<(), VerbsError> {
    let room = p
        .room(lines.len() as u64)
        .map_err(|e| VerbsError::Protocol(format!("pipe: {e}")))?;
    if !room {
        return Err(VerbsError::QueueFull);
    }
    for l in lines {
        p.push(l)
            .map_err(|e| VerbsError::Protocol(format!("pipe: {e}")))?;
    }
    Ok(())
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        let _ = self.destroy_once();
    }
}
