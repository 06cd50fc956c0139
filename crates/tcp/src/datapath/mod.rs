//! The data-path pipeline for synchronized connections (Laminar 4, FlexTOE 3):
//! pre-processor ([`classify`]) → [`protocol`] → [`post`]-processor, and the transmit
//! stage ([`tx`]) driven by the flow scheduler: its ready queue, and for rate-limited
//! connections the Carousel timing wheel ([`scheduler`]). Each stage owns a table of
//! per-connection state indexed by slot; segments carry a [`summary::HeaderSummary`].
//! Nothing here allocates after construction.

pub(crate) mod classify;
pub(crate) mod ecn;
pub(crate) mod pipeline;
pub(crate) mod post;
pub(crate) mod protocol;
pub(crate) mod rack;
pub(crate) mod scheduler;
pub(crate) mod scoreboard;
pub(crate) mod state;
pub(crate) mod summary;
pub(crate) mod tlp;
pub(crate) mod tx;

pub(crate) use crate::queue::ReadyQueue;
use scheduler::TimingWheel;
use state::{
    Interval, OooState, PostCold, PostState, PreState, ProtoState, RecoveryState, SackedRange,
    SchedState,
};
use summary::HeaderSummary;

/// Segments processed together by each stage.
pub(crate) const BATCH: usize = 32;

/// The data-path's per-connection tables and scratch space.
pub(crate) struct DataPath {
    /// Pre-processor state.
    pub pre: Vec<PreState>,
    /// Protocol-stage state: the hot part, what in-order data and ACKs touch.
    pub proto: Vec<ProtoState>,
    /// Protocol-stage state only out-of-order data and FIN handling touch.
    pub ooo_state: Vec<OooState>,
    /// Protocol-stage state only loss recovery and timeouts touch.
    pub recovery: Vec<RecoveryState>,
    /// Out-of-order intervals, `ooo_stride` per slot.
    pub ooo: Vec<Interval>,
    /// Interval slots per connection.
    pub ooo_stride: usize,
    /// The sender's SACK scoreboards (protocol stage), `sacked_stride` ranges per slot.
    pub sacked: Vec<SackedRange>,
    /// Scoreboard ranges per connection.
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
    /// Creates tables with room for `slots` connections, `ooo` interval slots and `sacked`
    /// scoreboard ranges each, and a timing wheel of `wheel_slots` slots of
    /// `granularity_ns` nanoseconds. The per-connection rows are added by
    /// [`DataPath::add_slot`] as the connection table first hands each slot out, so a large
    /// `slots` reserves address space but touches memory only for connections that exist.
    pub(crate) fn new(
        slots: usize,
        ooo: usize,
        sacked: usize,
        xmit: usize,
        wheel_slots: usize,
        granularity_ns: u64,
    ) -> Self {
        DataPath {
            pre: Vec::with_capacity(slots),
            proto: Vec::with_capacity(slots),
            ooo_state: Vec::with_capacity(slots),
            recovery: Vec::with_capacity(slots),
            ooo: Vec::with_capacity(slots * ooo),
            ooo_stride: ooo,
            sacked: Vec::with_capacity(slots * sacked),
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
        self.ooo_state.push(OooState::default());
        self.recovery.push(RecoveryState::default());
        self.ooo
            .extend(core::iter::repeat_n(Interval::default(), self.ooo_stride));
        self.sacked.extend(core::iter::repeat_n(
            SackedRange::default(),
            self.sacked_stride,
        ));
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

    /// The SACK scoreboard of `slot`.
    #[inline]
    pub(crate) fn sacked_of(&self, slot: u32) -> &[SackedRange] {
        let at = slot as usize * self.sacked_stride;
        &self.sacked[at..at + self.sacked_stride]
    }

    /// Per-connection data-path state in bytes, hot and cold (see [`StateBytes`]), for
    /// `ooo` out-of-order intervals, `sacked` scoreboard ranges and `xmit` RACK marks.
    pub(crate) fn state_bytes(ooo: usize, sacked: usize, xmit: usize) -> StateBytes {
        use core::mem::size_of;
        StateBytes {
            pre: size_of::<PreState>(),
            protocol: size_of::<ProtoState>(),
            post: size_of::<PostState>(),
            scheduler: size_of::<SchedState>() + TimingWheel::PER_CONNECTION_BYTES,
            recovery: size_of::<RecoveryState>() + size_of::<PostCold>(),
            out_of_order: size_of::<OooState>()
                + ooo * size_of::<Interval>()
                + sacked * size_of::<SackedRange>(),
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
/// line), and only then. Cold rows are touched only on the paths their names say.
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
    /// Cold: loss recovery and timeouts (protocol and post stages).
    pub recovery: usize,
    /// Cold: out-of-order intervals, FIN bookkeeping, SACK scoreboard.
    pub out_of_order: usize,
    /// RACK (RFC 8985): state and transmit marks; 0 when RACK is off.
    pub rack: usize,
}

impl StateBytes {
    /// The hot total: pre + protocol + post.
    pub fn hot(&self) -> usize {
        self.pre + self.protocol + self.post
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
        let b = DataPath::state_bytes(8, 8, 8);
        println!("{b:?}, hot {}", b.hot());
        assert!(b.hot() <= 128, "hot state {} B: {b:?}", b.hot());
    }
}
