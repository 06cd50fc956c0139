//! The RX workflow's driver: frames are classified, the fast path runs through the
//! data-path stages a batch at a time, and the control plane acts on each stage outcome;
//! segments the pre-processor did not take are dispatched by connection state, and what
//! the control plane hands back (a [`Handback`]) runs through the stages from here. The
//! data-path never calls the control plane, and the control plane never re-enters the
//! pipeline from inside a handler.

use sluice_wire::tcp::{TcpFlags, TcpHeader};

use super::state::{ConnError, TcpState};
use crate::datapath::classify::TcpInput;
use crate::datapath::classify::{classify, Checks, Classified, DropReason};
use crate::datapath::pipeline::{rto_of, PostRules, StageOutcome};
use crate::datapath::post::PostOutcome;
use crate::datapath::summary::Actions;
use crate::datapath::summary::HeaderSummary;
use crate::datapath::BATCH;
use crate::events::bits;
use crate::frame::{emit_segment, Route, TxChecksum};
use crate::host::Stack;
use crate::table::FourTuple;
use crate::time::Instant;
use crate::timer::Timer;
use crate::trace::record::tracepoint;

impl Stack {
    /// Handles one received frame.
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        self.handle_frames(now, &[frame]);
    }

    /// Whether `frame` is a segment the data-path pipeline would take (an established
    /// connection's: ACK set, no SYN, RST or URG), judged as the pre-processor judges it,
    /// without its checksums: the engine runs the `established` hook point's modules on
    /// these before handing the frame over, so a drop there is a loss the peer repairs.
    pub fn takes_fast_path(&self, frame: &[u8]) -> bool {
        crate::datapath::classify::takes_fast_path(frame, self.cfg.ip, &self.table, &self.dp.pre)
    }

    /// Handles a batch of received frames. Established connections' common-case segments go
    /// through the data-path stages a batch at a time; anything else goes to the control
    /// plane in arrival order (the batch collected so far is finished first, so per-connection
    /// order is kept).
    pub fn handle_frames(&mut self, now: Instant, frames: &[&[u8]]) {
        self.receive(now, frames, self.cfg.verify_checksums);
    }

    /// [`Stack::handle_frames`] for frames whose TCP checksum needs no verification: the
    /// device verified it, or a sender on this host left it to offload (Linux's
    /// CHECKSUM_UNNECESSARY and CHECKSUM_PARTIAL: the bytes never crossed a wire). The IPv4
    /// header checksum is still verified (RFC 1122 3.2.1.2), as Linux does.
    pub fn handle_frames_checksum_ok(&mut self, now: Instant, frames: &[&[u8]]) {
        self.receive(now, frames, false);
    }

    /// The RX workflow: classify each frame, batch the fast path, hand the rest to the
    /// control plane, and run what it hands back through the stages.
    fn receive(&mut self, now: Instant, frames: &[&[u8]], verify_tcp_checksums: bool) {
        self.now = now;
        for chunk in frames.chunks(BATCH) {
            let mut n = 0;
            for (i, frame) in chunk.iter().enumerate() {
                self.counters.frames_rx += 1;
                match classify(
                    frame,
                    i as u16,
                    self.cfg.ip,
                    Checks {
                        ip: self.cfg.verify_checksums,
                        tcp: verify_tcp_checksums,
                    },
                    &self.table,
                    &self.dp.pre,
                    &mut self.dp.batch[n],
                ) {
                    Classified::FastPath => n += 1,
                    Classified::Exception(input)
                        if input.slot.is_none()
                            && self.splice.len() != 0
                            && self.splice_frame(
                                &FourTuple {
                                    remote_ip: input.ip.src,
                                    remote_port: input.tcp.src_port,
                                    local_port: input.tcp.dst_port,
                                },
                                frame,
                                !verify_tcp_checksums,
                            ) =>
                    {
                        // A spliced pair's frame, rewritten for the other peer: it touches
                        // no connection, so the batch collected so far goes on.
                        self.counters.exceptions += 1;
                    }
                    Classified::Exception(input) => {
                        self.run_stages(n, chunk);
                        n = 0;
                        self.counters.exceptions += 1;
                        if let Handback::Segment(mut summary) = self.handle_exception(&input) {
                            summary.log = self.dp.pre[summary.slot as usize].log;
                            self.dp.batch[0] = summary;
                            self.run_stages(1, &[input.payload]);
                        }
                    }
                    Classified::Arp(arp) => self.handle_arp(&arp),
                    Classified::Drop(reason) => {
                        tracepoint! { self, None, Drop { reason: reason.counter() } }
                        match reason {
                            DropReason::Malformed => self.counters.malformed += 1,
                            DropReason::Checksum => self.counters.bad_checksum += 1,
                            DropReason::NotForUs => self.counters.not_for_us += 1,
                            DropReason::Fragment => self.counters.fragments += 1,
                        }
                    }
                }
            }
            self.run_stages(n, chunk);
        }
        if !self.splice_pending.is_empty() {
            // What arrived may have drained a pending splice's connections.
            self.progress_splices();
        }
        self.trace_queues();
    }

    /// Runs the protocol and post stages over the first `n` summaries of the batch, and acts
    /// on each segment's outcome in order.
    fn run_stages(&mut self, n: usize, frames: &[&[u8]]) {
        if n == 0 {
            return;
        }
        tracepoint! { self, None, Queue { queue: "batch", len: n as u32, cap: BATCH as u32 } }
        self.protocol_stage(n, frames);
        // The post stage places payload in the receive rings: a ring still without storage
        // (an idle connection's) gets it here, in the control plane, from the pool.
        for s in &self.dp.batch[..n] {
            // A shared log's connection placed its payload in the log: its ring stays empty.
            if s.place_len > 0 && !s.log {
                if let Some(b) = self.bufs[s.slot as usize].as_mut() {
                    self.rx_pool.attach(&mut b.rx);
                }
            }
        }
        let rules = self.post_rules();
        for i in 0..n {
            let s = self.dp.batch[i];
            match self.post_stage(&s, frames, rules) {
                StageOutcome::Exception => self.datapath_exception(&s),
                StageOutcome::Posted(out) => self.on_posted(&s, out, rules),
            }
        }
    }

    /// The control plane's part of a segment the post stage took: congestion control, the
    /// retransmission timer, FIN state changes; then the data-path's ACK.
    #[inline]
    fn on_posted(&mut self, s: &HeaderSummary, out: PostOutcome, rules: PostRules) {
        let slot = s.slot;
        let i = slot as usize;
        if s.tx_freed > 0 {
            // All sent bytes acknowledged: the send ring's storage goes back to the pool
            // until the application writes again.
            if let Some(b) = self.bufs[i].as_mut().filter(|b| b.tx_used() == 0) {
                self.tx_pool.detach(&mut b.tx);
            }
        }
        // Congestion control: the control plane runs its policy once per RTT over the
        // counters post::process kept; a loss makes it run now (control/congestion.rs).
        if s.actions.contains(Actions::SPURIOUS_RTO) {
            self.cc_undo_timeout(slot);
            if s.has_timestamp {
                self.reinit_rto_after_spurious_timeout(slot, s.ts_ecr);
            }
        }
        if s.actions.contains(Actions::SPURIOUS_RECOVERY) {
            self.cc_undo_recovery(slot);
        }
        if out.fast_retransmit {
            self.cc_on_loss(slot);
        } else if s.tx_freed > 0 {
            self.cc_arm(slot);
        }
        let conn = &mut self.conns[i];
        conn.last_heard = self.now;
        if out.rto_stop {
            conn.timers.stop(Timer::Rto);
            conn.retries = 0;
            conn.stalled_since = Instant::MAX;
            conn.rto = rto_of(&self.dp.post[i], self.cfg.rto_initial, rules.rto_bounds);
        } else if out.rto_restart {
            conn.retries = 0;
            if s.tx_freed > 0 || s.actions.contains(Actions::FIN_ACKED) {
                // The user timeout counts from the last forward progress (RFC 9293 3.8.3
                // R2, TCP_USER_TIMEOUT semantics: how long sent data may stay
                // unacknowledged); a fast retransmit restarts the timer, not this clock.
                conn.stalled_since = self.now;
            }
            conn.rto = rto_of(&self.dp.post[i], self.cfg.rto_initial, rules.rto_bounds);
            let rto = self.now + conn.rto;
            self.arm_timer(slot, Timer::Rto, rto);
        }
        if self.cfg.rack_tlp {
            self.tlp_on_ack(s, out.rto_stop);
            if s.rack_timer_us > 0 {
                // RFC 8985 6.3: the reordering timer, for what RACK could not judge yet.
                let at = self.now + std::time::Duration::from_micros(s.rack_timer_us.into());
                self.arm_timer(slot, Timer::Reorder, at);
            } else {
                self.conns[i].timers.stop(Timer::Reorder);
            }
        }
        if s.actions.contains(Actions::FIN_ACKED) {
            self.on_fin_acked(slot);
        }
        if s.actions.contains(Actions::FIN_RECEIVED) {
            if let Some(b) = self.bufs[i].as_mut() {
                b.eof = true;
            }
            self.events.raise(slot, bits::READABLE);
            self.on_fin_received(slot);
        }
        if s.rx_advance > 0 && self.conns[i].app_closed {
            // RFC 9293 3.10.7.4 (and RFC 2525 2.17): data for a connection the application
            // has closed cannot be delivered; reset.
            self.abort_slot(slot, ConnError::Aborted);
            return;
        }
        self.acknowledge(s, out);
    }

    /// Queues a control segment; counts it if the queue is full.
    pub(super) fn push_segment(&mut self, route: &Route, header: &TcpHeader) -> bool {
        self.ip_ident = self.ip_ident.wrapping_add(1);
        let ident = self.ip_ident;
        let ok = self
            .out
            .push_with(|buf| emit_segment(buf, route, ident, header, 0, TxChecksum::Full, |_| {}));
        if !ok {
            self.counters.control_queue_full += 1;
            tracepoint! { self, None, Drop { reason: "control_queue_full" } }
        }
        ok
    }

    pub(super) fn route_of_tuple(&self, slot: u32) -> Route {
        Route {
            src_mac: self.cfg.mac,
            dst_mac: self.dp.pre[slot as usize].peer_mac,
            src_ip: self.cfg.ip,
            dst_ip: self.conns[slot as usize].tuple.remote_ip,
        }
    }

    /// A TCP segment the pre-processor did not put on the fast path.
    fn handle_exception(&mut self, input: &TcpInput<'_>) -> Handback {
        let Some(slot) = input.slot else {
            // A table miss: a connection the teardown stage took over, or none.
            if self.teardown.len() != 0 {
                let tuple = FourTuple {
                    remote_ip: input.ip.src,
                    remote_port: input.tcp.src_port,
                    local_port: input.tcp.dst_port,
                };
                if let Some(flow) = self.teardown.lookup(&tuple) {
                    return self.teardown_segment(flow, input);
                }
            }
            return self.no_connection(input);
        };
        match self.conns[slot as usize].state {
            TcpState::SynSent => {
                self.syn_sent(slot, input);
                Handback::Done
            }
            TcpState::SynReceived => self.syn_received(slot, input),
            TcpState::TimeWait => self.time_wait(slot, input),
            TcpState::Closed => {
                self.reply_rst(input);
                Handback::Done
            }
            _ => self.synchronized(slot, input),
        }
    }
}

/// The control plane's answer to an exception: a message to the driver, which runs a
/// segment handed back through the data-path stages; the control plane never re-enters
/// the pipeline itself.
#[must_use]
pub(super) enum Handback {
    /// Nothing more to do with the segment.
    Done,
    /// Run this segment (payload at offset 0 of its own frame) through the protocol and
    /// post stages: what follows the handshake in a segment that completed it, or a
    /// segment on a synchronized connection the control plane vetted.
    Segment(HeaderSummary),
}

/// The rest of a handshake-completing segment (data, FIN), if any, for the data-path.
pub(super) fn rest_of_segment(slot: u32, input: &TcpInput<'_>) -> Handback {
    if input.payload.is_empty() && !input.tcp.flags.contains(TcpFlags::FIN) {
        return Handback::Done;
    }
    Handback::Segment(summary_of(slot, input))
}

/// A header summary for a segment the control plane passes back to the data-path.
pub(super) fn summary_of(slot: u32, input: &TcpInput<'_>) -> HeaderSummary {
    let t = &input.tcp;
    let (has_timestamp, ts_val, ts_ecr) = match t.options.timestamp {
        Some((v, e)) => (true, v, e),
        None => (false, 0, 0),
    };
    HeaderSummary {
        slot,
        frame: 0,
        payload_offset: 0,
        payload_len: input.payload.len() as u16,
        flags: t.flags,
        ecn_ce: input.ip.ecn == sluice_wire::ipv4::Ecn::Ce,
        seq: t.seq,
        ack: t.ack,
        window: t.window,
        has_timestamp,
        ts_val,
        ts_ecr,
        ..HeaderSummary::default()
    }
}
