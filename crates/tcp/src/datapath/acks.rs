//! Pure ACKs and D-SACKs of synchronized connections: built from the connection's rows
//! and queued on the control queue, or owed (`post_flags::ACK_PENDING`) and sent by the TX
//! workflow when that queue is full.

use sluice_wire::tcp::{SeqNumber, TcpFlags};

use super::state::{flags, post_flags};
use super::tx;
use crate::frame::{emit_segment, Route, TxChecksum};
use crate::host::Stack;
use crate::timer::Timer;

impl Stack {
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
    /// receive state one segment of a batch left (see [`super::summary::HeaderSummary::ack_rcv_nxt`]).
    pub(super) fn send_ack_as_of(&mut self, slot: u32, rcv_nxt: SeqNumber, rx_avail: u32) {
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
            crate::trace::record::tracepoint! { self, Some(slot), Drop { reason: "control_queue_full" } }
        }
        queued
    }

    /// The header of a pure ACK from `slot` at `seq`.
    #[inline]
    pub(super) fn pure_ack_header(
        &self,
        slot: u32,
        seq: SeqNumber,
        ack: tx::AckFields,
    ) -> sluice_wire::tcp::TcpHeader {
        let i = slot as usize;
        let now_ms = self.now.as_millis() as u32;
        tx::header(
            &self.dp.pre[i],
            &self.dp.proto[i],
            &self.dp.pool,
            seq,
            ack,
            TcpFlags::ACK,
            now_ms,
        )
    }

    /// Bookkeeping once a segment carrying our latest ACK left: nothing is owed any more.
    #[inline]
    pub(super) fn ack_sent(&mut self, slot: u32) {
        let i = slot as usize;
        self.dp.post[i].set(post_flags::ACK_PENDING, false);
        self.dp.post[i].unacked_segments = 0;
        self.dp.post[i].sack_news = 0;
        self.conns[i].timers.stop(Timer::DelayedAck);
    }
}
