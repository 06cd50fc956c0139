//! ECN in the data-path (RFC 3168, with the DCTCP receiver of RFC 8257 3.2): the codepoint
//! of outgoing segments, the ECE and CWR flags, and the receiver's echo state. The state is
//! the `ecn` byte of [`ProtoState`]; the handshake sets [`bits::ON`], the control plane sets
//! [`bits::CWR_PENDING`] when its policy answered an echo, the post-processor keeps the rest.

use sluice_wire::ipv4::Ecn;
use sluice_wire::tcp::TcpFlags;

use super::state::ProtoState;
use super::summary::HeaderSummary;

/// Bits of `ProtoState::ecn`.
pub(crate) mod bits {
    /// ECN was negotiated in the handshake (RFC 3168 6.1.1).
    pub(crate) const ON: u8 = 1 << 0;
    /// Receiver: set ECE on our ACKs (RFC 3168 6.1.3; the DCTCP.CE state of RFC 8257 3.2).
    pub(crate) const ECE: u8 = 1 << 1;
    /// Receiver: echo per segment as DCTCP does (RFC 8257 3.2), not latched until CWR.
    pub(crate) const DCTCP_ECHO: u8 = 1 << 2;
    /// Sender: the window was reduced for an echo; set CWR on the next new data segment
    /// (RFC 3168 6.1.2).
    pub(crate) const CWR_PENDING: u8 = 1 << 3;
}

/// The receiver's side for one arriving segment. Returns true when an ACK must go out at
/// once: RFC 8257 3.2, the DCTCP CE state changed (so the sender's count of marked bytes
/// stays exact under delayed ACKs), or RFC 3168 6.1.3, a first CE.
#[inline]
pub(crate) fn on_receive(ps: &mut ProtoState, s: &HeaderSummary) -> bool {
    if dctcp_ce_change(ps, s) {
        // RFC 8257 3.2: ECE reflects the CE codepoint of the latest data segment.
        ps.ecn ^= bits::ECE;
        return true;
    }
    if ps.ecn & bits::ON == 0 || s.payload_len == 0 {
        return false;
    }
    let echoing = ps.ecn & bits::ECE != 0;
    if ps.ecn & bits::DCTCP_ECHO != 0 {
        return false;
    }
    if s.ecn_ce {
        // RFC 3168 6.1.3: CE sets ECE on every ACK until a segment with CWR arrives (a CE
        // on that same segment keeps it set).
        set(ps, bits::ECE, true);
        return !echoing;
    }
    if s.flags.contains(TcpFlags::CWR) {
        set(ps, bits::ECE, false);
    }
    false
}

/// Whether this segment changes a DCTCP receiver's CE state (RFC 8257 3.2, DCTCP.CE): the
/// ACK owed for earlier segments must then go out first, with the old ECE (Figure 1).
#[inline]
pub(crate) fn dctcp_ce_change(ps: &ProtoState, s: &HeaderSummary) -> bool {
    let on = bits::ON | bits::DCTCP_ECHO;
    ps.ecn & on == on && s.payload_len > 0 && (ps.ecn & bits::ECE != 0) != s.ecn_ce
}

/// The sender's side: the bytes this ACK newly acknowledged if it carried ECE (RFC 8257 3.3
/// DCTCP.BytesMarked; RFC 3168 6.1.2 treats any echo as congestion).
#[inline]
pub(crate) fn marked_bytes(ps: &ProtoState, s: &HeaderSummary) -> u32 {
    if ps.ecn & bits::ON != 0 && s.flags.contains(TcpFlags::ECE) {
        s.tx_freed
    } else {
        0
    }
}

/// ECE for every segment we send while echoing (RFC 3168 6.1.3).
#[inline]
pub(crate) fn ack_flags(ps: &ProtoState) -> TcpFlags {
    if ps.ecn & bits::ECE != 0 {
        TcpFlags::ECE
    } else {
        TcpFlags(0)
    }
}

/// The IP codepoint of a data segment: ECT(0) for new data on an ECN connection
/// (RFC 3168 6.1.2); RFC 3168 6.1.5: never for retransmissions; pure ACKs, window probes
/// and SYNs never take this path (6.1.4, 6.1.6, 6.1.1).
#[inline]
pub(crate) fn data_codepoint(ps: &ProtoState, retransmission: bool) -> Ecn {
    if ps.ecn & bits::ON != 0 && !retransmission {
        Ecn::Ect0
    } else {
        Ecn::NotEct
    }
}

/// CWR on the first new data segment after a reduction (RFC 3168 6.1.2); once it is sent,
/// [`cwr_sent`] clears the request.
#[inline]
pub(crate) fn cwr_flag(ps: &ProtoState, retransmission: bool) -> TcpFlags {
    if ps.ecn & bits::CWR_PENDING != 0 && !retransmission {
        TcpFlags::CWR
    } else {
        TcpFlags(0)
    }
}

/// A segment carrying CWR left.
#[inline]
pub(crate) fn cwr_sent(ps: &mut ProtoState) {
    ps.ecn &= !bits::CWR_PENDING;
}

#[inline]
fn set(ps: &mut ProtoState, bit: u8, on: bool) {
    if on {
        ps.ecn |= bit;
    } else {
        ps.ecn &= !bit;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(ce: bool, flags: TcpFlags) -> HeaderSummary {
        HeaderSummary {
            payload_len: 100,
            ecn_ce: ce,
            flags: flags | TcpFlags::ACK,
            ..Default::default()
        }
    }

    #[test]
    fn rfc3168_receiver_latches_ece_until_cwr() {
        let mut ps = ProtoState {
            ecn: bits::ON,
            ..Default::default()
        };
        assert!(!on_receive(&mut ps, &data(false, TcpFlags(0))));
        assert!(
            on_receive(&mut ps, &data(true, TcpFlags(0))),
            "first CE: ACK now"
        );
        assert_eq!(ack_flags(&ps), TcpFlags::ECE);
        assert!(!on_receive(&mut ps, &data(false, TcpFlags(0))));
        assert_eq!(ack_flags(&ps), TcpFlags::ECE, "latched until CWR");
        on_receive(&mut ps, &data(true, TcpFlags::CWR));
        assert_eq!(ack_flags(&ps), TcpFlags::ECE, "CE with CWR keeps it");
        on_receive(&mut ps, &data(false, TcpFlags::CWR));
        assert_eq!(ack_flags(&ps), TcpFlags(0));
    }

    #[test]
    fn rfc8257_receiver_reflects_each_segment_and_acks_on_change() {
        let mut ps = ProtoState {
            ecn: bits::ON | bits::DCTCP_ECHO,
            ..Default::default()
        };
        assert!(on_receive(&mut ps, &data(true, TcpFlags(0))));
        assert!(!on_receive(&mut ps, &data(true, TcpFlags(0))));
        assert_eq!(ack_flags(&ps), TcpFlags::ECE);
        assert!(on_receive(&mut ps, &data(false, TcpFlags(0))));
        assert_eq!(ack_flags(&ps), TcpFlags(0));
    }

    #[test]
    fn sender_codepoints_and_cwr() {
        let mut ps = ProtoState::default();
        assert_eq!(data_codepoint(&ps, false), Ecn::NotEct, "not negotiated");
        ps.ecn = bits::ON | bits::CWR_PENDING;
        assert_eq!(data_codepoint(&ps, false), Ecn::Ect0);
        assert_eq!(data_codepoint(&ps, true), Ecn::NotEct);
        assert_eq!(cwr_flag(&ps, true), TcpFlags(0), "not on a retransmission");
        assert_eq!(cwr_flag(&ps, false), TcpFlags::CWR);
        cwr_sent(&mut ps);
        assert_eq!(cwr_flag(&ps, false), TcpFlags(0), "once");
        let s = HeaderSummary {
            flags: TcpFlags::ACK | TcpFlags::ECE,
            tx_freed: 1448,
            ..Default::default()
        };
        assert_eq!(marked_bytes(&ps, &s), 1448);
    }
}
