//! The `sluice bench verbs` table: latency and bandwidth rows, Sluice verbs beside Linux TCP
//! and Sluice TCP, CPU per operation, the ratios and the goals.

use std::fmt::Write as _;

use crate::cells::ratio;
use crate::op_rows::{bw_cells, lat_cells, write_failures, Bw, Lat};

/// What carried the operations of a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stack {
    /// perftest's RDMA WRITE over Sluice's verbs (ib_write_lat, ib_write_bw).
    VerbsWrite,
    /// perftest's SEND over Sluice's verbs (ib_send_lat, ib_send_bw).
    VerbsSend,
    /// sockperf or iperf3 over Linux kernel TCP (sluice-b to sluice-k).
    LinuxTcp,
    /// The same sockperf or iperf3 over Sluice's TCP, through `sluice run` on both engines.
    SluiceTcp,
}

impl Stack {
    /// The row's label.
    pub fn name(self) -> &'static str {
        match self {
            Stack::VerbsWrite => "verbs WRITE",
            Stack::VerbsSend => "verbs SEND",
            Stack::LinuxTcp => "linux TCP",
            Stack::SluiceTcp => "sluice TCP",
        }
    }
}

/// One latency row: a size on a stack, measured or failed.
#[derive(Clone, Debug, PartialEq)]
pub struct LatRow {
    /// Message size asked for, bytes.
    pub size: u64,
    /// The stack.
    pub stack: Stack,
    /// The measurement, or why there is none.
    pub result: Result<Lat, String>,
    /// A remark printed at the end of the row (e.g. the size actually sent).
    pub note: String,
}

/// One bandwidth row: a size and QP count (1 for TCP's single stream) on a stack.
#[derive(Clone, Debug, PartialEq)]
pub struct BwRow {
    /// Message size, bytes.
    pub size: u64,
    /// Queue pairs (TCP: 1 stream).
    pub qps: u32,
    /// The stack.
    pub stack: Stack,
    /// The measurement, or why there is none.
    pub result: Result<Bw, String>,
}

/// A whole run's rows.
#[derive(Debug, Default)]
pub struct Table {
    /// Lines printed above the rows (how it ran).
    pub setup: Vec<String>,
    /// Latency rows, in the order measured.
    pub lat: Vec<LatRow>,
    /// Bandwidth rows, in the order measured.
    pub bw: Vec<BwRow>,
}

impl Table {
    fn lat_of(&self, size: u64, stack: Stack) -> Option<&Lat> {
        self.lat
            .iter()
            .find(|r| r.size == size && r.stack == stack)
            .and_then(|r| r.result.as_ref().ok())
    }

    fn bw_of(&self, size: u64, qps: u32, stack: Stack) -> Option<&Bw> {
        self.bw
            .iter()
            .find(|r| r.size == size && r.qps == qps && r.stack == stack)
            .and_then(|r| r.result.as_ref().ok())
    }

    fn lat_sizes(&self) -> Vec<u64> {
        let mut s: Vec<u64> = self.lat.iter().map(|r| r.size).collect();
        s.dedup();
        s
    }

    fn bw_sizes(&self) -> Vec<u64> {
        let mut s: Vec<u64> = self.bw.iter().map(|r| r.size).collect();
        s.sort_unstable();
        s.dedup();
        s
    }

    /// Rows that produced no number, as `stack size: why`.
    pub fn failures(&self) -> Vec<String> {
        let lat = self.lat.iter().filter_map(|r| {
            r.result
                .as_ref()
                .err()
                .map(|e| format!("latency {} {} B: {e}", r.stack.name(), r.size))
        });
        let bw = self.bw.iter().filter_map(|r| {
            r.result.as_ref().err().map(|e| {
                format!(
                    "bandwidth {} {} B x{} QP: {e}",
                    r.stack.name(),
                    r.size,
                    r.qps
                )
            })
        });
        lat.chain(bw).collect()
    }

    /// The goals, one line each: met, not met, or not measured, per size.
    pub fn goals(&self) -> Vec<String> {
        let p50 = |s, st| self.lat_of(s, st).map(|l| l.p50_us);
        let mut below_linux = Vec::new();
        let mut near_sluice = Vec::new();
        for size in self.lat_sizes() {
            let w = p50(size, Stack::VerbsWrite);
            below_linux.push((size, w.zip(p50(size, Stack::LinuxTcp)).map(|(w, l)| w < l)));
            near_sluice.push((
                size,
                w.zip(p50(size, Stack::SluiceTcp))
                    .map(|(w, s)| w <= 1.5 * s),
            ));
        }
        let mut bw_goal = Vec::new();
        for size in self.bw_sizes() {
            let v = self.bw_of(size, 8, Stack::VerbsWrite).map(|b| b.gbps);
            let l = self.bw_of(size, 1, Stack::LinuxTcp).map(|b| b.gbps);
            bw_goal.push((size, v.zip(l).map(|(v, l)| v >= l)));
        }
        vec![
            goal_line("WRITE p50 below Linux TCP ping-pong p50", &below_linux),
            goal_line("WRITE p50 within 1.5x of Sluice TCP p50", &near_sluice),
            goal_line(
                "WRITE bandwidth at 8 QPs at or above Linux TCP single stream",
                &bw_goal,
            ),
        ]
    }

    /// The table as printed.
    pub fn render(&self) -> String {
        let mut t = String::new();
        for line in &self.setup {
            let _ = writeln!(t, "{line}");
        }
        let _ = writeln!(
            t,
            "\nLATENCY  one-way usec (half the round trip: perftest's and sockperf's default); \
             cpu = usec of CPU per round trip (machine-wide busy; engines' own)"
        );
        let _ = writeln!(
            t,
            "{:>7}  {:<12} {:>9} {:>9} {:>9} {:>9}  note",
            "bytes", "stack", "p50", "p99", "cpu/op", "eng/op"
        );
        for size in self.lat_sizes() {
            for r in self.lat.iter().filter(|r| r.size == size) {
                let cells = lat_cells(&r.result);
                let _ = writeln!(t, "{size:>7}  {:<12} {cells}  {}", r.stack.name(), r.note);
            }
            let p50 = |st| self.lat_of(size, st).map(|l| l.p50_us);
            let _ = writeln!(
                t,
                "{:>7}  ratios: WRITE/linux TCP p50 {}, WRITE/sluice TCP p50 {}",
                "",
                ratio(p50(Stack::VerbsWrite), p50(Stack::LinuxTcp)),
                ratio(p50(Stack::VerbsWrite), p50(Stack::SluiceTcp)),
            );
        }
        let _ = writeln!(
            t,
            "\nBANDWIDTH  payload Gbit/s (10^9 bit/s) and messages/s; verbs at tx depth 64, TCP \
             one stream; cpu = usec of CPU per message (machine-wide busy; engines' own)"
        );
        let _ = writeln!(
            t,
            "{:>7} {:>3}  {:<12} {:>9} {:>11} {:>9} {:>9}",
            "bytes", "qps", "stack", "Gbit/s", "msgs/s", "cpu/op", "eng/op"
        );
        for size in self.bw_sizes() {
            for r in self.bw.iter().filter(|r| r.size == size) {
                let cells = bw_cells(&r.result);
                let _ = writeln!(t, "{size:>7} {:>3}  {:<12} {cells}", r.qps, r.stack.name());
            }
            let gbps = |q, st| self.bw_of(size, q, st).map(|b| b.gbps);
            let _ = writeln!(
                t,
                "{:>11}  ratios: WRITE x8 QP/linux TCP {}, WRITE x8 QP/sluice TCP {}",
                "",
                ratio(gbps(8, Stack::VerbsWrite), gbps(1, Stack::LinuxTcp)),
                ratio(gbps(8, Stack::VerbsWrite), gbps(1, Stack::SluiceTcp)),
            );
        }
        let _ = writeln!(t, "\nGOALS (issue 16)");
        for g in self.goals() {
            let _ = writeln!(t, "  {g}");
        }
        write_failures(&mut t, &self.failures());
        t
    }
}

/// `what: met|not met (per size)`.
fn goal_line(what: &str, per_size: &[(u64, Option<bool>)]) -> String {
    let measured: Vec<bool> = per_size.iter().filter_map(|(_, m)| *m).collect();
    let verdict = if measured.is_empty() {
        "not measured"
    } else if measured.iter().all(|&m| m) {
        "met"
    } else if measured.iter().any(|&m| m) {
        "partly met"
    } else {
        "not met"
    };
    let detail = per_size
        .iter()
        .map(|(size, m)| {
            let m = match m {
                Some(true) => "yes",
                Some(false) => "no",
                None => "n/a",
            };
            format!("{size} B {m}")
        })
        .collect::<Vec<_>>()
        .join(", ");
    format!("{what}: {verdict} ({detail})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op_rows::CpuPerOp;

    fn lat(size: u64, stack: Stack, p50: f64) -> LatRow {
        LatRow {
            size,
            stack,
            result: Ok(Lat {
                p50_us: p50,
                p99_us: 2.0 * p50,
                cpu: CpuPerOp::default(),
            }),
            note: String::new(),
        }
    }

    fn bw(size: u64, qps: u32, stack: Stack, gbps: f64) -> BwRow {
        BwRow {
            size,
            qps,
            stack,
            result: Ok(Bw {
                gbps,
                msgs_per_s: gbps * 1e9 / 8.0 / size as f64,
                cpu: CpuPerOp {
                    busy_us: Some(1.5),
                    engines_us: None,
                },
            }),
        }
    }

    #[test]
    fn ratios_goals_and_failed_rows() {
        let t = Table {
            setup: Vec::new(),
            lat: vec![
                lat(2, Stack::VerbsWrite, 10.0),
                lat(2, Stack::LinuxTcp, 20.0),
                lat(2, Stack::SluiceTcp, 5.0),
                lat(64, Stack::VerbsWrite, 30.0),
                lat(64, Stack::LinuxTcp, 20.0),
                LatRow {
                    result: Err("ib_send_lat: exit status: 1".into()),
                    ..lat(64, Stack::VerbsSend, 1.0)
                },
            ],
            bw: vec![
                bw(65536, 8, Stack::VerbsWrite, 12.0),
                bw(65536, 1, Stack::LinuxTcp, 8.0),
            ],
        };
        let out = t.render();
        assert!(out.contains("WRITE/linux TCP p50 0.50x"), "{out}");
        assert!(out.contains("WRITE/sluice TCP p50 2.00x"), "{out}");
        assert!(out.contains("WRITE/linux TCP p50 1.50x"), "{out}");
        assert!(out.contains("WRITE x8 QP/linux TCP 1.50x"), "{out}");
        let goals = t.goals();
        assert!(
            goals[0].contains("partly met (2 B yes, 64 B no)"),
            "{goals:?}"
        );
        assert!(goals[1].contains("not met (2 B no, 64 B n/a)"), "{goals:?}");
        assert!(goals[2].contains(": met (65536 B yes)"), "{goals:?}");
        let send = out.lines().find(|l| l.contains("verbs SEND")).unwrap();
        assert!(
            send.contains("failed: ib_send_lat: exit status: 1"),
            "{send}"
        );
        assert_eq!(t.failures().len(), 1);
    }
}
