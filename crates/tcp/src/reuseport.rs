//! Listeners by port: one listener, or a SO_REUSEPORT group of several among which a SYN's
//! 4-tuple hash picks one (Linux's reuseport_select_sock), and the free list of listener
//! indexes.

use ahash::RandomState;
use hashbrown::HashMap;

use crate::table::FourTuple;

/// The listeners of one port.
pub(crate) struct PortGroup {
    /// Every member was created with reuseport (a group may grow); false: one listener.
    pub reuseport: bool,
    /// Listener indexes, in the order they joined (a leaver's place takes the last one, as
    /// Linux's reuseport_detach_sock).
    pub members: Vec<u16>,
}

/// Ports to their listeners, and which listener indexes are free.
pub(crate) struct ListenerPorts {
    by_port: HashMap<u16, PortGroup, RandomState>,
    /// Keyed from the core's seed: a peer cannot aim its 4-tuples at one member.
    select: RandomState,
    /// Free listener indexes, lowest on top (O(1) listen, no scan of the table).
    free: Vec<u16>,
}

/// Why a listener may not join a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JoinRefused {
    /// The port is held, and not by a reuseport group this listener may join.
    InUse,
    /// Every listener index is taken.
    Full,
}

impl ListenerPorts {
    /// Room for `max` listeners; hashes keyed from `seed`.
    pub(crate) fn new(max: usize, seed: u64) -> Self {
        ListenerPorts {
            by_port: HashMap::with_capacity_and_hasher(
                max,
                RandomState::with_seeds(seed, 11, 13, 17),
            ),
            select: RandomState::with_seeds(seed ^ 0x5eed, 19, 23, seed.rotate_left(29)),
            // Indexes are u16: at most 65,536 listeners (Config::validate's bound).
            free: (0..max.min(1 << 16)).rev().map(|i| i as u16).collect(),
        }
    }

    /// Whether any listener holds `port`.
    pub(crate) fn contains(&self, port: u16) -> bool {
        self.by_port.contains_key(&port)
    }

    /// Whether a listener with `reuseport` could join `port` now.
    pub(crate) fn may_join(&self, port: u16, reuseport: bool) -> Result<(), JoinRefused> {
        match self.by_port.get(&port) {
            Some(g) if !(g.reuseport && reuseport) => Err(JoinRefused::InUse),
            _ if self.free.is_empty() => Err(JoinRefused::Full),
            _ => Ok(()),
        }
    }

    /// Takes a free index for a listener on `port` (checked with [`Self::may_join`]).
    pub(crate) fn join(&mut self, port: u16, reuseport: bool) -> Result<u16, JoinRefused> {
        self.may_join(port, reuseport)?;
        let index = self.free.pop().ok_or(JoinRefused::Full)?;
        self.by_port
            .entry(port)
            .or_insert_with(|| PortGroup {
                reuseport,
                members: Vec::with_capacity(1),
            })
            .members
            .push(index);
        Ok(index)
    }

    /// Listener `index` leaves `port`; the port is free once its last member left.
    pub(crate) fn leave(&mut self, port: u16, index: u16) {
        let Some(g) = self.by_port.get_mut(&port) else {
            return;
        };
        let Some(at) = g.members.iter().position(|&m| m == index) else {
            return;
        };
        g.members.swap_remove(at);
        if g.members.is_empty() {
            self.by_port.remove(&port);
        }
        self.free.push(index);
    }

    /// The listener a segment of `tuple` goes to: the port's one listener, or the member of
    /// its group the 4-tuple's hash picks (the same for every segment of the tuple while
    /// the group is unchanged: a SYN cookie's ACK finds the listener its SYN did).
    pub(crate) fn select(&self, tuple: &FourTuple) -> Option<u16> {
        let g = self.by_port.get(&tuple.local_port)?;
        match g.members.as_slice() {
            [] => None,
            [one] => Some(*one),
            members => {
                let h = self.select.hash_one(tuple.key()) as u32;
                // Lemire's multiply-shift: a uniform index without a division.
                let at = (u64::from(h) * members.len() as u64) >> 32;
                Some(members[at as usize])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn tuple(remote_port: u16, local_port: u16) -> FourTuple {
        FourTuple {
            remote_ip: Ipv4Addr::new(10, 0, 0, 2),
            remote_port,
            local_port,
        }
    }

    #[test]
    fn indexes_come_from_the_free_list_lowest_first_and_return_to_it() {
        let mut p = ListenerPorts::new(2, 7);
        assert_eq!(p.join(80, false), Ok(0));
        assert_eq!(p.join(81, false), Ok(1));
        assert_eq!(p.join(82, false), Err(JoinRefused::Full));
        p.leave(80, 0);
        assert!(!p.contains(80));
        assert_eq!(p.join(82, false), Ok(0));
    }

    #[test]
    fn only_reuseport_listeners_share_a_port() {
        let mut p = ListenerPorts::new(8, 7);
        p.join(80, false).unwrap();
        assert_eq!(p.join(80, false), Err(JoinRefused::InUse));
        assert_eq!(p.join(80, true), Err(JoinRefused::InUse));
        let a = p.join(81, true).unwrap();
        assert_eq!(p.join(81, false), Err(JoinRefused::InUse));
        let b = p.join(81, true).unwrap();
        assert_ne!(a, b);
        p.leave(81, a);
        assert!(p.contains(81), "the other member keeps the port");
        assert_eq!(p.select(&tuple(1, 81)), Some(b));
    }

    #[test]
    fn a_tuple_always_picks_the_same_member_and_the_group_shares_tuples() {
        let mut p = ListenerPorts::new(8, 7);
        let a = p.join(81, true).unwrap();
        let b = p.join(81, true).unwrap();
        let mut seen = [0usize; 2];
        for port in 1000..1200 {
            let pick = p.select(&tuple(port, 81)).unwrap();
            assert_eq!(p.select(&tuple(port, 81)), Some(pick), "stable");
            seen[usize::from(pick == b)] += 1;
            assert!(pick == a || pick == b);
        }
        assert!(seen[0] > 50 && seen[1] > 50, "{seen:?}");
        assert_eq!(p.select(&tuple(1, 82)), None);
    }
}
