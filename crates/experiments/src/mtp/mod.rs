//! mtp.txt section 5's experiments and the Homa workloads, in the simulator: MTP (its
//! transport on the devices' pathlets and balancers) against Sluice's TCP with DCTCP on the
//! same topology, the same seed and the same workload.
//!
//! - [`multipath`]: Figure 5, one long flow over a path alternating between 100 and 10 Gbit/s;
//! - [`balance`]: Figure 6, ECMP, packet spraying and the message-aware balancer;
//! - [`isolation`]: Figure 7, two tenants on one link, one sending 8x the messages;
//! - [`workloads`]: W1-W5 ([`cdf`]) on a two-tier fabric at 50 % and 80 % load.

pub mod balance;
pub mod cdf;
pub mod host;
pub mod isolation;
pub mod multipath;
pub mod paths;
pub mod tcp;
pub mod workloads;

use std::time::Duration;

use sluice_sim::mtp::{Balancer, MtpDevice, Pathlet};
use sluice_sim::{Host, LinkId, NodeId, Sim};

use crate::error::ExperimentError;

/// Bits per second as Gbit/s, for `bytes` carried in `d`.
pub fn gbps(bytes: u64, d: Duration) -> f64 {
    if d.is_zero() {
        return 0.0;
    }
    bytes as f64 * 8.0 / d.as_secs_f64() / 1e9
}

/// The egress queue of every switch port in mtp.txt 5.1: 128 full-size frames.
pub const QUEUE_PACKETS: usize = 128;

/// A full-size Ethernet frame, for thresholds given in packets.
pub const FRAME_BYTES: usize = 1514;

/// Makes `switch` an MTP device balancing route groups with `balancer`, each of `links` (its
/// egress ports) a pathlet with ECN feedback at `k_bytes`, ids from `first_id` up.
pub fn ecn_device<H: Host>(
    sim: &mut Sim<H>,
    switch: NodeId,
    links: &[LinkId],
    first_id: u16,
    k_bytes: usize,
    balancer: Balancer,
) -> Result<(), ExperimentError> {
    let mut device = MtpDevice::new(0).with_balancer(balancer);
    for (i, &link) in links.iter().enumerate() {
        let port = sim.switch_port(switch, link)?;
        device = device.with_pathlet(port, Pathlet::ecn(first_id + i as u16, k_bytes));
    }
    sim.set_mtp_device(switch, device)?;
    Ok(())
}
