//! MTP between two engines through two `sluice switch`es with two paths (root, the MTP
//! lab; issue 17 "Lab"): engine A in sluice-a, engine E in sluice-e, switches S1 and S2
//! joined by two impaired links (1 % loss, 1 % reordering, 1 % duplication on every uplink
//! egress), each routing the far engine over both with the message balancer.
//!
//! - `sluice mtp rpc` on A against `sluice mtp recv --echo` on E, messages of 1 B .. 1 MB:
//!   every response equals its request (the CLI checks), and E counted as many;
//! - `sluice mtp send` on A to `sluice mtp recv` on E, 1 B .. 1 MB: the digests (count,
//!   bytes, sum of per-message hashes) printed by both ends are equal;
//! - both uplinks of S1 carried data (per-port counters at stop), and the impairments hit.
//!
//! `#[ignore]`d (scripts/test.sh runs it as root); it prints a skip, with the reason, when
//! it cannot run here (not root, no `ip` or `ethtool`).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{counter, Proc, ScratchDir, SLUICE};
use sluice_lab::{
    mtp_switch_args, LabGuard, MtpSwitch, ENGINE2_IFACE, NS_ENGINE2, UPLINK_IMPAIRMENTS,
};
use sluice_switch::PortReport;

/// Engine E's address (sluice_lab::ENGINE2_IP).
const ENGINE2: &str = "10.77.0.4";
/// Round trips and one-way messages of mixed sizes.
const RPCS: u64 = 60;
const MESSAGES: u64 = 300;
/// The largest message: 1 MB.
const MAX_SIZE: &str = "1048576";

fn skip_reason() -> Option<String> {
    if let Some(why) = sluice_lab::unavailable_reason() {
        return Some(why);
    }
    (!sluice_lab::command::is_installed("ethtool")).then(|| "ethtool is not installed".into())
}

fn start_switch(s: MtpSwitch) -> Proc {
    let mut cmd = Command::new(SLUICE);
    cmd.args(["switch", "--seed", "7"])
        .args(mtp_switch_args(s, UPLINK_IMPAIRMENTS));
    let mut p = Proc::spawn(&format!("sluice switch {s:?}"), &mut cmd);
    p.wait_for("sluice switch: ready", Duration::from_secs(30));
    p
}

fn start_engine(name: &str, mut cmd: Command, socket: &Path) -> Proc {
    cmd.arg("--socket")
        .arg(socket)
        .args(["--idle-us", "20", "--app-idle-us", "200"]);
    let mut p = Proc::spawn(name, &mut cmd);
    p.wait_for("ready", Duration::from_secs(30));
    p
}

/// Stops `p` with SIGTERM (it must exit cleanly) and returns its output.
fn stop(mut p: Proc) -> String {
    let status = p.terminate(Duration::from_secs(20));
    let out = p.output();
    assert!(status.success(), "{} exited with {status}:\n{out}", p.name);
    out
}

/// `sluice mtp ARGS` attached to the engine at `socket`, in namespace `ns` if given.
fn mtp(name: &str, ns: Option<&str>, socket: &Path, args: &[&str]) -> Proc {
    let mut cmd = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, SLUICE]);
            c
        }
        None => Command::new(SLUICE),
    };
    cmd.arg("mtp").args(args).arg("--socket").arg(socket);
    Proc::spawn(name, &mut cmd)
}

/// Waits for `p` to exit successfully within `secs` and returns its output.
fn finish(mut p: Proc, secs: u64, context: &[&Proc]) -> String {
    let status = p.wait_exit(Duration::from_secs(secs));
    let out = p.output();
    let others: String = context
        .iter()
        .map(|c| format!("\n--- {}:\n{}", c.name, c.output()))
        .collect();
    assert!(
        status.success(),
        "{} exited with {status}:\n{out}{others}",
        p.name
    );
    out
}

/// The `digest ...` words after `what` ("sent", "received") in `out`.
fn digest(out: &str, what: &str) -> String {
    let key = format!("sluice mtp: {what} digest ");
    out.lines()
        .find_map(|l| l.find(&key).map(|i| l[i + key.len()..].trim().to_owned()))
        .unwrap_or_else(|| panic!("no {what} digest in:\n{out}"))
}

fn port_counter(out: &str, port: &str, key: &str) -> u64 {
    PortReport::last_in(out, port)
        .unwrap_or_else(|| panic!("no report for {port}:\n{out}"))
        .unwrap_or_else(|e| panic!("unreadable report for {port}: {e}\n{out}"))
        .counter(key)
        .unwrap_or_else(|| panic!("no {key} for {port}"))
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn mtp_messages_cross_two_impaired_paths_byte_exact() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let lab = LabGuard::up_mtp().expect("MTP lab up");
    let dir = std::env::temp_dir().join(format!("sluice-mtp-lab-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let dir = ScratchDir::new(dir);
    let (sock_a, sock_e) = (dir.join("engine-a.sock"), dir.join("engine-e.sock"));

    let s1 = start_switch(MtpSwitch::S1);
    let s2 = start_switch(MtpSwitch::S2);
    let mut a = Command::new(SLUICE);
    a.args(["engine", "--lab", "--backend", "af_packet"]);
    let engine_a = start_engine("engine A", a, &sock_a);
    let mut e = Command::new("ip");
    e.args(["netns", "exec", NS_ENGINE2, SLUICE, "engine", "--iface"])
        .arg(ENGINE2_IFACE)
        .args(["--ip", &format!("{ENGINE2}/24")]);
    let engine_e = start_engine("engine E", e, &sock_e);

    // RPCs of mixed sizes against an echo server.
    let rpcs = RPCS.to_string();
    let mut echo = mtp(
        "mtp recv --echo",
        Some(NS_ENGINE2),
        &sock_e,
        &["recv", "--port", "7000", "--echo", "--count", &rpcs],
    );
    echo.wait_for("receiving on port", Duration::from_secs(20));
    let rpc = mtp(
        "mtp rpc",
        None,
        &sock_a,
        &[
            "rpc",
            "--to",
            "10.77.0.4:7000",
            "--size",
            "1",
            "--max-size",
            MAX_SIZE,
            "--count",
            &rpcs,
        ],
    );
    let ctx = [&echo, &engine_a, &engine_e];
    let rpc_out = finish(rpc, 300, &ctx);
    let echo_out = finish(echo, 30, &[&engine_a, &engine_e]);
    eprintln!("{rpc_out}");
    let echoed = digest(&rpc_out, "echoed");
    assert!(
        echoed.starts_with(&format!("messages={RPCS} ")),
        "{rpc_out}"
    );
    let served = digest(&echo_out, "received");
    assert!(
        served.starts_with(&format!("messages={RPCS} ")),
        "{echo_out}"
    );

    // One-way messages of mixed sizes: both ends' digests agree.
    let n = MESSAGES.to_string();
    let mut rx = mtp(
        "mtp recv",
        Some(NS_ENGINE2),
        &sock_e,
        &["recv", "--port", "7001", "--count", &n],
    );
    rx.wait_for("receiving on port", Duration::from_secs(20));
    let tx = mtp(
        "mtp send",
        None,
        &sock_a,
        &[
            "send",
            "--to",
            "10.77.0.4:7001",
            "--size",
            "1",
            "--max-size",
            MAX_SIZE,
            "--count",
            &n,
        ],
    );
    let tx_out = finish(tx, 300, &[&rx, &engine_a, &engine_e]);
    let rx_out = finish(rx, 60, &[&engine_a, &engine_e]);
    let sent = digest(&tx_out, "sent");
    eprintln!("{}", tx_out.lines().last().unwrap_or_default());
    assert!(
        sent.starts_with(&format!("messages={MESSAGES} ")),
        "{tx_out}"
    );
    assert_eq!(
        sent,
        digest(&rx_out, "received"),
        "the messages arrived changed"
    );

    let out_a = stop(engine_a);
    let out_e = stop(engine_e);
    let out_s1 = stop(s1);
    let out_s2 = stop(s2);
    for (name, out) in [("A", &out_a), ("E", &out_e)] {
        let keys = [
            "mtp_data_sent",
            "mtp_retx_timeout",
            "mtp_retx_nack",
            "mtp_retx_sack_gap",
            "mtp_retx_rack",
            "mtp_timeouts",
        ];
        let line: Vec<String> = keys
            .iter()
            .map(|k| format!("{k}={}", counter(out, k)))
            .collect();
        eprintln!("engine {name}: {}", line.join(" "));
    }
    assert_eq!(counter(&out_e, "mtp_messages_delivered"), RPCS + MESSAGES);

    // Both of S1's uplinks carried A's data, and of S2's the responses; the impairments hit.
    for (s, out) in [(MtpSwitch::S1, &out_s1), (MtpSwitch::S2, &out_s2)] {
        let per_link: Vec<u64> = (1..=2)
            .map(|l| port_counter(out, &s.port_name(l), "forwarded_bytes"))
            .collect();
        let total: u64 = per_link.iter().sum();
        eprintln!("{s:?}: uplink bytes {per_link:?}");
        for (l, bytes) in per_link.iter().enumerate() {
            assert!(
                *bytes * 10 > total,
                "{s:?} uplink {} carried {bytes} of {total} bytes:\n{out}",
                l + 1
            );
        }
        let hit = |key| {
            (1..=2)
                .map(|l| port_counter(out, &s.port_name(l), key))
                .sum::<u64>()
        };
        assert!(
            hit("lost") > 0 && hit("duplicated") > 0 && hit("reordered") > 0,
            "{out}"
        );
        assert!(out.contains("pins: "), "no MTP device counters:\n{out}");
    }
    drop(dir);
    lab.teardown().expect("lab down and no namespace left");
}
