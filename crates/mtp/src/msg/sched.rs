//! The sender's order (mtp.txt 3.1.2): highest priority first, then fewest remaining
//! bytes (SRPT), then the oldest id.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};

type Key = (Reverse<u8>, u64, u32);

/// Messages with something to send, in transmission order.
#[derive(Debug, Default)]
pub struct Scheduler {
    order: BTreeSet<Key>,
    key_of: HashMap<u32, Key>,
}

impl Scheduler {
    /// Sets message `id`'s place (or removes it when `wants` is false).
    pub fn update(&mut self, id: u32, priority: u8, remaining: u64, wants: bool) {
        let k = (Reverse(priority), remaining, id);
        let old = if wants {
            // Called per packet sent and acknowledged (issue 17): an unchanged place is left
            // alone, and a new one is inserted before the old goes, so that a set of one
            // never empties (emptied, the tree frees its node and allocates it again).
            match self.key_of.insert(id, k) {
                Some(old) if old == k => return,
                old => {
                    self.order.insert(k);
                    old
                }
            }
        } else {
            self.key_of.remove(&id)
        };
        if let Some(old) = old {
            self.order.remove(&old);
        }
    }

    /// The first `n` message ids in order.
    pub fn first(&self, n: usize) -> impl Iterator<Item = u32> + '_ {
        self.order.iter().take(n).map(|k| k.2)
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_priority_then_fewest_remaining_and_updates_move_or_remove() {
        let mut s = Scheduler::default();
        s.update(1, 0, 500, true);
        s.update(2, 0, 100, true);
        s.update(3, 7, 900, true);
        assert_eq!(s.first(3).collect::<Vec<_>>(), [3, 2, 1]);
        s.update(1, 0, 50, true);
        s.update(1, 0, 50, true);
        assert_eq!(s.first(3).collect::<Vec<_>>(), [3, 1, 2]);
        s.update(3, 7, 900, false);
        s.update(2, 0, 0, false);
        assert_eq!(s.first(3).collect::<Vec<_>>(), [1]);
        s.update(1, 0, 0, false);
        assert!(s.is_empty());
        assert!(s.key_of.is_empty());
    }
}
