//! The `sluice bench apps` table: one row per program and metric, engine beside Linux.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::side::Side;

/// Every row of the table, in order: program, metric, and whether lower is better.
pub const METRICS: [(&str, &str, bool); 8] = [
    ("redis", "GET ops/s", false),
    ("redis", "GET p99 ms", true),
    ("redis", "SET ops/s", false),
    ("redis", "SET p99 ms", true),
    ("nginx", "req/s", false),
    ("nginx", "p99 ms", true),
    ("iperf3", "Gbit/s client->server", false),
    ("iperf3", "Gbit/s server->client", false),
];

/// A measured value, or why there is none.
pub type Measured = Result<f64, String>;

/// The measurements of one bench run, by side, program and metric.
#[derive(Debug, Default)]
pub struct Table {
    cells: BTreeMap<(Side, &'static str, &'static str), Measured>,
    /// Lines printed above the table (how each side ran).
    pub setup: Vec<String>,
}

impl Table {
    /// Records one value (or failure).
    pub fn set(&mut self, side: Side, program: &'static str, metric: &'static str, v: Measured) {
        self.cells.insert((side, program, metric), v);
    }

    /// Records the same failure for every metric of `program` on `side`.
    pub fn fail_program(&mut self, side: Side, program: &'static str, why: &str) {
        for (p, m, _) in METRICS.iter().filter(|(p, _, _)| *p == program) {
            self.set(side, p, m, Err(why.to_string()));
        }
    }

    /// Failures on `side`, deduplicated, as (programs, reason).
    pub fn failures(&self, side: Side) -> Vec<(Vec<&'static str>, String)> {
        let mut out: Vec<(Vec<&'static str>, String)> = Vec::new();
        for (program, metric, _) in METRICS {
            let Some(Err(why)) = self.cells.get(&(side, program, metric)) else {
                continue;
            };
            match out.iter_mut().find(|(_, w)| w == why) {
                Some((programs, _)) if programs.contains(&program) => {}
                Some((programs, _)) => programs.push(program),
                None => out.push((vec![program], why.clone())),
            }
        }
        out
    }

    /// The table as printed: the setup lines, the rows, then why any cell is missing.
    pub fn render(&self) -> String {
        let mut t = String::new();
        for line in &self.setup {
            let _ = writeln!(t, "{line}");
        }
        let _ = writeln!(
            t,
            "{:<8} {:<22} {:>12} {:>12} {:>8}",
            "program", "metric", "engine", "linux", "eng/lnx"
        );
        for (program, metric, _) in METRICS {
            let (Some(e), Some(l)) = (
                self.cells.get(&(Side::Engine, program, metric)),
                self.cells.get(&(Side::Linux, program, metric)),
            ) else {
                continue;
            };
            let ratio = match (e, l) {
                (Ok(e), Ok(l)) if *l > 0.0 => format!("{:.2}x", e / l),
                _ => "n/a".to_string(),
            };
            let cell = |v: &Measured, missing: &str| match v {
                Ok(v) => fmt_value(*v),
                Err(_) => missing.to_string(),
            };
            let _ = writeln!(
                t,
                "{program:<8} {metric:<22} {:>12} {:>12} {ratio:>8}",
                cell(e, "n/a"),
                cell(l, "failed"),
            );
        }
        let _ = writeln!(
            t,
            "eng/lnx is engine over Linux: above 1 is better for rates, below 1 for p99 latencies"
        );
        for side in Side::ALL {
            for (programs, why) in self.failures(side) {
                let _ = writeln!(t, "{side} n/a for {}: {why}", programs.join(", "));
            }
        }
        t
    }
}

/// A number with as many decimals as it needs.
fn fmt_value(v: f64) -> String {
    if v >= 1000.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_ratios_and_missing_engine_cells() {
        let mut t = Table::default();
        t.set(Side::Linux, "redis", "GET ops/s", Ok(50_000.0));
        t.set(Side::Engine, "redis", "GET ops/s", Ok(75_000.0));
        t.set(Side::Linux, "nginx", "req/s", Ok(10_000.0));
        t.fail_program(Side::Engine, "nginx", "sluice engine did not start");
        let out = t.render();
        assert!(out.contains("1.50x"), "{out}");
        let nginx = out.lines().find(|l| l.starts_with("nginx")).unwrap();
        assert!(nginx.contains("n/a") && nginx.contains("10000"), "{nginx}");
        assert!(out.contains("engine n/a for nginx: sluice engine did not start"));
    }
}
