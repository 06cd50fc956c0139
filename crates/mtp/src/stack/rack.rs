//! RACK-style loss detection over a destination's send log ([`crate::msg::rack`]), run after
//! an acknowledgement made progress.

use std::net::Ipv4Addr;

use super::MtpStack;
use crate::msg::rack::{Took, Verdict};

/// Transmissions logged per destination (beyond, the SACK gap and the timeout cover them).
pub(super) const RACK_LOG_CAP: usize = 16_384;

impl MtpStack {
    /// Declares lost, and queues for retransmission, every packet to `ip` that a later
    /// transmission over its path outran by more than a quarter of the smoothed RTT
    /// (RFC 8985 6.2's reordering window).
    pub(super) fn rack_detect(&mut self, ip: Ipv4Addr) {
        for class in 0..8 {
            self.rack_detect_class(ip, class);
        }
    }

    /// [`MtpStack::rack_detect`] over the transmissions of one priority class.
    fn rack_detect_class(&mut self, ip: Ipv4Addr, class: usize) {
        let Some(d) = self.dests.get_mut(&ip) else {
            return;
        };
        let reo_wnd = d.rtt.srtt_or_rto() / 4;
        // Without feedback a destination has one (unnamed) path and every packet takes it.
        let one_path = d.paths.expected.is_none();
        loop {
            let out = &self.out;
            let verdict = d.log[class].judge(reo_wnd, d.rtt.rto(), |s| {
                let m = out.get(&s.msg)?;
                let p = m.pkt.get(usize::from(s.pkt))?;
                let took = match m.learned {
                    Some(path) => Took::Path(Some(path)),
                    None if one_path => Took::Path(s.path),
                    // Charged to the expected path, but a balancer may have put it elsewhere.
                    None => Took::Unknown,
                };
                (p.inflight && !p.acked && p.sent_at == s.at).then_some(took)
            });
            let lost = match verdict {
                Verdict::Wait => return,
                Verdict::Next => continue,
                Verdict::Lost(s) => s,
            };
            let Some(msg) = self.out.get_mut(&lost.msg) else {
                continue;
            };
            let (_, len) = msg.span(lost.pkt);
            let st = &mut msg.pkt[usize::from(lost.pkt)];
            st.inflight = false;
            msg.release_packet(&mut self.cc, &mut d.paths, len as u64);
            if msg.queue_retx(lost.pkt) {
                self.counters.retx_rack += 1;
            }
            let (p, rem, w) = (msg.priority, msg.remaining(), msg.wants_to_send());
            self.sched.update(lost.msg, p, rem, w);
        }
    }
}
