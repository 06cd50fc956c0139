//! The engine's presets for the lab: where the engine runs in it (sl-a in sluice-a,
//! 10.77.0.1/24) and what the lab does while the engine's device opens (bridges the TAP,
//! readies sl-a-br for generic XDP). The engine runtime names no lab; the CLI, the bench and
//! the experiments take the lab's options from here.

use sluice_device::XdpMode;
use sluice_engine::setup::{Backend, EngineOptions, Site, SiteError, Transport};
use sluice_wire::EthernetAddress;

use crate::netns::{
    Lab, ENGINE_IFACE, ENGINE_IP, NS_ENGINE, PREFIX_LEN, TAP_ENGINE_MAC, TAP_IFACE,
};

/// The lab as the engine's site: its TAP name and MAC, bridging the TAP into sluice-a, and
/// the generic-XDP preparation.
pub const SITE: Site = Site {
    tap_iface: TAP_IFACE,
    tap_mac: EthernetAddress(TAP_ENGINE_MAC),
    attach_tap: Some(attach_tap),
    prepare_generic_xdp: Some(prepare_generic_xdp),
};

/// Bridges the engine's TAP to sl-a in sluice-a ([`Lab::attach_tap`]).
fn attach_tap(tap: &str) -> Result<(), SiteError> {
    Ok(Lab::new().attach_tap(tap)?)
}

/// Turns segmentation offload off towards the engine ([`Lab::prepare_generic_xdp`]).
fn prepare_generic_xdp() -> Result<(), SiteError> {
    Ok(Lab::new().prepare_generic_xdp()?)
}

/// `EngineOptions::lab`: the engine side of the lab.
pub trait LabPreset {
    /// The engine side of the lab: sl-a in sluice-a, 10.77.0.1/24.
    fn lab(backend: Backend) -> Self;
}

impl LabPreset for EngineOptions {
    fn lab(backend: Backend) -> Self {
        EngineOptions {
            iface: ENGINE_IFACE.to_string(),
            ip: ENGINE_IP,
            prefix: PREFIX_LEN,
            backend,
            netns: Some(NS_ENGINE.to_string()),
            impair: None,
            xdp_mode: XdpMode::Drv,
            transport: Transport::default(),
            site: SITE,
        }
    }
}
