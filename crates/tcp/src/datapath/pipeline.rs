//! The pipeline's receive stages on a batch: protocol → post, each post outcome reported
//! to the control plane as a [`StageOutcome`] (control/input.rs drives RX), and the ACK the
//! post-processor decided on. Pure ACKs are built in [`super::acks`], the TX workflow is in
//! [`super::transmit`].

use super::state::{flags, post_flags, sack_flags};
use super::summary::{Actions, HeaderSummary};
use super::{pool, post, protocol, rack, scoreboard};
use crate::config::AckPolicy;
use crate::events::bits;
use crate::host::Stack;
use crate::pressure::{send_limit, MemoryState};
use crate::timer::Timer;
use crate::trace::record::tracepoint;

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
    /// The protocol stage: one pass over the first `n` summaries of the batch. A segment of
    /// a connection attached to a shared log has its payload placed in the log in the same
    /// pass (shared_log/placement.rs: the tail pointer is sequence state).
    pub(crate) fn protocol_stage(&mut self, n: usize, frames: &[&[u8]]) {
        let now_us = self.now.as_micros() as u32;
        // Over the memory limit, out-of-order data may not add bytes (control/memory.rs).
        // A memory group over its own limit: the same for its connections only.
        let admit_ooo_all = self.memory.state() != MemoryState::OverLimit;
        for i in 0..n {
            let slot = self.dp.batch[i].slot as usize;
            let admit_ooo = admit_ooo_all && !self.groups.over_limit(slot as u32);
            let (ps, s) = (&self.dp.proto[slot], &self.dp.batch[i]);
            // The cold path: a connection without a row whose segment may need one.
            if ps.sack.cold_row == pool::NO_ROW
                && (pool::wants_row(ps, s) || pool::reads_recovery(ps, s))
            {
                self.cold_rows_for(slot, i);
            }
            let s = &mut self.dp.batch[i];
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
            let mut cold = self.dp.pool.rows(ps.sack.cold_row);
            let log = s.log;
            let admit_ooo = if log {
                admit_ooo && self.logs.admits(ps, cold.ooo, s, &mut self.counters)
            } else {
                admit_ooo
            };
            protocol::process(ps, &mut cold, s, now_us, admit_ooo);
            if log {
                self.logs.place(s, frames, &mut self.counters);
            }
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
                    &mut cold,
                    rk,
                    &mut self.dp.xmit[slot * k..(slot + 1) * k],
                    s,
                    now_us,
                    self.dp.post[slot].srtt_us,
                );
            }
            self.dp.after_segment(slot);
        }
    }

    /// Before the protocol stage takes summary `i` of the batch for `slot`, which holds no
    /// pooled row and may need one: a row if the segment may leave state to keep
    /// (out-of-order data or FIN, SACK blocks), or fresh scratch rows if it only reads
    /// them (a possible duplicate ACK), or when the pool is empty (counted: the segment is
    /// taken as with no free interval and a full scoreboard).
    #[cold]
    fn cold_rows_for(&mut self, slot: usize, i: usize) {
        let wants = pool::wants_row(&self.dp.proto[slot], &self.dp.batch[i]);
        if wants && self.dp.take_cold_row(slot) {
            return;
        }
        if wants {
            self.counters.cold_pool_empty += 1;
        }
        let ps = &self.dp.proto[slot];
        self.dp
            .pool
            .fresh_scratch(ps.snd_una, ps.rcv_nxt, self.dp.reordering[slot]);
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
            tracepoint! { self, Some(slot), EcnCe { seq: s.seq.0, len: s.payload_len as u32 } }
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
        if s.rack_lost > 0 {
            let ps = &self.dp.proto[i];
            tracepoint! { self, Some(slot), Loss { kind: "rack", seq: ps.snd_una.0, len: s.rack_lost } }
        }
        // Counters judge the segment by the receive state it left (`ack_rcv_nxt`), not by
        // the connection's, which later segments of the batch may have moved on.
        if s.actions.contains(Actions::ACK_NOW)
            && s.place_len == 0
            && s.payload_len > 0
            && (s.seq + s.payload_len as u32).seq_le(s.ack_rcv_nxt)
        {
            self.counters.duplicate_segments += 1;
            tracepoint! { self, Some(slot), Drop { reason: "duplicate_segments" } }
        }
        if let Some(b) = self.bufs[i].as_mut() {
            if s.place_len > 0 {
                let at = s.place_offset as usize;
                if let Some(payload) = frames
                    .get(s.frame as usize)
                    .and_then(|f| f.get(at..at + s.place_len as usize))
                {
                    // An attached connection's payload went to its shared log.
                    if !s.log {
                        b.rx.write(s.place_seq, payload);
                    }
                }
                if s.rx_advance == 0 {
                    self.counters.ooo_stored += 1;
                    let gap = s.place_seq.diff(s.ack_rcv_nxt).max(0) as u32;
                    tracepoint! { self, Some(slot), OutOfOrder { seq: s.place_seq.0, len: s.place_len as u32, gap } }
                }
            } else if s.actions.contains(Actions::OOO_OVER_LIMIT) {
                // A shared log's refusal is counted as its own (log_ooo_refused).
                self.counters.memory_ooo_dropped += u64::from(!s.log);
                let reason = if s.log {
                    "log_ooo_refused"
                } else {
                    "memory_ooo_dropped"
                };
                tracepoint! { self, Some(slot), Drop { reason } }
            } else if s.payload_len > 0 && s.actions.contains(Actions::ACK_NOW) && s.rx_advance == 0
            {
                // Out-of-order data that found no interval slot.
                if s.seq.seq_gt(s.ack_rcv_nxt) {
                    self.counters.ooo_dropped += 1;
                    tracepoint! { self, Some(slot), Drop { reason: "ooo_dropped" } }
                }
            }
            if s.rx_advance > 0 && !s.log {
                b.rx_tail += s.rx_advance;
                self.events.raise(slot, bits::READABLE);
            }
            if s.tx_freed > 0 {
                b.tx_head += s.tx_freed;
                if let Some(ext) = b.ext.as_mut() {
                    // Header-only TX: acknowledged bytes are the caller's again; it learns
                    // so from WRITABLE (Stack::tx_positions).
                    ext.head_pos += u64::from(s.tx_freed);
                    self.events.raise(slot, bits::WRITABLE);
                }
                // Only when `send` would take something: a ring above today's share waits.
                if b.want_writable
                    && b.tx_room(send_limit(
                        &self.cfg,
                        self.table.len(),
                        self.memory.state().worse(self.groups.state_of(slot)),
                    )) > 0
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
        if s.actions.contains(Actions::FAST_RETRANSMIT) && !self.dp.row_for_recovery(i) {
            // No row for the scoreboard: this recovery is RFC 6582's, go-back-N.
            self.counters.cold_pool_empty += 1;
        }
        let h = self.dp.proto[i].sack.cold_row;
        let out = post::process(
            &mut self.dp.proto[i],
            self.dp.pool.rows(h).rec,
            &mut self.dp.post[i],
            &mut self.dp.post_cold[i],
            s,
            rules.ack,
        );
        if out.fast_retransmit {
            self.counters.fast_retransmits += 1;
            let ps = &self.dp.proto[i];
            tracepoint! { self, Some(slot), Loss { kind: "fast", seq: ps.snd_una.0, len: ps.snd_max.diff(ps.snd_una).max(0) as u32 } }
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
