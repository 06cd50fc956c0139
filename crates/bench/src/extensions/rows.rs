//! The extension bench's rows: what is attached to the engine while the RPCs run, and what
//! one measured row holds.

use std::fmt;

/// Rules the firewall row writes into the firewall's `rules` hash map.
pub const FIREWALL_RULES: u32 = 10_000;

/// One row of the table: what runs at the engine's hook points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extension {
    /// Nothing attached: the baseline every ratio is against.
    Baseline,
    /// The null XDP program (every frame passes) at ingress.
    Null,
    /// VLAN strip at ingress.
    VlanStrip,
    /// The 5-tuple firewall at ingress with [`FIREWALL_RULES`] rules the traffic does not
    /// match (so it passes).
    Firewall,
    /// Every tracepoint of the TCP core on.
    Tracepoints,
    /// `sluice capture` of every frame at both hook points.
    Capture,
    /// `sluice capture` with a tcpdump filter that every frame runs through.
    CaptureFiltered,
}

impl Extension {
    /// Every row, in table order.
    pub const ALL: [Extension; 7] = [
        Extension::Baseline,
        Extension::Null,
        Extension::VlanStrip,
        Extension::Firewall,
        Extension::Tracepoints,
        Extension::Capture,
        Extension::CaptureFiltered,
    ];

    /// Its name in the table and the CSV.
    pub fn name(self) -> &'static str {
        match self {
            Extension::Baseline => "baseline",
            Extension::Null => "xdp null",
            Extension::VlanStrip => "xdp vlan_strip",
            Extension::Firewall => "xdp firewall 10k",
            Extension::Tracepoints => "tracepoints all",
            Extension::Capture => "capture",
            Extension::CaptureFiltered => "capture filtered",
        }
    }

    /// The shipped eBPF program it loads at ingress, if any.
    pub fn module(self) -> Option<&'static str> {
        match self {
            Extension::Null => Some("null"),
            Extension::VlanStrip => Some("vlan_strip"),
            Extension::Firewall => Some("firewall"),
            _ => None,
        }
    }

    /// Whether it runs a `sluice capture` session, and with the filter.
    pub fn capture(self) -> Option<bool> {
        match self {
            Extension::Capture => Some(false),
            Extension::CaptureFiltered => Some(true),
            _ => None,
        }
    }
}

/// The firewall's key (`struct five_tuple`: addresses and ports in network order, protocol,
/// three bytes of padding) of rule `i`: TCP from 198.18.0.0/15 (RFC 2544's benchmarking
/// range, never the lab's) to 10.77.0.1:80, so no lab frame matches.
pub fn firewall_rule(i: u32) -> [u8; 16] {
    let src = 0xc612_0000u32 | (i & 0x1_ffff);
    let mut k = [0u8; 16];
    k[..4].copy_from_slice(&src.to_be_bytes());
    k[4..8].copy_from_slice(&[10, 77, 0, 1]);
    k[8..10].copy_from_slice(&40000u16.to_be_bytes());
    k[10..12].copy_from_slice(&80u16.to_be_bytes());
    k[12] = 6;
    k
}

/// Why a cell holds no number.
#[derive(Clone, Debug, PartialEq)]
pub enum Missing {
    /// The run failed (why).
    Failed(String),
    /// The column does not apply to the row (why, and where its cost shows instead).
    NotApplicable(&'static str),
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::Failed(why) => write!(f, "failed: {why}"),
            Missing::NotApplicable(why) => write!(f, "n/a ({why})"),
        }
    }
}

/// A measured value, or why there is none.
pub type Cell<T> = Result<T, Missing>;

/// What one row's RPCs in the lab gave.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabResult {
    /// Round trips per second (sockperf ping-pong's whole run).
    pub ops_per_s: f64,
    /// Round trips completed.
    pub round_trips: u64,
    /// The engine process's CPU per round trip, microseconds.
    pub engine_us_per_op: Option<f64>,
    /// The machine's busy CPU per round trip, microseconds (clients included).
    pub machine_us_per_op: Option<f64>,
    /// Runs of the row's module over the run (it saw the traffic).
    pub module_runs: Option<u64>,
    /// Frames the row's module dropped (the firewall's must stay 0: no rule matches).
    pub module_drops: Option<u64>,
    /// Entries the firewall's map held, counted back by a map dump.
    pub firewall_rules: Option<u64>,
    /// Records in the row's pcap file.
    pub pcap_packets: Option<u64>,
    /// Tracepoint hits over the run (the all-tracepoints row: they fired).
    pub trace_hits: Option<u64>,
}

/// What one row's in-process hook run gave.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MicroResult {
    /// Nanoseconds per frame through `Hooks::ingress`/`egress` (wall clock, the bench only).
    pub ns_per_frame: f64,
    /// Frames run through the hooks (ingress and egress).
    pub frames: u64,
    /// Runs the row's module counted.
    pub module_runs: u64,
    /// Frames the row's tap kept.
    pub captured: u64,
    /// Entries of the firewall's map.
    pub firewall_rules: Option<u64>,
}

/// One row of the table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// What ran.
    pub ext: Extension,
    /// The RPCs in the lab.
    pub lab: Cell<LabResult>,
    /// The in-process hook path.
    pub micro: Cell<MicroResult>,
}

/// One program of the interpreter-vs-JIT section.
#[derive(Clone, Debug, PartialEq)]
pub struct JitRow {
    /// The shipped program's name.
    pub program: &'static str,
    /// Nanoseconds per frame in `sluice_ebpf::run`.
    pub interp_ns: Cell<f64>,
    /// Nanoseconds per frame in the JIT's code.
    pub jit_ns: Cell<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_rules_are_distinct_and_off_the_lab() {
        let names: std::collections::BTreeSet<_> =
            Extension::ALL.iter().map(|e| e.name()).collect();
        assert_eq!(names.len(), Extension::ALL.len());
        let keys: std::collections::BTreeSet<_> = (0..FIREWALL_RULES).map(firewall_rule).collect();
        assert_eq!(keys.len(), FIREWALL_RULES as usize);
        let k = firewall_rule(9_999);
        assert_eq!(&k[..2], &[198, 18]);
        assert_eq!(&k[4..], &[10, 77, 0, 1, 0x9c, 0x40, 0, 80, 6, 0, 0, 0]);
        assert_eq!(Extension::Firewall.module(), Some("firewall"));
        assert_eq!(Extension::CaptureFiltered.capture(), Some(true));
        assert_eq!(Extension::Baseline.module(), None);
    }
}
