//! The soak's report: per side, bytes checked, connections completed and errors by kind;
//! the engine's memory against the kernel's; the impairment phases; and the verdict.

use std::fmt::Write as _;

use serde::Serialize;

use super::client::{FailureKind, Tally};
use super::memory::{Sample, Span};
use super::schedule::PhaseRecord;

/// Points of the memory series the table shows (the JSON has every sample).
const TABLE_POINTS: usize = 12;

/// One side: the engine, or Linux, as the server.
#[derive(Clone, Debug, Serialize)]
pub struct SideReport {
    /// "engine" or "linux".
    pub name: &'static str,
    /// The server's address.
    pub server: String,
    /// Bytes checked over every workload.
    pub bytes_verified: u64,
    /// Connections completed over every workload.
    pub connections: u64,
    /// Errors of every kind.
    pub errors: u64,
    /// The clients' counts.
    pub tally: Tally,
}

impl SideReport {
    /// A side's report from its clients' tally.
    pub fn new(name: &'static str, server: String, tally: Tally) -> Self {
        SideReport {
            name,
            server,
            bytes_verified: tally.bytes_verified(),
            connections: tally.connections(),
            errors: tally.error_count(),
            tally,
        }
    }
}

/// Memory over the run.
#[derive(Clone, Debug, Serialize)]
pub struct MemoryReport {
    /// Seconds between samples.
    pub interval_s: f64,
    /// The engine's resident set.
    pub engine_rss: Option<Span>,
    /// The kernel's slab (machine-wide).
    pub linux_slab: Option<Span>,
    /// The kernel's TCP buffer memory (machine-wide).
    pub linux_tcp_mem: Option<Span>,
    /// Every sample.
    pub samples: Vec<Sample>,
}

impl MemoryReport {
    /// The spans of `samples`.
    pub fn new(interval_s: f64, samples: Vec<Sample>) -> Self {
        MemoryReport {
            interval_s,
            engine_rss: Span::of(&samples, |s| s.engine_rss_kib),
            linux_slab: Span::of(&samples, |s| s.slab_kib),
            linux_tcp_mem: Span::of(&samples, |s| s.tcp_mem_kib),
            samples,
        }
    }
}

/// The whole soak.
#[derive(Clone, Debug, Serialize)]
pub struct SoakReport {
    /// Seconds of traffic.
    pub seconds: f64,
    /// The engine, then Linux.
    pub sides: Vec<SideReport>,
    /// Memory over the run.
    pub memory: MemoryReport,
    /// The impairment phases, in order.
    pub phases: Vec<PhaseRecord>,
    /// Why the soak failed; empty when it passed.
    pub failures: Vec<String>,
}

impl SoakReport {
    /// Builds the report and judges it: every side must have checked bytes and completed
    /// connections, no error of any kind (TCP delivers everything under impairment, or the
    /// soak counts it), and the engine's memory must have been sampled.
    pub fn new(
        seconds: f64,
        sides: Vec<SideReport>,
        memory: MemoryReport,
        phases: Vec<PhaseRecord>,
        mut failures: Vec<String>,
    ) -> Self {
        for s in &sides {
            if s.bytes_verified == 0 || s.connections == 0 {
                failures.push(format!(
                    "{}: {} bytes verified, {} connections completed",
                    s.name, s.bytes_verified, s.connections
                ));
            }
            let content = s.tally.errors_of(FailureKind::Content);
            if content > 0 {
                failures.push(format!("{}: {content} content errors", s.name));
            }
            if s.errors > content {
                failures.push(format!(
                    "{}: {} connection errors (none is expected)",
                    s.name,
                    s.errors - content
                ));
            }
        }
        if memory.engine_rss.is_none() {
            failures.push("the engine's memory was not sampled".into());
        }
        SoakReport {
            seconds,
            sides,
            memory,
            phases,
            failures,
        }
    }

    /// Whether the soak passed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "sluice soak: {:.0} s of mixed traffic, the engine and Linux side by side through \
             sluice switch",
            self.seconds
        );
        let names: Vec<&str> = self.sides.iter().map(|s| s.name).collect();
        let row = |out: &mut String, label: &str, cells: Vec<String>| {
            let _ = write!(out, "  {label:<24}");
            for c in cells {
                let _ = write!(out, "{c:>26}");
            }
            out.push('\n');
        };
        row(&mut out, "", names.iter().map(|n| n.to_string()).collect());
        row(
            &mut out,
            "bytes verified",
            self.sides.iter().map(|s| bytes(s.bytes_verified)).collect(),
        );
        row(
            &mut out,
            "connections completed",
            self.sides
                .iter()
                .map(|s| s.connections.to_string())
                .collect(),
        );
        let workloads: Vec<&str> = self
            .sides
            .first()
            .map(|s| s.tally.workloads.keys().copied().collect())
            .unwrap_or_default();
        for w in workloads {
            let cell = |s: &SideReport| {
                s.tally.workloads.get(w).map_or("-".into(), |t| {
                    if t.requests > 0 {
                        format!("{} / {} req", bytes(t.bytes_verified), t.requests)
                    } else {
                        format!("{} / {} conn", bytes(t.bytes_verified), t.connections)
                    }
                })
            };
            row(
                &mut out,
                &format!("  {w}"),
                self.sides.iter().map(cell).collect(),
            );
        }
        row(
            &mut out,
            "errors",
            self.sides.iter().map(|s| s.errors.to_string()).collect(),
        );
        let mut kinds: Vec<&str> = self
            .sides
            .iter()
            .flat_map(|s| s.tally.errors.keys().copied())
            .collect();
        kinds.sort_unstable();
        kinds.dedup();
        for k in kinds {
            row(
                &mut out,
                &format!("  {k}"),
                self.sides
                    .iter()
                    .map(|s| s.tally.errors.get(k).copied().unwrap_or(0).to_string())
                    .collect(),
            );
        }
        let m = &self.memory;
        let span = |s: Option<Span>| {
            s.map_or("not sampled".into(), |s| {
                format!(
                    "{} -> max {} -> {}",
                    mib(s.start_kib),
                    mib(s.max_kib),
                    mib(s.end_kib)
                )
            })
        };
        let _ = writeln!(
            out,
            "memory (start -> max -> end, sampled every {:.0} s):",
            m.interval_s
        );
        let _ = writeln!(out, "  engine RSS                  {}", span(m.engine_rss));
        let _ = writeln!(
            out,
            "  linux kernel slab           {}  (machine-wide)",
            span(m.linux_slab)
        );
        let _ = writeln!(
            out,
            "  linux TCP buffers (sockstat) {} (machine-wide)",
            span(m.linux_tcp_mem)
        );
        let step = m.samples.len().div_ceil(TABLE_POINTS).max(1);
        let series: Vec<String> = m
            .samples
            .iter()
            .enumerate()
            .filter(|(i, _)| i % step == 0 || *i + 1 == m.samples.len())
            .map(|(_, s)| {
                format!(
                    "{:.0}s {}/{}",
                    s.t,
                    s.engine_rss_kib.map_or("?".into(), mib),
                    s.slab_kib.map_or("?".into(), mib)
                )
            })
            .collect();
        let _ = writeln!(out, "  engine RSS / slab over time: {}", series.join(", "));
        let (mut lost, mut reordered, mut duplicated, mut corrupted) = (0, 0, 0, 0);
        for p in &self.phases {
            lost += p.lost;
            reordered += p.reordered;
            duplicated += p.duplicated;
            corrupted += p.corrupted;
        }
        let _ = writeln!(
            out,
            "impairments: {} phases; the switch lost {lost}, reordered {reordered}, \
             duplicated {duplicated} and corrupted {corrupted} frames",
            self.phases.len()
        );
        for s in &self.sides {
            for e in &s.tally.first_errors {
                let _ = writeln!(out, "  {} error: {e}", s.name);
            }
        }
        if self.passed() {
            let _ = writeln!(out, "PASS: every byte verified, no errors, memory sampled");
        } else {
            for f in &self.failures {
                let _ = writeln!(out, "FAIL: {f}");
            }
        }
        out
    }
}

/// Bytes in a short unit.
pub(crate) fn bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{b} B")
    }
}

/// KiB as MiB.
fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::client::WorkloadTally;

    fn side(name: &'static str, bytes: u64, errors: &[(&'static str, u64)]) -> SideReport {
        let mut t = Tally::default();
        t.workloads.insert(
            "rpc",
            WorkloadTally {
                connections: 2,
                bytes_verified: bytes,
                requests: 10,
            },
        );
        for &(k, n) in errors {
            t.errors.insert(k, n);
        }
        SideReport::new(name, "10.77.0.1:7300".into(), t)
    }

    fn memory() -> MemoryReport {
        let s = |t, k| Sample {
            t,
            engine_rss_kib: Some(k),
            slab_kib: Some(k * 2),
            tcp_mem_kib: Some(4),
        };
        MemoryReport::new(5.0, vec![s(0.0, 1024), s(5.0, 4096), s(10.0, 2048)])
    }

    #[test]
    fn a_clean_run_passes_and_prints_both_sides() {
        let r = SoakReport::new(
            10.0,
            vec![side("engine", 5000, &[]), side("linux", 7000, &[])],
            memory(),
            vec![PhaseRecord::default()],
            Vec::new(),
        );
        assert!(r.passed(), "{:?}", r.failures);
        let t = r.table();
        assert!(t.contains("bytes verified"), "{t}");
        assert!(t.contains("5.0 kB") && t.contains("7.0 kB"), "{t}");
        assert!(t.contains("1.0 MiB -> max 4.0 MiB -> 2.0 MiB"), "{t}");
        assert!(t.contains("PASS"), "{t}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["sides"][0]["bytes_verified"], 5000);
        assert_eq!(json["memory"]["engine_rss"]["max_kib"], 4096);
    }

    #[test]
    fn content_errors_other_errors_and_empty_sides_fail() {
        let r = SoakReport::new(
            10.0,
            vec![
                side("engine", 5000, &[("content", 1), ("reset", 2)]),
                side("linux", 0, &[]),
            ],
            memory(),
            Vec::new(),
            Vec::new(),
        );
        assert!(!r.passed());
        let f = r.failures.join("\n");
        assert!(f.contains("engine: 1 content errors"), "{f}");
        assert!(f.contains("engine: 2 connection errors"), "{f}");
        assert!(f.contains("linux: 0 bytes verified"), "{f}");
        assert!(r.table().contains("FAIL"), "{}", r.table());
    }
}
