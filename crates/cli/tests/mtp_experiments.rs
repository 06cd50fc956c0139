//! `sluice experiment mtp-* --quick` end to end (issue 17, mtp.txt 5): the table, the CSV
//! and the PNG of each, and what each must show.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `sluice experiment NAME --quick --out DIR` and returns its stdout and DIR.
fn experiment(name: &str) -> (String, PathBuf) {
    let out = std::env::temp_dir().join(format!("sluice-{name}-{}", std::process::id()));
    let run = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["experiment", name, "--quick", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let png = std::fs::read(out.join(format!("{name}.png"))).unwrap();
    assert_eq!(&png[..4], b"\x89PNG");
    (stdout, out)
}

/// The CSV's header and rows.
fn csv(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text
        .lines()
        .map(|l| l.split(',').map(str::to_string).collect());
    (lines.next().unwrap(), lines.collect())
}

fn num(s: &str) -> f64 {
    s.parse().unwrap_or_else(|_| panic!("not a number: {s}"))
}

#[test]
fn mtp_multipath_quick_samples_both_systems_every_32_us_and_mtp_moves_data() {
    let (stdout, out) = experiment("mtp-multipath");
    assert!(stdout.contains("goodput Gbit/s"), "{stdout}");
    let (header, rows) = csv(&out.join("mtp-multipath.csv"));
    assert_eq!(header, ["system", "time_us", "path", "gbps"]);
    // 8 periods of 384 us in 32 us bins, for each system.
    for system in ["dctcp", "mtp"] {
        let mine: Vec<&Vec<String>> = rows.iter().filter(|r| r[0] == system).collect();
        assert_eq!(mine.len(), 8 * 12, "{system}");
        assert_eq!(mine[0][1], "32");
        assert_eq!(mine[12][2], "1", "the second period is on the slow path");
        let mean = mine.iter().map(|r| num(&r[3])).sum::<f64>() / mine.len() as f64;
        assert!(mean > 0.0, "{system} moved nothing");
        // Nothing beats the fast path's rate by more than two 16 KB messages a bin (MTP
        // counts whole messages and completions bunch after a switch to the fast path:
        // 106.5 in one bin, 307 over three, since s9-workloads merged s9-mtpeng).
        assert!(mine.iter().all(|r| num(&r[3]) <= 108.2), "{system}");
        // On the slow path, past the first bin after a switch (the fast path's queue
        // draining), the mean stays within 10 Gbit/s.
        for p in (1..8).step_by(2) {
            let slow = &mine[p * 12 + 1..(p + 1) * 12];
            let mean = slow.iter().map(|r| num(&r[3])).sum::<f64>() / slow.len() as f64;
            assert!(mean > 1.0 && mean <= 10.5, "{system}: {slow:?}");
        }
    }
    std::fs::remove_dir_all(out).unwrap();
}

#[test]
fn mtp_balance_quick_has_every_system_and_bucket_and_spraying_retransmits() {
    let (stdout, out) = experiment("mtp-balance");
    let (header, rows) = csv(&out.join("mtp-balance.csv"));
    assert_eq!(header[..4], ["system", "size", "messages", "p99 FCT us"]);
    let cells: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r[0].as_str(), r[1].as_str()))
        .collect();
    let mut want = Vec::new();
    for s in ["ecmp", "spray", "mtp"] {
        for b in ["10K-100K", "100K-1M", ">=1M"] {
            want.push((s, b));
        }
    }
    assert_eq!(cells, want);
    // Every system completed the same seeded messages.
    for b in 0..3 {
        assert_eq!(rows[b][2], rows[3 + b][2]);
        assert_eq!(rows[b][2], rows[6 + b][2]);
        assert!(num(&rows[b][2]) > 0.0);
        assert!(rows.iter().all(|r| num(&r[3]) > 0.0), "{rows:?}");
    }
    // Spraying one connection's packets over paths of unequal delay reorders them: TCP
    // retransmits what was only late; pinning each to one path (ECMP) does not.
    let retx = stdout
        .lines()
        .find(|l| l.starts_with("retransmitted MB"))
        .unwrap_or_else(|| panic!("{stdout}"));
    let mb = |system: &str| {
        let at = retx.find(&format!("{system} ")).unwrap() + system.len() + 1;
        num(retx[at..].split(',').next().unwrap().trim())
    };
    assert!(mb("spray") > mb("ecmp"), "{retx}");
    std::fs::remove_dir_all(out).unwrap();
}

#[test]
fn mtp_isolation_quick_mtp_fair_share_is_equal_where_the_shared_queue_is_not() {
    let (_, out) = experiment("mtp-isolation");
    let (header, rows) = csv(&out.join("mtp-isolation.csv"));
    assert_eq!(header, ["system", "tenant", "gbps"]);
    let gbps = |system: &str, tenant: &str| {
        num(&rows
            .iter()
            .find(|r| r[0] == system && r[1] == tenant)
            .unwrap_or_else(|| panic!("no {system} tenant {tenant}: {rows:?}"))[2])
    };
    assert_eq!(rows.len(), 6);
    let within = |a: f64, b: f64, frac: f64| (a - b).abs() <= frac * a.max(b);
    for system in ["dctcp-queues", "mtp-fair"] {
        let (t1, t2) = (gbps(system, "1"), gbps(system, "2"));
        assert!(t1 > 10.0 && within(t1, t2, 0.25), "{system}: {t1} vs {t2}");
    }
    let (t1, t2) = (gbps("dctcp-shared", "1"), gbps("dctcp-shared", "2"));
    assert!(
        t2 > 1.25 * t1,
        "tenant 2's 8 flows should take more on one shared queue: {t1} vs {t2}"
    );
    // Whatever the policy, the common link is used.
    for system in ["dctcp-shared", "dctcp-queues", "mtp-fair"] {
        let sum = gbps(system, "1") + gbps(system, "2");
        assert!(sum > 70.0 && sum <= 100.0, "{system}: {sum}");
    }
    std::fs::remove_dir_all(out).unwrap();
}

#[test]
fn mtp_workloads_quick_has_a_row_for_every_bucket_of_every_workload_and_load() {
    let (stdout, out) = experiment("mtp-workloads");
    assert!(stdout.contains("mtp p99 slowdown"), "{stdout}");
    let (header, rows) = csv(&out.join("mtp-workloads.csv"));
    assert_eq!(
        header[..6],
        [
            "workload",
            "load %",
            "size",
            "messages",
            "tcp p99 slowdown",
            "mtp p99 slowdown"
        ]
    );
    // The buckets each workload's CDF puts at least 0.5 % of its messages in (sizes capped
    // at 300 KB with --quick).
    let buckets: [(&str, &[&str]); 5] = [
        ("W1", &["<1K", "1K-10K"]),
        ("W2", &["<1K", "1K-10K"]),
        ("W3", &["<1K", "1K-10K", "10K-100K"]),
        ("W4", &["<1K", "1K-10K", "10K-100K", "100K-1M"]),
        ("W5", &["1K-10K", "10K-100K", "100K-1M"]),
    ];
    let mut want = Vec::new();
    for (w, bs) in buckets {
        for load in ["50", "80"] {
            for b in bs {
                want.push(format!("{w} {load} {b}"));
            }
        }
    }
    let got: Vec<String> = rows
        .iter()
        .map(|r| format!("{} {} {}", r[0], r[1], r[2]))
        .collect();
    assert_eq!(got, want);
    for r in &rows {
        assert!(num(&r[3]) > 0.0, "{r:?}");
        // A slowdown is completion over the unloaded time: never far below 1.
        assert!(num(&r[4]) > 0.9 && num(&r[5]) > 0.9, "{r:?}");
    }
    // Load costs: each workload's short messages wait longer at 80 % than at 50 % (TCP).
    for (w, bs) in buckets {
        let at = |load: &str| {
            num(&rows
                .iter()
                .find(|r| r[0] == w && r[1] == load && r[2] == bs[0])
                .unwrap()[4])
        };
        assert!(at("80") > at("50"), "{w}");
    }
    std::fs::remove_dir_all(out).unwrap();
}
