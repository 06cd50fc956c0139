//! `sluice bench extensions --quick` end to end in the lab (issue 19 item 6): every row that
//! measured RPCs (positive ops/s), the firewall's map held its 10k rules, the capture rows
//! wrote pcap files with packets, the tracepoints fired, every module and capture row has a
//! hook-path number, and the interpreter and the JIT have one per program. Needs
//! root (the test is `#[ignore]`d; scripts/test.sh runs it as root), sockperf (it skips,
//! saying why, without it) and libsluice_preload.so beside the binary (`cargo build -p
//! sluice-preload`, or the whole workspace's tests). No performance assertion: the numbers
//! are printed.

use std::collections::BTreeMap;
use std::process::Command;

use sluice_lab::{command, LabGuard};

/// A CSV file the bench wrote, as rows of column name -> value.
fn read_csv(path: &std::path::Path) -> Vec<BTreeMap<String, String>> {
    csv::Reader::from_path(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .deserialize()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn positive(row: &BTreeMap<String, String>, col: &str) -> bool {
    row.get(col)
        .and_then(|v| v.parse::<f64>().ok())
        .is_some_and(|v| v.is_finite() && v > 0.0)
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn quick_extension_bench_fills_every_built_row() {
    if let Some(why) = sluice_lab::unavailable_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    if !command::is_installed("sockperf") {
        eprintln!("skipped: sockperf not installed (scripts/setup.sh installs it)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("sluice-bench-ext-{}", std::process::id()));
    let lab = LabGuard::up().expect("lab up");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["bench", "extensions", "--quick", "--no-lock", "--out"])
        .arg(&dir)
        .output()
        .expect("sluice bench extensions runs");
    lab.teardown().expect("lab down and no namespace left");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "sluice bench extensions failed:\n{stderr}"
    );
    eprintln!("{stdout}");

    let rows = read_csv(&dir.join("extensions.csv"));
    let names: Vec<&str> = rows.iter().map(|r| r["extension"].as_str()).collect();
    assert_eq!(
        names,
        [
            "baseline",
            "xdp null",
            "xdp vlan_strip",
            "xdp firewall 10k",
            "tracepoints all",
            "capture",
            "capture filtered"
        ],
        "{stdout}"
    );
    for r in &rows {
        let name = r["extension"].as_str();
        assert!(r["lab_note"].is_empty(), "{name} failed: {r:?}\n{stderr}");
        assert!(positive(r, "rpc_ops_per_s"), "{name}: {r:?}");
        assert!(positive(r, "ratio_to_baseline"), "{name}: {r:?}");
        if name == "tracepoints all" {
            // Every tracepoint was on and they fired; they cost nothing at the hooks.
            assert!(positive(r, "trace_hits"), "{name}: {r:?}");
            assert!(r["micro_note"].starts_with("n/a"), "{name}: {r:?}");
        } else {
            assert!(positive(r, "hook_ns_per_frame"), "{name}: {r:?}");
        }
        assert!(positive(r, "engine_us_per_op"), "{name}: {r:?}");
        if name.starts_with("xdp ") {
            // The module saw the traffic and, the firewall's rules not matching it, let it
            // all through.
            assert!(positive(r, "module_runs"), "{name}: {r:?}");
            assert_eq!(r["module_drops"], "0", "{name}: {r:?}");
        }
    }
    let firewall = rows
        .iter()
        .find(|r| r["extension"] == "xdp firewall 10k")
        .unwrap();
    assert_eq!(firewall["firewall_rules"], "10000", "{firewall:?}");
    for name in ["capture", "capture filtered"] {
        let r = rows.iter().find(|r| r["extension"] == name).unwrap();
        assert!(positive(r, "pcap_packets"), "{name}: {r:?}");
        let pcap = dir.join(format!("{}.pcap", name.replace(' ', "-")));
        assert!(pcap.exists(), "{}", pcap.display());
    }
    // Capturing every frame of a run keeps far more than the filter's handshakes and closes.
    let packets = |name: &str| -> u64 {
        rows.iter().find(|r| r["extension"] == name).unwrap()["pcap_packets"]
            .parse()
            .unwrap()
    };
    assert!(packets("capture") > packets("capture filtered"), "{stdout}");

    let jit = read_csv(&dir.join("interp_jit.csv"));
    let programs: Vec<&str> = jit.iter().map(|r| r["program"].as_str()).collect();
    assert_eq!(
        programs,
        ["null", "vlan_strip", "firewall", "port_counter"],
        "{stdout}"
    );
    for r in &jit {
        assert!(positive(r, "interpreter_ns_per_frame"), "{r:?}");
        assert!(positive(r, "jit_ns_per_frame"), "{r:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
