//! A switch node (learning or static) with zero forwarding latency, and its MTP device.

use sluice_fabric::mtp::MtpDevice;
use sluice_fabric::Bridge;

/// A switch node: its ports and the shared learning bridge. Ports are indexed in
/// connection order.
#[derive(Debug, Default)]
pub(crate) struct Switch {
    /// Port index to (link index, side of the link this switch is on).
    pub(crate) ports: Vec<(usize, usize)>,
    /// The forwarding decision and its counters.
    pub(crate) bridge: Bridge,
    /// What the switch does for MTP (pathlets, balancer, fair share, trimming), if set.
    pub(crate) mtp: Option<Box<MtpDevice>>,
}
