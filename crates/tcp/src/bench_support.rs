//! The core's two timer structures behind thin wrappers, for crates/tcp/benches/timers.rs
//! only: the teardown stage's [`Wheel`] (offload/bitmap_wheel.rs) and the connection
//! slots' [`Heap`] (timer.rs). Hidden from the docs and not part of the API; the real types
//! stay crate-private.

use crate::offload::bitmap_wheel::BitmapWheel;
use crate::time::Instant;
use crate::timer::TimerQueue;

/// The timer bitmap wheel (acceltcp.txt 4.2, Figure 6).
#[derive(Debug)]
pub struct Wheel(BitmapWheel);

impl Wheel {
    /// `slots` bitmaps of `tick_ns` each, starting at `now_ns`.
    pub fn new(slots: usize, tick_ns: u64, now_ns: u64) -> Self {
        Wheel(BitmapWheel::new(slots, tick_ns, now_ns))
    }

    /// Registers (or moves) `flow` to fire at `at_ns`.
    pub fn schedule(&mut self, flow: u32, at_ns: u64) {
        self.0.schedule(flow, at_ns);
    }

    /// Unregisters `flow`.
    pub fn cancel(&mut self, flow: u32) {
        self.0.cancel(flow);
    }

    /// Appends the flows due by `now_ns` to `expired`.
    pub fn expire(&mut self, now_ns: u64, expired: &mut Vec<u32>) {
        self.0.expire(now_ns, expired);
    }

    /// Registered flows.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no flow is registered.
    pub fn is_empty(&self) -> bool {
        self.0.len() == 0
    }
}

/// The connection slots' lazily-updated min-heap of deadlines.
pub struct Heap(TimerQueue);

impl Heap {
    /// A heap for `slots` slots.
    pub fn new(slots: usize) -> Self {
        Heap(TimerQueue::new(slots))
    }

    /// Ensures `slot` is woken no later than `deadline` (a later one is lazy: no push).
    pub fn arm(&mut self, slot: u32, deadline: Instant) {
        self.0.arm(slot, deadline);
    }

    /// Forgets `slot`'s deadline.
    pub fn disarm(&mut self, slot: u32) {
        self.0.disarm(slot);
    }

    /// Pops a slot whose deadline is at or before `now`.
    pub fn pop_expired(&mut self, now: Instant) -> Option<u32> {
        self.0.pop_expired(now)
    }
}
