//! Ports and their egress parameters (the shared model's [`LinkConfig`]), parsed from the
//! command line's words.
//!
//! A port is `[NETNS:]IFACE[,KEY=VALUE...]`; the keys (`rate`, `queue-bytes`,
//! `queue-packets`, `ecn-k`, `loss`, `burst-loss`, `reorder`, `reorder-delay`, `duplicate`,
//! `corrupt`, `delay`, `class-queues`) override the switch-wide defaults for that port's
//! egress only; `pathlet`, `pathlet-tc` and `feedback` give it an MTP pathlet
//! ([`crate::mtp`]).
//! Values: rates `100m`, `1g`, `2.5gbit`, `0` (unlimited); sizes `64k`, `1m`, `1500`;
//! times `500us`, `2ms`, `1s`; probabilities `0..=1`; burst loss `P_GB:P_BG[:LOSS_IN_BAD]`.

use std::time::Duration;

use sluice_fabric::mtp::Pathlet;
use sluice_fabric::{Impairment, LinkConfig};

use crate::pathlet_words::PathletWords;
use crate::units::bad;
pub use crate::units::{
    parse_burst, parse_duration, parse_probability, parse_rate, parse_size, ConfigError,
};

/// Longest interface name Linux accepts (IFNAMSIZ - 1).
pub const MAX_IFACE_LEN: usize = 15;

/// The switch's default egress: unlimited rate, no delay, a 1 MiB queue, no ECN, no
/// impairment, and a 500 µs hold-back for frames chosen for reordering.
pub fn default_egress() -> LinkConfig {
    LinkConfig::new(0, Duration::ZERO)
        .with_impairment(Impairment::default().with_reorder(0.0, Duration::from_micros(500)))
}

/// Sets one egress parameter from its key and value (the port-spec and flag spelling).
pub fn set_param(c: &mut LinkConfig, key: &str, value: &str) -> Result<(), ConfigError> {
    let imp = &mut c.impairment;
    match key {
        "rate" => c.bandwidth_bps = parse_rate(key, value)?,
        "queue-bytes" => c.queue_capacity_bytes = parse_size(key, value)?,
        "queue-packets" => c.queue_capacity_packets = Some(parse_size(key, value)?),
        "ecn-k" => c.ecn_threshold_bytes = Some(parse_size(key, value)?),
        "loss" => imp.loss = parse_probability(key, value)?,
        "burst-loss" => imp.burst_loss = Some(parse_burst(key, value)?),
        "reorder" => imp.reorder = parse_probability(key, value)?,
        "reorder-delay" => imp.reorder_delay = parse_duration(key, value)?,
        "duplicate" => imp.duplicate = parse_probability(key, value)?,
        "corrupt" => imp.corrupt = parse_probability(key, value)?,
        "delay" => c.delay = parse_duration(key, value)?,
        "class-queues" => c.class_queues = parse_size(key, value)?.min(64),
        _ => return Err(bad(key, "unknown egress parameter")),
    }
    Ok(())
}

/// One switch port: an interface, the namespace it lives in, and its egress.
#[derive(Clone, Debug)]
pub struct PortSpec {
    /// Network namespace (a name under /var/run/netns); None: the switch's own.
    pub netns: Option<String>,
    /// Interface name.
    pub iface: String,
    /// Egress parameters (the shared model's).
    pub egress: LinkConfig,
    /// The port's MTP pathlet, if it has one.
    pub pathlet: Option<Pathlet>,
    /// Whether broadcast and unknown unicast go out of this port (`flood=on|off`); off on
    /// all but one of parallel links between switches keeps floods from looping.
    pub flood: bool,
}

impl PortSpec {
    /// Parses `[NETNS:]IFACE[,KEY=VALUE...]` with `defaults` for keys not given.
    pub fn parse(spec: &str, defaults: &LinkConfig) -> Result<PortSpec, ConfigError> {
        let mut parts = spec.split(',');
        let name = parts.next().unwrap_or_default();
        let (netns, iface) = match name.split_once(':') {
            Some((ns, i)) => (Some(ns), i),
            None => (None, name),
        };
        if let Some(ns) = netns {
            if ns.is_empty() || ns.contains('/') || ns == "." || ns == ".." {
                return Err(bad(spec, format!("{ns:?} is not a namespace name")));
            }
        }
        if iface.is_empty() || iface.len() > MAX_IFACE_LEN || iface.contains('/') {
            return Err(bad(spec, format!("{iface:?} is not an interface name")));
        }
        let mut egress = defaults.clone();
        let mut pathlet = PathletWords::default();
        let mut flood = true;
        for kv in parts {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| bad(spec, format!("{kv:?} is not KEY=VALUE")))?;
            if k == "flood" {
                flood = match v {
                    "on" => true,
                    "off" => false,
                    _ => return Err(bad(k, format!("{v:?}: expected on or off"))),
                };
            } else if !pathlet.take(k, v)? {
                set_param(&mut egress, k, v)?;
            }
        }
        let pathlet = pathlet.build(&egress)?;
        Ok(PortSpec {
            netns: netns.map(str::to_owned),
            iface: iface.to_owned(),
            egress,
            pathlet,
            flood,
        })
    }

    /// `NETNS:IFACE` or `IFACE`.
    pub fn name(&self) -> String {
        match &self.netns {
            Some(ns) => format!("{ns}:{}", self.iface),
            None => self.iface.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn units() {
        assert_eq!(parse_rate("r", "100m"), Ok(100_000_000));
        assert_eq!(parse_rate("r", "2.5Gbit"), Ok(2_500_000_000));
        assert_eq!(parse_rate("r", "0"), Ok(0));
        assert_eq!(parse_size("s", "64k"), Ok(65536));
        assert_eq!(parse_size("s", "1500"), Ok(1500));
        assert_eq!(parse_size("s", "2G"), Ok(2 << 30));
        assert!(parse_size("s", "2t").is_err());
        assert_eq!(parse_duration("d", "250us"), Ok(Duration::from_micros(250)));
        assert_eq!(
            parse_duration("d", "1.5ms"),
            Ok(Duration::from_micros(1500))
        );
        assert!(parse_duration("d", "5").is_err());
        assert!(parse_rate("r", "-1m").is_err());
        assert!(parse_rate("r", "1e999").is_err());
        assert!(parse_probability("p", "1.5").is_err());
        assert!(parse_probability("p", "NaN").is_err());
        let ge = parse_burst("b", "0.01:0.2").unwrap();
        assert_eq!(ge.loss_in_bad, 1.0);
        assert!(parse_burst("b", "0.01").is_err());
    }

    #[test]
    fn port_specs() {
        let mut defaults = default_egress();
        defaults.bandwidth_bps = 1_000_000_000;
        let p = PortSpec::parse("sluice-s:sw-up,rate=100m,ecn-k=30k,loss=0.01", &defaults).unwrap();
        assert_eq!(p.netns.as_deref(), Some("sluice-s"));
        assert_eq!(p.iface, "sw-up");
        assert_eq!(p.egress.bandwidth_bps, 100_000_000);
        assert!(p.flood);
        assert!(!PortSpec::parse("u1,flood=off", &defaults).unwrap().flood);
        assert!(PortSpec::parse("u1,flood=no", &defaults).is_err());
        assert_eq!(p.egress.ecn_threshold_bytes, Some(30 * 1024));
        assert_eq!(p.egress.impairment.loss, 0.01);
        assert_eq!(
            p.egress.impairment.reorder_delay,
            Duration::from_micros(500)
        );
        assert_eq!(p.name(), "sluice-s:sw-up");
        let q = PortSpec::parse("veth0", &defaults).unwrap();
        assert_eq!(q.netns, None);
        assert_eq!(q.egress.bandwidth_bps, defaults.bandwidth_bps);
        for bad in [
            "",
            ":x",
            "ns:",
            "a:much-too-long-name0",
            "ns:x,rate",
            "ns:x,colour=red",
            "../x:y",
        ] {
            assert!(PortSpec::parse(bad, &defaults).is_err(), "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn parsing_never_panics(s in ".{0,40}") {
            let _ = PortSpec::parse(&s, &default_egress());
            let _ = parse_rate("r", &s);
            let _ = parse_duration("d", &s);
            let _ = parse_burst("b", &s);
        }
    }
}
