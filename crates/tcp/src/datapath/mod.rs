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
use state::{Interval, PostState, PreState, ProtoState, SackedRange, SchedState};
use summary::HeaderSummary;

/// Segments processed together by each stage.
pub(crate) const BATCH: usize = 32;

/// The data-path's per-connection tables and scratch space.
pub(crate) struct DataPath {
    /// Pre-processor state.
    pub pre: Vec<PreState>,
    /// Protocol-stage state.
    pub proto: Vec<ProtoState>,
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
    /// Post-processor state.
    pub post: Vec<PostState>,
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
            ooo: Vec::with_capacity(slots * ooo),
            ooo_stride: ooo,
            sacked: Vec::with_capacity(slots * sacked),
            sacked_stride: sacked,
            rack: Vec::with_capacity(if xmit > 0 { slots } else { 0 }),
            xmit: Vec::with_capacity(slots * xmit),
            xmit_stride: xmit,
            post: Vec::with_capacity(slots),
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
        self.sched.push(SchedState::default());
        self.wheel.add_node();
    }

    /// The SACK scoreboard of `slot`.
    #[inline]
    pub(crate) fn sacked_of(&self, slot: u32) -> &[SackedRange] {
        let at = slot as usize * self.sacked_stride;
        &self.sacked[at..at + self.sacked_stride]
    }

    /// Per-connection data-path state in bytes, by stage: (pre, protocol, post incl. the
    /// congestion-control counters and the flow scheduler's rate, timestamp and wheel node,
    /// interval tables: out-of-order intervals and the SACK scoreboard). The
    /// congestion-control policy itself is the control plane's.
    pub(crate) fn state_bytes(ooo: usize, sacked: usize) -> (usize, usize, usize, usize) {
        (
            core::mem::size_of::<PreState>(),
            core::mem::size_of::<ProtoState>(),
            core::mem::size_of::<PostState>()
                + core::mem::size_of::<SchedState>()
                + TimingWheel::PER_CONNECTION_BYTES,
            ooo * core::mem::size_of::<Interval>() + sacked * core::mem::size_of::<SackedRange>(),
        )
    }
}
