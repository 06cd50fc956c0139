//! The extension bench's printed table (rows, ratios to the baseline, evidence that each
//! extension ran; then interpreter vs JIT) and its CSV files.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::cells::{fmt_num, fmt_opt, ratio, short};

use super::rows::{Cell, Extension, JitRow, Missing, Row};

/// Everything one run measured.
#[derive(Clone, Debug, Default)]
pub struct Table {
    /// How it ran, one line each.
    pub setup: Vec<String>,
    /// One per [`Extension`], in order.
    pub rows: Vec<Row>,
    /// The interpreter-vs-JIT section.
    pub jit: Vec<JitRow>,
}

/// The CSV files a run wrote.
#[derive(Clone, Debug)]
pub struct Written {
    /// The rows.
    pub rows: PathBuf,
    /// Interpreter vs JIT.
    pub jit: PathBuf,
}

/// The first line of why a cell is empty, cut short for a table row (the whole reason is on
/// stderr as it happens, and in the CSV).
fn reason(m: &Missing) -> String {
    short(m.to_string().lines().next().unwrap_or_default())
}

/// The note of a cell with no number, empty otherwise (the CSV's).
fn note<T>(c: &Cell<T>) -> String {
    c.as_ref().err().map(Missing::to_string).unwrap_or_default()
}

impl Table {
    /// The baseline row's ops/s and hook ns, if it measured.
    fn baseline(&self) -> (Option<f64>, Option<f64>) {
        let base = self.rows.iter().find(|r| r.ext == Extension::Baseline);
        (
            base.and_then(|r| r.lab.as_ref().ok()).map(|l| l.ops_per_s),
            base.and_then(|r| r.micro.as_ref().ok())
                .map(|m| m.ns_per_frame),
        )
    }

    /// The table as printed.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for line in &self.setup {
            let _ = writeln!(s, "{line}");
        }
        let (base_ops, base_ns) = self.baseline();
        let _ = writeln!(
            s,
            "\n{:<18} {:>10} {:>8} {:>9} {:>9} {:>9} {:>10}  evidence",
            "extension", "rpc ops/s", "vs base", "hook ns", "+ns", "engine us", "machine us"
        );
        let _ = writeln!(
            s,
            "{:<18} {:>10} {:>8} {:>9} {:>9} {:>9} {:>10}",
            "", "", "", "/frame", "/frame", "/op", "/op"
        );
        for r in &self.rows {
            let ns = r.micro.as_ref().ok().map(|m| m.ns_per_frame);
            let plus = match (ns, base_ns) {
                (Some(a), Some(b)) => format!("{:+.1}", a - b),
                _ => "-".into(),
            };
            // Why a cell is empty goes last on the line, once if both halves say the same.
            let mut why = Vec::new();
            if let Err(m) = &r.lab {
                why.push(reason(m));
            }
            if let Err(m) = &r.micro {
                let m = reason(m);
                if !why.contains(&m) {
                    why.push(format!("hook path: {m}"));
                }
            }
            let l = r.lab.as_ref().ok();
            let _ = writeln!(
                s,
                "{:<18} {:>10} {:>8} {:>9} {:>9} {:>9} {:>10}  {}",
                r.ext.name(),
                l.map_or("-".into(), |l| fmt_num(l.ops_per_s)),
                l.map_or("-".into(), |l| ratio(Some(l.ops_per_s), base_ops)),
                ns.map_or("-".into(), fmt_num),
                plus,
                fmt_opt(l.and_then(|l| l.engine_us_per_op)),
                fmt_opt(l.and_then(|l| l.machine_us_per_op)),
                if why.is_empty() {
                    evidence(r)
                } else {
                    why.join("; ")
                }
            );
        }
        let _ = writeln!(s, "\ninterpreter vs JIT, ns per frame");
        let _ = writeln!(
            s,
            "{:<14} {:>12} {:>12}  {:>12}  {:>16}",
            "program", "interpreter", "JIT", "JIT speed-up", "body speed-up"
        );
        for j in &self.jit {
            let speedup = ratio(j.interp_ns.clone().ok(), j.jit_ns.clone().ok());
            let _ = writeln!(
                s,
                "{:<14} {:>12} {:>12}  {:>12}  {:>16}",
                j.program,
                j.interp_ns.as_ref().map_or_else(reason, |v| fmt_num(*v)),
                j.jit_ns.as_ref().map_or("-".into(), |v| fmt_num(*v)),
                match &j.jit_ns {
                    Ok(_) => speedup,
                    Err(m) => reason(m),
                },
                self.body_speedup(j)
                    .map_or("-".into(), |x| format!("{}x", fmt_num(x)))
            );
        }
        let _ = writeln!(
            s,
            "body speed-up: each runtime's time minus its time for `null` (the per-run cost both \
             pay: the frame copied in, the context, the counters), interpreter over JIT"
        );
        s
    }

    /// The JIT's speed-up on the program's own instructions: each runtime's ns minus its ns
    /// for `null` (what every run pays whatever the program), interpreter over JIT.
    fn body_speedup(&self, j: &JitRow) -> Option<f64> {
        let null = self.jit.iter().find(|n| n.program == "null")?;
        let (i0, t0) = (*null.interp_ns.as_ref().ok()?, *null.jit_ns.as_ref().ok()?);
        let (i, t) = (*j.interp_ns.as_ref().ok()?, *j.jit_ns.as_ref().ok()?);
        (j.program != "null" && t > t0 && i > i0).then(|| (i - i0) / (t - t0))
    }

    /// Writes `<dir>/extensions.csv` (the rows) and `<dir>/interp_jit.csv`.
    pub fn write_csv(&self, dir: &Path) -> Result<Written, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let rows = dir.join("extensions.csv");
        let jit = dir.join("interp_jit.csv");
        let (base_ops, _) = self.baseline();
        let opt = |v: Option<f64>| v.map(|v| format!("{v:.3}")).unwrap_or_default();
        let count = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        let mut w = csv::Writer::from_path(&rows).map_err(|e| e.to_string())?;
        w.write_record([
            "extension",
            "rpc_ops_per_s",
            "ratio_to_baseline",
            "hook_ns_per_frame",
            "engine_us_per_op",
            "machine_us_per_op",
            "module_runs",
            "module_drops",
            "firewall_rules",
            "pcap_packets",
            "trace_hits",
            "lab_note",
            "micro_note",
        ])
        .map_err(|e| e.to_string())?;
        for r in &self.rows {
            let l = r.lab.as_ref().ok();
            let ops = l.map(|l| l.ops_per_s);
            w.write_record([
                r.ext.name().to_string(),
                opt(ops),
                opt(ops.zip(base_ops).map(|(a, b)| a / b)),
                opt(r.micro.as_ref().ok().map(|m| m.ns_per_frame)),
                opt(l.and_then(|l| l.engine_us_per_op)),
                opt(l.and_then(|l| l.machine_us_per_op)),
                count(l.and_then(|l| l.module_runs)),
                count(l.and_then(|l| l.module_drops)),
                count(l.and_then(|l| l.firewall_rules)),
                count(l.and_then(|l| l.pcap_packets)),
                count(l.and_then(|l| l.trace_hits)),
                note(&r.lab),
                note(&r.micro),
            ])
            .map_err(|e| e.to_string())?;
        }
        w.flush().map_err(|e| e.to_string())?;
        let mut w = csv::Writer::from_path(&jit).map_err(|e| e.to_string())?;
        w.write_record([
            "program",
            "interpreter_ns_per_frame",
            "jit_ns_per_frame",
            "jit_speedup",
            "interpreter_note",
            "jit_note",
            "jit_body_speedup",
        ])
        .map_err(|e| e.to_string())?;
        for j in &self.jit {
            let (i, t) = (j.interp_ns.clone().ok(), j.jit_ns.clone().ok());
            w.write_record([
                j.program.to_string(),
                opt(i),
                opt(t),
                opt(i.zip(t).filter(|(_, t)| *t > 0.0).map(|(i, t)| i / t)),
                note(&j.interp_ns),
                note(&j.jit_ns),
                opt(self.body_speedup(j)),
            ])
            .map_err(|e| e.to_string())?;
        }
        w.flush().map_err(|e| e.to_string())?;
        Ok(Written { rows, jit })
    }
}

/// What shows the row's extension really ran: its module's runs and drops, the rules its
/// map held, the packets its capture wrote.
fn evidence(r: &Row) -> String {
    let Ok(l) = &r.lab else {
        return String::new();
    };
    let mut parts = Vec::new();
    if let Some(n) = l.module_runs {
        parts.push(format!("runs {n}"));
    }
    if let Some(n) = l.module_drops {
        parts.push(format!("drops {n}"));
    }
    if let Some(n) = l.firewall_rules {
        parts.push(format!("rules {n}"));
    }
    if let Some(n) = l.pcap_packets {
        parts.push(format!("pcap {n} packets"));
    }
    if let Some(n) = l.trace_hits {
        parts.push(format!("tracepoint hits {n}"));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::super::rows::{LabResult, MicroResult};
    use super::*;

    fn row(ext: Extension, ops: f64, ns: f64) -> Row {
        Row {
            ext,
            lab: Ok(LabResult {
                ops_per_s: ops,
                round_trips: 100,
                engine_us_per_op: Some(10.0),
                machine_us_per_op: Some(20.0),
                firewall_rules: (ext == Extension::Firewall).then_some(10_000),
                module_runs: ext.module().map(|_| 200),
                module_drops: ext.module().map(|_| 0),
                pcap_packets: None,
                trace_hits: None,
            }),
            micro: Ok(MicroResult {
                ns_per_frame: ns,
                frames: 2,
                ..MicroResult::default()
            }),
        }
    }

    #[test]
    fn the_body_speed_up_takes_off_what_null_costs_each_runtime() {
        let jit = |program, i, t| JitRow {
            program,
            interp_ns: Ok(i),
            jit_ns: Ok(t),
        };
        let t = Table {
            setup: Vec::new(),
            rows: Vec::new(),
            jit: vec![jit("null", 30.0, 20.0), jit("firewall", 330.0, 40.0)],
        };
        assert_eq!(t.body_speedup(&t.jit[0]), None);
        assert_eq!(t.body_speedup(&t.jit[1]), Some(15.0));
        let text = t.render();
        let fw = text.lines().find(|l| l.starts_with("firewall")).unwrap();
        assert!(fw.contains("8.25x") && fw.contains("15.0x"), "{fw}");
    }

    #[test]
    fn ratios_against_the_baseline_and_missing_cells_in_table_and_csv() {
        let t = Table {
            setup: vec!["setup".into()],
            rows: vec![
                row(Extension::Baseline, 10_000.0, 2.0),
                row(Extension::Firewall, 8_000.0, 52.0),
                Row {
                    ext: Extension::Tracepoints,
                    lab: Err(Missing::Failed("sockperf died".into())),
                    micro: Err(Missing::NotApplicable("in the core")),
                },
            ],
            jit: vec![JitRow {
                program: "null",
                interp_ns: Ok(30.0),
                jit_ns: Err(Missing::Failed("no JIT".into())),
            }],
        };
        let text = t.render();
        let fw = text
            .lines()
            .find(|l| l.starts_with("xdp firewall"))
            .unwrap();
        assert!(fw.contains("0.80x") && fw.contains("+50.0"), "{fw}");
        assert!(fw.contains("rules 10000"), "{fw}");
        let tp = text.lines().find(|l| l.starts_with("tracepoints")).unwrap();
        assert!(tp.contains("failed: sockperf died"), "{tp}");
        let null = text.lines().find(|l| l.starts_with("null")).unwrap();
        assert!(
            null.contains("30.0") && null.contains("failed: no JIT"),
            "{null}"
        );

        let dir = std::env::temp_dir().join(format!("sluice-ext-csv-{}", std::process::id()));
        let w = t.write_csv(&dir).unwrap();
        let rows = std::fs::read_to_string(&w.rows).unwrap();
        let lines: Vec<&str> = rows.lines().collect();
        assert_eq!(lines.len(), 4, "{rows}");
        assert!(
            lines[2].starts_with("xdp firewall 10k,8000.000,0.800,52.000,"),
            "{rows}"
        );
        assert!(lines[2].contains(",10000,"), "{rows}");
        assert!(lines[3].starts_with("tracepoints all,,,,"), "{rows}");
        assert!(lines[3].contains("failed: sockperf died"), "{rows}");
        let jit = std::fs::read_to_string(&w.jit).unwrap();
        assert!(jit.contains("null,30.000,,,,failed: no JIT"), "{jit}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
