//! The sender's order (mtp.txt 3.1.2): highest priority first, then fewest remaining
//! bytes (SRPT), then the oldest id; and, for bounded starvation, the same priorities by
//! age (the order a message first had something to send), which the stack serves one data
//! packet in every `srpt_aging` (as Homa grants a share to its oldest message).

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};

type Key = (Reverse<u8>, u64, u32);

/// A message's places: by remaining bytes, by age.
#[derive(Clone, Copy, Debug)]
struct Place {
    key: Option<Key>,
    age: (Reverse<u8>, u64, u32),
}

/// Messages with something to send, in transmission order.
#[derive(Debug, Default)]
pub struct Scheduler {
    order: BTreeSet<Key>,
    by_age: BTreeSet<(Reverse<u8>, u64, u32)>,
    place: HashMap<u32, Place>,
    next_seq: u64,
}

impl Scheduler {
    /// Sets message `id`'s place (or takes it out of the order when `wants` is false; it
    /// keeps its age until [`Scheduler::remove`]).
    pub fn update(&mut self, id: u32, priority: u8, remaining: u64, wants: bool) {
        let key = wants.then_some((Reverse(priority), remaining, id));
        let prev = self.place.get(&id).copied();
        // Called per packet sent and acknowledged (issue 17): an unchanged place is left
        // alone, and a new one is inserted before the old goes, so that a set of one never
        // empties (emptied, the tree frees its node and allocates it again).
        if prev.is_some_and(|p| p.key == key && p.age.0 == Reverse(priority)) {
            return;
        }
        let seq = match prev {
            Some(p) => p.age.1,
            None if !wants => return,
            None => {
                self.next_seq += 1;
                self.next_seq
            }
        };
        let age = (Reverse(priority), seq, id);
        if let Some(k) = key {
            self.order.insert(k);
            self.by_age.insert(age);
        }
        if let Some(p) = prev {
            if let Some(old) = p.key.filter(|&old| Some(old) != key) {
                self.order.remove(&old);
            }
            if p.key.is_some() && (key.is_none() || p.age != age) {
                self.by_age.remove(&p.age);
            }
        }
        self.place.insert(id, Place { key, age });
    }

    /// Forgets message `id` (acknowledged or failed).
    pub fn remove(&mut self, id: u32) {
        if let Some(p) = self.place.remove(&id) {
            if let Some(k) = p.key {
                self.order.remove(&k);
                self.by_age.remove(&p.age);
            }
        }
    }

    /// The first `n` message ids in order.
    pub fn first(&self, n: usize) -> impl Iterator<Item = u32> + '_ {
        self.order.iter().take(n).map(|k| k.2)
    }

    /// The first `n` message ids by priority, then age (oldest first).
    pub fn oldest(&self, n: usize) -> impl Iterator<Item = u32> + '_ {
        self.by_age.iter().take(n).map(|k| k.2)
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
    fn srpt_order_and_age_order_and_age_survives_a_pause() {
        let mut s = Scheduler::default();
        s.update(1, 0, 50_000, true);
        s.update(2, 0, 100, true);
        s.update(3, 0, 900, true);
        assert_eq!(s.first(3).collect::<Vec<_>>(), [2, 3, 1]);
        assert_eq!(s.oldest(3).collect::<Vec<_>>(), [1, 2, 3]);
        // Message 1 waits for ACKs, then has a retransmission: still the oldest.
        s.update(1, 0, 0, false);
        assert_eq!(s.oldest(3).collect::<Vec<_>>(), [2, 3]);
        s.update(1, 0, 1400, true);
        assert_eq!(s.oldest(3).collect::<Vec<_>>(), [1, 2, 3]);
        s.remove(1);
        s.update(1, 0, 10, true);
        assert_eq!(
            s.oldest(3).collect::<Vec<_>>(),
            [2, 3, 1],
            "a reused id is young"
        );
        // Priority first in both orders.
        s.update(4, 9, 1 << 30, true);
        assert_eq!(s.first(1).next(), Some(4));
        assert_eq!(s.oldest(1).next(), Some(4));
    }

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
        assert_eq!(s.oldest(3).collect::<Vec<_>>(), [3, 1, 2]);
        s.update(3, 7, 900, false);
        s.update(2, 0, 0, false);
        assert_eq!(s.first(3).collect::<Vec<_>>(), [1]);
        assert_eq!(s.oldest(3).collect::<Vec<_>>(), [1]);
        s.update(1, 0, 0, false);
        assert!(s.is_empty());
        for id in 1..=3 {
            s.remove(id);
        }
        assert!(s.place.is_empty() && s.by_age.is_empty());
    }
}
