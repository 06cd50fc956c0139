//! The `sluice bench mtp` table: the 64 B RPC round trip and message throughput of MTP
//! beside Sluice TCP and Linux TCP, CPU per operation, and MTP's ratios to each.

use std::fmt::Write as _;

use crate::cells::ratio;
use crate::op_rows::{bw_cells, lat_cells, write_failures, Bw, Lat};

/// What carried the operations of a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stack {
    /// MTP messages between the engines (`sluice mtp`).
    Mtp,
    /// sockperf or iperf3 over Sluice's TCP (`sluice run` on both engines).
    SluiceTcp,
    /// sockperf or iperf3 over Linux kernel TCP (sluice-b to sluice-k).
    LinuxTcp,
}

impl Stack {
    /// The row's label.
    pub fn name(self) -> &'static str {
        match self {
            Stack::Mtp => "MTP",
            Stack::SluiceTcp => "sluice TCP",
            Stack::LinuxTcp => "linux TCP",
        }
    }
}

/// One row: a size on a stack, measured or failed.
#[derive(Clone, Debug, PartialEq)]
pub struct Row<T> {
    /// Message size, bytes.
    pub size: u64,
    /// The stack.
    pub stack: Stack,
    /// The measurement, or why there is none.
    pub result: Result<T, String>,
}

/// A whole run's rows.
#[derive(Debug, Default)]
pub struct Table {
    /// Lines printed above the rows (how it ran).
    pub setup: Vec<String>,
    /// Round-trip rows (usec per round trip, not halved).
    pub rtt: Vec<Row<Lat>>,
    /// Throughput rows.
    pub bw: Vec<Row<Bw>>,
}

fn sizes<T>(rows: &[Row<T>]) -> Vec<u64> {
    let mut s: Vec<u64> = rows.iter().map(|r| r.size).collect();
    s.sort_unstable();
    s.dedup();
    s
}

fn of<T>(rows: &[Row<T>], size: u64, stack: Stack) -> Option<&T> {
    rows.iter()
        .find(|r| r.size == size && r.stack == stack)
        .and_then(|r| r.result.as_ref().ok())
}

impl Table {
    /// Rows that produced no number, as `what stack size: why`.
    pub fn failures(&self) -> Vec<String> {
        let fail = |what: &'static str, size: u64, stack: Stack, e: &String| {
            format!("{what} {} {size} B: {e}", stack.name())
        };
        let rtt = self.rtt.iter().filter_map(|r| {
            r.result
                .as_ref()
                .err()
                .map(|e| fail("round trip", r.size, r.stack, e))
        });
        let bw = self.bw.iter().filter_map(|r| {
            r.result
                .as_ref()
                .err()
                .map(|e| fail("throughput", r.size, r.stack, e))
        });
        rtt.chain(bw).collect()
    }

    /// The table as printed (and written into the notes).
    pub fn render(&self) -> String {
        let mut t = String::new();
        for line in &self.setup {
            let _ = writeln!(t, "{line}");
        }
        let _ = writeln!(
            t,
            "\nRPC ROUND TRIP  usec per round trip (sockperf's one-way figures doubled); cpu = \
             usec of CPU per round trip (machine-wide busy; engines' own)"
        );
        let _ = writeln!(
            t,
            "{:>7}  {:<11} {:>9} {:>9} {:>9} {:>9}",
            "bytes", "stack", "p50", "p99", "cpu/op", "eng/op"
        );
        for size in sizes(&self.rtt) {
            for r in self.rtt.iter().filter(|r| r.size == size) {
                let cells = lat_cells(&r.result);
                let _ = writeln!(t, "{size:>7}  {:<11} {cells}", r.stack.name());
            }
            let p = |st, q: fn(&Lat) -> f64| of(&self.rtt, size, st).map(q);
            let _ = writeln!(
                t,
                "{:>7}  ratios: MTP/sluice TCP p50 {} p99 {}, MTP/linux TCP p50 {} p99 {}",
                "",
                ratio(
                    p(Stack::Mtp, |l| l.p50_us),
                    p(Stack::SluiceTcp, |l| l.p50_us)
                ),
                ratio(
                    p(Stack::Mtp, |l| l.p99_us),
                    p(Stack::SluiceTcp, |l| l.p99_us)
                ),
                ratio(
                    p(Stack::Mtp, |l| l.p50_us),
                    p(Stack::LinuxTcp, |l| l.p50_us)
                ),
                ratio(
                    p(Stack::Mtp, |l| l.p99_us),
                    p(Stack::LinuxTcp, |l| l.p99_us)
                ),
            );
        }
        let _ = writeln!(
            t,
            "\nTHROUGHPUT  payload Gbit/s (10^9 bit/s) and messages/s; MTP: each message \
             acknowledged; TCP: one stream of writes of the size; cpu = usec of CPU per message"
        );
        let _ = writeln!(
            t,
            "{:>7}  {:<11} {:>9} {:>11} {:>9} {:>9}",
            "bytes", "stack", "Gbit/s", "msgs/s", "cpu/op", "eng/op"
        );
        for size in sizes(&self.bw) {
            for r in self.bw.iter().filter(|r| r.size == size) {
                let cells = bw_cells(&r.result);
                let _ = writeln!(t, "{size:>7}  {:<11} {cells}", r.stack.name());
            }
            let m = |st| of(&self.bw, size, st).map(|b| b.msgs_per_s);
            let _ = writeln!(
                t,
                "{:>7}  ratios: MTP/sluice TCP msgs/s {}, MTP/linux TCP msgs/s {}",
                "",
                ratio(m(Stack::Mtp), m(Stack::SluiceTcp)),
                ratio(m(Stack::Mtp), m(Stack::LinuxTcp)),
            );
        }
        write_failures(&mut t, &self.failures());
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op_rows::CpuPerOp;

    fn lat(stack: Stack, p50: f64) -> Row<Lat> {
        Row {
            size: 64,
            stack,
            result: Ok(Lat {
                p50_us: p50,
                p99_us: 3.0 * p50,
                cpu: CpuPerOp::default(),
            }),
        }
    }

    fn bw(size: u64, stack: Stack, msgs: f64) -> Row<Bw> {
        Row {
            size,
            stack,
            result: Ok(Bw {
                gbps: msgs * size as f64 * 8.0 / 1e9,
                msgs_per_s: msgs,
                cpu: CpuPerOp {
                    busy_us: Some(2.0),
                    engines_us: Some(1.0),
                },
            }),
        }
    }

    #[test]
    fn ratios_and_failed_rows() {
        let t = Table {
            setup: vec!["how".into()],
            rtt: vec![
                lat(Stack::Mtp, 30.0),
                lat(Stack::SluiceTcp, 20.0),
                lat(Stack::LinuxTcp, 60.0),
            ],
            bw: vec![
                bw(64, Stack::Mtp, 100_000.0),
                bw(64, Stack::SluiceTcp, 400_000.0),
                Row {
                    size: 65536,
                    stack: Stack::Mtp,
                    result: Err("sluice mtp send: exit status: 1".into()),
                },
                bw(65536, Stack::LinuxTcp, 10_000.0),
            ],
        };
        let out = t.render();
        assert!(out.contains("MTP/sluice TCP p50 1.50x p99 1.50x"), "{out}");
        assert!(out.contains("MTP/linux TCP p50 0.50x"), "{out}");
        assert!(
            out.contains("MTP/sluice TCP msgs/s 0.25x, MTP/linux TCP msgs/s n/a"),
            "{out}"
        );
        assert!(
            out.contains("MTP/sluice TCP msgs/s n/a, MTP/linux TCP msgs/s n/a"),
            "{out}"
        );
        let failed = out.lines().find(|l| l.contains("failed:")).unwrap();
        assert!(failed.starts_with("  65536  MTP"), "{failed}");
        assert_eq!(t.failures().len(), 1);
    }
}
