//! Segments the data-path hands to the control plane: the dispatch by connection state,
//! and the helpers the handlers share.

use sluice_wire::tcp::{TcpFlags, TcpHeader};

use super::state::TcpState;
use crate::datapath::classify::TcpInput;
use crate::datapath::summary::HeaderSummary;
use crate::frame::{emit_segment, Route, TxChecksum};
use crate::stack::Stack;

impl Stack {
    /// Queues a control segment; counts it if the queue is full.
    pub(super) fn push_segment(&mut self, route: &Route, header: &TcpHeader) -> bool {
        self.ip_ident = self.ip_ident.wrapping_add(1);
        let ident = self.ip_ident;
        let ok = self
            .out
            .push_with(|buf| emit_segment(buf, route, ident, header, 0, TxChecksum::Full, |_| {}));
        if !ok {
            self.counters.control_queue_full += 1;
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
    pub(crate) fn handle_exception(&mut self, input: TcpInput<'_>) {
        let Some(slot) = input.slot else {
            self.no_connection(&input);
            return;
        };
        match self.conns[slot as usize].state {
            TcpState::SynSent => self.syn_sent(slot, &input),
            TcpState::SynReceived => self.syn_received(slot, &input),
            TcpState::TimeWait => self.time_wait(slot, &input),
            TcpState::Closed => self.reply_rst(&input),
            _ => self.synchronized(slot, &input),
        }
    }

    /// Runs the rest of a handshake-completing segment (data, FIN) through the data-path.
    pub(super) fn resume_segment(&mut self, slot: u32, input: &TcpInput<'_>) {
        if input.payload.is_empty() && !input.tcp.flags.contains(TcpFlags::FIN) {
            return;
        }
        let summary = summary_of(slot, input);
        self.dp.batch[0] = summary;
        let frames: [&[u8]; 1] = [input.payload];
        self.run_single(&frames);
    }

    /// Runs `dp.batch[0]` through the protocol and post stages.
    pub(super) fn run_single(&mut self, frames: &[&[u8]]) {
        self.run_stages(1, frames);
    }
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
