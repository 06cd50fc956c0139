//! Sequencing and reordering (flextoe.txt 3.2): where frames enter the pipeline each gets
//! the next number of its flow group; replicated stages may finish them out of order, and a
//! bounded reorder buffer in front of the stage that needs order releases them strictly by
//! number. Numbers are 64-bit, so they never wrap in a run.

/// Per-group counters that number what enters the pipeline.
#[derive(Clone, Debug)]
pub struct Sequencer {
    next: Vec<u64>,
}

impl Sequencer {
    /// Counters for `groups` groups, each starting at 0.
    pub fn new(groups: u16) -> Self {
        Sequencer {
            next: vec![0; usize::from(groups.max(1))],
        }
    }

    /// The next number of `group` (group 0's for a group out of range).
    pub fn next(&mut self, group: u16) -> u64 {
        let i = usize::from(group).min(self.next.len() - 1);
        let n = self.next[i];
        self.next[i] += 1;
        n
    }
}

/// Why a reorder buffer refused an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReorderError {
    /// The number was already released or is already held.
    Duplicate {
        /// The refused number.
        seq: u64,
    },
    /// The number is too far ahead of the next one to release.
    BeyondWindow {
        /// The refused number.
        seq: u64,
        /// The next number the buffer would release.
        next: u64,
        /// Numbers the buffer can hold ahead of `next`.
        window: usize,
    },
}

impl std::fmt::Display for ReorderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReorderError::Duplicate { seq } => write!(f, "sequence number {seq} is a duplicate"),
            ReorderError::BeyondWindow { seq, next, window } => write!(
                f,
                "sequence number {seq} is beyond the reorder window ({window} from {next})"
            ),
        }
    }
}

impl std::error::Error for ReorderError {}

/// An item a reorder buffer refused, handed back with the reason.
#[derive(Debug)]
pub struct Refused<T> {
    /// Why.
    pub error: ReorderError,
    /// The item, back to its owner (a batch to recycle).
    pub item: T,
}

/// A bounded reorder buffer: takes (number, item) in any order, releases items strictly in
/// number order from 0.
#[derive(Debug)]
pub struct Reorder<T> {
    slots: Box<[Option<T>]>,
    next: u64,
    held: usize,
    /// Items refused so far.
    pub refused: u64,
    /// Items that had to wait for an earlier number so far.
    pub holds: u64,
}

impl<T> Reorder<T> {
    /// A buffer holding up to `window` numbers ahead of the next to release (at least 1).
    pub fn new(window: usize) -> Self {
        Reorder {
            slots: (0..window.max(1)).map(|_| None).collect(),
            next: 0,
            held: 0,
            refused: 0,
            holds: 0,
        }
    }

    /// Takes item `seq`; refuses a duplicate or a number beyond the window (counted).
    pub fn insert(&mut self, seq: u64, item: T) -> Result<(), Refused<T>> {
        let window = self.slots.len();
        let error = if seq < self.next {
            Some(ReorderError::Duplicate { seq })
        } else if seq - self.next >= window as u64 {
            Some(ReorderError::BeyondWindow {
                seq,
                next: self.next,
                window,
            })
        } else {
            None
        };
        if let Some(error) = error {
            self.refused += 1;
            return Err(Refused { error, item });
        }
        let slot = &mut self.slots[(seq % window as u64) as usize];
        if slot.is_some() {
            self.refused += 1;
            return Err(Refused {
                error: ReorderError::Duplicate { seq },
                item,
            });
        }
        if seq != self.next {
            self.holds += 1;
        }
        *slot = Some(item);
        self.held += 1;
        Ok(())
    }

    /// The next item in order, if it has arrived.
    pub fn pop(&mut self) -> Option<T> {
        let window = self.slots.len() as u64;
        let item = self.slots[(self.next % window) as usize].take()?;
        self.next += 1;
        self.held -= 1;
        Some(item)
    }

    /// Items held (arrived, not yet released).
    pub fn held(&self) -> usize {
        self.held
    }

    /// The next number to release.
    pub fn next_seq(&self) -> u64 {
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn items_come_out_in_order_whatever_order_they_went_in() {
        let mut r = Reorder::new(4);
        r.insert(2, 'c').unwrap();
        r.insert(1, 'b').unwrap();
        assert_eq!(r.pop(), None, "0 has not arrived");
        assert_eq!(r.held(), 2);
        r.insert(0, 'a').unwrap();
        assert_eq!(
            (r.pop(), r.pop(), r.pop(), r.pop()),
            (Some('a'), Some('b'), Some('c'), None)
        );
        assert_eq!(r.next_seq(), 3);
        assert_eq!(r.holds, 2);
    }

    #[test]
    fn duplicates_and_numbers_beyond_the_window_are_refused_and_counted() {
        let mut r = Reorder::new(2);
        r.insert(0, 0).unwrap();
        assert_eq!(
            r.insert(0, 9).unwrap_err().error,
            ReorderError::Duplicate { seq: 0 }
        );
        assert_eq!(r.pop(), Some(0));
        assert_eq!(
            r.insert(0, 9).unwrap_err().error,
            ReorderError::Duplicate { seq: 0 },
            "already released"
        );
        let e = r.insert(3, 3).unwrap_err();
        assert_eq!(
            e.error,
            ReorderError::BeyondWindow {
                seq: 3,
                next: 1,
                window: 2
            }
        );
        assert_eq!(e.item, 3, "handed back");
        assert!(
            r.insert(u64::MAX, 1).is_err(),
            "no overflow on a huge number"
        );
        assert_eq!(r.refused, 4);
        assert!(e.error.to_string().contains("beyond the reorder window"));
    }

    #[test]
    fn a_sequencer_numbers_each_group_on_its_own() {
        let mut s = Sequencer::new(2);
        assert_eq!((s.next(0), s.next(0), s.next(1), s.next(0)), (0, 1, 0, 2));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// k replicas each take every k-th number of a group's stream, in order, and are
        /// interleaved at random: the buffer releases exactly 0, 1, 2, ...
        #[test]
        fn random_interleavings_of_k_streams_release_in_order(
            k in 1usize..5,
            n in 0u64..200,
            picks in proptest::collection::vec(0usize..4, 0..1000),
        ) {
            let mut s = Sequencer::new(1);
            let mut streams: Vec<std::collections::VecDeque<u64>> = vec![Default::default(); k];
            for i in 0..n {
                streams[(i as usize) % k].push_back(s.next(0));
            }
            let mut r = Reorder::new(n.max(1) as usize);
            let mut out = Vec::new();
            let mut picks = picks.into_iter();
            while streams.iter().any(|q| !q.is_empty()) {
                let want = picks.next().unwrap_or(0) % k;
                // The picked replica, or the next one that has something.
                let q = (0..k).map(|d| (want + d) % k).find(|&i| !streams[i].is_empty()).unwrap();
                let seq = streams[q].pop_front().unwrap();
                r.insert(seq, seq).unwrap();
                while let Some(x) = r.pop() {
                    out.push(x);
                }
            }
            prop_assert_eq!(out, (0..n).collect::<Vec<_>>());
            prop_assert_eq!(r.held(), 0);
        }
    }
}
