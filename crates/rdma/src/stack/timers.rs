//! The QPs' deadlines in one min-heap keyed by QP number, so that finding the next
//! deadline and the QPs due costs O(log n) per armed QP, not a walk over every QP
//! (flexins.txt 3.4: engine CPU flat in the number of QPs).
//!
//! Lazy deletion: re-arming or disarming a QP leaves its old heap entry behind; an entry is
//! live only while it matches the QP's armed deadline. The heap's top is kept live, so the
//! earliest deadline is a peek; stale entries are compacted away once they outnumber the
//! live ones, so the heap stays within twice the QPs armed (no unbounded memory) and, once
//! its capacity has grown, arming allocates nothing.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::qp::Nanos;

/// Stale entries tolerated beyond the live ones before a compaction.
const SLACK: usize = 64;

/// One deadline per QP number, earliest first.
#[derive(Debug, Default)]
pub struct QpTimers {
    heap: BinaryHeap<Reverse<(Nanos, u32)>>,
    armed: HashMap<u32, Nanos>,
}

impl QpTimers {
    /// Sets `qpn`'s deadline (None disarms it).
    pub fn arm(&mut self, qpn: u32, at: Option<Nanos>) {
        match at {
            Some(t) => {
                if self.armed.insert(qpn, t) == Some(t) {
                    return;
                }
                self.heap.push(Reverse((t, qpn)));
            }
            None => {
                if self.armed.remove(&qpn).is_none() {
                    return;
                }
            }
        }
        if self.heap.len() > 2 * self.armed.len() + SLACK {
            // Rebuild from the live deadlines; the heap's capacity is reused.
            self.heap.clear();
            self.heap
                .extend(self.armed.iter().map(|(&q, &t)| Reverse((t, q))));
        }
        self.drop_stale_top();
    }

    /// `qpn`'s deadline, if armed.
    pub fn get(&self, qpn: u32) -> Option<Nanos> {
        self.armed.get(&qpn).copied()
    }

    /// The earliest deadline armed.
    pub fn earliest(&self) -> Option<Nanos> {
        self.heap.peek().map(|Reverse((t, _))| *t)
    }

    /// Disarms every QP due by `now` and appends their numbers to `out`, earliest first.
    pub fn take_due(&mut self, now: Nanos, out: &mut Vec<u32>) {
        while let Some(&Reverse((t, qpn))) = self.heap.peek() {
            if t > now {
                break;
            }
            self.heap.pop();
            if self.armed.get(&qpn) == Some(&t) {
                self.armed.remove(&qpn);
                out.push(qpn);
            }
        }
        self.drop_stale_top();
    }

    /// Heap entries, live and stale (for tests of the bound).
    pub fn entries(&self) -> usize {
        self.heap.len()
    }

    fn drop_stale_top(&mut self) {
        while let Some(&Reverse((t, qpn))) = self.heap.peek() {
            if self.armed.get(&qpn) == Some(&t) {
                break;
            }
            self.heap.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Arm(u32, Nanos),
        Disarm(u32),
        Fire(Nanos),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u32..40, 0u64..1000).prop_map(|(q, t)| Op::Arm(q, t)),
            (0u32..40).prop_map(Op::Disarm),
            (0u64..1000).prop_map(Op::Fire),
        ]
    }

    proptest! {
        /// The heap answers as a brute-force scan of the armed deadlines would, and fires
        /// exactly the QPs due.
        #[test]
        fn matches_a_brute_force_scan(ops in proptest::collection::vec(op(), 0..400)) {
            let mut timers = QpTimers::default();
            let mut model: HashMap<u32, Nanos> = HashMap::new();
            let mut due = Vec::new();
            for op in ops {
                match op {
                    Op::Arm(q, t) => {
                        timers.arm(q, Some(t));
                        model.insert(q, t);
                    }
                    Op::Disarm(q) => {
                        timers.arm(q, None);
                        model.remove(&q);
                    }
                    Op::Fire(now) => {
                        due.clear();
                        timers.take_due(now, &mut due);
                        let mut expect: Vec<u32> =
                            model.iter().filter(|(_, &t)| t <= now).map(|(&q, _)| q).collect();
                        model.retain(|_, t| *t > now);
                        due.sort_unstable();
                        expect.sort_unstable();
                        prop_assert_eq!(&due, &expect);
                    }
                }
                prop_assert_eq!(timers.earliest(), model.values().copied().min());
                prop_assert!(timers.entries() <= 2 * model.len() + SLACK + 1);
            }
        }
    }

    #[test]
    fn re_arming_many_times_keeps_the_heap_bounded() {
        let mut timers = QpTimers::default();
        for i in 0..10_000u64 {
            timers.arm((i % 3) as u32, Some(1_000_000 - i));
        }
        assert!(timers.entries() <= 2 * 3 + SLACK + 1);
        assert_eq!(timers.earliest(), Some(1_000_000 - 9_999));
    }
}
