//! A bounded FIFO of whole frames the splice stage rewrote, waiting for `poll_transmit`:
//! slots of one frame each, allocated as the queue first grows and reused after.

/// The queue.
pub(crate) struct RelayQueue {
    /// A ring of `capacity` slots, each allocated the first time it is used.
    slots: Vec<Option<Box<[u8]>>>,
    lens: Vec<u16>,
    head: usize,
    len: usize,
    frame_max: usize,
}

impl RelayQueue {
    /// A queue of at most `capacity` frames of up to `frame_max` bytes.
    pub(crate) fn new(capacity: usize, frame_max: usize) -> Self {
        RelayQueue {
            slots: (0..capacity).map(|_| None).collect(),
            lens: vec![0; capacity],
            head: 0,
            len: 0,
            frame_max,
        }
    }

    /// Frames waiting.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether another frame would be refused.
    pub(crate) fn is_full(&self) -> bool {
        self.len == self.slots.len()
    }

    /// Writes a frame into the next free slot with `build`, which returns its length.
    /// False (nothing queued) if the queue is full or `build` declines.
    pub(crate) fn push_with(&mut self, build: impl FnOnce(&mut [u8]) -> Option<usize>) -> bool {
        let capacity = self.slots.len();
        if self.len == capacity {
            return false;
        }
        let at = (self.head + self.len) % capacity;
        let frame_max = self.frame_max;
        let slot = self.slots[at].get_or_insert_with(|| vec![0; frame_max].into_boxed_slice());
        match build(slot) {
            Some(n) if n <= frame_max => {
                self.lens[at] = n as u16;
                self.len += 1;
                true
            }
            _ => false,
        }
    }

    /// Moves the oldest frame into `out`, returning its length (None if empty or `out` is
    /// too small; nothing is taken then).
    pub(crate) fn pop_into(&mut self, out: &mut [u8]) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let n = usize::from(self.lens[self.head]);
        let frame = self.slots[self.head].as_ref()?;
        if out.len() < n {
            return None;
        }
        out[..n].copy_from_slice(&frame[..n]);
        self.head = (self.head + 1) % self.slots.len();
        self.len -= 1;
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_come_out_in_order_and_the_queue_is_bounded() {
        let mut q = RelayQueue::new(3, 16);
        let mut out = [0u8; 16];
        for round in 0..5u8 {
            for i in 0..3u8 {
                assert!(q.push_with(|b| {
                    b[0] = round * 10 + i;
                    Some(1 + i as usize)
                }));
            }
            assert!(!q.push_with(|_| Some(1)), "full");
            for i in 0..3u8 {
                assert_eq!(q.pop_into(&mut out), Some(1 + i as usize));
                assert_eq!(out[0], round * 10 + i);
            }
            assert_eq!(q.pop_into(&mut out), None);
            // Interleaved: one in, one out, across the wrap.
            assert!(q.push_with(|b| {
                b[0] = 99;
                Some(2)
            }));
            assert_eq!(q.pop_into(&mut out), Some(2));
            assert_eq!(out[0], 99);
        }
        assert!(
            q.slots.iter().all(Option::is_some),
            "every slot used, none added"
        );
        assert_eq!(q.slots.len(), 3);
        assert!(
            !q.push_with(|_| Some(17)),
            "a frame over frame_max is refused"
        );
        assert_eq!(q.len(), 0);
    }
}
