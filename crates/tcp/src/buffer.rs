//! Payload rings: per-connection RX and TX buffers addressed by sequence number.
//!
//! A ring's capacity is a power of two no larger than 2^30, so `(seq - base) & mask` maps a
//! sequence number to its byte in the ring consistently across sequence wrap-around (2^32 is
//! a multiple of the capacity). This is Laminar's sequence-to-address translation (4.3): the
//! data-path writes a segment straight to its place, in order or not, and never keeps a
//! separate offset. The base is the connection's initial sequence number, so every connection
//! starts at the ring's first byte: a ring reused by many short connections touches only the
//! pages their bytes need, where random ISNs would touch a new page with each connection.
//!
//! A ring's capacity is logical: its storage is allocated when the first byte arrives or is
//! written, and given back (to a bounded [`RingPool`]) when the ring is drained, so an idle
//! connection holds no payload memory. The capacity, and so the window advertised from it,
//! does not change when storage comes or goes (RFC 9293 3.8.6, RFC 7323 2.4: an advertised
//! window is never taken back).

use sluice_wire::tcp::SeqNumber;

use crate::config::Config;
use crate::payload_source::ExternalTx;

/// A power-of-two byte ring indexed by sequence number.
pub(crate) struct PayloadRing {
    /// The storage: empty while the ring holds nothing (see [`PayloadRing::unallocated`]).
    bytes: Box<[u8]>,
    mask: u32,
    /// The sequence number stored at the ring's first byte (modulo its capacity).
    base: u32,
}

impl PayloadRing {
    /// Creates a zeroed ring of at least `capacity` bytes (rounded up to a power of two).
    pub(crate) fn new(capacity: usize) -> Self {
        let capacity = capacity.clamp(1, 1 << 30).next_power_of_two();
        PayloadRing {
            bytes: vec![0; capacity].into_boxed_slice(),
            mask: (capacity - 1) as u32,
            base: 0,
        }
    }

    /// A ring of at least `capacity` bytes (rounded up to a power of two) without storage
    /// yet: an idle connection's, which costs no payload memory.
    pub(crate) fn unallocated(capacity: usize) -> Self {
        let capacity = capacity.clamp(1, 1 << 30).next_power_of_two();
        PayloadRing {
            bytes: Box::default(),
            mask: (capacity - 1) as u32,
            base: 0,
        }
    }

    /// Whether the ring has its storage.
    #[inline]
    pub(crate) fn is_allocated(&self) -> bool {
        !self.bytes.is_empty()
    }

    /// Bytes of storage the ring holds (0 or its capacity).
    #[inline]
    pub(crate) fn allocated(&self) -> usize {
        self.bytes.len()
    }

    /// Gives an unallocated ring its storage: `storage` if it has the ring's capacity, else
    /// a new zeroed one. Its old contents are never read: the ring reads only bytes written
    /// since (the positions of the connection using it).
    pub(crate) fn attach(&mut self, storage: Option<Box<[u8]>>) {
        if self.is_allocated() {
            return;
        }
        let capacity = self.capacity() as usize;
        self.bytes = match storage {
            Some(s) if s.len() == capacity => s,
            _ => vec![0; capacity].into_boxed_slice(),
        };
    }

    /// Takes the storage out, leaving the ring's capacity and base as they were.
    pub(crate) fn detach(&mut self) -> Option<Box<[u8]>> {
        self.is_allocated()
            .then(|| core::mem::take(&mut self.bytes))
    }

    /// Makes `seq` the sequence number of the ring's first byte (a new connection's start).
    pub(crate) fn rebase(&mut self, seq: SeqNumber) {
        self.base = seq.0;
    }

    /// The ring offset of `seq`.
    #[inline(always)]
    fn index(&self, seq: SeqNumber) -> usize {
        (seq.0.wrapping_sub(self.base) & self.mask) as usize
    }

    /// Capacity in bytes.
    #[inline]
    pub(crate) fn capacity(&self) -> u32 {
        self.mask + 1
    }

    /// Grows the ring to at least `capacity` bytes (a power of two, at most 2^30), keeping
    /// the `len` bytes from `seq` at their sequence numbers. Never shrinks.
    pub(crate) fn grow(&mut self, seq: SeqNumber, len: u32, capacity: usize) {
        let capacity = capacity.clamp(1, 1 << 30).next_power_of_two();
        if capacity <= self.capacity() as usize {
            return;
        }
        if !self.is_allocated() {
            // Nothing is stored: only the capacity changes, the storage comes with data.
            self.mask = (capacity - 1) as u32;
            return;
        }
        let mut grown = PayloadRing::new(capacity);
        grown.base = self.base;
        let (a, b) = self.slices(seq, len as usize);
        grown.write(seq, a);
        grown.write(seq + a.len() as u32, b);
        *self = grown;
    }

    /// Copies `data` into the ring starting at the byte for `seq`. `data` longer than the ring
    /// is truncated to the ring's capacity (callers bound it by the window first).
    #[inline]
    pub(crate) fn write(&mut self, seq: SeqNumber, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        // The callers attach storage from the pool first; this is the fallback.
        self.attach(None);
        let data = &data[..data.len().min(self.bytes.len())];
        let start = self.index(seq);
        let first = data.len().min(self.bytes.len() - start);
        self.bytes[start..start + first].copy_from_slice(&data[..first]);
        if first < data.len() {
            // Only a write across the ring's end has a second part; skipping the empty
            // copy saves a library call per segment.
            self.bytes[..data.len() - first].copy_from_slice(&data[first..]);
        }
    }

    /// Copies bytes starting at the byte for `seq` into `out` (at most the ring's capacity).
    #[inline]
    pub(crate) fn read(&self, seq: SeqNumber, out: &mut [u8]) {
        let len = out.len().min(self.bytes.len());
        if len == 0 {
            // Also an unallocated ring, whose index would lie past its empty storage.
            return;
        }
        let start = self.index(seq);
        let first = len.min(self.bytes.len() - start);
        out[..first].copy_from_slice(&self.bytes[start..start + first]);
        if first < len {
            out[first..len].copy_from_slice(&self.bytes[..len - first]);
        }
    }

    /// The (up to two) contiguous slices for `len` bytes from `seq`, to fill in place
    /// (storage must be attached; at most the ring's capacity).
    pub(crate) fn slices_mut(&mut self, seq: SeqNumber, len: usize) -> (&mut [u8], &mut [u8]) {
        let len = len.min(self.bytes.len());
        if len == 0 {
            return (&mut [], &mut []);
        }
        let start = self.index(seq);
        let first = len.min(self.bytes.len() - start);
        let (low, high) = self.bytes.split_at_mut(start);
        (&mut high[..first], &mut low[..len - first])
    }

    /// The (up to two) contiguous slices holding `len` bytes from `seq`, for zero-copy readers.
    pub(crate) fn slices(&self, seq: SeqNumber, len: usize) -> (&[u8], &[u8]) {
        let len = len.min(self.bytes.len());
        if len == 0 {
            return (&[], &[]);
        }
        let start = self.index(seq);
        let first = len.min(self.bytes.len() - start);
        (
            &self.bytes[start..start + first],
            &self.bytes[..len - first],
        )
    }
}

/// The payload rings of a connection and the application's positions in them.
pub(crate) struct ConnBuffers {
    pub rx: PayloadRing,
    pub tx: PayloadRing,
    /// Next byte the application reads.
    pub rx_head: SeqNumber,
    /// End of in-order data delivered by the post-processor.
    pub rx_tail: SeqNumber,
    /// End of data acknowledged by the peer (notified by the post-processor).
    pub tx_head: SeqNumber,
    /// End of data the application has written.
    pub tx_tail: SeqNumber,
    /// The peer's FIN follows rx_tail.
    pub eof: bool,
    /// The application wants a WRITABLE event.
    pub want_writable: bool,
    /// Header-only TX: the send buffer is the caller's (`tx` holds no storage while the
    /// source does); None for the core's own ring.
    pub ext: Option<ExternalTx>,
}

impl ConnBuffers {
    pub(crate) fn new(rx: PayloadRing, tx: PayloadRing) -> Self {
        ConnBuffers {
            rx,
            tx,
            rx_head: SeqNumber(0),
            rx_tail: SeqNumber(0),
            tx_head: SeqNumber(0),
            tx_tail: SeqNumber(0),
            eof: false,
            want_writable: false,
            ext: None,
        }
    }

    /// Whether the send buffer is a caller's source (header-only TX).
    #[inline]
    pub(crate) fn external(&self) -> bool {
        self.ext.as_ref().is_some_and(|e| e.source.is_some())
    }

    /// The send buffer's size: the caller's source's, or the core's ring's.
    #[inline]
    pub(crate) fn tx_capacity(&self) -> usize {
        match self.ext.as_ref().and_then(|e| e.source.as_ref()) {
            Some(src) => src.capacity().min(1 << 30) as usize,
            None => self.tx.capacity() as usize,
        }
    }

    /// Bytes the application wrote that the peer has not acknowledged.
    #[inline]
    pub(crate) fn tx_used(&self) -> usize {
        self.tx_tail.diff(self.tx_head) as u32 as usize
    }

    /// What `send` may add now: the ring, used only up to `limit` (see `tx_limit`).
    #[inline]
    pub(crate) fn tx_room(&self, limit: usize) -> usize {
        if self.external() {
            // The caller's buffer is its own memory: its size is the only limit.
            return self.tx_capacity().saturating_sub(self.tx_used());
        }
        (self.tx.capacity() as usize)
            .min(limit)
            .saturating_sub(self.tx_used())
    }

    /// Empty rings positioned at `rcv`/`snd`: nothing to read, nothing unacknowledged, and
    /// each ring's first byte for its first sequence number.
    pub(crate) fn reset_at(&mut self, rcv: SeqNumber, snd: SeqNumber) {
        self.rx.rebase(rcv);
        self.tx.rebase(snd);
        self.rx_head = rcv;
        self.rx_tail = rcv;
        self.tx_head = snd;
        self.tx_tail = snd;
        self.eof = false;
        self.want_writable = false;
    }
}

/// Storages a [`RingPool`] keeps: what a burst of connections took and gave back is reused
/// by the next burst rather than freed to the allocator, whose fragments would make a second
/// burst take as much again (lab test interop_memory: 6,000 connections twice); bounded
/// (8,192 each way: 512 MiB at the default 64 KiB initial rings, a peak the engine already
/// held). Idle connections hold no storage; the pool holds only what drained ones gave back.
pub(crate) const POOL_RINGS: usize = 8192;

/// Storage of drained initial-size rings, kept for the next ring that needs it: active
/// connections then take and give back storage without allocating (or zeroing), and idle
/// ones hold none. At most `max` are kept; more are freed.
pub(crate) struct RingPool {
    free: Vec<Box<[u8]>>,
    /// The storage size kept (the initial ring size).
    size: usize,
    max: usize,
}

impl RingPool {
    /// A pool of at most `max` storages of `size` bytes (rounded up as rings are).
    pub(crate) fn new(size: usize, max: usize) -> Self {
        RingPool {
            free: Vec::with_capacity(max),
            size: size.clamp(1, 1 << 30).next_power_of_two(),
            max,
        }
    }

    /// Gives `ring` storage, from the pool if it has some of the ring's size.
    #[inline]
    pub(crate) fn attach(&mut self, ring: &mut PayloadRing) {
        if ring.is_allocated() {
            return;
        }
        let storage = if ring.capacity() as usize == self.size {
            self.free.pop()
        } else {
            None
        };
        ring.attach(storage);
    }

    /// Takes `ring`'s storage if the ring is at the pool's size; a grown ring keeps its
    /// storage (its connection is busy; pressure and close give it back).
    #[inline]
    pub(crate) fn detach(&mut self, ring: &mut PayloadRing) {
        if ring.capacity() as usize != self.size {
            return;
        }
        if let Some(storage) = ring.detach() {
            if self.free.len() < self.max {
                self.free.push(storage);
            }
        }
    }

    /// Bytes the pool keeps.
    pub(crate) fn bytes(&self) -> usize {
        self.free.len() * self.size
    }
}

/// A receive buffer's limit with `open` connections in the table: `rx_buffer`, or an equal
/// share of `rx_memory` if smaller, never below the initial size.
pub(crate) fn rx_limit(cfg: &Config, open: usize) -> usize {
    let share = cfg.rx_memory / open.max(1);
    let floor = cfg.rx_buffer_initial.min(cfg.rx_buffer);
    cfg.rx_buffer.min(share).max(floor)
}

/// A send buffer's limit with `open` connections in the table: `tx_buffer`, or an equal share
/// of `tx_memory` if smaller, never below the initial size.
pub(crate) fn tx_limit(cfg: &Config, open: usize) -> usize {
    let share = cfg.tx_memory / open.max(1);
    let floor = cfg.tx_buffer_initial.min(cfg.tx_buffer);
    cfg.tx_buffer.min(share).max(floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_across_the_end_and_across_sequence_wrap() {
        let mut ring = PayloadRing::new(8);
        let seq = SeqNumber(u32::MAX - 2);
        ring.write(seq, b"abcdef");
        let mut out = [0u8; 6];
        ring.read(seq, &mut out);
        assert_eq!(&out, b"abcdef");
        let (a, b) = ring.slices(seq, 6);
        assert_eq!([a, b].concat(), b"abcdef");
        assert_eq!(a.len(), 3, "the first slice ends at the ring's end");
    }

    #[test]
    fn growing_keeps_live_bytes_at_their_sequence_numbers() {
        let mut ring = PayloadRing::new(8);
        // Live bytes that wrap the small ring's end and the sequence space.
        let seq = SeqNumber(u32::MAX - 1);
        ring.write(seq, b"wxyz12");
        ring.grow(seq, 6, 20);
        assert_eq!(ring.capacity(), 32);
        let mut out = [0u8; 6];
        ring.read(seq, &mut out);
        assert_eq!(&out, b"wxyz12");
        // Room for more behind them, without overwriting.
        ring.write(seq + 6u32, b"more");
        let mut out = [0u8; 10];
        ring.read(seq, &mut out);
        assert_eq!(&out, b"wxyz12more");
        ring.grow(seq, 10, 16);
        assert_eq!(ring.capacity(), 32, "never shrinks");
    }

    #[test]
    fn a_rebased_ring_starts_each_connection_at_its_first_byte() {
        let mut ring = PayloadRing::new(16);
        let isn = SeqNumber(0x8765_4329);
        ring.rebase(isn);
        ring.write(isn, b"abc");
        assert_eq!(
            &ring.bytes[..3],
            b"abc",
            "the first bytes, whatever the ISN"
        );
        // Growing keeps the base: bytes stay readable at their sequence numbers.
        ring.grow(isn, 3, 64);
        let mut out = [0u8; 3];
        ring.read(isn, &mut out);
        assert_eq!(&out, b"abc");
        assert_eq!(&ring.bytes[..3], b"abc");
    }

    #[test]
    fn an_unallocated_ring_has_its_capacity_and_takes_storage_with_data() {
        let mut ring = PayloadRing::unallocated(5000);
        assert_eq!(ring.capacity(), 8192);
        assert_eq!(ring.allocated(), 0);
        let seq = SeqNumber(0x1234_5678);
        ring.rebase(seq);
        // Reading nothing from no storage, wherever, neither panics nor allocates.
        ring.read(seq + 77u32, &mut []);
        assert_eq!(ring.slices(seq + 9u32, 100), (&[][..], &[][..]));
        ring.grow(seq, 0, 16384);
        assert_eq!((ring.capacity(), ring.allocated()), (16384, 0));
        ring.write(seq + 3u32, b"xyz");
        assert_eq!(ring.allocated(), 16384);
        let mut out = [0u8; 3];
        ring.read(seq + 3u32, &mut out);
        assert_eq!(&out, b"xyz");
    }

    #[test]
    fn the_pool_recycles_initial_size_storage_and_is_bounded() {
        let mut pool = RingPool::new(4096, 1);
        let mut a = PayloadRing::unallocated(4096);
        let mut b = PayloadRing::unallocated(4096);
        pool.attach(&mut a);
        pool.attach(&mut b);
        a.write(SeqNumber(0), b"old");
        pool.detach(&mut a);
        pool.detach(&mut b);
        assert_eq!((a.allocated(), b.allocated()), (0, 0));
        assert_eq!(pool.bytes(), 4096, "one kept, the other freed");
        assert_eq!(
            a.capacity(),
            4096,
            "capacity stays: the window does not shrink"
        );
        let mut c = PayloadRing::unallocated(4096);
        pool.attach(&mut c);
        assert_eq!((c.allocated(), pool.bytes()), (4096, 0));
        // A grown ring keeps its storage.
        let mut big = PayloadRing::unallocated(8192);
        pool.attach(&mut big);
        pool.detach(&mut big);
        assert_eq!(big.allocated(), 8192);
    }

    #[test]
    fn capacity_rounds_up_to_power_of_two() {
        assert_eq!(PayloadRing::new(5000).capacity(), 8192);
        let mut ring = PayloadRing::new(4);
        ring.write(SeqNumber(0), b"123456789");
        let mut out = [0u8; 4];
        ring.read(SeqNumber(0), &mut out);
        assert_eq!(
            &out, b"1234",
            "data longer than the ring is truncated, never wrapped over itself"
        );
    }
}
