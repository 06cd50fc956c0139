//! Transmitting: ACKs first, then the first data packet in scheduling order whose path
//! has room.

use super::config::{Encapsulation, Nanos};
use super::rack::RACK_LOG_CAP;
use super::MtpStack;
use crate::msg::rack::Sent;
use crate::wire::{Encap, List, MtpFrameRepr, MtpRepr, FLAG_ACK, FLAG_DATA};

fn frame_repr<'a>(
    cfg: &super::StackConfig,
    dst: std::net::Ipv4Addr,
    mac: sluice_wire::EthernetAddress,
    entropy: u32,
    mtp: MtpRepr<'a>,
) -> MtpFrameRepr<'a> {
    let encap = match cfg.encap {
        Encapsulation::Ip => Encap::Ip,
        Encapsulation::Udp => Encap::Udp {
            // Flow entropy for ECMP: one source port per message.
            src_port: 49152 | (entropy.wrapping_mul(0x9e37_79b1) >> 18) as u16,
        },
    };
    MtpFrameRepr::new((cfg.mac, cfg.ip), (mac, dst), encap, mtp)
}

impl MtpStack {
    /// Writes the next frame to send into `buf` (at least MTU + 14 bytes); returns its length.
    pub fn poll_transmit(&mut self, now: Nanos, buf: &mut [u8]) -> Option<usize> {
        // Its frames are untagged Ethernet: the MTU and a 14-byte header at most.
        if buf.len() < self.cfg.mtu + 14 {
            return None;
        }
        while let Some(ack) = self.acks.pop_front() {
            let Some(&mac) = self.neighbors.get(&ack.dst) else {
                self.counters.no_neighbor += 1;
                continue;
            };
            let mtp = MtpRepr {
                src_port: ack.src_port,
                dst_port: ack.dst_port,
                flags: FLAG_ACK,
                priority: ack.priority,
                tc: ack.tc,
                msg_id: ack.msg_id,
                ack_feedback: List::Items(&ack.feedback[..ack.n_feedback]),
                sack: List::Items(&ack.sack[..ack.n_sack]),
                nack: List::Items(ack.nack.as_slice()),
                ..MtpRepr::default()
            };
            let mut f = frame_repr(&self.cfg, ack.dst, mac, ack.msg_id, mtp);
            f.ip.dscp = self.cfg.ack_dscp();
            if let Ok(n) = f.emit(buf, &[]) {
                self.line_sent(now, n);
                self.counters.acks_sent += 1;
                self.counters.frames_out += 1;
                return Some(n);
            }
            self.counters.malformed += 1;
        }
        self.poll_data(now, buf)
    }

    fn poll_data(&mut self, now: Nanos, buf: &mut [u8]) -> Option<usize> {
        if self.tx_blocked || !self.line_ready(now) {
            return None;
        }
        let aging = self.cfg.srpt_aging;
        let aged = aging > 0 && self.since_aged.saturating_add(1) >= aging;
        let mut scan = std::mem::take(&mut self.scan);
        let mut sent = None;
        // The oldest message's turn first, when it is due; SRPT when it cannot send.
        for oldest in [true, false] {
            if oldest && !aged {
                continue;
            }
            scan.clear();
            if oldest {
                scan.extend(self.sched.oldest(self.cfg.sched_scan));
            } else {
                scan.extend(self.sched.first(self.cfg.sched_scan));
            }
            if let Some(n) = scan.iter().find_map(|&id| self.try_send(now, id, buf)) {
                self.since_aged = if oldest {
                    0
                } else {
                    self.since_aged.saturating_add(1)
                };
                sent = Some(n);
                break;
            }
        }
        self.scan = scan;
        self.tx_blocked = sent.is_none();
        sent
    }

    fn try_send(&mut self, now: Nanos, id: u32, buf: &mut [u8]) -> Option<usize> {
        let msg = self.out.get_mut(&id)?;
        let ip = *msg.dst.ip();
        let Some(&mac) = self.neighbors.get(&ip) else {
            self.counters.no_neighbor += 1;
            return None;
        };
        // Retransmissions of packets acknowledged meanwhile are skipped.
        while let Some(&n) = msg.retx.front() {
            if msg.pkt[usize::from(n)].acked {
                msg.retx.pop_front();
                msg.pkt[usize::from(n)].queued = false;
            } else {
                break;
            }
        }
        let n = msg.peek()?;
        let (off, len) = msg.span(n);
        let dest = self.dests.get_mut(&ip)?;
        if msg.route.is_none() {
            let r = self.cc.route(&dest.paths, len as u64);
            if !r.exclude.is_empty() {
                self.counters.excluded_messages += 1;
            }
            msg.route = Some(r);
        }
        let route = msg.route.as_ref()?;
        let path = msg.expected_path(&dest.paths);
        if !self.cc.has_room(path, &dest.paths, len as u64) {
            return None;
        }
        let mtp = MtpRepr {
            src_port: msg.src_port,
            dst_port: msg.dst.port(),
            flags: FLAG_DATA,
            priority: msg.priority,
            tc: msg.tc,
            msg_id: msg.id,
            msg_len: msg.data.len() as u32,
            msg_pkts: msg.pkts(),
            pkt_num: n,
            pkt_offset: off as u32,
            pkt_len: len as u16,
            exclude: List::Items(&route.exclude),
            feedback_slots: self.cfg.feedback_slots,
            ..MtpRepr::default()
        };
        let mut f = frame_repr(&self.cfg, ip, mac, msg.id, mtp);
        f.ip.dscp = self.cfg.data_dscp(msg.data.len() as u64);
        let size = f.emit(buf, &msg.data[off..off + len]).ok()?;
        let retx = msg.retx.front() == Some(&n);
        if retx {
            msg.retx.pop_front();
        } else {
            msg.next_new += 1;
        }
        msg.charge_packet(&mut self.cc, &mut dest.paths, len as u64);
        let sent = Sent {
            at: now,
            msg: id,
            pkt: n,
            path: msg.charge,
        };
        let class = usize::from(self.cfg.data_dscp(msg.data.len() as u64) & 7);
        if !dest.log[class].record(sent, RACK_LOG_CAP) {
            self.counters.rack_log_full += 1;
        }
        let st = &mut msg.pkt[usize::from(n)];
        st.queued = false;
        st.retransmitted |= st.sent;
        if !st.sent {
            st.first_sent_at = now;
        }
        st.sent = true;
        st.inflight = true;
        st.sent_at = now;
        if dest.deadline.is_none() {
            dest.deadline = Some(now + dest.rtt.rto());
        }
        let (p, rem, w) = (msg.priority, msg.remaining(), msg.wants_to_send());
        self.sched.update(id, p, rem, w);
        self.arm(ip);
        self.line_sent(now, size);
        self.counters.data_sent += 1;
        self.counters.frames_out += 1;
        Some(size)
    }
}
