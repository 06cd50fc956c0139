//! Tail loss probes (RFC 8985 7): when data is outstanding and nothing has been
//! acknowledged for a probe timeout (PTO, about two smoothed RTTs), one segment goes to
//! draw an ACK, so a loss at the tail of a flight (the last segment of an RPC, which no
//! later segment can reveal by duplicate ACKs) is repaired in about a round trip rather
//! than a retransmission timeout. The RTO stays the last resort.

use std::time::Duration;

use super::state::TlpProbe;
use crate::datapath::scoreboard;
use crate::datapath::state::{post_flags, sack_flags};
use crate::datapath::summary::{Actions, HeaderSummary};
use crate::host::Stack;
use crate::timer::Timer;

impl Stack {
    /// Whether a probe may be scheduled or sent now (RFC 8985 7.2): data outstanding, no
    /// probe outstanding, not in loss recovery nor backing off after a timeout, and no
    /// SACKed data (the scoreboard and RACK then find losses).
    fn tlp_allowed(&self, slot: u32) -> bool {
        let i = slot as usize;
        let ps = &self.dp.proto[i];
        let c = &self.conns[i];
        self.cfg.rack_tlp
            && self.dp.pre[i].active
            && c.tlp.is_none()
            && c.retries == 0
            && ps.snd_una.seq_lt(ps.snd_max)
            && !ps.sack.has(sack_flags::RTO_PROBE)
            && ps.sack.count == 0
            && ps.sack.flags & (sack_flags::IN_RECOVERY | sack_flags::AFTER_RTO) == 0
            && !self.dp.post[i].has(post_flags::IN_RECOVERY)
            && self.dp.post[i].srtt_us != 0
    }

    /// RFC 8985 7.2: (re)arms the probe timer after new data was sent or an ACK advanced
    /// snd_una, or stops it when no probe may go.
    pub(crate) fn tlp_arm(&mut self, slot: u32) {
        let i = slot as usize;
        if !self.tlp_allowed(slot) {
            self.conns[i].timers.stop(Timer::Probe);
            return;
        }
        let ps = &self.dp.proto[i];
        // PTO = 2 SRTT, plus the peer's worst-case delayed ACK when one segment is in
        // flight (it alone may not draw an immediate ACK); never below the floor.
        let mut pto = Duration::from_micros(2 * u64::from(self.dp.post[i].srtt_us));
        if ps.snd_max.diff(ps.snd_una) <= i32::from(ps.mss) + 1 {
            pto += self.cfg.tlp_ack_delay();
        }
        let at = self.now + pto.max(self.cfg.tlp_pto_min);
        // A probe due no earlier than the RTO is the RTO's business.
        if self.conns[i]
            .timers
            .get(Timer::Rto)
            .is_some_and(|rto| at >= rto)
        {
            self.conns[i].timers.stop(Timer::Probe);
            return;
        }
        self.arm_timer(slot, Timer::Probe, at);
    }

    /// The probe timer fired (RFC 8985 7.3): the TX workflow sends the probe.
    pub(super) fn tlp_fire(&mut self, slot: u32) {
        if self.tlp_allowed(slot) {
            self.dp.proto[slot as usize]
                .sack
                .set(sack_flags::TLP_PROBE, true);
            self.dp.ready.push(slot);
        }
    }

    /// The TX workflow sent the probe: remember it (RFC 8985 TLP.end_seq, TLP.is_retrans)
    /// and re-arm the RTO, the last resort if the probe fails (RFC 8985 7.3 MUST).
    pub(crate) fn tlp_probe_sent(&mut self, slot: u32, is_retrans: bool) {
        let i = slot as usize;
        self.counters.tlp_probes += 1;
        let end_seq = self.dp.proto[i].snd_max;
        let c = &mut self.conns[i];
        c.tlp = Some(TlpProbe {
            end_seq,
            is_retrans,
        });
        c.timers.stop(Timer::Probe);
        let rto = self.now + c.rto;
        self.arm_timer(slot, Timer::Rto, rto);
    }

    /// A timeout ends any probe: go-back-N resends everything anyway.
    pub(super) fn tlp_on_timeout(&mut self, slot: u32) {
        let i = slot as usize;
        self.conns[i].tlp = None;
        self.conns[i].timers.stop(Timer::Probe);
        self.dp.proto[i].sack.set(sack_flags::TLP_PROBE, false);
    }

    /// An ACK went through the data-path: judge an outstanding probe (RFC 8985 7.4.2), then
    /// re-arm or stop the probe timer.
    pub(super) fn tlp_on_ack(&mut self, s: &HeaderSummary, all_acked: bool) {
        let slot = s.slot;
        let i = slot as usize;
        if let Some(probe) = self.conns[i].tlp {
            if let Some(loss) = tlp_verdict(&probe, s) {
                self.conns[i].tlp = None;
                if loss {
                    // The probe repaired a loss: congestion control answers it as the
                    // loss it was (RFC 8985 7.4.2).
                    self.counters.tlp_recoveries += 1;
                    let ps = &self.dp.proto[i];
                    crate::trace::record::tracepoint! { self, Some(slot), Loss { kind: "tlp", seq: ps.snd_una.0, len: ps.snd_max.diff(ps.snd_una).max(0) as u32 } }
                    if !scoreboard::in_recovery(&self.dp.proto[i]) {
                        self.cc_on_loss(slot);
                    }
                }
            }
        }
        if all_acked {
            self.conns[i].timers.stop(Timer::Probe);
        } else if s.tx_freed > 0 || s.actions.contains(Actions::FIN_ACKED) {
            self.tlp_arm(slot);
        }
    }
}

/// RFC 8985 7.4.2 for one ACK: Some(true) when it shows the probe repaired a loss,
/// Some(false) when it shows there was none (or says the probe is over), None while
/// undecided.
fn tlp_verdict(probe: &TlpProbe, s: &HeaderSummary) -> Option<bool> {
    let ack = s.ack;
    if ack.seq_lt(probe.end_seq) {
        return None;
    }
    if !probe.is_retrans {
        return Some(false); // new data delivered: nothing to judge
    }
    // A D-SACK of the probe (RFC 2883: the first block, at or below the ACK): the
    // original arrived too.
    let dsack = s.sack_count > 0 && {
        let (left, right) = s.sack_blocks[0];
        left.seq_lt(probe.end_seq) && probe.end_seq.seq_le(right) && right.seq_le(ack)
    };
    if dsack {
        return Some(false);
    }
    if ack.seq_gt(probe.end_seq) {
        // Data sent after the probe is acknowledged and no D-SACK said the probe was a
        // duplicate: the original was lost.
        return Some(true);
    }
    let pure_dupack = s.tx_freed == 0
        && !s.actions.contains(Actions::FIN_ACKED)
        && s.payload_len == 0
        && s.sack_count == 0
        && !s.flags.contains(sluice_wire::tcp::TcpFlags::FIN);
    // A duplicate ACK with no SACK information: the receiver had the original already.
    pure_dupack.then_some(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::tcp::SeqNumber;

    fn probe() -> TlpProbe {
        TlpProbe {
            end_seq: SeqNumber(5000),
            is_retrans: true,
        }
    }

    fn ack(n: u32, freed: u32) -> HeaderSummary {
        HeaderSummary {
            ack: SeqNumber(n),
            tx_freed: freed,
            ..HeaderSummary::default()
        }
    }

    #[test]
    fn rfc8985_7_4_2_an_ack_past_the_probe_without_a_dsack_is_a_repaired_loss() {
        assert_eq!(tlp_verdict(&probe(), &ack(4000, 1000)), None);
        assert_eq!(
            tlp_verdict(&probe(), &ack(5000, 1000)),
            None,
            "yet undecided"
        );
        assert_eq!(tlp_verdict(&probe(), &ack(6000, 1000)), Some(true));
    }

    #[test]
    fn rfc8985_7_4_2_a_dsack_of_the_probe_or_a_pure_dupack_means_no_loss() {
        let mut s = ack(5000, 0);
        s.sack_blocks[0] = (SeqNumber(4000), SeqNumber(5000));
        s.sack_count = 1;
        assert_eq!(tlp_verdict(&probe(), &s), Some(false));
        assert_eq!(tlp_verdict(&probe(), &ack(5000, 0)), Some(false));
        // A new-data probe is over once acknowledged.
        let new = TlpProbe {
            is_retrans: false,
            ..probe()
        };
        assert_eq!(tlp_verdict(&new, &ack(5000, 1000)), Some(false));
    }
}
