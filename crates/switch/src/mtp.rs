//! MTP in `sluice switch` (mtp.txt 3-5, docs/mtp.md "Devices"): the same
//! [`MtpDevice`] the simulator runs, configured from the command line.
//!
//! - Per port (port-spec keys): `pathlet=ID`, `pathlet-tc=TC` (tag feedback with this class
//!   instead of the packet's), `feedback=ecn[:K]|rate|queue` (ECN's K defaults to the
//!   port's `ecn-k`, else 20 frames of 1514 bytes, mtp.txt 5.1's threshold).
//! - Switch-wide: `balancer=hash|spray|alternate:PERIOD|message`, `fair-share=THRESHOLD`
//!   (bytes of shared queue above which a class over its share is dropped), `trim=HEADROOM`
//!   (trim MTP data on overflow; trimmed headers may use HEADROOM bytes beyond the queue),
//!   and route groups `MAC=PORT+PORT...` (port indices in --port order) that the balancer
//!   chooses among; other destinations are learned as before.

use sluice_fabric::mtp::{Balancer, FairShare, MtpDevice, MtpStats, DEFAULT_MAX_PINS};
use sluice_fabric::Mac;

use crate::config::PortSpec;
use crate::core::SwitchCore;
use crate::units::{bad, parse_duration, parse_size, ConfigError};

/// Most route groups the switch holds.
pub const MAX_GROUPS: usize = 4096;

/// The switch-wide MTP configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MtpConfig {
    /// How route groups are balanced.
    pub balancer: Balancer,
    /// Per-tenant fair share at ingress, if on.
    pub fair_share: Option<FairShare>,
    /// Trimming on overflow with this headroom, if on.
    pub trim_headroom: Option<usize>,
    /// Route groups: a MAC and the ports it may leave by.
    pub groups: Vec<(Mac, Vec<usize>)>,
}

impl Default for MtpConfig {
    fn default() -> Self {
        MtpConfig {
            balancer: Balancer::Hash,
            fair_share: None,
            trim_headroom: None,
            groups: Vec::new(),
        }
    }
}

impl MtpConfig {
    /// Sets one switch-wide MTP parameter from its key and value (the flags' spelling).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        match key {
            "balancer" => self.balancer = parse_balancer(value)?,
            "fair-share" => self.fair_share = Some(FairShare::new(parse_size(key, value)?)),
            "trim" => self.trim_headroom = Some(parse_size(key, value)?),
            "route" => {
                if self.groups.len() >= MAX_GROUPS {
                    return Err(bad(key, format!("more than {MAX_GROUPS} route groups")));
                }
                self.groups.push(parse_group(value)?);
            }
            _ => return Err(bad(key, "unknown MTP parameter")),
        }
        Ok(())
    }

    /// Whether anything asks for a device (a pathlet, or a non-default switch-wide part).
    pub fn wanted(&self, ports: &[PortSpec]) -> bool {
        *self != MtpConfig::default() || ports.iter().any(|p| p.pathlet.is_some())
    }

    /// The device for these ports.
    pub fn device(&self, ports: &[PortSpec]) -> MtpDevice {
        let mut dev = MtpDevice::new(ports.len()).with_balancer(self.balancer);
        for (i, p) in ports.iter().enumerate() {
            if let Some(pathlet) = p.pathlet {
                dev = dev.with_pathlet(i, pathlet);
            }
        }
        if let Some(fs) = self.fair_share {
            dev = dev.with_fair_share(fs);
        }
        if let Some(h) = self.trim_headroom {
            dev = dev.with_trimming(h);
        }
        dev.with_max_pins(DEFAULT_MAX_PINS)
    }
}

/// `hash`, `spray`, `alternate:PERIOD` (e.g. `alternate:384us`) or `message`.
pub fn parse_balancer(value: &str) -> Result<Balancer, ConfigError> {
    match value.split_once(':') {
        None if value == "hash" => Ok(Balancer::Hash),
        None if value == "spray" => Ok(Balancer::Spray),
        None if value == "message" => Ok(Balancer::Message),
        Some(("alternate", period)) => {
            let period = parse_duration("balancer", period)?;
            if period.is_zero() {
                return Err(bad("balancer", "the alternation period must be positive"));
            }
            Ok(Balancer::Alternate { period })
        }
        _ => Err(bad(
            "balancer",
            format!("{value:?}: expected hash, spray, alternate:PERIOD or message"),
        )),
    }
}

/// `aa:bb:cc:dd:ee:ff=P+P...`: a unicast MAC and its group of port indices.
pub fn parse_group(value: &str) -> Result<(Mac, Vec<usize>), ConfigError> {
    let (mac, ports) = value
        .split_once('=')
        .ok_or_else(|| bad("route", format!("{value:?} is not MAC=PORT+PORT...")))?;
    let mut out = [0u8; 6];
    let mut octets = mac.split(':');
    for o in &mut out {
        let word = octets.next().unwrap_or_default();
        *o = u8::from_str_radix(word, 16)
            .map_err(|_| bad("route", format!("{mac:?} is not a MAC address")))?;
    }
    if octets.next().is_some() || out[0] & 1 != 0 {
        return Err(bad(
            "route",
            format!("{mac:?} is not a unicast MAC address"),
        ));
    }
    let ports = ports
        .split('+')
        .map(|p| p.parse::<usize>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| bad("route", format!("{ports:?} is not PORT+PORT...")))?;
    if ports.is_empty() || ports.len() > crate::MAX_PORTS {
        return Err(bad("route", "a group has 1 to MAX_PORTS ports"));
    }
    Ok((out, ports))
}

impl SwitchCore {
    /// Makes this switch an MTP device (sized to its ports).
    pub fn set_mtp_device(&mut self, mut device: MtpDevice) {
        device.resize(self.ports.len());
        self.mtp = Some(Box::new(device));
    }

    /// Sends frames for `mac` over the group `ports` (chosen among by the MTP device's
    /// balancer, else by flow hash); refused (false) for an empty group, a port the switch
    /// does not have, or beyond [`MAX_GROUPS`].
    pub fn add_group(&mut self, mac: Mac, ports: Vec<usize>) -> bool {
        ports.iter().all(|&p| p < self.ports.len()) && self.bridge.add_group(mac, ports, MAX_GROUPS)
    }

    /// Applies `cfg` and the ports' pathlets; refused when a group names a port the switch
    /// does not have.
    pub fn configure_mtp(
        &mut self,
        ports: &[PortSpec],
        cfg: &MtpConfig,
    ) -> Result<(), ConfigError> {
        for (mac, group) in &cfg.groups {
            if !self.add_group(*mac, group.clone()) {
                return Err(bad("route", format!("{group:?}: no such port")));
            }
        }
        if cfg.wanted(ports) {
            self.set_mtp_device(cfg.device(ports));
        }
        Ok(())
    }

    /// The MTP device, if configured.
    pub fn mtp_device(&self) -> Option<&MtpDevice> {
        self.mtp.as_deref()
    }

    /// The MTP device's counters, if configured.
    pub fn mtp_stats(&self) -> Option<&MtpStats> {
        self.mtp.as_deref().map(MtpDevice::stats)
    }
}
