//! The responder half of an RC QP (IBA 9.7.5 and 9.9.5): the expected PSN, SENDs placed
//! into posted receives, WRITEs and READs checked against the rkey's region, duplicates
//! acknowledged again (a duplicate READ is answered again), one PSN sequence NAK per gap,
//! RNR NAK when no receive is posted, and ACKs with the message sequence number.

use std::collections::VecDeque;

use super::offload::OffloadResponder;
use super::payload::PayloadDst;
use super::wr::{PostError, RecvWr};
use super::{Ctx, Memory, QpConfig, QpCounters};
use crate::verbs::{Access, Key, WcOpcode, WcStatus, WorkCompletion};
use crate::wire::{AethRepr, NakCode, Opcode, Psn, RethRepr, RoceRepr, Syndrome};

/// ACKs and NAKs waiting to go out (a bound: more are coalesced into the newest).
const MAX_ACKS: usize = 16;
/// READs the responder answers at once (max_dest_rd_atomic).
pub(crate) const MAX_READS: usize = 16;

#[derive(Clone, Copy, Debug)]
struct Ack {
    psn: Psn,
    syndrome: Syndrome,
}

#[derive(Clone, Copy, Debug)]
struct ReadJob {
    /// PSN of the next response.
    psn: Psn,
    /// Next byte to send, and its key.
    va: u64,
    rkey: Key,
    /// Bytes still to send, and the first response's flag.
    left: u32,
    first: bool,
}

/// The responder.
pub(super) struct Responder {
    epsn: Psn,
    msn: u32,
    rq: VecDeque<RecvWr>,
    /// The receive a multi-packet SEND fills, and the bytes placed.
    recv: Option<(RecvWr, u32)>,
    /// A multi-packet WRITE: next address, key, bytes left, total.
    write: Option<(u64, Key, u32, u32)>,
    /// A sequence NAK was sent for the current gap.
    nak_sent: bool,
    acks: VecDeque<Ack>,
    reads: VecDeque<ReadJob>,
    /// OFFLOAD requests and responses (qp/offload.rs).
    pub(super) offload: OffloadResponder,
}

impl Responder {
    pub(super) fn new(cfg: &QpConfig) -> Responder {
        Responder {
            epsn: cfg.rq_psn,
            msn: 0,
            rq: VecDeque::with_capacity(cfg.rq_cap),
            recv: None,
            write: None,
            nak_sent: false,
            acks: VecDeque::new(),
            reads: VecDeque::new(),
            offload: OffloadResponder::new(),
        }
    }

    /// The expected PSN from the peer's first request (INIT -> RTR); receives stay.
    pub(super) fn restart(&mut self, rq_psn: Psn) {
        self.epsn = rq_psn;
        self.msn = 0;
        self.nak_sent = false;
    }

    pub(super) fn post(&mut self, wr: RecvWr, cfg: &QpConfig) -> Result<(), PostError> {
        if self.rq.len() >= cfg.rq_cap {
            return Err(PostError::QueueFull);
        }
        self.rq.push_back(wr);
        Ok(())
    }

    fn ack(&mut self, psn: Psn, syndrome: Syndrome) {
        if self.acks.len() >= MAX_ACKS {
            self.acks.pop_front();
        }
        self.acks.push_back(Ack { psn, syndrome });
    }

    /// A request packet. True if the QP fails (after the NAK that tells the requester).
    pub(super) fn on_request<M: Memory>(
        &mut self,
        ctx: &mut Ctx<'_, M>,
        cfg: &QpConfig,
        repr: &RoceRepr,
        payload: &[u8],
        counters: &mut QpCounters,
    ) -> bool {
        let p = repr.bth.psn;
        if p.lt(self.epsn) {
            counters.duplicates += 1;
            return self.duplicate(ctx, cfg, repr, counters);
        }
        if p != self.epsn {
            counters.refused += 1;
            // One NAK per gap (IBA 9.9.5.1), and again to a packet that asks for an
            // answer (the end of a burst): a lost NAK then costs a round trip, not the
            // local ACK timeout.
            if !self.nak_sent || repr.bth.ack_req {
                self.nak_sent = true;
                counters.naks_tx += 1;
                self.ack(self.epsn, Syndrome::Nak(NakCode::PsnSequenceError));
            }
            return false;
        }
        if repr.bth.opcode == Opcode::OffloadRequest {
            return self.offload_request(cfg, repr, payload, counters);
        }
        match self.execute(ctx, cfg, repr, payload) {
            Ok(Some(next)) => {
                self.epsn = next;
                self.nak_sent = false;
                // A READ request is acknowledged by its responses.
                if repr.bth.ack_req && repr.bth.opcode != Opcode::ReadRequest {
                    self.ack(p, Syndrome::Ack { credits: 0x1f });
                }
                false
            }
            Ok(None) => {
                // Receiver not ready: the requester tries again after the timer.
                counters.naks_tx += 1;
                self.ack(
                    p,
                    Syndrome::RnrNak {
                        timer: cfg.min_rnr_timer,
                    },
                );
                false
            }
            Err((code, status)) => {
                counters.refused += 1;
                counters.naks_tx += 1;
                self.ack(p, Syndrome::Nak(code));
                if let Some(status) = status {
                    let wr = self.recv.take().map(|(wr, _)| wr);
                    if let Some(wr) = wr {
                        let _ = ctx
                            .cqs
                            .recv()
                            .push(recv_completion(&wr, status, 0, None, repr, cfg));
                    }
                }
                true
            }
        }
    }

    /// An OFFLOAD request at the expected PSN: received like a SEND, handed to the offload
    /// engine instead of a receive, acknowledged by its response. An unknown opcode is
    /// NAKed (invalid request) and not carried out; this QP stays up. True if the QP fails.
    fn offload_request(
        &mut self,
        cfg: &QpConfig,
        repr: &RoceRepr,
        payload: &[u8],
        counters: &mut QpCounters,
    ) -> bool {
        let p = repr.bth.psn;
        // A new message must not start inside one (IBA 9.9.5.2: an invalid request).
        if self.recv.is_some() || self.write.is_some() {
            counters.refused += 1;
            counters.naks_tx += 1;
            self.ack(p, Syndrome::Nak(NakCode::InvalidRequest));
            return true;
        }
        match self.offload.accept(cfg, repr, payload) {
            Ok(true) => {
                self.epsn = p + 1;
                self.nak_sent = false;
                self.msn = (self.msn + 1) & crate::wire::aeth::MAX_MSN;
            }
            Ok(false) => {
                counters.naks_tx += 1;
                self.ack(
                    p,
                    Syndrome::RnrNak {
                        timer: cfg.min_rnr_timer,
                    },
                );
            }
            Err(code) => {
                counters.refused += 1;
                counters.naks_tx += 1;
                self.ack(p, Syndrome::Nak(code));
            }
        }
        false
    }

    /// Carries out the request at the expected PSN. Ok(Some(next PSN)); Ok(None) for
    /// receiver not ready; Err: the NAK, and the status of the receive it fails.
    fn execute<M: Memory>(
        &mut self,
        ctx: &mut Ctx<'_, M>,
        cfg: &QpConfig,
        repr: &RoceRepr,
        payload: &[u8],
    ) -> Result<Option<Psn>, (NakCode, Option<WcStatus>)> {
        use Opcode::*;
        let op = repr.bth.opcode;
        let p = repr.bth.psn;
        let invalid = Err((NakCode::InvalidRequest, None));
        let len = payload.len() as u32;
        let first = matches!(
            op,
            SendFirst | SendOnly | SendOnlyImm | WriteFirst | WriteOnly | WriteOnlyImm
        );
        let last = !matches!(op, SendFirst | SendMiddle | WriteFirst | WriteMiddle);
        // A message in progress must go on; a new one must not start inside one.
        let in_send = self.recv.is_some();
        let in_write = self.write.is_some();
        match op {
            SendFirst | SendOnly | SendOnlyImm | WriteFirst | WriteOnly | WriteOnlyImm
            | ReadRequest
                if in_send || in_write =>
            {
                return invalid
            }
            SendMiddle | SendLast | SendLastImm if !in_send => return invalid,
            WriteMiddle | WriteLast | WriteLastImm if !in_write => return invalid,
            _ => {}
        }
        // Middle and first packets are full MTU (IBA 9.7.4.1.3).
        if !last && len != cfg.mtu || len > cfg.mtu {
            return invalid;
        }
        match op {
            SendFirst | SendMiddle | SendLast | SendLastImm | SendOnly | SendOnlyImm => {
                if first {
                    let Some(wr) = self.rq.pop_front() else {
                        return Ok(None);
                    };
                    self.recv = Some((wr, 0));
                }
                let Some((wr, placed)) = self.recv else {
                    return invalid;
                };
                if placed + len > wr.sge.len {
                    return Err((NakCode::InvalidRequest, Some(WcStatus::LocLenErr)));
                }
                let addr = wr.sge.addr + u64::from(placed);
                if len > 0 {
                    match ctx.mrs.check(
                        wr.sge.lkey,
                        cfg.pd,
                        addr,
                        u64::from(len),
                        Access::LOCAL_WRITE,
                    ) {
                        Ok(at) if ctx.mem.write(at.backing, at.offset, payload) => {}
                        _ => {
                            return Err((
                                NakCode::RemoteOperationalError,
                                Some(WcStatus::LocProtErr),
                            ))
                        }
                    }
                }
                let placed = placed + len;
                self.recv = Some((wr, placed));
                if last {
                    self.recv = None;
                    self.msn = (self.msn + 1) & crate::wire::aeth::MAX_MSN;
                    let imm = repr.immdt.map(|i| i.0);
                    let _ = ctx.cqs.recv().push(recv_completion(
                        &wr,
                        WcStatus::Success,
                        placed,
                        imm,
                        repr,
                        cfg,
                    ));
                }
                Ok(Some(p + 1))
            }
            WriteFirst | WriteMiddle | WriteLast | WriteLastImm | WriteOnly | WriteOnlyImm => {
                // WRITE with immediate consumes a receive: none posted, nothing is placed.
                if repr.immdt.is_some() && self.rq.is_empty() {
                    return Ok(None);
                }
                if first {
                    let Some(reth) = repr.reth else {
                        return invalid;
                    };
                    let rkey = Key(reth.rkey);
                    if ctx
                        .mrs
                        .check(
                            rkey,
                            cfg.pd,
                            reth.va,
                            u64::from(reth.dma_len),
                            Access::REMOTE_WRITE,
                        )
                        .is_err()
                    {
                        return Err((NakCode::RemoteAccessError, None));
                    }
                    self.write = Some((reth.va, rkey, reth.dma_len, reth.dma_len));
                }
                let Some((va, rkey, left, total)) = self.write else {
                    return invalid;
                };
                if len > left || (last && len != left) {
                    return invalid;
                }
                if len > 0 {
                    match ctx
                        .mrs
                        .check(rkey, cfg.pd, va, u64::from(len), Access::REMOTE_WRITE)
                    {
                        Ok(at) if ctx.mem.write(at.backing, at.offset, payload) => {}
                        _ => return Err((NakCode::RemoteAccessError, None)),
                    }
                }
                self.write = Some((va + u64::from(len), rkey, left - len, total));
                if last {
                    self.write = None;
                    self.msn = (self.msn + 1) & crate::wire::aeth::MAX_MSN;
                    if let Some(imm) = repr.immdt {
                        if let Some(wr) = self.rq.pop_front() {
                            let mut wc = recv_completion(
                                &wr,
                                WcStatus::Success,
                                total,
                                Some(imm.0),
                                repr,
                                cfg,
                            );
                            wc.opcode = WcOpcode::RecvRdmaWithImm;
                            let _ = ctx.cqs.recv().push(wc);
                        }
                    }
                }
                Ok(Some(p + 1))
            }
            ReadRequest => {
                let Some(reth) = repr.reth else {
                    return invalid;
                };
                self.start_read(ctx, cfg, p, reth)?;
                self.msn = (self.msn + 1) & crate::wire::aeth::MAX_MSN;
                Ok(Some(p + reth.dma_len.div_ceil(cfg.mtu).max(1)))
            }
            _ => invalid,
        }
    }

    fn start_read<M: Memory>(
        &mut self,
        ctx: &mut Ctx<'_, M>,
        cfg: &QpConfig,
        p: Psn,
        reth: RethRepr,
    ) -> Result<(), (NakCode, Option<WcStatus>)> {
        let rkey = Key(reth.rkey);
        if ctx
            .mrs
            .check(
                rkey,
                cfg.pd,
                reth.va,
                u64::from(reth.dma_len),
                Access::REMOTE_READ,
            )
            .is_err()
        {
            return Err((NakCode::RemoteAccessError, None));
        }
        if self.reads.len() >= MAX_READS {
            return Err((NakCode::InvalidRequest, None));
        }
        self.reads.push_back(ReadJob {
            psn: p,
            va: reth.va,
            rkey,
            left: reth.dma_len,
            first: true,
        });
        Ok(())
    }

    /// A request before the expected PSN: already carried out. A READ is answered again
    /// from its PSN; anything else is acknowledged again (IBA 9.9.5.1).
    fn duplicate<M: Memory>(
        &mut self,
        ctx: &mut Ctx<'_, M>,
        cfg: &QpConfig,
        repr: &RoceRepr,
        counters: &mut QpCounters,
    ) -> bool {
        let p = repr.bth.psn;
        if repr.bth.opcode == Opcode::OffloadRequest {
            self.offload.duplicate(p);
            return false;
        }
        if repr.bth.opcode == Opcode::ReadRequest {
            let Some(reth) = repr.reth else {
                counters.refused += 1;
                return false;
            };
            // Answered again only if no response of it is still queued.
            if self
                .reads
                .iter()
                .any(|r| r.rkey.0 == reth.rkey && r.psn.le(p))
            {
                return false;
            }
            return self.start_read(ctx, cfg, p, reth).is_err();
        }
        if repr.bth.ack_req {
            self.ack(self.epsn + ((1 << 24) - 1), Syndrome::Ack { credits: 0x1f });
        }
        false
    }

    /// The next ACK/NAK or READ response.
    pub(super) fn transmit<M: Memory>(
        &mut self,
        ctx: &mut Ctx<'_, M>,
        cfg: &QpConfig,
        dst: &mut PayloadDst<'_>,
    ) -> Option<(RoceRepr, usize)> {
        let bth = |opcode, psn| super::bth(opcode, cfg.dest_qpn, psn);
        if let Some(a) = self.acks.pop_front() {
            let repr = RoceRepr {
                bth: bth(Opcode::Acknowledge, a.psn),
                reth: None,
                aeth: Some(AethRepr {
                    syndrome: a.syndrome,
                    msn: self.msn,
                }),
                immdt: None,
            };
            return Some((repr, 0));
        }
        if let Some(out) = self.offload.transmit(cfg, self.msn, dst) {
            return Some(out);
        }
        let job = self.reads.front_mut()?;
        let len = job.left.min(cfg.mtu);
        let last = len == job.left;
        let opcode = match (job.first, last) {
            (true, true) => Opcode::ReadResponseOnly,
            (true, false) => Opcode::ReadResponseFirst,
            (false, false) => Opcode::ReadResponseMiddle,
            (false, true) => Opcode::ReadResponseLast,
        };
        let aeth = (opcode != Opcode::ReadResponseMiddle).then_some(AethRepr {
            syndrome: Syndrome::Ack { credits: 0x1f },
            msn: self.msn,
        });
        let repr = RoceRepr {
            bth: bth(opcode, job.psn),
            reth: None,
            aeth,
            immdt: None,
        };
        let out = dst.slot(&repr, len as usize)?;
        if len > 0 {
            // The region may have been deregistered since the request: send nothing of it.
            let at = ctx
                .mrs
                .check(
                    job.rkey,
                    cfg.pd,
                    job.va,
                    u64::from(len),
                    Access::REMOTE_READ,
                )
                .ok()?;
            if !ctx.mem.read(at.backing, at.offset, out) {
                return None;
            }
        }
        job.psn = job.psn + 1;
        job.va += u64::from(len);
        job.left -= len;
        job.first = false;
        if last {
            self.reads.pop_front();
        }
        Some((repr, len as usize))
    }

    /// The QP failed: posted receives complete flushed.
    pub(super) fn flush<M: Memory>(&mut self, ctx: &mut Ctx<'_, M>, cfg: &QpConfig) {
        let flushed: Vec<RecvWr> = self
            .recv
            .take()
            .map(|(wr, _)| wr)
            .into_iter()
            .chain(self.rq.drain(..))
            .collect();
        for wr in flushed {
            let _ = ctx.cqs.recv().push(WorkCompletion {
                wr_id: wr.wr_id,
                status: WcStatus::WrFlushErr,
                opcode: WcOpcode::Recv,
                byte_len: 0,
                imm: None,
                qp_num: cfg.qpn,
                src_qp: cfg.dest_qpn,
                solicited: false,
            });
        }
        // The NAK that tells the requester why still goes out (IBA 9.9.5.2); READ
        // responses do not.
        self.reads.clear();
        self.offload.flush();
    }
}

fn recv_completion(
    wr: &RecvWr,
    status: WcStatus,
    byte_len: u32,
    imm: Option<u32>,
    repr: &RoceRepr,
    cfg: &QpConfig,
) -> WorkCompletion {
    WorkCompletion {
        wr_id: wr.wr_id,
        status,
        opcode: WcOpcode::Recv,
        byte_len,
        imm,
        qp_num: cfg.qpn,
        src_qp: cfg.dest_qpn,
        solicited: repr.bth.solicited,
    }
}
