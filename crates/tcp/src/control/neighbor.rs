//! The ARP neighbor cache: bounded; learning never grows it past its capacity.

use std::net::Ipv4Addr;

use hashbrown::HashMap;
use sluice_wire::EthernetAddress;

use crate::time::Instant;

/// Targets whose latest ARP request for another transport is remembered, for the rate limit.
pub(crate) const ARP_ASKED: usize = 8;

/// IPv4 → MAC mappings learned from ARP and from peers that open connections to us.
pub(crate) struct NeighborCache {
    entries: HashMap<Ipv4Addr, (EthernetAddress, Instant), ahash::RandomState>,
    capacity: usize,
}

impl NeighborCache {
    /// Creates a cache holding up to `capacity` entries.
    pub(crate) fn new(capacity: usize, seed: u64) -> Self {
        NeighborCache {
            entries: HashMap::with_capacity_and_hasher(
                capacity,
                ahash::RandomState::with_seeds(seed, 3, 5, 7),
            ),
            capacity,
        }
    }

    /// Records `ip` at `mac`, evicting the least recently learned entry if full.
    pub(crate) fn learn(&mut self, ip: Ipv4Addr, mac: EthernetAddress, now: Instant) {
        if mac.is_multicast() || ip.is_broadcast() || ip.is_unspecified() {
            return;
        }
        if let Some((_, learned)) = self.entries.get(&ip) {
            if *learned == Instant::MAX && now != Instant::MAX {
                // A static entry (Stack::add_neighbor) is not overwritten by what the wire says.
                return;
            }
        }
        if !self.entries.contains_key(&ip) && self.entries.len() >= self.capacity {
            if let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(ip, (_, t))| (*t, **ip))
                .map(|(ip, _)| *ip)
            {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(ip, (mac, now));
    }

    /// The MAC of `ip`, if known.
    pub(crate) fn lookup(&self, ip: Ipv4Addr) -> Option<EthernetAddress> {
        self.entries.get(&ip).map(|(mac, _)| *mac)
    }

    /// Entries held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_entries_survive_arp_and_eviction_takes_the_oldest() {
        let mut cache = NeighborCache::new(2, 1);
        let ip = |n| Ipv4Addr::new(10, 0, 0, n);
        let mac = |n| EthernetAddress([2, 0, 0, 0, 0, n]);
        cache.learn(ip(1), mac(1), Instant::MAX); // static
        cache.learn(ip(1), mac(9), Instant::from_millis(5)); // spoofed ARP
        assert_eq!(cache.lookup(ip(1)), Some(mac(1)));
        cache.learn(ip(2), mac(2), Instant::from_millis(1));
        cache.learn(ip(3), mac(3), Instant::from_millis(2));
        assert_eq!(cache.len(), 2, "bounded");
        assert_eq!(
            cache.lookup(ip(2)),
            None,
            "the oldest learned entry was evicted"
        );
        assert_eq!(cache.lookup(ip(1)), Some(mac(1)));
    }
}
