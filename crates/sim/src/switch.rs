//! A learning Ethernet switch node with zero forwarding latency.

use sluice_fabric::Bridge;

/// A switch node: its ports and the shared learning bridge. Ports are indexed in
/// connection order.
#[derive(Debug, Default)]
pub(crate) struct Switch {
    /// Port index to (link index, side of the link this switch is on).
    pub(crate) ports: Vec<(usize, usize)>,
    /// The forwarding decision and its counters.
    pub(crate) bridge: Bridge,
}
