//! Two paths between a sender and a receiver (mtp.txt 5.1 and 5.2): the sender under a
//! first-hop switch, the receiver under a last-hop switch, and the two switches joined by
//! two links (the paths). The first hop's route to the receiver is the group of both paths;
//! its balancer (set by the experiment) picks among them.

use std::time::Duration;

use sluice_sim::{Host, LinkConfig, LinkId, NodeId, Sim};

use crate::error::ExperimentError;
use crate::fabric::host_addr;

/// One link's rate and delay.
#[derive(Clone, Copy, Debug)]
pub struct Hop {
    /// Bits per second.
    pub bps: u64,
    /// Propagation delay.
    pub delay: Duration,
}

/// The topology's links and queues.
#[derive(Clone, Debug)]
pub struct PathsSpec {
    /// The sender's and receiver's links to their switches.
    pub host: Hop,
    /// The two paths between the switches.
    pub paths: [Hop; 2],
    /// Egress queue of every port, in frames.
    pub queue_packets: usize,
    /// ECN marking threshold of every port, bytes.
    pub ecn_k_bytes: Option<usize>,
}

/// The built topology. Host 0 (the sender) and host 1 (the receiver) have
/// [`host_addr`]`(0)` and `(1)`.
#[derive(Clone, Debug)]
pub struct TwoPaths {
    /// The sending host.
    pub sender: NodeId,
    /// The receiving host.
    pub receiver: NodeId,
    /// The sender's switch, which balances over the paths.
    pub first_hop: NodeId,
    /// The receiver's switch.
    pub last_hop: NodeId,
    /// The two paths, first hop to last hop (side a is the first hop).
    pub paths: [LinkId; 2],
    /// The last hop to the receiver.
    pub downlink: LinkId,
}

/// Builds the two paths into `sim` with hosts `make(0)` (sender) and `make(1)` (receiver).
pub fn build<H: Host>(
    sim: &mut Sim<H>,
    spec: &PathsSpec,
    mut make: impl FnMut(usize) -> Result<H, ExperimentError>,
) -> Result<TwoPaths, ExperimentError> {
    let link = |hop: Hop| {
        let mut l =
            LinkConfig::new(hop.bps, hop.delay).with_queue_packets(spec.queue_packets.max(1));
        if let Some(k) = spec.ecn_k_bytes {
            l = l.with_ecn(k);
        }
        l
    };
    let first_hop = sim.add_static_switch();
    let last_hop = sim.add_static_switch();
    let sender = sim.add_host(make(0)?);
    let receiver = sim.add_host(make(1)?);
    let uplink = sim.connect(sender, first_hop, link(spec.host))?;
    let paths = [
        sim.connect(first_hop, last_hop, link(spec.paths[0]))?,
        sim.connect(first_hop, last_hop, link(spec.paths[1]))?,
    ];
    let downlink = sim.connect(last_hop, receiver, link(spec.host))?;
    let (sender_mac, receiver_mac) = (host_addr(0).0 .0, host_addr(1).0 .0);
    sim.add_route(first_hop, receiver_mac, &paths)?;
    sim.add_route(first_hop, sender_mac, &[uplink])?;
    sim.add_route(last_hop, receiver_mac, &[downlink])?;
    sim.add_route(last_hop, sender_mac, &paths)?;
    Ok(TwoPaths {
        sender,
        receiver,
        first_hop,
        last_hop,
        paths,
        downlink,
    })
}
