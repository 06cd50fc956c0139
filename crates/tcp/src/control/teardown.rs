//! Teardown (RFC 9293 3.6): FIN state changes the data-path reports, TIME-WAIT and its
//! segments.

use sluice_wire::tcp::TcpFlags;

use super::input::Handback;
use super::state::TcpState;
use crate::datapath::classify::TcpInput;
use crate::events::bits;
use crate::host::Stack;
use crate::timer::Timer;

impl Stack {
    /// TIME-WAIT (RFC 9293 3.10.7.4): a retransmitted FIN is acknowledged and restarts the
    /// 2 MSL timer; a new SYN with a higher sequence number may reopen (RFC 6191 spirit,
    /// RFC 9293 MAY-2); RSTs are ignored (RFC 1337).
    pub(super) fn time_wait(&mut self, slot: u32, input: &TcpInput<'_>) -> Handback {
        let t = &input.tcp;
        let s = slot as usize;
        let rcv_nxt = self.dp.proto[s].rcv_nxt;
        if t.flags.contains(TcpFlags::RST) {
            return Handback::Done;
        }
        if t.flags.contains(TcpFlags::SYN) && !t.flags.contains(TcpFlags::ACK) {
            // Reopening frees the slot, so only when the application no longer holds a
            // handle to it (the handle must stay valid until close; MAY-2 is optional).
            if t.seq.seq_gt(rcv_nxt)
                && !self.conns[s].app_owned
                && self.listener_by_port.contains_key(&t.dst_port)
            {
                self.free_slot(slot);
                let mut again = *input;
                again.slot = None;
                return self.no_connection(&again);
            } else {
                self.challenge_ack(slot);
            }
            return Handback::Done;
        }
        if t.flags.contains(TcpFlags::FIN) {
            self.arm_timer(slot, Timer::TimeWait, self.now + self.cfg.time_wait);
            self.challenge_ack(slot);
        }
        Handback::Done
    }

    pub(crate) fn on_fin_received(&mut self, slot: u32) {
        let s = slot as usize;
        let c = &mut self.conns[s];
        c.state = match c.state {
            TcpState::Established => TcpState::CloseWait,
            TcpState::FinWait1 => TcpState::Closing,
            TcpState::FinWait2 => {
                self.enter_time_wait(slot);
                return;
            }
            other => other,
        };
    }

    pub(crate) fn on_fin_acked(&mut self, slot: u32) {
        let s = slot as usize;
        match self.conns[s].state {
            TcpState::FinWait1 => {
                self.conns[s].state = TcpState::FinWait2;
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
        let c = &mut self.conns[s];
        c.state = TcpState::TimeWait;
        c.timers.stop_all();
        self.arm_timer(slot, Timer::TimeWait, self.now + self.cfg.time_wait);
        if self.conns[s].app_owned {
            self.events.raise(slot, bits::CLOSED);
        }
    }
}
