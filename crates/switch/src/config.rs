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

use std::fmt;
use std::time::Duration;

use sluice_fabric::mtp::Pathlet;
use sluice_fabric::{GilbertElliott, Impairment, LinkConfig};

use crate::mtp::PathletWords;

/// Longest interface name Linux accepts (IFNAMSIZ - 1).
pub const MAX_IFACE_LEN: usize = 15;

/// A configuration word that could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// What was being parsed (a flag or key).
    pub what: String,
    /// Why it was refused.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.reason)
    }
}

impl std::error::Error for ConfigError {}

/// Builds a [`ConfigError`].
pub(crate) fn bad(what: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        what: what.to_owned(),
        reason: reason.into(),
    }
}

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
        for kv in parts {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| bad(spec, format!("{kv:?} is not KEY=VALUE")))?;
            if !pathlet.take(k, v)? {
                set_param(&mut egress, k, v)?;
            }
        }
        let pathlet = pathlet.build(&egress)?;
        Ok(PortSpec {
            netns: netns.map(str::to_owned),
            iface: iface.to_owned(),
            egress,
            pathlet,
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

/// Splits `12.5m` into (12.5, multiplier of the suffix), the suffixes given as (word, factor).
fn number_with_suffix(
    what: &str,
    value: &str,
    suffixes: &[(&str, f64)],
) -> Result<f64, ConfigError> {
    let v = value.trim().to_ascii_lowercase();
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (num, suffix) = v.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| bad(what, format!("{value:?} is not a number")))?;
    let factor = suffixes
        .iter()
        .find(|(s, _)| *s == suffix)
        .map(|(_, f)| *f)
        .ok_or_else(|| bad(what, format!("{value:?}: unknown unit {suffix:?}")))?;
    let out = n * factor;
    if !(0.0..=1e19).contains(&out) {
        return Err(bad(what, format!("{value:?} is out of range")));
    }
    Ok(out)
}

/// A rate in bits per second: `0`, `800k`, `100m`, `10g` (optionally `bit`/`bps` after).
pub fn parse_rate(what: &str, value: &str) -> Result<u64, ConfigError> {
    const UNITS: &[(&str, f64)] = &[
        ("", 1.0),
        ("bit", 1.0),
        ("bps", 1.0),
        ("k", 1e3),
        ("kbit", 1e3),
        ("kbps", 1e3),
        ("m", 1e6),
        ("mbit", 1e6),
        ("mbps", 1e6),
        ("g", 1e9),
        ("gbit", 1e9),
        ("gbps", 1e9),
    ];
    Ok(number_with_suffix(what, value, UNITS)?.round() as u64)
}

/// A size in bytes: `1500`, `64k` (KiB), `1m` (MiB), `2g` (GiB); at most 1 TiB.
pub fn parse_size(what: &str, value: &str) -> Result<usize, ConfigError> {
    const UNITS: &[(&str, f64)] = &[
        ("", 1.0),
        ("b", 1.0),
        ("k", 1024.0),
        ("kb", 1024.0),
        ("m", 1048576.0),
        ("mb", 1048576.0),
        ("g", 1073741824.0),
        ("gb", 1073741824.0),
    ];
    let n = number_with_suffix(what, value, UNITS)?;
    if n > (1u64 << 40) as f64 {
        return Err(bad(what, format!("{value:?} is too large")));
    }
    Ok(n.round() as usize)
}

/// A duration: `250us`, `2ms`, `1s`, `100ns`.
pub fn parse_duration(what: &str, value: &str) -> Result<Duration, ConfigError> {
    const UNITS: &[(&str, f64)] = &[("ns", 1.0), ("us", 1e3), ("ms", 1e6), ("s", 1e9)];
    let ns = number_with_suffix(what, value, UNITS)?;
    if ns > 3600e9 {
        return Err(bad(what, format!("{value:?} is longer than an hour")));
    }
    Ok(Duration::from_nanos(ns.round() as u64))
}

/// A probability within 0..=1.
pub fn parse_probability(what: &str, value: &str) -> Result<f64, ConfigError> {
    let p: f64 = value
        .trim()
        .parse()
        .map_err(|_| bad(what, format!("{value:?} is not a number")))?;
    if !(0.0..=1.0).contains(&p) {
        return Err(bad(
            what,
            format!("{value} is not a probability within 0..=1"),
        ));
    }
    Ok(p)
}

/// Gilbert–Elliott parameters `P_GOOD_TO_BAD:P_BAD_TO_GOOD[:LOSS_IN_BAD]` (loss 1 if absent).
pub fn parse_burst(what: &str, value: &str) -> Result<GilbertElliott, ConfigError> {
    let parts: Vec<&str> = value.split(':').collect();
    let (gb, bg, lb) = match parts.as_slice() {
        [gb, bg] => (*gb, *bg, "1"),
        [gb, bg, lb] => (*gb, *bg, *lb),
        _ => {
            return Err(bad(
                what,
                format!("{value:?} is not P_GOOD_TO_BAD:P_BAD_TO_GOOD[:LOSS_IN_BAD]"),
            ))
        }
    };
    Ok(GilbertElliott {
        p_good_to_bad: parse_probability(what, gb)?,
        p_bad_to_good: parse_probability(what, bg)?,
        loss_in_bad: parse_probability(what, lb)?,
    })
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
