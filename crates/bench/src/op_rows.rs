//! The measurements of `bench verbs` and `bench mtp` rows (latency, throughput, CPU per
//! operation) and the parts of their tables both print the same way.

use std::fmt::Write as _;

use crate::cells::{fmt_num, fmt_opt, short};
use crate::cpu::CpuUse;

/// CPU per operation, usec: machine-wide busy and the engines' own.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuPerOp {
    /// Machine-wide busy CPU per operation.
    pub busy_us: Option<f64>,
    /// The engines' CPU per operation (Sluice rows).
    pub engines_us: Option<f64>,
}

/// A latency measurement.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lat {
    /// Median, usec one way.
    pub p50_us: f64,
    /// 99th percentile, usec one way.
    pub p99_us: f64,
    /// CPU per round trip.
    pub cpu: CpuPerOp,
}

/// A bandwidth measurement.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bw {
    /// Payload Gbit/s.
    pub gbps: f64,
    /// Messages per second.
    pub msgs_per_s: f64,
    /// CPU per message.
    pub cpu: CpuPerOp,
}

/// CPU use over a run spread over its `ops` operations.
pub fn cpu_per_op(cpu: CpuUse, ops: f64) -> CpuPerOp {
    CpuPerOp {
        busy_us: cpu.busy_us_per_op(ops),
        engines_us: cpu.engines_us_per_op(ops),
    }
}

/// Fails a measurement that is not a positive finite number.
pub fn positive(what: &str, v: f64) -> Result<f64, String> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(format!("{what} measured {v}"))
    }
}

/// A latency row's cells: p50, p99, CPU per operation and the engines' (or why it failed).
pub fn lat_cells(result: &Result<Lat, String>) -> String {
    match result {
        Ok(l) => format!(
            "{:>9} {:>9} {:>9} {:>9}",
            fmt_num(l.p50_us),
            fmt_num(l.p99_us),
            fmt_opt(l.cpu.busy_us),
            fmt_opt(l.cpu.engines_us)
        ),
        Err(e) => format!("failed: {}", short(e)),
    }
}

/// A throughput row's cells: Gbit/s, messages/s, CPU per message and the engines' (or why
/// it failed).
pub fn bw_cells(result: &Result<Bw, String>) -> String {
    match result {
        Ok(b) => format!(
            "{:>9} {:>11} {:>9} {:>9}",
            fmt_num(b.gbps),
            fmt_num(b.msgs_per_s),
            fmt_opt(b.cpu.busy_us),
            fmt_opt(b.cpu.engines_us)
        ),
        Err(e) => format!("failed: {}", short(e)),
    }
}

/// The list of failed rows under a table, whole reasons, if any failed.
pub fn write_failures(t: &mut String, failures: &[String]) {
    if !failures.is_empty() {
        let _ = writeln!(t, "FAILED ROWS");
        for f in failures {
            let _ = writeln!(t, "  {f}");
        }
    }
}
