//! Resets and challenge ACKs (RFC 9293 3.10.7, RFC 5961): RSTs we send, RST/SYN/bad-ACK
//! segments on synchronized connections, and segments the protocol stage refused.

use sluice_wire::tcp::{SeqNumber, TcpFlags, TcpHeader, TcpOptions};

use super::input::{summary_of, Handback};
use super::state::ConnError;
use crate::datapath::classify::TcpInput;
use crate::datapath::summary::{Actions, HeaderSummary};
use crate::events::bits;
use crate::frame::Route;
use crate::host::Stack;
use crate::trace::record::tracepoint;

impl Stack {
    /// RFC 9293 3.10.7.1: the RST for a segment that belongs to no connection (reset
    /// generation): `<SEQ=SEG.ACK><CTL=RST>` if it had ACK, else `<SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>`.
    pub(super) fn reply_rst(&mut self, input: &TcpInput<'_>) {
        let t = &input.tcp;
        if t.flags.contains(TcpFlags::RST) {
            return; // never answer a RST with a RST
        }
        let (seq, ack, tcp_flags) = if t.flags.contains(TcpFlags::ACK) {
            (t.ack, SeqNumber(0), TcpFlags::RST)
        } else {
            let len = input.payload.len() as u32
                + t.flags.contains(TcpFlags::SYN) as u32
                + t.flags.contains(TcpFlags::FIN) as u32;
            (SeqNumber(0), t.seq + len, TcpFlags::RST | TcpFlags::ACK)
        };
        let route = Route {
            src_mac: self.cfg.mac,
            dst_mac: input.src_mac,
            src_ip: self.cfg.ip,
            dst_ip: input.ip.src,
        };
        let header = TcpHeader {
            src_port: t.dst_port,
            dst_port: t.src_port,
            seq,
            ack,
            flags: tcp_flags,
            window: 0,
            urgent: 0,
            options: TcpOptions::default(),
        };
        if self.push_segment(&route, &header) {
            self.counters.rst_sent += 1;
        }
    }

    /// A RST on a known connection (abort, or refusing a half-open one).
    pub(crate) fn send_rst_for(&mut self, slot: u32, seq: SeqNumber) {
        let c = &self.conns[slot as usize];
        let route = Route {
            src_mac: self.cfg.mac,
            dst_mac: self.dp.pre[slot as usize].peer_mac,
            src_ip: self.cfg.ip,
            dst_ip: c.tuple.remote_ip,
        };
        let header = TcpHeader {
            src_port: c.tuple.local_port,
            dst_port: c.tuple.remote_port,
            seq,
            ack: self.dp.proto[slot as usize].rcv_nxt,
            flags: TcpFlags::RST | TcpFlags::ACK,
            window: 0,
            urgent: 0,
            options: TcpOptions::default(),
        };
        if self.push_segment(&route, &header) {
            self.counters.rst_sent += 1;
        }
    }

    /// RFC 5961 challenge ACK (and the plain ACK RFC 9293 asks for on unacceptable segments),
    /// rate-limited per connection, never by a host-global counter.
    pub(super) fn challenge_ack(&mut self, slot: u32) {
        let limit = self.cfg.challenge_ack_limit;
        if self.conns[slot as usize].allow_challenge_ack(self.now, limit) {
            self.counters.challenge_acks += 1;
            self.send_ack(slot);
        } else {
            self.counters.challenge_acks_suppressed += 1;
        }
    }

    /// SYN, RST, URG or missing ACK on a synchronized connection.
    pub(super) fn synchronized(&mut self, slot: u32, input: &TcpInput<'_>) -> Handback {
        let t = &input.tcp;
        let s = slot as usize;
        let ps = self.dp.proto[s];
        if t.flags.contains(TcpFlags::RST) {
            // RFC 5961 3.2 (which RFC 9293 3.10.7.4 adopts): reset only on an exact match of
            // rcv_nxt; anywhere else in the window earns a challenge ACK.
            if t.seq == ps.rcv_nxt {
                self.counters.rst_received += 1;
                self.conns[s].error = Some(ConnError::Reset);
                self.events.raise(slot, bits::ERROR | bits::READABLE);
                self.enter_closed(slot);
            } else if t.seq.seq_gt(ps.rcv_nxt) && t.seq.seq_lt(ps.rcv_nxt + ps.rx_avail.max(1)) {
                self.challenge_ack(slot);
            } else {
                self.counters.out_of_window += 1;
                tracepoint! { self, Some(slot), Drop { reason: "out_of_window" } }
            }
            return Handback::Done;
        }
        if t.flags.contains(TcpFlags::SYN) {
            // RFC 5961 4.2: any SYN in a synchronized state gets a challenge ACK, never a reset.
            self.challenge_ack(slot);
            return Handback::Done;
        }
        if !t.flags.contains(TcpFlags::ACK) {
            // RFC 9293 3.10.7.4 fifth: "if the ACK bit is off, drop the segment".
            return Handback::Done;
        }
        // URG: urgent data is delivered inline (RFC 6093); process as a normal segment.
        if self.dp.pre[s].active {
            Handback::Segment(summary_of(slot, input))
        } else {
            Handback::Done
        }
    }

    /// Answers a segment the protocol stage refused (out of window, PAWS, bad ACK).
    pub(crate) fn datapath_exception(&mut self, s: &HeaderSummary) {
        let bad_ack =
            s.actions.contains(Actions::ACK_UNSENT) || s.actions.contains(Actions::ACK_TOO_OLD);
        if s.actions.contains(Actions::PAWS) {
            self.counters.paws_drops += 1;
            tracepoint! { self, Some(s.slot), Drop { reason: "paws_drops" } }
            let ps = &self.dp.proto[s.slot as usize];
            if s.payload_len == 0
                && !s.flags.contains(TcpFlags::FIN)
                && s.ack.seq_le(ps.snd_una)
                && s.seq.seq_le(ps.rcv_nxt)
            {
                // A pure ACK overtaken by a newer one (reordering): it carries nothing we
                // lack, so it is dropped quietly rather than answered (Linux's "disordered
                // ACK"); answering every one would double the ACK traffic under reordering.
                return;
            }
        } else if bad_ack {
            self.counters.bad_acks += 1;
            tracepoint! { self, Some(s.slot), Drop { reason: "bad_acks" } }
        } else {
            self.counters.out_of_window += 1;
            tracepoint! { self, Some(s.slot), Drop { reason: "out_of_window" } }
        }
        if !bad_ack && (s.payload_len > 0 || s.flags.contains(TcpFlags::FIN)) {
            // RFC 9293 3.10.7.4 first check: an unacceptable segment that occupies sequence
            // space (a retransmission of data we already have, a tail-loss probe) is
            // answered with an ACK every time, as Linux does (tcp_oow_rate_limited exempts
            // data): it is how a sender whose ACKs were lost learns what arrived. Throttled,
            // the sender is left to its backed-off retransmission timer (issue 14's stall).
            // One ACK per data segment cannot form the ACK loop RFC 5961 7 guards against.
            let rcv_nxt = self.dp.proto[s.slot as usize].rcv_nxt;
            let end = s.seq + u32::from(s.payload_len);
            if s.payload_len > 0 && s.seq.seq_lt(rcv_nxt) {
                // RFC 2883 4: data we already had is reported in a D-SACK block.
                self.send_dsack(s.slot, (s.seq, end.min(rcv_nxt)));
            } else {
                self.send_ack(s.slot);
            }
            return;
        }
        // RFC 9293 3.10.7.4 first check: an unacceptable pure ACK is answered with an ACK;
        // RFC 5961 5.2: so is a bad ACK. Both are rate-limited per connection (RFC 5961 7).
        self.challenge_ack(s.slot);
    }
}
