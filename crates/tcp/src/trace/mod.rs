//! Tracepoints at the pipeline's events (flextoe.txt 5.1: the data-path's tracepoints, off
//! until asked for). A [`Tracer`] holds an enabled mask, a hit counter per tracepoint and a
//! bounded ring of [`TraceEvent`]s. Off, a call site costs one test of a bit in a `u64` the
//! branch predictor learns; nothing is allocated until the first tracepoint is turned on.
//! docs/tracepoints.md lists every tracepoint and its fields.

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddrV4;

use crate::time::Instant;

pub(crate) mod record;

/// Events the ring holds when no other capacity was set: 4096 x 48 bytes.
pub const RING_EVENTS: usize = 4096;

/// A point in the pipeline that can report events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Tracepoint {
    /// A frame or segment dropped; `reason` is the counter that counted it.
    Drop = 0,
    /// Out-of-order data stored in an interval (Laminar 4: the OOO interval).
    OutOfOrder,
    /// Loss detected: fast retransmit (three dupacks), RTO, tail loss probe, RACK.
    Loss,
    /// A segment sent again (SACK NextSeg, go-back-N, or a loss probe).
    Retransmit,
    /// Data waits but the window holds it: zero window, peer rwnd-limited, cwnd-limited,
    /// or a persist probe sent.
    WindowStall,
    /// Occupancy of a queue between stages (the RX batch, the ready queue, the control
    /// queue).
    Queue,
    /// Time the engine spent in one of its stages around the core (measured by the engine).
    StageTime,
    /// A connection's RFC 9293 state changed.
    State,
    /// The congestion window was cut (fast recovery, RTO, ECN echo, a policy iteration).
    CwndReduction,
    /// A segment arrived with ECN CE (RFC 3168).
    EcnCe,
}

impl Tracepoint {
    /// Every tracepoint, in mask-bit order.
    pub const ALL: [Tracepoint; 10] = [
        Tracepoint::Drop,
        Tracepoint::OutOfOrder,
        Tracepoint::Loss,
        Tracepoint::Retransmit,
        Tracepoint::WindowStall,
        Tracepoint::Queue,
        Tracepoint::StageTime,
        Tracepoint::State,
        Tracepoint::CwndReduction,
        Tracepoint::EcnCe,
    ];

    /// Its name (`sluice ctl trace on NAME`).
    pub const fn name(self) -> &'static str {
        match self {
            Tracepoint::Drop => "drop",
            Tracepoint::OutOfOrder => "ooo",
            Tracepoint::Loss => "loss",
            Tracepoint::Retransmit => "retransmit",
            Tracepoint::WindowStall => "window_stall",
            Tracepoint::Queue => "queue",
            Tracepoint::StageTime => "stage_time",
            Tracepoint::State => "state",
            Tracepoint::CwndReduction => "cwnd_reduction",
            Tracepoint::EcnCe => "ecn_ce",
        }
    }

    /// The tracepoint called `name`.
    pub fn from_name(name: &str) -> Option<Tracepoint> {
        Tracepoint::ALL.into_iter().find(|t| t.name() == name)
    }

    #[inline(always)]
    const fn bit(self) -> u64 {
        1 << self as u8
    }
}

/// A name that is no tracepoint's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownTracepoint(pub String);

impl fmt::Display for UnknownTracepoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no tracepoint {:?} (one of:", self.0)?;
        for t in Tracepoint::ALL {
            write!(f, " {}", t.name())?;
        }
        write!(f, ", or all)")
    }
}

impl std::error::Error for UnknownTracepoint {}

/// What an event says, per tracepoint. Kinds and reasons are static names, so an event is
/// `Copy` and recording it allocates nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceData {
    /// [`Tracepoint::Drop`].
    Drop {
        /// The counter that counted it ([`crate::Counters::rows`]' name).
        reason: &'static str,
    },
    /// [`Tracepoint::OutOfOrder`].
    OutOfOrder {
        /// The segment's first stored byte.
        seq: u32,
        /// Bytes stored.
        len: u32,
        /// Bytes missing before it (seq - rcv_nxt).
        gap: u32,
    },
    /// [`Tracepoint::Loss`].
    Loss {
        /// "fast", "rto", "tlp" or "rack".
        kind: &'static str,
        /// snd_una when it was detected.
        seq: u32,
        /// Bytes outstanding (snd_max - snd_una), or for "rack" the segments marked lost.
        len: u32,
    },
    /// [`Tracepoint::Retransmit`].
    Retransmit {
        /// "sack" (RFC 6675 NextSeg), "go_back_n" or "probe" (RFC 8985 7.3).
        kind: &'static str,
        /// The segment's first byte.
        seq: u32,
        /// Its length.
        len: u32,
    },
    /// [`Tracepoint::WindowStall`].
    WindowStall {
        /// "zero_window", "rwnd_limited", "cwnd_limited" or "persist".
        kind: &'static str,
        /// The peer's window (snd_wnd).
        snd_wnd: u32,
        /// The congestion window.
        cwnd: u32,
    },
    /// [`Tracepoint::Queue`].
    Queue {
        /// "batch", "ready" or "control".
        queue: &'static str,
        /// Entries in it.
        len: u32,
        /// Its bound.
        cap: u32,
    },
    /// [`Tracepoint::StageTime`].
    StageTime {
        /// "rx", "timers", "app", "hooks" or "tx".
        stage: &'static str,
        /// Nanoseconds on the engine's clock.
        ns: u64,
    },
    /// [`Tracepoint::State`].
    State {
        /// The state before (RFC 9293 name).
        from: &'static str,
        /// The state after.
        to: &'static str,
    },
    /// [`Tracepoint::CwndReduction`].
    CwndReduction {
        /// "fast_recovery", "rto", "ecn" or "policy".
        cause: &'static str,
        /// cwnd before.
        before: u32,
        /// cwnd after.
        after: u32,
    },
    /// [`Tracepoint::EcnCe`].
    EcnCe {
        /// The segment's sequence number.
        seq: u32,
        /// Its payload length.
        len: u32,
    },
}

/// One field's value, for generic readers (the control tool, JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValue {
    /// A number.
    Num(u64),
    /// A name.
    Name(&'static str),
}

impl fmt::Display for FieldValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldValue::Num(n) => write!(f, "{n}"),
            FieldValue::Name(s) => f.write_str(s),
        }
    }
}

impl TraceData {
    /// The tracepoint that reports this.
    pub const fn tracepoint(&self) -> Tracepoint {
        match self {
            TraceData::Drop { .. } => Tracepoint::Drop,
            TraceData::OutOfOrder { .. } => Tracepoint::OutOfOrder,
            TraceData::Loss { .. } => Tracepoint::Loss,
            TraceData::Retransmit { .. } => Tracepoint::Retransmit,
            TraceData::WindowStall { .. } => Tracepoint::WindowStall,
            TraceData::Queue { .. } => Tracepoint::Queue,
            TraceData::StageTime { .. } => Tracepoint::StageTime,
            TraceData::State { .. } => Tracepoint::State,
            TraceData::CwndReduction { .. } => Tracepoint::CwndReduction,
            TraceData::EcnCe { .. } => Tracepoint::EcnCe,
        }
    }

    /// The fields as (name, value), in the order docs/tracepoints.md lists them.
    pub fn fields(&self) -> Vec<(&'static str, FieldValue)> {
        use FieldValue::{Name, Num};
        let n = |v: u32| Num(u64::from(v));
        match *self {
            TraceData::Drop { reason } => vec![("reason", Name(reason))],
            TraceData::OutOfOrder { seq, len, gap } => {
                vec![("seq", n(seq)), ("len", n(len)), ("gap", n(gap))]
            }
            TraceData::Loss { kind, seq, len } | TraceData::Retransmit { kind, seq, len } => {
                vec![("kind", Name(kind)), ("seq", n(seq)), ("len", n(len))]
            }
            TraceData::WindowStall {
                kind,
                snd_wnd,
                cwnd,
            } => vec![
                ("kind", Name(kind)),
                ("snd_wnd", n(snd_wnd)),
                ("cwnd", n(cwnd)),
            ],
            TraceData::Queue { queue, len, cap } => {
                vec![("queue", Name(queue)), ("len", n(len)), ("cap", n(cap))]
            }
            TraceData::StageTime { stage, ns } => vec![("stage", Name(stage)), ("ns", Num(ns))],
            TraceData::State { from, to } => vec![("from", Name(from)), ("to", Name(to))],
            TraceData::CwndReduction {
                cause,
                before,
                after,
            } => vec![
                ("cause", Name(cause)),
                ("before", n(before)),
                ("after", n(after)),
            ],
            TraceData::EcnCe { seq, len } => vec![("seq", n(seq)), ("len", n(len))],
        }
    }
}

/// One event: when, which connection (local, remote), and what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// The core's time when it happened.
    pub at: Instant,
    /// The connection's (local, remote) addresses, if the event is a connection's.
    pub conn: Option<(SocketAddrV4, SocketAddrV4)>,
    /// The tracepoint's fields.
    pub data: TraceData,
}

impl TraceEvent {
    /// The tracepoint that reported it.
    pub fn tracepoint(&self) -> Tracepoint {
        self.data.tracepoint()
    }
}

/// As perf script prints: time in seconds, `tcp:NAME`, the connection, `key=value` fields.
impl fmt::Display for TraceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.at.as_nanos();
        write!(
            f,
            "{:>6}.{:09} tcp:{}",
            ns / 1_000_000_000,
            ns % 1_000_000_000,
            self.tracepoint().name()
        )?;
        if let Some((local, remote)) = self.conn {
            write!(f, " {local} > {remote}")?;
        }
        for (k, v) in self.data.fields() {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

/// The core's tracepoints: which are on, how often each fired while on, and the latest
/// events in a bounded ring (the oldest dropped and counted in [`Tracer::lost`]).
#[derive(Debug)]
pub struct Tracer {
    mask: u64,
    hits: [u64; Tracepoint::ALL.len()],
    ring: VecDeque<TraceEvent>,
    capacity: usize,
    lost: u64,
}

impl Default for Tracer {
    fn default() -> Self {
        Tracer::new()
    }
}

impl Tracer {
    /// All off, no ring yet.
    pub const fn new() -> Tracer {
        Tracer {
            mask: 0,
            hits: [0; Tracepoint::ALL.len()],
            ring: VecDeque::new(),
            capacity: RING_EVENTS,
            lost: 0,
        }
    }

    /// Whether `tp` is on: the one test a call site makes.
    #[inline(always)]
    pub fn is_on(&self, tp: Tracepoint) -> bool {
        self.mask & tp.bit() != 0
    }

    /// Whether any tracepoint is on.
    #[inline]
    pub fn any_on(&self) -> bool {
        self.mask != 0
    }

    /// Turns `tp` on or off. The ring is allocated when the first one goes on.
    pub fn set(&mut self, tp: Tracepoint, on: bool) {
        if on {
            self.mask |= tp.bit();
            if self.ring.capacity() < self.capacity {
                self.ring.reserve_exact(self.capacity - self.ring.len());
            }
        } else {
            self.mask &= !tp.bit();
        }
    }

    /// Turns the tracepoint called `name` (or "all") on or off.
    pub fn set_by_name(&mut self, name: &str, on: bool) -> Result<(), UnknownTracepoint> {
        if name == "all" {
            Tracepoint::ALL.into_iter().for_each(|t| self.set(t, on));
            return Ok(());
        }
        let tp = Tracepoint::from_name(name).ok_or_else(|| UnknownTracepoint(name.into()))?;
        self.set(tp, on);
        Ok(())
    }

    /// Turns every tracepoint on (the "all tracepoints" row of `sluice bench extensions`).
    pub fn enable_all(&mut self) {
        Tracepoint::ALL.into_iter().for_each(|t| self.set(t, true));
    }

    /// Turns every tracepoint off (the ring and counters stay).
    pub fn disable_all(&mut self) {
        self.mask = 0;
    }

    /// Sets how many events the ring keeps (at least 1); events beyond it are dropped,
    /// oldest first.
    pub fn set_capacity(&mut self, events: usize) {
        self.capacity = events.max(1);
        while self.ring.len() > self.capacity {
            self.ring.pop_front();
            self.lost += 1;
        }
        self.ring.shrink_to(self.capacity);
    }

    /// How many events the ring keeps.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Times `tp` fired while on.
    pub fn hits(&self, tp: Tracepoint) -> u64 {
        self.hits[tp as usize]
    }

    /// Events dropped from the full ring, oldest first, before anyone read them.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Events waiting in the ring.
    pub fn pending(&self) -> usize {
        self.ring.len()
    }

    /// Every tracepoint with whether it is on and its hits.
    pub fn list(&self) -> impl Iterator<Item = (Tracepoint, bool, u64)> + '_ {
        Tracepoint::ALL
            .into_iter()
            .map(|t| (t, self.is_on(t), self.hits(t)))
    }

    /// Counters for control tools: `events_lost`, then each tracepoint's hits.
    pub fn counter_rows(&self) -> impl Iterator<Item = (String, u64)> + '_ {
        std::iter::once(("events_lost".to_string(), self.lost)).chain(
            self.list()
                .map(|(t, _, hits)| (format!("{}_hits", t.name()), hits)),
        )
    }

    /// The oldest waiting event, left in the ring (a reader that has no room for it yet).
    pub fn front(&self) -> Option<&TraceEvent> {
        self.ring.front()
    }

    /// The oldest waiting event.
    pub fn pop(&mut self) -> Option<TraceEvent> {
        self.ring.pop_front()
    }

    /// Moves every waiting event to `out`, oldest first.
    pub fn drain(&mut self, out: &mut Vec<TraceEvent>) {
        out.extend(self.ring.drain(..));
    }

    /// Records `data` at `at` if its tracepoint is on (the engine's stage times come this
    /// way); counts the hit.
    pub fn record(
        &mut self,
        at: Instant,
        conn: Option<(SocketAddrV4, SocketAddrV4)>,
        data: TraceData,
    ) {
        let tp = data.tracepoint();
        if !self.is_on(tp) {
            return;
        }
        self.hits[tp as usize] += 1;
        if self.ring.len() >= self.capacity {
            self.ring.pop_front();
            self.lost += 1;
        }
        self.ring.push_back(TraceEvent { at, conn, data });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(seq: u32) -> TraceData {
        TraceData::EcnCe { seq, len: 1 }
    }

    #[test]
    fn off_records_and_counts_nothing_and_allocates_no_ring() {
        let mut t = Tracer::new();
        t.record(Instant::ZERO, None, ev(1));
        assert_eq!(t.hits(Tracepoint::EcnCe), 0);
        assert_eq!(t.pending(), 0);
        assert_eq!(t.ring.capacity(), 0);
    }

    #[test]
    fn the_ring_is_bounded_and_counts_what_it_lost() {
        let mut t = Tracer::new();
        t.set_capacity(4);
        t.set(Tracepoint::EcnCe, true);
        for i in 0..10 {
            t.record(Instant::from_micros(i.into()), None, ev(i));
        }
        assert_eq!(t.hits(Tracepoint::EcnCe), 10);
        assert_eq!(t.lost(), 6);
        let mut out = Vec::new();
        t.drain(&mut out);
        let seqs: Vec<u32> = out
            .iter()
            .map(|e| match e.data {
                TraceData::EcnCe { seq, .. } => seq,
                _ => u32::MAX,
            })
            .collect();
        assert_eq!(seqs, [6, 7, 8, 9], "the newest four, oldest first");
        assert!(t.ring.capacity() < 16, "{}", t.ring.capacity());
    }

    #[test]
    fn names_round_trip_and_all_sets_every_bit() {
        for tp in Tracepoint::ALL {
            assert_eq!(Tracepoint::from_name(tp.name()), Some(tp));
        }
        let mut t = Tracer::new();
        t.set_by_name("all", true).unwrap();
        assert!(Tracepoint::ALL.iter().all(|&tp| t.is_on(tp)));
        t.set_by_name("ooo", false).unwrap();
        assert!(!t.is_on(Tracepoint::OutOfOrder));
        assert!(t.is_on(Tracepoint::Drop));
        let err = t.set_by_name("nope", true).unwrap_err();
        assert!(err.to_string().contains("retransmit"), "{err}");
    }

    #[test]
    fn an_event_prints_as_perf_script_does() {
        let e = TraceEvent {
            at: Instant::from_micros(1_500_000),
            conn: Some((
                "10.0.0.1:80".parse().unwrap(),
                "10.0.0.2:5000".parse().unwrap(),
            )),
            data: TraceData::Retransmit {
                kind: "sack",
                seq: 7,
                len: 1460,
            },
        };
        assert_eq!(
            e.to_string(),
            "     1.500000000 tcp:retransmit 10.0.0.1:80 > 10.0.0.2:5000 kind=sack seq=7 len=1460"
        );
    }

    #[test]
    fn an_event_is_small() {
        assert!(core::mem::size_of::<TraceEvent>() <= 64);
    }
}
