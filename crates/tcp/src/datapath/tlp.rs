//! The tail loss probe's segment (RFC 8985 7.3): what the TX workflow sends when the
//! control plane's probe timer fired. The timer, the probe's bookkeeping and its verdict
//! live in the control plane (control/loss_probe.rs); this is the data-path's part.

use super::state::{flags, sack_flags, ProtoState};
use super::tx::{self, Segment};

/// RFC 8985 7.3: the probe is a previously unsent segment if the receive window allows
/// one (cwnd does not limit it), else a retransmission of the highest-sequence segment
/// sent. None when there is nothing to send (everything was acknowledged meanwhile).
pub(crate) fn probe_segment(ps: &ProtoState) -> Option<Segment> {
    let mss = u32::from(ps.mss).max(1);
    if ps.snd_nxt == ps.snd_max {
        let room = ps.snd_wnd.saturating_sub(ps.in_flight());
        let unsent = ps.tx_end.diff(ps.snd_nxt).max(0) as u32;
        let len = mss.min(room).min(unsent);
        let fin = ps.has(flags::FIN_QUEUED) && len == unsent && ps.snd_nxt.seq_le(ps.tx_end);
        if len > 0 || (fin && unsent == 0) {
            return Some(Segment {
                seq: ps.snd_nxt,
                len,
                fin,
                push: len == unsent,
            });
        }
    }
    if !ps.snd_una.seq_lt(ps.snd_max) {
        return None;
    }
    // The last MSS of data sent (and our FIN, if it was sent).
    let data_end = ps.snd_max.min(ps.tx_end).max(ps.snd_una);
    let back = (data_end.diff(ps.snd_una).max(0) as u32).min(mss);
    tx::retransmission(ps, data_end - back, ps.snd_max, mss)
}

/// Records that the probe `seg` was sent at `now_us`. Returns whether it was a
/// retransmission (RFC 8985 TLP.is_retrans).
pub(crate) fn commit_probe(ps: &mut ProtoState, seg: &Segment, now_us: u32) -> bool {
    ps.sack.set(sack_flags::TLP_PROBE, false);
    if seg.seq == ps.snd_max {
        return tx::commit(ps, seg, now_us);
    }
    // RFC 6298 3 (Karn): the timed segment may be the one sent again.
    ps.set(flags::RTT_TIMING, false);
    ps.set(flags::FORCE_SEND, false);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::tcp::SeqNumber;

    const MSS: u32 = 1000;

    fn conn(una: u32, max: u32, end: u32) -> ProtoState {
        ProtoState {
            snd_una: SeqNumber(una),
            snd_nxt: SeqNumber(max),
            snd_max: SeqNumber(max),
            tx_end: SeqNumber(end),
            snd_wnd: 100 * MSS,
            cwnd: 2 * MSS,
            mss: MSS as u16,
            ..Default::default()
        }
    }

    #[test]
    fn rfc8985_7_3_the_probe_is_new_data_when_the_receive_window_allows_it() {
        // cwnd is full (2 segments in flight), yet the probe takes new data.
        let ps = conn(0, 2 * MSS, 10 * MSS);
        let seg = probe_segment(&ps).unwrap();
        assert_eq!((seg.seq, seg.len), (SeqNumber(2 * MSS), MSS));
    }

    #[test]
    fn rfc8985_7_3_else_the_probe_resends_the_highest_sequence_segment() {
        // Nothing unsent: the last 1000 bytes of 2500 go again.
        let mut ps = conn(0, 2500, 2500);
        let seg = probe_segment(&ps).unwrap();
        assert_eq!((seg.seq, seg.len, seg.fin), (SeqNumber(1500), MSS, false));
        // A closed receive window holds new data back: the same.
        ps.tx_end = SeqNumber(9000);
        ps.snd_wnd = 2500;
        let seg = probe_segment(&ps).unwrap();
        assert_eq!(seg.seq, SeqNumber(1500));
        let mut ps2 = ps;
        assert!(commit_probe(&mut ps2, &seg, 0));
        assert_eq!(
            ps2.snd_max, ps.snd_max,
            "a retransmission sends nothing new"
        );
        // Less than an MSS outstanding, and our FIN sent after it: both go again.
        let mut ps = conn(2000, 2301, 2300);
        ps.set(flags::FIN_QUEUED, true);
        let seg = probe_segment(&ps).unwrap();
        assert_eq!((seg.seq, seg.len, seg.fin), (SeqNumber(2000), 300, true));
        // Everything acknowledged: no probe.
        assert_eq!(probe_segment(&conn(2300, 2300, 2300)), None);
    }
}
