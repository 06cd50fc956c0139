//! `sluice source|sink|echo --backend sim` end to end (no root): the engine and its simulated
//! peers print matching SHA-256 digests and byte counts, runs are exact, and bad flags get a
//! clear error and exit status 1, never a panic.

use std::process::{Command, Output};

use sha2::{Digest, Sha256};
use sluice_apps::{hex, pattern_fill};

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("sluice runs")
}

fn ok_stdout(args: &[&str]) -> String {
    let out = sluice(args);
    assert!(
        out.status.success(),
        "sluice {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// (bytes, digest) of every line ending in "<N> bytes sha256 <HEX>" whose start matches `prefix`.
fn digests(stdout: &str, prefix: &str) -> Vec<(u64, String)> {
    stdout
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let at = words.iter().position(|w| *w == "sha256")?;
            let bytes = words.get(at.checked_sub(2)?)?.parse().ok()?;
            Some((bytes, words.get(at + 1)?.to_string()))
        })
        .collect()
}

fn expected(bytes: u64, seed: u64) -> String {
    let mut data = vec![0u8; bytes as usize];
    pattern_fill(seed, 0, &mut data);
    hex(&Sha256::digest(&data))
}

const LINK: [&str; 6] = [
    "--sim-loss",
    "0.01",
    "--sim-reorder",
    "0.01",
    "--sim-seed",
    "3",
];

#[test]
fn source_and_sink_over_the_simulated_wire_print_matching_digests() {
    let bytes = 3_000_000u64;
    let n = bytes.to_string();
    let mut args = vec![
        "source",
        "--backend",
        "sim",
        "--connect",
        "10.77.0.2:6001",
        "--bytes",
        &n,
    ];
    args.extend(LINK);
    let source = ok_stdout(&args);
    // The engine's source line, and the simulated sink's: the only two digests printed.
    let sent = digests(&source, &format!("{bytes} bytes"));
    let received = digests(&source, "sim 10.77.0.2: received");
    assert_eq!(sent, vec![(bytes, expected(bytes, 1))], "{source}");
    assert_eq!(received, sent, "{source}");
    assert_eq!(digests(&source, "").len(), 2, "{source}");
    assert!(
        source.contains("lost"),
        "link counters are printed: {source}"
    );

    let mut args = vec![
        "sink",
        "--backend",
        "sim",
        "--port",
        "5001",
        "--sim-bytes",
        &n,
    ];
    args.extend(LINK);
    let sink = ok_stdout(&args);
    let got = digests(&sink, &format!("{bytes} bytes"));
    let sent = digests(&sink, "sim 10.77.0.2: sent");
    assert_eq!(got, vec![(bytes, expected(bytes, 1))], "{sink}");
    assert_eq!(sent, got, "{sink}");
    // The same stream (seed 1) both ways: the two commands agree with each other too.
    assert_eq!(got, received);

    // Exact: the same flags print the same output.
    assert_eq!(ok_stdout(&args), sink);
}

#[test]
fn sink_with_several_simulated_sources_reports_each_stream() {
    let out = ok_stdout(&[
        "sink",
        "--backend",
        "sim",
        "--port",
        "5001",
        "--count",
        "3",
        "--sim-bytes",
        "200000",
        "--sim-gbps",
        "1",
        "--sim-delay-us",
        "50",
    ]);
    let mut got = digests(&out, "200000 bytes");
    got.sort();
    let mut want: Vec<_> = (1..=3)
        .map(|seed| (200_000, expected(200_000, seed)))
        .collect();
    want.sort();
    assert_eq!(got, want, "{out}");
    for ip in ["10.77.0.2", "10.77.0.3", "10.77.0.4"] {
        assert_eq!(digests(&out, &format!("sim {ip}: sent")).len(), 1, "{out}");
    }
}

#[test]
fn echo_over_the_simulated_wire_reports_ops_and_latency() {
    let out = ok_stdout(&[
        "echo",
        "--backend",
        "sim",
        "--port",
        "7",
        "--sim-clients",
        "3",
        "--sim-rpcs",
        "500",
        "--sim-delay-us",
        "25",
    ]);
    assert!(
        out.contains("3 clients x 500 RPCs of 64 B echoed and verified: 1500 ops"),
        "{out}"
    );
    // p50 is at least one round trip of 2 x 25 us.
    let p50: f64 = out
        .split("p50 ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no p50 in {out}"));
    assert!((50.0..1000.0).contains(&p50), "p50 {p50} us: {out}");
}

#[test]
fn bad_flags_are_refused_clearly() {
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "sink",
                "--backend",
                "sim",
                "--port",
                "1",
                "--sim-loss",
                "1.5",
            ],
            "--sim-loss",
        ),
        (
            &[
                "sink",
                "--backend",
                "sim",
                "--port",
                "1",
                "--sim-gbps",
                "NaN",
            ],
            "--sim-gbps",
        ),
        (
            &["sink", "--backend", "sim", "--port", "1", "--lab"],
            "--lab",
        ),
        (
            &["echo", "--backend", "sim", "--port", "7", "--iface", "eth0"],
            "--iface",
        ),
        (
            &["echo", "--port", "7", "--lab", "--sim-delay-us", "5"],
            "only to --backend sim",
        ),
        (
            &[
                "source",
                "--backend",
                "sim",
                "--connect",
                "10.77.0.1:9",
                "--bytes",
                "1",
            ],
            "engine's own address",
        ),
        (&["sink", "--backend", "sim", "--port", "0"], "port 0"),
        (
            &[
                "echo",
                "--backend",
                "sim",
                "--port",
                "7",
                "--sim-clients",
                "0",
            ],
            "--sim-clients",
        ),
        (
            &[
                "sink",
                "--backend",
                "sim",
                "--port",
                "1",
                "--sim-bytes",
                "100000000",
                "--sim-budget-s",
                "0.005",
            ],
            "virtual time",
        ),
    ];
    for (args, needle) in cases {
        let out = sluice(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
