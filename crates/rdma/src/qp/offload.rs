//! OFFLOAD requests and responses on an RC QP (flexins.txt 3.5; docs/offload.md): the
//! requester's OFFLOAD Request packet, and the responder's side — a request at the expected
//! PSN is received like a SEND and handed out, through a bounded queue, to the offload engine
//! that runs the handler registered for its offload opcode; the responses go back as OFFLOAD
//! Response packets in PSN order, and a bounded replay cache answers a duplicate request
//! again without running its handler twice.

use std::collections::VecDeque;
use std::fmt;

use super::payload::PayloadDst;
use super::wr::{SendWr, Sge};
use super::{Ctx, Memory, QpConfig};
use crate::verbs::{Access, WcStatus};
use crate::wire::{AethRepr, ImmDt, NakCode, Opcode, Psn, RethRepr, RoceRepr, Syndrome};

/// Offload opcodes one QP registers at most.
pub const MAX_OFFLOAD_OPCODES: usize = 16;
/// OFFLOAD requests a responder holds at once (handed out or answered, not yet sent); one
/// more is refused with an RNR NAK, so the requester tries again.
pub const MAX_OFFLOADS: usize = 16;
/// Responses kept, after they went, to answer a duplicate request again.
const REPLAY: usize = 16;

/// An OFFLOAD request handed to the offload engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffloadRequest {
    /// The QP it came on.
    pub qpn: u32,
    /// Its PSN: names it in [`super::QueuePair::complete_offload`].
    pub psn: Psn,
    /// The offload opcode (the handler's).
    pub opcode: u32,
    /// Bytes the response may have (the requester's buffer, at most one MTU).
    pub resp_cap: u32,
    /// The request bytes.
    pub payload: Vec<u8>,
}

/// Why an offload opcode was not registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffloadRegisterError {
    /// The QP has [`MAX_OFFLOAD_OPCODES`] already.
    Full,
    /// This opcode is registered on the QP already.
    Duplicate,
}

impl fmt::Display for OffloadRegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OffloadRegisterError::Full => "too many offload opcodes on this queue pair",
            OffloadRegisterError::Duplicate => "offload opcode already registered",
        })
    }
}

impl std::error::Error for OffloadRegisterError {}

/// Counters of a QP's offload traffic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffloadCounters {
    /// Requests accepted and handed out.
    pub requests: u64,
    /// Requests for an opcode no handler registered (NAKed: invalid request).
    pub unknown_opcode: u64,
    /// Malformed requests (no RETH/ImmDt, a capacity over the MTU; NAKed).
    pub malformed: u64,
    /// Requests refused with RNR NAK because [`MAX_OFFLOADS`] were held.
    pub busy: u64,
    /// Responses sent (replays included).
    pub responses: u64,
    /// Responses with a non-zero status (the handler failed).
    pub error_responses: u64,
    /// Duplicate requests answered again from the replay cache.
    pub replayed: u64,
    /// Completions refused (no such request, or a response over its capacity).
    pub bad_completions: u64,
}

struct Slot {
    psn: Psn,
    resp_cap: u32,
    done: Option<(u32, Vec<u8>)>,
}

/// The responder's offload state.
pub(super) struct OffloadResponder {
    opcodes: Vec<u32>,
    /// Accepted requests in PSN order, until their response goes.
    slots: VecDeque<Slot>,
    /// Accepted requests the engine has not taken yet.
    handout: VecDeque<OffloadRequest>,
    /// Responses sent, for duplicates; and replays waiting to go.
    replay: VecDeque<(Psn, u32, Vec<u8>)>,
    resend: VecDeque<(Psn, u32, Vec<u8>)>,
    pub(super) counters: OffloadCounters,
}

impl OffloadResponder {
    pub(super) fn new() -> OffloadResponder {
        OffloadResponder {
            opcodes: Vec::new(),
            slots: VecDeque::new(),
            handout: VecDeque::new(),
            replay: VecDeque::new(),
            resend: VecDeque::new(),
            counters: OffloadCounters::default(),
        }
    }

    pub(super) fn register(&mut self, opcode: u32) -> Result<(), OffloadRegisterError> {
        if self.opcodes.contains(&opcode) {
            return Err(OffloadRegisterError::Duplicate);
        }
        if self.opcodes.len() >= MAX_OFFLOAD_OPCODES {
            return Err(OffloadRegisterError::Full);
        }
        self.opcodes.push(opcode);
        Ok(())
    }

    pub(super) fn unregister(&mut self, opcode: u32) -> bool {
        let before = self.opcodes.len();
        self.opcodes.retain(|&o| o != opcode);
        self.opcodes.len() != before
    }

    /// An OFFLOAD request at the expected PSN. Ok(true): accepted; Ok(false): receiver not
    /// ready (too many held); Err: the NAK.
    pub(super) fn accept(
        &mut self,
        cfg: &QpConfig,
        repr: &RoceRepr,
        payload: &[u8],
    ) -> Result<bool, NakCode> {
        let (Some(reth), Some(imm)) = (repr.reth, repr.immdt) else {
            self.counters.malformed += 1;
            return Err(NakCode::InvalidRequest);
        };
        if reth.dma_len > cfg.mtu || payload.len() > cfg.mtu as usize {
            self.counters.malformed += 1;
            return Err(NakCode::InvalidRequest);
        }
        if !self.opcodes.contains(&imm.0) {
            self.counters.unknown_opcode += 1;
            return Err(NakCode::InvalidRequest);
        }
        if self.slots.len() >= MAX_OFFLOADS {
            self.counters.busy += 1;
            return Ok(false);
        }
        self.counters.requests += 1;
        let psn = repr.bth.psn;
        self.slots.push_back(Slot {
            psn,
            resp_cap: reth.dma_len,
            done: None,
        });
        self.handout.push_back(OffloadRequest {
            qpn: cfg.qpn,
            psn,
            opcode: imm.0,
            resp_cap: reth.dma_len,
            payload: payload.to_vec(),
        });
        Ok(true)
    }

    pub(super) fn poll(&mut self) -> Option<OffloadRequest> {
        self.handout.pop_front()
    }

    /// The engine's answer to the request at `psn`; false (and counted) if there is no such
    /// request waiting or the body is over its capacity.
    pub(super) fn complete(&mut self, psn: Psn, status: u32, body: &[u8]) -> bool {
        let Some(slot) = self
            .slots
            .iter_mut()
            .find(|s| s.psn == psn && s.done.is_none())
        else {
            self.counters.bad_completions += 1;
            return false;
        };
        if body.len() > slot.resp_cap as usize {
            self.counters.bad_completions += 1;
            return false;
        }
        slot.done = Some((status, body.to_vec()));
        true
    }

    /// A duplicate OFFLOAD request: answered again if its response went and is still kept;
    /// one still with the engine is answered when it is done.
    pub(super) fn duplicate(&mut self, psn: Psn) {
        if self.resend.iter().any(|r| r.0 == psn) {
            return;
        }
        if let Some(r) = self.replay.iter().find(|r| r.0 == psn) {
            if self.resend.len() < REPLAY {
                self.counters.replayed += 1;
                self.resend.push_back(r.clone());
            }
        }
    }

    /// The next OFFLOAD response: a replay, or the oldest request's once it is answered (PSN
    /// order, IBA 9.7.5.1).
    pub(super) fn transmit(
        &mut self,
        cfg: &QpConfig,
        msn: u32,
        dst: &mut PayloadDst<'_>,
    ) -> Option<(RoceRepr, usize)> {
        // Look first, take only once the payload has its place: a response that finds the
        // buffer short stays for the next call.
        let replay = !self.resend.is_empty();
        let (psn, status, body) = match self.resend.front() {
            Some((psn, status, body)) => (*psn, *status, body.as_slice()),
            None => {
                // Nothing goes until the oldest is answered.
                let slot = self.slots.front()?;
                let (status, body) = slot.done.as_ref()?;
                (slot.psn, *status, body.as_slice())
            }
        };
        let repr = RoceRepr {
            bth: super::bth(Opcode::OffloadResponse, cfg.dest_qpn, psn),
            reth: None,
            aeth: Some(AethRepr {
                syndrome: Syndrome::Ack { credits: 0x1f },
                msn,
            }),
            immdt: Some(ImmDt(status)),
        };
        let len = body.len();
        dst.slot(&repr, len)?.copy_from_slice(body);
        if replay {
            self.resend.pop_front();
        } else if let Some(slot) = self.slots.pop_front() {
            if self.replay.len() >= REPLAY {
                self.replay.pop_front();
            }
            if let Some((status, body)) = slot.done {
                self.replay.push_back((slot.psn, status, body));
            }
        }
        self.counters.responses += 1;
        if status != 0 {
            self.counters.error_responses += 1;
        }
        Some((repr, len))
    }

    /// The QP failed: nothing held goes out.
    pub(super) fn flush(&mut self) {
        self.slots.clear();
        self.handout.clear();
        self.resend.clear();
    }
}

/// The OFFLOAD Request packet of work request `wr`: RETH with the response capacity, ImmDt
/// with the offload opcode, the request bytes read from local memory.
pub(super) fn request_packet<M: Memory>(
    wr: &SendWr,
    opcode: u32,
    resp: Sge,
    psn: Psn,
    cfg: &QpConfig,
    ctx: &mut Ctx<'_, M>,
    dst: &mut PayloadDst<'_>,
) -> Result<(RoceRepr, usize), WcStatus> {
    let mut bth = super::bth(Opcode::OffloadRequest, cfg.dest_qpn, psn);
    // Answered by its response, as a READ request is.
    bth.ack_req = true;
    bth.solicited = wr.solicited;
    let len = wr.sge.len.min(cfg.mtu);
    let repr = RoceRepr {
        bth,
        reth: Some(RethRepr {
            va: 0,
            rkey: 0,
            dma_len: resp.len.min(cfg.mtu),
        }),
        aeth: None,
        immdt: Some(ImmDt(opcode)),
    };
    let out = dst.slot(&repr, len as usize).ok_or(WcStatus::GeneralErr)?;
    if len > 0 {
        let at = ctx
            .mrs
            .check(
                wr.sge.lkey,
                cfg.pd,
                wr.sge.addr,
                u64::from(len),
                Access::empty(),
            )
            .map_err(|_| WcStatus::LocProtErr)?;
        if !ctx.mem.read(at.backing, at.offset, out) {
            return Err(WcStatus::LocProtErr);
        }
    }
    Ok((repr, len as usize))
}
