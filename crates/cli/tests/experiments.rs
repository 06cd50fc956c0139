//! `sluice experiment ... --quick` end to end: the table, the CSV and the PNG.

use std::path::{Path, PathBuf};
use std::process::Command;

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

/// Runs `sluice ARGS --out DIR` (DIR a fresh temporary directory named for `tag`), fails
/// the test with its output unless it succeeds, and returns its stdout and DIR.
fn experiment(tag: &str, args: &[&str]) -> (String, PathBuf) {
    let out = std::env::temp_dir().join(format!("sluice-exp-{tag}-{}", std::process::id()));
    let run = sluice().args(args).arg("--out").arg(&out).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    (stdout, out)
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
    let (stdout, out) = experiment("ooo", &["experiment", "ooo", "--quick"]);
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

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn fairness_quick_serves_every_connection_on_the_engine_and_measures_linux_beside_it() {
    let lab = sluice_lab::LabGuard::require();
    let (stdout, out) = experiment(
        "fair",
        &[
            "experiment",
            "fairness",
            "--quick",
            "--no-lock",
            "--conns",
            "1,8",
        ],
    );
    assert!(stdout.contains("Jain"), "{stdout}");
    let rows = csv_rows(&out.join("fairness.csv"));
    let sides: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r[0].as_str(), r[1].as_str()))
        .collect();
    assert_eq!(
        sides,
        [
            ("1", "engine"),
            ("1", "linux"),
            ("8", "engine"),
            ("8", "linux")
        ]
    );
    for r in &rows {
        let total: f64 = r[2].parse().unwrap();
        assert!(total > 0.0, "{r:?}");
    }
    // The engine's scheduler serves every connection: none is starved.
    let engine8 = &rows[2];
    let p1: f64 = engine8[4].parse().unwrap();
    assert!(
        p1 > 0.0,
        "a connection got nothing on the engine: {engine8:?}"
    );
    assert!(out.join("fairness.png").exists());
    std::fs::remove_dir_all(out).unwrap();
    drop(lab);
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn loss_quick_measures_every_pairing_and_the_switch_really_drops() {
    sluice_lab::require_lab();
    let lab = sluice_lab::LabGuard::up_switched(1).expect("switched lab up");
    let (stdout, out) = experiment("loss", &["experiment", "loss", "--quick", "--no-lock"]);
    eprintln!("{stdout}");
    let text = std::fs::read_to_string(out.join("loss.csv")).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let pairings = [
        "engine->linux",
        "linux->engine",
        "engine->engine",
        "linux->linux",
        "gbn->gbn",
    ];
    let mut expected = vec!["loss %".to_string()];
    for p in pairings {
        expected.push(format!("{p} Mbit/s"));
        expected.push(format!("{p} %"));
    }
    expected.extend(["engine/gbn", "frames lost", "lost %", "other drops"].map(String::from));
    assert_eq!(header, expected);
    let rows = csv_rows(&out.join("loss.csv"));
    let losses: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(losses, ["0", "1", "5"]);
    let mbps = |row: &[String], p: usize| -> f64 { row[1 + 2 * p].parse().unwrap() };
    for r in &rows {
        for (p, name) in pairings.iter().enumerate() {
            assert!(mbps(r, p) > 0.0, "{name} at {} %: {r:?}", r[0]);
        }
    }
    // Without loss, every pairing is its own reference.
    for p in 0..pairings.len() {
        assert_eq!(rows[0][2 + 2 * p], "100", "{:?}", rows[0]);
    }
    // The switch dropped nothing at 0 % and frames at 5 %, and the engine's loss-based
    // senders lost goodput. Linux senders are not held to it: this machine's kernel runs
    // BBR, which does not read random loss as congestion (a linux->engine run at 5 % was
    // measured as fast as at 0 %).
    assert_eq!(rows[0][12], "0", "{:?}", rows[0]);
    let lost: u64 = rows[2][12].parse().unwrap();
    assert!(lost > 0, "nothing dropped at 5 %: {:?}", rows[2]);
    for (p, name) in pairings.iter().enumerate() {
        if name.starts_with("linux->") {
            continue;
        }
        assert!(
            mbps(&rows[2], p) < mbps(&rows[0], p),
            "{name} no slower at 5 % loss: {rows:?}"
        );
    }
    let png = std::fs::read(out.join("loss.png")).unwrap();
    assert_eq!(&png[..4], b"\x89PNG");
    std::fs::remove_dir_all(out).unwrap();
    lab.teardown().expect("teardown leaves no namespace");
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn incast_quick_measures_every_cell_and_reads_the_switch_counters() {
    sluice_lab::require_lab();
    // The experiment builds (and tears down) the switched lab itself; the guard holds the
    // lock around it and tears down whatever a failure left behind.
    let lab = sluice_lab::LabGuard::up_switched(2).expect("switched lab up");
    let (stdout, out) = experiment(
        "incast",
        &[
            "experiment",
            "incast",
            "--quick",
            "--no-lock",
            "--senders",
            "1,16",
        ],
    );
    assert!(stdout.contains("rpc p99 us"), "{stdout}");
    let rows = csv_rows(&out.join("incast.csv"));
    let cells: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r[0].as_str(), r[1].as_str()))
        .collect();
    assert_eq!(
        cells,
        [
            ("0", "unloaded"),
            ("1", "dctcp"),
            ("1", "newreno"),
            ("16", "dctcp"),
            ("16", "newreno")
        ]
    );
    let num = |r: &Vec<String>, i: usize| -> f64 {
        r[i].parse()
            .unwrap_or_else(|_| panic!("column {i} of {r:?}"))
    };
    for r in &rows {
        // The RPC flow answered requests and has a p99 in every cell.
        assert!(num(r, 5) > 0.0 && num(r, 7) > 0.0, "{r:?}");
        if r[1] != "unloaded" {
            // Every sender moved data and Jain's index is a proper index.
            assert!(num(r, 2) > 0.0, "{r:?}");
            let jain = num(r, 3);
            assert!(jain > 0.0 && jain <= 1.0 + 1e-9, "{r:?}");
            // The switch's counters were parsed: the bottleneck queue held something.
            assert!(num(r, 10) > 0.0, "{r:?}");
        }
    }
    // DCTCP's packets are ECN-capable: above K the switch marks them at 16 senders;
    // NewReno's are not, so it never marks them.
    assert!(
        num(&rows[3], 9) > 0.0,
        "no ECN marks with DCTCP: {:?}",
        rows[3]
    );
    assert_eq!(num(&rows[4], 9), 0.0, "NewReno was marked: {:?}", rows[4]);
    let png = std::fs::read(out.join("incast.png")).unwrap();
    assert_eq!(&png[..4], b"\x89PNG");
    std::fs::remove_dir_all(out).unwrap();
    drop(lab);
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn synflood_quick_serves_legitimate_connections_during_the_flood() {
    let lab = sluice_lab::LabGuard::require();
    // `sluice flood` on its own: it sends, and says how fast.
    let run = sluice()
        .args(["flood", "--target", "10.77.0.1:7001", "--rate", "20000"])
        .args(["--seconds", "0.5"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success() && stdout.contains(" SYN/s"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let cycles = 40;
    let (stdout, out) = experiment(
        "synflood",
        &[
            "experiment",
            "synflood",
            "--quick",
            "--no-lock",
            "--rate",
            "50000",
            "--cycles",
            &cycles.to_string(),
            "--seconds",
            "4",
        ],
    );
    assert!(stdout.contains("served in flood"), "{stdout}");
    let rows = csv_rows(&out.join("synflood.csv"));
    let servers: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(servers, ["engine", "engine-one-queue", "linux"], "{stdout}");
    // The engine before its SYN lane is measured, not held to the bound.
    for row in rows.iter().filter(|r| r[0] != "engine-one-queue") {
        let rate: f64 = row[1].parse().unwrap();
        assert!(rate > 1000.0, "the flood ran: {stdout}");
        // A liveness check, not a timing one: every cycle completes, and most of them while
        // the flood runs (a SYN the flood crowded out costs its client a 1 s retransmission).
        assert_eq!(row[3], "0", "no cycle failed: {stdout}");
        let (served, tried) = row[2].split_once('/').unwrap();
        let served: usize = served.parse().unwrap();
        assert_eq!(tried, cycles.to_string(), "{stdout}");
        assert!(
            served * 2 >= cycles,
            "most cycles served during the flood: {stdout}"
        );
    }
    std::fs::remove_dir_all(out).unwrap();
    lab.teardown().unwrap();
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn short_conns_quick_measures_nginx_on_linux_and_the_engine_adding_setup_and_teardown_offload() {
    let lab = sluice_lab::LabGuard::require();
    let (stdout, out) = experiment(
        "short-conns",
        &["experiment", "short-conns", "--quick", "--no-lock"],
    );
    let rows = csv_rows(&out.join("short-conns.csv"));
    let servers: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(
        servers,
        [
            "linux",
            "engine",
            "engine + setup offload",
            "engine + setup + teardown offload"
        ],
        "{stdout}"
    );
    for row in &rows {
        let rate: f64 = row[1]
            .parse()
            .unwrap_or_else(|_| panic!("{} measured: {stdout}", row[0]));
        assert!(rate > 0.0, "{stdout}");
        assert_eq!(row[7], "0", "wrk saw no errors: {stdout}");
    }
    // Numbers are reported, not asserted; what must hold is that each offload happened
    // (and only where it was asked for).
    let pair = |cell: &str| -> (u64, u64) {
        let (a, b) = cell.split_once(" / ").unwrap();
        (a.parse().unwrap(), b.parse().unwrap())
    };
    assert_eq!(pair(&rows[1][8]), (0, 0), "no cookies by default: {stdout}");
    assert_eq!(rows[1][9], "0 / 0", "{stdout}");
    for row in &rows[2..] {
        let (sent, accepted) = pair(&row[8]);
        assert!(
            sent > 100 && accepted > 100,
            "every SYN gets a cookie: {stdout}"
        );
    }
    assert_eq!(rows[2][9], "0 / 0", "{stdout}");
    let (offloaded, _) = pair(&rows[3][9]);
    assert!(offloaded > 100, "{stdout}");
    assert!(out.join("short-conns.png").exists());
    std::fs::remove_dir_all(out).unwrap();
    lab.teardown().unwrap();
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn proxy_quick_measures_sluice_proxy_haproxy_nginx_and_sockmap_and_the_splice_carries_the_bytes() {
    // clang builds the sockmap proxy (and libbpf-dev, which its build.sh checks for).
    sluice_lab::require_programs(&["clang", "haproxy", "nginx"]);
    let lab = sluice_lab::LabGuard::require();
    let (stdout, out) = experiment("proxy", &["experiment", "proxy", "--quick", "--no-lock"]);
    let rows = csv_rows(&out.join("proxy.csv"));
    let proxies: Vec<&str> = rows.iter().map(|r| r[1].as_str()).collect();
    assert_eq!(
        &proxies[..6],
        [
            "sluice proxy (splice)",
            "sluice proxy (splice after 64 KiB)",
            "sluice proxy --no-splice",
            "haproxy (splice-auto)",
            "nginx stream",
            "linux sockmap (sk_skb redirect)"
        ],
        "{stdout}"
    );
    // Numbers are reported, not asserted: every proxy served, and the splicing one had its
    // bytes relayed by the core, not copied by itself.
    for row in &rows {
        let rps: f64 = row[2]
            .parse()
            .unwrap_or_else(|_| panic!("{} measured: {stdout}", row[1]));
        assert!(rps > 0.0, "{stdout}");
    }
    let note = |prefix: &str| -> &str {
        stdout
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} note: {stdout}"))
    };
    let value = |note: &str, key: &str| -> u64 {
        note.split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
            .unwrap_or_else(|| panic!("no {key}= in {note:?}"))
    };
    let splice = note("sluice proxy (splice): accepted=");
    assert!(value(splice, "spliced") > 0, "{stdout}");
    assert!(value(splice, "splice_frames_relayed") > 1000, "{stdout}");
    assert!(
        value(splice, "relayed_bytes") < 1 << 20,
        "only headers copied: {stdout}"
    );
    // The sockmap proxy carried the 10 MiB file byte-exact (the experiment compares its
    // SHA-256 with the served file's and fails the row otherwise), and the kernel's
    // redirect moved the bytes: the proxy itself copied at most the early requests.
    let intact = note("linux sockmap (sk_skb redirect): curl /file.bin through it: ");
    assert!(intact.contains(": 10485760 bytes, SHA-256 "), "{stdout}");
    if stdout
        .lines()
        .any(|l| l.starts_with("linux sockmap (sk_skb redirect): printed no counters"))
    {
        // A known flake (the proxy's stdout empty after SIGTERM): its bytes were checked
        // above; its counters cannot be.
        println!("note: the sockmap proxy printed no counters; its counter checks are skipped");
        return;
    }
    let sockmap = note("linux sockmap (sk_skb redirect): accepted=");
    assert!(value(sockmap, "paired") > 0, "{stdout}");
    assert_eq!(value(sockmap, "insert_failed"), 0, "{stdout}");
    assert!(
        value(sockmap, "redirected_bytes") > 10 << 20,
        "the verdict redirected the transfers: {stdout}"
    );
    assert!(
        value(sockmap, "copied_bytes") < 1 << 20,
        "only early bytes copied: {stdout}"
    );
    std::fs::remove_dir_all(out).unwrap();
    lab.teardown().unwrap();
}
