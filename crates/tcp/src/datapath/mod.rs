//! The data-path pipeline for synchronized connections (Laminar 4, FlexTOE 3):
//! pre-processor ([`classify`]) → [`protocol`] → [`post`]-processor, and the transmit
//! stage ([`tx`]) driven by the flow scheduler: its ready queue, and for rate-limited
//! connections the Carousel timing wheel ([`scheduler`]). Each stage owns a table of
//! per-connection state indexed by slot; segments carry a [`summary::HeaderSummary`].
//! The protocol stage's cold rows are in a bounded [`pool`], held only while needed.
//! Nothing here allocates per segment: rows are added, within their bounds, as slots and
//! pooled rows are first used.

pub(crate) mod acks;
pub(crate) mod classify;
pub(crate) mod ecn;
pub(crate) mod pipeline;
pub(crate) mod pool;
pub(crate) mod post;
pub(crate) mod protocol;
pub(crate) mod rack;
pub(crate) mod scheduler;
pub(crate) mod scoreboard;
pub(crate) mod state;
pub(crate) mod summary;
pub(crate) mod tlp;
pub(crate) mod transmit;
pub(crate) mod tx;

pub(crate) use crate::queue::ReadyQueue;
use pool::ColdPool;
use scheduler::TimingWheel;
use state::{flags, sack_flags, PostCold, PostState, PreState, ProtoState, SchedState};
use summary::HeaderSummary;

/// Segments processed together by each stage.
pub(crate) const BATCH: usize = 32;

/// The data-path's per-connection tables and scratch space.
pub(crate) struct DataPath {
    /// Pre-processor state.
    pub pre: Vec<PreState>,
    /// Protocol-stage state: the hot part, what in-order data and ACKs touch.
    pub proto: Vec<ProtoState>,
    /// Protocol-stage rows only out-of-order data, FIN handling, SACKed ranges, loss
    /// recovery and timeouts touch: held by a connection only while it needs them
    /// (`SackSender::cold_row`).
    pub pool: ColdPool,
    /// DupThresh per slot (`RecoveryState::reordering` while the connection holds a pooled
    /// row): what D-SACKs taught outlives the row.
    pub reordering: Vec<u8>,
    /// Scoreboard ranges per pooled row (0: no SACK recovery).
    pub sacked_stride: usize,
    /// RACK state (protocol stage, RFC 8985 6), one per slot.
    pub rack: Vec<rack::RackState>,
    /// RACK's transmit marks (protocol stage), `xmit_stride` per slot.
    pub xmit: Vec<rack::XmitMark>,
    /// Transmit marks per connection (0: no RACK loss detection).
    pub xmit_stride: usize,
    /// Post-processor state: the hot part.
    pub post: Vec<PostState>,
    /// Post-processor state only duplicate ACKs, ECE and recovery touch.
    pub post_cold: Vec<PostCold>,
    /// Flow-scheduler state: rates programmed by the control plane, next send times.
    pub sched: Vec<SchedState>,
    /// Header summaries of the batch in flight.
    pub batch: Box<[HeaderSummary; BATCH]>,
    /// Scheduler: slots that may have something to send, each at most once.
    pub ready: ReadyQueue,
    /// Scheduler: rate-limited slots waiting for their next send time (Carousel).
    pub wheel: TimingWheel,
}

impl DataPath {
    /// Creates tables with room for `slots` connections, a pool of `pool_rows` cold rows of
    /// `ooo` interval slots and `sacked` scoreboard ranges each, and a timing wheel of `wheel_slots` slots of
    /// `granularity_ns` nanoseconds. The per-connection rows are added by
    /// [`DataPath::add_slot`] as the connection table first hands each slot out, so a large
    /// `slots` reserves address space but touches memory only for connections that exist.
    pub(crate) fn new(
        slots: usize,
        pool_rows: usize,
        ooo: usize,
        sacked: usize,
        xmit: usize,
        wheel_slots: usize,
        granularity_ns: u64,
    ) -> Self {
        DataPath {
            pre: Vec::with_capacity(slots),
            proto: Vec::with_capacity(slots),
            pool: ColdPool::new(pool_rows, ooo, sacked),
            reordering: Vec::with_capacity(slots),
            sacked_stride: sacked,
            rack: Vec::with_capacity(if xmit > 0 { slots } else { 0 }),
            xmit: Vec::with_capacity(slots * xmit),
            xmit_stride: xmit,
            post: Vec::with_capacity(slots),
            post_cold: Vec::with_capacity(slots),
            sched: Vec::with_capacity(slots),
            batch: Box::new([HeaderSummary::default(); BATCH]),
            ready: ReadyQueue::new(slots),
            wheel: TimingWheel::new(slots, wheel_slots, granularity_ns),
        }
    }

    /// Adds the rows of the next slot, in their reset state.
    pub(crate) fn add_slot(&mut self) {
        self.pre.push(PreState::default());
        self.proto.push(ProtoState::default());
        self.reordering.push(scoreboard::DUP_THRESH as u8);
        if self.xmit_stride > 0 {
            self.rack.push(rack::RackState::default());
            self.xmit.extend(core::iter::repeat_n(
                rack::XmitMark::default(),
                self.xmit_stride,
            ));
        }
        self.post.push(PostState::default());
        self.post_cold.push(PostCold::default());
        self.sched.push(SchedState::default());
        self.wheel.add_node();
    }

    /// The SACK scoreboard of `slot` (empty without a pooled row).
    #[inline]
    pub(crate) fn sacked_of(&self, slot: u32) -> &[state::SackedRange] {
        self.pool.sacked(self.proto[slot as usize].sack.cold_row)
    }

    /// The out-of-order intervals of `slot` (none without a pooled row).
    #[inline]
    pub(crate) fn intervals_of(&self, slot: u32) -> &[state::Interval] {
        self.pool.intervals(self.proto[slot as usize].sack.cold_row)
    }

    /// Gives `slot` a pooled row if it has none, reset to its sequence space. False when
    /// the pool is empty (the caller counts it and goes on without).
    pub(crate) fn take_cold_row(&mut self, slot: usize) -> bool {
        let ps = &mut self.proto[slot];
        if ps.sack.cold_row != pool::NO_ROW {
            return true;
        }
        match self
            .pool
            .take(ps.snd_una, ps.rcv_nxt, self.reordering[slot])
        {
            Some(h) => {
                ps.sack.cold_row = h;
                true
            }
            None => false,
        }
    }

    /// Before a recovery may begin for `slot` (a fast retransmit): a row for the scoreboard
    /// and RecoveryPoint, or, when the pool is empty, SACK recovery suspended so that the
    /// recovery is RFC 6582's go-back-N (`sack_flags::SUSPENDED`). False when suspended.
    pub(crate) fn row_for_recovery(&mut self, slot: usize) -> bool {
        let ps = &self.proto[slot];
        if !ps.sack.has(sack_flags::ENABLED) || ps.sack.cold_row != pool::NO_ROW {
            return true;
        }
        if self.take_cold_row(slot) {
            return true;
        }
        let sb = &mut self.proto[slot].sack;
        sb.set(sack_flags::ENABLED, false);
        sb.set(sack_flags::SUSPENDED, true);
        false
    }

    /// After the protocol stage took a segment of `slot`: its row goes back to the pool if
    /// the connection needs it no longer, and SACK recovery suspended for want of a row
    /// resumes once nothing is outstanding.
    #[inline]
    pub(crate) fn after_segment(&mut self, slot: usize) {
        let ps = &mut self.proto[slot];
        let h = ps.sack.cold_row;
        if h == pool::NO_ROW {
            if ps.sack.has(sack_flags::SUSPENDED) && ps.snd_una == ps.snd_max {
                ps.sack.set(sack_flags::SUSPENDED, false);
                ps.sack.set(sack_flags::ENABLED, true);
            }
            if ps.has(flags::FIN_PENDING) {
                // A FIN beyond rcv_nxt that found no row is dropped, as its data would be:
                // the peer sends it again.
                ps.set(flags::FIN_PENDING, false);
            }
            return;
        }
        if self
            .pool
            .recovery(h)
            .is_some_and(|rec| pool::is_idle(ps, rec))
        {
            self.reordering[slot] = self.pool.give_back(h);
            ps.sack.cold_row = pool::NO_ROW;
        }
    }

    /// The connection in `slot` leaves the data-path (closed, TIME-WAIT, slot reused): its
    /// row goes back whatever it holds, with the counts and flags that index it.
    pub(crate) fn drop_cold_row(&mut self, slot: usize) {
        let Some(ps) = self.proto.get_mut(slot) else {
            return;
        };
        let h = ps.sack.cold_row;
        if h == pool::NO_ROW {
            return;
        }
        self.reordering[slot] = self.pool.give_back(h);
        ps.sack.cold_row = pool::NO_ROW;
        ps.ooo_count = 0;
        ps.sack.count = 0;
        ps.set(flags::FIN_PENDING, false);
        ps.sack.set(
            sack_flags::IN_RECOVERY
                | sack_flags::RXT_FIRST
                | sack_flags::AFTER_RTO
                | sack_flags::UNDO_ARMED
                | sack_flags::RTO_PROBE,
            false,
        );
    }

    /// Per-connection data-path state in bytes (see [`StateBytes`]), for `ooo` out-of-order
    /// intervals and `sacked` scoreboard ranges per pooled row, `pool_rows` rows, and `xmit`
    /// RACK marks.
    pub(crate) fn state_bytes(
        ooo: usize,
        sacked: usize,
        pool_rows: usize,
        xmit: usize,
    ) -> StateBytes {
        use core::mem::size_of;
        StateBytes {
            pre: size_of::<PreState>(),
            protocol: size_of::<ProtoState>(),
            post: size_of::<PostState>(),
            scheduler: size_of::<SchedState>() + TimingWheel::PER_CONNECTION_BYTES,
            cold: size_of::<PostCold>() + size_of::<u8>(),
            pooled_row: ColdPool::row_bytes(ooo, sacked),
            pool_rows,
            rack: if xmit > 0 {
                size_of::<rack::RackState>() + xmit * size_of::<rack::XmitMark>()
            } else {
                0
            },
        }
    }
}

/// Per-connection data-path state in bytes, by stage and by temperature.
///
/// Hot is what the receive path touches for an in-order data segment and a plain ACK:
/// the pre-processor's row, the protocol stage's [`ProtoState`] and the post-processor's
/// [`PostState`] (issue 18's budget: at most 128 B in all, two cache lines' worth; the
/// rows sit in three tables, unaligned, so the lines touched are not yet two). The flow
/// scheduler's row is counted apart: the receive path never touches it, and the TX
/// workflow reads only its rate (8 B) unless the connection is paced. RACK's table is
/// apart too: it is touched per ACK and per transmission while RACK-TLP is on (a third
/// line), and only then. Cold per-slot rows are touched only on the paths their names
/// say; a pooled row is held only while the connection is out of order, has SACKed data or
/// is recovering, so an idle connection holds [`StateBytes::idle`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateBytes {
    /// Pre-processor: connection identification.
    pub pre: usize,
    /// Protocol stage, hot part: sequence space, windows, SACK flags.
    pub protocol: usize,
    /// Post-processor, hot part: RTT estimate, per-interval counters, ACK policy.
    pub post: usize,
    /// Flow scheduler: rate, next send time, timing-wheel node.
    pub scheduler: usize,
    /// Cold, per slot: the post-processor's recovery and ECN counters, and DupThresh.
    pub cold: usize,
    /// Pooled, per row held (only while out of order, SACKed or recovering):
    /// out-of-order intervals, FIN bookkeeping, SACK scoreboard, recovery state.
    pub pooled_row: usize,
    /// Rows in the pool (`Config::cold_pool()`).
    pub pool_rows: usize,
    /// RACK (RFC 8985): state and transmit marks; 0 when RACK is off.
    pub rack: usize,
}

impl StateBytes {
    /// The hot total: pre + protocol + post.
    pub fn hot(&self) -> usize {
        self.pre + self.protocol + self.post
    }

    /// What an idle connection (in order, nothing SACKed, not recovering) holds: the hot
    /// rows, the scheduler's, the per-slot cold rows and RACK's; no pooled row.
    pub fn idle(&self) -> usize {
        self.hot() + self.scheduler + self.cold + self.rack
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 18's budget: what an in-order data segment and a plain ACK touch is at most
    /// 128 B, two cache lines' worth. A field added to a hot row must find its bytes elsewhere, or go to a
    /// cold row.
    #[test]
    fn the_hot_state_of_a_connection_fits_in_128_bytes() {
        let b = DataPath::state_bytes(8, 8, 64, 8);
        println!("{b:?}, hot {}", b.hot());
        assert!(b.hot() <= 128, "hot state {} B: {b:?}", b.hot());
    }
}
