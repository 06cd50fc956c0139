//! The TX workflow (scheduler → segment generation) behind `poll_transmit`: control frames
//! first, then the ready queue serves connections round-robin; a rate-limited one is
//! admitted only at its Carousel send time and otherwise waits in the timing wheel
//! (flextoe.txt 3.4, datapath/scheduler.rs).

use sluice_wire::tcp::TcpFlags;

use super::state::{flags, post_flags, ProtoState};
use super::{ecn, rack, scheduler, scoreboard, tlp, tx};
use crate::frame::{emit_segment, emit_segment_ecn, Transmit, TxChecksum};
use crate::host::Stack;
use crate::time::Instant;
use crate::timer::Timer;
use crate::trace::record::tracepoint;

impl Stack {
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
        // What to send: NextSeg() in SACK recovery (RFC 6675), else from snd_nxt. Without
        // a pooled row (not recovering) the scratch rows are not read.
        let h = self.dp.proto[i].sack.cold_row;
        let cold = self.dp.pool.rows(h);
        let next =
            scoreboard::next_segment(&mut self.dp.proto[i], cold.rec, cold.sacked, max_payload);
        let ps = &self.dp.proto[i];
        if let Some(next) = next {
            let (mut seg, next) = match next {
                scoreboard::Next::Send(seg)
                | scoreboard::Next::Retransmit(seg)
                | scoreboard::Next::Probe(seg) => (seg, next),
            };
            let ack = tx::AckFields::current(ps);
            let mut header = tx::header(
                &self.dp.pre[i],
                ps,
                &self.dp.pool,
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
            let b = self.bufs[i].as_ref()?;
            // Header-only TX (flexins.txt 3.2): the payload comes from the caller's source
            // straight into the frame, behind the headers just written; else from the ring.
            let source = b
                .ext
                .as_ref()
                .and_then(|e| Some((e.source.as_deref()?, e.head_pos)));
            let mut gathered = true;
            self.ip_ident = self.ip_ident.wrapping_add(1);
            let n = emit_segment_ecn(
                buf,
                &route,
                self.ip_ident,
                &header,
                seg.len as usize,
                csum,
                codepoint,
                |payload| match source {
                    Some((src, head_pos)) => {
                        let pos = head_pos + seg.seq.diff(b.tx_head).max(0) as u64;
                        gathered = payload.is_empty() || src.gather(pos, payload);
                    }
                    None => b.tx.read(seg.seq, payload),
                },
            )?;
            if !gathered {
                // The caller's buffer is gone: nothing of it goes out; the connection is
                // reset (its application sees the error), no other is touched.
                self.source_failed(slot);
                return None;
            }
            self.tx_touch.payload += u64::from(seg.len);
            if csum == TxChecksum::Full {
                self.tx_touch.checksum += u64::from(seg.len);
            }
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
                    let h = self.dp.proto[i].sack.cold_row;
                    let rec = self.dp.pool.rows(h).rec;
                    scoreboard::commit_retransmission(&mut self.dp.proto[i], rec, &seg);
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
                tracepoint! { self, Some(slot), Retransmit { kind: retransmit_kind(&next), seq: seg.seq.0, len: seg.len } }
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
        if self.dp.proto[i].tx_end.seq_gt(self.dp.proto[i].snd_nxt) {
            tracepoint! { self, Some(slot), WindowStall { kind: stall_kind(&self.dp.proto[i]), snd_wnd: self.dp.proto[i].snd_wnd, cwnd: self.dp.proto[i].cwnd } }
        }
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

/// What sent a segment again, for the retransmit tracepoint.
fn retransmit_kind(next: &scoreboard::Next) -> &'static str {
    match next {
        scoreboard::Next::Retransmit(_) => "sack",
        scoreboard::Next::Probe(_) => "probe",
        scoreboard::Next::Send(_) => "go_back_n",
    }
}

/// Why data waiting could not be sent: the peer's window closed, the congestion window
/// full, the peer's window full, or silly-window avoidance / Nagle holding a small segment.
fn stall_kind(ps: &ProtoState) -> &'static str {
    let mss = u32::from(ps.mss);
    let usable_rwnd = (ps.snd_una + ps.snd_wnd).diff(ps.snd_nxt).max(0) as u32;
    if ps.snd_wnd == 0 {
        "zero_window"
    } else if ps.in_flight().saturating_add(mss) > ps.cwnd {
        "cwnd_limited"
    } else if usable_rwnd < mss {
        "rwnd_limited"
    } else {
        "sws"
    }
}
