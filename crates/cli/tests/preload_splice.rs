//! Splicing through the shim (root, lab): a tiny C proxy (tests/preload/splice_proxy.c)
//! run with `sluice run --lab` accepts Linux clients from sluice-b, connects each to a Linux
//! echo server in sluice-b through the engine, and splices the two with the shim's
//! extension call `sluice_splice_fds`; the clients check their echoes byte for byte, and
//! every splice's end reports the bytes both ways.
//!
//! `#[ignore]`d like the other lab tests (scripts/test.sh runs them as root).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{assert_clean, scripts, Proc, Setup, ENGINE_IP, LINUX_CLIENT_IP};

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn a_c_proxy_splices_linux_clients_to_a_linux_server_through_the_shim() {
    common::require_lab(&["cc"]);
    let setup = Setup::up("splice-proxy");
    let bin = setup.dir.join("splice_proxy");
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../libsluice/include");
    let st = Command::new("cc")
        .args(["-O2", "-Wall", "-I"])
        .arg(&include)
        .arg("-o")
        .arg(&bin)
        .arg(scripts().join("splice_proxy.c"))
        .arg("-ldl")
        .status()
        .expect("cc runs");
    assert!(st.success(), "splice_proxy.c does not compile");
    let echo = scripts().join("echo_threads.py");
    let mut linux = Proc::spawn(
        "linux echo server",
        Command::new("ip")
            .args(["netns", "exec", sluice_lab::NS_CLIENT, "python3"])
            .arg(&echo)
            .arg("7120"),
    );
    linux.wait_for("listening", Duration::from_secs(30));
    let (clients, bytes) = (4usize, 3usize << 20);
    let mut proxy = setup.run(
        "splice_proxy",
        &[
            bin.to_str().expect("utf-8"),
            "7121",
            LINUX_CLIENT_IP,
            "7120",
            &clients.to_string(),
        ],
        true,
    );
    let client = scripts().join("client.py");
    let out = setup.in_ns(
        sluice_lab::NS_CLIENT,
        &[
            "python3",
            client.to_str().expect("utf-8"),
            ENGINE_IP,
            "7121",
            &clients.to_string(),
            &bytes.to_string(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(&format!("ok {clients} {bytes}")),
        "clients through the splices failed:\n{stdout}\n{}\n--- proxy:\n{}",
        String::from_utf8_lossy(&out.stderr),
        proxy.output()
    );
    let status = proxy.wait_exit(Duration::from_secs(60));
    let report = proxy.output();
    assert!(status.success(), "the proxy failed ({status}):\n{report}");
    let lines: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with("splice "))
        .collect();
    assert_eq!(lines.len(), clients, "{report}");
    for l in lines {
        // Closed (3), every byte both ways.
        assert_eq!(l, format!("splice 3 {bytes} {bytes}"), "{report}");
    }
    assert_clean(&proxy);
    setup.teardown();
}
