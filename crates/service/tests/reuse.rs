//! Port sharing (issue 23 item 2): SO_REUSEPORT between applications of one uid (both bind
//! and listen, the core's reuseport group spreads the peer's connections), SO_REUSEADDR
//! (both bind, one listens), EADDRINUSE across uids, and the per-uid port-range map.
//! The tests across uids run a child as `nobody` and need root: they skip with a message
//! without it.

mod support;

use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::atomic::Ordering;

use nix::errno::Errno;
use nix::unistd::geteuid;
use sluice_service::PortRange;
use sluice_shm::{Command, Reuse, ACCEPT_RECORD_BYTES};
use support::*;

/// The uid and gid of `nobody`.
const NOBODY: u32 = 65534;
/// A uid with a range of its own that nobody may not bind.
const OTHER_UID: u32 = 1000;

const REUSEPORT: Reuse = Reuse {
    addr: false,
    port: true,
};
const REUSEADDR: Reuse = Reuse {
    addr: true,
    port: false,
};

/// Whether this test runs as root (else it says it skips).
fn root(test: &str) -> bool {
    if geteuid().is_root() {
        return true;
    }
    eprintln!("skipped {test}: needs root to run a child as another uid");
    false
}

/// Opens a slot and binds it to `port` with `reuse`; the completion's errno, or 0.
fn bind(app: &mut Client, c: u32, port: u16, reuse: Reuse, pump: &mut dyn FnMut()) -> (u32, i32) {
    let slot = app.open(c, pump);
    let req = app.req();
    let cmd = Command::Bind {
        req,
        slot,
        ip: Ipv4Addr::UNSPECIFIED,
        port,
        reuse,
    };
    match app.call(c, cmd, pump) {
        sluice_shm::Completion::Done { .. } => (slot, 0),
        sluice_shm::Completion::Failed { errno, .. } => (slot, errno),
        other => panic!("unexpected completion {other:?}"),
    }
}

/// Listen on a bound slot; the errno, or 0.
fn listen(app: &mut Client, c: u32, slot: u32, pump: &mut dyn FnMut()) -> i32 {
    let req = app.req();
    let cmd = Command::Listen {
        req,
        slot,
        backlog: 16,
    };
    match app.call(c, cmd, pump) {
        sluice_shm::Completion::Done { .. } => 0,
        sluice_shm::Completion::Failed { errno, .. } => errno,
        other => panic!("unexpected completion {other:?}"),
    }
}

/// Accept records waiting in listener `l`'s ring (not taken).
fn waiting(app: &Client, l: u32) -> u64 {
    let b = app.block(l);
    let head = b.rx_head().load(Ordering::Acquire);
    let tail = b.rx_tail().load(Ordering::Acquire);
    (tail - head) / ACCEPT_RECORD_BYTES as u64
}

#[test]
fn reuseport_listeners_of_one_uid_in_two_apps_share_the_peers_connections() {
    let mut net = Net::start("reuse-port");
    let mut a = net.attach("a");
    let mut b = net.attach("b");
    let (ca, cb) = (a.context(), b.context());
    let pump = &mut || net.peer.pump();
    let (la, e) = bind(&mut a, ca, 7300, REUSEPORT, pump);
    assert_eq!(e, 0);
    let (lb, e) = bind(&mut b, cb, 7300, REUSEPORT, pump);
    assert_eq!(e, 0, "same uid, both SO_REUSEPORT: the port is shared");
    assert_eq!(listen(&mut a, ca, la, pump), 0);
    assert_eq!(listen(&mut b, cb, lb, pump), 0, "both listen");
    // A socket without SO_REUSEPORT may not join.
    let (_, e) = bind(&mut a, ca, 7300, Reuse::default(), pump);
    assert_eq!(e, Errno::EADDRINUSE as i32);

    const N: u64 = 12;
    let conns: Vec<_> = (0..N).map(|_| net.peer.connect(ENGINE_IP, 7300)).collect();
    net.peer
        .until("every connection accepted by one app or the other", |_| {
            (waiting(&a, la) + waiting(&b, lb) == N).then_some(())
        });
    let (na, nb) = (waiting(&a, la), waiting(&b, lb));
    assert!(na > 0 && nb > 0, "both apps get connections: {na} and {nb}");
    for c in &conns {
        assert_eq!(
            net.peer.stack.state(*c),
            Ok(sluice_tcp::TcpState::Established)
        );
    }
    // Bytes cross on one of b's connections.
    let rec = b.accept(cb, lb, &mut || net.peer.pump());
    let c = conns
        .iter()
        .copied()
        .find(|c| net.peer.stack.endpoints(*c).unwrap().0 == rec.peer)
        .expect("the accepted connection is one of the peer's");
    net.peer.send_all(c, b"to b");
    let mut got = Vec::new();
    while got.len() < 4 {
        let mut buf = [0u8; 16];
        let n = b.read_some(cb, rec.slot, &mut buf);
        got.extend_from_slice(&buf[..n]);
        net.peer.pump();
    }
    assert_eq!(got, b"to b");

    // a closes its listener: b's takes every new connection, and the port stays b's.
    a.post(
        ca,
        Command::Close {
            slot: la,
            abort: false,
        },
    );
    // Close has no completion: a command after it completes once it ran.
    a.sync(ca, &mut || net.peer.pump());
    let before = waiting(&b, lb);
    for _ in 0..4 {
        net.peer.connect(ENGINE_IP, 7300);
    }
    net.peer.until("the new connections go to b", |_| {
        (waiting(&b, lb) == before + 4).then_some(())
    });
    let (_, e) = bind(&mut a, ca, 7300, REUSEPORT, &mut || net.peer.pump());
    assert_eq!(e, 0, "a may join b's group again");
}

#[test]
fn reuseaddr_lets_two_sockets_bind_and_one_listen() {
    let mut net = Net::start("reuse-addr");
    let mut a = net.attach("a");
    let mut b = net.attach("b");
    let (ca, cb) = (a.context(), b.context());
    let pump = &mut || net.peer.pump();
    let (la, e) = bind(&mut a, ca, 7400, REUSEADDR, pump);
    assert_eq!(e, 0);
    let (lb, e) = bind(&mut b, cb, 7400, REUSEADDR, pump);
    assert_eq!(
        e, 0,
        "both SO_REUSEADDR, same uid, nobody listening: both bind"
    );
    let (_, e) = bind(&mut b, cb, 7400, Reuse::default(), pump);
    assert_eq!(e, Errno::EADDRINUSE as i32, "without the flag: in use");
    assert_eq!(listen(&mut a, ca, la, pump), 0);
    assert_eq!(
        listen(&mut b, cb, lb, pump),
        Errno::EADDRINUSE as i32,
        "one listener per port under SO_REUSEADDR"
    );
    let (_, e) = bind(&mut b, cb, 7400, REUSEADDR, pump);
    assert_eq!(e, Errno::EADDRINUSE as i32, "no bind beside a listener");
    // a's listener serves.
    net.peer.connect(ENGINE_IP, 7400);
    let rec = a.accept(ca, la, &mut || net.peer.pump());
    assert_eq!(rec.local_port, 7400);
}

/// The environment variable that makes [`child_shares_and_ranges`] run (as nobody).
const CHILD_SOCKET: &str = "SLUICE_TEST_REUSE_CHILD_SOCKET";
/// A port root's application holds with SO_REUSEPORT.
const ROOT_REUSEPORT: u16 = 9050;

/// The engine's port-range map in the uid tests.
fn ranges() -> Vec<PortRange> {
    vec![
        "65534:9100-9199".parse().unwrap(),
        format!("{OTHER_UID}:9200-9299").parse().unwrap(),
    ]
}

/// Run by [`across_uids_ports_are_not_shared_and_ranges_are_kept`] in a child as nobody.
#[test]
#[ignore = "run as nobody by across_uids_ports_are_not_shared_and_ranges_are_kept"]
fn child_shares_and_ranges() {
    let Some(socket) = std::env::var_os(CHILD_SOCKET) else {
        return;
    };
    assert_eq!(geteuid().as_raw(), NOBODY, "the child runs as nobody");
    let mut app = Client::attach(Path::new(&socket), "nobody");
    let c = app.context();
    let pump = &mut || {};
    let (_, e) = bind(&mut app, c, ROOT_REUSEPORT, REUSEPORT, pump);
    assert_eq!(e, libc::EADDRINUSE, "SO_REUSEPORT across uids is refused");
    let (_, e) = bind(&mut app, c, 9150, Reuse::default(), pump);
    assert_eq!(e, 0, "nobody's own range");
    let (_, e) = bind(&mut app, c, 9250, Reuse::default(), pump);
    assert_eq!(e, libc::EACCES, "another uid's range");
    let (_, e) = bind(&mut app, c, 9350, Reuse::default(), pump);
    assert_eq!(e, 0, "outside every range: the default policy");
}

#[test]
fn across_uids_ports_are_not_shared_and_ranges_are_kept() {
    if !root("across_uids_ports_are_not_shared_and_ranges_are_kept") {
        return;
    }
    use std::os::unix::process::CommandExt;
    let mut net = Net::start_with("reuse-uids", |c| {
        c.access.allow_uids = vec![NOBODY];
        c.port_ranges = ranges();
    });
    std::fs::set_permissions(
        &net.socket,
        std::os::unix::fs::PermissionsExt::from_mode(0o666),
    )
    .unwrap();
    let mut root_app = net.attach("root");
    let c = root_app.context();
    let pump = &mut || {};
    assert_eq!(bind(&mut root_app, c, ROOT_REUSEPORT, REUSEPORT, pump).1, 0);
    // Root binds in any range.
    assert_eq!(bind(&mut root_app, c, 9120, Reuse::default(), pump).1, 0);
    assert_eq!(bind(&mut root_app, c, 9220, Reuse::default(), pump).1, 0);
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_shares_and_ranges",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_SOCKET, &net.socket)
        .uid(NOBODY)
        .gid(NOBODY)
        .status()
        .expect("the child runs");
    assert!(status.success(), "the child's binds: {status}");
    let counters = net.until_counters("the refusal counted", |c| c.port_range_refused == 1);
    assert_eq!(counters.apps_attached, 2);
}

#[test]
fn overlapping_or_empty_ranges_are_refused_at_start() {
    for (name, bad) in [
        ("reuse-overlap", vec!["1:9000-9100", "2:9100-9200"]),
        ("reuse-empty", vec!["1:9100-9000"]),
    ] {
        let dir = std::env::temp_dir().join(format!("sluice-{name}-{}", std::process::id()));
        let mut c = sluice_service::ServiceConfig::new(dir.join("s"), ENGINE_IP, 24);
        c.port_ranges = bad.iter().map(|r| r.parse().unwrap()).collect();
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("port range"), "{name}: {err}");
    }
}
