//! Teardown (RFC 9293 3.6): FIN state changes the data-path reports, TIME-WAIT and its
//! segments.

use sluice_wire::tcp::TcpFlags;

use super::input::Handback;
use super::state::TcpState;
use crate::datapath::classify::TcpInput;
use crate::datapath::state::flags;
use crate::events::bits;
use crate::host::Stack;
use crate::offload::teardown::Phase;
use crate::timer::Timer;

/// Connections whose close is under way (RFC 9293 3.6), counted by what they wait for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Closing {
    /// Our FIN is not yet acknowledged: FIN-WAIT-1, CLOSING or LAST-ACK (the FIN, and any
    /// data queued before it, is still retransmitted on the RTO).
    pub fin_unacked: usize,
    /// Our FIN is acknowledged and the peer's has not come: FIN-WAIT-2.
    pub awaiting_peer_fin: usize,
}

impl Closing {
    /// Whether no close is under way (every connection is open, in TIME-WAIT or gone).
    pub fn is_empty(&self) -> bool {
        self.fin_unacked == 0 && self.awaiting_peer_fin == 0
    }
}

impl Stack {
    /// Connections whose close is under way: a host that is about to stop keeps driving
    /// the core until this is empty, so that a lost FIN is retransmitted and the peer is
    /// not left in FIN-WAIT-2 (a scan of every slot: call it at shutdown, not per packet).
    pub fn closing(&self) -> Closing {
        let mut n = Closing::default();
        for c in self.conns.iter() {
            match c.state {
                TcpState::FinWait1 | TcpState::Closing | TcpState::LastAck => n.fin_unacked += 1,
                TcpState::FinWait2 => n.awaiting_peer_fin += 1,
                _ => {}
            }
        }
        for phase in self.teardown.phases() {
            match phase {
                Phase::FinWait1 | Phase::Closing | Phase::LastAck => n.fin_unacked += 1,
                Phase::FinWait2 => n.awaiting_peer_fin += 1,
                Phase::TimeWait => {}
            }
        }
        n
    }

    /// TIME-WAIT (RFC 9293 3.10.7.4): a retransmitted FIN is acknowledged and restarts the
    /// 2 MSL timer; a new SYN may reopen the connection (RFC 9293 MAY-2, under RFC 6191's
    /// rules); RSTs are ignored (RFC 1337).
    pub(super) fn time_wait(&mut self, slot: u32, input: &TcpInput<'_>) -> Handback {
        let t = &input.tcp;
        let s = slot as usize;
        if t.flags.contains(TcpFlags::RST) {
            return Handback::Done;
        }
        if t.flags.contains(TcpFlags::SYN) && !t.flags.contains(TcpFlags::ACK) {
            // Reopening frees the slot, so only when the application no longer holds a
            // handle to it (the handle must stay valid until close; MAY-2 is optional).
            if self.syn_may_reopen(slot, input)
                && !self.conns[s].app_owned
                && self.listener_by_port.contains(t.dst_port)
            {
                self.counters.time_wait_reopened += 1;
                // RFC 1122 4.2.2.13 (1): the new incarnation's ISS lies above every
                // sequence number the old one used, so none of its segments still in
                // flight falls in the new window (Linux: tw_snd_nxt + 65535 + 2).
                let iss = self.dp.proto[s].snd_max + 65537u32;
                self.free_slot(slot);
                let mut again = *input;
                again.slot = None;
                return self.open_passive(&again, Some(iss));
            }
            // RFC 6191: an old duplicate, or a new SYN that cannot be told from one. It is
            // answered with an ACK (RFC 5961 4.2), as Linux answers it, rather than dropped;
            // the connection stays in TIME-WAIT until its timer ends.
            self.counters.time_wait_syn_refused += 1;
            self.challenge_ack(slot);
            return Handback::Done;
        }
        if t.flags.contains(TcpFlags::FIN) {
            self.arm_timer(slot, Timer::TimeWait, self.now + self.cfg.time_wait);
            self.challenge_ack(slot);
        }
        Handback::Done
    }

    /// RFC 6191 2: whether a SYN may reopen a connection in TIME-WAIT. With timestamps on
    /// both the old connection and the SYN, a newer TSval says it is new (an equal one, a
    /// higher sequence number too), whatever its ISN: a Linux peer's ISN for a reused port
    /// can lie below what a fast transfer reached. Without them, only a sequence number
    /// above RCV.NXT does (RFC 1122 4.2.2.13 (2)).
    fn syn_may_reopen(&self, slot: u32, input: &TcpInput<'_>) -> bool {
        let t = &input.tcp;
        let ps = &self.dp.proto[slot as usize];
        let seq_above = t.seq.seq_gt(ps.rcv_nxt);
        let ts = t.options.timestamp.filter(|_| self.cfg.timestamps);
        match ts {
            Some((tsval, _)) if ps.has(flags::TIMESTAMPS) => {
                let newer = tsval.wrapping_sub(ps.ts_recent) as i32;
                newer > 0 || (newer == 0 && seq_above)
            }
            _ => seq_above,
        }
    }

    pub(crate) fn on_fin_received(&mut self, slot: u32) {
        let s = slot as usize;
        let next = match self.conns[s].state {
            TcpState::Established => TcpState::CloseWait,
            TcpState::FinWait1 => TcpState::Closing,
            TcpState::FinWait2 => {
                self.enter_time_wait(slot);
                return;
            }
            other => other,
        };
        self.set_state(s, next);
    }

    pub(crate) fn on_fin_acked(&mut self, slot: u32) {
        let s = slot as usize;
        match self.conns[s].state {
            TcpState::FinWait1 => {
                self.set_state(s, TcpState::FinWait2);
                if self.conns[s].app_closed {
                    self.arm_orphan_timer(slot);
                }
            }
            TcpState::Closing => self.enter_time_wait(slot),
            TcpState::LastAck => self.enter_closed(slot),
            _ => {}
        }
    }

    pub(super) fn enter_time_wait(&mut self, slot: u32) {
        let s = slot as usize;
        if self.cfg.time_wait.is_zero() {
            self.enter_closed(slot);
            return;
        }
        // RFC 9293 MUST-13: TIME-WAIT lasts 2 MSL (configurable). The data-path hands the
        // connection back: TIME-WAIT is the control plane's.
        self.dp.pre[s].active = false;
        self.dp.drop_cold_row(s);
        // The pooled row took its out-of-order bytes with it: count what is left.
        self.recharge(slot);
        self.set_state(s, TcpState::TimeWait);
        let c = &mut self.conns[s];
        c.timers.stop_all();
        self.arm_timer(slot, Timer::TimeWait, self.now + self.cfg.time_wait);
        if self.conns[s].app_owned {
            self.events.raise(slot, bits::CLOSED);
        }
    }
}
