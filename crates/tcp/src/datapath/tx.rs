//! The transmit stage: segmentation at the MSS from the send ring, flow and congestion
//! control, Nagle and sender-side silly-window avoidance, FIN, and pure ACKs.

use sluice_wire::tcp::{SeqNumber, TcpFlags, TcpHeader, TcpOptions, MAX_SACK_BLOCKS};

use super::pool::ColdPool;
use super::state::{flags, Interval, PreState, ProtoState};

/// What the next segment of a connection carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    /// First sequence number.
    pub seq: SeqNumber,
    /// Payload bytes.
    pub len: u32,
    /// Whether the FIN follows the payload.
    pub fin: bool,
    /// Whether the payload is the last the application has queued (PSH).
    pub push: bool,
}

/// Decides the next data (or FIN) segment the connection may send now, if any, carrying at
/// most `max_len` payload bytes: the MSS, or more for a device that segments large ones.
#[inline]
pub(crate) fn next_segment(ps: &ProtoState, max_len: u32) -> Option<Segment> {
    let window = ps.snd_wnd.min(ps.cwnd);
    let usable = window.saturating_sub(ps.in_flight());
    segment_within(ps, max_len, usable)
}

/// The next data (or FIN) segment from snd_nxt that fits in `usable` bytes of window: the
/// flow and congestion windows less what is in flight, or, in SACK recovery, cwnd less the
/// RFC 6675 pipe (NextSeg() rule 2).
#[inline]
pub(crate) fn segment_within(ps: &ProtoState, max_len: u32, usable: u32) -> Option<Segment> {
    let mss = ps.mss as u32;
    let in_flight = ps.in_flight();
    let unsent = ps.tx_end.diff(ps.snd_nxt).max(0) as u32;
    let len = max_len.max(mss).min(usable).min(unsent);
    let fin_due = ps.has(flags::FIN_QUEUED) && len == unsent && ps.snd_nxt.seq_le(ps.tx_end);
    if len == 0 {
        return fin_due.then_some(Segment {
            seq: ps.snd_nxt,
            len: 0,
            fin: true,
            push: true,
        });
    }
    // RFC 9293 3.8.6.2.1 (MUST-38 sender SWS avoidance) and Nagle (RFC 9293 3.7.4, SHLD-7):
    // send a full segment; or everything queued when nothing is in flight (or Nagle is off);
    // or at least half the largest window the peer has offered.
    let full = len >= mss;
    let all_queued = len == unsent && (in_flight == 0 || !ps.has(flags::NAGLE));
    let half_window = len >= ps.max_snd_wnd / 2;
    let forced = ps.has(flags::FORCE_SEND);
    if full || all_queued || half_window || fin_due || forced {
        let len = whole_segments(ps, len, unsent, mss, fin_due || forced);
        Some(Segment {
            seq: ps.snd_nxt,
            len,
            fin: fin_due && len == unsent,
            push: len == unsent,
        })
    } else {
        None
    }
}

/// The length of a large segment of `len` bytes (of `unsent` queued) that a device will
/// cut into `seg_size`-byte segments: its runt tail is held back, as `poll_transmit` would,
/// when more data is queued behind it, or when Nagle holds a small segment while data is in
/// flight (RFC 9293 3.7.4, SHLD-7; a FIN or a forced send goes with it anyway).
#[inline]
pub(crate) fn whole_segments(
    ps: &ProtoState,
    len: u32,
    unsent: u32,
    seg_size: u32,
    exempt: bool,
) -> u32 {
    let nagle_holds = ps.has(flags::NAGLE) && ps.in_flight() > 0 && !exempt;
    if len > seg_size && (len < unsent || nagle_holds) {
        len - len % seg_size
    } else {
        len
    }
}

/// The retransmission of up to `cap` bytes of [start, end), which lies in [snd_una,
/// snd_max): payload up to tx_end, and our FIN if it was sent and falls inside.
pub(crate) fn retransmission(
    ps: &ProtoState,
    start: SeqNumber,
    end: SeqNumber,
    cap: u32,
) -> Option<Segment> {
    let data_end = end.min(ps.tx_end);
    let len = (data_end.diff(start).max(0) as u32).min(cap);
    let fin_sent = ps.has(flags::FIN_QUEUED) && ps.snd_max.seq_gt(ps.tx_end);
    let fin = fin_sent && start + len == ps.tx_end && end.seq_gt(ps.tx_end);
    if len == 0 && !fin {
        return None;
    }
    Some(Segment {
        seq: start,
        len,
        fin,
        push: start + len == ps.tx_end,
    })
}

/// Records that `seg` was sent at `now_us`.
#[inline]
pub(crate) fn commit(ps: &mut ProtoState, seg: &Segment, now_us: u32) -> bool {
    let end = seg.seq + seg.len + seg.fin as u32;
    let retransmission = seg.seq.seq_lt(ps.snd_max);
    ps.set(flags::FORCE_SEND, false);
    ps.snd_nxt = end;
    if end.seq_gt(ps.snd_max) {
        ps.snd_max = end;
        if !ps.has(flags::RTT_TIMING) && !retransmission {
            ps.rtt_seq = end;
            ps.rtt_sent_us = now_us;
            ps.set(flags::RTT_TIMING, true);
        }
    }
    retransmission
}

/// The receive state a segment acknowledges: normally the connection's current one, or the
/// state one segment of a batch left (see `HeaderSummary::ack_rcv_nxt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AckFields {
    /// The acknowledgment number.
    pub rcv_nxt: SeqNumber,
    /// Free receive-buffer bytes, advertised as the window.
    pub rx_avail: u32,
}

impl AckFields {
    /// The connection's current receive state.
    #[inline]
    pub(crate) fn current(ps: &ProtoState) -> Self {
        AckFields {
            rcv_nxt: ps.rcv_nxt,
            rx_avail: ps.rx_avail,
        }
    }
}

/// The header of a segment from this connection with the given flags at `seq`,
/// acknowledging `ack`. Its SACK blocks come from the connection's pooled row in `pool`,
/// looked up only when it has out-of-order intervals.
#[inline]
pub(crate) fn header(
    pre: &PreState,
    ps: &ProtoState,
    pool: &ColdPool,
    seq: SeqNumber,
    ack: AckFields,
    tcp_flags: TcpFlags,
    now_ms: u32,
) -> TcpHeader {
    let timestamp = ps
        .has(flags::TIMESTAMPS)
        .then(|| (now_ms.wrapping_add(ps.ts_offset), ps.ts_recent));
    let mut sack_blocks = [(SeqNumber(0), SeqNumber(0)); MAX_SACK_BLOCKS];
    let mut sack_count = 0;
    if ps.has(flags::SACK) && ps.ooo_count > 0 {
        // RFC 2018 4: report received out-of-order blocks (at most 3 fit with timestamps).
        let room = if timestamp.is_some() {
            3
        } else {
            MAX_SACK_BLOCKS
        };
        let (oo, ooo) = (
            pool.ooo_state(ps.sack.cold_row),
            pool.intervals(ps.sack.cold_row),
        );
        let used = &ooo[..(ps.ooo_count as usize).min(ooo.len())];
        sack_count = most_recent_first(oo.ooo_seen, used, &mut sack_blocks[..room]) as u8;
    }
    // One struct expression in tail position, so the header is built where the caller
    // wants it: a copy of a just-written header stalls on store-to-load forwarding.
    TcpHeader {
        src_port: pre.local_port,
        dst_port: pre.remote_port,
        seq,
        ack: ack.rcv_nxt,
        flags: tcp_flags | super::ecn::ack_flags(ps),
        window: ps.window_field(ack.rx_avail),
        urgent: 0,
        options: TcpOptions {
            timestamp,
            sack_blocks,
            sack_count,
            ..TcpOptions::default()
        },
    }
}

/// Fills `blocks` with the intervals most recently added to, most recent first, and returns
/// how many. RFC 2018 4: the first SACK block MUST contain the most recently received
/// segment; the others SHOULD repeat the most recently reported blocks, so that a block
/// survives the loss of a few ACKs. Every ACK reports the interval just touched first, so
/// the order of last touch is the order of last first report. Stamps are unique and compared
/// by age from `seen`, so wrap-around does not matter.
#[inline]
fn most_recent_first(seen: u32, used: &[Interval], blocks: &mut [(SeqNumber, SeqNumber)]) -> usize {
    let mut n = 0;
    let mut last_age = None;
    for block in blocks.iter_mut() {
        // The youngest interval older than the one picked last: no allocation, no sort;
        // ooo_intervals (at most 64) times the 3 or 4 blocks an option holds.
        let pick = used
            .iter()
            .filter(|iv| last_age.is_none_or(|a| seen.wrapping_sub(iv.seen) > a))
            .min_by_key(|iv| seen.wrapping_sub(iv.seen));
        let Some(iv) = pick else { break };
        *block = (iv.start, iv.end);
        last_age = Some(seen.wrapping_sub(iv.seen));
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> ProtoState {
        ProtoState {
            snd_una: SeqNumber(100),
            snd_nxt: SeqNumber(100),
            snd_max: SeqNumber(100),
            tx_end: SeqNumber(100),
            snd_wnd: 10_000,
            max_snd_wnd: 10_000,
            cwnd: 10_000,
            mss: 1000,
            flags: flags::NAGLE,
            ..Default::default()
        }
    }

    #[test]
    fn segments_at_mss_within_window() {
        let mut ps = conn();
        ps.tx_end = SeqNumber(100 + 2500);
        let seg = next_segment(&ps, 1000).unwrap();
        assert_eq!((seg.seq, seg.len, seg.push), (SeqNumber(100), 1000, false));
        commit(&mut ps, &seg, 0);
        assert_eq!(next_segment(&ps, 1000).unwrap().len, 1000);
        let seg = next_segment(&ps, 1000).unwrap();
        commit(&mut ps, &seg, 0);
        assert_eq!(
            next_segment(&ps, 1000),
            None,
            "Nagle holds the 500-byte tail while data is in flight"
        );
        ps.set(flags::NAGLE, false);
        let tail = next_segment(&ps, 1000).unwrap();
        assert_eq!((tail.len, tail.push), (500, true));
    }

    #[test]
    fn window_limits_and_fin_follows_data() {
        let mut ps = conn();
        ps.snd_wnd = 1500;
        ps.tx_end = SeqNumber(100 + 3000);
        let seg = next_segment(&ps, 1000).unwrap();
        commit(&mut ps, &seg, 0);
        assert_eq!(
            next_segment(&ps, 1000),
            None,
            "500 usable bytes of 10000 max window: wait"
        );
        ps.snd_una = ps.snd_nxt;
        ps.set(flags::FIN_QUEUED, true);
        ps.snd_wnd = 10_000;
        let a = next_segment(&ps, 1000).unwrap();
        commit(&mut ps, &a, 0);
        let b = next_segment(&ps, 1000).unwrap();
        assert!(b.fin && b.len == 1000 && b.push);
        commit(&mut ps, &b, 0);
        assert_eq!(ps.snd_nxt, SeqNumber(100 + 3001));
        assert_eq!(next_segment(&ps, 1000), None, "FIN sent once");
    }
}
