//! The transmit batch every copying backend shares (AF_PACKET without a ring, TAP, the
//! in-memory pair, the simulator's wire): `capacity` slots of one size in one buffer
//! allocated when the device opens, the frames queued in them, and how far a flush got.
//!
//! A transmit callback writes into [`TxBatch::next_slot`]; the device checks what it wrote
//! and [`TxBatch::commit`]s it; a flush sends [`TxBatch::frame`]s from [`TxBatch::head`]
//! on, [`TxBatch::advance`]s past what went, and [`TxBatch::reset_if_sent`] starts over once
//! all did. Nothing is allocated per frame.

/// One queued frame: its length in its slot and the segment size it asks for (0: none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Queued {
    len: usize,
    gso_size: u16,
}

/// Preallocated transmit slots and the frames queued in them (see the module docs).
#[derive(Debug)]
pub struct TxBatch {
    buf: Box<[u8]>,
    slot: usize,
    queued: Box<[Queued]>,
    /// The first queued frame not yet sent.
    head: usize,
    /// Slots in use (queued frames are `head..count`).
    count: usize,
}

impl TxBatch {
    /// `capacity` slots of `slot` bytes each.
    pub fn new(capacity: usize, slot: usize) -> Self {
        TxBatch {
            buf: vec![0u8; capacity * slot].into_boxed_slice(),
            slot,
            queued: vec![Queued::default(); capacity].into_boxed_slice(),
            head: 0,
            count: 0,
        }
    }

    /// Bytes per slot.
    pub fn slot_len(&self) -> usize {
        self.slot
    }

    /// Whether every slot holds a frame.
    pub fn is_full(&self) -> bool {
        self.count == self.queued.len()
    }

    /// Frames queued and not yet sent.
    pub fn pending(&self) -> usize {
        self.count - self.head
    }

    /// The first queued frame not yet sent (its index).
    pub fn head(&self) -> usize {
        self.head
    }

    /// Slots in use: frames `head()..count()` wait to be sent.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The next free slot to write a frame into, or None when the batch is full.
    pub fn next_slot(&mut self) -> Option<&mut [u8]> {
        if self.is_full() {
            return None;
        }
        let start = self.count * self.slot;
        Some(&mut self.buf[start..start + self.slot])
    }

    /// Queues what was written into the next slot: `len` bytes (the slot's prefix), to be
    /// cut into segments of `gso_size` (0: sent as it is). Returns the slot's index.
    pub fn commit(&mut self, len: usize, gso_size: u16) -> usize {
        let i = self.count;
        self.queued[i] = Queued { len, gso_size };
        self.count += 1;
        i
    }

    /// The `i`-th queued frame's bytes and segment size.
    pub fn frame(&self, i: usize) -> (&[u8], u16) {
        let Queued { len, gso_size } = self.queued[i];
        let start = i * self.slot;
        (&self.buf[start..start + len], gso_size)
    }

    /// The `i`-th queued frame's length.
    pub fn len_of(&self, i: usize) -> usize {
        self.queued[i].len
    }

    /// Where the `i`-th slot starts in memory (null if there is none), for scatter-gather
    /// descriptors set up once at open; the buffer never moves.
    pub fn slot_ptr(&mut self, i: usize) -> *mut u8 {
        self.buf
            .get_mut(i * self.slot..)
            .map_or(std::ptr::null_mut(), <[u8]>::as_mut_ptr)
    }

    /// Marks the next `n` queued frames sent (or dropped by the kernel).
    pub fn advance(&mut self, n: usize) {
        self.head = (self.head + n).min(self.count);
    }

    /// Empties the batch once every queued frame is sent; a flush that stopped early keeps
    /// the rest for the next one.
    pub fn reset_if_sent(&mut self) {
        if self.head == self.count {
            self.clear();
        }
    }

    /// Forgets every queued frame; returns how many were not sent.
    pub fn clear(&mut self) -> usize {
        let unsent = self.pending();
        self.head = 0;
        self.count = 0;
        unsent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_fill_send_in_order_and_start_over_when_all_went() {
        let mut b = TxBatch::new(2, 8);
        b.next_slot().unwrap()[..3].copy_from_slice(b"abc");
        assert_eq!(b.commit(3, 0), 0);
        b.next_slot().unwrap()[..2].copy_from_slice(b"de");
        assert_eq!(b.commit(2, 7), 1);
        assert!(b.is_full() && b.next_slot().is_none());
        assert_eq!(b.frame(0), (&b"abc"[..], 0));
        assert_eq!(b.frame(1), (&b"de"[..], 7));
        b.advance(1);
        b.reset_if_sent();
        assert_eq!((b.head(), b.count(), b.pending()), (1, 2, 1));
        b.advance(1);
        b.reset_if_sent();
        assert_eq!((b.head(), b.count(), b.pending()), (0, 0, 0));
        assert!(!b.is_full());
    }

    #[test]
    fn a_batch_without_slots_is_always_full() {
        let mut b = TxBatch::new(0, 1514);
        assert!(b.is_full() && b.next_slot().is_none());
        assert!(b.slot_ptr(1).is_null());
    }
}
