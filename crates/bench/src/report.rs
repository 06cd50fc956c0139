//! The bench's results: one row per (role, workload, side), the engine/Linux ratios, the
//! table and the JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::cells::fmt_num;
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
        }
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
                "{:<7} {:<12} {:<14} {:>12} {:>12} {:>8}  {:>11}",
                "role", "workload", "metric", "engine", "linux", "eng/lnx", "cores e/l"
            );
        }
        for r in &self.ratios {
            let cores = |side| {
                self.results
                    .iter()
                    .find(|x| x.side == side && x.role == r.role && x.workload == r.workload)
                    .map_or(0.0, Row::cores_under_test)
            };
            let role = match r.role {
                Role::Server => "server",
                Role::Client => "client",
            };
            let _ = writeln!(
                t,
                "{:<7} {:<12} {:<14} {:>12} {:>12} {:>7.2}x  {:>5.2}/{:<5.2}",
                role,
                r.workload,
                r.metric,
                fmt_num(r.engine),
                fmt_num(r.linux),
                r.ratio,
                cores(Side::Engine),
                cores(Side::Linux),
            );
        }
        t.push_str(&self.outside.render());
        t
    }
}
