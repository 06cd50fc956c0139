//! The forwarding decision of an Ethernet switch. A learning bridge learns sources, forwards
//! to the learned port, and floods broadcast, multicast and unknown destinations. A static
//! bridge forwards only to routed MACs, each route an ECMP group spread by flow, and never
//! learns or floods: fabrics with several paths (leaf-spine) would loop on a flood.

use std::collections::HashMap;
use std::time::Duration;

/// A MAC address.
pub type Mac = [u8; 6];

/// Default bound of the learned table: new sources beyond it are not learned (flooded to).
pub const DEFAULT_MAX_LEARNED: usize = 65_536;

/// Default ageing time of a learned entry: 300 s, as Linux bridges (and IEEE 802.1D) have.
pub const DEFAULT_AGEING: Duration = Duration::from_secs(300);

/// A full table is swept for aged entries at most this often, so a flood of new sources
/// costs one sweep per interval, not one per frame.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

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
    /// Learned entries removed because their source was not heard for the ageing time.
    pub aged: u64,
    /// Frames a static bridge has no route for, broadcasts included (dropped).
    pub unrouted: u64,
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

/// One entry of the table.
#[derive(Clone, Copy, Debug)]
struct Entry {
    port: usize,
    /// When the source was last heard; None for a static entry, which never ages.
    seen: Option<Duration>,
}

/// A learning bridge's table and counters; ports are plain indices the caller owns. Time is
/// passed in (a `Duration` since any fixed start), so ageing runs in virtual time.
#[derive(Debug)]
pub struct Bridge {
    /// Learned (or static) MAC to port; looked up, and iterated only by a sweep of a full
    /// table at most once per `SWEEP_INTERVAL`.
    table: HashMap<Mac, Entry>,
    /// Most entries the table holds.
    max_learned: usize,
    /// A learned entry not refreshed for this long is forgotten (the host moved or left).
    ageing: Duration,
    /// When a full table may next be swept.
    next_sweep: Duration,
    /// Static routes: MAC to its ECMP group of ports (a static bridge neither learns nor floods).
    routes: Option<HashMap<Mac, Vec<usize>>>,
    /// A learning bridge's route groups: MACs sent over a group of ports (several uplinks)
    /// instead of the learned port, so a balancer can choose among them.
    groups: HashMap<Mac, Vec<usize>>,
    /// Seeds the flow hash, so that bridges in series pick paths independently.
    hash_seed: u64,
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
            ageing: DEFAULT_AGEING,
            next_sweep: Duration::ZERO,
            routes: None,
            groups: HashMap::new(),
            hash_seed: 0,
            stats: SwitchStats::default(),
        }
    }

    /// Sets the ageing time of learned entries (from now on, for all of them).
    pub fn set_ageing(&mut self, ageing: Duration) {
        self.ageing = ageing;
    }

    /// A static bridge: it forwards only to MACs given a route with [`Bridge::add_route`].
    pub fn new_static(hash_seed: u64) -> Self {
        Bridge {
            routes: Some(HashMap::new()),
            hash_seed,
            ..Bridge::new(0)
        }
    }

    /// Routes `mac` to the ECMP group `ports`; refused (false) if this bridge is not static,
    /// the group is empty, or the routes already hold `max_routes` MACs.
    pub fn add_route(&mut self, mac: Mac, ports: Vec<usize>, max_routes: usize) -> bool {
        match &mut self.routes {
            Some(routes)
                if !ports.is_empty()
                    && (routes.len() < max_routes || routes.contains_key(&mac)) =>
            {
                routes.insert(mac, ports);
                true
            }
            _ => false,
        }
    }

    /// Sends frames for `mac` over the group `ports` on a learning bridge (sources are
    /// still learned; the group wins over a learned port). Refused (false) on a static
    /// bridge (use [`Bridge::add_route`]), for an empty group, or beyond `max_groups` MACs.
    pub fn add_group(&mut self, mac: Mac, ports: Vec<usize>, max_groups: usize) -> bool {
        if self.routes.is_some()
            || ports.is_empty()
            || (self.groups.len() >= max_groups && !self.groups.contains_key(&mac))
        {
            return false;
        }
        self.groups.insert(mac, ports);
        true
    }

    /// Pins `mac` to `port` (a static entry, which does not age; learning may still move
    /// it, and it then ages as a learned one). Refused (false) when the table is full or
    /// `mac` is multicast.
    pub fn insert(&mut self, mac: Mac, port: usize) -> bool {
        self.put(mac, port, None)
    }

    fn put(&mut self, mac: Mac, port: usize, seen: Option<Duration>) -> bool {
        if mac[0] & 1 != 0
            || (self.table.len() >= self.max_learned && !self.table.contains_key(&mac))
        {
            return false;
        }
        self.table.insert(mac, Entry { port, seen });
        true
    }

    /// Learns `mac` on `port` at `now`. A full table first forgets its aged entries (at
    /// most once per sweep interval); if it is still full the source is not learned.
    fn learn(&mut self, now: Duration, mac: Mac, port: usize) -> bool {
        match self.table.get_mut(&mac) {
            // A static entry stays static while the source stays on its port.
            Some(e) if e.seen.is_none() && e.port == port => return true,
            Some(e) => {
                *e = Entry {
                    port,
                    seen: Some(now),
                };
                return true;
            }
            None => {}
        }
        if self.table.len() >= self.max_learned && now >= self.next_sweep {
            self.next_sweep = now + SWEEP_INTERVAL;
            let before = self.table.len();
            let ageing = self.ageing;
            self.table
                .retain(|_, e| e.seen.is_none_or(|t| now.saturating_sub(t) < ageing));
            self.stats.aged += (before - self.table.len()) as u64;
        }
        self.put(mac, port, Some(now))
    }

    /// The port `mac` was learned on, if any and not aged at `now`.
    pub fn lookup(&self, now: Duration, mac: &Mac) -> Option<usize> {
        let e = self.table.get(mac)?;
        match e.seen {
            Some(t) if now.saturating_sub(t) >= self.ageing => None,
            _ => Some(e.port),
        }
    }

    /// Learns the source of a frame received on `in_port` at `now` and decides where it
    /// goes; a route group of several ports is spread by flow hash (ECMP).
    pub fn route(&mut self, now: Duration, in_port: usize, frame: &[u8]) -> Forward {
        self.route_by(now, in_port, frame, |group, hash| {
            group[(hash % group.len() as u64) as usize]
        })
    }

    /// As [`Bridge::route`], with `choose` picking the port of a route group of several
    /// (given the group and the frame's flow hash; it returns one of the group's ports).
    pub fn route_by(
        &mut self,
        now: Duration,
        in_port: usize,
        frame: &[u8],
        choose: impl FnOnce(&[usize], u64) -> usize,
    ) -> Forward {
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
            let port = routes.get(&key).map(|group| match group.len() {
                1 => group[0],
                _ => choose(group, flow_hash(frame, self.hash_seed)),
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
        if src_mac[0] & 1 == 0 && !self.learn(now, src_mac, in_port) {
            self.stats.table_full += 1;
        }
        let mut dst_mac = [0u8; 6];
        dst_mac.copy_from_slice(dst);
        if let Some(group) = self.groups.get(&dst_mac) {
            let p = match group.len() {
                1 => group[0],
                _ => choose(group, flow_hash(frame, self.hash_seed)),
            };
            if p == in_port {
                self.stats.filtered += 1;
                return Forward::Drop;
            }
            self.stats.forwarded += 1;
            return Forward::Port(p);
        }
        if dst_mac[0] & 1 != 0 {
            self.stats.flooded += 1;
            return Forward::Flood;
        }
        let port = self.lookup(now, &dst_mac);
        if port.is_none() && self.table.remove(&dst_mac).is_some() {
            // Aged: forgotten, and flooded to as an unknown destination.
            self.stats.aged += 1;
        }
        match port {
            Some(p) if p == in_port => {
                self.stats.filtered += 1;
                Forward::Drop
            }
            Some(p) => {
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
    fn a_learning_bridge_sends_a_group_destination_by_its_chooser() {
        let mut sw = Bridge::default();
        let a = [2, 0, 0, 0, 0, 1];
        let b = [2, 0, 0, 0, 0, 2];
        assert!(sw.add_group(b, vec![1, 2], 4));
        assert!(!sw.add_group(a, Vec::new(), 4));
        assert!(!Bridge::new_static(0).add_group(b, vec![1], 4));
        let f = frame(b, a);
        assert_eq!(
            sw.route_by(Duration::ZERO, 0, &f, |g, _| g[1]),
            Forward::Port(2)
        );
        assert_eq!(
            sw.route_by(Duration::ZERO, 0, &f, |g, _| g[0]),
            Forward::Port(1)
        );
        // The source was still learned; the chooser's port equal to the ingress filters.
        assert_eq!(sw.lookup(Duration::ZERO, &a), Some(0));
        assert_eq!(
            sw.route_by(Duration::ZERO, 2, &f, |g, _| g[1]),
            Forward::Drop
        );
        assert_eq!(sw.stats.filtered, 1);
    }

    #[test]
    fn learns_and_forwards() {
        let mut sw = Bridge::default();
        let a = [2, 0, 0, 0, 0, 1];
        let b = [2, 0, 0, 0, 0, 2];
        assert_eq!(sw.route(Duration::ZERO, 0, &frame(b, a)), Forward::Flood);
        assert_eq!(sw.route(Duration::ZERO, 1, &frame(a, b)), Forward::Port(0));
        assert_eq!(sw.route(Duration::ZERO, 0, &frame(b, a)), Forward::Port(1));
        assert_eq!(sw.route(Duration::ZERO, 0, &frame(a, a)), Forward::Drop);
        assert_eq!(
            sw.route(Duration::ZERO, 0, &frame([0xff; 6], a)),
            Forward::Flood
        );
        assert_eq!(sw.route(Duration::ZERO, 0, &[1, 2, 3]), Forward::Drop);
        assert_eq!(sw.stats.runts, 1);
        // A multicast source is never learned.
        let m = [1, 0, 0x5e, 0, 0, 1];
        sw.route(Duration::ZERO, 2, &frame(b, m));
        assert_eq!(sw.route(Duration::ZERO, 0, &frame(m, a)), Forward::Flood);
    }

    #[test]
    fn table_is_bounded() {
        let mut sw = Bridge::new(2);
        let b = [2, 0, 0, 0, 0, 0xb];
        for i in 1..=3u8 {
            sw.route(
                Duration::ZERO,
                usize::from(i),
                &frame(b, [2, 0, 0, 0, 0, i]),
            );
        }
        assert_eq!(sw.stats.table_full, 1);
        assert_eq!(sw.lookup(Duration::ZERO, &[2, 0, 0, 0, 0, 3]), None);
        // A known address still moves.
        sw.route(Duration::ZERO, 7, &frame(b, [2, 0, 0, 0, 0, 1]));
        assert_eq!(sw.lookup(Duration::ZERO, &[2, 0, 0, 0, 0, 1]), Some(7));
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
        let mut sw = Bridge::new_static(7);
        let b = [2, 0, 0, 0, 0, 2];
        assert!(sw.add_route(b, vec![1, 2, 3], 16));
        let mut used = [0u32; 4];
        for port in 1000..1400u16 {
            let f = tcp_frame(b, port);
            let Forward::Port(p) = sw.route(Duration::ZERO, 0, &f) else {
                panic!("routed MAC dropped");
            };
            // The same flow always takes the same path.
            assert_eq!(sw.route(Duration::ZERO, 0, &f), Forward::Port(p));
            used[p] += 1;
        }
        assert_eq!(used[0], 0);
        for n in &used[1..] {
            assert!((80..=190).contains(n), "uneven spread {used:?}");
        }
        // A static switch neither floods nor learns.
        assert_eq!(
            sw.route(Duration::ZERO, 1, &frame([0xff; 6], b)),
            Forward::Drop
        );
        assert_eq!(
            sw.route(Duration::ZERO, 1, &frame([2, 0, 0, 0, 0, 7], b)),
            Forward::Drop
        );
        assert_eq!(sw.stats.unrouted, 2);
        assert!(!Bridge::default().add_route(b, vec![0], 16));
        assert!(!sw.add_route(b, Vec::new(), 16));
    }

    #[test]
    fn learned_entries_age_out_after_the_ageing_time() {
        let mut sw = Bridge::default();
        let a = [2, 0, 0, 0, 0, 1];
        let b = [2, 0, 0, 0, 0, 2];
        let s = Duration::from_secs;
        assert_eq!(DEFAULT_AGEING, s(300), "Linux bridge default");
        sw.route(s(0), 0, &frame(b, a));
        // Heard within the ageing time: forwarded, and each frame from a refreshes it.
        assert_eq!(sw.route(s(299), 1, &frame(a, b)), Forward::Port(0));
        sw.route(s(299), 0, &frame(b, a));
        assert_eq!(sw.route(s(598), 1, &frame(a, b)), Forward::Port(0));
        // Silent for 300 s: forgotten, flooded to, counted.
        assert_eq!(sw.lookup(s(599), &a), None);
        assert_eq!(sw.route(s(599), 1, &frame(a, b)), Forward::Flood);
        assert_eq!(sw.stats.aged, 1);
        // A static entry never ages.
        let c = [2, 0, 0, 0, 0, 3];
        assert!(sw.insert(c, 2));
        assert_eq!(sw.route(s(10_000), 1, &frame(c, b)), Forward::Port(2));
        // A shorter ageing time applies to the entries already learned.
        sw.set_ageing(s(10));
        assert_eq!(sw.lookup(s(10_009), &b), Some(1));
        assert_eq!(sw.lookup(s(10_010), &b), None);
    }

    #[test]
    fn a_full_table_makes_room_by_forgetting_aged_entries() {
        let mut sw = Bridge::new(2);
        sw.set_ageing(Duration::from_secs(10));
        let b = [2, 0, 0, 0, 0, 0xb];
        let t = Duration::from_secs;
        sw.route(t(0), 1, &frame(b, [2, 0, 0, 0, 0, 1]));
        sw.route(t(5), 2, &frame(b, [2, 0, 0, 0, 0, 2]));
        // Full, nothing aged yet: not learned.
        sw.route(t(9), 3, &frame(b, [2, 0, 0, 0, 0, 3]));
        assert_eq!(sw.stats.table_full, 1);
        // Host 1 aged out at 10 s: the sweep makes room for host 3.
        sw.route(t(12), 3, &frame(b, [2, 0, 0, 0, 0, 3]));
        assert_eq!(sw.stats.aged, 1);
        assert_eq!(sw.lookup(t(12), &[2, 0, 0, 0, 0, 3]), Some(3));
        assert_eq!(sw.lookup(t(12), &[2, 0, 0, 0, 0, 2]), Some(2));
    }

    proptest! {
        #[test]
        fn static_switch_never_panics(frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 1..20)) {
            let mut sw = Bridge::new_static(1);
            sw.add_route([0; 6], vec![0, 1], 16);
            for f in &frames {
                let _ = sw.route(Duration::ZERO, 0, f);
            }
        }

        #[test]
        fn never_panics(port in 0usize..4, frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..20)) {
            let mut sw = Bridge::default();
            for f in &frames {
                let _ = sw.route(Duration::ZERO, port, f);
            }
        }
    }
}
