//! `sluice bench --quick --json` end to end in the lab (needs root: the test is
//! `#[ignore]`d, and scripts/test.sh runs it as root):
//! every workload is measured for both sides in both roles, with positive, finite numbers,
//! and so are the outside programs' rows (sockperf, memcached) with CPU per operation.
//! No performance assertion: the numbers are reported, not tested (house rule 5).

use std::process::Command;

use serde_json::Value;
use sluice_lab::LabGuard;

const WORKLOADS: [&str; 5] = ["rpc-1", "rpc-16", "stream-up", "stream-down", "connect-4"];

/// The metrics each workload must report.
fn metrics_of(workload: &str) -> &'static [&'static str] {
    match workload {
        w if w.starts_with("rpc") => &["ops_per_sec", "p50_us", "p99_us", "p999_us"],
        w if w.starts_with("stream") => &["gbps"],
        _ => &["conns_per_sec"],
    }
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn quick_bench_reports_every_workload_for_both_sides() {
    // Hold the lab for the whole run; the bench is told the lock is ours.
    let lab = LabGuard::require();
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["bench", "--quick", "--json", "--no-lock"])
        .output()
        .expect("sluice bench runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sluice bench failed:\n{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{stderr}"));

    let rows = report["results"].as_array().expect("results");
    for role in ["server", "client"] {
        for side in ["engine", "linux"] {
            for workload in WORKLOADS {
                let row = rows
                    .iter()
                    .find(|r| r["role"] == role && r["side"] == side && r["workload"] == workload)
                    .unwrap_or_else(|| panic!("no {role}/{side}/{workload} row:\n{stderr}"));
                // The machine-wide busy time behind CPU per operation was read.
                let busy = row["busy_cores"].as_f64().unwrap_or(f64::NAN);
                assert!(busy > 0.0, "{role}/{side}/{workload} busy_cores = {busy}");
                for metric in metrics_of(workload) {
                    let v = row["metrics"][metric].as_f64().unwrap_or(f64::NAN);
                    assert!(
                        v.is_finite() && v > 0.0,
                        "{role}/{side}/{workload} {metric} = {v}"
                    );
                }
            }
        }
    }
    let ratios = report["ratios"].as_array().expect("ratios");
    assert_eq!(
        ratios.len(),
        2 * (4 + 4 + 1 + 1 + 1),
        "one ratio per metric"
    );
    assert!(ratios.iter().all(|r| r["ratio"]
        .as_f64()
        .is_some_and(|x| x.is_finite() && x > 0.0)));
    outside_rows_have_numbers_and_cpu(&report, &stderr);
    let bridge = report["setup"]["bridge"].as_str().unwrap_or_default();
    assert!(
        bridge.contains("br_netfilter not loaded") || bridge.contains("= 0"),
        "the lab's bridge still calls netfilter: {bridge:?}"
    );
    lab.teardown().expect("lab down and no namespace left");
}

/// Every outside workload ran on both sides, with positive metrics and CPU per operation
/// (the engine's own on Sluice, the softirq time on Linux).
fn outside_rows_have_numbers_and_cpu(report: &Value, stderr: &str) {
    let rows = report["outside"]["rows"].as_array().expect("outside rows");
    for workload in ["sockperf-pp", "sockperf-tp", "sockperf-wake", "memcached"] {
        for side in ["engine", "linux"] {
            let row = rows
                .iter()
                .find(|r| r["workload"] == workload && r["side"] == side)
                .unwrap_or_else(|| panic!("no outside {workload}/{side} row:\n{stderr}"));
            let m = &row["result"]["Ok"];
            assert!(
                m.is_object(),
                "outside {workload}/{side} failed: {}",
                row["result"]["Err"]
            );
            let metrics = m["metrics"].as_array().expect("metrics");
            assert!(!metrics.is_empty());
            for pair in metrics {
                let v = pair[1].as_f64().unwrap_or(f64::NAN);
                assert!(v.is_finite() && v > 0.0, "{workload}/{side} {pair}");
            }
            let other = if side == "engine" {
                "engine_us"
            } else {
                "softirq_us"
            };
            for cpu in ["app_us", "busy_us", other] {
                let v = m["cpu"][cpu].as_f64().unwrap_or(f64::NAN);
                assert!(
                    v.is_finite() && v >= 0.0,
                    "{workload}/{side} cpu {cpu} = {v}"
                );
            }
            assert!(m["cpu"]["busy_us"].as_f64().is_some_and(|v| v > 0.0));
        }
    }
}
