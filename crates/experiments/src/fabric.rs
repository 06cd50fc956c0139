//! A leaf-spine fabric in the simulator: hosts under leaf switches, every leaf joined to
//! every spine, flows spread over the spines by ECMP (static switches, so the fabric's
//! loops never flood). Every host knows every other host's MAC (no ARP on the fabric).

use std::net::Ipv4Addr;
use std::time::Duration;

use sluice_sim::{Host, LinkConfig, NodeId, Sim};
use sluice_tcp::{Config, Stack};
use sluice_wire::EthernetAddress;

use crate::error::ExperimentError;

/// The fabric's shape and its links.
#[derive(Clone, Debug)]
pub struct FabricSpec {
    /// Spine switches.
    pub spines: usize,
    /// Leaf (top-of-rack) switches.
    pub leaves: usize,
    /// Hosts under each leaf.
    pub hosts_per_leaf: usize,
    /// Host to leaf links, bits per second.
    pub host_bps: u64,
    /// Leaf to spine links, bits per second.
    pub uplink_bps: u64,
    /// Propagation delay of every link.
    pub delay: Duration,
    /// Egress queue per switch port, bytes (tail drop beyond it).
    pub queue_bytes: usize,
    /// ECN marking threshold K per switch port, bytes.
    pub ecn_k_bytes: Option<usize>,
    /// Strict-priority queues per port by IPv4 DSCP, sharing `queue_bytes` (0 or 1: a FIFO).
    pub priority_queues: usize,
}

/// A built fabric: the hosts in order (leaf by leaf), with their leaf.
pub struct Fabric {
    /// Host nodes, leaf by leaf.
    pub hosts: Vec<NodeId>,
    /// Host addresses, in the same order.
    pub ips: Vec<Ipv4Addr>,
    /// Each host's leaf index.
    pub leaf_of: Vec<usize>,
    /// The leaf switches.
    pub leaves: Vec<NodeId>,
    /// The spine switches.
    pub spines: Vec<NodeId>,
}

/// Host `i`'s MAC and address (10.1.x.y).
pub fn host_addr(i: usize) -> (EthernetAddress, Ipv4Addr) {
    let [_, _, hi, lo] = (i as u32 + 1).to_be_bytes();
    (
        EthernetAddress([2, 0, 0, 1, hi, lo]),
        Ipv4Addr::new(10, 1, hi, lo),
    )
}

/// Builds the fabric into `sim`; `config(i)` gives host `i`'s core configuration (its MAC
/// and address are overwritten with [`host_addr`]).
pub fn build(
    sim: &mut Sim<Stack>,
    spec: &FabricSpec,
    mut config: impl FnMut(usize) -> Config,
) -> Result<Fabric, ExperimentError> {
    let n = spec.leaves * spec.hosts_per_leaf;
    build_with(sim, spec, |i| {
        let (mac, ip) = host_addr(i);
        let mut c = config(i);
        c.mac = mac;
        c.ip = ip;
        let mut stack =
            Stack::new(c).map_err(|e| ExperimentError::Usage(format!("host config: {e}")))?;
        for j in (0..n).filter(|&j| j != i) {
            let (m, a) = host_addr(j);
            stack.add_neighbor(a, m);
        }
        Ok(stack)
    })
}

/// Builds the fabric into `sim` with any kind of host: `make(i)` builds host `i`, which
/// must use [`host_addr`]`(i)` and know every other host's MAC.
pub fn build_with<H: Host>(
    sim: &mut Sim<H>,
    spec: &FabricSpec,
    mut make: impl FnMut(usize) -> Result<H, ExperimentError>,
) -> Result<Fabric, ExperimentError> {
    if spec.spines == 0 || spec.leaves == 0 || spec.hosts_per_leaf == 0 {
        return Err(ExperimentError::Usage(
            "a fabric needs at least one spine, leaf and host".into(),
        ));
    }
    let n = spec.leaves * spec.hosts_per_leaf;
    let link = |bps: u64| {
        let mut l = LinkConfig::new(bps, spec.delay).with_queue(spec.queue_bytes);
        if let Some(k) = spec.ecn_k_bytes {
            l = l.with_ecn(k);
        }
        if spec.priority_queues >= 2 {
            l = l.with_priority_queues(spec.priority_queues);
        }
        l
    };
    let spines: Vec<NodeId> = (0..spec.spines).map(|_| sim.add_static_switch()).collect();
    let leaves: Vec<NodeId> = (0..spec.leaves).map(|_| sim.add_static_switch()).collect();
    // uplinks[leaf][spine]
    let mut uplinks = Vec::with_capacity(spec.leaves);
    for &leaf in &leaves {
        let mut row = Vec::with_capacity(spec.spines);
        for &spine in &spines {
            row.push(sim.connect(leaf, spine, link(spec.uplink_bps))?);
        }
        uplinks.push(row);
    }
    let mut fabric = Fabric {
        hosts: Vec::with_capacity(n),
        ips: Vec::with_capacity(n),
        leaf_of: Vec::with_capacity(n),
        leaves: leaves.clone(),
        spines: spines.clone(),
    };
    let mut downlinks = Vec::with_capacity(n);
    for i in 0..n {
        let (_, ip) = host_addr(i);
        let h = sim.add_host(make(i)?);
        let leaf = i / spec.hosts_per_leaf;
        downlinks.push(sim.connect(h, leaves[leaf], link(spec.host_bps))?);
        fabric.hosts.push(h);
        fabric.ips.push(ip);
        fabric.leaf_of.push(leaf);
    }
    for (i, &downlink) in downlinks.iter().enumerate() {
        let mac = host_addr(i).0 .0;
        let home = fabric.leaf_of[i];
        for (l, &leaf) in leaves.iter().enumerate() {
            if l == home {
                sim.add_route(leaf, mac, &[downlink])?;
            } else {
                sim.add_route(leaf, mac, &uplinks[l])?;
            }
        }
        for (s, &spine) in spines.iter().enumerate() {
            sim.add_route(spine, mac, &[uplinks[home][s]])?;
        }
    }
    Ok(fabric)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flows::{Class, Flows};

    #[test]
    fn every_rack_reaches_every_other_over_all_spines() {
        let spec = FabricSpec {
            spines: 2,
            leaves: 3,
            hosts_per_leaf: 2,
            host_bps: 10_000_000_000,
            uplink_bps: 10_000_000_000,
            delay: Duration::from_micros(1),
            queue_bytes: 1 << 20,
            ecn_k_bytes: None,
            priority_queues: 0,
        };
        let mut sim: Sim<Stack> = Sim::new(3);
        let fab = build(&mut sim, &spec, |i| {
            let (mac, ip) = host_addr(i);
            Config::new(mac, ip)
        })
        .unwrap();
        assert_eq!(fab.leaf_of, vec![0, 0, 1, 1, 2, 2]);
        let mut flows = Flows::new(&mut sim, &fab.hosts, &fab.ips).unwrap();
        let mut chans = Vec::new();
        for src in 0..6 {
            for dst in (0..6).filter(|&d| d != src) {
                chans.push(flows.open(&mut sim, src, dst).unwrap());
            }
        }
        let deadline = sim.now() + Duration::from_secs(1);
        sim.run_until(deadline, |now, hosts| {
            flows.step(now, hosts);
            flows.all_open()
        })
        .unwrap();
        for &c in &chans {
            flows.send(&mut sim, c, 10_000, Class::Background).unwrap();
        }
        let deadline = sim.now() + Duration::from_secs(1);
        sim.run_until(deadline, |now, hosts| {
            flows.step(now, hosts);
            flows.idle()
        })
        .unwrap();
        assert_eq!(flows.error(), None);
        assert_eq!(flows.done.len(), chans.len());
        assert!(flows.done.iter().all(|c| c.bytes == 10_000));
        // Static switches never flood, and ECMP used both spines (switch nodes 0 and 1).
        for spine in 0..2 {
            let s = sim.switch_stats(sluice_sim::NodeId(spine)).unwrap();
            assert!(s.forwarded > 0, "spine {spine} carried nothing: {s:?}");
            assert_eq!(s.flooded + s.unrouted, 0, "{s:?}");
        }
    }
}
