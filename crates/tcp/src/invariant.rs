//! What [`crate::Stack::check_invariants`] reports: the first internal invariant found broken,
//! with the slot and the numbers it saw. The fuzzer and tests print these; the wording is kept
//! as it always read, so traces and failure lines stay comparable across versions.

use core::fmt;

use sluice_wire::tcp::SeqNumber;

/// A broken invariant of the core's state, the first one [`crate::Stack::check_invariants`]
/// found. `slot` is the connection slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvariantViolation {
    /// The flow scheduler's timing wheel is inconsistent.
    Wheel(WheelViolation),
    /// An offload stage's (teardown, splice) records, lookup, timers or budget disagree.
    Teardown(&'static str),
    /// A shared log's gaps, pointers or promised windows disagree.
    SharedLog(&'static str),
    /// snd_una lies beyond snd_nxt.
    SndUnaPastSndNxt {
        /// The connection slot.
        slot: u32,
        /// The oldest unacknowledged sequence number.
        snd_una: SeqNumber,
        /// The next sequence number to send.
        snd_nxt: SeqNumber,
    },
    /// snd_nxt lies beyond snd_max.
    SndNxtPastSndMax {
        /// The connection slot.
        slot: u32,
        /// The next sequence number to send.
        snd_nxt: SeqNumber,
        /// The highest sequence number sent.
        snd_max: SeqNumber,
    },
    /// More out-of-order intervals than `Config::ooo_intervals`.
    TooManyIntervals {
        /// The connection slot.
        slot: u32,
        /// Intervals in use.
        count: u8,
        /// `Config::ooo_intervals`.
        bound: usize,
    },
    /// The receive ring holds a negative count of unread bytes, or more than it can.
    RxRingOverfull {
        /// The connection slot.
        slot: u32,
        /// Unread bytes (tail minus head).
        unread: i32,
        /// The ring's capacity.
        capacity: u32,
    },
    /// The advertised receive window and the unread bytes together exceed the ring.
    WindowOverRing {
        /// The connection slot.
        slot: u32,
        /// The free bytes the window offers.
        rx_avail: u32,
        /// Unread bytes.
        unread: i32,
        /// The ring's capacity.
        capacity: u32,
    },
    /// The transmit ring holds a negative count of unacknowledged bytes (beyond our FIN), or
    /// more than it can.
    TxRingOverfull {
        /// The connection slot.
        slot: u32,
        /// Unacknowledged bytes in the ring.
        unacked: i32,
        /// The ring's capacity.
        capacity: u32,
    },
    /// More SACKed ranges than the scoreboard holds.
    TooManySackedRanges {
        /// The connection slot.
        slot: u32,
        /// Ranges in use.
        count: u8,
        /// The scoreboard's size.
        bound: usize,
    },
    /// A SACKed range is not sorted, disjoint and within (snd_una, snd_max] (RFC 6675).
    SackedRangeOutOfOrder {
        /// The connection slot.
        slot: u32,
        /// The range's first sequence number.
        start: SeqNumber,
        /// One past its last.
        end: SeqNumber,
        /// The oldest unacknowledged sequence number.
        snd_una: SeqNumber,
        /// The highest sequence number sent.
        snd_max: SeqNumber,
    },
    /// An out-of-order interval is empty or lies outside (rcv_nxt, rcv_nxt + window].
    IntervalOutsideWindow {
        /// The connection slot.
        slot: u32,
        /// The interval's first sequence number.
        start: SeqNumber,
        /// One past its last.
        end: SeqNumber,
        /// When data last landed in it (its SACK-order stamp).
        seen: u32,
        /// The next sequence number expected.
        rcv_nxt: SeqNumber,
        /// The right edge of the receive window.
        right: SeqNumber,
    },
    /// The bytes counted against `Config::tcp_mem` for a connection are not what it holds
    /// (unread, unacknowledged and out-of-order bytes; none once it is freed).
    BufferedBytes {
        /// The connection slot.
        slot: u32,
        /// Bytes in the global count for it.
        counted: u32,
        /// Bytes it holds.
        held: u32,
    },
    /// A memory group's count is not what its connections hold, or its state disagrees
    /// with its thresholds (or the counts of groups in each state are off: group 0,
    /// counted and held are then those counts).
    MemoryGroup {
        /// The group.
        group: u16,
        /// Bytes in its count.
        counted: u64,
        /// Bytes its connections hold.
        held: u64,
    },
}

impl fmt::Display for InvariantViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            InvariantViolation::Wheel(w) => write!(f, "{w}"),
            InvariantViolation::Teardown(what) | InvariantViolation::SharedLog(what) => {
                f.write_str(what)
            }
            InvariantViolation::SndUnaPastSndNxt {
                slot,
                snd_una,
                snd_nxt,
            } => write!(f, "slot {slot}: snd_una {snd_una} > snd_nxt {snd_nxt}"),
            InvariantViolation::SndNxtPastSndMax { slot, .. } => {
                write!(f, "slot {slot}: snd_nxt > snd_max")
            }
            InvariantViolation::TooManyIntervals { slot, count, .. } => {
                write!(f, "slot {slot}: {count} intervals > bound")
            }
            InvariantViolation::RxRingOverfull { slot, unread, .. } => {
                write!(f, "slot {slot}: rx ring holds {unread} bytes")
            }
            InvariantViolation::WindowOverRing {
                slot,
                rx_avail,
                unread,
                ..
            } => write!(f, "slot {slot}: window {rx_avail} + unread {unread} > ring"),
            InvariantViolation::TxRingOverfull { slot, unacked, .. } => {
                write!(f, "slot {slot}: tx ring holds {unacked} bytes")
            }
            InvariantViolation::TooManySackedRanges { slot, count, .. } => {
                write!(f, "slot {slot}: {count} SACKed ranges > bound")
            }
            // The range and the interval print as their state structs' Debug always did.
            InvariantViolation::SackedRangeOutOfOrder {
                slot,
                start,
                end,
                snd_una,
                snd_max,
            } => write!(
                f,
                "slot {slot}: SACKed range SackedRange {{ start: {start:?}, end: {end:?} }} not \
                 sorted within ({snd_una}, {snd_max}]"
            ),
            InvariantViolation::IntervalOutsideWindow {
                slot,
                start,
                end,
                seen,
                rcv_nxt,
                right,
            } => write!(
                f,
                "slot {slot}: interval Interval {{ start: {start:?}, end: {end:?}, seen: {seen} }} \
                 outside ({rcv_nxt}, {right}]"
            ),
            InvariantViolation::BufferedBytes {
                slot,
                counted,
                held,
            } => write!(f, "slot {slot}: {counted} bytes counted, {held} held"),
            InvariantViolation::MemoryGroup {
                group,
                counted,
                held,
            } => write!(
                f,
                "memory group {group}: {counted} bytes counted, {held} held (or a state off)"
            ),
        }
    }
}

impl std::error::Error for InvariantViolation {}

impl From<WheelViolation> for InvariantViolation {
    fn from(w: WheelViolation) -> Self {
        InvariantViolation::Wheel(w)
    }
}

/// A broken invariant of the flow scheduler's timing wheel (Carousel): its per-slot lists,
/// occupancy bitmap and count disagree. `slot` is the wheel's time slot, `conn` a connection
/// slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WheelViolation {
    /// A slot's bitmap bit says the opposite of whether its list is empty.
    BitmapDisagrees {
        /// The wheel slot.
        slot: usize,
        /// The bit.
        bit: bool,
    },
    /// A list names a connection with no node.
    BadNode {
        /// The connection named.
        conn: u32,
    },
    /// A connection's node names another slot or predecessor than the list it is on.
    Mislinked {
        /// The connection.
        conn: u32,
        /// The wheel slot whose list holds it.
        slot: usize,
    },
    /// Following the lists visits more nodes than exist.
    ListLoops,
    /// A slot's tail is not the last node of its list.
    TailNotLast {
        /// The wheel slot.
        slot: usize,
    },
    /// The lists hold another number of connections than the wheel's count.
    CountDisagrees {
        /// Connections on the lists.
        queued: usize,
        /// The wheel's count.
        len: usize,
    },
}

impl fmt::Display for WheelViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WheelViolation::BitmapDisagrees { slot, bit } => {
                write!(f, "wheel slot {slot}: bitmap {bit} disagrees with its list")
            }
            WheelViolation::BadNode { .. } => f.write_str("wheel: bad node"),
            WheelViolation::Mislinked { conn, slot } => {
                write!(f, "wheel: connection {conn} mislinked in slot {slot}")
            }
            WheelViolation::ListLoops => f.write_str("wheel: a list loops"),
            WheelViolation::TailNotLast { slot } => {
                write!(f, "wheel slot {slot}: tail is not the last node")
            }
            WheelViolation::CountDisagrees { queued, len } => {
                write!(f, "wheel: {queued} queued, len says {len}")
            }
        }
    }
}

impl std::error::Error for WheelViolation {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::state::{Interval, SackedRange};

    /// Fuzz traces and failure lines print these: the wording is what the `String`s said.
    #[test]
    fn violations_print_as_they_always_did() {
        let s = SeqNumber;
        let range = SackedRange {
            start: s(5),
            end: s(9),
        };
        let iv = Interval {
            start: s(20),
            end: s(30),
            seen: 4,
        };
        let cases: Vec<(InvariantViolation, String)> = vec![
            (
                WheelViolation::BitmapDisagrees { slot: 3, bit: true }.into(),
                "wheel slot 3: bitmap true disagrees with its list".into(),
            ),
            (
                WheelViolation::BadNode { conn: 7 }.into(),
                "wheel: bad node".into(),
            ),
            (
                WheelViolation::Mislinked { conn: 7, slot: 3 }.into(),
                "wheel: connection 7 mislinked in slot 3".into(),
            ),
            (
                WheelViolation::ListLoops.into(),
                "wheel: a list loops".into(),
            ),
            (
                WheelViolation::TailNotLast { slot: 3 }.into(),
                "wheel slot 3: tail is not the last node".into(),
            ),
            (
                WheelViolation::CountDisagrees { queued: 2, len: 1 }.into(),
                "wheel: 2 queued, len says 1".into(),
            ),
            (
                InvariantViolation::SndUnaPastSndNxt {
                    slot: 1,
                    snd_una: s(10),
                    snd_nxt: s(4),
                },
                format!("slot 1: snd_una {} > snd_nxt {}", s(10), s(4)),
            ),
            (
                InvariantViolation::SndNxtPastSndMax {
                    slot: 1,
                    snd_nxt: s(10),
                    snd_max: s(4),
                },
                "slot 1: snd_nxt > snd_max".into(),
            ),
            (
                InvariantViolation::TooManyIntervals {
                    slot: 1,
                    count: 9,
                    bound: 8,
                },
                "slot 1: 9 intervals > bound".into(),
            ),
            (
                InvariantViolation::RxRingOverfull {
                    slot: 1,
                    unread: -3,
                    capacity: 4096,
                },
                "slot 1: rx ring holds -3 bytes".into(),
            ),
            (
                InvariantViolation::WindowOverRing {
                    slot: 1,
                    rx_avail: 4000,
                    unread: 200,
                    capacity: 4096,
                },
                "slot 1: window 4000 + unread 200 > ring".into(),
            ),
            (
                InvariantViolation::TxRingOverfull {
                    slot: 1,
                    unacked: -2,
                    capacity: 4096,
                },
                "slot 1: tx ring holds -2 bytes".into(),
            ),
            (
                InvariantViolation::TooManySackedRanges {
                    slot: 1,
                    count: 5,
                    bound: 4,
                },
                "slot 1: 5 SACKed ranges > bound".into(),
            ),
            (
                InvariantViolation::SackedRangeOutOfOrder {
                    slot: 1,
                    start: range.start,
                    end: range.end,
                    snd_una: s(6),
                    snd_max: s(100),
                },
                format!(
                    "slot 1: SACKed range {range:?} not sorted within ({}, {}]",
                    s(6),
                    s(100)
                ),
            ),
            (
                InvariantViolation::IntervalOutsideWindow {
                    slot: 1,
                    start: iv.start,
                    end: iv.end,
                    seen: iv.seen,
                    rcv_nxt: s(25),
                    right: s(40),
                },
                format!("slot 1: interval {iv:?} outside ({}, {}]", s(25), s(40)),
            ),
        ];
        for (v, want) in cases {
            assert_eq!(v.to_string(), want);
        }
    }
}
