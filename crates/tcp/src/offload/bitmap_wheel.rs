//! AccelTCP's timer bitmap wheel (acceltcp.txt 4.2, Figure 6): N bitmaps, one per tick of a
//! rotating horizon, each with one bit per flow id. Registering a timeout sets one bit; an
//! expired tick's bitmap is scanned a word at a time (`trailing_zeros`) and its flows fire.
//!
//! A timeout longer than the horizon keeps its absolute deadline beside the bit (the paper's
//! per-flow round counter, derived rather than counted down), so a scan leaves a flow whose
//! round has not come. Time that jumps by more than the horizon visits every bitmap once.
//!
//! Memory: N bits per flow id (bitmaps grow to the highest id registered in them), a 4-byte
//! deadline per flow id, and a count and a summary bit per tick for [`BitmapWheel::next_due`].

/// The wheel. Flow ids are small dense integers (the teardown stage's flow indices).
#[derive(Debug)]
pub(crate) struct BitmapWheel {
    /// One bitmap per tick of the horizon.
    bitmaps: Box<[Vec<u64>]>,
    /// Flows registered in each bitmap.
    counts: Box<[u32]>,
    /// Bit `i`: bitmap `i` is not empty.
    summary: Box<[u64]>,
    /// Per flow id: its deadline tick (wrapping), or [`NONE`] if not registered.
    deadline: Vec<u32>,
    /// The last tick whose bitmap was scanned.
    current: u64,
    /// Nanoseconds per tick.
    tick_ns: u64,
    /// Registered flows.
    len: usize,
}

/// A flow that is not registered.
const NONE: u32 = u32::MAX;

impl BitmapWheel {
    /// A wheel of `slots` bitmaps (rounded up to a power of two, at least 64) of `tick_ns`
    /// nanoseconds each, starting at time `now_ns`.
    pub(crate) fn new(slots: usize, tick_ns: u64, now_ns: u64) -> Self {
        let slots = slots.clamp(64, 1 << 16).next_power_of_two();
        let tick_ns = tick_ns.max(1);
        BitmapWheel {
            bitmaps: (0..slots).map(|_| Vec::new()).collect(),
            counts: vec![0; slots].into_boxed_slice(),
            summary: vec![0; slots / 64].into_boxed_slice(),
            deadline: Vec::new(),
            current: now_ns / tick_ns,
            tick_ns,
            len: 0,
        }
    }

    /// Registered flows.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The tick `at_ns` falls in, rounded up: a timeout never fires early.
    fn tick_at_or_after(&self, at_ns: u64) -> u64 {
        at_ns.div_ceil(self.tick_ns)
    }

    fn slot_of(&self, tick: u64) -> usize {
        tick as usize & (self.bitmaps.len() - 1)
    }

    /// Registers `flow` to fire at `at_ns` (moving it if it was registered). A deadline at
    /// or before the last scanned tick fires at the next one.
    pub(crate) fn schedule(&mut self, flow: u32, at_ns: u64) {
        self.cancel(flow);
        // A deadline not after the last scanned tick fires at the next one; one further
        // than half the u32 tick space is held to that (its round would read as past).
        let tick = self
            .tick_at_or_after(at_ns)
            .clamp(self.current + 1, self.current + (i32::MAX as u64));
        let f = flow as usize;
        if self.deadline.len() <= f {
            self.deadline.resize(f + 1, NONE);
        }
        // The stored deadline is the tick's low 32 bits; NONE marks "not registered", so a
        // deadline whose low bits are NONE moves one tick later (never earlier).
        let (tick, low) = match tick as u32 {
            NONE => (tick + 1, 0),
            low => (tick, low),
        };
        self.deadline[f] = low;
        let slot = self.slot_of(tick);
        let (word, bit) = (f / 64, f % 64);
        let bitmap = &mut self.bitmaps[slot];
        if bitmap.len() <= word {
            bitmap.resize(word + 1, 0);
        }
        bitmap[word] |= 1 << bit;
        self.counts[slot] += 1;
        self.summary[slot / 64] |= 1 << (slot % 64);
        self.len += 1;
    }

    /// Unregisters `flow` (nothing if it was not registered).
    pub(crate) fn cancel(&mut self, flow: u32) {
        let f = flow as usize;
        let Some(&tick) = self.deadline.get(f) else {
            return;
        };
        if tick == NONE {
            return;
        }
        self.deadline[f] = NONE;
        let slot = self.slot_of(tick as u64);
        self.bitmaps[slot][f / 64] &= !(1 << (f % 64));
        self.unregistered(slot);
    }

    fn unregistered(&mut self, slot: usize) {
        self.counts[slot] -= 1;
        if self.counts[slot] == 0 {
            self.summary[slot / 64] &= !(1 << (slot % 64));
        }
        self.len -= 1;
    }

    /// Whether `flow` is registered.
    pub(crate) fn is_scheduled(&self, flow: u32) -> bool {
        self.deadline.get(flow as usize).is_some_and(|&t| t != NONE)
    }

    /// Scans the bitmaps of every tick up to `now_ns` and appends the flows whose deadline
    /// came to `expired` (unregistering them). Each bitmap is scanned at most once per call.
    pub(crate) fn expire(&mut self, now_ns: u64, expired: &mut Vec<u32>) {
        let now = now_ns / self.tick_ns;
        if now <= self.current {
            return;
        }
        let steps = (now - self.current).min(self.bitmaps.len() as u64);
        for step in 1..=steps {
            let slot = self.slot_of(self.current + step);
            if self.counts[slot] != 0 {
                self.scan(slot, now as u32, expired);
            }
        }
        self.current = now;
    }

    /// Fires the flows of bitmap `slot` whose deadline is at or before tick `now`.
    fn scan(&mut self, slot: usize, now: u32, expired: &mut Vec<u32>) {
        for word in 0..self.bitmaps[slot].len() {
            let mut bits = self.bitmaps[slot][word];
            while bits != 0 {
                let bit = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let flow = word * 64 + bit;
                // A later round of the wheel stays registered.
                if now.wrapping_sub(self.deadline[flow]) as i32 >= 0 {
                    self.deadline[flow] = NONE;
                    self.bitmaps[slot][word] &= !(1 << bit);
                    self.unregistered(slot);
                    expired.push(flow as u32);
                }
            }
        }
    }

    /// When [`BitmapWheel::expire`] next has a bitmap to scan: the start of the next
    /// non-empty tick (a flow on a later round wakes the wheel once per rotation).
    pub(crate) fn next_due_ns(&self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let n = self.bitmaps.len();
        let start = self.slot_of(self.current.wrapping_add(1));
        // Search the summary from `start` to the end, then from 0: at most N/64 + 1 words.
        let found = self
            .first_set_from(start, n)
            .or_else(|| self.first_set_from(0, start))?;
        let distance = (found + n - start) % n + 1;
        let tick = self.current + distance as u64;
        Some(tick * self.tick_ns)
    }

    /// The first non-empty bitmap index in `[from, to)`.
    fn first_set_from(&self, from: usize, to: usize) -> Option<usize> {
        let mut i = from;
        while i < to {
            let word = self.summary[i / 64] >> (i % 64);
            if word != 0 {
                let at = i + word.trailing_zeros() as usize;
                return (at < to).then_some(at);
            }
            i = (i / 64 + 1) * 64;
        }
        None
    }

    /// Bytes the wheel holds (bitmaps, counts, summary, deadlines).
    pub(crate) fn memory_bytes(&self) -> usize {
        self.bitmaps.iter().map(|b| b.capacity() * 8).sum::<usize>()
            + self.counts.len() * 4
            + self.summary.len() * 8
            + self.deadline.capacity() * 4
    }

    /// Checks the wheel's bookkeeping: every registered flow's bit is set in its deadline's
    /// bitmap and nowhere else, and the counts and summary agree with the bitmaps.
    pub(crate) fn check(&self) -> Result<(), &'static str> {
        let mut total = 0usize;
        for (slot, bitmap) in self.bitmaps.iter().enumerate() {
            let mut ones = 0u32;
            for (word, &bits) in bitmap.iter().enumerate() {
                ones += bits.count_ones();
                let mut b = bits;
                while b != 0 {
                    let flow = word * 64 + b.trailing_zeros() as usize;
                    b &= b - 1;
                    match self.deadline.get(flow) {
                        Some(&t) if t != NONE && self.slot_of(t as u64) == slot => {}
                        _ => return Err("a bit without a matching deadline"),
                    }
                }
            }
            if ones != self.counts[slot] {
                return Err("a bitmap's count disagrees with its bits");
            }
            let summary = self.summary[slot / 64] >> (slot % 64) & 1 == 1;
            if summary != (ones != 0) {
                return Err("the summary disagrees with a bitmap");
            }
            total += ones as usize;
        }
        let registered = self.deadline.iter().filter(|&&t| t != NONE).count();
        if total != self.len || registered != self.len {
            return Err("the wheel's length disagrees with its bits");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    const TICK: u64 = 1_000_000;

    #[test]
    fn a_timeout_fires_at_its_tick_and_not_before() {
        let mut w = BitmapWheel::new(64, TICK, 0);
        w.schedule(3, 5 * TICK + 1);
        let mut out = Vec::new();
        w.expire(5 * TICK, &mut out);
        assert!(out.is_empty(), "rounded up to tick 6");
        assert_eq!(w.next_due_ns(), Some(6 * TICK));
        w.expire(6 * TICK, &mut out);
        assert_eq!(out, [3]);
        assert_eq!(w.len(), 0);
        assert_eq!(w.next_due_ns(), None);
        w.check().unwrap();
    }

    #[test]
    fn a_timeout_past_the_horizon_waits_for_its_round() {
        let mut w = BitmapWheel::new(64, TICK, 0);
        w.schedule(7, 200 * TICK); // three rotations ahead
        let mut out = Vec::new();
        for t in 1..200 {
            w.expire(t * TICK, &mut out);
            assert!(out.is_empty(), "fired early at tick {t}");
        }
        w.expire(200 * TICK, &mut out);
        assert_eq!(out, [7]);
    }

    #[test]
    fn a_jump_past_the_horizon_fires_every_due_flow_once() {
        let mut w = BitmapWheel::new(64, TICK, 0);
        for f in 0..100 {
            w.schedule(f, (f as u64 + 1) * 3 * TICK);
        }
        let mut out = Vec::new();
        w.expire(150 * TICK, &mut out);
        out.sort();
        assert_eq!(out, (0..50).collect::<Vec<_>>());
        w.check().unwrap();
        assert_eq!(w.len(), 50);
    }

    #[test]
    fn cancel_and_reschedule_move_the_bit() {
        let mut w = BitmapWheel::new(64, TICK, 0);
        w.schedule(130, 10 * TICK);
        w.schedule(130, 20 * TICK);
        assert_eq!(w.len(), 1);
        w.check().unwrap();
        let mut out = Vec::new();
        w.expire(15 * TICK, &mut out);
        assert!(out.is_empty());
        w.cancel(130);
        w.cancel(130);
        assert_eq!(w.len(), 0);
        w.check().unwrap();
        w.expire(25 * TICK, &mut out);
        assert!(out.is_empty());
    }

    #[derive(Clone, Debug)]
    enum Op {
        Schedule {
            flow: u32,
            after_ticks: u16,
            offset_ns: u32,
        },
        Cancel {
            flow: u32,
        },
        Advance {
            ticks: u16,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u32..300, 0u16..400, 0u32..1_000_000).prop_map(|(flow, after_ticks, offset_ns)| {
                Op::Schedule {
                    flow,
                    after_ticks,
                    offset_ns,
                }
            }),
            (0u32..300).prop_map(|flow| Op::Cancel { flow }),
            (0u16..150).prop_map(|ticks| Op::Advance { ticks }),
        ]
    }

    proptest! {
        /// The wheel expires exactly the flows a reference model of absolute deadlines
        /// (rounded up to the tick) says are due, never early and never twice.
        #[test]
        fn expires_exactly_what_a_reference_model_says(
            ops in prop::collection::vec(op(), 1..200),
            start in 0u64..1_000_000_000,
        ) {
            let mut w = BitmapWheel::new(64, TICK, start);
            let mut model: BTreeMap<u32, u64> = BTreeMap::new();
            let mut now = start;
            for op in ops {
                match op {
                    Op::Schedule { flow, after_ticks, offset_ns } => {
                        let at = now + after_ticks as u64 * TICK + offset_ns as u64;
                        w.schedule(flow, at);
                        // Due at the first scanned tick at or after `at`, and never on the
                        // tick already scanned.
                        let scanned = now / TICK;
                        let tick = at.div_ceil(TICK).max(scanned + 1);
                        model.insert(flow, tick);
                    }
                    Op::Cancel { flow } => {
                        w.cancel(flow);
                        model.remove(&flow);
                    }
                    Op::Advance { ticks } => {
                        now += ticks as u64 * TICK;
                        let mut got = Vec::new();
                        w.expire(now, &mut got);
                        got.sort();
                        let due: Vec<u32> = model
                            .iter()
                            .filter(|&(_, &t)| t <= now / TICK)
                            .map(|(&f, _)| f)
                            .collect();
                        for f in &due {
                            model.remove(f);
                        }
                        prop_assert_eq!(got, due);
                    }
                }
                prop_assert_eq!(w.len(), model.len());
                prop_assert!(w.check().is_ok());
                if let Some(next) = w.next_due_ns() {
                    let earliest = model.values().min().copied().unwrap();
                    // Never after the earliest deadline (a later round may wake it sooner).
                    prop_assert!(next <= earliest * TICK);
                    prop_assert!(next > (now / TICK) * TICK);
                }
            }
        }
    }
}
