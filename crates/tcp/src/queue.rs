//! Bounded FIFOs of slot indices: the flow scheduler's run queue and the event queue's
//! order of who has events. Below the data-path and the events, which both use them.

/// A FIFO of connection slots with at most one entry per slot: the scheduler's run queue.
/// Bounded by the slot count, so it never grows.
pub(crate) struct ReadyQueue {
    ring: Box<[u32]>,
    queued: Box<[bool]>,
    head: usize,
    len: usize,
}

impl ReadyQueue {
    /// Creates a queue for `slots` slots.
    pub(crate) fn new(slots: usize) -> Self {
        ReadyQueue {
            ring: vec![0; slots.max(1)].into_boxed_slice(),
            queued: vec![false; slots].into_boxed_slice(),
            head: 0,
            len: 0,
        }
    }

    /// Queues `slot` unless it is already queued.
    #[inline]
    pub(crate) fn push(&mut self, slot: u32) {
        let Some(q) = self.queued.get_mut(slot as usize) else {
            return;
        };
        if *q {
            return;
        }
        *q = true;
        let at = wrap(self.head + self.len, self.ring.len());
        self.ring[at] = slot;
        self.len += 1;
    }

    /// Slots queued, and the bound (for the queue tracepoint).
    pub(crate) fn occupancy(&self) -> (usize, usize) {
        (self.len, self.ring.len())
    }

    /// Takes the slot at the head.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let slot = self.ring[self.head];
        self.head = wrap(self.head + 1, self.ring.len());
        self.len -= 1;
        self.queued[slot as usize] = false;
        Some(slot)
    }
}

/// `i % len` for `i < 2 * len`, the only case ring indices meet: a compare instead of a
/// division on every push and pop.
#[inline(always)]
pub(crate) fn wrap(i: usize, len: usize) -> usize {
    if i >= len {
        i - len
    } else {
        i
    }
}
