//! `sluice experiment ... --quick` end to end: the table, the CSV and the PNG.

use std::path::Path;
use std::process::Command;

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

fn csv_rows(path: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

#[test]
fn ooo_quick_writes_a_table_csv_and_plot_and_go_back_n_retransmits_more() {
    let out = std::env::temp_dir().join(format!("sluice-exp-ooo-{}", std::process::id()));
    let run = sluice()
        .args(["experiment", "ooo", "--quick", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("fg p99.9 ms"), "{stdout}");
    let rows = csv_rows(&out.join("ooo.csv"));
    // Four fidelities per policy, the reference first with ratios of exactly 1.
    assert_eq!(rows.len() % 4, 0, "{rows:?}");
    for policy in rows.chunks(4) {
        let labels: Vec<&str> = policy.iter().map(|r| r[1].as_str()).collect();
        assert_eq!(labels, ["max", "0", "1", "2"]);
        assert_eq!(policy[0][3], "x1.00");
        // Every run completed the same seeded workload.
        assert!(policy.iter().all(|r| r[10] == policy[0][10]), "{policy:?}");
        let retx = |r: &Vec<String>| r[11].parse::<f64>().unwrap();
        assert!(
            retx(&policy[1]) >= retx(&policy[0]),
            "go-back-N (0 intervals) should retransmit at least as much as max: {policy:?}"
        );
    }
    let png = std::fs::read(out.join("ooo.png")).unwrap();
    assert_eq!(&png[..4], b"\x89PNG");
    std::fs::remove_dir_all(out).unwrap();
}
