//! The outside programs' part of `sluice bench`'s table: each metric on the engine and on
//! Linux with the ratio, CPU per operation beside every throughput, and what failed.

use std::fmt::Write as _;

use serde::Serialize;

use super::rows::{CpuPerOp, Measured, Workload};
use crate::apps::Side;
use crate::cells::{fmt_opt, ratio, short};

/// One side's run of one workload.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OutsideRow {
    /// The workload.
    pub workload: Workload,
    /// "engine" or "linux".
    pub side: &'static str,
    /// The numbers, or why there are none.
    pub result: Result<Measured, String>,
}

/// Every outside row of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct OutsideTable {
    /// The rows, in the order measured.
    pub rows: Vec<OutsideRow>,
}

impl OutsideTable {
    fn of(&self, w: Workload, side: Side) -> Option<&Measured> {
        self.rows
            .iter()
            .find(|r| r.workload == w && r.side == side.name())
            .and_then(|r| r.result.as_ref().ok())
    }

    fn workloads(&self) -> Vec<Workload> {
        Workload::ALL
            .into_iter()
            .filter(|w| self.rows.iter().any(|r| r.workload == *w))
            .collect()
    }

    /// The workloads that failed on `side`.
    pub fn failed_on(&self, side: Side) -> Vec<&'static str> {
        self.rows
            .iter()
            .filter(|r| r.side == side.name() && r.result.is_err())
            .map(|r| r.workload.name())
            .collect()
    }

    /// Rows that produced no number, as `workload side: why`.
    pub fn failures(&self) -> Vec<String> {
        self.rows
            .iter()
            .filter_map(|r| {
                let e = r.result.as_ref().err()?;
                Some(format!("{} {}: {e}", r.workload.name(), r.side))
            })
            .collect()
    }

    /// The table as printed (empty when no outside workload ran).
    pub fn render(&self) -> String {
        let mut t = String::new();
        if self.rows.is_empty() {
            return t;
        }
        let _ = writeln!(
            t,
            "\nOUTSIDE PROGRAMS (server role): the same client in sluice-b against the standard \
             program on Linux (sluice-k) and under `sluice run` on the engine (sluice-a)"
        );
        let _ = writeln!(
            t,
            "{:<13} {:<14} {:>10} {:>10} {:>8}   {:>15} {:>7}   {:>15} {:>7}",
            "workload",
            "metric",
            "engine",
            "linux",
            "eng/lnx",
            "own cpu/op e/l",
            "eng/lnx",
            "busy cpu/op e/l",
            "eng/lnx"
        );
        for w in self.workloads() {
            let (e, l) = (self.of(w, Side::Engine), self.of(w, Side::Linux));
            let metrics: Vec<&'static str> = e
                .or(l)
                .map(|m| m.metrics.iter().map(|(k, _)| *k).collect())
                .unwrap_or_default();
            if metrics.is_empty() {
                let _ = writeln!(t, "{:<13} failed on both sides", w.name());
            }
            for (i, metric) in metrics.into_iter().enumerate() {
                let get = |m: Option<&Measured>| {
                    m.and_then(|m| m.metrics.iter().find(|(k, _)| *k == metric))
                        .map(|(_, v)| *v)
                };
                let (ev, lv) = (get(e), get(l));
                let mut line = format!(
                    "{:<13} {:<14} {:>10} {:>10} {:>8}",
                    w.name(),
                    metric,
                    fmt_opt(ev),
                    fmt_opt(lv),
                    ratio(ev, lv)
                );
                // The first metric is the throughput: CPU per operation beside it.
                if i == 0 {
                    let cpu = |m: Option<&Measured>| m.map(|m| m.cpu).unwrap_or_default();
                    let (ec, lc) = (cpu(e), cpu(l));
                    let (eo, lo) = (ec.own_us(Side::Engine), lc.own_us(Side::Linux));
                    let _ = write!(
                        line,
                        "   {:>15} {:>7}   {:>15} {:>7}",
                        format!("{}/{}", fmt_opt(eo), fmt_opt(lo)),
                        ratio(eo, lo),
                        format!("{}/{}", fmt_opt(ec.busy_us), fmt_opt(lc.busy_us)),
                        ratio(ec.busy_us, lc.busy_us)
                    );
                }
                let _ = writeln!(t, "{}", line.trim_end());
            }
        }
        let _ = writeln!(
            t,
            "CPU per operation, usec: own = the engine's + the program's CPU time on Sluice, the \
             program's + the machine's softirq time on Linux (softirq is not per namespace: the \
             client's is in it); busy = the whole machine's busy CPU over the run (the client \
             and every other process included)"
        );
        let _ = writeln!(
            t,
            "{:<13} {:<7} {:>9} {:>9} {:>9} {:>9}",
            "workload", "side", "app/op", "engine/op", "sirq/op", "busy/op"
        );
        for r in &self.rows {
            let c: CpuPerOp = match &r.result {
                Ok(m) => m.cpu,
                Err(e) => {
                    let _ = writeln!(
                        t,
                        "{:<13} {:<7} failed: {}",
                        r.workload.name(),
                        r.side,
                        short(e)
                    );
                    continue;
                }
            };
            let _ = writeln!(
                t,
                "{:<13} {:<7} {:>9} {:>9} {:>9} {:>9}",
                r.workload.name(),
                r.side,
                fmt_opt(c.app_us),
                fmt_opt(c.engine_us),
                fmt_opt(c.softirq_us),
                fmt_opt(c.busy_us)
            );
        }
        let failures = self.failures();
        if !failures.is_empty() {
            let _ = writeln!(t, "FAILED OUTSIDE ROWS");
            for f in failures {
                let _ = writeln!(t, "  {f}");
            }
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cells::fmt_num as num;

    fn row(w: Workload, side: Side, rate: f64, app: f64, other: f64, busy: f64) -> OutsideRow {
        let (engine_us, softirq_us) = match side {
            Side::Engine => (Some(other), Some(0.5)),
            Side::Linux => (None, Some(other)),
        };
        OutsideRow {
            workload: w,
            side: side.name(),
            result: Ok(Measured {
                metrics: vec![("ops/s", rate), ("p50 rtt us", 1e6 / rate)],
                ops: 1000,
                cpu: CpuPerOp {
                    app_us: Some(app),
                    engine_us,
                    softirq_us,
                    busy_us: Some(busy),
                },
            }),
        }
    }

    #[test]
    fn ratios_cpu_beside_throughput_and_failures() {
        let t = OutsideTable {
            rows: vec![
                row(Workload::SockperfPp, Side::Linux, 20000.0, 10.0, 10.0, 40.0),
                row(Workload::SockperfPp, Side::Engine, 40000.0, 4.0, 6.0, 30.0),
                OutsideRow {
                    workload: Workload::Memcached,
                    side: "engine",
                    result: Err("memcaslap: exit status: 1".into()),
                },
                row(Workload::Memcached, Side::Linux, 30000.0, 10.0, 5.0, 50.0),
            ],
        };
        let out = t.render();
        let pp = out
            .lines()
            .find(|l| l.starts_with("sockperf-pp   ops/s"))
            .unwrap();
        // Throughput 2x; own CPU 4+6 against 10+10 (0.50x); busy 30 against 40 (0.75x).
        assert!(pp.contains("2.00x"), "{pp}");
        assert!(pp.contains("10.0/20.0") && pp.contains("0.50x"), "{pp}");
        assert!(pp.contains("30.0/40.0") && pp.contains("0.75x"), "{pp}");
        let p50 = out.lines().find(|l| l.contains("p50 rtt us")).unwrap();
        assert!(p50.contains("0.50x") && !p50.contains("/"), "{p50}");
        let memc = out
            .lines()
            .find(|l| l.starts_with("memcached     ops/s"))
            .unwrap();
        assert!(
            memc.contains(&num(30000.0)) && memc.contains("n/a"),
            "{memc}"
        );
        assert!(out.contains("memcached     engine  failed: memcaslap: exit status: 1"));
        assert_eq!(
            t.failures(),
            ["memcached engine: memcaslap: exit status: 1"]
        );
        assert!(OutsideTable::default().render().is_empty());
    }
}
