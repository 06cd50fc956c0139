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
        if let Some(old) = self.key_of.remove(&id) {
            self.order.remove(&old);
        }
        if wants {
            let k = (Reverse(priority), remaining, id);
            self.order.insert(k);
            self.key_of.insert(id, k);
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
