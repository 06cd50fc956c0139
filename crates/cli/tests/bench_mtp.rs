//! `sluice bench mtp --quick` end to end in the lab (issue 17): every row of the table (MTP,
//! Sluice TCP and Linux TCP; the 64 B round trip and throughput at 64 B and 64 KB) produced
//! numbers, and the Markdown copy holds the same table. Needs root (the test is `#[ignore]`d;
//! scripts/test.sh runs it as root) and sockperf and iperf3; it skips, saying why, when one
//! is missing. No performance assertion: the numbers are printed, not tested.

use std::process::Command;

use sluice_lab::{command, LabGuard};

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn quick_mtp_bench_fills_every_row() {
    if let Some(why) = sluice_lab::unavailable_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let missing: Vec<&str> = ["sockperf", "iperf3"]
        .into_iter()
        .filter(|t| !command::is_installed(t))
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "skipped: {} not installed (scripts/setup.sh installs sockperf, iperf3)",
            missing.join(", ")
        );
        return;
    }
    let lab = LabGuard::up().expect("lab up");
    let md = std::env::temp_dir().join(format!("sluice-bench-mtp-{}.md", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["bench", "mtp", "--quick", "--no-lock", "--out"])
        .arg(&md)
        .output()
        .expect("sluice bench mtp runs");
    lab.teardown().expect("lab down and no namespace left");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sluice bench mtp failed:\n{stderr}");
    eprintln!("{stdout}");
    // Rows start with the size; ratio lines have no size.
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    // One round-trip size and two throughput sizes, three stacks each.
    assert_eq!(rows.len(), 3 * 3, "rows:\n{stdout}\n{stderr}");
    for row in &rows {
        assert!(!row.contains("failed"), "a row failed:\n{stdout}\n{stderr}");
        let numbers = row
            .split_whitespace()
            .filter_map(|w| w.parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v > 0.0)
            .count();
        // Size, then at least two measured values.
        assert!(numbers >= 3, "row without numbers: {row}\n{stdout}");
    }
    for stack in ["MTP", "sluice TCP", "linux TCP"] {
        let n = rows.iter().filter(|r| r.contains(stack)).count();
        assert_eq!(n, 3, "{stack} rows:\n{stdout}");
    }
    let ratios = stdout
        .lines()
        .filter(|l| l.contains("ratios: MTP/"))
        .count();
    assert_eq!(ratios, 3, "{stdout}");
    let written = std::fs::read_to_string(&md).expect("the Markdown table was written");
    let _ = std::fs::remove_file(&md);
    assert!(written.contains(stdout.trim_end()), "{written}");
}
