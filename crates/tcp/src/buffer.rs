//! Payload rings: per-connection RX and TX buffers addressed by sequence number.
//!
//! A ring's capacity is a power of two no larger than 2^30, so `seq & mask` maps a sequence
//! number to its byte in the ring consistently across sequence wrap-around (2^32 is a multiple
//! of the capacity). This is Laminar's sequence-to-address translation (4.3): the data-path
//! writes a segment straight to its place, in order or not, and never keeps a separate offset.

use sluice_wire::tcp::SeqNumber;

/// A power-of-two byte ring indexed by sequence number.
pub struct PayloadRing {
    bytes: Box<[u8]>,
    mask: u32,
}

impl PayloadRing {
    /// Creates a zeroed ring of at least `capacity` bytes (rounded up to a power of two).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.clamp(1, 1 << 30).next_power_of_two();
        PayloadRing {
            bytes: vec![0; capacity].into_boxed_slice(),
            mask: (capacity - 1) as u32,
        }
    }

    /// Capacity in bytes.
    #[inline]
    pub fn capacity(&self) -> u32 {
        self.mask + 1
    }

    /// Grows the ring to at least `capacity` bytes (a power of two, at most 2^30), keeping
    /// the `len` bytes from `seq` at their sequence numbers. Never shrinks.
    pub fn grow(&mut self, seq: SeqNumber, len: u32, capacity: usize) {
        let capacity = capacity.clamp(1, 1 << 30).next_power_of_two();
        if capacity <= self.bytes.len() {
            return;
        }
        let mut grown = PayloadRing::new(capacity);
        let (a, b) = self.slices(seq, len as usize);
        grown.write(seq, a);
        grown.write(seq + a.len() as u32, b);
        *self = grown;
    }

    /// Copies `data` into the ring starting at the byte for `seq`. `data` longer than the ring
    /// is truncated to the ring's capacity (callers bound it by the window first).
    #[inline]
    pub fn write(&mut self, seq: SeqNumber, data: &[u8]) {
        let data = &data[..data.len().min(self.bytes.len())];
        let start = (seq.0 & self.mask) as usize;
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
    pub fn read(&self, seq: SeqNumber, out: &mut [u8]) {
        let len = out.len().min(self.bytes.len());
        let start = (seq.0 & self.mask) as usize;
        let first = len.min(self.bytes.len() - start);
        out[..first].copy_from_slice(&self.bytes[start..start + first]);
        if first < len {
            out[first..len].copy_from_slice(&self.bytes[..len - first]);
        }
    }

    /// The (up to two) contiguous slices holding `len` bytes from `seq`, for zero-copy readers.
    pub fn slices(&self, seq: SeqNumber, len: usize) -> (&[u8], &[u8]) {
        let len = len.min(self.bytes.len());
        let start = (seq.0 & self.mask) as usize;
        let first = len.min(self.bytes.len() - start);
        (
            &self.bytes[start..start + first],
            &self.bytes[..len - first],
        )
    }
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
