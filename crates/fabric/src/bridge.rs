//! The forwarding decision of a learning Ethernet switch: learn sources, forward to the
//! learned port, flood broadcast, multicast and unknown destinations.

use std::collections::HashMap;

/// A MAC address.
pub type Mac = [u8; 6];

/// Default bound of the learned table: new sources beyond it are not learned (flooded to).
pub const DEFAULT_MAX_LEARNED: usize = 65_536;

/// Counters of one switch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SwitchStats {
    /// Frames received on any port.
    pub received: u64,
    /// Frames sent out of exactly one learned port.
    pub forwarded: u64,
    /// Frames flooded (broadcast, multicast or unknown destination).
    pub flooded: u64,
    /// Frames whose learned destination port was the ingress port (dropped).
    pub filtered: u64,
    /// Frames too short to carry an Ethernet header (dropped).
    pub runts: u64,
    /// New sources not learned because the table was full.
    pub table_full: u64,
}

/// Where a received frame must go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forward {
    /// Drop it.
    Drop,
    /// Send it out of this one port.
    Port(usize),
    /// Send it out of every port except the ingress one.
    Flood,
}

/// A learning bridge's table and counters; ports are plain indices the caller owns.
#[derive(Debug)]
pub struct Bridge {
    /// Learned (or static) MAC to port; only looked up, never iterated.
    table: HashMap<Mac, usize>,
    /// Most entries the table holds.
    max_learned: usize,
    /// Counters so far.
    pub stats: SwitchStats,
}

impl Default for Bridge {
    fn default() -> Self {
        Bridge::new(DEFAULT_MAX_LEARNED)
    }
}

impl Bridge {
    /// An empty bridge that learns at most `max_learned` addresses.
    pub fn new(max_learned: usize) -> Self {
        Bridge {
            table: HashMap::new(),
            max_learned,
            stats: SwitchStats::default(),
        }
    }

    /// Pins `mac` to `port` (a static entry; learning may still move it). Refused (false)
    /// when the table is full or `mac` is multicast.
    pub fn insert(&mut self, mac: Mac, port: usize) -> bool {
        if mac[0] & 1 != 0
            || (self.table.len() >= self.max_learned && !self.table.contains_key(&mac))
        {
            return false;
        }
        self.table.insert(mac, port);
        true
    }

    /// The port `mac` was learned on, if any.
    pub fn lookup(&self, mac: &Mac) -> Option<usize> {
        self.table.get(mac).copied()
    }

    /// Learns the source of a frame received on `in_port` and decides where it goes.
    pub fn route(&mut self, in_port: usize, frame: &[u8]) -> Forward {
        self.stats.received += 1;
        let (Some(dst), Some(src)) = (frame.get(0..6), frame.get(6..12)) else {
            self.stats.runts += 1;
            return Forward::Drop;
        };
        if frame.len() < 14 {
            self.stats.runts += 1;
            return Forward::Drop;
        }
        let mut src_mac = [0u8; 6];
        src_mac.copy_from_slice(src);
        if src_mac[0] & 1 == 0 && !self.insert(src_mac, in_port) {
            self.stats.table_full += 1;
        }
        let mut dst_mac = [0u8; 6];
        dst_mac.copy_from_slice(dst);
        if dst_mac[0] & 1 != 0 {
            self.stats.flooded += 1;
            return Forward::Flood;
        }
        match self.table.get(&dst_mac) {
            Some(&p) if p == in_port => {
                self.stats.filtered += 1;
                Forward::Drop
            }
            Some(&p) => {
                self.stats.forwarded += 1;
                Forward::Port(p)
            }
            None => {
                self.stats.flooded += 1;
                Forward::Flood
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame(dst: Mac, src: Mac) -> Vec<u8> {
        let mut f = dst.to_vec();
        f.extend_from_slice(&src);
        f.extend_from_slice(&[0x08, 0x00, 1, 2, 3]);
        f
    }

    #[test]
    fn learns_and_forwards() {
        let mut sw = Bridge::default();
        let a = [2, 0, 0, 0, 0, 1];
        let b = [2, 0, 0, 0, 0, 2];
        assert_eq!(sw.route(0, &frame(b, a)), Forward::Flood);
        assert_eq!(sw.route(1, &frame(a, b)), Forward::Port(0));
        assert_eq!(sw.route(0, &frame(b, a)), Forward::Port(1));
        assert_eq!(sw.route(0, &frame(a, a)), Forward::Drop);
        assert_eq!(sw.route(0, &frame([0xff; 6], a)), Forward::Flood);
        assert_eq!(sw.route(0, &[1, 2, 3]), Forward::Drop);
        assert_eq!(sw.stats.runts, 1);
        // A multicast source is never learned.
        let m = [1, 0, 0x5e, 0, 0, 1];
        sw.route(2, &frame(b, m));
        assert_eq!(sw.route(0, &frame(m, a)), Forward::Flood);
    }

    #[test]
    fn table_is_bounded() {
        let mut sw = Bridge::new(2);
        let b = [2, 0, 0, 0, 0, 0xb];
        for i in 1..=3u8 {
            sw.route(usize::from(i), &frame(b, [2, 0, 0, 0, 0, i]));
        }
        assert_eq!(sw.stats.table_full, 1);
        assert_eq!(sw.lookup(&[2, 0, 0, 0, 0, 3]), None);
        // A known address still moves.
        sw.route(7, &frame(b, [2, 0, 0, 0, 0, 1]));
        assert_eq!(sw.lookup(&[2, 0, 0, 0, 0, 1]), Some(7));
    }

    proptest! {
        #[test]
        fn never_panics(port in 0usize..4, frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..20)) {
            let mut sw = Bridge::default();
            for f in &frames {
                let _ = sw.route(port, f);
            }
        }
    }
}
