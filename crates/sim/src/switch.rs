//! An Ethernet switch with zero forwarding latency: learning, or static with ECMP groups
//! (for fabrics with several paths, such as leaf-spine, where flooding would loop).

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
    /// Frames a static switch has no route for, broadcasts included (dropped).
    pub unrouted: u64,
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
    /// Static routes: MAC to its ECMP group of ports (a static switch neither learns nor floods).
    routes: Option<HashMap<Mac, Vec<usize>>>,
    /// Seeds this switch's flow hash, so that switches in series pick paths independently.
    hash_seed: u64,
    pub(crate) stats: SwitchStats,
}

impl Switch {
    /// A static switch: it forwards only to routed MACs, spreading each ECMP group by flow.
    pub(crate) fn new_static(hash_seed: u64) -> Self {
        Switch {
            routes: Some(HashMap::new()),
            hash_seed,
            ..Switch::default()
        }
    }

    /// Routes `mac` to the ECMP group `ports`; false if this switch is not static.
    pub(crate) fn add_route(&mut self, mac: Mac, ports: Vec<usize>) -> bool {
        match &mut self.routes {
            Some(routes) => {
                routes.insert(mac, ports);
                true
            }
            None => false,
        }
    }

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
        if let Some(routes) = &self.routes {
            let mut key = [0u8; 6];
            key.copy_from_slice(dst);
            let port = routes.get(&key).and_then(|group| match group.len() {
                0 => None,
                1 => Some(group[0]),
                n => Some(group[(flow_hash(frame, self.hash_seed) % n as u64) as usize]),
            });
            return match port {
                Some(p) if p == in_port => {
                    self.stats.filtered += 1;
                    Forward::Drop
                }
                Some(p) => {
                    self.stats.forwarded += 1;
                    Forward::Port(p)
                }
                None => {
                    self.stats.unrouted += 1;
                    Forward::Drop
                }
            };
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

/// A hash of an IPv4 frame's flow (addresses, protocol, and ports for TCP and UDP), so one
/// flow keeps one path through an ECMP group and does not reorder. Non-IPv4 frames hash by
/// their Ethernet header. FNV-1a: small, seedable and stable across runs.
fn flow_hash(frame: &[u8], seed: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    };
    let ip = frame.get(14..).unwrap_or(&[]);
    if frame.get(12..14) != Some(&[0x08, 0x00]) || ip.len() < 20 {
        eat(frame.get(..14).unwrap_or(frame));
        return h;
    }
    let protocol = ip[9];
    eat(&ip[12..20]);
    eat(&[protocol]);
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if protocol == 6 || protocol == 17 {
        if let Some(ports) = ip.get(ihl..ihl + 4) {
            eat(ports);
        }
    }
    h
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

    fn tcp_frame(dst: Mac, src_port: u16) -> Vec<u8> {
        let mut f = frame(dst, [2, 0, 0, 0, 0, 9]);
        f.truncate(14);
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
        f.extend_from_slice(&ip);
        f.extend_from_slice(&src_port.to_be_bytes());
        f.extend_from_slice(&80u16.to_be_bytes());
        f
    }

    #[test]
    fn static_switch_spreads_flows_over_an_ecmp_group_and_keeps_each_on_one_path() {
        let mut sw = Switch::new_static(7);
        let b = [2, 0, 0, 0, 0, 2];
        assert!(sw.add_route(b, vec![1, 2, 3]));
        let mut used = [0u32; 4];
        for port in 1000..1400u16 {
            let f = tcp_frame(b, port);
            let Forward::Port(p) = sw.route(0, &f) else {
                panic!("routed MAC dropped");
            };
            // The same flow always takes the same path.
            assert_eq!(sw.route(0, &f), Forward::Port(p));
            used[p] += 1;
        }
        assert_eq!(used[0], 0);
        for n in &used[1..] {
            assert!((80..=190).contains(n), "uneven spread {used:?}");
        }
        // A static switch neither floods nor learns.
        assert_eq!(sw.route(1, &frame([0xff; 6], b)), Forward::Drop);
        assert_eq!(sw.route(1, &frame([2, 0, 0, 0, 0, 7], b)), Forward::Drop);
        assert_eq!(sw.stats.unrouted, 2);
        assert!(!Switch::default().add_route(b, vec![0]));
    }

    proptest! {
        #[test]
        fn static_switch_never_panics(frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 1..20)) {
            let mut sw = Switch::new_static(1);
            sw.add_route([0; 6], vec![0, 1]);
            for f in &frames {
                let _ = sw.route(0, f);
            }
        }

        #[test]
        fn never_panics(port in 0usize..4, frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..20)) {
            let mut sw = Switch::default();
            for f in &frames {
                let _ = sw.route(port, f);
            }
        }
    }
}
