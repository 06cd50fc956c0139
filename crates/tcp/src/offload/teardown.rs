//! The teardown stage (acceltcp.txt 4.2): connections the application closed, handed over
//! whole by the control plane. The stage alone sends their remaining data and FIN,
//! retransmits on its RTO (go-back-N: the tail fit the send window at handover, so no
//! congestion control is needed), answers the peer's FIN, and keeps TIME-WAIT, each flow
//! in a compact record ([`TeardownFlow`], 32 bytes) instead of a connection slot.
//!
//! It is sans-IO like the rest of the core: the control plane hands it segments and the
//! time, acts on the [`Reply`] and [`Expiry`] values it returns (counters, RSTs, reopening
//! a connection in TIME-WAIT), and asks it for frames to send.

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::time::Duration;

use ahash::RandomState;
use hashbrown::HashMap;
use sluice_wire::tcp::{SeqNumber, TcpFlags, TcpHeader, TcpOptions};
use sluice_wire::EthernetAddress;

use super::bitmap_wheel::BitmapWheel;
use super::macs::MacTable;
use crate::frame::{emit_segment, Route, TxChecksum};
use crate::table::FourTuple;
use crate::time::Instant;

/// Where an offloaded connection is in its close (RFC 9293 3.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Phase {
    /// Our FIN is unacknowledged and the peer's has not come (FIN-WAIT-1).
    FinWait1 = 0,
    /// Our FIN is acknowledged; waiting for the peer's (FIN-WAIT-2, bounded like an
    /// orphan's).
    FinWait2 = 1,
    /// Both FINs sent, ours unacknowledged (CLOSING).
    Closing = 2,
    /// The peer closed first; our FIN is unacknowledged (LAST-ACK).
    LastAck = 3,
    /// Both FINs acknowledged; 2 MSL to wait (TIME-WAIT).
    TimeWait = 4,
}

impl Phase {
    fn from_bits(b: u8) -> Phase {
        match b & 7 {
            0 => Phase::FinWait1,
            1 => Phase::FinWait2,
            2 => Phase::Closing,
            3 => Phase::LastAck,
            _ => Phase::TimeWait,
        }
    }

    /// Whether our FIN (and data before it) still waits for its acknowledgment.
    fn fin_unacked(self) -> bool {
        matches!(self, Phase::FinWait1 | Phase::Closing | Phase::LastAck)
    }
}

/// One offloaded connection: the paper's flow state (4-tuple, state, expected sequence
/// and ACK numbers, RTO) plus what answering a modern peer takes (TS.Recent, the window
/// we advertise, the next hop). 32 bytes; the unsent tail, if any, lives apart in
/// [`Tail`], and the wheel keeps the deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TeardownFlow {
    remote_ip: u32,
    remote_port: u16,
    local_port: u16,
    /// Oldest unacknowledged sequence number.
    snd_una: SeqNumber,
    /// Our FIN's sequence number (it follows the last data byte).
    fin_seq: SeqNumber,
    /// Next sequence number expected from the peer.
    rcv_nxt: SeqNumber,
    /// The peer's latest TSval (RFC 7323 TS.Recent).
    ts_recent: u32,
    /// The window field we advertise (already scaled).
    window: u16,
    /// The base retransmission timeout, ms (doubled per retry).
    rto_ms: u16,
    /// Index of the next hop's MAC in the stage's [`MacTable`].
    mac: u16,
    /// Bits 0-2: [`Phase`]; bit 3: timestamps on; bits 4-7: our window scale.
    bits: u8,
    /// Retransmissions since the last forward progress.
    retries: u8,
}

const TIMESTAMPS: u8 = 1 << 3;

impl TeardownFlow {
    /// Its phase.
    pub(crate) fn phase(&self) -> Phase {
        Phase::from_bits(self.bits)
    }

    fn set_phase(&mut self, p: Phase) {
        self.bits = (self.bits & !7) | p as u8;
    }

    fn timestamps(&self) -> bool {
        self.bits & TIMESTAMPS != 0
    }

    fn rcv_wscale(&self) -> u8 {
        self.bits >> 4
    }

    /// The connection's 4-tuple.
    pub(crate) fn tuple(&self) -> FourTuple {
        FourTuple {
            remote_ip: Ipv4Addr::from(self.remote_ip),
            remote_port: self.remote_port,
            local_port: self.local_port,
        }
    }

    /// The sequence number after our FIN (SND.MAX).
    pub(crate) fn snd_max(&self) -> SeqNumber {
        self.fin_seq + 1u32
    }

    /// Bytes of our receive window (for the RFC 5961 RST check).
    fn rcv_wnd(&self) -> u32 {
        (self.window as u32) << self.rcv_wscale()
    }
}

/// The data a flow still has to deliver: bytes from `base` up to its FIN.
#[derive(Debug)]
struct Tail {
    base: SeqNumber,
    mss: u16,
    bytes: Box<[u8]>,
}

/// What the control plane hands the stage at close: a connection's whole state.
#[derive(Debug)]
pub(crate) struct Handoff<'a> {
    /// The connection.
    pub tuple: FourTuple,
    /// Its next hop.
    pub peer_mac: EthernetAddress,
    /// Where the close is: FIN-WAIT-1 or LAST-ACK for a connection closed while open (we
    /// close first, or the peer did); any later phase after a shutdown.
    pub phase: Phase,
    /// Oldest unacknowledged sequence number; `tail` starts here.
    pub snd_una: SeqNumber,
    /// The next sequence number to send: the stage sends from here on (what lies before
    /// it went out already, and is sent again only on the stage's RTO).
    pub snd_nxt: SeqNumber,
    /// Our FIN's sequence number (the end of the data).
    pub fin_seq: SeqNumber,
    /// Next sequence number expected from the peer.
    pub rcv_nxt: SeqNumber,
    /// TS.Recent, if timestamps are on.
    pub ts_recent: Option<u32>,
    /// The window field we advertise, and our window scale.
    pub window: u16,
    /// Our window scale shift.
    pub rcv_wscale: u8,
    /// The send MSS.
    pub mss: u16,
    /// The current retransmission timeout.
    pub rto: Duration,
    /// Every byte from `snd_una` to the FIN that the peer has not acknowledged, sent or
    /// not (empty once the FIN is acknowledged).
    pub tail: &'a [u8],
}

/// Why the stage would not take a connection (the normal path closes it instead).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The stage holds its configured number of flows.
    Full,
    /// The tails held would pass the configured byte budget.
    TailBudget,
    /// The tuple is in the stage already (cannot happen for a connection in the table).
    Duplicate,
}

/// A received segment, as much of it as the stage reads.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Segment {
    /// Sequence number.
    pub seq: SeqNumber,
    /// Acknowledgment number.
    pub ack: SeqNumber,
    /// Flags.
    pub flags: TcpFlags,
    /// Payload bytes.
    pub len: u32,
    /// TSval, if the segment carries timestamps.
    pub tsval: Option<u32>,
}

/// What the control plane does after the stage took a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Nothing to send.
    Nothing,
    /// Send an ACK for the flow (RFC 9293's answer to an unacceptable or retransmitted
    /// segment, a FIN, or an RFC 5961 challenge).
    Ack,
    /// A PAWS failure (RFC 7323 5.3): send an ACK, drop the segment.
    Paws,
    /// Data arrived for a connection the application closed: send RST with this sequence
    /// number (RFC 9293 3.10.7.4, RFC 2525 2.17), then remove the flow.
    Reset(SeqNumber),
    /// The peer reset the connection: the flow is gone.
    PeerReset,
    /// Our FIN was acknowledged in LAST-ACK: the flow is gone, closed cleanly.
    Closed,
    /// A SYN in TIME-WAIT that RFC 6191 lets reopen the connection with this ISS (the
    /// flow is still there: the control plane removes it if a listener takes the SYN).
    MayReopen(SeqNumber),
    /// A SYN in TIME-WAIT that cannot be told from an old duplicate: ACK it (RFC 5961 4.2).
    SynRefused,
}

/// What a timer did to a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// The data and FIN go out again.
    Retransmit,
    /// Retransmissions exhausted: send RST with this sequence number, then remove the flow.
    GaveUp(SeqNumber),
    /// TIME-WAIT (or FIN-WAIT-2's bound) ended: the flow is gone.
    Done(Phase),
}

/// The stage's limits and timings, from [`crate::Config`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Most flows held.
    pub flows: usize,
    /// Most tail bytes held, over every flow.
    pub tail_bytes: usize,
    /// Retransmissions before giving up.
    pub retries: u8,
    /// Most the RTO backs off to.
    pub rto_max: Duration,
    /// TIME-WAIT (2 MSL).
    pub time_wait: Duration,
    /// How long FIN-WAIT-2 waits for the peer's FIN.
    pub fin_wait2: Duration,
}

/// The teardown stage: its flows, their lookup, their tails and their timers.
pub(crate) struct TeardownStage {
    flows: Vec<TeardownFlow>,
    live: Vec<bool>,
    free: Vec<u32>,
    index: HashMap<u64, u32, RandomState>,
    tails: HashMap<u32, Tail, RandomState>,
    tail_bytes: usize,
    macs: MacTable,
    wheel: BitmapWheel,
    /// Flows with something to send, and the sequence number to send from.
    ready: VecDeque<(u32, SeqNumber)>,
    expired: Vec<u32>,
    limits: Limits,
}

impl TeardownStage {
    /// An empty stage; `seed` keys its hash, the wheel has `wheel_slots` ticks of `tick`.
    pub(crate) fn new(limits: Limits, wheel_slots: usize, tick: Duration, seed: u64) -> Self {
        let hasher = || RandomState::with_seeds(seed ^ 0x7ea2, seed.rotate_left(9), seed, 77);
        TeardownStage {
            flows: Vec::new(),
            live: Vec::new(),
            free: Vec::new(),
            index: HashMap::with_hasher(hasher()),
            tails: HashMap::with_hasher(hasher()),
            tail_bytes: 0,
            macs: MacTable::default(),
            wheel: BitmapWheel::new(wheel_slots, tick.as_nanos() as u64, 0),
            ready: VecDeque::new(),
            expired: Vec::new(),
            limits,
        }
    }

    /// Flows held.
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// Bytes the stage's tables hold (records, lookup, wheel, tails).
    pub(crate) fn memory_bytes(&self) -> usize {
        self.flows.capacity() * (std::mem::size_of::<TeardownFlow>() + 1)
            + self.index.capacity() * 12
            + self.wheel.memory_bytes()
            + self.tail_bytes
    }

    /// The flow of `tuple`, if the stage holds it.
    #[inline]
    pub(crate) fn lookup(&self, tuple: &FourTuple) -> Option<u32> {
        if self.index.is_empty() {
            return None;
        }
        self.index.get(&tuple.key()).copied()
    }

    /// A flow's record.
    pub(crate) fn flow(&self, flow: u32) -> &TeardownFlow {
        &self.flows[flow as usize]
    }

    /// Every flow's phase (for [`crate::Stack::closing`]).
    pub(crate) fn phases(&self) -> impl Iterator<Item = Phase> + '_ {
        self.index.values().map(|&f| self.flows[f as usize].phase())
    }

    /// Whether the stage would take a close with `tail` bytes left.
    pub(crate) fn check_room(&self, tail: usize) -> Result<(), Refusal> {
        if self.index.len() >= self.limits.flows {
            return Err(Refusal::Full);
        }
        if self.tail_bytes + tail > self.limits.tail_bytes {
            return Err(Refusal::TailBudget);
        }
        Ok(())
    }

    /// Takes a connection over: its record, its tail, its first transmission and its RTO.
    pub(crate) fn admit(&mut self, now: Instant, h: Handoff<'_>) -> Result<u32, Refusal> {
        self.check_room(h.tail.len())?;
        let k = h.tuple.key();
        if self.index.contains_key(&k) {
            return Err(Refusal::Duplicate);
        }
        let Some(mac) = self.macs.intern(h.peer_mac) else {
            return Err(Refusal::Full);
        };
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.flows.push(TeardownFlow::EMPTY);
                self.live.push(false);
                (self.flows.len() - 1) as u32
            }
        };
        let mut bits = h.phase as u8 | (h.rcv_wscale.min(14) << 4);
        if h.ts_recent.is_some() {
            bits |= TIMESTAMPS;
        }
        let rto_ms = h.rto.as_millis().clamp(1, u16::MAX as u128) as u16;
        self.flows[id as usize] = TeardownFlow {
            remote_ip: u32::from(h.tuple.remote_ip),
            remote_port: h.tuple.remote_port,
            local_port: h.tuple.local_port,
            snd_una: h.snd_una,
            fin_seq: h.fin_seq,
            rcv_nxt: h.rcv_nxt,
            ts_recent: h.ts_recent.unwrap_or(0),
            window: h.window,
            rto_ms,
            mac,
            bits,
            retries: 0,
        };
        self.live[id as usize] = true;
        self.index.insert(k, id);
        if !h.tail.is_empty() {
            self.tail_bytes += h.tail.len();
            self.tails.insert(
                id,
                Tail {
                    base: h.snd_una,
                    mss: h.mss.max(1),
                    bytes: h.tail.into(),
                },
            );
        }
        match h.phase {
            Phase::FinWait1 | Phase::Closing | Phase::LastAck => {
                if h.snd_nxt.seq_le(h.fin_seq) {
                    // Data or the FIN not sent yet.
                    self.ready.push_back((id, h.snd_nxt));
                }
                self.arm_rto(id, now);
            }
            Phase::FinWait2 => {
                let at = now + self.limits.fin_wait2;
                self.wheel.schedule(id, at.as_nanos());
            }
            Phase::TimeWait => {
                let at = now + self.limits.time_wait;
                self.wheel.schedule(id, at.as_nanos());
            }
        }
        Ok(id)
    }

    /// Removes a flow: its record, lookup, tail and timer.
    pub(crate) fn remove(&mut self, flow: u32) {
        let f = flow as usize;
        if !self.live.get(f).copied().unwrap_or(false) {
            return;
        }
        self.live[f] = false;
        let rec = self.flows[f];
        self.index.remove(&rec.tuple().key());
        if let Some(t) = self.tails.remove(&flow) {
            self.tail_bytes -= t.bytes.len();
        }
        self.macs.release(rec.mac);
        self.wheel.cancel(flow);
        self.free.push(flow);
    }

    fn arm_rto(&mut self, flow: u32, now: Instant) {
        let f = &self.flows[flow as usize];
        let backed = Duration::from_millis(f.rto_ms as u64) * (1u32 << f.retries.min(16));
        let rto = backed.min(self.limits.rto_max);
        self.wheel.schedule(flow, (now + rto).as_nanos());
    }

    /// Handles a segment for `flow` (RFC 9293 3.10.7.4 for the closing states, RFC 5961,
    /// RFC 7323 PAWS, RFC 1337 and RFC 6191 in TIME-WAIT).
    pub(crate) fn on_segment(&mut self, now: Instant, flow: u32, seg: &Segment) -> Reply {
        let f = self.flows[flow as usize];
        let phase = f.phase();
        if seg.flags.contains(TcpFlags::RST) {
            // RFC 1337: TIME-WAIT ignores RSTs. Elsewhere RFC 5961 3.2: only an exact
            // match resets; in the window earns a challenge ACK.
            if phase == Phase::TimeWait {
                return Reply::Nothing;
            }
            if seg.seq == f.rcv_nxt {
                self.remove(flow);
                return Reply::PeerReset;
            }
            let in_window =
                seg.seq.seq_gt(f.rcv_nxt) && seg.seq.seq_lt(f.rcv_nxt + f.rcv_wnd().max(1));
            return if in_window {
                Reply::Ack
            } else {
                Reply::Nothing
            };
        }
        if seg.flags.contains(TcpFlags::SYN) {
            if phase == Phase::TimeWait && !seg.flags.contains(TcpFlags::ACK) {
                return if self.syn_may_reopen(&f, seg) {
                    // RFC 1122 4.2.2.13: the new incarnation's ISS lies above every
                    // sequence number this one used.
                    Reply::MayReopen(f.snd_max() + 65537u32)
                } else {
                    Reply::SynRefused
                };
            }
            // RFC 5961 4.2: a SYN on a synchronized connection earns a challenge ACK.
            return Reply::Ack;
        }
        if !seg.flags.contains(TcpFlags::ACK) {
            return Reply::Nothing;
        }
        if let (true, Some(tsval)) = (f.timestamps(), seg.tsval) {
            // RFC 7323 5.3 R1: a TSval older than TS.Recent is an old duplicate.
            if (tsval.wrapping_sub(f.ts_recent) as i32) < 0 {
                return Reply::Paws;
            }
            if seg.seq.seq_le(f.rcv_nxt) {
                self.flows[flow as usize].ts_recent = tsval;
            }
        }
        let fin = seg.flags.contains(TcpFlags::FIN);
        let end = seg.seq + seg.len;
        // Data the application can never read: RFC 9293 3.10.7.4 (and RFC 2525 2.17) reset.
        if seg.len > 0 && end.seq_gt(f.rcv_nxt) && phase != Phase::TimeWait {
            if seg.seq.seq_gt(f.rcv_nxt) {
                // Beyond a hole: not yet the peer's next byte; ACK what we have.
                return Reply::Ack;
            }
            return Reply::Reset(f.snd_una);
        }
        if phase.fin_unacked() {
            if seg.ack.seq_gt(f.snd_max()) {
                // RFC 9293: an ACK of something not yet sent is answered and dropped.
                return Reply::Ack;
            }
            if seg.ack.seq_gt(f.snd_una) {
                self.acked(now, flow, seg.ack);
                if !self.live[flow as usize] {
                    return Reply::Closed;
                }
            }
        }
        let f = self.flows[flow as usize];
        if fin {
            let fin_at = end;
            if fin_at == f.rcv_nxt {
                self.flows[flow as usize].rcv_nxt = f.rcv_nxt + 1u32;
                match f.phase() {
                    Phase::FinWait1 => self.flows[flow as usize].set_phase(Phase::Closing),
                    Phase::FinWait2 => self.enter_time_wait(now, flow),
                    _ => {}
                }
                return Reply::Ack;
            }
            if fin_at.seq_lt(f.rcv_nxt) {
                // A retransmitted FIN: ACK it; TIME-WAIT restarts its 2 MSL (RFC 9293
                // 3.10.7.4).
                if f.phase() == Phase::TimeWait {
                    self.wheel
                        .schedule(flow, (now + self.limits.time_wait).as_nanos());
                }
                return Reply::Ack;
            }
            // A FIN beyond a hole (data we never got): ACK what we have.
            return Reply::Ack;
        }
        if seg.len > 0 {
            // Entirely old data: the peer missed our ACK.
            return Reply::Ack;
        }
        Reply::Nothing
    }

    /// An ACK advanced SND.UNA: the tail shrinks; the FIN's ACK moves the phase on.
    fn acked(&mut self, now: Instant, flow: u32, ack: SeqNumber) {
        let f = &mut self.flows[flow as usize];
        f.snd_una = ack;
        f.retries = 0;
        let (fin_acked, phase) = (ack == f.snd_max(), f.phase());
        if !fin_acked {
            self.arm_rto(flow, now);
            return;
        }
        // Our FIN is acknowledged, so is every byte: the tail is no longer needed.
        if let Some(t) = self.tails.remove(&flow) {
            self.tail_bytes -= t.bytes.len();
        }
        match phase {
            Phase::FinWait1 => {
                self.flows[flow as usize].set_phase(Phase::FinWait2);
                let at = now + self.limits.fin_wait2;
                self.wheel.schedule(flow, at.as_nanos());
            }
            Phase::Closing => self.enter_time_wait(now, flow),
            Phase::LastAck => self.remove(flow),
            _ => {}
        }
    }

    fn enter_time_wait(&mut self, now: Instant, flow: u32) {
        if self.limits.time_wait.is_zero() {
            self.remove(flow);
            return;
        }
        self.flows[flow as usize].set_phase(Phase::TimeWait);
        self.wheel
            .schedule(flow, (now + self.limits.time_wait).as_nanos());
    }

    /// RFC 6191 2: a newer TSval (or, without timestamps, a sequence number above
    /// RCV.NXT) says a SYN is a new connection, not an old duplicate.
    fn syn_may_reopen(&self, f: &TeardownFlow, seg: &Segment) -> bool {
        let seq_above = seg.seq.seq_gt(f.rcv_nxt);
        match (f.timestamps(), seg.tsval) {
            (true, Some(tsval)) => {
                let newer = tsval.wrapping_sub(f.ts_recent) as i32;
                newer > 0 || (newer == 0 && seq_above)
            }
            _ => seq_above,
        }
    }

    /// When [`TeardownStage::on_timeout`] next has work.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.wheel.next_due_ns().map(Instant::from_nanos)
    }

    /// Fires the timers that came due, appending each flow's outcome to `out` (the flow is
    /// already gone for [`Expiry::Done`]; the control plane removes it after
    /// [`Expiry::GaveUp`]'s RST).
    pub(crate) fn on_timeout(&mut self, now: Instant, out: &mut Vec<(u32, Expiry)>) {
        let mut expired = std::mem::take(&mut self.expired);
        expired.clear();
        self.wheel.expire(now.as_nanos(), &mut expired);
        for &flow in &expired {
            if !self.live[flow as usize] {
                continue;
            }
            let f = self.flows[flow as usize];
            let phase = f.phase();
            if !phase.fin_unacked() {
                self.remove(flow);
                out.push((flow, Expiry::Done(phase)));
            } else if f.retries >= self.limits.retries {
                out.push((flow, Expiry::GaveUp(f.snd_una)));
            } else {
                self.flows[flow as usize].retries += 1;
                self.arm_rto(flow, now);
                self.ready.push_back((flow, f.snd_una));
                out.push((flow, Expiry::Retransmit));
            }
        }
        self.expired = expired;
    }

    /// Whether a flow has a segment waiting to go out.
    pub(crate) fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The route and header of a segment from `flow` with `seq` and `flags`.
    pub(crate) fn header(
        &self,
        flow: u32,
        src: (EthernetAddress, Ipv4Addr),
        seq: SeqNumber,
        flags: TcpFlags,
        tsval: u32,
    ) -> (Route, TcpHeader) {
        let f = &self.flows[flow as usize];
        let mut options = TcpOptions::default();
        if f.timestamps() {
            options.timestamp = Some((tsval, f.ts_recent));
        }
        let route = Route {
            src_mac: src.0,
            dst_mac: self.macs.get(f.mac),
            src_ip: src.1,
            dst_ip: Ipv4Addr::from(f.remote_ip),
        };
        let header = TcpHeader {
            src_port: f.local_port,
            dst_port: f.remote_port,
            seq,
            ack: f.rcv_nxt,
            flags,
            window: if flags.contains(TcpFlags::RST) {
                0
            } else {
                f.window
            },
            urgent: 0,
            options,
        };
        (route, header)
    }

    /// The flow and sequence number of the next data/FIN segment to send, skipping
    /// entries that went stale (the flow left, or an ACK passed them).
    pub(crate) fn next_ready(&mut self) -> Option<(u32, SeqNumber)> {
        while let Some(&(flow, from)) = self.ready.front() {
            let f = &self.flows[flow as usize];
            if self.live[flow as usize]
                && f.phase().fin_unacked()
                && from.seq_ge(f.snd_una)
                && from.seq_le(f.fin_seq)
            {
                return Some((flow, from));
            }
            self.ready.pop_front();
        }
        None
    }

    /// Writes the segment [`TeardownStage::next_ready`] named into `buf` (at most one MSS
    /// of the tail, with FIN if it reaches the end) and moves the queue on. None if `buf`
    /// is too small (nothing is taken).
    pub(crate) fn transmit(
        &mut self,
        buf: &mut [u8],
        src: (EthernetAddress, Ipv4Addr),
        ident: u16,
        tsval: u32,
    ) -> Option<usize> {
        let (flow, from) = self.next_ready()?;
        let f = self.flows[flow as usize];
        let (payload, mss) = match self.tails.get(&flow) {
            Some(t) => {
                let at = from.diff(t.base).max(0) as usize;
                let end = f.fin_seq.diff(t.base).max(0) as usize;
                (t.bytes.get(at..end).unwrap_or(&[]), t.mss as usize)
            }
            None => (&[][..], 0),
        };
        let n = payload.len().min(mss);
        let fin = n == payload.len();
        let mut flags = TcpFlags::ACK;
        if fin {
            flags |= TcpFlags::FIN;
        }
        if n > 0 && fin {
            flags |= TcpFlags::PSH;
        }
        let (route, header) = self.header(flow, src, from, flags, tsval);
        let len = emit_segment(buf, &route, ident, &header, n, TxChecksum::Full, |p| {
            p.copy_from_slice(&payload[..n])
        })?;
        self.ready.pop_front();
        if !fin {
            self.ready.push_front((flow, from + n));
        }
        Some(len)
    }

    /// Checks the stage's bookkeeping (the fuzz and simulator invariants call this).
    pub(crate) fn check(&self) -> Result<(), &'static str> {
        self.wheel.check()?;
        let live = self.live.iter().filter(|&&l| l).count();
        if live != self.index.len() || live + self.free.len() != self.flows.len() {
            return Err("teardown: live flows, lookup and free list disagree");
        }
        for (&k, &id) in &self.index {
            let f = &self.flows[id as usize];
            if !self.live[id as usize] || f.tuple().key() != k {
                return Err("teardown: a lookup entry names another flow");
            }
            if !self.wheel.is_scheduled(id) {
                return Err("teardown: a flow with no timer");
            }
            if f.phase().fin_unacked() != (f.snd_una.seq_le(f.fin_seq)) {
                return Err("teardown: SND.UNA disagrees with the phase");
            }
        }
        if self.wheel.len() != live {
            return Err("teardown: timers for flows that left");
        }
        let held: usize = self.tails.values().map(|t| t.bytes.len()).sum();
        if held != self.tail_bytes || held > self.limits.tail_bytes {
            return Err("teardown: tail bytes disagree with the budget");
        }
        if self.index.len() > self.limits.flows {
            return Err("teardown: more flows than the limit");
        }
        Ok(())
    }
}

impl TeardownFlow {
    const EMPTY: TeardownFlow = TeardownFlow {
        remote_ip: 0,
        remote_port: 0,
        local_port: 0,
        snd_una: SeqNumber(0),
        fin_seq: SeqNumber(0),
        rcv_nxt: SeqNumber(0),
        ts_recent: 0,
        window: 0,
        rto_ms: 0,
        mac: 0,
        bits: 0,
        retries: 0,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_record_is_32_bytes() {
        // acceltcp.txt 4.2's 26 bytes, plus TS.Recent, the advertised window and the next
        // hop, which a peer with timestamps and a router in between need.
        assert_eq!(std::mem::size_of::<TeardownFlow>(), 32);
    }
}
