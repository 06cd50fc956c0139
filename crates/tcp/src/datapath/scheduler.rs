//! The flow scheduler's timing wheel: Carousel (Saeed et al., "Carousel: Scalable Traffic
//! Shaping at End Hosts", SIGCOMM 2017), as FlexTOE's flow scheduler uses it (flextoe.txt
//! 3.4: "we enqueue flows into corresponding slots in the time wheel. As the time slot
//! deadline passes, the flow scheduler schedules each flow in the slot for transmission").
//!
//! A rate-limited connection that sent is placed in the slot of its next eligible time; when
//! time reaches a slot, its connections move to the ready queue ([`super::ReadyQueue`]) and
//! are served there like any other. Connections without a rate never enter the wheel (the
//! work-conserving bypass, flextoe.txt 3.4).
//!
//! Bounded and allocation-free after construction: a fixed number of slots of a fixed
//! granularity (`Config::sched_wheel_slots`, `Config::sched_granularity`), and per
//! connection one doubly-linked list node, so a connection is in the wheel at most once and
//! leaves it in O(1). A time beyond the horizon (slots × granularity) is placed in the last
//! slot and re-placed when that slot comes due: never lost, never early. A bitmap of
//! occupied slots finds the next due slot in slots / 64 word reads. Time is passed in.

use super::state::SchedState;
use super::ReadyQueue;
use crate::invariant::WheelViolation;

/// No connection / not in the wheel.
const NONE: u32 = u32::MAX;

/// Per-connection node of the wheel's lists.
#[derive(Clone, Copy, Debug)]
struct Node {
    prev: u32,
    next: u32,
    /// The wheel slot the connection is in, or NONE.
    slot: u32,
    /// The tick at which the connection becomes eligible (its slot's tick, unless clamped).
    due: u64,
}

impl Default for Node {
    fn default() -> Self {
        Node {
            prev: NONE,
            next: NONE,
            slot: NONE,
            due: 0,
        }
    }
}

/// A Carousel timing wheel over connection slots. Time is in nanoseconds, cut into ticks of
/// the granularity; a connection due in tick `t` is released once `now` reaches tick `t`.
pub(crate) struct TimingWheel {
    /// First and last connection of each wheel slot's list (FIFO within a slot).
    head: Box<[u32]>,
    tail: Box<[u32]>,
    /// One bit per wheel slot: its list is not empty.
    occupied: Box<[u64]>,
    /// Per connection.
    nodes: Vec<Node>,
    /// `slots - 1` (the slot count is a power of two).
    mask: u64,
    granularity_ns: u64,
    /// The first tick not yet served: every queued connection sits at a tick in
    /// [cursor, cursor + slots).
    cursor: u64,
    /// The earliest occupied tick (u64::MAX when empty); may be early after a removal,
    /// which costs one needless wake-up and no more.
    next_tick: u64,
    len: usize,
}

impl TimingWheel {
    /// The wheel's state per connection, in bytes.
    pub(crate) const PER_CONNECTION_BYTES: usize = core::mem::size_of::<Node>();

    /// A wheel for `conns` connections with `slots` slots (rounded up to a power of two, at
    /// least 2) of `granularity_ns` nanoseconds (at least 1).
    pub(crate) fn new(conns: usize, slots: usize, granularity_ns: u64) -> Self {
        let slots = slots.max(2).next_power_of_two();
        TimingWheel {
            head: vec![NONE; slots].into_boxed_slice(),
            tail: vec![NONE; slots].into_boxed_slice(),
            occupied: vec![0; slots.div_ceil(64)].into_boxed_slice(),
            nodes: Vec::with_capacity(conns),
            mask: slots as u64 - 1,
            granularity_ns: granularity_ns.max(1),
            cursor: 0,
            next_tick: u64::MAX,
            len: 0,
        }
    }

    /// Adds the node of the next connection slot.
    pub(crate) fn add_node(&mut self) {
        self.nodes.push(Node::default());
    }

    /// The tick of `now_ns`.
    #[inline]
    pub(crate) fn tick(&self, now_ns: u64) -> u64 {
        now_ns / self.granularity_ns
    }

    /// The tick length in nanoseconds.
    #[inline]
    pub(crate) fn granularity_ns(&self) -> u64 {
        self.granularity_ns
    }

    /// Whether a connection due at `due_ns` may send at `now_ns`: its tick has come.
    #[inline]
    pub(crate) fn eligible(&self, due_ns: u64, now_ns: u64) -> bool {
        self.tick(due_ns) <= self.tick(now_ns)
    }

    /// Connections in the wheel.
    #[inline]
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether no connection waits in the wheel.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `conn` waits in the wheel.
    pub(crate) fn contains(&self, conn: u32) -> bool {
        self.nodes
            .get(conn as usize)
            .is_some_and(|n| n.slot != NONE)
    }

    /// When the earliest occupied slot comes due (the start of its tick), in nanoseconds.
    pub(crate) fn next_due_ns(&self) -> Option<u64> {
        (self.len != 0).then(|| self.next_tick.saturating_mul(self.granularity_ns))
    }

    /// Places `conn` to become eligible at `due_ns`; `now_ns` is the current time. A
    /// connection already in the wheel keeps its place (each connection is in the wheel at
    /// most once); returns whether it was placed.
    pub(crate) fn insert(&mut self, conn: u32, due_ns: u64, now_ns: u64) -> bool {
        match self.nodes.get(conn as usize) {
            Some(n) if n.slot == NONE => {}
            _ => return false,
        }
        if self.len == 0 {
            // An idle wheel's cursor may lag far behind; nothing sits behind it, so move it
            // up, or a far-future time would clamp to a slot already in the past.
            self.cursor = self.cursor.max(self.tick(now_ns).saturating_add(1));
        }
        let due = self.tick(due_ns);
        self.place(conn, due);
        self.len += 1;
        true
    }

    /// Takes `conn` out of the wheel, if it is there.
    pub(crate) fn remove(&mut self, conn: u32) {
        let Some(&node) = self.nodes.get(conn as usize) else {
            return;
        };
        if node.slot == NONE {
            return;
        }
        self.unlink(conn, node);
        self.len -= 1;
    }

    /// Moves every connection due at or before `now_ns` to `ready`, in due order (FIFO
    /// within a slot). Connections clamped to a slot short of their time are re-placed.
    /// Returns how many were released. Costs the occupied slots passed plus slots / 64.
    pub(crate) fn advance(&mut self, now_ns: u64, ready: &mut ReadyQueue) -> usize {
        let now = self.tick(now_ns);
        if self.len == 0 {
            self.cursor = self.cursor.max(now.saturating_add(1));
            return 0;
        }
        if now < self.next_tick || now < self.cursor {
            return 0;
        }
        let slots = self.mask + 1;
        // Every queued connection sits in [cursor, cursor + slots): a lag of more than a
        // rotation visits each slot once.
        let end = now.min(self.cursor.saturating_add(slots - 1));
        let mut released = 0;
        // Connections to re-place, chained through `next` (placing them now could put one
        // in a slot this pass has yet to visit).
        let mut pending = NONE;
        let mut from = self.cursor;
        while let Some(tick) = self.first_occupied_from(from) {
            if tick > end {
                break;
            }
            let s = (tick & self.mask) as usize;
            let mut conn = self.head[s];
            self.head[s] = NONE;
            self.tail[s] = NONE;
            self.occupied[s / 64] &= !(1 << (s % 64));
            while conn != NONE {
                let node = &mut self.nodes[conn as usize];
                let next = node.next;
                node.prev = NONE;
                node.slot = NONE;
                if node.due <= now {
                    node.next = NONE;
                    self.len -= 1;
                    ready.push(conn);
                    released += 1;
                } else {
                    node.next = pending;
                    pending = conn;
                }
                conn = next;
            }
            from = tick + 1;
        }
        self.cursor = now.saturating_add(1);
        self.next_tick = self.first_occupied_from(self.cursor).unwrap_or(u64::MAX);
        while pending != NONE {
            let conn = pending;
            let node = self.nodes[conn as usize];
            pending = node.next;
            self.place(conn, node.due);
        }
        released
    }

    /// Appends `conn` (not in the wheel) to the slot of tick `due`, clamped to the wheel's
    /// span [cursor, cursor + slots).
    fn place(&mut self, conn: u32, due: u64) {
        let last = self.cursor.saturating_add(self.mask);
        let tick = due.clamp(self.cursor, last);
        let s = (tick & self.mask) as usize;
        let tail = self.tail[s];
        self.nodes[conn as usize] = Node {
            prev: tail,
            next: NONE,
            slot: s as u32,
            due,
        };
        if tail == NONE {
            self.head[s] = conn;
            self.occupied[s / 64] |= 1 << (s % 64);
        } else {
            self.nodes[tail as usize].next = conn;
        }
        self.tail[s] = conn;
        self.next_tick = self.next_tick.min(tick);
    }

    fn unlink(&mut self, conn: u32, node: Node) {
        let s = node.slot as usize;
        if node.prev == NONE {
            self.head[s] = node.next;
        } else {
            self.nodes[node.prev as usize].next = node.next;
        }
        if node.next == NONE {
            self.tail[s] = node.prev;
        } else {
            self.nodes[node.next as usize].prev = node.prev;
        }
        if self.head[s] == NONE {
            self.occupied[s / 64] &= !(1 << (s % 64));
        }
        self.nodes[conn as usize] = Node::default();
    }

    /// The first tick in [from, from + slots) whose slot is occupied.
    fn first_occupied_from(&self, from: u64) -> Option<u64> {
        let slots = self.head.len();
        let mut i = (from & self.mask) as usize;
        let mut dist = 0;
        while dist < slots {
            let word = self.occupied[i / 64] >> (i % 64);
            if word != 0 {
                let d = dist + word.trailing_zeros() as usize;
                return (d < slots).then(|| from + d as u64);
            }
            // To the end of this word or of the ring, whichever is first.
            let step = (64 - i % 64).min(slots - i);
            dist += step;
            i = crate::queue::wrap(i + step, slots);
        }
        None
    }

    /// Checks the lists against the bitmap and the count (for `Stack::check_invariants`).
    pub(crate) fn check(&self) -> Result<(), WheelViolation> {
        let mut count = 0;
        for s in 0..self.head.len() {
            let bit = self.occupied[s / 64] >> (s % 64) & 1 == 1;
            if bit != (self.head[s] != NONE) {
                return Err(WheelViolation::BitmapDisagrees { slot: s, bit });
            }
            let mut conn = self.head[s];
            let mut prev = NONE;
            while conn != NONE {
                let node = self
                    .nodes
                    .get(conn as usize)
                    .ok_or(WheelViolation::BadNode { conn })?;
                if node.slot != s as u32 || node.prev != prev {
                    return Err(WheelViolation::Mislinked { conn, slot: s });
                }
                count += 1;
                if count > self.nodes.len() {
                    return Err(WheelViolation::ListLoops);
                }
                prev = conn;
                conn = node.next;
            }
            if self.tail[s] != prev {
                return Err(WheelViolation::TailNotLast { slot: s });
            }
        }
        if count != self.len {
            return Err(WheelViolation::CountDisagrees {
                queued: count,
                len: self.len,
            });
        }
        Ok(())
    }
}

/// Carousel's timestamp update after a rate-limited connection handed `bytes` to the device
/// at `now_ns`: the next send time is max(now, previous) + bytes x 8 / rate.
///
/// `now` is taken one tick early (`credit_ns`, the wheel's granularity): the wheel releases a
/// connection at the start of its tick, and a host may serve it a little late; starting the
/// next interval from the previous timestamp rather than from the release keeps the
/// long-term rate exact, while an idle connection still banks at most one tick of credit.
#[inline]
pub(crate) fn charge(sched: &mut SchedState, bytes: u64, now_ns: u64, credit_ns: u64) {
    if sched.rate_bps == 0 {
        return;
    }
    let base = sched.next_tx_ns.max(now_ns.saturating_sub(credit_ns));
    // At most 64 KB x 8e9 (5.2e14): no overflow in u64.
    let interval = bytes.saturating_mul(8_000_000_000) / sched.rate_bps;
    sched.next_tx_ns = base.saturating_add(interval);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wheel with the nodes of `conns` connections.
    fn wheel(conns: usize, slots: usize) -> TimingWheel {
        let mut w = TimingWheel::new(conns, slots, G);
        (0..conns).for_each(|_| w.add_node());
        w
    }

    const G: u64 = 1_000; // 1 us ticks

    fn drain(ready: &mut ReadyQueue) -> Vec<u32> {
        core::iter::from_fn(|| ready.pop()).collect()
    }

    #[test]
    fn charge_spaces_frames_at_the_rate_without_banking_idle_time() {
        let mut s = SchedState {
            rate_bps: 1_000_000_000,
            next_tx_ns: 0,
        };
        // 1514 bytes at 1 Gbit/s: 12.112 us.
        charge(&mut s, 1514, 0, G);
        assert_eq!(s.next_tx_ns, 12_112);
        // Served half a tick late: the next interval starts from the timestamp.
        charge(&mut s, 1514, 12_600, G);
        assert_eq!(s.next_tx_ns, 24_224);
        // After an idle second: at most one tick of credit.
        charge(&mut s, 1514, 1_000_000_000, G);
        assert_eq!(s.next_tx_ns, 1_000_000_000 - G + 12_112);
        // Unlimited: untouched.
        let mut u = SchedState::default();
        charge(&mut u, 1514, 5, G);
        assert_eq!(u, SchedState::default());
    }

    #[test]
    fn releases_in_due_order_and_fifo_within_a_slot() {
        let mut w = wheel(8, 16);
        let mut ready = ReadyQueue::new(8);
        assert!(w.insert(3, 5 * G, 0));
        assert!(w.insert(1, 2 * G + 999, 0)); // tick 2
        assert!(w.insert(2, 5 * G + 10, 0)); // tick 5, after 3
        assert!(w.insert(0, 9 * G, 0));
        assert_eq!(w.len(), 4);
        assert_eq!(w.next_due_ns(), Some(2 * G));
        // Nothing before its tick.
        assert_eq!(w.advance(2 * G - 1, &mut ready), 0);
        assert_eq!(w.advance(2 * G, &mut ready), 1);
        assert_eq!(drain(&mut ready), [1]);
        assert_eq!(w.next_due_ns(), Some(5 * G));
        assert_eq!(w.advance(6 * G, &mut ready), 2);
        assert_eq!(drain(&mut ready), [3, 2]);
        assert_eq!(w.advance(100 * G, &mut ready), 1);
        assert_eq!(drain(&mut ready), [0]);
        assert!(w.is_empty() && w.next_due_ns().is_none());
        w.check().unwrap();
    }

    #[test]
    fn a_connection_is_in_the_wheel_at_most_once() {
        let mut w = wheel(4, 16);
        let mut ready = ReadyQueue::new(4);
        assert!(w.insert(2, 3 * G, 0));
        assert!(!w.insert(2, G, 0), "already queued: keeps its place");
        assert!(!w.insert(9, G, 0), "out of range: refused");
        assert_eq!(w.len(), 1);
        w.check().unwrap();
        assert_eq!(w.advance(2 * G, &mut ready), 0);
        assert_eq!(w.advance(3 * G, &mut ready), 1);
        assert_eq!(drain(&mut ready), [2]);
        // Removal is O(1) and leaves the lists whole.
        for c in 0..4 {
            w.insert(c, 7 * G, 3 * G);
        }
        w.remove(1);
        w.remove(1);
        w.remove(3);
        w.check().unwrap();
        assert_eq!(w.len(), 2);
        assert_eq!(w.advance(7 * G, &mut ready), 2);
        assert_eq!(drain(&mut ready), [0, 2]);
    }

    #[test]
    fn beyond_the_horizon_clamps_to_the_last_slot_and_is_rechecked() {
        // 8 slots of 1 us: a horizon of 8 us.
        let mut w = wheel(2, 8);
        let mut ready = ReadyQueue::new(2);
        assert!(w.insert(0, 20 * G, 0)); // 20 us: beyond the horizon
        assert!(w.insert(1, 4 * G, 0));
        // Clamped to the last slot: tick 1 + 7 = 8.
        assert_eq!(w.next_due_ns(), Some(4 * G));
        assert_eq!(w.advance(4 * G, &mut ready), 1);
        assert_eq!(drain(&mut ready), [1]);
        assert_eq!(w.next_due_ns(), Some(8 * G));
        // Re-checked at tick 8: not due, re-placed (clamped again to 9 + 7 = 16).
        assert_eq!(w.advance(8 * G, &mut ready), 0);
        assert_eq!(w.next_due_ns(), Some(16 * G));
        assert_eq!(w.advance(16 * G, &mut ready), 0);
        assert_eq!(w.next_due_ns(), Some(20 * G));
        assert_eq!(w.advance(19 * G + 999, &mut ready), 0);
        assert_eq!(w.advance(20 * G, &mut ready), 1);
        assert_eq!(drain(&mut ready), [0]);
        w.check().unwrap();
    }

    #[test]
    fn a_late_advance_releases_everything_due_even_after_many_rotations() {
        let mut w = wheel(64, 8);
        let mut ready = ReadyQueue::new(64);
        for c in 0..64 {
            w.insert(c, u64::from(c) * 3 * G, 0);
        }
        w.check().unwrap();
        // 100 us late: several rotations of an 8 us wheel.
        let n = w.advance(100 * G, &mut ready);
        assert_eq!(n, 34, "ticks 0..=99 of 0, 3, ..., 189");
        let got = drain(&mut ready);
        let mut sorted = got.clone();
        sorted.sort();
        assert_eq!(sorted, (0..34).collect::<Vec<_>>());
        w.check().unwrap();
        // The rest come out by their time, none lost.
        let mut out = Vec::new();
        let mut t = 100 * G;
        while let Some(due) = w.next_due_ns() {
            t = t.max(due);
            w.advance(t, &mut ready);
            out.extend(drain(&mut ready));
        }
        assert_eq!(out, (34..64).collect::<Vec<_>>());
        assert!((189 * G..190 * G).contains(&t));
    }

    #[test]
    fn an_idle_wheel_follows_time_so_a_new_far_time_is_not_released_early() {
        let mut w = wheel(2, 8);
        let mut ready = ReadyQueue::new(2);
        // Long idle: the cursor is at 0, now is 1 ms.
        let now = 1_000 * G;
        assert!(w.insert(0, now + 50 * G, now));
        assert!(w.next_due_ns().unwrap() > now);
        let mut t = now;
        while let Some(due) = w.next_due_ns() {
            t = due;
            if w.advance(t, &mut ready) > 0 {
                break;
            }
        }
        assert_eq!(t, now + 50 * G);
        assert_eq!(drain(&mut ready), [0]);
    }

    #[test]
    fn no_starvation_every_connection_comes_out_in_time_order() {
        // Many connections re-inserted at different rates: each is released every time
        // its period passes, and no slower one is starved by faster ones.
        let conns = 16u32;
        let mut w = wheel(conns as usize, 32);
        let mut ready = ReadyQueue::new(conns as usize);
        let period = |c: u32| u64::from(c + 1) * 5 * G; // 5 us .. 80 us, beyond the 32 us horizon
        let mut due: Vec<u64> = (0..conns).map(period).collect();
        let mut released = vec![0u64; conns as usize];
        for c in 0..conns {
            w.insert(c, due[c as usize], 0);
        }
        let end = 10_000 * G;
        while let Some(t) = w.next_due_ns() {
            if t > end {
                break;
            }
            w.advance(t, &mut ready);
            for c in drain(&mut ready) {
                let i = c as usize;
                assert!(
                    w.eligible(due[i], t),
                    "released early: {c} due {} at {t}",
                    due[i]
                );
                assert!(t < due[i] + G, "released late: {c} due {} at {t}", due[i]);
                released[i] += 1;
                due[i] += period(c);
                w.insert(c, due[i], t);
            }
            w.check().unwrap();
        }
        for c in 0..conns {
            assert_eq!(released[c as usize], end / period(c), "connection {c}");
        }
    }
}
