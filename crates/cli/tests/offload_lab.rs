//! `sluice offload-demo` between two lab hosts (root, lab; issue 21, docs/offload.md): the
//! server in sluice-e on sl-e (10.77.0.4) runs an RDMA stack with the offload engine and
//! the batched READ and list traversal handlers; the client in sluice-a on sl-a (10.77.0.1)
//! measures both against one READ per hop / per item over the wire. Its table must hold
//! every row (each row is checked for the right bytes before it is printed), and the server
//! must count the offload requests it answered.
//!
//! `#[ignore]`d (scripts/test.sh runs it as root); when asked for, it fails if the lab is
//! missing.

use std::process::{Command, Stdio};
use std::time::Duration;

use sluice_lab::LabGuard;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn offload_demo_answers_both_examples_between_two_lab_hosts() {
    sluice_lab::require_lab();
    let _lab = LabGuard::require();
    let server = Command::new("ip")
        .args([
            "netns",
            "exec",
            sluice_lab::NS_ENGINE2,
            SLUICE,
            "offload-demo",
            "server",
        ])
        .args(["--iface", sluice_lab::ENGINE2_IFACE, "--ip", "10.77.0.4"])
        .args(["--peer-ip", "10.77.0.1", "--seconds", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ip netns exec");
    std::thread::sleep(Duration::from_millis(500));
    let client = Command::new("ip")
        .args([
            "netns",
            "exec",
            sluice_lab::NS_ENGINE,
            SLUICE,
            "offload-demo",
            "client",
        ])
        .args(["--iface", sluice_lab::ENGINE_IFACE, "--ip", "10.77.0.1"])
        .args(["--peer-ip", "10.77.0.4", "--quick"])
        .output()
        .expect("ip netns exec");
    // The server serves until its time is up; SIGTERM ends it now.
    let _ = Command::new("kill").arg(server.id().to_string()).status();
    let server = server.wait_with_output().expect("server output");
    let out = String::from_utf8_lossy(&client.stdout);
    let err = String::from_utf8_lossy(&client.stderr);
    assert!(
        client.status.success(),
        "client failed: {}\n{out}\n{err}\nserver:\n{}",
        client.status,
        String::from_utf8_lossy(&server.stderr)
    );
    // The --quick rows (batches up to the 1024-byte path MTU: 8 items of 64 bytes).
    for row in [
        ["list-traversal", "1"],
        ["list-traversal", "8"],
        ["list-traversal", "64"],
        ["batched-read", "8"],
    ] {
        assert!(
            out.lines().any(|l| {
                let mut f = l.split_whitespace();
                f.next() == Some(row[0]) && f.next() == Some(row[1])
            }),
            "no {row:?} row in:\n{out}"
        );
    }
}
