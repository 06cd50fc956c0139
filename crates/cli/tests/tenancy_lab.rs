//! A shared engine and its tenants, through real programs (root, lab; issue 23): `sluice
//! engine --lab --group sluice-test` in sluice-a, `python3` programs under `sluice run` as
//! an ordinary user (uid 65534, with or without the group, dropped to by setpriv(1) after
//! `ip netns exec sluice-a`), and Linux clients in sluice-b and sluice-k checking every byte.
//!
//! - an ordinary user in the engine's group serves `python3 -m http.server` through `sluice
//!   run`; outside the group the program's bind fails with EACCES, whether the socket file's
//!   mode or the engine itself refuses it;
//! - privileged ports: the user's binds of 22, 80 and 443 are EACCES and nothing answers
//!   there; root's server on 80 serves;
//! - attaches, listeners: one uid takes what the engine lets it, then a new server listens
//!   and serves byte-exact;
//! - SO_REUSEPORT across uids: EADDRINUSE, and root's server keeps its port.
//!
//! Quota flags that other branches add (`--apps-per-uid`, `--listeners-per-app`) are found in
//! `sluice engine --help`; without one, the test says so and checks the weaker property
//! (the hostile tenant stays below the engine's global limits). The tests are `#[ignore]`d
//! (scripts/test.sh runs them as root) and, when asked for, fail if the lab is unavailable.
//! The group `sluice-test` is created if missing (`groupadd -f`) and left in place.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;
use std::time::Duration;

use common::{counter, preload, scripts, Proc, Setup, ENGINE_IP, SLUICE};
use sluice_lab::{NS_CLIENT, NS_ENGINE, NS_KERNEL};

/// The engine's group in these tests.
const GROUP: &str = "sluice-test";
/// The ordinary user: nobody.
const USER: u32 = 65534;
/// How long a program may take to start and say its first line on a loaded machine.
const START: Duration = Duration::from_secs(60);

/// The gid of [`GROUP`], created if missing.
fn test_group() -> u32 {
    let added = Command::new("groupadd")
        .args(["-f", GROUP])
        .status()
        .expect("groupadd runs");
    assert!(added.success(), "groupadd -f {GROUP}: {added}");
    let out = Command::new("getent")
        .args(["group", GROUP])
        .output()
        .expect("getent runs");
    let line = String::from_utf8_lossy(&out.stdout).to_string();
    line.split(':')
        .nth(2)
        .and_then(|g| g.trim().parse().ok())
        .unwrap_or_else(|| panic!("no gid in getent's {line:?}"))
}

/// Whether `sluice engine` has `flag` (another branch may add it).
fn engine_has_flag(flag: &str) -> bool {
    let out = Command::new(SLUICE)
        .args(["engine", "--help"])
        .output()
        .expect("sluice engine --help runs");
    String::from_utf8_lossy(&out.stdout).contains(flag)
}

/// `sluice run -- PROGRAM` as uid [`USER`] with supplementary group `group` (none if None),
/// in the engine's namespace: root enters it, then setpriv drops to the user, so `sluice run`
/// and the program hold no privilege at all.
fn as_user(setup: &Setup, name: &str, group: Option<u32>, program: &[&str]) -> Proc {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", NS_ENGINE, "setpriv"])
        .arg(format!("--reuid={USER}"))
        .arg(format!("--regid={USER}"));
    match group {
        Some(gid) => cmd.arg(format!("--groups={gid}")),
        None => cmd.arg("--clear-groups"),
    };
    cmd.args(["--", SLUICE, "run", "--socket"])
        .arg(&setup.socket)
        .arg("--preload")
        .arg(preload())
        .arg("--")
        .args(program);
    Proc::spawn(name, &mut cmd)
}

/// tenant.py's path as an argument.
fn tenant() -> String {
    scripts()
        .join("tenant.py")
        .to_str()
        .expect("utf-8")
        .to_string()
}

/// A root echo server (tenant.py echo) under `sluice run --lab`, listening.
fn root_echo(setup: &Setup, port: u16, reuseport: bool) -> Proc {
    let script = tenant();
    let port = port.to_string();
    let mut args = vec!["python3", script.as_str(), "echo"];
    if reuseport {
        args.push("--reuseport");
    }
    args.push(&port);
    setup.run("root echo server", &args, true)
}

/// Starts a tenant.py program as the user and waits for its `holding` line.
/// The process's output once it holds `needle`, or after 10 s: its stdout ("holding") and
/// its stderr (the preload's reason) are read by two threads, so one may lag the other.
fn output_with(p: &Proc, needle: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let out = p.output();
        if out.contains(needle) || std::time::Instant::now() >= deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn hold_as_user(setup: &Setup, name: &str, group: Option<u32>, args: &[&str]) -> Proc {
    let script = tenant();
    let mut program = vec!["python3", script.as_str()];
    program.extend_from_slice(args);
    let mut p = as_user(setup, name, group, &program);
    p.wait_for("holding", START);
    p
}

#[test]
#[ignore = "root: needs the namespace lab, groupadd and setpriv (scripts/test.sh runs it as root)"]
fn a_user_in_the_group_serves_through_sluice_run_and_others_get_eacces() {
    common::require_lab(&["setpriv", "groupadd", "getent"]);
    let gid = test_group();
    let mut setup = Setup::up_with("tenancy-group", &["--group", GROUP]);
    let meta = std::fs::metadata(&setup.socket).expect("the engine's socket");
    assert_eq!(
        (meta.mode() & 0o777, meta.gid()),
        (0o660, gid),
        "the socket is {GROUP} 0660"
    );

    // An unmodified server as the user, a Linux client checking every byte.
    let page: Vec<u8> = (0..200_000usize)
        .map(|i| (i * 13 + i / 509) as u8)
        .collect();
    let page_path = setup.dir.join("page.bin");
    std::fs::write(&page_path, &page).expect("write the page");
    std::fs::set_permissions(&page_path, std::fs::Permissions::from_mode(0o644))
        .expect("chmod the page");
    let dir = setup.dir.to_str().expect("utf-8").to_string();
    let mut server = as_user(
        &setup,
        "http.server as nobody",
        Some(gid),
        &[
            "python3",
            "-u",
            "-m",
            "http.server",
            "--bind",
            "0.0.0.0",
            "--directory",
            &dir,
            "8080",
        ],
    );
    server.wait_for("Serving HTTP", START);
    let fetch = "import sys, urllib.request\n\
                 body = urllib.request.urlopen(sys.argv[1], timeout=60).read()\n\
                 want = open(sys.argv[2], 'rb').read()\n\
                 print('same' if body == want else 'differs', len(body), len(want))";
    let url = format!("http://{ENGINE_IP}:8080/page.bin");
    for _ in 0..3 {
        let out = setup.in_ns(
            NS_CLIENT,
            &[
                "python3",
                "-c",
                fetch,
                &url,
                page_path.to_str().expect("utf-8"),
            ],
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.starts_with("same 200000"),
            "fetch from nobody's http.server: {stdout}{}\n--- server:\n{}\n--- engine:\n{}",
            String::from_utf8_lossy(&out.stderr),
            server.output(),
            setup.engine.output()
        );
    }
    common::assert_clean(&server);
    drop(server);

    // Outside the group, the socket file's mode refuses: EACCES, said by the preload.
    let outsider = hold_as_user(&setup, "nobody outside the group", None, &["bind", "8081"]);
    let said = output_with(&outsider, "permission denied");
    assert!(
        said.contains("port 8081 errno EACCES") && said.contains("permission denied"),
        "outside the group: EACCES and the preload's reason:\n{said}"
    );
    drop(outsider);

    // A socket opened to everyone (0666): the engine itself refuses the uid and counts it.
    std::fs::set_permissions(&setup.socket, std::fs::Permissions::from_mode(0o666))
        .expect("chmod the socket");
    let outsider = hold_as_user(&setup, "nobody, socket 0666", None, &["bind", "8082"]);
    let said = output_with(&outsider, "permission denied");
    assert!(
        said.contains("port 8082 errno EACCES") && said.contains("permission denied"),
        "refused by the engine: EACCES and the engine's reason:\n{said}"
    );
    drop(outsider);
    let engine = setup.stop_engine();
    assert!(
        engine.contains("permission denied"),
        "the engine says why:\n{engine}"
    );
    assert!(counter(&engine, "apps_denied") >= 1, "{engine}");
    setup.teardown();
}

#[test]
#[ignore = "root: needs the namespace lab, groupadd and setpriv (scripts/test.sh runs it as root)"]
fn privileged_ports_are_refused_to_a_user_and_roots_server_on_80_serves() {
    common::require_lab(&["setpriv", "groupadd", "getent"]);
    let gid = test_group();
    let mut setup = Setup::up_with("tenancy-ports", &["--group", GROUP]);
    let hostile = hold_as_user(
        &setup,
        "nobody binds 22 80 443",
        Some(gid),
        &["bind", "22", "80", "443", "8022"],
    );
    let said = hostile.output();
    for port in [22, 80, 443] {
        assert!(
            said.contains(&format!("port {port} errno EACCES")),
            "port {port} is refused with EACCES (PermissionError):\n{said}"
        );
    }
    // The same program may bind an unprivileged port: the refusals are the ports' alone.
    assert!(said.contains("port 8022 ok"), "{said}");

    // Nothing answers on those ports: a Linux client in sluice-k is refused.
    let probe = "import socket, sys\n\
                 for p in sys.argv[2:]:\n\
                 \x20   try:\n\
                 \x20       socket.create_connection((sys.argv[1], int(p)), timeout=10).close()\n\
                 \x20       print(p, 'open')\n\
                 \x20   except ConnectionRefusedError:\n\
                 \x20       print(p, 'refused')\n\
                 \x20   except OSError as e:\n\
                 \x20       print(p, 'error', e)";
    let out = setup.in_ns(
        NS_KERNEL,
        &["python3", "-c", probe, ENGINE_IP, "22", "80", "443"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    for port in [22, 80, 443] {
        assert!(
            stdout.contains(&format!("{port} refused")),
            "a client in sluice-k reaches port {port}:\n{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // Root's server on 80 serves, byte-exact.
    let root = root_echo(&setup, 80, false);
    setup.echo_clients(&root, 80, 4, 200_000);
    drop(root);
    drop(hostile);
    let engine = setup.stop_engine();
    assert!(
        counter(&engine, "privileged_ports_refused") >= 3,
        "three refusals counted:\n{engine}"
    );
    setup.teardown();
}

#[test]
#[ignore = "root: needs the namespace lab, groupadd and setpriv (scripts/test.sh runs it as root)"]
fn one_uids_attaches_leave_a_new_server_able_to_serve() {
    common::require_lab(&["setpriv", "groupadd", "getent"]);
    let gid = test_group();
    let quota = engine_has_flag("--apps-per-uid");
    let (mut args, tries) = (vec!["--group", GROUP], if quota { 12 } else { 30 });
    if quota {
        args.extend(["--apps-per-uid", "8"]);
    } else {
        eprintln!(
            "sluice engine has no --apps-per-uid here: checking that {tries} attaches of one \
             uid leave room for a new server (not that the uid is stopped)"
        );
    }
    let setup = Setup::up_with("tenancy-attaches", &args);
    let mut hostile = Vec::new();
    let (mut attached, mut refused) = (0, Vec::new());
    for i in 0..tries {
        let p = hold_as_user(&setup, &format!("attach {i}"), Some(gid), &["attach"]);
        let said = p.output();
        if said.contains("attached ") {
            attached += 1;
        } else {
            let why = said
                .lines()
                .find_map(|l| l.strip_prefix("refused "))
                .unwrap_or_else(|| panic!("attach {i}: neither attached nor refused:\n{said}"));
            refused.push(why.to_string());
        }
        hostile.push(p);
    }
    eprintln!("one uid: {attached} attached, refused {refused:?}");
    if quota {
        assert_eq!(
            (attached, refused.len()),
            (8, tries - 8),
            "--apps-per-uid 8: eight attach, the rest are refused"
        );
    } else {
        assert_eq!(attached, tries, "every attach below max_apps succeeds");
    }

    // A new server (root) attaches, listens and serves byte-exact while they hold on.
    let root = root_echo(&setup, 9000, false);
    setup.echo_clients(&root, 9000, 4, 200_000);
    drop(root);
    drop(hostile);
    setup.teardown();
}

#[test]
#[ignore = "root: needs the namespace lab, groupadd and setpriv (scripts/test.sh runs it as root)"]
fn one_apps_listeners_leave_a_new_server_able_to_listen() {
    common::require_lab(&["setpriv", "groupadd", "getent"]);
    let gid = test_group();
    let quota = engine_has_flag("--listeners-per-app");
    let mut args = vec!["--group", GROUP];
    // Without the quota the core's listeners are shared (64 in all, issue 23 failure 2):
    // the hostile app then stops at 48 so that the weaker property can be checked.
    let most = if quota {
        args.extend(["--listeners-per-app", "16"]);
        "300"
    } else {
        eprintln!(
            "sluice engine has no --listeners-per-app here: the hostile app listens on 48 \
             ports (below the core's shared 64), not until refused"
        );
        "48"
    };
    let setup = Setup::up_with("tenancy-listeners", &args);
    let hostile = hold_as_user(
        &setup,
        "nobody listens until refused",
        Some(gid),
        &["listen-until", "20000", most],
    );
    let said = hostile.output();
    eprintln!("hostile app: {}", said.replace('\n', "; "));
    if quota {
        assert!(
            said.contains("listeners 16\n") && said.contains("refused "),
            "--listeners-per-app 16: sixteen listeners, then a refusal:\n{said}"
        );
    } else {
        assert!(said.contains("listeners 48\n"), "{said}");
    }

    // A well-behaved server's listen succeeds and serves.
    let root = root_echo(&setup, 9001, false);
    setup.echo_clients(&root, 9001, 4, 200_000);
    drop(root);
    drop(hostile);
    setup.teardown();
}

#[test]
#[ignore = "root: needs the namespace lab, groupadd and setpriv (scripts/test.sh runs it as root)"]
fn reuseport_is_not_shared_across_uids() {
    common::require_lab(&["setpriv", "groupadd", "getent"]);
    let gid = test_group();
    let setup = Setup::up_with("tenancy-reuseport", &["--group", GROUP]);
    let root = root_echo(&setup, 9100, true);
    let hostile = hold_as_user(
        &setup,
        "nobody binds root's port",
        Some(gid),
        &["bind", "--reuseport", "9100"],
    );
    let said = hostile.output();
    assert!(
        said.contains("port 9100 errno EADDRINUSE"),
        "SO_REUSEPORT across uids is EADDRINUSE:\n{said}"
    );
    // Root's server keeps its port: every connection reaches it, byte-exact.
    setup.echo_clients(&root, 9100, 4, 200_000);
    drop(hostile);
    drop(root);
    setup.teardown();
}
