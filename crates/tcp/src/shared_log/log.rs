//! The shared log itself (laminar.txt 5): a bounded byte buffer the core owns for an
//! application, its tail pointer, the gaps reserved for segments that arrived out of order,
//! and the staging of the missing bytes redirected to the application. Pure bookkeeping: no
//! connection state here but each attached slot's log and highest mapped sequence number.

use std::collections::VecDeque;

use sluice_wire::tcp::SeqNumber;

/// The largest log a call may register: 1 GiB (its staging for redirected bytes may double
/// that while gaps are open).
pub const MAX_LOG_CAPACITY: usize = 1 << 30;

/// Logs one core holds at once.
pub const MAX_LOGS: usize = 64;

/// Gaps one log keeps open at once: an out-of-order segment that would open one more is
/// refused (the peer retransmits it), counted in `Counters::log_ooo_refused`.
pub const MAX_GAPS: usize = 4096;

/// Marks a slot attached to no log.
pub(crate) const NO_LOG: u16 = u16::MAX;

/// A registered log. Stale handles (to an unregistered log) are refused, never misdirected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LogId {
    pub(crate) index: u16,
    pub(crate) generation: u32,
}

/// Why a shared-log call was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogError {
    /// The handle names no registered log.
    UnknownLog,
    /// A log of zero bytes.
    CapacityZero,
    /// More than [`MAX_LOG_CAPACITY`] bytes.
    CapacityTooLarge {
        /// The capacity asked for.
        asked: usize,
    },
    /// [`MAX_LOGS`] logs are registered.
    TooManyLogs,
    /// The connection handle names no live connection.
    InvalidConnection,
    /// The connection is not synchronized (the data-path does not own it).
    NotEstablished,
    /// The connection is attached to a log already.
    AlreadyAttached,
    /// The connection is attached to no log (or to another one).
    NotAttached,
    /// The connection holds out-of-order data in its receive ring: attach once it is in
    /// order.
    OutOfOrderData,
    /// The log cannot cover what the connection already holds and the window it already
    /// offered (a window is never taken back, RFC 9293 3.8.6).
    NoRoom {
        /// Bytes needed.
        needed: u64,
        /// Bytes free and not promised to other connections.
        free: u64,
    },
    /// The connection has gaps in the log whose bytes have not arrived yet.
    GapsPending,
    /// Connections are still attached to the log.
    Attached,
    /// A fill that does not start where a gap's redirected, unfilled bytes start, or
    /// covers more than were redirected.
    NotRedirected {
        /// The offset given.
        offset: u64,
    },
    /// A trim past the readable end (the first unfilled gap, or the tail).
    TrimPastReadable {
        /// Bytes asked for.
        asked: u64,
        /// Bytes readable.
        readable: u64,
    },
}

impl core::fmt::Display for LogError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LogError::UnknownLog => f.write_str("no such shared log"),
            LogError::CapacityZero => f.write_str("a shared log needs a capacity above 0"),
            LogError::CapacityTooLarge { asked } => write!(
                f,
                "shared log capacity {asked} above the maximum {MAX_LOG_CAPACITY}"
            ),
            LogError::TooManyLogs => write!(f, "{MAX_LOGS} shared logs registered already"),
            LogError::InvalidConnection => f.write_str("invalid or stale connection handle"),
            LogError::NotEstablished => f.write_str("connection not synchronized"),
            LogError::AlreadyAttached => f.write_str("connection attached to a log already"),
            LogError::NotAttached => f.write_str("connection not attached to this log"),
            LogError::OutOfOrderData => f.write_str("connection holds out-of-order data"),
            LogError::NoRoom { needed, free } => {
                write!(f, "log has {free} bytes free, {needed} needed")
            }
            LogError::GapsPending => f.write_str("connection has gaps still to arrive"),
            LogError::Attached => f.write_str("connections still attached to the log"),
            LogError::NotRedirected { offset } => {
                write!(
                    f,
                    "offset {offset} is not the start of redirected gap bytes"
                )
            }
            LogError::TrimPastReadable { asked, readable } => {
                write!(f, "trim of {asked} bytes, {readable} readable")
            }
        }
    }
}

impl std::error::Error for LogError {}

/// A snapshot of a log's pointers (byte offsets since it was registered).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogInfo {
    /// Capacity in bytes.
    pub capacity: u64,
    /// First byte not yet trimmed.
    pub head: u64,
    /// End of what the application may read: the first unfilled gap, or the tail.
    pub readable_end: u64,
    /// The tail pointer: where the next in-order append goes.
    pub tail: u64,
    /// Gaps not yet filled.
    pub gaps: usize,
    /// Connections attached.
    pub connections: usize,
    /// Log bytes promised to attached connections' receive windows, beyond the tail.
    pub promised: u64,
}

/// Missing bytes redirected to the application: it fills the gap at `offset` with them
/// (`Stack::log_fill`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRedirect {
    /// Where the bytes go in the log.
    pub offset: u64,
    /// The connection they came from (its slot and generation).
    pub conn: crate::ConnId,
    /// The bytes.
    pub data: Vec<u8>,
    /// The connection ended before these bytes arrived: they are zeros, and the gap holds
    /// none of its records (fill it to read past it).
    pub abandoned: bool,
}

/// A gap: log space reserved for bytes of one connection that have not arrived in order.
/// Its bytes arrive front to back (only in order, at rcv_nxt), are polled front to back
/// and filled front to back, so three counts describe it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Gap {
    /// Log offset of its first byte.
    pub offset: u64,
    /// Its bytes.
    pub len: u32,
    /// The connection's slot, and generation at attach.
    pub slot: u32,
    /// See `slot`.
    pub generation: u32,
    /// Sequence number of its first byte.
    pub seq: SeqNumber,
    /// Bytes arrived (staged for the application).
    pub arrived: u32,
    /// Bytes the application has polled.
    pub polled: u32,
    /// Bytes the application has filled.
    pub filled: u32,
    /// The connection ended before every byte arrived.
    pub abandoned: bool,
}

/// One registered log.
pub(crate) struct SharedLog {
    /// The log's bytes, addressed by offset modulo the capacity.
    bytes: Box<[u8]>,
    /// Redirected bytes wait here, at the same index as their place in the log (gaps lie
    /// within [head, tail), so they never collide); allocated with the first gap.
    staging: Box<[u8]>,
    /// Its handle's generation.
    pub generation: u32,
    /// First byte not trimmed.
    pub head: u64,
    /// Next append.
    pub tail: u64,
    /// Gaps not yet filled, by offset (they are reserved at the tail, in order).
    pub gaps: VecDeque<Gap>,
    /// Attached slots.
    pub conns: Vec<u32>,
}

impl SharedLog {
    /// A log of `capacity` bytes (validated by the caller).
    pub(crate) fn new(capacity: usize, generation: u32) -> Self {
        SharedLog {
            bytes: vec![0; capacity].into_boxed_slice(),
            staging: Box::default(),
            generation,
            head: 0,
            tail: 0,
            gaps: VecDeque::new(),
            conns: Vec::new(),
        }
    }

    /// Capacity in bytes.
    #[inline]
    pub(crate) fn capacity(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Bytes between head and tail (readable, gaps, and appended beyond gaps).
    #[inline]
    pub(crate) fn used(&self) -> u64 {
        self.tail - self.head
    }

    /// End of what the application may read.
    pub(crate) fn readable_end(&self) -> u64 {
        self.gaps.front().map_or(self.tail, |g| g.offset)
    }

    /// Copies `data` to the log at `offset`.
    #[inline]
    pub(crate) fn write(&mut self, offset: u64, data: &[u8]) {
        write_ring(&mut self.bytes, offset, data);
    }

    /// Copies `data` to the staging at `offset` (the place of its gap).
    pub(crate) fn stage(&mut self, offset: u64, data: &[u8]) {
        if self.staging.is_empty() {
            self.staging = vec![0; self.bytes.len()].into_boxed_slice();
        }
        write_ring(&mut self.staging, offset, data);
    }

    /// Copies `len` staged bytes from `offset` out.
    pub(crate) fn staged(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        if !self.staging.is_empty() {
            read_ring(&self.staging, offset, &mut out);
        }
        out
    }

    /// The readable bytes from the head, up to two slices (the buffer wraps).
    pub(crate) fn readable(&self) -> (&[u8], &[u8]) {
        let len = (self.readable_end() - self.head) as usize;
        if len == 0 {
            return (&[], &[]);
        }
        let cap = self.bytes.len();
        let start = (self.head % cap as u64) as usize;
        let first = len.min(cap - start);
        (
            &self.bytes[start..start + first],
            &self.bytes[..len - first],
        )
    }

    /// Reserves a gap of `len` bytes at the tail for `seq..` of `slot`.
    pub(crate) fn reserve_gap(&mut self, slot: u32, generation: u32, seq: SeqNumber, len: u32) {
        self.gaps.push_back(Gap {
            offset: self.tail,
            len,
            slot,
            generation,
            seq,
            arrived: 0,
            polled: 0,
            filled: 0,
            abandoned: false,
        });
        self.tail += u64::from(len);
    }

    /// Fills the gap whose next unfilled byte is at `offset` with `data`, which must lie
    /// within what was redirected and polled. Removes the gap once filled.
    pub(crate) fn fill(&mut self, offset: u64, data: &[u8]) -> Result<(), LogError> {
        let i = self
            .gaps
            .iter()
            .position(|g| g.offset + u64::from(g.filled) == offset)
            .ok_or(LogError::NotRedirected { offset })?;
        let g = self.gaps[i];
        if data.len() as u64 > u64::from(g.polled - g.filled) {
            return Err(LogError::NotRedirected { offset });
        }
        self.write(offset, data);
        let g = &mut self.gaps[i];
        g.filled += data.len() as u32;
        if g.filled == g.len {
            self.gaps.remove(i);
        }
        Ok(())
    }
}

/// Copies `data` into `ring` from `offset` (modulo its length), wrapping at its end.
fn write_ring(ring: &mut [u8], offset: u64, data: &[u8]) {
    let cap = ring.len();
    if cap == 0 || data.is_empty() {
        return;
    }
    let data = &data[..data.len().min(cap)];
    let start = (offset % cap as u64) as usize;
    let first = data.len().min(cap - start);
    ring[start..start + first].copy_from_slice(&data[..first]);
    if first < data.len() {
        ring[..data.len() - first].copy_from_slice(&data[first..]);
    }
}

/// Copies bytes of `ring` from `offset` (modulo its length) into `out`.
fn read_ring(ring: &[u8], offset: u64, out: &mut [u8]) {
    let cap = ring.len();
    if cap == 0 {
        return;
    }
    let len = out.len().min(cap);
    let start = (offset % cap as u64) as usize;
    let first = len.min(cap - start);
    out[..first].copy_from_slice(&ring[start..start + first]);
    if first < len {
        out[first..len].copy_from_slice(&ring[..len - first]);
    }
}

/// The shared-log extension's per-slot row: the log a connection's payload goes to and the
/// highest sequence number mapped into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotLog {
    /// The log's index, or [`NO_LOG`].
    pub log: u16,
    /// The connection's generation when attached.
    pub generation: u32,
    /// One past the highest sequence number given log space: bytes below it and at or
    /// above rcv_nxt lie in the connection's gaps or were written out of order.
    pub mapped_end: SeqNumber,
}

impl Default for SlotLog {
    fn default() -> Self {
        SlotLog {
            log: NO_LOG,
            generation: 0,
            mapped_end: SeqNumber(0),
        }
    }
}

/// Every log of one core and every slot's attachment.
#[derive(Default)]
pub(crate) struct SharedLogs {
    /// Logs by index.
    pub logs: Vec<Option<SharedLog>>,
    /// Per slot, grown as slots are attached.
    pub slots: Vec<SlotLog>,
    /// The generation the next log gets.
    pub next_generation: u32,
}

impl SharedLogs {
    /// The log `id` names.
    pub(crate) fn get(&self, id: LogId) -> Result<&SharedLog, LogError> {
        match self.logs.get(usize::from(id.index)) {
            Some(Some(l)) if l.generation == id.generation => Ok(l),
            _ => Err(LogError::UnknownLog),
        }
    }

    /// The log `id` names, to change.
    pub(crate) fn get_mut(&mut self, id: LogId) -> Result<&mut SharedLog, LogError> {
        match self.logs.get_mut(usize::from(id.index)) {
            Some(Some(l)) if l.generation == id.generation => Ok(l),
            _ => Err(LogError::UnknownLog),
        }
    }

    /// The row of `slot` (attached to no log if never attached).
    #[inline]
    pub(crate) fn slot(&self, slot: u32) -> SlotLog {
        self.slots.get(slot as usize).copied().unwrap_or_default()
    }

    /// The row of `slot`, added if needed.
    pub(crate) fn slot_mut(&mut self, slot: u32) -> &mut SlotLog {
        let s = slot as usize;
        if self.slots.len() <= s {
            self.slots.resize(s + 1, SlotLog::default());
        }
        &mut self.slots[s]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readable_end_stops_at_the_first_unfilled_gap_and_fills_go_front_to_back() {
        let mut log = SharedLog::new(16, 0);
        log.write(0, b"abcd");
        log.tail = 4;
        log.reserve_gap(1, 0, SeqNumber(100), 3);
        log.write(7, b"xy");
        log.tail = 9;
        assert_eq!(log.readable_end(), 4);
        assert_eq!(log.readable(), (&b"abcd"[..], &b""[..]));
        // Nothing redirected yet: nothing may be filled.
        assert_eq!(
            log.fill(4, b"e"),
            Err(LogError::NotRedirected { offset: 4 })
        );
        log.gaps[0].arrived = 3;
        log.gaps[0].polled = 3;
        assert_eq!(
            log.fill(5, b"f"),
            Err(LogError::NotRedirected { offset: 5 })
        );
        log.fill(4, b"e").unwrap();
        assert_eq!(log.readable_end(), 4, "still a byte short");
        log.fill(5, b"fg").unwrap();
        assert!(log.gaps.is_empty());
        let (a, b) = log.readable();
        assert_eq!([a, b].concat(), b"abcdefgxy");
    }

    #[test]
    fn writes_wrap_at_the_end_of_the_buffer() {
        let mut log = SharedLog::new(8, 0);
        log.head = 6;
        log.tail = 6;
        log.write(6, b"wxyz");
        log.tail = 10;
        let (a, b) = log.readable();
        assert_eq!((a, b), (&b"wx"[..], &b"yz"[..]));
        log.stage(6, b"1234");
        assert_eq!(log.staged(6, 4), b"1234");
    }
}
