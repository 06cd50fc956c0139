//! The impairments over the run: a cycle of phases, each a fresh `sluice switch` over the
//! switched lab's ports with one impairment on every port's egress (so data and ACKs of
//! both sides meet it both ways), a clean phase between every two impaired ones. The
//! settings are the issue's: 5 % loss, 1 % reordering (the switch's default hold-back),
//! 1 % duplication, 1 % corruption, then all four at once at lower rates.

use std::time::Duration;

use serde::Serialize;
use sluice_switch::{default_egress, PortReport, PortSpec};

use crate::error::ExperimentError;

/// The phases of one cycle: a name and the egress parameters of every port.
pub const CYCLE: [(&str, &str); 10] = [
    ("clean", ""),
    ("loss 5 %", "loss=0.05"),
    ("clean", ""),
    ("reorder 1 %", "reorder=0.01"),
    ("clean", ""),
    ("duplicate 1 %", "duplicate=0.01"),
    ("clean", ""),
    ("corrupt 1 %", "corrupt=0.01"),
    ("clean", ""),
    (
        "mixed",
        "loss=0.01,reorder=0.01,duplicate=0.01,corrupt=0.01",
    ),
];

/// Shortest phase: the switch restarts between phases, which costs a few milliseconds.
const MIN_PHASE: Duration = Duration::from_secs(1);

/// How long each phase lasts: `wanted`, shortened so that a short run still goes through
/// one whole cycle.
pub fn phase_length(run: Duration, wanted: Duration) -> Duration {
    wanted.min(run / CYCLE.len() as u32).max(MIN_PHASE)
}

/// Phase `i`'s name and parameters (the cycle repeats).
pub fn phase(i: usize) -> (&'static str, &'static str) {
    CYCLE[i % CYCLE.len()]
}

/// The switch's ports for phase `i`, every one with the phase's parameters.
pub fn port_specs(ports: &[String], i: usize) -> Result<Vec<PortSpec>, ExperimentError> {
    let (_, params) = phase(i);
    let defaults = default_egress();
    ports
        .iter()
        .map(|name| {
            let spec = if params.is_empty() {
                name.clone()
            } else {
                format!("{name},{params}")
            };
            PortSpec::parse(&spec, &defaults)
                .map_err(|e| ExperimentError::Usage(format!("switch port {spec}: {e}")))
        })
        .collect()
}

/// What the switch did in one phase, over all its ports.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PhaseRecord {
    /// The phase's name.
    pub name: &'static str,
    /// Seconds into the run it began.
    pub start_s: f64,
    /// Its length in seconds.
    pub seconds: f64,
    /// Frames the switch forwarded.
    pub forwarded: u64,
    /// Frames it dropped by the configured loss.
    pub lost: u64,
    /// Frames it held back to reorder them.
    pub reordered: u64,
    /// Frames it sent twice.
    pub duplicated: u64,
    /// Frames it flipped a bit in.
    pub corrupted: u64,
    /// Frames it dropped otherwise (full queues, device errors).
    pub other_drops: u64,
}

impl PhaseRecord {
    /// The record of a phase from its switch's port reports.
    pub fn new(name: &'static str, start_s: f64, seconds: f64, reports: &[PortReport]) -> Self {
        let mut r = PhaseRecord {
            name,
            start_s,
            seconds,
            ..PhaseRecord::default()
        };
        for p in reports {
            let link = &p.stats.egress.link;
            r.forwarded += p.stats.forwarded;
            r.lost += link.lost;
            r.reordered += link.reordered;
            r.duplicated += link.duplicated;
            r.corrupted += link.corrupted;
            r.other_drops += link.queue_drops
                + p.stats.oversize_drops
                + p.stats.tx_error_drops
                + p.stats.egress.delay_line_drops
                + p.device.rx_truncated
                + p.device.rx_dropped
                + p.device.tx_dropped;
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_runs_still_cycle_once_and_every_phase_parses() {
        let s = Duration::from_secs;
        assert_eq!(phase_length(s(20), s(30)), s(2));
        assert_eq!(phase_length(s(1800), s(30)), s(30));
        assert_eq!(phase_length(s(3), s(30)), s(1));
        let ports = vec!["sluice-s:sw-up".to_string(), "sluice-s:sw-c1".to_string()];
        for i in 0..CYCLE.len() {
            let specs = port_specs(&ports, i).unwrap();
            assert_eq!(specs.len(), 2);
            let imp = &specs[1].egress.impairment;
            let on = imp.loss + imp.reorder + imp.duplicate + imp.corrupt;
            assert_eq!(on > 0.0, phase(i).0 != "clean", "{:?}", phase(i));
        }
        assert_eq!(phase(CYCLE.len() + 1), phase(1));
    }
}
