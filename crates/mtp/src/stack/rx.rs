//! Receiving: data packets into reassembly (each acknowledged at once, its path feedback
//! echoed, a trimmed one NACKed), ACKs into the sender's message table and the windows.

use std::net::{Ipv4Addr, SocketAddrV4};

use super::api::{Event, Message};
use super::config::{Nanos, MAX_FEEDBACK_CAP};
use super::MtpStack;
use crate::msg::{MsgKey, Refusal, Shape, SACK_GAP};
use crate::wire::{Feedback, FeedbackKind, MtpError, MtpFrameRepr, MtpRepr, PacketRun, PathletTc};
use sluice_wire::WireError;

const NO_FEEDBACK: Feedback = Feedback {
    at: PathletTc { pathlet: 0, tc: 0 },
    kind: FeedbackKind::Unknown(0),
    value: 0,
};

/// An ACK waiting to be sent (fixed size: nothing allocated per packet).
#[derive(Clone, Copy, Debug)]
pub(super) struct PendingAck {
    pub(super) dst: Ipv4Addr,
    pub(super) src_port: u16,
    pub(super) dst_port: u16,
    pub(super) msg_id: u32,
    pub(super) priority: u8,
    pub(super) tc: u8,
    /// The first run names the packet acknowledged; the second the cumulative prefix.
    pub(super) sack: [PacketRun; 2],
    pub(super) n_sack: usize,
    pub(super) nack: Option<PacketRun>,
    pub(super) feedback: [Feedback; MAX_FEEDBACK_CAP],
    pub(super) n_feedback: usize,
}

fn run(msg_id: u32, first: u16, count: u16) -> PacketRun {
    PacketRun {
        msg_id,
        first,
        count,
    }
}

impl MtpStack {
    /// Takes a frame the classifier gave it (IPv4 protocol 253 or UDP port 9919).
    pub fn handle_frame(&mut self, now: Nanos, frame: &[u8]) {
        self.tx_blocked = false;
        self.counters.frames_in += 1;
        let (f, payload) = match MtpFrameRepr::parse(frame, true) {
            Ok(v) => v,
            Err(MtpError::Checksum | MtpError::Encapsulation(WireError::Checksum)) => {
                self.counters.bad_checksum += 1;
                return;
            }
            Err(_) => {
                self.counters.malformed += 1;
                return;
            }
        };
        if f.ip.dst != self.cfg.ip {
            self.counters.not_for_us += 1;
            return;
        }
        if f.mtp.is_ack() {
            self.on_ack(now, f.ip.src, &f.mtp);
        }
        if f.mtp.is_data() {
            self.on_data(f.ip.src, &f.mtp, payload);
        }
    }

    fn on_data(&mut self, src: Ipv4Addr, h: &MtpRepr<'_>, payload: &[u8]) {
        self.counters.data_received += 1;
        let Some(&ep) = self.ports.get(&h.dst_port) else {
            self.counters.unknown_port += 1;
            return;
        };
        let mut ack = PendingAck {
            dst: src,
            src_port: h.dst_port,
            dst_port: h.src_port,
            msg_id: h.msg_id,
            priority: h.priority,
            tc: h.tc,
            sack: [run(h.msg_id, h.pkt_num, 1); 2],
            n_sack: 1,
            nack: None,
            feedback: [NO_FEEDBACK; MAX_FEEDBACK_CAP],
            n_feedback: 0,
        };
        if h.feedback.len() > self.cfg.max_feedback {
            self.counters.feedback_truncated += 1;
        }
        for (slot, fb) in ack
            .feedback
            .iter_mut()
            .zip(h.feedback.iter().take(self.cfg.max_feedback))
        {
            *slot = fb;
            ack.n_feedback += 1;
        }
        let key = MsgKey {
            src,
            src_port: h.src_port,
            msg_id: h.msg_id,
        };
        if h.is_trimmed() {
            self.counters.trimmed_received += 1;
            self.counters.nacks_sent += 1;
            ack.nack = Some(run(h.msg_id, h.pkt_num, 1));
            ack.n_sack = 0;
            if let Some(cum) = self.rx.get(&key).map(|m| m.cum).filter(|&c| c > 0) {
                ack.sack[0] = run(h.msg_id, 0, cum);
                ack.n_sack = 1;
            }
            self.push_ack(ack);
            return;
        }
        if let Some(pkts) = self.rx.completed(&key) {
            self.counters.duplicates += 1;
            ack.sack[1] = run(h.msg_id, 0, pkts);
            ack.n_sack = 2;
            self.push_ack(ack);
            return;
        }
        let shape = Shape {
            dst_port: h.dst_port,
            msg_len: h.msg_len,
            msg_pkts: h.msg_pkts,
            priority: h.priority,
            tc: h.tc,
        };
        let queue_full = self
            .endpoints
            .get(&ep)
            .is_none_or(|e| e.queue.len() >= self.cfg.endpoint_queue);
        let (m, evicted) = match self.rx.admit(key, shape) {
            Ok(v) => v,
            Err(Refusal::Conflict) => {
                self.counters.msg_id_conflicts += 1;
                return;
            }
            Err(Refusal::TooLong) => {
                self.counters.too_long += 1;
                return;
            }
            Err(Refusal::Shape) => {
                self.counters.malformed += 1;
                return;
            }
        };
        self.counters.reassembly_evictions += evicted;
        if m.has(h.pkt_num) {
            self.counters.duplicates += 1;
        } else if m.completes_with(h.pkt_num) && queue_full {
            // Un-acknowledged, so the sender retransmits: nothing acknowledged is lost.
            self.counters.endpoint_queue_full += 1;
            return;
        } else {
            m.store(h.pkt_num, h.pkt_offset as usize, payload);
        }
        let (cum, complete) = (m.cum, m.complete());
        // The prefix run repeats the packet's own when it is the first (a one-packet
        // message's only): 8 bytes an ACK saved, a tenth of the ACK of a tiny RPC.
        if cum > 0 && !(h.pkt_num == 0 && cum == 1) {
            ack.sack[1] = run(h.msg_id, 0, cum);
            ack.n_sack = 2;
        }
        if complete {
            if let Some(m) = self.rx.finish(&key) {
                let msg = Message {
                    src: SocketAddrV4::new(src, h.src_port),
                    msg_id: h.msg_id,
                    priority: m.shape.priority,
                    tc: m.shape.tc,
                    data: m.data,
                };
                if let Some(e) = self.endpoints.get_mut(&ep) {
                    e.queue.push_back(msg);
                    self.counters.messages_delivered += 1;
                    self.push_event(Event::Readable { ep });
                }
            }
        }
        self.push_ack(ack);
    }

    fn push_ack(&mut self, ack: PendingAck) {
        if self.acks.len() >= self.cfg.ack_queue {
            self.counters.ack_queue_full += 1;
            return;
        }
        self.acks.push_back(ack);
    }

    fn on_ack(&mut self, now: Nanos, src: Ipv4Addr, h: &MtpRepr<'_>) {
        self.counters.acks_received += 1;
        let max = self.cfg.max_sack_runs;
        if h.sack.len() > max || h.nack.len() > max || h.ack_feedback.len() > self.cfg.max_feedback
        {
            self.counters.feedback_truncated += 1;
        }
        // The packet the ACK is for: its length weighs the feedback, its RTT is sampled.
        let mut subject: Option<(u32, u16, u64)> = None;
        for r in h.nack.iter().take(max) {
            self.counters.nacks_received += 1;
            let Some(msg) = self.out.get_mut(&r.msg_id) else {
                self.counters.stale_acks += 1;
                continue;
            };
            if *msg.dst.ip() != src || msg.dst.port() != h.src_port || msg.src_port != h.dst_port {
                self.counters.stale_acks += 1;
                continue;
            }
            let end = (u32::from(r.first) + u32::from(r.count.max(1))).min(u32::from(msg.pkts()));
            for n in u32::from(r.first)..end {
                let n = n as u16;
                let (_, len) = msg.span(n);
                subject.get_or_insert((r.msg_id, n, len as u64));
                let st = &mut msg.pkt[usize::from(n)];
                if st.inflight {
                    st.inflight = false;
                    if let Some(d) = self.dests.get_mut(&src) {
                        msg.release_packet(&mut self.cc, &mut d.paths, len as u64);
                    }
                }
                if msg.queue_retx(n) {
                    self.counters.retx_nack += 1;
                }
            }
            let id = msg.id;
            let (p, rem, w) = (msg.priority, msg.remaining(), msg.wants_to_send());
            self.sched.update(id, p, rem, w);
        }
        let mut progress = false;
        // For RACK: the latest send time acknowledged and the path it took, when known (the
        // feedback below may reveal it; a guess would let one path's ACKs judge another's).
        let mut newest_sent: Option<Nanos> = None;
        let mut acked_path = None;
        let mut acked_class = 0;
        // A message this ACK completed: its later runs are not stale.
        let mut finished = None;
        for (i, r) in h.sack.iter().take(max).enumerate() {
            let Some(msg) = self.out.get_mut(&r.msg_id) else {
                if finished != Some(r.msg_id) {
                    self.counters.stale_acks += 1;
                }
                continue;
            };
            if *msg.dst.ip() != src || msg.dst.port() != h.src_port || msg.src_port != h.dst_port {
                self.counters.stale_acks += 1;
                continue;
            }
            let Some(d) = self.dests.get_mut(&src) else {
                continue;
            };
            let first = u32::from(r.first).max(u32::from(msg.acked_prefix));
            let end = (u32::from(r.first) + u32::from(r.count.max(1))).min(u32::from(msg.next_new));
            let mut highest = None;
            for n in first..end {
                let n = n as u16;
                let (_, len) = msg.span(n);
                let st = &mut msg.pkt[usize::from(n)];
                if !st.sent || st.acked {
                    continue;
                }
                // Feedback counts once per packet: a repeated ACK does not weigh it again.
                if i == 0 && n == r.first {
                    subject.get_or_insert((r.msg_id, n, len as u64));
                }
                st.acked = true;
                msg.acked += 1;
                msg.timeouts = 0;
                progress = true;
                highest = Some(n);
                if i == 0 && n == r.first && !st.retransmitted {
                    d.rtt.sample(now.saturating_sub(st.sent_at));
                }
                // The ACK of a retransmitted packet may be for the original copy: taking
                // the retransmission's time would declare lost everything sent between the
                // two (issue 17: a cascade of spurious retransmissions under reordering).
                let delivered = if st.resent_by_timer {
                    st.sent_at
                } else {
                    st.first_sent_at
                };
                newest_sent = newest_sent.max(Some(delivered));
                acked_path = match msg.learned {
                    Some(p) => Some(Some(p)),
                    None if d.paths.expected.is_none() => Some(msg.charge),
                    None => None,
                };
                acked_class = usize::from(self.cfg.data_dscp(msg.data.len() as u64) & 7);
                if st.inflight {
                    st.inflight = false;
                    msg.release_packet(&mut self.cc, &mut d.paths, len as u64);
                }
            }
            while usize::from(msg.acked_prefix) < msg.pkt.len()
                && msg.pkt[usize::from(msg.acked_prefix)].acked
            {
                msg.acked_prefix += 1;
            }
            // SACK gap: first transmissions SACK_GAP below an acknowledged packet are lost.
            if let Some(top) = highest {
                let until = top.saturating_sub(SACK_GAP - 1).min(msg.next_new);
                for q in msg.lost_scan.max(msg.acked_prefix)..until {
                    let (_, len) = msg.span(q);
                    let st = &mut msg.pkt[usize::from(q)];
                    if st.acked || st.retransmitted || !st.inflight {
                        continue;
                    }
                    st.inflight = false;
                    msg.release_packet(&mut self.cc, &mut d.paths, len as u64);
                    if msg.queue_retx(q) {
                        self.counters.retx_sack_gap += 1;
                    }
                }
                msg.lost_scan = msg.lost_scan.max(until);
            }
            let id = msg.id;
            if msg.done() {
                let ep = msg.ep;
                self.remove_message(id);
                finished = Some(id);
                self.counters.messages_acked += 1;
                self.push_event(super::Event::Delivered {
                    ep,
                    msg_id: id,
                    at: now,
                });
            } else {
                let (p, rem, w) = (msg.priority, msg.remaining(), msg.wants_to_send());
                self.sched.update(id, p, rem, w);
            }
        }
        if let Some(d) = self.dests.get_mut(&src) {
            if let Some((msg_id, _, bytes)) = subject {
                let srtt = d.rtt.srtt_or_rto();
                let fb = h.ack_feedback.iter().take(self.cfg.max_feedback);
                let (fits, actual) = self.cc.on_feedback(now, &mut d.paths, fb, bytes, srtt);
                if !fits {
                    self.counters.pathlets_full += 1;
                }
                // The message's other packets in flight took the same path: move them.
                if let (Some(a), Some(msg)) = (actual, self.out.get_mut(&msg_id)) {
                    msg.learn(&mut self.cc, a);
                }
                if actual.is_some() {
                    acked_path = Some(actual);
                }
            }
            if let (Some(at), Some(path)) = (newest_sent, acked_path) {
                d.log[acked_class].acked(path, at);
            }
            if progress {
                self.rack_detect(src);
            }
        }
        if let Some(d) = self.dests.get_mut(&src) {
            if progress {
                d.deadline = (!d.msgs.is_empty()).then(|| now + d.rtt.rto());
                self.arm(src);
            }
        }
    }
}
