//! `sluice bench verbs --quick --iters 200` end to end in the lab (issue 16): every row of
//! the table (verbs WRITE and SEND, Linux TCP, Sluice TCP; latency and bandwidth) produced a
//! number. Needs root (the test is `#[ignore]`d; scripts/test.sh runs it as root) and
//! perftest, sockperf and iperf3; it skips, saying why, when one is missing. No performance
//! assertion: the numbers are printed, not tested (house rule 5).

use std::process::Command;

use sluice_lab::{command, LabGuard};

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn quick_verbs_bench_fills_every_row() {
    let tools = ["ib_write_lat", "ib_send_bw", "sockperf", "iperf3"];
    let missing: Vec<&str> = tools
        .into_iter()
        .filter(|t| !command::is_installed(t))
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "skipped: {} not installed (scripts/setup.sh installs perftest, sockperf, iperf3)",
            missing.join(", ")
        );
        return;
    }
    let lab = LabGuard::require();
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["bench", "verbs", "--quick", "--iters", "200", "--no-lock"])
        .output()
        .expect("sluice bench verbs runs");
    lab.teardown().expect("lab down and no namespace left");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sluice bench verbs failed:\n{stderr}");
    // Rows start with the size; ratio lines start with "ratios".
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    // Latency: 2 sizes x 4 stacks; bandwidth at 64 KB: WRITE and SEND at 1 and 8 QPs, and
    // the two TCP streams.
    assert_eq!(rows.len(), 2 * 4 + 6, "rows:\n{stdout}\n{stderr}");
    for row in &rows {
        assert!(!row.contains("failed"), "a row failed:\n{stdout}");
        let numbers = row
            .split_whitespace()
            .filter_map(|w| w.parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v > 0.0)
            .count();
        // Size (and QPs), then at least two measured values.
        assert!(numbers >= 3, "row without numbers: {row}\n{stdout}");
    }
    for stack in ["verbs WRITE", "verbs SEND", "linux TCP", "sluice TCP"] {
        assert!(
            rows.iter().filter(|r| r.contains(stack)).count() >= 3,
            "{stack} rows missing:\n{stdout}"
        );
    }
    assert!(stdout.contains("GOALS"), "{stdout}");
}
