//! The connection table: 4-tuple to slot lookup (the pre-processor's match) and slot allocation.
//! The control plane inserts and removes entries; the data-path only looks up.

use std::net::Ipv4Addr;

use ahash::RandomState;
use hashbrown::HashMap;

/// A connection's identity as seen from this host (our IP is implicit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct FourTuple {
    /// Peer's IP.
    pub remote_ip: Ipv4Addr,
    /// Peer's port.
    pub remote_port: u16,
    /// Our port.
    pub local_port: u16,
}

impl FourTuple {
    /// The tuple as one hash key (the offload stages' lookups use it too).
    #[inline]
    pub(crate) fn key(&self) -> u64 {
        (u32::from(self.remote_ip) as u64) << 32
            | (self.remote_port as u64) << 16
            | self.local_port as u64
    }
}

/// Slots and the lookup map, both bounded by the configured connection count.
pub(crate) struct ConnTable {
    map: HashMap<u64, u32, RandomState>,
    free: Vec<u32>,
    generation: Box<[u32]>,
    /// Allocated slots, hashed or not: a slot is released once.
    live: Box<[bool]>,
}

impl ConnTable {
    /// Creates a table of `slots` slots; the hash is keyed from `seed` so that peers cannot
    /// aim collisions at it.
    pub(crate) fn new(slots: usize, seed: u64) -> Self {
        let hasher = RandomState::with_seeds(seed, seed.rotate_left(17), !seed, seed ^ 0x9e37_79b9);
        ConnTable {
            map: HashMap::with_capacity_and_hasher(slots, hasher),
            free: (0..slots as u32).rev().collect(),
            generation: vec![0; slots].into_boxed_slice(),
            live: vec![false; slots].into_boxed_slice(),
        }
    }

    /// The slot of a connection.
    #[inline]
    pub(crate) fn lookup(&self, tuple: &FourTuple) -> Option<u32> {
        self.map.get(&tuple.key()).copied()
    }

    /// Allocates a slot for `tuple`. None if the tuple exists or no slot is free.
    pub(crate) fn insert(&mut self, tuple: &FourTuple) -> Option<u32> {
        if self.map.contains_key(&tuple.key()) {
            return None;
        }
        let slot = self.free.pop()?;
        self.map.insert(tuple.key(), slot);
        self.live[slot as usize] = true;
        Some(slot)
    }

    /// Takes `tuple` out of the lookup while `slot` stays allocated (a connection in CLOSED
    /// that its application has not closed yet): the tuple's segments then meet no
    /// connection, and a new connection may take it, as on Linux, where a reset socket
    /// leaves the established hash at once.
    pub(crate) fn unhash(&mut self, tuple: &FourTuple, slot: u32) {
        if self.map.get(&tuple.key()) == Some(&slot) {
            self.map.remove(&tuple.key());
        }
    }

    /// Frees `slot`, and `tuple`'s lookup if it is still this slot's; handles to the slot
    /// become stale. A slot already free is left alone.
    pub(crate) fn release(&mut self, tuple: &FourTuple, slot: u32) {
        let Some(live) = self.live.get_mut(slot as usize) else {
            return;
        };
        if !*live {
            return;
        }
        *live = false;
        self.unhash(tuple, slot);
        self.generation[slot as usize] = self.generation[slot as usize].wrapping_add(1);
        self.free.push(slot);
    }

    /// The current generation of `slot`, which tells a live handle from a stale one.
    #[inline]
    pub(crate) fn generation(&self, slot: u32) -> u32 {
        self.generation
            .get(slot as usize)
            .copied()
            .unwrap_or(u32::MAX)
    }

    /// Connections holding a slot (looked up by tuple or not).
    pub(crate) fn len(&self) -> usize {
        self.live.len() - self.free.len()
    }

    /// Free slots.
    pub(crate) fn free_slots(&self) -> usize {
        self.free.len()
    }

    /// The lowest allocated slot at or above `from`: a walk of every live connection, page
    /// by page, reads each slot once (O(table) for the whole walk, not per connection).
    pub(crate) fn next_live(&self, from: u32) -> Option<u32> {
        let start = (from as usize).min(self.live.len());
        self.live[start..]
            .iter()
            .position(|&l| l)
            .map(|i| (start + i) as u32)
    }
}
