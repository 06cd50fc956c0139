//! The command line's values: rates, sizes, durations, probabilities, burst-loss
//! parameters, and the error a word that cannot be used gets.

use std::fmt;
use std::time::Duration;

use sluice_fabric::GilbertElliott;

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
