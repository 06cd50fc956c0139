//! `sluice switch --lab` end to end (needs root: the test is
//! `#[ignore]`d, and scripts/test.sh runs it as root): the switched lab with
//! two Linux client namespaces, Linux TCP transfers through the real binary, and the
//! switch's counters on SIGTERM.
//!
//! - loss: 1 % random loss on every egress; a transfer c1 → c2 arrives intact (same
//!   SHA-256) and the switch counted losses;
//! - ECN: a 100 Mb/s bottleneck towards c2 with K = 20 KB and ECN on in the Linux senders;
//!   the switch marked packets and the transfer is intact;
//! - uplink: a download from the Linux server in sluice-k (through br0 and the uplink
//!   port) to c1 is intact.
//!
//! Throughput is printed against the configured rate, never asserted (house rule 5).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Proc, SLUICE};
use sluice_lab::{client_ip, client_ns, LabGuard, NS_KERNEL};
use sluice_switch::PortReport;

/// A receiver: listens, accepts one connection, reads to the end, prints "BYTES SHA256".
const PY_RECEIVER: &str = r#"
import hashlib, socket, sys
ip, port = sys.argv[1], int(sys.argv[2])
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((ip, port))
l.listen(1)
print("listening", flush=True)
l.settimeout(60)
c, _ = l.accept()
c.settimeout(60)
h, total = hashlib.sha256(), 0
while True:
    b = c.recv(1 << 16)
    if not b:
        break
    h.update(b)
    total += len(b)
print("received", total, h.hexdigest(), flush=True)
"#;

/// A sender: connects, sends N bytes of a fixed pattern, prints "sent BYTES SHA256".
const PY_SENDER: &str = r#"
import hashlib, socket, sys
ip, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
block = bytes((i * 7 + 3) & 0xff for i in range(1 << 16))
s = socket.create_connection((ip, port), timeout=60)
h, left = hashlib.sha256(), n
while left:
    b = block[: min(left, len(block))]
    s.sendall(b)
    h.update(b)
    left -= len(b)
s.close()
print("sent", n, h.hexdigest(), flush=True)
"#;

fn python_in(ns: &str, name: &str, script: &str, args: &[String]) -> Proc {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, "python3", "-c", script]);
    cmd.args(args);
    Proc::spawn(name, &mut cmd)
}

fn start_switch(args: &[&str]) -> Proc {
    let mut cmd = Command::new(SLUICE);
    cmd.args(["switch", "--lab", "--seed", "7"]).args(args);
    let mut p = Proc::spawn("sluice switch", &mut cmd);
    p.wait_for("sluice switch: ready", Duration::from_secs(30));
    p
}

/// Stops the switch and returns its output.
fn stop_switch(mut p: Proc) -> String {
    let status = p.terminate(Duration::from_secs(20));
    let out = p.output();
    assert!(status.success(), "the switch exited with {status}:\n{out}");
    out
}

/// Counter `key` of port `port` in the switch's report.
fn counter(out: &str, port: &str, key: &str) -> u64 {
    let report = PortReport::last_in(out, port)
        .unwrap_or_else(|| panic!("no report for {port}:\n{out}"))
        .unwrap_or_else(|e| panic!("unreadable report for {port}: {e}\n{out}"));
    report
        .counter(key)
        .unwrap_or_else(|| panic!("no {key} in {report:?}"))
}

/// Sends `bytes` from `from_ns` to a receiver at `to_ip` in `to_ns`; checks both digests
/// agree and returns the seconds it took.
fn transfer(from_ns: &str, to_ns: &str, to_ip: &str, port: u16, bytes: u64) -> f64 {
    let mut rx = python_in(
        to_ns,
        "receiver",
        PY_RECEIVER,
        &[to_ip.to_string(), port.to_string()],
    );
    rx.wait_for("listening", Duration::from_secs(20));
    let started = Instant::now();
    let mut tx = python_in(
        from_ns,
        "sender",
        PY_SENDER,
        &[to_ip.to_string(), port.to_string(), bytes.to_string()],
    );
    let sent = tx.wait_for("sent ", Duration::from_secs(120));
    let got = rx.wait_for("received ", Duration::from_secs(120));
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(
        sent.trim_start_matches("sent "),
        got.trim_start_matches("received "),
        "the data arrived changed"
    );
    assert!(sent.contains(&format!("sent {bytes} ")), "{sent}");
    secs
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn linux_tcp_through_the_switch_under_loss_and_ecn() {
    sluice_lab::require_lab();
    sluice_lab::require_programs(&["python3", "ethtool"]);
    let lab = LabGuard::up_switched(2).expect("switched lab up");
    let (c1, c2) = (client_ns(1), client_ns(2));
    let c2_ip = client_ip(2).to_string();
    let c2_port = "sluice-s:sw-c2";

    // Loss: 1 % on every egress.
    let sw = start_switch(&["--loss", "0.01"]);
    let bytes = 4 << 20;
    let secs = transfer(&c1, &c2, &c2_ip, 5001, bytes);
    let out = stop_switch(sw);
    let lost = counter(&out, c2_port, "lost");
    let forwarded = counter(&out, c2_port, "forwarded");
    eprintln!("loss 1 %: {bytes} B in {secs:.2} s; towards c2 forwarded {forwarded}, lost {lost}");
    assert!(lost > 0, "1 % loss lost nothing:\n{out}");
    assert_eq!(counter(&out, c2_port, "lost_random"), lost);
    assert!(forwarded > bytes / 1500, "{out}");

    // ECN: a 100 Mb/s bottleneck towards c2, K = 20 KB, ECN-capable Linux senders.
    for ns in [&c1, &c2] {
        lab.sysctl(ns, "net.ipv4.tcp_ecn", "1").expect("tcp_ecn");
    }
    let rate = 100_000_000f64;
    let sw = start_switch(&[
        "--port",
        "sluice-s:sw-c2,rate=100m,ecn-k=20k,queue-bytes=512k",
    ]);
    let bytes = 8 << 20;
    let secs = transfer(&c1, &c2, &c2_ip, 5002, bytes);
    let out = stop_switch(sw);
    let marked = counter(&out, c2_port, "ecn_marked");
    let drops = counter(&out, c2_port, "tail_drops");
    let depth = counter(&out, c2_port, "max_queue_bytes");
    eprintln!(
        "ECN K=20 KiB at 100 Mb/s: {bytes} B in {secs:.2} s = {:.1} Mb/s ({:.0} % of the \
         configured rate); marked {marked}, tail drops {drops}, max queue {depth} B",
        bytes as f64 * 8.0 / secs / 1e6,
        bytes as f64 * 8.0 / secs / rate * 100.0
    );
    assert!(marked > 0, "no ECN marks above K:\n{out}");
    assert_eq!(counter(&out, c2_port, "lost"), 0);

    // Uplink: the Linux server in sluice-k (behind br0) to c1, through the uplink port.
    let sw = start_switch(&[]);
    let secs = transfer(NS_KERNEL, &c1, &client_ip(1).to_string(), 5003, bytes);
    let out = stop_switch(sw);
    eprintln!("sluice-k → c1 through the uplink: {bytes} B in {secs:.2} s");
    assert!(counter(&out, "sluice-s:sw-c1", "forwarded") > bytes / 1500);
    assert!(counter(&out, "sluice-s:sw-up", "rx") > bytes / 1500);

    lab.teardown().expect("teardown leaves no namespace");
}
