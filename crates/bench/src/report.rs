//! The bench's results: one row per (role, workload, side), the engine/Linux ratios, the
//! table and the JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::cells::{fmt_num, fmt_opt, ratio};
use crate::measure::Measurement;
use crate::outside::OutsideTable;
use crate::plan::{Kind, Workload};

/// Which role the side under test plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Linux clients in sluice-b against the engine (10.77.0.1) or a Linux server (10.77.0.3).
    Server,
    /// The engine (sluice-a) or a Linux client (sluice-k) against a Linux server (10.77.0.2).
    Client,
}

/// Who plays the role under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// Sluice.
    Engine,
    /// Linux kernel TCP.
    Linux,
}

/// One measured run.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// The role under test.
    pub role: Role,
    /// Workload name, e.g. "rpc-16".
    pub workload: String,
    /// Who played the role.
    pub side: Side,
    /// Server address the clients used.
    pub server: String,
    /// Connections in parallel.
    pub conns: usize,
    /// The workload's metrics: ops_per_sec, p50_us, p99_us, p999_us, gbps or conns_per_sec.
    pub metrics: BTreeMap<&'static str, f64>,
    /// CPU cores the server used (CPU seconds per second of the run).
    pub server_cores: f64,
    /// CPU cores the client used.
    pub client_cores: f64,
    /// The machine's softirq time over the run, in cores: the kernel's network processing,
    /// charged to no process (every side's, the clients' included).
    pub softirq_cores: f64,
    /// The whole machine's busy time over the run, in cores (every process).
    pub busy_cores: f64,
}

impl Row {
    /// The row for `m`, a run of `w`.
    pub fn new(role: Role, side: Side, w: Workload, server: String, m: &Measurement) -> Row {
        let mut metrics = BTreeMap::new();
        match w.kind {
            Kind::Rpc => {
                metrics.insert("ops_per_sec", m.ops_per_sec());
                if let Some(l) = m.latency {
                    metrics.insert("p50_us", l.p50_us);
                    metrics.insert("p99_us", l.p99_us);
                    metrics.insert("p999_us", l.p999_us);
                }
            }
            Kind::StreamUp | Kind::StreamDown => {
                metrics.insert("gbps", m.gbps());
            }
            Kind::Connect => {
                metrics.insert("conns_per_sec", m.ops_per_sec());
            }
        }
        Row {
            role,
            workload: w.name(),
            side,
            server,
            conns: w.conns,
            metrics,
            server_cores: 0.0,
            client_cores: m.cpu_seconds / m.seconds.max(1e-9),
            softirq_cores: 0.0,
            busy_cores: 0.0,
        }
    }

    /// Operations per second for CPU per operation: requests or connections, or megabytes
    /// (10^6 B) on the stream rows; None without a throughput.
    pub fn ops_rate(&self) -> Option<f64> {
        let m = |k| self.metrics.get(k).copied();
        m("ops_per_sec")
            .or(m("conns_per_sec"))
            .or(m("gbps").map(|g| g * 1e9 / 8.0 / 1e6))
            .filter(|r| *r > 0.0)
    }

    /// Microseconds of CPU per operation: the side under test's own (the engine's, which
    /// runs its applications embedded; Linux: the program's plus the softirq time) and the
    /// whole machine's busy time.
    pub fn cpu_us_per_op(&self) -> (Option<f64>, Option<f64>) {
        let Some(rate) = self.ops_rate() else {
            return (None, None);
        };
        let own = match self.side {
            Side::Engine => self.cores_under_test(),
            Side::Linux => self.cores_under_test() + self.softirq_cores,
        };
        let per = |cores: f64| (cores > 0.0).then(|| cores / rate * 1e6);
        (per(own), per(self.busy_cores))
    }

    /// Cores used by the side under test.
    pub fn cores_under_test(&self) -> f64 {
        match self.role {
            Role::Server => self.server_cores,
            Role::Client => self.client_cores,
        }
    }

    /// A one-line summary for progress output.
    pub fn summary(&self) -> String {
        METRICS
            .iter()
            .filter_map(|k| Some(format!("{k} {}", fmt_num(*self.metrics.get(k)?))))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Every metric, in the order the table shows them.
const METRICS: [&str; 6] = [
    "ops_per_sec",
    "p50_us",
    "p99_us",
    "p999_us",
    "gbps",
    "conns_per_sec",
];

/// Engine over Linux for one metric.
#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    /// The role.
    pub role: Role,
    /// The workload.
    pub workload: String,
    /// The metric.
    pub metric: &'static str,
    /// The engine's value.
    pub engine: f64,
    /// Linux's value.
    pub linux: f64,
    /// engine / linux (below 1 is better for latencies, above 1 for rates).
    pub ratio: f64,
}

/// Everything one bench run produced.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Device backend of the engine.
    pub backend: String,
    /// Whether this was a `--quick` smoke run.
    pub quick: bool,
    /// Measured seconds per run.
    pub seconds: f64,
    /// Warm-up seconds per run.
    pub warmup: f64,
    /// CPUs the machine has (every process shares them).
    pub machine_cores: usize,
    /// How each side ran.
    pub setup: BTreeMap<&'static str, String>,
    /// Every run.
    pub results: Vec<Row>,
    /// Engine/Linux per metric.
    pub ratios: Vec<Ratio>,
    /// The outside programs' rows (sockperf, memcached).
    pub outside: OutsideTable,
}

impl Report {
    /// Fills in the ratios from the rows.
    pub fn compute_ratios(&mut self) {
        self.ratios.clear();
        for e in self.results.iter().filter(|r| r.side == Side::Engine) {
            let Some(l) = self
                .results
                .iter()
                .find(|l| l.side == Side::Linux && l.role == e.role && l.workload == e.workload)
            else {
                continue;
            };
            for metric in METRICS {
                if let (Some(&ev), Some(&lv)) = (e.metrics.get(metric), l.metrics.get(metric)) {
                    self.ratios.push(Ratio {
                        role: e.role,
                        workload: e.workload.clone(),
                        metric,
                        engine: ev,
                        linux: lv,
                        ratio: ev / lv,
                    });
                }
            }
        }
    }

    /// The table, as printed.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "sluice bench: backend {}, {} s per run after {} s warm-up, {} shared CPU cores",
            self.backend, self.seconds, self.warmup, self.machine_cores
        );
        for (k, v) in &self.setup {
            let _ = writeln!(t, "  {k}: {v}");
        }
        if !self.ratios.is_empty() {
            let _ = writeln!(
                t,
                "{:<7} {:<12} {:<14} {:>12} {:>12} {:>8}  {:>11}   {:>15} {:>7}   {:>15} {:>7}",
                "role",
                "workload",
                "metric",
                "engine",
                "linux",
                "eng/lnx",
                "cores e/l",
                "own cpu/op e/l",
                "eng/lnx",
                "busy cpu/op e/l",
                "eng/lnx"
            );
        }
        for r in &self.ratios {
            let row = |side| {
                self.results
                    .iter()
                    .find(|x| x.side == side && x.role == r.role && x.workload == r.workload)
            };
            let cores = |side| row(side).map_or(0.0, Row::cores_under_test);
            // Beside the throughput (the first metric): CPU per operation.
            let cpu = if matches!(r.metric, "ops_per_sec" | "conns_per_sec" | "gbps") {
                let per = |side| row(side).map_or((None, None), Row::cpu_us_per_op);
                let ((eo, eb), (lo, lb)) = (per(Side::Engine), per(Side::Linux));
                format!(
                    "   {:>15} {:>7}   {:>15} {:>7}",
                    format!("{}/{}", fmt_opt(eo), fmt_opt(lo)),
                    ratio(eo, lo),
                    format!("{}/{}", fmt_opt(eb), fmt_opt(lb)),
                    ratio(eb, lb)
                )
            } else {
                String::new()
            };
            let role = match r.role {
                Role::Server => "server",
                Role::Client => "client",
            };
            let line = format!(
                "{:<7} {:<12} {:<14} {:>12} {:>12} {:>7.2}x  {:>5.2}/{:<5.2}{cpu}",
                role,
                r.workload,
                r.metric,
                fmt_num(r.engine),
                fmt_num(r.linux),
                r.ratio,
                cores(Side::Engine),
                cores(Side::Linux),
            );
            let _ = writeln!(t, "{}", line.trim_end());
        }
        if !self.ratios.is_empty() {
            let _ = writeln!(
                t,
                "CPU per operation, usec (per MB on the stream rows): own = the side under \
                 test's CPU time (the engine's, its applications embedded; Linux's program plus \
                 the machine's softirq time); busy = the whole machine's busy CPU over the run"
            );
        }
        t.push_str(&self.outside.render());
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(side: Side, metric: &'static str, rate: f64, cores: f64) -> Row {
        Row {
            role: Role::Server,
            workload: "rpc-1".into(),
            side,
            server: String::new(),
            conns: 1,
            metrics: BTreeMap::from([(metric, rate)]),
            server_cores: cores,
            client_cores: 0.0,
            softirq_cores: 0.25,
            busy_cores: 1.5,
        }
    }

    #[test]
    fn cpu_per_operation_beside_the_throughput() {
        // 0.5 cores at 10^5 ops/s: 5 us per op; Linux adds its softirq (0.25 cores).
        let e = row(Side::Engine, "ops_per_sec", 1e5, 0.5);
        assert_eq!(e.cpu_us_per_op(), (Some(5.0), Some(15.0)));
        let l = row(Side::Linux, "ops_per_sec", 5e4, 0.5);
        assert_eq!(l.cpu_us_per_op(), (Some(15.0), Some(30.0)));
        // 8 Gbit/s is 1000 MB/s.
        assert_eq!(row(Side::Engine, "gbps", 8.0, 0.5).ops_rate(), Some(1000.0));
        assert_eq!(
            row(Side::Engine, "p50_us", 8.0, 0.5).cpu_us_per_op(),
            (None, None)
        );
        let mut report = Report {
            backend: "af_packet".into(),
            quick: true,
            seconds: 0.4,
            warmup: 0.1,
            machine_cores: 2,
            setup: BTreeMap::new(),
            results: vec![e, l],
            ratios: Vec::new(),
            outside: OutsideTable::default(),
        };
        report.compute_ratios();
        let table = report.table();
        let line = table.lines().find(|l| l.contains("ops_per_sec")).unwrap();
        assert!(line.contains("2.00x"), "{line}");
        assert!(
            line.contains("5.00/15.0") && line.contains("0.33x"),
            "{line}"
        );
        assert!(
            line.contains("15.0/30.0") && line.contains("0.50x"),
            "{line}"
        );
    }
}
