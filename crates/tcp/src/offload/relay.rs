//! A bounded FIFO of whole frames the splice stage rewrote, waiting for `poll_transmit`:
//! slots of one frame each, allocated as the queue first grows and reused after.

/// The queue.
pub(crate) struct RelayQueue {
    /// A ring of `capacity` slots, each holding a buffer once first used.
    slots: Vec<Option<Box<[u8]>>>,
    /// Per slot: frame length and the GSO size it asks the device for (0: none).
    meta: Vec<(u32, u16)>,
    head: usize,
    len: usize,
    frame_max: usize,
    /// Buffers of the two sizes not in a slot that needs them: a large frame takes a big
    /// one into its slot, and the slot's small one waits here (and the other way round).
    small_free: Vec<Box<[u8]>>,
    big_free: Vec<Box<[u8]>>,
    /// Big buffers allocated, and how many may be.
    big: usize,
    big_max: usize,
}

/// The size of a big buffer: a 64 KiB IP packet and its Ethernet header.
const BIG: usize = 65_535 + 18;

impl RelayQueue {
    /// A queue of at most `capacity` frames of up to `frame_max` bytes, of which up to
    /// `big_max` may be large (up to 64 KiB of IP packet).
    pub(crate) fn new(capacity: usize, frame_max: usize, big_max: usize) -> Self {
        RelayQueue {
            slots: (0..capacity).map(|_| None).collect(),
            meta: vec![(0, 0); capacity],
            head: 0,
            len: 0,
            frame_max,
            small_free: Vec::new(),
            big_free: Vec::new(),
            big: 0,
            big_max,
        }
    }

    /// Frames waiting.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the oldest frame is a large one for the device to segment (only
    /// `poll_transmit_offload` may send it).
    pub(crate) fn next_is_large(&self) -> bool {
        self.len != 0 && self.meta[self.head].1 != 0
    }

    /// Whether another frame would be refused.
    pub(crate) fn is_full(&self) -> bool {
        self.len == self.slots.len()
    }

    /// Writes a frame of up to `size` bytes into the next free slot with `build`, which
    /// returns its length; `gso_size` is what the device is to cut it into (0: send as
    /// is). False (nothing queued) if the queue is full, no big buffer may be had for a
    /// large frame, or `build` declines.
    pub(crate) fn push_with(
        &mut self,
        size: usize,
        gso_size: u16,
        build: impl FnOnce(&mut [u8]) -> Option<usize>,
    ) -> bool {
        let capacity = self.slots.len();
        if self.len == capacity || size > BIG {
            return false;
        }
        let at = (self.head + self.len) % capacity;
        let big = size > self.frame_max;
        let fits = self.slots[at]
            .as_ref()
            .is_some_and(|b| (b.len() > self.frame_max) == big);
        if !fits {
            let buffer = if big {
                match self.big_free.pop() {
                    Some(b) => b,
                    None if self.big < self.big_max => {
                        self.big += 1;
                        vec![0; BIG].into_boxed_slice()
                    }
                    None => return false,
                }
            } else {
                self.small_free
                    .pop()
                    .unwrap_or_else(|| vec![0; self.frame_max].into_boxed_slice())
            };
            if let Some(old) = self.slots[at].replace(buffer) {
                if old.len() > self.frame_max {
                    self.big_free.push(old);
                } else {
                    self.small_free.push(old);
                }
            }
        }
        let slot = self.slots[at].as_mut().expect("filled above");
        match build(slot) {
            Some(n) if n <= slot.len() => {
                self.meta[at] = (n as u32, gso_size);
                self.len += 1;
                true
            }
            _ => false,
        }
    }

    /// Moves the oldest frame into `out`, returning its length and GSO size (None if empty
    /// or `out` is too small; nothing is taken then).
    pub(crate) fn pop_into(&mut self, out: &mut [u8]) -> Option<(usize, u16)> {
        if self.len == 0 {
            return None;
        }
        let (n, gso) = self.meta[self.head];
        let n = n as usize;
        let frame = self.slots[self.head].as_ref()?;
        if out.len() < n {
            return None;
        }
        out[..n].copy_from_slice(&frame[..n]);
        if frame.len() > self.frame_max {
            // Big buffers go back to their pool at once: the next large frame may land in
            // any slot.
            if let Some(b) = self.slots[self.head].take() {
                self.big_free.push(b);
            }
        }
        self.head = (self.head + 1) % self.slots.len();
        self.len -= 1;
        Some((n, gso))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_come_out_in_order_and_the_queue_is_bounded() {
        let mut q = RelayQueue::new(3, 16, 1);
        let mut out = [0u8; 16];
        for round in 0..5u8 {
            for i in 0..3u8 {
                assert!(q.push_with(1, 0, |b| {
                    b[0] = round * 10 + i;
                    Some(1 + i as usize)
                }));
            }
            assert!(!q.push_with(1, 0, |_| Some(1)), "full");
            for i in 0..3u8 {
                assert_eq!(q.pop_into(&mut out), Some((1 + i as usize, 0)));
                assert_eq!(out[0], round * 10 + i);
            }
            assert_eq!(q.pop_into(&mut out), None);
            // Interleaved: one in, one out, across the wrap.
            assert!(q.push_with(2, 0, |b| {
                b[0] = 99;
                Some(2)
            }));
            assert_eq!(q.pop_into(&mut out), Some((2, 0)));
            assert_eq!(out[0], 99);
        }
        assert!(
            q.slots.iter().all(Option::is_some),
            "every slot used, none added"
        );
        assert_eq!(q.slots.len(), 3);
        assert!(
            !q.push_with(16, 0, |_| Some(17)),
            "a frame over its slot is refused"
        );
        assert_eq!(q.len(), 0);
        // One big buffer may be had, not two; once sent it serves the next large frame,
        // whichever slot that lands in.
        let mut big = vec![0u8; BIG];
        assert!(q.push_with(100, 60, |_| Some(100)));
        assert!(
            !q.push_with(100, 60, |_| Some(100)),
            "the big buffers' budget"
        );
        assert!(q.push_with(10, 0, |_| Some(10)), "a small frame still fits");
        assert_eq!(q.pop_into(&mut big), Some((100, 60)));
        assert!(
            q.push_with(5000, 60, |_| Some(5000)),
            "the big buffer again"
        );
        assert_eq!(q.pop_into(&mut big), Some((10, 0)));
        assert_eq!(q.pop_into(&mut big), Some((5000, 60)));
        assert_eq!(q.big, 1);
    }
}
