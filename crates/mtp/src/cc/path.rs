//! Paths as the sender learns them: the ordered (pathlet, TC) list of a data packet's
//! feedback, interned with a reference count (a packet in flight holds one to the path it
//! was charged to), and per destination the expected path and the alternatives seen.

use std::collections::{HashMap, VecDeque};

use crate::wire::PathletTc;

/// An interned path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PathId(pub u32);

#[derive(Debug)]
struct Interned {
    hops: Vec<PathletTc>,
    refs: u32,
}

/// Paths referenced by destinations and packets in flight (a path nobody references is
/// freed, so the table is bounded by what references it).
#[derive(Debug, Default)]
pub struct PathTable {
    slots: Vec<Option<Interned>>,
    free: Vec<u32>,
    by_hops: HashMap<Vec<PathletTc>, u32>,
}

impl PathTable {
    /// A reference to the path `hops` (allocates only for a path not yet known).
    pub fn intern(&mut self, hops: &[PathletTc]) -> PathId {
        if let Some(&i) = self.by_hops.get(hops) {
            self.retain(PathId(i));
            return PathId(i);
        }
        let entry = Interned {
            hops: hops.to_vec(),
            refs: 1,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(entry);
                i
            }
            None => {
                self.slots.push(Some(entry));
                (self.slots.len() - 1) as u32
            }
        };
        self.by_hops.insert(hops.to_vec(), i);
        PathId(i)
    }

    /// One more reference.
    pub fn retain(&mut self, id: PathId) {
        if let Some(Some(p)) = self.slots.get_mut(id.0 as usize) {
            p.refs += 1;
        }
    }

    /// One reference less; the path goes with the last.
    pub fn release(&mut self, id: PathId) {
        let Some(slot) = self.slots.get_mut(id.0 as usize) else {
            return;
        };
        let Some(p) = slot else { return };
        p.refs = p.refs.saturating_sub(1);
        if p.refs == 0 {
            if let Some(p) = slot.take() {
                self.by_hops.remove(&p.hops);
            }
            self.free.push(id.0);
        }
    }

    /// The path's (pathlet, TC) hops in order.
    pub fn hops(&self, id: PathId) -> &[PathletTc] {
        match self.slots.get(id.0 as usize) {
            Some(Some(p)) => &p.hops,
            _ => &[],
        }
    }

    /// Paths held.
    pub fn len(&self) -> usize {
        self.by_hops.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.by_hops.is_empty()
    }
}

/// What the sender knows of the paths to one destination.
#[derive(Debug, Default)]
pub struct DestPaths {
    /// The path of the latest feedback (None before any).
    pub expected: Option<PathId>,
    /// Other paths seen, newest last (bounded by `max_paths`).
    pub alternatives: VecDeque<PathId>,
    /// Bytes in flight to the destination (the initial window bounds it before feedback).
    pub inflight: u64,
}

impl DestPaths {
    /// Makes `id` (whose reference this takes) the expected path; the old one becomes an
    /// alternative, the oldest alternative beyond `max_paths` is forgotten.
    pub fn observe(&mut self, id: PathId, max_paths: usize, table: &mut PathTable) {
        if self.expected == Some(id) {
            table.release(id);
            return;
        }
        if let Some(i) = self.alternatives.iter().position(|&a| a == id) {
            // Bounded by max_paths: a short scan, and only when the path changes.
            self.alternatives.remove(i);
            table.release(id);
        }
        if let Some(old) = self.expected.replace(id) {
            self.alternatives.push_back(old);
        }
        while self.alternatives.len() > max_paths {
            if let Some(gone) = self.alternatives.pop_front() {
                table.release(gone);
            }
        }
    }

    /// Drops every reference it holds.
    pub fn clear(&mut self, table: &mut PathTable) {
        if let Some(e) = self.expected.take() {
            table.release(e);
        }
        for a in self.alternatives.drain(..) {
            table.release(a);
        }
    }
}
