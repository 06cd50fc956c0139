//! A learning Ethernet switch with zero forwarding latency.

use std::collections::HashMap;

/// A MAC address.
type Mac = [u8; 6];

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
}

/// Where a received frame must go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Forward {
    /// Drop it.
    Drop,
    /// Send it out of this one port.
    Port(usize),
    /// Send it out of every port except the ingress one.
    Flood,
}

/// The switch's forwarding state. Ports are indexed in connection order.
#[derive(Debug, Default)]
pub(crate) struct Switch {
    /// Port index to (link index, side of the link this switch is on).
    pub(crate) ports: Vec<(usize, usize)>,
    /// Learned MAC to port; only looked up, never iterated.
    table: HashMap<Mac, usize>,
    pub(crate) stats: SwitchStats,
}

impl Switch {
    /// Learns the source of a frame received on `in_port` and decides where it goes.
    pub(crate) fn route(&mut self, in_port: usize, frame: &[u8]) -> Forward {
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
        if src_mac[0] & 1 == 0 {
            self.table.insert(src_mac, in_port);
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
        let mut sw = Switch::default();
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

    proptest! {
        #[test]
        fn never_panics(port in 0usize..4, frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..20)) {
            let mut sw = Switch::default();
            for f in &frames {
                let _ = sw.route(port, f);
            }
        }
    }
}
