//! Admin requests on the control socket (`sluice ctl`, docs/ctl.md): connections with their
//! states and owners, pages through hundreds of them, counters that move with traffic,
//! setting a connection's congestion control and rate, and the refusal of a uid that is
//! neither root nor the engine's (that one needs root to arrange: it skips with a message
//! without it).

mod support;

use std::net::SocketAddrV4;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;

use nix::sys::socket::UnixAddr;
use nix::sys::socket::{connect, recv, send, socket, AddressFamily, MsgFlags, SockFlag, SockType};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, geteuid, ForkResult, Gid, Uid};
use sluice_shm::admin::{AdminReply, AdminRequest, ConnRef, ConnRow, ListenerRow};
use sluice_shm::control::{ACCESS_DENIED, PROTOCOL_VERSION};
use support::{ask_admin, Client, Net, ENGINE_IP, PEER_IP, WAIT};

/// The uid and gid of `nobody`.
const NOBODY: u32 = 65534;

/// Every connection, following the pages; also how many pages it took.
fn all_conns(client: &Client, max: u32) -> (Vec<ConnRow>, usize) {
    let (mut rows, mut pages, mut cursor) = (Vec::new(), 0, 0);
    loop {
        pages += 1;
        match ask_admin(client, AdminRequest::Conns { cursor, max }).expect("conns") {
            AdminReply::Conns { rows: page, next } => {
                assert!(page.len() <= max as usize);
                rows.extend(page);
                match next {
                    Some(n) => {
                        assert!(n > cursor, "the cursor advances");
                        cursor = n;
                    }
                    None => return (rows, pages),
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Every listener.
fn all_listeners(client: &Client) -> Vec<ListenerRow> {
    match ask_admin(client, AdminRequest::Listeners { cursor: 0, max: 64 }).expect("listeners") {
        AdminReply::Listeners { rows, next: None } => rows,
        other => panic!("unexpected {other:?}"),
    }
}

/// Every counter, by name.
fn all_counters(client: &Client) -> std::collections::HashMap<String, u64> {
    let (mut all, mut cursor) = (std::collections::HashMap::new(), 0);
    loop {
        match ask_admin(client, AdminRequest::Counters { cursor, max: 1000 }).expect("counters") {
            AdminReply::Counters { rows, next } => {
                for (name, value) in rows {
                    assert!(all.insert(name, value).is_none(), "each name once");
                }
                match next {
                    Some(n) => cursor = n,
                    None => return all,
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// The row of the connection between `local` and `remote`.
fn row(rows: &[ConnRow], local: SocketAddrV4, remote: SocketAddrV4) -> &ConnRow {
    rows.iter()
        .find(|r| r.local == local && r.remote == remote)
        .unwrap_or_else(|| panic!("no {local}-{remote} in {rows:?}"))
}

#[test]
fn connections_and_listeners_show_their_state_and_owner() {
    let mut net = Net::start("ctl-conns");
    // A server application: a listener on port 7 and one accepted connection.
    let mut server = net.attach("server");
    let sc = server.context();
    let l = server.listen(sc, 7, &mut || net.peer.pump());
    let peer_conn = net.peer.connect(ENGINE_IP, 7);
    let rec = server.accept(sc, l, &mut || net.peer.pump());
    // A client application: an active open to the peer's port 9.
    net.peer.stack.listen(9, 8).expect("peer listens");
    let mut client = net.attach("client");
    let cc = client.context();
    let (cs, local_port) = client.connect(cc, PEER_IP, 9, &mut || net.peer.pump());
    client.wait_flags(cs, sluice_shm::flags::CONNECTED, &mut || net.peer.pump());
    let admin = net.attach("admin");

    let listeners = all_listeners(&admin);
    assert_eq!(listeners.len(), 1, "{listeners:?}");
    assert_eq!(listeners[0].local, SocketAddrV4::new(ENGINE_IP, 7));
    let owner = listeners[0].owner.as_ref().expect("the listener's owner");
    assert_eq!((owner.name.as_str(), owner.slot), ("server", l));

    let (rows, _) = all_conns(&admin, 64);
    assert_eq!(rows.len(), 2, "{rows:?}");
    let peer_port = net.peer.stack.endpoints(peer_conn).unwrap().0.port();
    let accepted = row(
        &rows,
        SocketAddrV4::new(ENGINE_IP, 7),
        SocketAddrV4::new(PEER_IP, peer_port),
    );
    assert_eq!(accepted.state, "ESTABLISHED");
    let owner = accepted.owner.as_ref().expect("an owner");
    assert_eq!(owner.name, "server");
    assert_eq!(owner.pid, std::process::id());
    assert_eq!(owner.uid, geteuid().as_raw());
    assert_eq!(owner.slot, rec.slot);
    assert!(accepted.mss > 0 && accepted.cwnd > 0 && accepted.rto_us > 0);
    let active = row(
        &rows,
        SocketAddrV4::new(ENGINE_IP, local_port),
        SocketAddrV4::new(PEER_IP, 9),
    );
    assert_eq!(active.state, "ESTABLISHED");
    let owner = active.owner.as_ref().expect("an owner");
    assert_eq!((owner.name.as_str(), owner.slot), ("client", cs));

    // The client closes: its connection moves on to FIN-WAIT and the list says so.
    client.post(
        cc,
        sluice_shm::Command::Close {
            slot: cs,
            abort: false,
        },
    );
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let (rows, _) = all_conns(&admin, 64);
        let gone_on = rows
            .iter()
            .find(|r| r.remote == SocketAddrV4::new(PEER_IP, 9))
            .map(|r| r.state.clone());
        if matches!(gone_on.as_deref(), Some("FIN-WAIT-1" | "FIN-WAIT-2") | None) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "state {gone_on:?}");
        net.peer.pump();
    }
    let counters = net.counters();
    assert!(counters.admin_requests >= 3, "{counters:?}");
    assert_eq!(counters.admin_denied, 0);
}

#[test]
fn counters_move_with_traffic() {
    let mut net = Net::start("ctl-counters");
    let mut app = net.attach("server");
    let c = app.context();
    let l = app.listen(c, 7, &mut || net.peer.pump());
    let admin = net.attach("admin");
    let before = all_counters(&admin);
    for group in ["tcp.", "service.", "engine.", "device."] {
        assert!(
            before.keys().any(|k| k.starts_with(group)),
            "no {group} counters"
        );
    }
    let peer_conn = net.peer.connect(ENGINE_IP, 7);
    let rec = app.accept(c, l, &mut || net.peer.pump());
    let data = support::pattern(20_000, 7);
    net.peer.send_all(peer_conn, &data);
    let mut got = vec![0u8; data.len()];
    let mut n = 0;
    let deadline = std::time::Instant::now() + WAIT;
    while n < data.len() {
        n += app.read_some(c, rec.slot, &mut got[n..]);
        assert!(std::time::Instant::now() < deadline, "read {n}");
        net.peer.pump();
    }
    // The engine loop hands its counters over before it sleeps or every 1024 iterations.
    let deadline = std::time::Instant::now() + WAIT;
    let after = loop {
        let after = all_counters(&admin);
        if after["engine.rx_frames"] > before["engine.rx_frames"] {
            break after;
        }
        assert!(std::time::Instant::now() < deadline, "engine counters");
        net.peer.pump();
    };
    assert!(after["tcp.frames_rx"] > before["tcp.frames_rx"]);
    assert!(after["tcp.fast_path"] > before["tcp.fast_path"]);
    assert!(after["service.rx_bytes"] >= before["service.rx_bytes"] + data.len() as u64);
    assert_eq!(after["service.accepts"], before["service.accepts"] + 1);
    assert!(after["device.rx_frames"] > before["device.rx_frames"]);
    assert!(after["service.admin_requests"] > before["service.admin_requests"]);
}

#[test]
fn set_congestion_control_and_rate_change_what_the_connection_reports() {
    let mut net = Net::start("ctl-set");
    let mut app = net.attach("server");
    let c = app.context();
    let l = app.listen(c, 7, &mut || net.peer.pump());
    let _peer_conn = net.peer.connect(ENGINE_IP, 7);
    app.accept(c, l, &mut || net.peer.pump());
    let admin = net.attach("admin");
    let (rows, _) = all_conns(&admin, 64);
    let conn = rows[0].id;
    assert_ne!(rows[0].cc, "cubic");
    let set = ask_admin(
        &admin,
        AdminRequest::SetCongestion {
            conn,
            algorithm: "cubic".into(),
        },
    );
    assert_eq!(set, Ok(AdminReply::Done));
    let set = ask_admin(
        &admin,
        AdminRequest::SetRate {
            conn,
            bits_per_sec: 5_000_000,
        },
    );
    assert_eq!(set, Ok(AdminReply::Done));
    let (rows, _) = all_conns(&admin, 64);
    assert_eq!(rows[0].cc, "cubic");
    assert_eq!(rows[0].rate_bps, 5_000_000);

    // Refusals: an unknown algorithm, and a connection that is not (or no longer) there.
    let bad = ask_admin(
        &admin,
        AdminRequest::SetCongestion {
            conn,
            algorithm: "vegas".into(),
        },
    );
    assert!(
        bad.as_ref().is_err_and(|e| e.starts_with("EINVAL")),
        "{bad:?}"
    );
    let stale = ConnRef {
        slot: conn.slot,
        generation: conn.generation.wrapping_add(1),
    };
    let bad = ask_admin(
        &admin,
        AdminRequest::SetRate {
            conn: stale,
            bits_per_sec: 1,
        },
    );
    assert!(
        bad.as_ref().is_err_and(|e| e.starts_with("ENOENT")),
        "{bad:?}"
    );
}

#[test]
fn hundreds_of_connections_come_in_pages() {
    const CONNS: usize = 320;
    let mut net = Net::start_with_cores(
        "ctl-pages",
        |s| s.layout.max_sockets = 400,
        |c| c.max_connections = 512,
    );
    let peer_listener = net.peer.stack.listen(9, 512).expect("peer listens");
    let mut app = net.attach("many");
    let c = app.context();
    let mut accepted = Vec::new();
    let mut pump = || {
        net.peer.pump();
        while let Ok(id) = net.peer.stack.accept(peer_listener) {
            accepted.push(id);
        }
    };
    let mut slots = Vec::new();
    for _ in 0..CONNS {
        slots.push(app.connect(c, PEER_IP, 9, &mut pump).0);
    }
    for &s in &slots {
        app.wait_flags(s, sluice_shm::flags::CONNECTED, &mut pump);
    }
    let admin = net.attach("admin");
    let (rows, pages) = all_conns(&admin, 1000);
    assert_eq!(rows.len(), CONNS);
    assert!(pages > 1, "{CONNS} connections need more than one message");
    let mut ports: Vec<u16> = rows.iter().map(|r| r.local.port()).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), CONNS, "every connection once");
    assert!(rows
        .iter()
        .all(|r| r.state == "ESTABLISHED" && r.owner.as_ref().is_some_and(|o| o.name == "many")));
    // Pages of a chosen size give the same rows.
    let (small, small_pages) = all_conns(&admin, 7);
    assert_eq!(small.len(), CONNS);
    assert!(small_pages >= CONNS / 7);
    assert_eq!(
        small.iter().map(|r| r.id).collect::<Vec<_>>(),
        rows.iter().map(|r| r.id).collect::<Vec<_>>()
    );
}

/// Attaches as `nobody` from a child process and asks for the connections; whether the
/// engine refused with permission denied.
fn admin_as_nobody(path: &std::path::Path) -> i32 {
    const DENIED: i32 = 0;
    let hello = format!(r#"{{"Hello":{{"version":{PROTOCOL_VERSION},"pid":0,"name":"nobody"}}}}"#);
    let conns = r#"{"Admin":{"Conns":{"cursor":0,"max":8}}}"#;
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
                    return 6;
                }
                let Ok(fd) = socket(
                    AddressFamily::Unix,
                    SockType::SeqPacket,
                    SockFlag::empty(),
                    None,
                ) else {
                    return 5;
                };
                if connect(fd.as_raw_fd(), &addr).is_err() {
                    return 5;
                }
                let mut buf = [0u8; 4096];
                if send(fd.as_raw_fd(), hello.as_bytes(), MsgFlags::empty()).is_err() {
                    return 4;
                }
                match recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()) {
                    Ok(n) if buf[..n].starts_with(br#"{"Welcome""#) => {}
                    _ => return 3,
                }
                if send(fd.as_raw_fd(), conns.as_bytes(), MsgFlags::empty()).is_err() {
                    return 4;
                }
                match recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()) {
                    Ok(n)
                        if buf[..n].starts_with(br#"{"Refused""#)
                            && buf[..n].windows(denied.len()).any(|w| w == denied) =>
                    {
                        DENIED
                    }
                    _ => 2,
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

#[test]
fn a_uid_neither_root_nor_the_engines_is_refused_and_counted() {
    if !geteuid().is_root() {
        eprintln!("skipped a_uid_neither_root_nor_the_engines_is_refused_and_counted: needs root to attach as another uid");
        return;
    }
    let mut net = Net::start_with("ctl-denied", |c| c.access.allow_uids = vec![NOBODY]);
    std::fs::set_permissions(&net.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(admin_as_nobody(&net.socket), 0, "nobody is refused");
    let counters = net.until_counters("the refusal counted", |c| c.admin_denied == 1);
    assert_eq!(counters.admin_requests, 0);
    // Root is not.
    let admin = net.attach("admin");
    assert!(ask_admin(&admin, AdminRequest::Conns { cursor: 0, max: 8 }).is_ok());
}
