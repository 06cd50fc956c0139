//! Who owns what across applications: bound ports and core connections, each mapped to an
//! (application, slot) in O(1).

use std::collections::HashMap;

use sluice_tcp::{ConnId, SpliceId};

/// An application's slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Owner {
    /// Index of the application in the service.
    pub app: u32,
    /// Slot in its region.
    pub slot: u32,
}

/// Core connections to their owners, indexed by the core's slot (`ConnId::slot`).
pub(crate) struct ConnMap {
    by_slot: Vec<Option<(ConnId, Owner)>>,
}

impl ConnMap {
    /// A map for a core of up to `max_connections` slots; rows are added as slots are used.
    pub fn new(max_connections: usize) -> ConnMap {
        ConnMap {
            by_slot: Vec::with_capacity(max_connections),
        }
    }

    /// Records `id` as owned by `owner`.
    pub fn insert(&mut self, id: ConnId, owner: Owner) {
        let i = id.slot() as usize;
        if i >= self.by_slot.len() {
            // Grows with the core's highest slot in use, never past its table size.
            self.by_slot.resize(i + 1, None);
        }
        self.by_slot[i] = Some((id, owner));
    }

    /// The owner of `id`, if it is the connection recorded (not a stale handle).
    pub fn get(&self, id: ConnId) -> Option<Owner> {
        match self.by_slot.get(id.slot() as usize) {
            Some(Some((known, owner))) if *known == id => Some(*owner),
            _ => None,
        }
    }

    /// Forgets `id`.
    pub fn remove(&mut self, id: ConnId) {
        if let Some(entry) = self.by_slot.get_mut(id.slot() as usize) {
            if entry.is_some_and(|(known, _)| known == id) {
                *entry = None;
            }
        }
    }
}

/// Local ports bound by any socket of any application (EADDRINUSE across applications).
pub(crate) struct Ports {
    bound: HashMap<u16, Owner>,
    /// Where the next ephemeral listening port is looked for.
    cursor: u16,
    range: (u16, u16),
}

impl Ports {
    /// Ports; ephemeral ones are picked from `range` (inclusive).
    pub fn new(range: (u16, u16)) -> Ports {
        let range = (range.0.max(1), range.1.max(range.0.max(1)));
        Ports {
            bound: HashMap::new(),
            cursor: range.0,
            range,
        }
    }

    /// Sets the ephemeral range (the core's, known once the service sees the stack).
    pub fn set_range(&mut self, range: (u16, u16)) {
        *self = Ports {
            bound: std::mem::take(&mut self.bound),
            ..Ports::new(range)
        };
    }

    /// Binds `port` (not 0) to `owner`; false if another socket holds it.
    pub fn bind(&mut self, port: u16, owner: Owner) -> bool {
        *self.bound.entry(port).or_insert(owner) == owner
    }

    /// Picks a free port in the ephemeral range and binds it to `owner`.
    pub fn bind_ephemeral(&mut self, owner: Owner) -> Option<u16> {
        let (lo, hi) = self.range;
        let span = (hi - lo) as u32 + 1;
        for _ in 0..span {
            let p = self.cursor;
            self.cursor = if p >= hi { lo } else { p + 1 };
            if let std::collections::hash_map::Entry::Vacant(e) = self.bound.entry(p) {
                e.insert(owner);
                return Some(p);
            }
        }
        None
    }

    /// Releases `port` if `owner` holds it.
    pub fn release(&mut self, port: u16, owner: Owner) {
        if self.bound.get(&port) == Some(&owner) {
            self.bound.remove(&port);
        }
    }

    /// Who holds `port`.
    pub fn owner(&self, port: u16) -> Option<Owner> {
        self.bound.get(&port).copied()
    }
}

/// Where a splice's reports go.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Route {
    /// The owner's index in the application table.
    pub app: u32,
    /// The owner's attach id (an index may be reused by a later application).
    pub app_id: u32,
    /// The context that asked.
    pub context: u32,
    /// The handle the application was given.
    pub handle: u32,
}

/// The service's splices: core splice id to its owner. Bounded by the core's `splice_max`
/// (an entry leaves with its splice's final event).
#[derive(Default)]
pub(crate) struct Splices {
    routes: HashMap<SpliceId, Route>,
    next_handle: u32,
}

impl Splices {
    /// A fresh handle (never 0).
    pub fn next_handle(&mut self) -> u32 {
        self.next_handle = self.next_handle.wrapping_add(1).max(1);
        self.next_handle
    }

    /// Routes splice `id` to its owner.
    pub fn insert(&mut self, id: SpliceId, route: Route) {
        self.routes.insert(id, route);
    }

    /// Where splice `id`'s reports go.
    pub fn get(&self, id: SpliceId) -> Option<Route> {
        self.routes.get(&id).copied()
    }

    /// Forgets splice `id` (its final report), returning its route.
    pub fn remove(&mut self, id: SpliceId) -> Option<Route> {
        self.routes.remove(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_has_one_owner_and_ephemeral_ports_skip_bound_ones() {
        let a = Owner { app: 0, slot: 1 };
        let b = Owner { app: 1, slot: 1 };
        let mut ports = Ports::new((5000, 5002));
        assert!(ports.bind(5000, a));
        assert!(!ports.bind(5000, b));
        assert_eq!(ports.bind_ephemeral(b), Some(5001));
        assert_eq!(ports.bind_ephemeral(b), Some(5002));
        assert_eq!(ports.bind_ephemeral(b), None);
        ports.release(5000, b);
        assert_eq!(ports.owner(5000), Some(a));
        ports.release(5000, a);
        assert_eq!(ports.bind_ephemeral(b), Some(5000));
    }
}
