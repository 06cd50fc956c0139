//! The requester half of an RC QP (IBA 9.7.7 and 9.9): the send queue cut into MTU
//! packets with consecutive PSNs, the window of packets in flight, ACK/NAK and READ
//! responses acknowledging them, go-back-N retransmission from the PSN a NAK names or, on
//! the local ACK timeout, from the oldest unacknowledged one, and completions in
//! work-request order.

use std::collections::VecDeque;

use super::packetize::request_packet;
use super::payload::PayloadDst;
use super::wr::{PostError, SendOp, SendWr};
use super::{Ctx, Memory, Nanos, QpConfig, QpCounters};
use crate::verbs::{Access, WcOpcode, WcStatus, WorkCompletion};
use crate::wire::{NakCode, Opcode, Psn, RoceRepr, Syndrome};

/// Longest message (IBA: 2^31 bytes).
const MAX_MESSAGE: u32 = 1 << 31;

#[derive(Debug)]
struct Entry {
    wr: SendWr,
    /// PSN of its first packet (a READ: of its first response).
    first: Psn,
    /// Its packets (a READ: its responses).
    npkts: u32,
    /// Packets sent of this pass (a READ: 1 once its request is out).
    sent: u32,
    /// A READ's bytes placed so far.
    got: u32,
    /// Finished; the status it completes with.
    done: Option<WcStatus>,
    /// An OFFLOAD's handler status, for its completion's `imm`.
    imm: Option<u32>,
}

impl Entry {
    /// A READ, or an OFFLOAD (which goes like a READ: one request, answered by its response).
    fn is_read(&self) -> bool {
        matches!(self.wr.op, SendOp::Read { .. } | SendOp::Offload { .. })
    }

    /// One past its last PSN.
    fn end(&self) -> Psn {
        self.first + self.npkts
    }

    fn contains(&self, p: Psn) -> bool {
        p.ge(self.first) && p.lt(self.end())
    }
}

/// The requester.
pub(super) struct Requester {
    sq: VecDeque<Entry>,
    /// PSN the next posted request starts at.
    next_psn: Psn,
    /// Oldest unacknowledged PSN.
    una: Psn,
    /// One past the highest PSN sent (what a PSN below it retransmits).
    sent_end: Psn,
    /// Index in `sq` of the entry whose packets go next.
    cursor: usize,
    retry_left: u8,
    rnr_left: u8,
    deadline: Option<Nanos>,
    rnr_until: Option<Nanos>,
    /// SQD (IBA 10.3.1): request packets from this PSN on wait, the first PSN of the first
    /// work request not started when the QP was drained.
    drain_at: Option<Psn>,
}

impl Requester {
    pub(super) fn new(cfg: &QpConfig) -> Requester {
        Requester {
            sq: VecDeque::with_capacity(cfg.sq_cap),
            next_psn: cfg.sq_psn,
            una: cfg.sq_psn,
            sent_end: cfg.sq_psn,
            cursor: 0,
            retry_left: cfg.retry_cnt,
            rnr_left: cfg.rnr_retry,
            deadline: None,
            rnr_until: None,
            drain_at: None,
        }
    }

    pub(super) fn post(&mut self, wr: SendWr, cfg: &QpConfig) -> Result<(), PostError> {
        if self.sq.len() >= cfg.sq_cap {
            return Err(PostError::QueueFull);
        }
        if wr.sge.len > MAX_MESSAGE {
            return Err(PostError::TooLong);
        }
        if matches!(wr.op, SendOp::Offload { .. }) && wr.sge.len > cfg.mtu {
            return Err(PostError::OffloadTooLong);
        }
        let npkts = wr.sge.len.div_ceil(cfg.mtu).max(1);
        self.sq.push_back(Entry {
            wr,
            first: self.next_psn,
            npkts,
            sent: 0,
            got: 0,
            done: None,
            imm: None,
        });
        self.next_psn = self.next_psn + npkts;
        Ok(())
    }

    pub(super) fn deadline(&self) -> Option<Nanos> {
        match (self.deadline, self.rnr_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next request packet, if the window and the RNR wait allow one. Err: the QP
    /// fails with this status (a local buffer its key does not allow).
    pub(super) fn transmit<M: Memory>(
        &mut self,
        ctx: &mut Ctx<'_, M>,
        cfg: &QpConfig,
        dst: &mut PayloadDst<'_>,
        counters: &mut QpCounters,
    ) -> Result<Option<(RoceRepr, usize)>, WcStatus> {
        if self.rnr_until.is_some_and(|t| ctx.now < t) {
            return Ok(None);
        }
        self.rnr_until = None;
        while let Some(e) = self.sq.get_mut(self.cursor) {
            let todo = if e.is_read() { 1 } else { e.npkts };
            if e.done.is_some() || e.sent >= todo {
                self.cursor += 1;
                continue;
            }
            // A READ starts only while fewer than max_rd_atomic are outstanding (IBA
            // 9.4.4: the responder keeps no more); the requests behind it wait, in order.
            if e.is_read()
                && e.sent == 0
                && self.reads_outstanding() >= usize::from(cfg.max_rd_atomic)
            {
                return Ok(None);
            }
            let e = &mut self.sq[self.cursor];
            let k = if e.is_read() { e.got / cfg.mtu } else { e.sent };
            let psn = e.first + k;
            if psn.diff(self.una) as u32 >= cfg.max_inflight
                || self.drain_at.is_some_and(|d| !psn.lt(d))
            {
                return Ok(None);
            }
            if psn.lt(self.sent_end) {
                counters.retransmits += 1;
            }
            let (mut repr, n) = request_packet(&e.wr, e.npkts, k, psn, cfg, ctx, dst)?;
            e.sent += 1;
            let end = if e.is_read() { e.end() } else { psn + 1 };
            self.sent_end = max_psn(self.sent_end, end);
            if self.deadline.is_none() {
                self.deadline = Some(ctx.now + cfg.ack_timeout);
            }
            // The last packet before the requester must stop (window full or nothing
            // more) asks for an ACK, so that every burst is answered and a lost one is
            // found by a NAK rather than the timeout.
            if !self.can_send_more(cfg) {
                repr.bth.ack_req = true;
            }
            return Ok(Some((repr, n)));
        }
        Ok(None)
    }

    /// Whether a request packet may go at `now` (no RNR wait, one is queued, the window has
    /// room).
    pub(super) fn ready(&self, now: Nanos, cfg: &QpConfig) -> bool {
        self.rnr_until.is_none_or(|t| now >= t) && self.can_send_more(cfg)
    }

    /// One line of state, for traces.
    pub(super) fn describe(&self) -> String {
        let unsent = self
            .sq
            .iter()
            .filter(|e| e.done.is_none() && e.sent < if e.is_read() { 1 } else { e.npkts })
            .count();
        format!(
            "sq {} (unsent {unsent}) cursor {} una {:?} next {:?} sent_end {:?} deadline {:?} rnr {:?}",
            self.sq.len(),
            self.cursor,
            self.una,
            self.next_psn,
            self.sent_end,
            self.deadline,
            self.rnr_until
        )
    }

    /// READs started and not completed: they all lie before the cursor (a READ's one
    /// request packet is sent before the cursor moves past it).
    fn reads_outstanding(&self) -> usize {
        self.sq
            .iter()
            .take(self.cursor)
            .filter(|e| e.is_read() && e.done.is_none())
            .count()
    }

    /// Whether another request packet may go now (one is queued and the window has room).
    fn can_send_more(&self, cfg: &QpConfig) -> bool {
        let Some(e) = self
            .sq
            .iter()
            .skip(self.cursor)
            .find(|e| e.done.is_none() && e.sent < if e.is_read() { 1 } else { e.npkts })
        else {
            return false;
        };
        let k = if e.is_read() { e.got / cfg.mtu } else { e.sent };
        let psn = e.first + k;
        (psn.diff(self.una) as u32) < cfg.max_inflight && !self.draining(psn)
    }

    /// Whether `psn` belongs to a work request SQD holds back.
    fn draining(&self, psn: Psn) -> bool {
        self.drain_at.is_some_and(|d| !psn.lt(d))
    }

    /// RTS -> SQD: the work requests already started finish (retransmissions included);
    /// none after them starts until [`Requester::resume`].
    pub(super) fn drain(&mut self) {
        // A request is started once one of its packets went: the one holding the last PSN
        // sent finishes, and the boundary is its end.
        let last_sent = self.sent_end + 0xFF_FFFF;
        let boundary = self
            .sq
            .iter()
            .find(|e| e.contains(last_sent))
            .map_or(self.sent_end, Entry::end);
        self.drain_at = Some(boundary);
    }

    /// SQD -> RTS: everything queued may go again.
    pub(super) fn resume(&mut self) {
        self.drain_at = None;
    }

    /// Whether SQD's drain is over: nothing it let go is still unacknowledged.
    pub(super) fn drained(&self) -> bool {
        self.drain_at.is_some_and(|d| !self.una.lt(d))
    }

    /// An ACK, NAK or READ response. True if the QP fails.
    pub(super) fn on_response<M: Memory>(
        &mut self,
        ctx: &mut Ctx<'_, M>,
        cfg: &QpConfig,
        repr: &RoceRepr,
        payload: &[u8],
        counters: &mut QpCounters,
    ) -> bool {
        let p = repr.bth.psn;
        // Only PSNs of requests outstanding mean anything (IBA 9.7.5.1.3: ghost
        // responses are dropped).
        if p.lt(self.una) || !p.lt(self.next_psn) {
            counters.refused += 1;
            return false;
        }
        let before = self.una;
        let failed = match repr.bth.opcode {
            Opcode::Acknowledge => {
                let Some(aeth) = repr.aeth else {
                    counters.refused += 1;
                    return false;
                };
                self.on_aeth(ctx, cfg, p, aeth.syndrome)
            }
            Opcode::OffloadResponse => self.on_offload_response(ctx, cfg, repr, payload, counters),
            op => self.on_read_response(ctx, cfg, op, p, payload, counters),
        };
        // Progress (an ACK, a NAK or a response moving the oldest unacknowledged PSN)
        // restores the transport retry count.
        if self.una.gt(before) {
            self.retry_left = cfg.retry_cnt;
        }
        failed
    }

    fn on_aeth<M: Memory>(
        &mut self,
        ctx: &mut Ctx<'_, M>,
        cfg: &QpConfig,
        p: Psn,
        syndrome: Syndrome,
    ) -> bool {
        match syndrome {
            Syndrome::Ack { .. } => {
                if let Some(missing) = self.acknowledge(p + 1, cfg.mtu) {
                    // An ACK past a READ whose responses did not all come: ask again.
                    self.go_back(missing, cfg);
                }
                self.retry_left = cfg.retry_cnt;
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                self.acknowledge(p, cfg.mtu);
                self.go_back(p, cfg);
            }
            Syndrome::RnrNak { timer } => {
                self.acknowledge(p, cfg.mtu);
                if cfg.rnr_retry != 7 {
                    if self.rnr_left == 0 {
                        return self.fail_front(WcStatus::RnrRetryExcErr);
                    }
                    self.rnr_left -= 1;
                }
                self.rnr_until = Some(ctx.now + rnr_nanos(timer));
                self.go_back(p, cfg);
            }
            Syndrome::Nak(code) => {
                self.acknowledge(p, cfg.mtu);
                let status = match code {
                    NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                    NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                    _ => WcStatus::RemOpErr,
                };
                return self.fail_front(status);
            }
        }
        self.complete(ctx, cfg.qpn);
        self.rearm(ctx.now, cfg);
        false
    }

    fn on_read_response<M: Memory>(
        &mut self,
        ctx: &mut Ctx<'_, M>,
        cfg: &QpConfig,
        op: Opcode,
        p: Psn,
        payload: &[u8],
        counters: &mut QpCounters,
    ) -> bool {
        let Some(i) = self
            .sq
            .iter()
            .position(|e| matches!(e.wr.op, SendOp::Read { .. }) && e.contains(p))
        else {
            counters.refused += 1;
            return false;
        };
        // A response implicitly acknowledges every request before it.
        self.acknowledge(self.sq[i].first, cfg.mtu);
        let Some(e) = self.sq.get_mut(i) else {
            return false;
        };
        let expected = e.first + e.got / cfg.mtu;
        if p != expected || e.done.is_some() {
            // Out of order: a response was lost; the timer asks again.
            counters.refused += 1;
            return false;
        }
        let first = e.got == 0;
        let last = matches!(op, Opcode::ReadResponseLast | Opcode::ReadResponseOnly);
        // A request asked again after lost responses is answered from a First (or Only)
        // at the PSN it names; Middle and Last continue what arrived.
        let order_ok = match op {
            Opcode::ReadResponseOnly | Opcode::ReadResponseFirst => true,
            _ => !first,
        };
        let len = payload.len() as u32;
        let fits = e.got + len <= e.wr.sge.len;
        let full_packet = last || len == cfg.mtu;
        if !order_ok || !fits || !full_packet || (last && e.got + len != e.wr.sge.len) {
            counters.refused += 1;
            return self.fail_at(i, WcStatus::BadRespErr);
        }
        let sge = e.wr.sge;
        let addr = sge.addr + u64::from(e.got);
        match ctx
            .mrs
            .check(sge.lkey, cfg.pd, addr, u64::from(len), Access::LOCAL_WRITE)
        {
            Ok(at) if ctx.mem.write(at.backing, at.offset, payload) => {}
            _ => return self.fail_at(i, WcStatus::LocProtErr),
        }
        e.got += len;
        if last {
            e.done = Some(WcStatus::Success);
            self.una = max_psn(self.una, e.end());
        } else {
            self.una = max_psn(self.una, p + 1);
        }
        self.retry_left = cfg.retry_cnt;
        self.complete(ctx, cfg.qpn);
        self.rearm(ctx.now, cfg);
        false
    }

    /// An OFFLOAD response: the handler's bytes into the work request's response buffer,
    /// its status into the completion's `imm`.
    fn on_offload_response<M: Memory>(
        &mut self,
        ctx: &mut Ctx<'_, M>,
        cfg: &QpConfig,
        repr: &RoceRepr,
        payload: &[u8],
        counters: &mut QpCounters,
    ) -> bool {
        let p = repr.bth.psn;
        let Some(i) = self.sq.iter().position(|e| {
            matches!(e.wr.op, SendOp::Offload { .. }) && e.first == p && e.done.is_none()
        }) else {
            // A duplicate (the request was asked again) or a ghost.
            counters.refused += 1;
            return false;
        };
        let Some(imm) = repr.immdt else {
            counters.refused += 1;
            return false;
        };
        // A response implicitly acknowledges every request before it.
        self.acknowledge(self.sq[i].first, cfg.mtu);
        let Some(e) = self.sq.get_mut(i) else {
            return false;
        };
        let SendOp::Offload { resp, .. } = e.wr.op else {
            return false;
        };
        let len = payload.len() as u32;
        if len > resp.len {
            counters.refused += 1;
            return self.fail_at(i, WcStatus::BadRespErr);
        }
        if len > 0 {
            match ctx.mrs.check(
                resp.lkey,
                cfg.pd,
                resp.addr,
                u64::from(len),
                Access::LOCAL_WRITE,
            ) {
                Ok(at) if ctx.mem.write(at.backing, at.offset, payload) => {}
                _ => return self.fail_at(i, WcStatus::LocProtErr),
            }
        }
        e.got = len;
        e.imm = Some(imm.0);
        e.done = Some(WcStatus::Success);
        self.una = max_psn(self.una, e.end());
        self.retry_left = cfg.retry_cnt;
        self.complete(ctx, cfg.qpn);
        self.rearm(ctx.now, cfg);
        false
    }

    /// Everything before `upto` is acknowledged: SENDs and WRITEs ending there are done.
    /// Returns the PSN to ask again from if a READ before `upto` has not had all its
    /// responses (they were lost).
    fn acknowledge(&mut self, upto: Psn, mtu: u32) -> Option<Psn> {
        if upto.le(self.una) {
            return None;
        }
        let mut upto = upto;
        for e in self.sq.iter_mut() {
            if !e.end().le(upto) {
                if e.is_read() && e.done.is_none() {
                    // A READ is acknowledged by its responses only.
                    let next = e.first + e.got / mtu;
                    if next.lt(upto) {
                        upto = next;
                    }
                }
                break;
            }
            if e.is_read() {
                if e.done.is_none() {
                    let missing = e.first + e.got / mtu;
                    self.una = max_psn(self.una, missing);
                    return Some(missing);
                }
            } else if e.done.is_none() {
                e.done = Some(WcStatus::Success);
            }
        }
        self.una = max_psn(self.una, upto);
        None
    }

    /// Go back N: send again from PSN `p`.
    fn go_back(&mut self, p: Psn, cfg: &QpConfig) {
        let Some(i) = self
            .sq
            .iter()
            .position(|e| e.contains(p) && e.done.is_none())
        else {
            return;
        };
        self.cursor = i;
        for (j, e) in self.sq.iter_mut().enumerate().skip(i) {
            if e.is_read() {
                e.sent = 0;
                // Responses already placed stay placed; the request asks for the rest.
                e.got = e.got.min((p.diff(e.first).max(0) as u32) * cfg.mtu);
            } else {
                e.sent = if j == i { p.diff(e.first) as u32 } else { 0 };
            }
        }
    }

    pub(super) fn on_timeout(
        &mut self,
        now: Nanos,
        counters: &mut QpCounters,
    ) -> Result<(), WcStatus> {
        let Some(t) = self.deadline else {
            return Ok(());
        };
        if now < t {
            return Ok(());
        }
        self.deadline = None;
        if self.sq.iter().all(|e| e.done.is_some()) {
            return Ok(());
        }
        counters.timeouts += 1;
        if self.retry_left == 0 {
            return Err(WcStatus::RetryExcErr);
        }
        self.retry_left -= 1;
        let una = self.una;
        // Everything from the oldest unacknowledged packet again (go-back-N).
        if let Some(i) = self.sq.iter().position(|e| e.done.is_none()) {
            let from = if self.sq[i].contains(una) {
                una
            } else {
                self.sq[i].first
            };
            self.cursor = i;
            for (j, e) in self.sq.iter_mut().enumerate().skip(i) {
                if e.is_read() {
                    e.sent = 0;
                } else {
                    e.sent = if j == i {
                        from.diff(e.first).max(0) as u32
                    } else {
                        0
                    };
                }
            }
        }
        Ok(())
    }

    fn rearm(&mut self, now: Nanos, cfg: &QpConfig) {
        self.deadline = if self.sq.iter().any(|e| e.done.is_none() && (e.sent > 0)) {
            Some(now + cfg.ack_timeout)
        } else {
            None
        };
    }

    /// Completes finished entries from the front, in order.
    fn complete<M: Memory>(&mut self, ctx: &mut Ctx<'_, M>, qpn: u32) {
        while let Some(status) = self.sq.front().and_then(|e| e.done) {
            let Some(e) = self.sq.pop_front() else { break };
            self.cursor = self.cursor.saturating_sub(1);
            if e.wr.signaled || status != WcStatus::Success {
                let _ = ctx.cqs.send().push(completion(&e, status, qpn));
            }
        }
    }

    /// The front entry fails with `status` (the QP goes to error).
    fn fail_front(&mut self, status: WcStatus) -> bool {
        if let Some(i) = self.sq.iter().position(|e| e.done.is_none()) {
            return self.fail_at(i, status);
        }
        true
    }

    fn fail_at(&mut self, i: usize, status: WcStatus) -> bool {
        if let Some(e) = self.sq.get_mut(i) {
            e.done = Some(status);
        }
        true
    }

    /// The QP failed: finished entries complete as they are, the first unfinished with
    /// `status`, the rest flushed.
    pub(super) fn flush<M: Memory>(
        &mut self,
        ctx: &mut Ctx<'_, M>,
        cfg: &QpConfig,
        status: Option<WcStatus>,
    ) {
        let mut status = status;
        for e in self.sq.drain(..) {
            let s = match e.done {
                Some(s) => s,
                None => status.take().unwrap_or(WcStatus::WrFlushErr),
            };
            if e.wr.signaled || s != WcStatus::Success {
                let _ = ctx.cqs.send().push(completion(&e, s, cfg.qpn));
            }
        }
        self.cursor = 0;
        self.deadline = None;
        self.rnr_until = None;
    }
}

fn max_psn(a: Psn, b: Psn) -> Psn {
    if b.gt(a) {
        b
    } else {
        a
    }
}

fn completion(e: &Entry, status: WcStatus, qpn: u32) -> WorkCompletion {
    let opcode = match e.wr.op {
        SendOp::Send { .. } => WcOpcode::Send,
        SendOp::Write { .. } => WcOpcode::RdmaWrite,
        SendOp::Read { .. } => WcOpcode::RdmaRead,
        SendOp::Offload { .. } => WcOpcode::Offload,
    };
    WorkCompletion {
        wr_id: e.wr.wr_id,
        status,
        opcode,
        byte_len: if e.is_read() { e.got } else { e.wr.sge.len },
        imm: e.imm,
        qp_num: qpn,
        src_qp: 0,
        solicited: false,
    }
}

/// IBA's RNR NAK timer table (Table 45), in nanoseconds; code 0 is 655.36 ms.
fn rnr_nanos(code: u8) -> Nanos {
    const US: [u64; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560,
        3_840, 5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880,
        163_840, 245_760, 327_680, 491_520,
    ];
    US[usize::from(code & 0x1f)] * 1000
}
