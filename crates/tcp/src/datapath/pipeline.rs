//! The pipeline's stages on a batch: protocol → post, each post outcome reported to the
//! control plane as a [`StageOutcome`] (control/input.rs drives RX), and the TX workflow
//! (scheduler → segment generation) behind `poll_transmit`: the ready queue serves
//! connections round-robin; a rate-limited one is admitted only at its Carousel send time
//! and otherwise waits in the timing wheel (flextoe.txt 3.4, datapath/scheduler.rs).

use sluice_wire::tcp::{SeqNumber, TcpFlags};

use super::state::{flags, post_flags, sack_flags};
use super::summary::{Actions, HeaderSummary};
use super::{ecn, post, protocol, rack, scheduler, scoreboard, tlp, tx};
use crate::config::AckPolicy;
use crate::events::bits;
use crate::frame::{emit_segment, emit_segment_ecn, Route, Transmit, TxChecksum};
use crate::host::Stack;
use crate::pressure::{send_limit, MemoryState};
use crate::time::Instant;
use crate::timer::Timer;

/// The post stage's configuration, computed once per batch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PostRules {
    /// When received data is acknowledged.
    pub(crate) ack: post::AckRule,
    /// RFC 6298 2.4-2.5 RTO bounds, microseconds.
    pub(crate) rto_bounds: (u32, u32),
}

/// What the post stage made of one segment: the message from the data-path to the control
/// plane, which owns timers, congestion control and connection state. It travels beside the
/// segment's header summary (which the caller holds), so the summary is not copied again.
#[derive(Clone, Copy, Debug)]
pub(crate) enum StageOutcome {
    /// The protocol stage refused the segment (out of window, PAWS, bad ACK): the control
    /// plane answers it.
    Exception,
    /// The segment went through; the summary's actions (FIN received or acknowledged,
    /// spurious RTO) and the post-processor's outcome say what follows.
    Posted(post::PostOutcome),
}

impl Stack {
    /// The protocol stage: one pass over the first `n` summaries of the batch.
    pub(crate) fn protocol_stage(&mut self, n: usize) {
        let now_us = self.now.as_micros() as u32;
        // Over the memory limit, out-of-order data may not add bytes (control/memory.rs).
        let admit_ooo = self.memory.state() != MemoryState::OverLimit;
        for i in 0..n {
            let s = &mut self.dp.batch[i];
            let slot = s.slot as usize;
            let stride = self.dp.ooo_stride;
            let sacked = self.dp.sacked_stride;
            let ps = &mut self.dp.proto[slot];
            // RFC 6298 5.4 and 3 (Karn): past the retransmission timer's deadline the timed
            // segment is due for retransmission, and a host serving its timers on time would
            // have resent it and stopped timing (control/timers.rs). A segment handled
            // before the overdue timer stops timing too: its ACK, or a later one after this
            // one restarts the timer, would measure how long the host was away (a clock
            // jump), not the path (issue 24: SRTT of hours, the congestion tick hours away).
            if ps.has(flags::RTT_TIMING) && self.conns[slot].timers.is_expired(Timer::Rto, self.now)
            {
                ps.set(flags::RTT_TIMING, false);
            }
            let was_in_recovery = scoreboard::in_recovery(ps);
            protocol::process(
                ps,
                &mut self.dp.ooo_state[slot],
                &mut self.dp.recovery[slot],
                &mut self.dp.ooo[slot * stride..(slot + 1) * stride],
                &mut self.dp.sacked[slot * sacked..(slot + 1) * sacked],
                s,
                now_us,
                admit_ooo,
            );
            let k = self.dp.xmit_stride;
            if k > 0 && ps.sack.has(sack_flags::ENABLED) && !s.actions.contains(Actions::EXCEPTION)
            {
                // RFC 8985 6; SRTT caps reo_wnd (read from the post-processor's table).
                let rk = &mut self.dp.rack[slot];
                if was_in_recovery && !scoreboard::in_recovery(ps) {
                    rack::on_recovery_end(rk);
                }
                s.rack_lost = rack::process_ack(
                    ps,
                    &mut self.dp.recovery[slot],
                    &self.dp.sacked[slot * sacked..(slot + 1) * sacked],
                    rk,
                    &mut self.dp.xmit[slot * k..(slot + 1) * k],
                    s,
                    now_us,
                    self.dp.post[slot].srtt_us,
                );
            }
        }
    }

    /// The post stage's rules from the configuration: when to acknowledge, and the RTO
    /// bounds in microseconds.
    pub(crate) fn post_rules(&self) -> PostRules {
        let ack = post::AckRule {
            segments: match self.cfg.ack_policy {
                AckPolicy::EverySegment => 1,
                AckPolicy::Delayed { segments, .. } => segments,
            },
            rcv_mss: u32::from(self.cfg.local_mss()),
        };
        // The estimator keeps microseconds in 32 bits (about 71 minutes); longer bounds
        // saturate there rather than wrap (a wrapped rto_max below rto_min would panic).
        let micros = |d: std::time::Duration| u32::try_from(d.as_micros()).unwrap_or(u32::MAX);
        PostRules {
            ack,
            rto_bounds: (micros(self.cfg.rto_min), micros(self.cfg.rto_max)),
        }
    }

    /// The post stage for a summary of the batch (`s`, the caller's copy), after the protocol
    /// stage: payload placement, notifications and the post-processor. Returns its outcome
    /// for the control plane, which acts on it and then calls [`Stack::acknowledge`].
    #[inline]
    pub(crate) fn post_stage(
        &mut self,
        s: &HeaderSummary,
        frames: &[&[u8]],
        rules: PostRules,
    ) -> StageOutcome {
        self.counters.fast_path += 1;
        if s.actions.contains(Actions::EXCEPTION) {
            return StageOutcome::Exception;
        }
        let slot = s.slot;
        let i = slot as usize;
        if s.ecn_ce {
            self.counters.ecn_ce += 1;
        }
        if s.sack.received > 0 {
            let c = &mut self.counters;
            c.sack_blocks_rx += u64::from(s.sack.received);
            c.sack_blocks_invalid += u64::from(s.sack.invalid);
            c.sack_blocks_old += u64::from(s.sack.old);
            c.sack_scoreboard_full += u64::from(s.sack.overflow);
            c.sack_lost_retransmissions += u64::from(s.sack.rxt_lost);
        }
        self.counters.rack_losses += u64::from(s.rack_lost);
        // Counters judge the segment by the receive state it left (`ack_rcv_nxt`), not by
        // the connection's, which later segments of the batch may have moved on.
        if s.actions.contains(Actions::ACK_NOW)
            && s.place_len == 0
            && s.payload_len > 0
            && (s.seq + s.payload_len as u32).seq_le(s.ack_rcv_nxt)
        {
            self.counters.duplicate_segments += 1;
        }
        if let Some(b) = self.bufs[i].as_mut() {
            if s.place_len > 0 {
                let at = s.place_offset as usize;
                if let Some(payload) = frames
                    .get(s.frame as usize)
                    .and_then(|f| f.get(at..at + s.place_len as usize))
                {
                    b.rx.write(s.place_seq, payload);
                }
                if s.rx_advance == 0 {
                    self.counters.ooo_stored += 1;
                }
            } else if s.actions.contains(Actions::OOO_OVER_LIMIT) {
                self.counters.memory_ooo_dropped += 1;
            } else if s.payload_len > 0 && s.actions.contains(Actions::ACK_NOW) && s.rx_advance == 0
            {
                // Out-of-order data that found no interval slot.
                if s.seq.seq_gt(s.ack_rcv_nxt) {
                    self.counters.ooo_dropped += 1;
                }
            }
            if s.rx_advance > 0 {
                b.rx_tail += s.rx_advance;
                self.events.raise(slot, bits::READABLE);
            }
            if s.tx_freed > 0 {
                b.tx_head += s.tx_freed;
                // Only when `send` would take something: a ring above today's share waits.
                if b.want_writable
                    && b.tx_room(send_limit(&self.cfg, self.table.len(), self.memory.state())) > 0
                {
                    b.want_writable = false;
                    self.events.raise(slot, bits::WRITABLE);
                }
            }
            if s.rx_advance > 0 || s.tx_freed > 0 || s.actions.contains(Actions::OOO_CHANGED) {
                self.count_segment(s);
            }
        }
        if let Some(ack) = post::ack_before_ce_change(&self.dp.proto[i], &self.dp.post[i], s) {
            // RFC 8257 3.2: acknowledge what came before the CE change with the old ECE.
            self.send_ack_as_of(slot, ack.rcv_nxt, ack.rx_avail);
        }
        let out = post::process(
            &mut self.dp.proto[i],
            &mut self.dp.recovery[i],
            &mut self.dp.post[i],
            &mut self.dp.post_cold[i],
            s,
            rules.ack,
        );
        if out.fast_retransmit {
            self.counters.fast_retransmits += 1;
            if scoreboard::in_recovery(&self.dp.proto[i]) {
                self.counters.sack_recoveries += 1;
            }
        }
        if s.actions.contains(Actions::WAKE_TX) || s.actions.contains(Actions::FAST_RETRANSMIT) {
            self.dp.ready.push(slot);
        }
        StageOutcome::Posted(out)
    }

    /// The ACK the post-processor decided on for a segment: now, or by the delayed-ACK
    /// timer.
    ///
    /// With delayed ACKs, "now" means once for the whole receive burst (the frames handled
    /// before the driver next polls for frames to send): the ACK is owed, and the TX
    /// workflow sends it, on data or alone, with the state the burst left. The segments of
    /// a burst arrived together, as those of a GRO aggregate do, which Linux acknowledges
    /// with one ACK; every ACK on the wire costs the sender, the network and this host a
    /// frame. RFC 5681 4.2's "at least every second full-sized segment" (a SHOULD) holds
    /// at the end of each burst: no two full segments wait for the timer, and one ACK
    /// stands for at most `post::ACK_SEGMENTS_MAX` segments. Not for FIN changes, which
    /// the control plane acts on at once, nor for a rate-limited connection, whose owed
    /// ACK would wait for its send time.
    #[inline]
    pub(crate) fn acknowledge(&mut self, s: &HeaderSummary, out: post::PostOutcome) {
        let slot = s.slot;
        let i = slot as usize;
        if out.ack_now {
            let burst = matches!(self.cfg.ack_policy, AckPolicy::Delayed { .. })
                && !out.ack_at_once
                && self.dp.sched[i].rate_bps == 0
                && !s.actions.contains(Actions::FIN_RECEIVED)
                && !s.actions.contains(Actions::FIN_ACKED);
            if burst {
                self.dp.post[i].set(post_flags::ACK_PENDING, true);
                self.dp.ready.push(slot);
            } else {
                self.send_ack_as_of(slot, s.ack_rcv_nxt, s.ack_rx_avail);
            }
        } else if out.arm_delack {
            if let AckPolicy::Delayed { timeout, .. } = self.cfg.ack_policy {
                if !self.conns[slot as usize].timers.is_set(Timer::DelayedAck) {
                    self.arm_timer(slot, Timer::DelayedAck, self.now + timeout);
                }
            }
        }
    }

    /// Route of a connection's frames.
    #[inline]
    pub(crate) fn route_of(&self, slot: u32) -> Route {
        let pre = &self.dp.pre[slot as usize];
        Route {
            src_mac: self.cfg.mac,
            dst_mac: pre.peer_mac,
            src_ip: self.cfg.ip,
            dst_ip: pre.peer_ip,
        }
    }

    /// Sends a pure ACK for a synchronized connection now (or as soon as the control queue
    /// has room: the ACK is then owed and goes out from `poll_transmit`).
    pub(crate) fn send_ack(&mut self, slot: u32) {
        let ps = &self.dp.proto[slot as usize];
        self.send_ack_as_of(slot, ps.rcv_nxt, ps.rx_avail);
    }

    /// Sends a pure ACK acknowledging `rcv_nxt` with a window of `rx_avail` bytes: the
    /// receive state one segment of a batch left (see [`HeaderSummary::ack_rcv_nxt`]).
    fn send_ack_as_of(&mut self, slot: u32, rcv_nxt: SeqNumber, rx_avail: u32) {
        let ack = tx::AckFields { rcv_nxt, rx_avail };
        let seq = self.dp.proto[slot as usize].snd_nxt;
        if self.push_pure_ack(slot, seq, ack) {
            self.ack_sent(slot);
        } else {
            self.dp.post[slot as usize].set(post_flags::ACK_PENDING, true);
            self.dp.ready.push(slot);
        }
    }

    /// Sends a pure ACK of the current receive state whose first SACK block reports `dup`,
    /// data that arrived again: a D-SACK (RFC 2883 4). It tells the sender that its
    /// retransmission was needless, as Linux's answer to a duplicate does; counted as a
    /// duplicate ACK instead, it would make F-RTO take a spurious timeout for a real one.
    pub(crate) fn send_dsack(&mut self, slot: u32, dup: (SeqNumber, SeqNumber)) {
        let ps = &self.dp.proto[slot as usize];
        if !ps.has(flags::SACK) {
            self.send_ack(slot);
            return;
        }
        let mut header = self.pure_ack_header(slot, ps.snd_nxt, tx::AckFields::current(ps));
        let o = &mut header.options;
        let room = if o.timestamp.is_some() {
            3
        } else {
            o.sack_blocks.len()
        };
        let n = usize::from(o.sack_count).min(room - 1);
        o.sack_blocks.copy_within(0..n, 1);
        o.sack_blocks[0] = dup;
        o.sack_count = (n + 1) as u8;
        if self.push_header(slot, &header) {
            self.ack_sent(slot);
        } else {
            self.dp.post[slot as usize].set(post_flags::ACK_PENDING, true);
            self.dp.ready.push(slot);
        }
    }

    /// Queues a pure ACK (or, with an old `seq`, a zero-window probe) on the control queue.
    /// Returns false, counting it, if the queue is full.
    pub(crate) fn push_pure_ack(&mut self, slot: u32, seq: SeqNumber, ack: tx::AckFields) -> bool {
        let header = self.pure_ack_header(slot, seq, ack);
        self.push_header(slot, &header)
    }

    /// Queues a header-only segment of `slot` on the control queue; false, counted, if full.
    fn push_header(&mut self, slot: u32, header: &sluice_wire::tcp::TcpHeader) -> bool {
        let route = self.route_of(slot);
        self.ip_ident = self.ip_ident.wrapping_add(1);
        let ident = self.ip_ident;
        let queued = self
            .out
            .push_with(|buf| emit_segment(buf, &route, ident, header, 0, TxChecksum::Full, |_| {}));
        if !queued {
            self.counters.control_queue_full += 1;
        }
        queued
    }

    /// The header of a pure ACK from `slot` at `seq`.
    #[inline]
    fn pure_ack_header(
        &self,
        slot: u32,
        seq: SeqNumber,
        ack: tx::AckFields,
    ) -> sluice_wire::tcp::TcpHeader {
        let i = slot as usize;
        let ooo = &self.dp.ooo[i * self.dp.ooo_stride..(i + 1) * self.dp.ooo_stride];
        let now_ms = self.now.as_millis() as u32;
        tx::header(
            &self.dp.pre[i],
            &self.dp.proto[i],
            &self.dp.ooo_state[i],
            ooo,
            seq,
            ack,
            TcpFlags::ACK,
            now_ms,
        )
    }

    /// Bookkeeping once a segment carrying our latest ACK left: nothing is owed any more.
    #[inline]
    fn ack_sent(&mut self, slot: u32) {
        let i = slot as usize;
        self.dp.post[i].set(post_flags::ACK_PENDING, false);
        self.dp.post[i].unacked_segments = 0;
        self.dp.post[i].sack_news = 0;
        self.conns[i].timers.stop(Timer::DelayedAck);
    }

    /// Writes the next frame to send into `buf` and returns its length. Control frames
    /// (ACKs, RSTs, handshake, ARP) go first, then connections in round-robin order.
    /// `buf` must hold a frame of the MTU plus the 14-byte Ethernet header; a smaller one is
    /// refused (None) without taking anything from the queues. Every frame is one segment
    /// of at most the MSS, with its checksum complete.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.poll_frame(now, buf, 0, TxChecksum::Full)
            .map(|t| t.len)
    }

    /// Like [`Stack::poll_transmit`], for a device with segmentation and checksum offload:
    /// a data segment may carry up to `Config::tso_max_payload` bytes (as much as `buf` holds),
    /// to be cut into MSS-sized segments as [`Transmit::gso_size`] says, and its checksum is
    /// left partial if `Config::tx_checksum_offload` is set.
    pub fn poll_transmit_offload(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let csum = if self.cfg.tx_checksum_offload {
            TxChecksum::Partial
        } else {
            TxChecksum::Full
        };
        self.poll_frame(now, buf, self.cfg.tso_max_payload, csum)
    }

    /// The next frame: a control frame, else the next ready connection's segment or ACK.
    fn poll_frame(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        tso_max: u32,
        csum: TxChecksum,
    ) -> Option<Transmit> {
        self.now = now;
        if buf.len() < usize::from(self.cfg.mtu) + 14 {
            // A connection popped from the ready queue and not sent would lose its turn
            // for good: no timer re-queues a pending FIN or data with nothing in flight.
            return None;
        }
        if let Some(n) = self.out.pop_into(buf) {
            self.counters.frames_tx += 1;
            return Some(Transmit {
                len: n,
                gso_size: 0,
                csum_partial: false,
            });
        }
        if tso_max > 0 || !self.relay.next_is_large() {
            if let Some((n, gso_size)) = self.relay.pop_into(buf) {
                // Spliced frames were received before anything the connections send now.
                self.counters.frames_tx += 1;
                return Some(Transmit {
                    len: n,
                    gso_size,
                    csum_partial: gso_size != 0,
                });
            }
        }
        if !self.splice_pending.is_empty() {
            // A pending splice's relayed bytes were acknowledged as its connections sent.
            self.progress_splices();
        }
        if self.teardown.has_ready() {
            // The teardown stage's data and FINs go before the connections' (they are
            // what is left of connections the applications closed).
            if let Some(t) = self.teardown_transmit(buf) {
                return Some(t);
            }
        }
        let now_ns = now.as_nanos();
        if !self.dp.wheel.is_empty() {
            // Rate-limited connections whose time came join the round-robin.
            self.dp.wheel.advance(now_ns, &mut self.dp.ready);
        }
        // Room for the largest header (TCP options included) ahead of a large payload.
        let max_payload =
            tso_max.min(buf.len().saturating_sub(crate::frame::CONTROL_FRAME_MAX) as u32);
        while let Some(slot) = self.dp.ready.pop() {
            let i = slot as usize;
            if !self.dp.pre[i].active {
                continue;
            }
            // The one branch an unlimited connection pays for rate enforcement.
            if self.dp.sched[i].rate_bps != 0 && self.pace(slot, now_ns) {
                continue;
            }
            if let Some(t) = self.transmit(slot, buf, max_payload, csum) {
                self.counters.frames_tx += 1;
                // More may follow; the next pop finds out. Round-robin keeps flows fair; a
                // rate-limited connection the segment made ineligible waits in the wheel.
                if self.dp.sched[i].rate_bps == 0 || !self.pace(slot, now_ns) {
                    self.dp.ready.push(slot);
                }
                return Some(t);
            }
        }
        None
    }

    /// Carousel admission for a rate-limited connection: if its send time has not come,
    /// puts it in the timing wheel's slot for that time (at most once) and returns true.
    /// Pure ACKs normally leave on the control queue and are not paced; only one owed
    /// because that queue was full waits here with the connection's data.
    #[inline]
    fn pace(&mut self, slot: u32, now_ns: u64) -> bool {
        let due = self.dp.sched[slot as usize].next_tx_ns;
        if self.dp.wheel.eligible(due, now_ns) {
            return false;
        }
        self.dp.wheel.insert(slot, due, now_ns);
        self.counters.sched_paced += 1;
        true
    }

    /// The TX workflow for one connection: a data or FIN segment if allowed, else an owed ACK.
    /// A data segment carries up to `max_payload` bytes (at least the MSS) with a GSO size
    /// when that is more than one segment.
    fn transmit(
        &mut self,
        slot: u32,
        buf: &mut [u8],
        max_payload: u32,
        csum: TxChecksum,
    ) -> Option<Transmit> {
        let i = slot as usize;
        let now_ms = self.now.as_millis() as u32;
        let now_us = self.now.as_micros() as u32;
        let route = self.route_of(slot);
        let board = &self.dp.sacked[i * self.dp.sacked_stride..(i + 1) * self.dp.sacked_stride];
        // What to send: NextSeg() in SACK recovery (RFC 6675), else from snd_nxt.
        let next = scoreboard::next_segment(
            &mut self.dp.proto[i],
            &self.dp.recovery[i],
            board,
            max_payload,
        );
        let ps = &self.dp.proto[i];
        if let Some(next) = next {
            let (mut seg, next) = match next {
                scoreboard::Next::Send(seg)
                | scoreboard::Next::Retransmit(seg)
                | scoreboard::Next::Probe(seg) => (seg, next),
            };
            let ooo = &self.dp.ooo[i * self.dp.ooo_stride..(i + 1) * self.dp.ooo_stride];
            let ack = tx::AckFields::current(ps);
            let mut header = tx::header(
                &self.dp.pre[i],
                ps,
                &self.dp.ooo_state[i],
                ooo,
                seg.seq,
                ack,
                TcpFlags::ACK,
                now_ms,
            );
            // RFC 9293 3.7.1 (MUST-16) and RFC 6691: the effective send MSS is net of TCP
            // options. ps.mss already excludes the timestamp option; SACK blocks come out of
            // the payload, or the segment would exceed the MTU and the peer's MSS.
            let ts_len = if header.options.timestamp.is_some() {
                12
            } else {
                0
            };
            let sack_len = header.options.emitted_len().saturating_sub(ts_len) as u32;
            let room = (ps.mss as u32).saturating_sub(sack_len).max(1);
            let mut gso_size = 0;
            if seg.len > room {
                // No more than `buf` holds behind the largest header, and one segment of
                // `room` bytes without offload.
                seg.len = seg.len.min(max_payload.max(room));
                if seg.len > room {
                    // One large segment, cut by the device into segments of `room` bytes:
                    // whole ones, as next_segment decided for the MSS.
                    let unsent = ps.tx_end.diff(seg.seq).max(0) as u32;
                    let exempt = seg.fin || ps.has(flags::FORCE_SEND);
                    seg.len = tx::whole_segments(ps, seg.len, unsent, room, exempt);
                }
                if seg.len > room {
                    gso_size = room as u16;
                }
                let end_of_queue = seg.seq + seg.len == ps.tx_end;
                seg.fin &= end_of_queue;
                seg.push &= end_of_queue;
            }
            if seg.push && seg.len > 0 {
                header.flags |= TcpFlags::PSH;
            }
            if seg.fin {
                header.flags |= TcpFlags::FIN;
            }
            // RFC 3168 6.1.2 and 6.1.5: new data is ECT(0) and carries a pending CWR;
            // retransmissions are neither.
            let resend = seg.seq.seq_lt(ps.snd_max);
            let codepoint = ecn::data_codepoint(ps, resend || seg.len == 0);
            if seg.len > 0 {
                header.flags |= ecn::cwr_flag(ps, resend);
            }
            let ring = &self.bufs[i].as_ref()?.tx;
            self.ip_ident = self.ip_ident.wrapping_add(1);
            let n = emit_segment_ecn(
                buf,
                &route,
                self.ip_ident,
                &header,
                seg.len as usize,
                csum,
                codepoint,
                |payload| ring.read(seg.seq, payload),
            )?;
            let segments = if gso_size != 0 {
                // The device sends one IPv4 ident per segment after this one.
                let segments = seg.len.div_ceil(room);
                self.ip_ident = self.ip_ident.wrapping_add(segments as u16 - 1);
                self.counters.large_segments_tx += 1;
                segments
            } else {
                1
            };
            if self.dp.sched[i].rate_bps != 0 {
                // Charge what reaches the wire: each segment the device cuts carries the
                // headers again.
                let headers = (n as u64).saturating_sub(u64::from(seg.len));
                let wire = u64::from(seg.len) + u64::from(segments) * headers;
                let credit = self.dp.wheel.granularity_ns();
                scheduler::charge(&mut self.dp.sched[i], wire, self.now.as_nanos(), credit);
            }
            let retransmission = match next {
                scoreboard::Next::Retransmit(_) => {
                    scoreboard::commit_retransmission(
                        &mut self.dp.proto[i],
                        &mut self.dp.recovery[i],
                        &seg,
                    );
                    self.counters.sack_retransmits += u64::from(segments);
                    true
                }
                scoreboard::Next::Send(_) => tx::commit(&mut self.dp.proto[i], &seg, now_us),
                scoreboard::Next::Probe(_) => {
                    let rxt = tlp::commit_probe(&mut self.dp.proto[i], &seg, now_us);
                    self.tlp_probe_sent(slot, rxt);
                    rxt
                }
            };
            let k = self.dp.xmit_stride;
            if k > 0 && !retransmission {
                // RACK's transmit time of new data (RFC 8985 6.1).
                let end = seg.seq + seg.len + seg.fin as u32;
                let marks = &mut self.dp.xmit[i * k..(i + 1) * k];
                rack::on_sent(&mut self.dp.rack[i], marks, seg.seq, end, now_us);
            }
            if header.flags.contains(TcpFlags::CWR) {
                ecn::cwr_sent(&mut self.dp.proto[i]);
                self.counters.ecn_cwr_sent += 1;
            }
            if retransmission {
                self.counters.retransmitted_bytes += seg.len as u64;
            }
            self.ack_sent(slot);
            if !self.conns[i].timers.is_set(Timer::Rto) {
                self.arm_timer(slot, Timer::Rto, self.now + self.conns[i].rto);
            }
            if self.cfg.rack_tlp && matches!(next, scoreboard::Next::Send(_)) && !retransmission {
                // RFC 8985 7.2: new data sent; the probe timeout starts over.
                self.tlp_arm(slot);
            }
            let c = &mut self.conns[i];
            if c.stalled_since == Instant::MAX {
                c.stalled_since = self.now;
            }
            return Some(Transmit {
                len: n,
                gso_size,
                csum_partial: csum == TxChecksum::Partial,
            });
        }
        // Nothing may be sent. With data waiting and nothing in flight, no ACK will wake us:
        // the persist timer probes a zero window (RFC 9293 3.8.6.1, MUST-35) or, for a
        // small window held back by silly-window avoidance, is the override timeout
        // (RFC 9293 3.8.6.2.1, MUST-38).
        let ps = &self.dp.proto[i];
        if ps.tx_end.seq_gt(ps.snd_nxt) && ps.in_flight() == 0 {
            let c = &mut self.conns[i];
            if !c.timers.is_set(Timer::Persist) {
                c.timers.set(Timer::Persist, self.now + c.rto);
                c.persist_interval = c.rto;
                self.timer_queue.arm(slot, self.now + c.rto);
            }
        }
        if self.dp.post[i].has(post_flags::ACK_PENDING) {
            let header = self.pure_ack_header(slot, ps.snd_nxt, tx::AckFields::current(ps));
            self.ip_ident = self.ip_ident.wrapping_add(1);
            let n = emit_segment(
                buf,
                &route,
                self.ip_ident,
                &header,
                0,
                TxChecksum::Full,
                |_| {},
            )?;
            self.ack_sent(slot);
            return Some(Transmit {
                len: n,
                gso_size: 0,
                csum_partial: false,
            });
        }
        None
    }
}

/// The RTO from the post-processor's estimate, or the initial RTO before any sample.
#[inline]
pub(crate) fn rto_of(
    post: &super::state::PostState,
    initial: std::time::Duration,
    bounds_us: (u32, u32),
) -> std::time::Duration {
    match post.rto_us(bounds_us) {
        0 => initial,
        rto => std::time::Duration::from_micros(rto.into()),
    }
}
