//! Who may attach: the socket file's mode, and the access policy applied to the peer's
//! credentials from the kernel (an attach from another uid needs root to arrange: those
//! tests skip with a message without it).

mod support;

use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use nix::sys::socket::UnixAddr;
use nix::sys::socket::{connect, recv, send, socket, AddressFamily, MsgFlags, SockFlag, SockType};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, getegid, geteuid, ForkResult, Gid, Uid};
use sluice_shm::control::{ACCESS_DENIED, PROTOCOL_VERSION};
use support::Net;

/// The uid and gid of `nobody`.
const NOBODY: u32 = 65534;

/// What the child saw.
const WELCOMED: i32 = 0;
const DENIED: i32 = 3;
const OTHER: i32 = 4;
const NO_CONNECT: i32 = 5;
const NO_SETUID: i32 = 6;

/// Whether this test runs as root (else it says it skips).
fn root(test: &str) -> bool {
    if geteuid().is_root() {
        return true;
    }
    eprintln!("skipped {test}: needs root to attach as another uid");
    false
}

/// Attaches to `path` from a child process running as `nobody`; returns what it saw.
fn attach_as_nobody(path: &Path) -> i32 {
    // Everything the child needs is made before fork: after it, the child only makes
    // system calls (the parent has other threads; no allocation in the child).
    let hello = format!(r#"{{"Hello":{{"version":{PROTOCOL_VERSION},"pid":0,"name":"nobody"}}}}"#);
    let addr = UnixAddr::new(path).expect("socket path");
    let denied = ACCESS_DENIED.as_bytes();
    // SAFETY: the child makes only async-signal-safe system calls and leaves by _exit.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            let code = (|| {
                if nix::unistd::setgroups(&[]).is_err()
                    || nix::unistd::setgid(Gid::from_raw(NOBODY)).is_err()
                    || nix::unistd::setuid(Uid::from_raw(NOBODY)).is_err()
                {
                    return NO_SETUID;
                }
                let Ok(fd) = socket(
                    AddressFamily::Unix,
                    SockType::SeqPacket,
                    SockFlag::empty(),
                    None,
                ) else {
                    return NO_CONNECT;
                };
                if connect(fd.as_raw_fd(), &addr).is_err() {
                    return NO_CONNECT;
                }
                if send(fd.as_raw_fd(), hello.as_bytes(), MsgFlags::empty()).is_err() {
                    return OTHER;
                }
                let mut buf = [0u8; 4096];
                let Ok(n) = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()) else {
                    return OTHER;
                };
                let reply = &buf[..n];
                if reply.starts_with(br#"{"Welcome""#) {
                    WELCOMED
                } else if reply.windows(denied.len()).any(|w| w == denied) {
                    DENIED
                } else {
                    OTHER
                }
            })();
            // SAFETY: leaves the forked child at once, without running the parent's
            // destructors or atexit handlers.
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => match waitpid(child, None).expect("waitpid") {
            WaitStatus::Exited(_, code) => code,
            other => panic!("the child ended as {other:?}"),
        },
    }
}

/// Opens the socket file to everyone, as a careless deployment would: the engine's own
/// check must still refuse.
fn open_to_all(socket: &Path) {
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666)).unwrap();
}

#[test]
fn without_a_group_the_socket_is_owner_only() {
    let net = Net::start("access-mode");
    let meta = std::fs::metadata(&net.socket).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600, "never world-writable");
}

#[test]
fn with_a_group_the_socket_is_0660_in_it() {
    let gid = getegid().as_raw();
    let net = Net::start_with("access-group", |c| c.access.group = Some(gid));
    let meta = std::fs::metadata(&net.socket).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o660);
    assert_eq!(meta.gid(), gid);
    // The engine's own uid is admitted.
    let _c = net.attach("owner");
}

#[test]
fn a_uid_outside_the_policy_is_refused_and_others_are_not_disturbed() {
    if !root("a_uid_outside_the_policy_is_refused_and_others_are_not_disturbed") {
        return;
    }
    let mut net = Net::start("access-refused");
    let mut first = net.attach("first");
    let c = first.context();
    open_to_all(&net.socket);
    assert_eq!(attach_as_nobody(&net.socket), DENIED, "nobody is refused");
    let counters = net.until_counters("the refusal counted", |c| c.apps_denied == 1);
    assert_eq!(counters.apps_attached, 1);
    // The attached application still works, and root still attaches.
    let pump = &mut || {};
    let s = first.open(c, pump);
    assert!(s < support::layout().max_sockets);
    let _second = net.attach("second");
    net.until_counters("root attached", |c| c.apps_attached == 2);
}

#[test]
fn the_allow_list_and_the_group_admit_another_uid() {
    if !root("the_allow_list_and_the_group_admit_another_uid") {
        return;
    }
    for (name, group, allow) in [
        ("access-allow", None, vec![NOBODY]),
        ("access-in-group", Some(NOBODY), vec![]),
    ] {
        let mut net = Net::start_with(name, |c| {
            c.access.group = group;
            c.access.allow_uids = allow.clone();
        });
        open_to_all(&net.socket);
        assert_eq!(attach_as_nobody(&net.socket), WELCOMED, "{name}");
        let counters = net.until_counters("nobody attached", |c| c.apps_attached == 1);
        assert_eq!(counters.apps_denied, 0, "{name}");
    }
}

/// The environment variable that makes [`child_binds`] run (in a child process as nobody).
const CHILD_SOCKET: &str = "SLUICE_TEST_CHILD_SOCKET";
/// A port the parent's (root's) application holds while the child tries it.
const HELD_PORT: u16 = 9000;

/// Run by [`an_unprivileged_uid_cannot_bind_low_ports_nor_share_a_root_port`] in a child
/// process as `nobody`: binding port 80 is EACCES, 8080 succeeds, and a port root's
/// application holds is EADDRINUSE. Does nothing when run otherwise.
#[test]
#[ignore = "run as nobody by an_unprivileged_uid_cannot_bind_low_ports_nor_share_a_root_port"]
fn child_binds() {
    let Some(socket) = std::env::var_os(CHILD_SOCKET) else {
        return;
    };
    assert_eq!(geteuid().as_raw(), NOBODY, "the child runs as nobody");
    let mut app = support::Client::attach(Path::new(&socket), "nobody");
    let c = app.context();
    let pump = &mut || {};
    let mut bind = |app: &mut support::Client, port| {
        let slot = app.open(c, pump);
        let req = app.req();
        let ip = std::net::Ipv4Addr::UNSPECIFIED;
        let cmd = sluice_shm::Command::Bind {
            req,
            slot,
            ip,
            port,
            reuse: Default::default(),
        };
        match app.call(c, cmd, pump) {
            sluice_shm::Completion::Done { .. } => 0,
            sluice_shm::Completion::Failed { errno, .. } => errno,
            other => panic!("unexpected completion {other:?}"),
        }
    };
    assert_eq!(bind(&mut app, 80), libc::EACCES, "port 80 needs privilege");
    assert_eq!(bind(&mut app, 8080), 0, "port 8080 does not");
    assert_eq!(bind(&mut app, HELD_PORT), libc::EADDRINUSE, "root's port");
}

#[test]
fn an_unprivileged_uid_cannot_bind_low_ports_nor_share_a_root_port() {
    if !root("an_unprivileged_uid_cannot_bind_low_ports_nor_share_a_root_port") {
        return;
    }
    use std::os::unix::process::CommandExt;
    let mut net = Net::start_with("access-ports", |c| c.access.allow_uids = vec![NOBODY]);
    open_to_all(&net.socket);
    // Root's application binds port 80 (privileged) and holds HELD_PORT.
    let mut root_app = net.attach("root");
    let c = root_app.context();
    let pump = &mut || {};
    for port in [80, HELD_PORT] {
        let slot = root_app.open(c, pump);
        let req = root_app.req();
        let ip = std::net::Ipv4Addr::UNSPECIFIED;
        root_app.ok(
            c,
            sluice_shm::Command::Bind {
                req,
                slot,
                ip,
                port,
                reuse: Default::default(),
            },
            pump,
        );
    }
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_binds", "--ignored", "--nocapture"])
        .env(CHILD_SOCKET, &net.socket)
        .uid(NOBODY)
        .gid(NOBODY)
        .status()
        .expect("the child runs");
    assert!(status.success(), "the child's binds: {status}");
    let counters = net.until_counters("the refusal counted", |c| c.privileged_ports_refused == 1);
    assert_eq!(counters.apps_attached, 2);
}
