//! `sluice experiment parallelism --quick` end to end in the lab (needs root): every row of
//! the parallelism and scaling tables completed, Linux in the same run, the sequencing table
//! printed, and `--cores` refusals in the CLI. No timing is asserted.

use std::process::Command;

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn parallelism_quick_completes_every_layout_and_scaling_row_beside_linux() {
    let lab = sluice_lab::LabGuard::require();
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("parallelism_quick: skipped: the experiment needs 2 cores");
        return;
    }
    let out = std::env::temp_dir().join(format!("sluice-exp-par-{}", std::process::id()));
    let run = sluice()
        .args(["experiment", "parallelism", "--quick", "--no-lock", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("sequencing step"), "{stdout}");
    // The flow-group assignment was printed at each multi-core engine's start.
    assert!(
        stderr.contains("thread 1: pre 1, protocol 1, post 1"),
        "{stderr}"
    );
    let csv = std::fs::read_to_string(out.join("parallelism.csv")).unwrap();
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    let servers = |table: &str| -> Vec<String> {
        rows.iter()
            .filter(|r| r[0] == table)
            .map(|r| r[1].to_string())
            .collect()
    };
    assert_eq!(
        servers("parallelism"),
        [
            "engine run-to-completion (1 core)",
            "engine pipelined (2 cores)",
            "engine replicated (2 cores)",
            "engine flow-groups (2 cores)",
            "linux",
        ],
        "{csv}"
    );
    // --quick: 1 and 16 connections, each on 1 core, 2 cores and Linux.
    assert_eq!(servers("scaling").len(), 6, "{csv}");
    for r in &rows {
        let ops: f64 = r[4]
            .parse()
            .unwrap_or_else(|_| panic!("row failed: {r:?}\n{stderr}"));
        assert!(ops > 0.0, "{r:?}");
        assert_ne!(r[8], "n/a", "a ratio to the base: {r:?}");
        assert_ne!(r[9], "n/a", "a ratio to Linux: {r:?}");
    }
    std::fs::remove_dir_all(out).unwrap();
    lab.teardown().unwrap();
}

#[test]
fn cores_flags_are_refused_where_they_cannot_run() {
    for (args, says) in [
        (&["engine", "--lab", "--cores", "2"][..], "--cores 2"),
        (
            &["echo", "--port", "7", "--backend", "sim", "--cores", "2"][..],
            "--cores",
        ),
        (
            &["sink", "--port", "7", "--lab", "--cores", "65"][..],
            "--cores 65: must be within 1..=",
        ),
        (
            &[
                "source",
                "--connect",
                "10.77.0.2:9",
                "--bytes",
                "1",
                "--lab",
                "--layout",
                "pipelined",
            ][..],
            "give --cores 2",
        ),
    ] {
        let run = sluice().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{args:?}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
