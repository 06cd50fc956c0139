//! Applications sharing one `sluice engine --lab` (root, lab; issue 4), with Linux peers in
//! sluice-b:
//!
//! - two programs attached at once through `sluice run`, each with its own traffic; one is
//!   killed (SIGKILL) mid-transfer: its Linux client sees the reset, the other program's
//!   transfer completes byte-exact, the engine counts the detach and the one reset, and a
//!   new program binds the dead one's port again;
//! - the C zero-copy example (crates/libsluice/examples/c/zero_copy_echo.c) compiled against
//!   include/sluice.h and libsluice.so, attached through `$SLUICE_SOCKET`: as a server for
//!   Linux clients (SHA-256 of every echo), and as a client of a Linux echo server.
//!
//! The tests are `#[ignore]`d (scripts/test.sh runs them as root); when asked for, they fail
//! if the lab is unavailable (not root, no ip(8)) or python3 (or, for the C program, cc) is
//! missing. Each test holds the lab for its run and
//! checks at the end that no namespace is left.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{assert_clean, counter, scripts, Proc, Setup, ENGINE_IP, LINUX_CLIENT_IP};
use sluice_lab::NS_CLIENT;

/// MiB app B's client sends, one per `B_PAUSE_MS`: paced so that after the sink's
/// `progress` line (at 8 MiB) at least 40 × 25 ms = 1 s of B's transfer is still to come
/// when A is killed.
const B_MIB: u32 = 48;
const B_PAUSE_MS: u32 = 25;
/// How long A's client may take to see its connection fail once A is dead: a bound
/// against a hang (the reset normally arrives within milliseconds), not a measurement.
const RESET_WITHIN: Duration = Duration::from_secs(10);

fn script(name: &str) -> String {
    scripts().join(name).to_str().expect("utf-8").to_string()
}

/// `stream.py ENGINE_IP PORT complete MIB 0` in sluice-b, to completion: "ok N SHA256".
fn stream_complete(setup: &Setup, port: u16, mib: u32) -> String {
    let out = setup.in_ns(
        NS_CLIENT,
        &[
            "python3",
            &script("stream.py"),
            ENGINE_IP,
            &port.to_string(),
            "complete",
            &mib.to_string(),
            "0",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ok = stdout.lines().find(|l| l.starts_with("ok "));
    match ok {
        Some(ok) if out.status.success() => ok.to_string(),
        _ => panic!(
            "stream.py to port {port} failed ({}):\n{stdout}\n{}\n--- engine:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            setup.engine.output()
        ),
    }
}

/// The "N SHA256" of a client's `ok N SHA256` line, checked against what the sink printed.
fn assert_sink_received(sink: &Proc, port: u16, client_ok: &str, mib: u32) {
    let sent = client_ok.trim_start_matches("ok ").trim();
    let bytes: u64 = sent
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("ok N SHA256");
    assert_eq!(bytes, u64::from(mib) << 20, "{client_ok}");
    let want = format!("received {port} {sent}");
    assert!(
        sink.output().lines().any(|l| l == want),
        "{}: expected {want:?}; it printed:\n{}",
        sink.name,
        sink.output()
    );
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn two_apps_on_one_engine_one_killed_mid_transfer_while_the_other_completes() {
    common::require_lab(&[]);
    let mut setup = Setup::up("two-apps");
    let sink = script("sink.py");
    let stream = script("stream.py");
    let mut app_a = setup.run("app A (sink.py 7201)", &["python3", &sink, "7201"], true);
    let mut app_b = setup.run("app B (sink.py 7202)", &["python3", &sink, "7202"], true);

    // A's client streams until its connection fails; B's sends 48 MiB, paced.
    let mut client_a = setup.spawn_in_ns(
        NS_CLIENT,
        "client A",
        &["python3", &stream, ENGINE_IP, "7201", "until-error"],
    );
    app_a.wait_for("progress", Duration::from_secs(30));
    let mut client_b = setup.spawn_in_ns(
        NS_CLIENT,
        "client B",
        &[
            "python3",
            &stream,
            ENGINE_IP,
            "7202",
            "complete",
            &B_MIB.to_string(),
            &B_PAUSE_MS.to_string(),
        ],
    );
    app_b.wait_for("progress", Duration::from_secs(30));

    // Both transfers are under way: kill A.
    assert!(
        client_a.child.try_wait().expect("wait").is_none(),
        "client A is still sending:\n{}",
        client_a.output()
    );
    assert!(
        !app_b.output().contains("received"),
        "B's transfer is still under way when A is killed:\n{}",
        app_b.output()
    );
    let a_pid = app_a.child.id();
    app_a.child.kill().expect("SIGKILL app A");
    let killed = Instant::now();
    let _ = app_a.child.wait();

    // A's client sees its connection reset, not a hang.
    client_a.wait_exit(RESET_WITHIN);
    let failed_after = killed.elapsed();
    let said = client_a.output();
    assert!(
        said.contains("reset after") || said.contains("error "),
        "client A's connection should fail with a reset once A is dead:\n{said}\n--- engine:\n{}",
        setup.engine.output()
    );
    // `sluice run` execs the program: the engine knew A by its pid.
    setup
        .engine
        .wait_for(&format!("pid {a_pid}) detached"), Duration::from_secs(10));

    // B's transfer completes, byte-exact.
    let status = client_b.wait_exit(Duration::from_secs(60));
    let b_ok = client_b
        .output()
        .lines()
        .find(|l| l.starts_with("ok "))
        .map(str::to_string);
    assert!(
        status.success() && b_ok.is_some(),
        "client B ({status}):\n{}\n--- app B:\n{}\n--- engine:\n{}",
        client_b.output(),
        app_b.output(),
        setup.engine.output()
    );
    assert_sink_received(&app_b, 7202, &b_ok.unwrap_or_default(), B_MIB);

    // A's port is free again: a new program binds it and serves a transfer.
    let mut app_a2 = setup.run("app A' (sink.py 7201)", &["python3", &sink, "7201"], true);
    let a2_ok = stream_complete(&setup, 7201, 4);
    assert_sink_received(&app_a2, 7201, &a2_ok, 4);

    // The engine's counters: three programs attached; A detached when it died, B and A'
    // when the engine stopped; one reset for A's connection only; one accept each.
    for p in [&mut app_b, &mut app_a2] {
        assert!(
            p.child.try_wait().expect("wait").is_none(),
            "{} is still running:\n{}",
            p.name,
            p.output()
        );
        assert_clean(p);
    }
    let log = setup.stop_engine();
    for (name, want) in [
        ("apps_attached", 3),
        ("apps_detached", 3),
        ("resets_on_detach", 1),
        ("accepts", 3),
    ] {
        assert_eq!(
            counter(&log, name),
            want,
            "{name}; the engine's output:\n{log}"
        );
    }
    eprintln!(
        "app A killed mid-transfer: its client failed {failed_after:?} later ({}); \
         app B: {}",
        said.lines().last().unwrap_or(""),
        app_b
            .output()
            .lines()
            .find(|l| l.starts_with("received"))
            .unwrap_or("")
    );
    drop((app_a, app_b, app_a2));
    setup.teardown();
}

/// The directory of the libsluice.so this test links the C program against.
///
/// libsluice is a dev-dependency of this crate only so that cargo builds its lib (the
/// cdylib with it) before this test, with the same sources and profile, into deps/, the
/// directory holding this test's executable. So `cargo test [-p sluice-cli] [--release]` on a
/// fresh clone always finds a current library here, with no nested cargo run (which
/// would have to guess the profile and target directory, and wait for cargo's lock). The
/// libsluice.so in target/<profile>/ is not used: only a `cargo build` of libsluice
/// refreshes it, so it may be older.
fn libsluice_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable");
    let deps = exe.parent().expect("its directory").to_path_buf();
    assert!(
        deps.join("libsluice.so").exists(),
        "no libsluice.so next to {}: cargo builds it there for this test (libsluice is a \
         dev-dependency of the sluice-cli package)",
        exe.display()
    );
    deps
}

/// Compiles zero_copy_echo.c against include/sluice.h and libsluice.so into `dir`.
fn compile_zero_copy_echo(dir: &Path) -> PathBuf {
    let libsluice = Path::new(env!("CARGO_MANIFEST_DIR")).join("../libsluice");
    let lib = libsluice_dir();
    let exe = dir.join("zero_copy_echo");
    let out = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args([
            "-std=c99",
            "-D_POSIX_C_SOURCE=200809L",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-O2",
        ])
        .arg("-I")
        .arg(libsluice.join("include"))
        .arg(libsluice.join("examples/c/zero_copy_echo.c"))
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lsluice")
        .output()
        .expect("cc runs");
    assert!(
        out.status.success(),
        "zero_copy_echo.c does not compile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// The compiled program attached to the setup's engine. It runs in the root namespace: it
/// reaches the engine through the control socket, a filesystem path, and its connections
/// are the engine's (10.77.0.1 in sluice-a) wherever it runs. LD_LIBRARY_PATH names the
/// library it was linked with: cargo puts target/<profile>/ on the tests'
/// LD_LIBRARY_PATH, which would win over the rpath and may hold an older libsluice.so.
fn zero_copy_echo(setup: &Setup, exe: &Path, name: &str, args: &[&str]) -> Proc {
    Proc::spawn(
        name,
        Command::new(exe)
            .args(args)
            .env("SLUICE_SOCKET", &setup.socket)
            .env("LD_LIBRARY_PATH", libsluice_dir()),
    )
}

/// Linux clients, and the bytes each sends through the C zero-copy echo server (which
/// accepts them all before echoing: at most 64).
const C_CLIENTS: usize = 8;
const C_BYTES: usize = 4 << 20;

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn c_zero_copy_echo_server_echoes_linux_clients_byte_exact() {
    common::require_lab(&["cc"]);
    let setup = Setup::up("c-zero-copy-server");
    let exe = compile_zero_copy_echo(&setup.dir);
    let mut server = zero_copy_echo(
        &setup,
        &exe,
        "zero_copy_echo server",
        &["server", &C_CLIENTS.to_string()],
    );
    let line = server.wait_for("listening", Duration::from_secs(30));
    let port: u16 = line
        .trim_start_matches("listening ")
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("zero_copy_echo printed {line:?}"));
    // Each client's echo is checked against what it sent (SHA-256).
    setup.echo_clients(&server, port, C_CLIENTS, C_BYTES);
    let status = server.wait_exit(Duration::from_secs(30));
    let out = server.output();
    assert!(
        status.success()
            && out.contains(&format!(
                "echoed {} bytes on {C_CLIENTS} connections",
                C_CLIENTS * C_BYTES
            )),
        "zero_copy_echo server ({status}):\n{out}"
    );
    eprintln!(
        "zero_copy_echo server: {}",
        out.lines().last().unwrap_or("")
    );
    setup.teardown();
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn c_zero_copy_echo_client_through_the_engine_to_a_linux_echo_server() {
    common::require_lab(&["cc"]);
    let setup = Setup::up("c-zero-copy-client");
    let exe = compile_zero_copy_echo(&setup.dir);
    let mut linux = setup.spawn_in_ns(
        NS_CLIENT,
        "linux echo server",
        &["python3", &script("echo_threads.py"), "7203"],
    );
    linux.wait_for("listening", Duration::from_secs(30));
    // It verifies every echoed byte in place in its RX ring.
    let mut client = zero_copy_echo(
        &setup,
        &exe,
        "zero_copy_echo client",
        &[
            "client",
            LINUX_CLIENT_IP,
            "7203",
            &C_CLIENTS.to_string(),
            &C_BYTES.to_string(),
        ],
    );
    let status = client.wait_exit(Duration::from_secs(120));
    let out = client.output();
    assert!(
        status.success()
            && out.contains(&format!("ok {C_CLIENTS} connections, {C_BYTES} bytes each")),
        "zero_copy_echo client ({status}):\n{out}\n--- engine:\n{}",
        setup.engine.output()
    );
    eprintln!(
        "zero_copy_echo client: {}",
        out.lines().last().unwrap_or("")
    );
    drop(linux);
    setup.teardown();
}
