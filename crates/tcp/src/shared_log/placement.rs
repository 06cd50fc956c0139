//! The shared log's part of the data-path (laminar.txt 5): which out-of-order segments of
//! an attached connection may be taken, and where the payload the protocol stage accepted
//! goes: appended at the log's tail, after a gap reserved for bytes still missing, or, for
//! those missing bytes, staged for the application, which fills the gap.
//!
//! Both run in the protocol stage's pass, segment by segment, because the tail pointer and
//! each connection's mapping are sequence state: a later segment of the batch must see
//! what an earlier one reserved. Nothing here runs for a connection that is not attached.

use sluice_wire::tcp::SeqNumber;

use super::log::{SharedLogs, MAX_GAPS};
use crate::counters::Counters;
use crate::datapath::state::{Interval, ProtoState};
use crate::datapath::summary::HeaderSummary;

impl SharedLogs {
    /// Before the protocol stage takes `s` of an attached connection: whether out-of-order
    /// data in it may be stored. In-order data always may (the window, which is the log's
    /// free space, bounds it). Out-of-order data may only where it needs no byte of a gap
    /// (those are redirected, and only once they arrive in order) and where a new gap
    /// finds a free entry; otherwise it is refused like out-of-order data over a memory
    /// limit, and the peer sends it again.
    pub(crate) fn admits(
        &self,
        ps: &ProtoState,
        ooo: &[Interval],
        s: &HeaderSummary,
        counters: &mut Counters,
    ) -> bool {
        if s.payload_len == 0 || s.seq.seq_le(ps.rcv_nxt) {
            return true;
        }
        let row = self.slot(s.slot);
        let Some(Some(log)) = self.logs.get(usize::from(row.log)) else {
            return true;
        };
        let end = s.seq + u32::from(s.payload_len);
        let ok = if s.seq.seq_ge(row.mapped_end) {
            s.seq == row.mapped_end || log.gaps.len() < MAX_GAPS
        } else {
            // Below the mapped end: only bytes already written out of order (duplicates).
            let below = if end.seq_lt(row.mapped_end) {
                end
            } else {
                row.mapped_end
            };
            let used = usize::from(ps.ooo_count).min(ooo.len());
            ooo[..used]
                .iter()
                .any(|iv| iv.start.seq_le(s.seq) && below.seq_le(iv.end))
        };
        if !ok {
            counters.log_ooo_refused += 1;
        }
        ok
    }

    /// After the protocol stage accepted `s`'s payload for an attached connection: appends
    /// it at the tail (reserving a gap first if it lies beyond what the connection has
    /// mapped), or stages the bytes that fill the connection's gaps for the application.
    pub(crate) fn place(&mut self, s: &HeaderSummary, frames: &[&[u8]], counters: &mut Counters) {
        if s.place_len == 0 {
            return;
        }
        let row = self.slot(s.slot);
        let Some(Some(log)) = self.logs.get_mut(usize::from(row.log)) else {
            return;
        };
        let at = usize::from(s.place_offset);
        let len = u32::from(s.place_len);
        let Some(payload) = frames
            .get(usize::from(s.frame))
            .and_then(|f| f.get(at..at + len as usize))
        else {
            return;
        };
        let start = s.place_seq;
        let end = start + len;
        let mut mapped_end = row.mapped_end;
        let mut skip = 0u32;
        if start.seq_lt(mapped_end) {
            let below = if end.seq_lt(mapped_end) {
                end
            } else {
                mapped_end
            };
            if s.rx_advance > 0 {
                // In order: the bytes of this connection's gaps are redirected, each once
                // (rcv_nxt passes a byte once); the rest below the mapped end were written
                // when they arrived out of order.
                let mut redirected = 0u32;
                for i in 0..log.gaps.len() {
                    let g = log.gaps[i];
                    if g.slot != s.slot || g.generation != row.generation || g.arrived == g.len {
                        continue;
                    }
                    let next = g.seq + g.arrived;
                    let g_end = g.seq + g.len;
                    let upto = if below.seq_lt(g_end) { below } else { g_end };
                    if !upto.seq_gt(next) || next.seq_lt(start) {
                        continue;
                    }
                    let from = next.diff(start) as usize;
                    let n = upto.diff(next) as u32;
                    log.stage(
                        g.offset + u64::from(g.arrived),
                        &payload[from..from + n as usize],
                    );
                    log.gaps[i].arrived += n;
                    redirected += n;
                }
                if redirected > 0 {
                    counters.log_segments_redirected += 1;
                    counters.log_redirected_bytes += u64::from(redirected);
                }
            }
            skip = below.diff(start) as u32;
        }
        if skip < len {
            let seq: SeqNumber = start + skip;
            if seq.seq_gt(mapped_end) {
                // Out of order beyond everything mapped: reserve the missing bytes.
                let gap = seq.diff(mapped_end) as u32;
                log.reserve_gap(s.slot, row.generation, mapped_end, gap);
                counters.log_gaps_reserved += 1;
            }
            let tail = log.tail;
            log.write(tail, &payload[skip as usize..]);
            log.tail += u64::from(len - skip);
            mapped_end = end;
            counters.log_appends += 1;
            counters.log_appended_bytes += u64::from(len - skip);
            if s.ack_rcv_nxt + s.ack_rx_avail == mapped_end {
                // The connection's share of the log is used up: its window is 0 until the
                // application trims.
                counters.log_window_zero += 1;
            }
        }
        self.slot_mut(s.slot).mapped_end = mapped_end;
    }
}
