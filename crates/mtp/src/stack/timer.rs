//! The retransmission timer per destination: a heap with lazy deletion (a destination has
//! at most one live entry; a deadline that moved later is re-queued when its entry pops).

use std::cmp::Reverse;
use std::net::Ipv4Addr;

use super::api::FailReason;
use super::config::Nanos;
use super::MtpStack;

impl MtpStack {
    /// Puts `ip`'s deadline in the heap unless an entry no later is there.
    pub(super) fn arm(&mut self, ip: Ipv4Addr) {
        let Some(d) = self.dests.get_mut(&ip) else {
            return;
        };
        let Some(deadline) = d.deadline else { return };
        if d.armed.is_none_or(|a| deadline < a) {
            d.armed = Some(deadline);
            self.timers.push(Reverse((deadline, ip)));
        }
    }

    /// The earliest deadline (it may be stale; `handle_timeout` then does nothing).
    pub fn poll_timeout(&self) -> Option<Nanos> {
        let rto = self.timers.peek().map(|Reverse((t, _))| *t);
        match (rto, self.pace_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Fires the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Nanos) {
        self.tx_blocked = false;
        if self.pace_at.is_some_and(|t| t <= now) {
            // Paced data may leave: the caller polls transmit after this.
            self.pace_at = None;
        }
        while let Some(&Reverse((t, ip))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let Some(d) = self.dests.get_mut(&ip) else {
                continue;
            };
            if d.armed != Some(t) {
                // A stale entry: a later-armed, earlier one exists or it was superseded.
                continue;
            }
            d.armed = None;
            match d.deadline {
                Some(dl) if dl <= now => self.fire(now, ip),
                Some(_) => self.arm(ip),
                None => {}
            }
        }
    }

    /// RFC 6298 5.4-5.6 per destination: back off, retransmit (the earliest packet of each
    /// message in flight, or all of it when the message timed out before), and fail messages
    /// that timed out too often.
    fn fire(&mut self, now: Nanos, ip: Ipv4Addr) {
        self.counters.timeouts += 1;
        let Some(d) = self.dests.get_mut(&ip) else {
            return;
        };
        d.rtt.back_off();
        // The walk is per timeout, not per packet.
        let ids: Vec<u32> = d.msgs.iter().copied().collect();
        for id in ids {
            let Some(msg) = self.out.get_mut(&id) else {
                continue;
            };
            let Some(d) = self.dests.get_mut(&ip) else {
                return;
            };
            // Only a message with packets in flight timed out (one waiting for its turn
            // did not); its count restarts when an acknowledgement makes progress.
            let from = msg.acked_prefix;
            if !(from..msg.next_new).any(|n| msg.pkt[usize::from(n)].inflight) {
                continue;
            }
            msg.timeouts += 1;
            if msg.timeouts > self.cfg.max_timeouts {
                self.fail(id, FailReason::Timeout);
                continue;
            }
            // RFC 6298 5.4: a first timeout retransmits the earliest packet in flight only;
            // its acknowledgement lets RACK judge the rest (a late packet then is not sent
            // twice). A message that times out again has everything in flight resent.
            let probe_only = msg.timeouts == 1;
            let mut probed = false;
            for n in msg.acked_prefix..msg.next_new {
                let (_, len) = msg.span(n);
                let st = &mut msg.pkt[usize::from(n)];
                if !st.inflight || (probe_only && probed) {
                    continue;
                }
                probed = true;
                st.inflight = false;
                st.resent_by_timer = true;
                msg.release_packet(&mut self.cc, &mut d.paths, len as u64);
                if msg.queue_retx(n) {
                    self.counters.retx_timeout += 1;
                }
            }
            let (p, rem, w) = (msg.priority, msg.remaining(), msg.wants_to_send());
            self.sched.update(id, p, rem, w);
        }
        if let Some(d) = self.dests.get_mut(&ip) {
            d.deadline = (!d.msgs.is_empty()).then(|| now + d.rtt.rto());
        }
        self.arm(ip);
    }
}
