//! The RDMA transport of one engine address, in the core's shape (DESIGN.md "Three
//! transports, one engine"): RoCEv2 frames in ([`RdmaStack::handle_frame`]), frames out
//! ([`RdmaStack::poll_transmit`]), the next deadline ([`RdmaStack::poll_timeout`],
//! [`RdmaStack::handle_timeout`]); and the verbs an application calls: completion queues,
//! memory regions, queue pairs through RESET -> INIT -> RTR -> RTS, work requests, polling.
//!
//! Call order: verbs calls whenever the application makes them; after frames arrive or
//! work is posted, `poll_transmit` until it returns None; `handle_timeout` at the deadline.

use std::collections::{HashMap, VecDeque};

use sluice_wire::ethernet::{EtherType, EthernetRepr};
use sluice_wire::ipv4::{Ecn, Ipv4Repr};

use crate::cc::QpCongestion;
use crate::qp::{
    Memory, Nanos, PayloadDst, PostError, QpConfig, QpCounters, QueuePair, RecvWr, SendWr,
};
use crate::verbs::{
    check_modify, required_attributes, AttrMask, CompletionQueue, Key, MrTable, PdId, QpState,
    Region, WorkCompletion,
};
use crate::wire::frame::{entropy_src_port, RoceFrameRepr};
use crate::wire::{Psn, RoceError, RoceRepr};

mod config;
mod ctx;
mod timers;
mod touch;
pub use config::{
    PeerAddr, QpAttr, RxPath, StackConfig, StackCounters, Touched, TxPath, VerbsError,
};
use ctx::qp_ctx;
pub use timers::QpTimers;
use touch::Metered;

/// The most a packet's frame adds to its payload: Ethernet, IPv4, UDP, BTH, RETH and ImmDt
/// (or AETH), pad and ICRC. Header-only TX needs this plus the path MTU in the device's
/// buffer.
const MAX_FRAME_OVERHEAD: usize = 14 + 20 + 8 + 12 + 16 + 4 + 3 + 4;
mod offload;
pub use offload::OffloadStackError;

struct QpSlot {
    pd: PdId,
    send_cq: u32,
    recv_cq: u32,
    sq_cap: usize,
    rq_cap: usize,
    state: QpState,
    attr: QpAttr,
    qp: Option<QueuePair>,
    /// Its congestion control: CNPs due, the reaction point's rate, the pacer.
    cc: QpCongestion,
    /// A request packet waits for the pacer until then (poll_timeout's share of it).
    pace_wait: Option<Nanos>,
    /// It is on the stack's active list (`RdmaStack::active`).
    active: bool,
}

/// The RDMA transport of one address.
pub struct RdmaStack {
    cfg: StackConfig,
    mrs: MrTable,
    cqs: Vec<Option<CompletionQueue>>,
    qps: HashMap<u32, QpSlot>,
    /// QP numbers in creation order (the offload engine's walk).
    order: Vec<u32>,
    /// QPs that may have a packet to send, each once, in turn: `poll_transmit` visits only
    /// these, so its cost is flat in idle QPs. A QP is pushed when it gets work, a frame
    /// (an ACK or response to send) or a timer, and dropped when a visit finds nothing.
    active: VecDeque<u32>,
    next_qpn: u32,
    /// The staging buffer of [`TxPath::Staging`].
    payload: Vec<u8>,
    /// The engine buffer of [`RxPath::Staging`] (as long as the longest frame received).
    rx_staging: Vec<u8>,
    /// Every QP's earliest deadline, so that the timers never walk every QP.
    timers: QpTimers,
    /// The QPs due in one `handle_timeout` (kept to reuse its capacity).
    due: Vec<u32>,
    /// CQs that got completions since [`RdmaStack::take_ready_cqs`] last ran, each once
    /// (`cq_listed` by CQ number): the service drains only these, not every CQ.
    ready_cqs: Vec<u32>,
    cq_listed: Vec<bool>,
    /// Counters.
    pub counters: StackCounters,
}

/// IBV_MTU_* to bytes.
fn mtu_bytes(code: u8) -> Option<u32> {
    match code {
        1..=5 => Some(128 << code),
        _ => None,
    }
}

/// The local ACK timeout in nanoseconds (IBA: 4.096 us x 2^timeout; 0 means infinite, taken
/// here as the largest, about 2.5 hours).
fn ack_timeout(code: u8) -> Nanos {
    let exp = if code == 0 {
        31
    } else {
        u32::from(code.min(31))
    };
    4096u64 << exp
}

impl RdmaStack {
    /// An empty stack.
    pub fn new(cfg: StackConfig) -> RdmaStack {
        RdmaStack {
            mrs: MrTable::new(cfg.max_mrs),
            cqs: Vec::new(),
            qps: HashMap::new(),
            order: Vec::new(),
            active: VecDeque::new(),
            next_qpn: 0x11,
            payload: vec![0; 4096],
            rx_staging: Vec::new(),
            timers: QpTimers::default(),
            due: Vec::new(),
            ready_cqs: Vec::new(),
            cq_listed: Vec::new(),
            cfg,
            counters: StackCounters::default(),
        }
    }

    /// Registers memory (ibv_reg_mr); its key serves as lkey and rkey.
    pub fn reg_mr(&mut self, region: Region) -> Result<Key, VerbsError> {
        self.mrs.register(region).map_err(VerbsError::Register)
    }

    /// Deregisters memory (ibv_dereg_mr).
    pub fn dereg_mr(&mut self, key: Key) -> Result<Region, VerbsError> {
        self.mrs
            .deregister(key)
            .map_err(|_| VerbsError::InvalidValue("memory key"))
    }

    /// Creates a completion queue of `cqe` entries (ibv_create_cq).
    pub fn create_cq(&mut self, cqe: usize) -> Result<u32, VerbsError> {
        if cqe == 0 || cqe > self.cfg.max_cqe {
            return Err(VerbsError::InvalidValue("completion queue size"));
        }
        if let Some(i) = self.cqs.iter().position(Option::is_none) {
            self.cqs[i] = Some(CompletionQueue::new(cqe));
            return Ok(i as u32);
        }
        if self.cqs.len() >= self.cfg.max_cqs {
            return Err(VerbsError::Limit);
        }
        self.cqs.push(Some(CompletionQueue::new(cqe)));
        self.cq_listed.push(false);
        Ok((self.cqs.len() - 1) as u32)
    }

    /// Destroys a completion queue no QP uses (ibv_destroy_cq: EBUSY otherwise).
    pub fn destroy_cq(&mut self, cq: u32) -> Result<(), VerbsError> {
        if self.cqs.get(cq as usize).is_none_or(Option::is_none) {
            return Err(VerbsError::NoSuchCq);
        }
        if self
            .qps
            .values()
            .any(|q| q.send_cq == cq || q.recv_cq == cq)
        {
            return Err(VerbsError::Busy);
        }
        self.cqs[cq as usize] = None;
        Ok(())
    }

    /// Polls up to `max` completions of `cq` into `out` (ibv_poll_cq).
    pub fn poll_cq(
        &mut self,
        cq: u32,
        max: usize,
        out: &mut Vec<WorkCompletion>,
    ) -> Result<usize, VerbsError> {
        let q = self
            .cqs
            .get_mut(cq as usize)
            .and_then(Option::as_mut)
            .ok_or(VerbsError::NoSuchCq)?;
        Ok(q.poll(max, out))
    }

    /// Arms `cq`'s notification (ibv_req_notify_cq).
    pub fn req_notify_cq(&mut self, cq: u32, solicited_only: bool) -> Result<(), VerbsError> {
        let q = self
            .cqs
            .get_mut(cq as usize)
            .and_then(Option::as_mut)
            .ok_or(VerbsError::NoSuchCq)?;
        q.req_notify(solicited_only);
        Ok(())
    }

    /// Creates an RC queue pair in RESET (ibv_create_qp); its number.
    pub fn create_qp(
        &mut self,
        pd: PdId,
        send_cq: u32,
        recv_cq: u32,
        sq_cap: usize,
        rq_cap: usize,
    ) -> Result<u32, VerbsError> {
        for cq in [send_cq, recv_cq] {
            if self.cqs.get(cq as usize).is_none_or(Option::is_none) {
                return Err(VerbsError::NoSuchCq);
            }
        }
        if sq_cap == 0 || rq_cap == 0 || sq_cap > self.cfg.max_wr || rq_cap > self.cfg.max_wr {
            return Err(VerbsError::InvalidValue("work queue size"));
        }
        if self.qps.len() >= self.cfg.max_qps {
            return Err(VerbsError::Limit);
        }
        // QP numbers are 24 bits; 0 and 1 are the IB special QPs.
        let mut qpn = self.next_qpn;
        while self.qps.contains_key(&qpn) {
            qpn = if qpn >= 0xff_ffff { 2 } else { qpn + 1 };
        }
        self.next_qpn = if qpn >= 0xff_ffff { 2 } else { qpn + 1 };
        self.qps.insert(
            qpn,
            QpSlot {
                pd,
                send_cq,
                recv_cq,
                sq_cap,
                rq_cap,
                state: QpState::Reset,
                attr: QpAttr::default(),
                qp: None,
                cc: QpCongestion::new(self.cfg.line_rate_bps, self.cfg.dcqcn),
                pace_wait: None,
                active: false,
            },
        );
        self.order.push(qpn);
        Ok(qpn)
    }

    /// Destroys a queue pair (ibv_destroy_qp); its outstanding work is flushed first.
    pub fn destroy_qp<M: Memory>(&mut self, mem: &mut M, qpn: u32) -> Result<(), VerbsError> {
        self.modify_qp(
            mem,
            qpn,
            QpState::Error,
            AttrMask::STATE,
            &QpAttr::default(),
        )?;
        self.qps.remove(&qpn);
        self.order.retain(|&q| q != qpn);
        self.active.retain(|&q| q != qpn);
        self.timers.arm(qpn, None);
        Ok(())
    }

    /// Whether a QP in SQD has drained (IBV_EVENT_SQ_DRAINED's condition: every work
    /// request started before the drain is acknowledged); None if there is no such QP.
    pub fn sq_drained(&self, qpn: u32) -> Option<bool> {
        Some(
            self.qps
                .get(&qpn)?
                .qp
                .as_ref()
                .is_some_and(QueuePair::is_drained),
        )
    }

    /// A QP's state (ibv_query_qp).
    pub fn qp_state(&self, qpn: u32) -> Option<QpState> {
        let slot = self.qps.get(&qpn)?;
        Some(slot.qp.as_ref().map_or(slot.state, QueuePair::state))
    }

    /// Takes a QP from RESET through INIT and RTR to RTS, each step with exactly the
    /// attributes it requires taken from `attr` (the sequence every RC connection runs).
    pub fn connect_rc<M: Memory>(
        &mut self,
        mem: &mut M,
        qpn: u32,
        attr: &QpAttr,
    ) -> Result<(), VerbsError> {
        let mut from = QpState::Reset;
        for to in [QpState::Init, QpState::Rtr, QpState::Rts] {
            let mask = required_attributes(from, to).expect("an RC transition");
            self.modify_qp(mem, qpn, to, mask, attr)?;
            from = to;
        }
        Ok(())
    }

    /// Moves a QP to `next` with the attributes `mask` names (ibv_modify_qp).
    pub fn modify_qp<M: Memory>(
        &mut self,
        mem: &mut M,
        qpn: u32,
        next: QpState,
        mask: AttrMask,
        attr: &QpAttr,
    ) -> Result<(), VerbsError> {
        let max_inflight = self.cfg.max_inflight;
        let slot = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp)?;
        let current = slot.qp.as_ref().map_or(slot.state, QueuePair::state);
        check_modify(current, next, mask, attr.cur_state).map_err(VerbsError::Modify)?;
        let given = |m: AttrMask| mask.contains(m);
        if given(AttrMask::PATH_MTU) && mtu_bytes(attr.path_mtu).is_none() {
            return Err(VerbsError::InvalidValue("path MTU"));
        }
        if (given(AttrMask::DEST_QPN) && attr.dest_qpn > 0xff_ffff)
            || (given(AttrMask::RQ_PSN) && attr.rq_psn > 0xff_ffff)
            || (given(AttrMask::SQ_PSN) && attr.sq_psn > 0xff_ffff)
        {
            return Err(VerbsError::InvalidValue("QP number or PSN"));
        }
        if (given(AttrMask::RETRY_CNT) && attr.retry_cnt > 7)
            || (given(AttrMask::RNR_RETRY) && attr.rnr_retry > 7)
            || (given(AttrMask::TIMEOUT) && attr.timeout > 31)
            || (given(AttrMask::MIN_RNR_TIMER) && attr.min_rnr_timer > 31)
        {
            return Err(VerbsError::InvalidValue("retry count or timer"));
        }
        if given(AttrMask::AV) && attr.peer.is_none() {
            return Err(VerbsError::InvalidValue("address vector"));
        }
        // Keep what was given.
        let a = &mut slot.attr;
        if given(AttrMask::ACCESS_FLAGS) {
            a.access = attr.access;
        }
        if given(AttrMask::PATH_MTU) {
            a.path_mtu = attr.path_mtu;
        }
        if given(AttrMask::DEST_QPN) {
            a.dest_qpn = attr.dest_qpn;
        }
        if given(AttrMask::RQ_PSN) {
            a.rq_psn = attr.rq_psn;
        }
        if given(AttrMask::SQ_PSN) {
            a.sq_psn = attr.sq_psn;
        }
        if given(AttrMask::TIMEOUT) {
            a.timeout = attr.timeout;
        }
        if given(AttrMask::RETRY_CNT) {
            a.retry_cnt = attr.retry_cnt;
        }
        if given(AttrMask::RNR_RETRY) {
            a.rnr_retry = attr.rnr_retry;
        }
        if given(AttrMask::MIN_RNR_TIMER) {
            a.min_rnr_timer = attr.min_rnr_timer;
        }
        if given(AttrMask::MAX_QP_RD_ATOMIC) {
            a.max_rd_atomic = attr.max_rd_atomic;
        }
        if given(AttrMask::AV) {
            a.peer = attr.peer;
        }
        let a = *a;
        match (current, next) {
            (QpState::Reset, QpState::Init) => {
                slot.qp = Some(QueuePair::initialized(QpConfig {
                    qpn,
                    dest_qpn: 0,
                    pd: slot.pd,
                    mtu: 1024,
                    sq_psn: Psn::new(0),
                    rq_psn: Psn::new(0),
                    ack_timeout: ack_timeout(14),
                    retry_cnt: 7,
                    rnr_retry: 7,
                    min_rnr_timer: 0,
                    max_inflight,
                    max_rd_atomic: 1,
                    sq_cap: slot.sq_cap,
                    rq_cap: slot.rq_cap,
                }));
            }
            (QpState::Init, QpState::Rtr) => {
                if let Some(qp) = slot.qp.as_mut() {
                    qp.ready_to_receive(
                        a.dest_qpn,
                        Psn::new(a.rq_psn),
                        mtu_bytes(a.path_mtu).unwrap_or(1024),
                        a.min_rnr_timer,
                    );
                }
            }
            (QpState::Rtr, QpState::Rts) => {
                if let Some(qp) = slot.qp.as_mut() {
                    qp.set_max_rd_atomic(a.max_rd_atomic);
                    qp.ready_to_send(
                        Psn::new(a.sq_psn),
                        ack_timeout(a.timeout),
                        a.retry_cnt,
                        a.rnr_retry,
                    );
                }
            }
            (QpState::Rts, QpState::Sqd) => {
                if let Some(qp) = slot.qp.as_mut() {
                    qp.drain();
                }
            }
            (QpState::Sqd, QpState::Rts) => {
                if let Some(qp) = slot.qp.as_mut() {
                    qp.resume();
                }
            }
            (_, QpState::Error) | (_, QpState::Reset) => {
                let (send_cq, recv_cq) = (slot.send_cq, slot.recv_cq);
                if let Some(mut qp) = slot.qp.take() {
                    if let Some(mut ctx) =
                        qp_ctx(&self.mrs, &mut self.cqs, send_cq, recv_cq, mem, 0)
                    {
                        qp.to_error(&mut ctx);
                    }
                    if next == QpState::Error {
                        slot.qp = Some(qp);
                    }
                }
                if next == QpState::Reset {
                    slot.attr = QpAttr::default();
                    slot.cc = QpCongestion::new(self.cfg.line_rate_bps, self.cfg.dcqcn);
                    slot.pace_wait = None;
                }
            }
            _ => {}
        }
        slot.state = next;
        self.refresh_timer(qpn);
        self.activate(qpn);
        Ok(())
    }

    /// Puts `qpn` on the active list (once) after something that may give it a packet to
    /// send: work posted, a frame taken, a timer run, a state change, an offload response.
    fn activate(&mut self, qpn: u32) {
        if let Some(slot) = self.qps.get_mut(&qpn) {
            if !slot.active {
                slot.active = true;
                self.active.push_back(qpn);
            }
        }
    }

    /// Re-reads `qpn`'s earliest deadline into the timer heap, after anything that may
    /// have armed, moved or stopped one of its timers or completed its work; lists its CQs
    /// if they hold completions.
    fn refresh_timer(&mut self, qpn: u32) {
        let Some(slot) = self.qps.get(&qpn) else {
            self.timers.arm(qpn, None);
            return;
        };
        self.timers.arm(qpn, slot.deadline());
        for cq in [slot.send_cq, slot.recv_cq] {
            let holds = self
                .cqs
                .get(cq as usize)
                .and_then(Option::as_ref)
                .is_some_and(|c| !c.is_empty());
            if let Some(listed) = self.cq_listed.get_mut(cq as usize) {
                if holds && !*listed {
                    *listed = true;
                    self.ready_cqs.push(cq);
                }
            }
        }
    }

    /// Appends to `out` the CQs that got completions since the last call, each once, and
    /// forgets them (a CQ polled only partly is listed again by its next completion: the
    /// caller keeps what it left behind).
    pub fn take_ready_cqs(&mut self, out: &mut Vec<u32>) {
        for cq in self.ready_cqs.drain(..) {
            if let Some(listed) = self.cq_listed.get_mut(cq as usize) {
                *listed = false;
            }
            out.push(cq);
        }
    }

    /// Completions waiting in `cq` (0 if there is no such CQ).
    pub fn cq_len(&self, cq: u32) -> usize {
        self.cqs
            .get(cq as usize)
            .and_then(Option::as_ref)
            .map_or(0, CompletionQueue::len)
    }

    /// Queues a send work request (ibv_post_send).
    pub fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<(), VerbsError> {
        let slot = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp)?;
        let qp = slot
            .qp
            .as_mut()
            .ok_or(VerbsError::Post(PostError::WrongState))?;
        qp.post_send(wr).map_err(VerbsError::Post)?;
        self.refresh_timer(qpn);
        self.activate(qpn);
        Ok(())
    }

    /// Queues a receive work request (ibv_post_recv); a QP in INIT takes them too.
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<(), VerbsError> {
        let slot = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp)?;
        // From INIT on (ibv_rc_pingpong posts its receives before RTR); not in RESET.
        match slot.qp.as_mut() {
            Some(qp) => qp.post_recv(wr).map_err(VerbsError::Post)?,
            None => return Err(VerbsError::Post(PostError::WrongState)),
        }
        self.refresh_timer(qpn);
        Ok(())
    }

    /// A frame from the device: if it is RoCEv2 for one of our QPs from its peer, that QP
    /// takes it. Anything else is counted and dropped, never a panic.
    ///
    /// With [`RxPath::Direct`] a payload goes from `frame` into its buffer (one copy) and
    /// `frame` is not kept: the device may recycle it on return. [`RxPath::Staging`] first
    /// copies the frame into an engine buffer, as an intermediate ring would.
    pub fn handle_frame<M: Memory>(&mut self, now: Nanos, mem: &mut M, frame: &[u8]) {
        if self.cfg.rx_path == RxPath::Staging {
            let mut staged = std::mem::take(&mut self.rx_staging);
            staged.clear();
            staged.extend_from_slice(frame);
            self.counters.rx_touch.staging += frame.len() as u64;
            self.receive(now, mem, &staged);
            self.rx_staging = staged;
        } else {
            self.receive(now, mem, frame);
        }
    }

    fn receive<M: Memory>(&mut self, now: Nanos, mem: &mut M, frame: &[u8]) {
        let (repr, payload) = match RoceFrameRepr::parse(frame) {
            Ok(x) => x,
            Err(RoceError::NotRoce) => return,
            Err(_) => {
                self.counters.malformed += 1;
                return;
            }
        };
        // The ICRC check read the IP packet.
        self.counters.rx_touch.icrc += frame.len().saturating_sub(repr.eth.header_len()) as u64;
        if repr.ip.dst != self.cfg.ip {
            return;
        }
        let Some(slot) = self.qps.get_mut(&repr.roce.bth.dest_qp) else {
            self.counters.no_qp += 1;
            return;
        };
        if slot.attr.peer.is_none_or(|p| p.ip != repr.ip.src) {
            self.counters.wrong_peer += 1;
            return;
        }
        let Some(qp) = slot.qp.as_mut() else {
            self.counters.no_qp += 1;
            return;
        };
        if repr.roce.bth.opcode.is_cnp() {
            // Reaction point: a CNP from the peer cuts this QP's rate (DCQCN).
            self.counters.cnp_rx += 1;
            slot.cc.on_cnp(now);
            self.refresh_timer(repr.roce.bth.dest_qp);
            self.activate(repr.roce.bth.dest_qp);
            return;
        }
        if repr.ip.ecn == Ecn::Ce {
            // Notification point (RoCEv2 annex A17.9): congestion on the way to us; the
            // peer hears of it by a CNP, at most one per interval.
            self.counters.ce_rx += 1;
            slot.cc.on_ce(now, self.cfg.cnp_interval);
        }
        let mut metered = Metered::new(mem);
        let Some(mut ctx) = qp_ctx(
            &self.mrs,
            &mut self.cqs,
            slot.send_cq,
            slot.recv_cq,
            &mut metered,
            now,
        ) else {
            return;
        };
        self.counters.frames_rx += 1;
        qp.handle_packet(&mut ctx, &repr.roce, payload);
        self.counters.rx_touch.payload += metered.written_bytes();
        self.refresh_timer(repr.roce.bth.dest_qp);
        // An ACK, a NAK, a READ response or a CNP may be due now, or the window opened.
        self.activate(repr.roce.bth.dest_qp);
    }

    /// The next frame to send, written to `buf`; its length. The active QPs take turns
    /// (idle QPs are not visited: `tx_visits` counts the visits); a QP's due CNP goes
    /// first, then its responses, then its requests as its pacer allows.
    ///
    /// With [`TxPath::HeaderOnly`] the payload is read from registered memory straight into
    /// `buf` (the device's frame) and the headers written around it, if `buf` holds a whole
    /// packet of the QP's path MTU; else that packet takes the staging path
    /// (`tx_buffer_short` counts it).
    pub fn poll_transmit<M: Memory>(
        &mut self,
        now: Nanos,
        mem: &mut M,
        buf: &mut [u8],
    ) -> Option<usize> {
        for _ in 0..self.active.len() {
            let qpn = self.active.pop_front()?;
            self.counters.tx_visits += 1;
            let sent = self.transmit_from(qpn, now, mem, buf);
            // Sending arms the retransmission timer; waiting for the pacer arms pace_wait.
            self.refresh_timer(qpn);
            let Some(slot) = self.qps.get_mut(&qpn) else {
                continue;
            };
            match sent {
                // It may have more: back of the line, so that the QPs take turns.
                Some(sent) => {
                    self.active.push_back(qpn);
                    return sent;
                }
                // A request waits for its pacer: still active (a caller may poll at the
                // pacing time before running the timers).
                None if slot.pace_wait.is_some() => self.active.push_back(qpn),
                // Nothing now: what gives it something (a post, a frame, a timer) lists
                // it again.
                None => slot.active = false,
            }
        }
        None
    }

    /// `poll_transmit` for `qpn`: None to try the next QP, else its answer.
    fn transmit_from<M: Memory>(
        &mut self,
        qpn: u32,
        now: Nanos,
        mem: &mut M,
        buf: &mut [u8],
    ) -> Option<Option<usize>> {
        {
            let slot = self.qps.get_mut(&qpn)?;
            let (Some(qp), Some(peer)) = (slot.qp.as_mut(), slot.attr.peer) else {
                return None;
            };
            let cnp = slot.cc.take_cnp();
            let mut frame = RoceFrameRepr {
                eth: EthernetRepr {
                    src: self.cfg.mac,
                    dst: peer.mac,
                    ethertype: EtherType::Ipv4,
                    vlan: None,
                },
                ip: Ipv4Repr {
                    src: self.cfg.ip,
                    dst: peer.ip,
                    protocol: 17,
                    payload_len: 0,
                    ttl: 64,
                    dscp: 0,
                    // Data goes ECT(0): a switch may mark CE (the congestion signal). A CNP
                    // goes Not-ECT, so that the notification itself is never marked.
                    ecn: if cnp { Ecn::NotEct } else { Ecn::Ect0 },
                    ident: 0,
                    dont_fragment: true,
                    more_fragments: false,
                    fragment_offset: 0,
                },
                src_port: entropy_src_port(qpn, slot.attr.dest_qpn),
                roce: RoceRepr::cnp(slot.attr.dest_qpn),
            };
            // A device buffer that cannot hold a whole packet of the path MTU takes the
            // staging path: a short packet still fits, as it always did.
            let fits = buf.len() >= MAX_FRAME_OVERHEAD + qp.mtu() as usize;
            let header_only = self.cfg.tx_path == TxPath::HeaderOnly && (fits || cnp);
            let fallback = self.cfg.tx_path == TxPath::HeaderOnly && !header_only;
            let (mut gathered, mut len) = (0, 0);
            if !cnp {
                let mut metered = Metered::new(mem);
                let mut ctx = qp_ctx(
                    &self.mrs,
                    &mut self.cqs,
                    slot.send_cq,
                    slot.recv_cq,
                    &mut metered,
                    now,
                )?;
                let may = slot.cc.may_send(now);
                let mut dst = if header_only {
                    PayloadDst::Frame {
                        headers_at: frame.roce_at(),
                        frame: &mut *buf,
                    }
                } else {
                    PayloadDst::Staging(&mut self.payload)
                };
                let Some((roce, plen)) = qp.poll_transmit_into(&mut ctx, &mut dst, may) else {
                    if !may && qp.wants_to_send(now) {
                        slot.pace_wait = Some(slot.cc.next_send());
                    }
                    return None;
                };
                gathered = metered.read_bytes();
                (frame.roce, len) = (roce, plen);
            }
            let emitted = if header_only {
                frame.emit_around(buf, len)
            } else {
                frame.emit(buf, self.payload.get(..len).unwrap_or_default())
            };
            Some(match emitted {
                Ok(written) => {
                    self.counters.frames_tx += 1;
                    let t = &mut self.counters.tx_touch;
                    t.payload += gathered;
                    if !header_only {
                        t.staging += len as u64;
                    }
                    if fallback {
                        self.counters.tx_buffer_short += 1;
                    }
                    t.icrc += (written - frame.eth.header_len()) as u64;
                    if cnp {
                        self.counters.cnp_tx += 1;
                    } else if !frame.roce.bth.opcode.is_response() {
                        slot.cc.on_sent(now, written);
                        slot.pace_wait = None;
                    }
                    Some(written)
                }
                Err(_) => None,
            })
        }
    }

    /// A QP's current rate in bit/s (DCQCN's Rc); None if there is no such QP or pacing is
    /// off.
    pub fn qp_rate_bps(&self, qpn: u32) -> Option<u64> {
        self.qps.get(&qpn)?.cc.rate_bps()
    }

    /// One line per QP and CQ, for traces (walks everything).
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (qpn, s) in &self.qps {
            if let Some(q) = s.qp.as_ref() {
                out.push_str(&format!(
                    "qp {qpn:#x}: {} pace_wait {:?} cc {:?}\n",
                    q.describe(),
                    s.pace_wait,
                    s.cc.deadline()
                ));
            }
        }
        for (i, c) in self.cqs.iter().enumerate() {
            if let Some(c) = c {
                out.push_str(&format!(
                    "cq {i}: {} waiting, overrun {}\n",
                    c.len(),
                    c.is_overrun()
                ));
            }
        }
        out
    }

    /// The counters of every QP, summed (walks the QPs: for statistics, not the data-path).
    pub fn qp_counters(&self) -> QpCounters {
        let mut t = QpCounters::default();
        for c in self
            .qps
            .values()
            .filter_map(|s| s.qp.as_ref())
            .map(|q| q.counters)
        {
            t.packets_tx += c.packets_tx;
            t.retransmits += c.retransmits;
            t.timeouts += c.timeouts;
            t.naks_tx += c.naks_tx;
            t.duplicates += c.duplicates;
            t.refused += c.refused;
        }
        t
    }

    /// The earliest deadline of any QP: its transport timers, its reaction point's timers
    /// and the pacing time of a request packet that waits (a peek at the timer heap).
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.timers.earliest()
    }

    /// Runs the timers due by `now` of the QPs due (only those: the heap names them).
    pub fn handle_timeout<M: Memory>(&mut self, now: Nanos, mem: &mut M) {
        let mut due = std::mem::take(&mut self.due);
        due.clear();
        self.timers.take_due(now, &mut due);
        for &qpn in &due {
            self.counters.timer_visits += 1;
            if let Some(slot) = self.qps.get_mut(&qpn) {
                slot.cc.on_timeout(now);
                if slot.pace_wait.is_some_and(|t| t <= now) {
                    slot.pace_wait = None;
                }
                if let Some(qp) = slot.qp.as_mut() {
                    if qp.poll_timeout().is_some_and(|t| t <= now) {
                        if let Some(mut ctx) = qp_ctx(
                            &self.mrs,
                            &mut self.cqs,
                            slot.send_cq,
                            slot.recv_cq,
                            mem,
                            now,
                        ) {
                            qp.handle_timeout(&mut ctx);
                        }
                    }
                }
            }
            self.refresh_timer(qpn);
            // A retransmission, a paced request or a CNP may be due now.
            self.activate(qpn);
        }
        self.due = due;
    }
}

impl QpSlot {
    /// The earliest of its deadlines: transport timers, reaction point, pacer.
    fn deadline(&self) -> Option<Nanos> {
        let transport = self.qp.as_ref().and_then(QueuePair::poll_timeout);
        [transport, self.cc.deadline(), self.pace_wait]
            .into_iter()
            .flatten()
            .min()
    }
}
