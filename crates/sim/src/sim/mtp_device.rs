//! MTP devices on the simulator's switches: attaching one and reading its counters.

use sluice_fabric::mtp::{MtpDevice, MtpStats};

use super::{NodeKind, Sim};
use crate::{Host, LinkId, NodeId, SimError};

impl<H: Host> Sim<H> {
    /// The switch's index, or why `node` is not a switch.
    fn switch_index(&self, node: NodeId) -> Result<usize, SimError> {
        match self.net.nodes.get(node.0) {
            Some(NodeKind::Switch(s)) => Ok(*s),
            Some(NodeKind::Host(_)) => Err(SimError::NotASwitch(node)),
            None => Err(SimError::NoSuchNode(node)),
        }
    }

    /// The port index at `switch` of `link` (ports count in connection order), for
    /// [`MtpDevice::with_pathlet`].
    pub fn switch_port(&self, switch: NodeId, link: LinkId) -> Result<usize, SimError> {
        let s = self.switch_index(switch)?;
        self.net.switches[s]
            .ports
            .iter()
            .position(|&(l, _)| l == link.0)
            .ok_or(SimError::NotAttached(link, switch))
    }

    /// Makes `switch` an MTP device: its route groups use the device's balancer, and each
    /// frame it forwards passes the device's fair share, feedback and trimming (connect
    /// the switch's links first: the device is sized to its ports now).
    pub fn set_mtp_device(
        &mut self,
        switch: NodeId,
        mut device: MtpDevice,
    ) -> Result<(), SimError> {
        let s = self.switch_index(switch)?;
        let sw = &mut self.net.switches[s];
        device.resize(sw.ports.len());
        sw.mtp = Some(Box::new(device));
        Ok(())
    }

    /// The MTP device of `switch`, if it has one.
    pub fn mtp_device(&self, switch: NodeId) -> Option<&MtpDevice> {
        let s = self.switch_index(switch).ok()?;
        self.net.switches[s].mtp.as_deref()
    }

    /// The counters of `switch`'s MTP device, if it has one.
    pub fn mtp_device_stats(&self, switch: NodeId) -> Option<MtpStats> {
        self.mtp_device(switch).map(|d| d.stats().clone())
    }
}
