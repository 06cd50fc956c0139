//! RACK's reordering timer (RFC 8985 6.3): when segments sent before the most recently
//! delivered one have not yet waited RACK.rtt + reo_wnd, RACK looks again when they have,
//! even if no further ACK comes.

use crate::datapath::summary::{Actions, HeaderSummary};
use crate::datapath::{post, rack, scoreboard};
use crate::host::Stack;
use crate::timer::Timer;

impl Stack {
    /// The reordering timer fired: RACK_detect_loss() again, and a recovery if the segment
    /// at snd_una is now lost (RFC 8985 6.3).
    pub(super) fn rack_reo_timeout(&mut self, slot: u32) {
        let i = slot as usize;
        let k = self.dp.xmit_stride;
        if k == 0 || !self.dp.pre[i].active {
            return;
        }
        self.counters.rack_reo_timeouts += 1;
        let now_us = self.now.as_micros() as u32;
        let srtt_us = self.dp.post[i].srtt_us;
        let mut s = HeaderSummary::default();
        let mut cold = self.dp.pool.rows(self.dp.proto[i].sack.cold_row);
        let newly = rack::detect(
            &mut self.dp.proto[i],
            &mut cold,
            &self.dp.rack[i],
            &self.dp.xmit[i * k..(i + 1) * k],
            &mut s,
            now_us,
            srtt_us,
        );
        self.counters.rack_losses += u64::from(newly);
        if newly > 0 {
            let una = self.dp.proto[i].snd_una.0;
            crate::trace::record::tracepoint! { self, Some(slot), Loss { kind: "rack", seq: una, len: newly } }
        }
        if s.rack_timer_us > 0 {
            let at = self.now + std::time::Duration::from_micros(s.rack_timer_us.into());
            self.arm_timer(slot, Timer::Reorder, at);
        }
        if s.actions.contains(Actions::FAST_RETRANSMIT) && !self.dp.row_for_recovery(i) {
            self.counters.cold_pool_empty += 1;
        }
        let h = self.dp.proto[i].sack.cold_row;
        if s.actions.contains(Actions::FAST_RETRANSMIT)
            && post::begin_recovery(
                &mut self.dp.proto[i],
                self.dp.pool.rows(h).rec,
                &mut self.dp.post[i],
                &mut self.dp.post_cold[i],
            )
        {
            self.counters.fast_retransmits += 1;
            let ps = &self.dp.proto[i];
            crate::trace::record::tracepoint! { self, Some(slot), Loss { kind: "fast", seq: ps.snd_una.0, len: ps.snd_max.diff(ps.snd_una).max(0) as u32 } }
            if scoreboard::in_recovery(&self.dp.proto[i]) {
                self.counters.sack_recoveries += 1;
            }
            self.cc_on_loss(slot);
            let rto = self.now + self.conns[i].rto;
            self.arm_timer(slot, Timer::Rto, rto);
        }
        if s.actions.contains(Actions::WAKE_TX) {
            self.dp.ready.push(slot);
        }
    }

    /// A retransmission timeout: RACK's marks are forgotten (go-back-N resends all).
    pub(super) fn rack_on_timeout(&mut self, slot: u32) {
        let i = slot as usize;
        self.conns[i].timers.stop(Timer::Reorder);
        if self.dp.xmit_stride > 0 {
            let snd_max = self.dp.proto[i].snd_max;
            rack::on_timeout(&mut self.dp.rack[i], snd_max);
        }
    }
}
