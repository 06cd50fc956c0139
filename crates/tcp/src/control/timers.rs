//! Timer expiry: retransmission (handshake and data, go-back-N, RFC 6298 backoff, RFC 6675
//! 5.1 scoreboard reset), user timeout, zero-window probes, delayed ACKs, TIME-WAIT and
//! orphan expiry; and the flow scheduler's timing wheel coming due.

use super::state::{ConnError, TcpState};
use crate::datapath::scoreboard;
use crate::datapath::state::{flags, post_flags, sack_flags, RtoProbe};
use crate::host::Stack;
use crate::time::Instant;
use crate::timer::Timer;

impl Stack {
    /// RFC 4015 3.2 (6): after a timeout found spurious by its timestamps, the estimator
    /// takes the late ACK's round trip (our clock less the TSval it echoes), so the next
    /// RTO covers what made this one fire early: a peer's delayed ACK (Linux holds the ACK
    /// of a lone response up to 40 ms, far past a 5 ms rto_min), a path's sudden delay.
    /// SRTT = max(SRTT, R), RTTVAR = max(RTTVAR, R/2).
    pub(super) fn reinit_rto_after_spurious_timeout(&mut self, slot: u32, ts_ecr: u32) {
        let i = slot as usize;
        let ps = &self.dp.proto[i];
        // Only after a single timeout: after backoffs, the echo may belong to an older
        // segment than the late original (the peer's TS.Recent lags under loss), and a
        // sample of the backed-off time would inflate every later RTO.
        if !ps.has(flags::TIMESTAMPS) || ts_ecr == 0 || self.conns[i].retries > 1 {
            return; // F-RTO's detection gives no sample to learn from
        }
        let now_ts = (self.now.as_millis() as u32).wrapping_add(ps.ts_offset);
        let r_ms = now_ts.wrapping_sub(ts_ecr);
        if r_ms == 0 || r_ms > 1000 {
            return; // within the timestamp clock's tick, or not a round trip's echo
        }
        let r_us = r_ms.saturating_mul(1000);
        // The RTO follows from the estimate (`PostState::rto_us`).
        let post = &mut self.dp.post[i];
        post.srtt_us = post.srtt_us.max(r_us);
        post.rttvar_us = post.rttvar_us.max(r_us / 2);
    }

    /// Runs every timer due at or before `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        if !self.dp.wheel.is_empty() {
            // Rate-limited connections whose send time came: to the ready queue, for the
            // next `poll_transmit`.
            self.dp.wheel.advance(now.as_nanos(), &mut self.dp.ready);
        }
        if self.teardown.len() != 0 {
            self.teardown_timeout();
        }
        if self.splice.len() != 0 {
            self.splice_timeout();
        }
        while let Some(slot) = self.timer_queue.pop_expired(now) {
            self.expire(slot);
            let c = &self.conns[slot as usize];
            if c.state != TcpState::Closed || c.app_owned {
                let next = c.next_deadline();
                if next != Instant::MAX {
                    self.timer_queue.arm(slot, next);
                }
            }
        }
        if !self.splice_pending.is_empty() {
            // A retransmission's ACK may come later; a timeout may have failed one.
            self.progress_splices();
        }
    }

    fn expire(&mut self, slot: u32) {
        let s = slot as usize;
        let now = self.now;
        let c = self.conns[s];
        if c.timers.is_expired(Timer::TimeWait, now) {
            self.conns[s].timers.stop(Timer::TimeWait);
            self.enter_closed(slot);
            return;
        }
        if c.timers.is_expired(Timer::DelayedAck, now) {
            self.conns[s].timers.stop(Timer::DelayedAck);
            if self.dp.pre[s].active && self.dp.post[s].unacked_segments > 0 {
                self.send_ack(slot);
            }
        }
        if c.timers.is_expired(Timer::Persist, now) {
            self.persist(slot);
        }
        if c.timers.is_expired(Timer::Congestion, now) {
            self.cc_expire(slot);
        }
        if c.timers.is_expired(Timer::Rto, now) {
            self.conns[s].timers.stop(Timer::Rto);
            match c.state {
                TcpState::SynSent | TcpState::SynReceived => self.retransmit_syn(slot),
                TcpState::Closed | TcpState::TimeWait => {}
                _ => self.retransmit_data(slot),
            }
        }
        if c.timers.is_expired(Timer::Reorder, now) {
            self.conns[s].timers.stop(Timer::Reorder);
            if c.state.is_synchronized() {
                self.rack_reo_timeout(slot);
            }
        }
        if c.timers.is_expired(Timer::Probe, now) {
            // After the RTO's check: a timeout at the same instant makes the probe moot.
            self.conns[s].timers.stop(Timer::Probe);
            if c.state.is_synchronized() {
                self.tlp_fire(slot);
            }
        }
    }

    fn backoff(&mut self, slot: u32) {
        let c = &mut self.conns[slot as usize];
        // RFC 6298 5.5: double the RTO (bounded by the maximum).
        c.rto = (c.rto * 2).min(self.cfg.rto_max);
        c.retries = c.retries.saturating_add(1);
    }

    fn retransmit_syn(&mut self, slot: u32) {
        let s = slot as usize;
        if self.conns[s].retries >= self.cfg.syn_retries {
            self.counters.user_timeouts += 1;
            if self.conns[s].listener.is_some() {
                self.free_slot(slot); // half-open passive connection: forget it
            } else {
                self.conns[s].error = Some(ConnError::TimedOut);
                self.events.raise(slot, crate::events::bits::ERROR);
                self.enter_closed(slot);
            }
            return;
        }
        self.backoff(slot);
        self.counters.timeouts += 1;
        let state = self.conns[s].state;
        if state == TcpState::SynSent
            && self
                .neighbors
                .lookup(self.conns[s].tuple.remote_ip)
                .is_none()
        {
            self.send_arp_request(self.conns[s].tuple.remote_ip);
            let c = &mut self.conns[s];
            c.timers.set(Timer::Rto, self.now + c.rto);
            return;
        }
        self.send_syn(slot, state == TcpState::SynReceived);
    }

    /// RFC 6298 5.4-5.6 with go-back-N: resend from snd_una, back off, and give up after the
    /// user timeout (RFC 9293 3.8.3 R2, MUST-20: report the failure to the application).
    fn retransmit_data(&mut self, slot: u32) {
        let s = slot as usize;
        let ps = self.dp.proto[s];
        if ps.snd_una == ps.snd_max {
            return; // nothing outstanding: the timer was stale
        }
        let now = self.now;
        let c = &mut self.conns[s];
        if c.stalled_since == Instant::MAX {
            c.stalled_since = now;
        }
        // RFC 9293 3.8.6.1 MUST-35/MUST-37: while the peer keeps a zero window and keeps
        // answering, the connection stays open however long that lasts; only a peer that
        // falls silent for the user timeout is given up on.
        let since = if ps.snd_wnd == 0 {
            c.stalled_since.max(c.last_heard)
        } else {
            c.stalled_since
        };
        if now.saturating_since(since) >= self.cfg.user_timeout {
            self.counters.user_timeouts += 1;
            self.abort_slot(slot, ConnError::TimedOut);
            return;
        }
        let cold = self.dp.pool.rows(ps.sack.cold_row);
        if c.retries == 0
            && scoreboard::una_retransmission_overtaken(
                &mut self.dp.proto[s],
                cold.rec,
                cold.sacked,
            )
        {
            // Recovery is stuck on a lost retransmission at snd_una: it goes again, and
            // recovery goes on under its window (RFC 8985 6.2), rather than collapsing the
            // window and the scoreboard for a path that is delivering.
            self.counters.rxt_lost_by_timer += 1;
            let c = &mut self.conns[s];
            c.timers.set(Timer::Rto, now + c.rto);
            self.dp.ready.push(slot);
            return;
        }
        self.counters.timeouts += 1;
        crate::trace::record::tracepoint! { self, Some(slot), Loss { kind: "rto", seq: ps.snd_una.0, len: ps.snd_max.diff(ps.snd_una).max(0) as u32 } }
        self.tlp_on_timeout(slot);
        self.rack_on_timeout(slot);
        // The timeout's probe and RecoveryPoint need a pooled row; without one (counted)
        // the timeout is not judged spurious and SACK recovery waits (go-back-N).
        let held = self.dp.take_cold_row(s);
        if !held {
            self.counters.cold_pool_empty += 1;
            self.dp.row_for_recovery(s);
        }
        if held && !ps.sack.has(sack_flags::RTO_PROBE) {
            // RFC 3522: remember what the retransmission's timestamp will be, and RFC 4015
            // 3.1: the state to restore if the timeout proves spurious. Later backoffs of
            // the same stall keep the first (the original may still be the one that lands).
            let now_ms = self.now.as_millis() as u32;
            let sack = ps.sack.has(sack_flags::ENABLED);
            let in_recovery =
                self.dp.post[s].has(post_flags::IN_RECOVERY) || scoreboard::in_recovery(&ps);
            let frto_above = (sack && !in_recovery).then(|| {
                scoreboard::highest_sacked(&ps, self.dp.sacked_of(slot)).unwrap_or(ps.snd_una)
            });
            self.dp
                .pool
                .rows(self.dp.proto[s].sack.cold_row)
                .rec
                .rto_probe = RtoProbe {
                tsval: now_ms.wrapping_add(ps.ts_offset),
                frto_above,
            };
            self.dp.proto[s].sack.set(sack_flags::RTO_PROBE, true);
            self.cc_before_rto[s] = Some(Box::new(self.cc[s].clone()));
            // The timeout's detection decides from now on (RFC 3522, 5682).
            self.cc_before_recovery[s] = None;
        }
        // The policy answers the timeout at once (RFC 5681 3.1: one segment) and programs
        // the window; the recovery a fast retransmit began is over.
        self.cc_on_timeout(slot);
        self.dp.post[s].set(post_flags::IN_RECOVERY, false);
        let ps = &mut self.dp.proto[s];
        ps.snd_nxt = ps.snd_una;
        ps.dupacks = 0;
        let h = ps.sack.cold_row;
        scoreboard::on_timeout(ps, self.dp.pool.rows(h).rec);
        ps.set(flags::RTT_TIMING, false); // Karn: no samples from retransmitted data
        self.backoff(slot);
        let c = &mut self.conns[s];
        c.timers.set(Timer::Rto, now + c.rto);
        self.dp.ready.push(slot);
    }

    /// Zero-window probe: a segment with an old sequence number that makes the peer
    /// acknowledge with its current window (RFC 9293 3.8.6.1, MUST-35; RFC 1122 4.2.2.17:
    /// the connection stays open as long as the peer answers).
    fn persist(&mut self, slot: u32) {
        let s = slot as usize;
        let ps = self.dp.proto[s];
        let c = &mut self.conns[s];
        c.timers.stop(Timer::Persist);
        if !self.dp.pre[s].active || !ps.tx_end.seq_gt(ps.snd_nxt) || ps.in_flight() != 0 {
            return;
        }
        if self.now.saturating_since(c.last_heard) >= self.cfg.user_timeout {
            // The peer stopped answering our probes: it is gone (RFC 9293 3.8.3 R2).
            self.counters.user_timeouts += 1;
            self.abort_slot(slot, ConnError::TimedOut);
            return;
        }
        if ps.snd_wnd != 0 {
            // Silly-window override: send what the small window allows.
            self.dp.proto[s].set(flags::FORCE_SEND, true);
            self.dp.ready.push(slot);
            return;
        }
        c.persist_interval = (c.persist_interval * 2).min(self.cfg.rto_max);
        c.timers.set(Timer::Persist, self.now + c.persist_interval);
        let ack = crate::datapath::tx::AckFields::current(&ps);
        if self.push_pure_ack(slot, ps.snd_una - 1u32, ack) {
            self.counters.window_probes += 1;
            crate::trace::record::tracepoint! { self, Some(slot), WindowStall { kind: "persist", snd_wnd: ps.snd_wnd, cwnd: ps.cwnd } }
        }
    }
}
