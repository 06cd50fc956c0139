//! Issue 23 item 3: quotas per application and per uid. For each resource a hostile
//! application exhausts it, gets the documented errno or refusal, and another application
//! can still attach, listen, connect and move bytes end to end; releasing gives the quota
//! back. The per-uid quotas exempt uid 0, so the hostile application of those tests runs as
//! `nobody` in a child process (this test binary run again with only `hostile_child`),
//! which needs root to arrange: those tests skip with a message without it.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command as Proc, Stdio};
use std::sync::mpsc::{self, Receiver, TryRecvError};

use nix::unistd::geteuid;
use sluice_service::Quotas;
use sluice_shm::control::QUOTA_EXCEEDED;
use sluice_shm::{flags, Command, Completion};
use support::*;

/// The uid and gid of `nobody`.
const NOBODY: u32 = 65534;
/// Tells the child which socket to attach to and what to do: `SOCKET|ACTION`.
const HOSTILE_ENV: &str = "SLUICE_QUOTA_HOSTILE";
/// How the child's reports begin on its stdout (the test harness prints there too).
const REPORT: &str = "hostile: ";

/// The quotas of these tests: small, so that a test reaches each.
fn quotas() -> Quotas {
    Quotas {
        apps_per_uid: 2,
        sockets_per_uid: 8,
        listeners_per_app: 2,
        listeners_per_uid: 3,
        connections_per_app: 2,
        connections_per_uid: 3,
        commands_per_app: 8,
    }
}

/// An engine with the tests' quotas that admits `nobody`, its socket open to it.
fn start(name: &str) -> Net {
    let net = Net::start_with(name, |c| {
        c.quotas = quotas();
        c.access.allow_uids = vec![NOBODY];
    });
    std::fs::set_permissions(&net.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    net
}

/// Whether this test runs as root (else it says it skips).
fn root(test: &str) -> bool {
    if geteuid().is_root() {
        return true;
    }
    eprintln!("skipped {test}: needs root to run the hostile application as another uid");
    false
}

/// The hostile application: a child process as `nobody`.
struct Hostile {
    child: Child,
    reports: Receiver<String>,
}

impl Hostile {
    /// Starts the child on `net`'s socket doing `action` (see [`hostile_child`]).
    fn spawn(net: &Net, action: &str) -> Hostile {
        let exe = std::env::current_exe().expect("the test binary");
        let mut child = Proc::new(exe)
            .args([
                "hostile_child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HOSTILE_ENV, format!("{}|{action}", net.socket.display()))
            .uid(NOBODY)
            .gid(NOBODY)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the hostile child starts");
        let out = child.stdout.take().expect("its stdout");
        let (tx, reports) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                // The harness's "test hostile_child ... " may begin the first line.
                if let Some(i) = line.find(REPORT) {
                    let _ = tx.send(line[i + REPORT.len()..].to_string());
                }
            }
        });
        Hostile { child, reports }
    }

    /// Its next report, pumping the peer meanwhile (the hostile application's connections
    /// need it).
    fn report(&mut self, net: &mut Net) -> String {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            match self.reports.try_recv() {
                Ok(r) => return r,
                Err(TryRecvError::Empty) => net.peer.pump(),
                Err(TryRecvError::Disconnected) => panic!("the hostile child ended early"),
            }
            assert!(std::time::Instant::now() < deadline, "no report in time");
        }
    }

    /// Tells it to give back part of what it holds.
    fn release(&mut self) {
        let stdin = self.child.stdin.as_mut().expect("its stdin");
        stdin.write_all(b"release\n").expect("the child reads");
    }

    /// Lets it go: it exits, and the engine detaches it.
    fn finish(&mut self, net: &mut Net) {
        drop(self.child.stdin.take());
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                assert!(status.success(), "the hostile child failed: {status}");
                return;
            }
            net.peer.pump();
        }
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        // A failed test leaves no child waiting behind it.
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Moves a pattern both ways between a new application of this process (root) and the
/// peer: it listens and accepts, and connects; each stream arrives exactly.
fn still_served(net: &mut Net, name: &str, port: u16) {
    let mut app = net.attach(name);
    let ctx = app.context();
    // It listens, and the peer's connection is accepted and carries bytes in.
    let l = app.listen(ctx, port, &mut || net.peer.pump());
    let c = net.peer.connect(ENGINE_IP, port);
    let rec = app.accept(ctx, l, &mut || net.peer.pump());
    let data = pattern(2 * RING as usize, port as u32);
    net.peer.send_all(c, &data);
    let mut got = Vec::new();
    let mut buf = vec![0u8; RING as usize];
    while got.len() < data.len() {
        let n = app.read_some(ctx, rec.slot, &mut buf);
        got.extend_from_slice(&buf[..n]);
        net.peer.pump();
    }
    assert_eq!(sha256(&got), sha256(&data), "{name}: inbound bytes exact");
    // It connects, and carries bytes out.
    let listener = net.peer.stack.listen(port + 1, 8).unwrap();
    let (s, _) = app.connect(ctx, PEER_IP, port + 1, &mut || net.peer.pump());
    let pc = net
        .peer
        .until("peer accepts", |st| st.accept(listener).ok());
    app.wait_flags(s, flags::CONNECTED, &mut || net.peer.pump());
    let data = pattern(3 * RING as usize, port as u32 + 1);
    app.write_all(ctx, s, &data, &mut || net.peer.pump());
    let got = net.peer.read_at_least(pc, data.len());
    assert_eq!(sha256(&got), sha256(&data), "{name}: outbound bytes exact");
}

/// Opens, binds `port` and asks to listen: the Listen's completion.
fn try_listen(app: &mut Client, ctx: u32, port: u16) -> (u32, Completion) {
    let pump = &mut || {};
    let slot = app.open(ctx, pump);
    let req = app.req();
    let bind = Command::Bind {
        req,
        slot,
        ip: std::net::Ipv4Addr::UNSPECIFIED,
        port,
        reuse: Default::default(),
    };
    app.ok(ctx, bind, pump);
    let req = app.req();
    let listen = Command::Listen {
        req,
        slot,
        backlog: 16,
    };
    (slot, app.call(ctx, listen, pump))
}

/// Opens and asks to connect to the peer's `port`: the Connect's completion.
fn try_connect(app: &mut Client, ctx: u32, port: u16, pump: &mut dyn FnMut()) -> Completion {
    let slot = app.open(ctx, pump);
    let req = app.req();
    let connect = Command::Connect {
        req,
        slot,
        ip: PEER_IP,
        port,
    };
    app.call(ctx, connect, pump)
}

/// A completion as a report: `ok` or `errno N`.
fn outcome(c: &Completion) -> String {
    match c {
        Completion::Done { .. } => "ok".into(),
        Completion::Failed { errno, .. } => format!("errno {errno}"),
        other => format!("{other:?}"),
    }
}

/// Closes slot `s` (an abort: no FIN to wait for).
fn close(app: &mut Client, ctx: u32, s: u32) {
    app.post(
        ctx,
        Command::Close {
            slot: s,
            abort: true,
        },
    );
}

/// The hostile application, when run as the child of a test here (else it does nothing).
/// It exhausts a resource, reports, waits for `release` on stdin, gives part back, tries
/// again, reports, and stays attached until its stdin closes. Does nothing when run
/// otherwise.
#[test]
#[ignore = "run as nobody by the per-uid tests of this file"]
fn hostile_child() {
    let Ok(spec) = std::env::var(HOSTILE_ENV) else {
        return;
    };
    assert_eq!(geteuid().as_raw(), NOBODY, "the child runs as nobody");
    let (socket, action) = spec.split_once('|').expect("SOCKET|ACTION");
    let socket = Path::new(socket);
    let say = |r: String| println!("{REPORT}{r}");
    let mut stdin = std::io::stdin().lock();
    let mut wait = || {
        let mut line = String::new();
        let _ = stdin.read_line(&mut line);
    };
    let pump = &mut || {};
    match action {
        "apps" => {
            let mut held = Vec::new();
            let refused = loop {
                match Client::try_attach(socket, "hostile") {
                    Ok(c) => held.push(c),
                    Err(reason) => break reason,
                }
                assert!(held.len() <= 64, "never refused");
            };
            say(format!("{} attached, then {refused}", held.len()));
            wait();
            held.pop();
            // The engine sees the hang-up on its next look at the control plane.
            let deadline = std::time::Instant::now() + WAIT;
            let again = loop {
                match Client::try_attach(socket, "hostile-again") {
                    Ok(c) => break c,
                    Err(_) if std::time::Instant::now() < deadline => {
                        std::thread::sleep(std::time::Duration::from_millis(5))
                    }
                    Err(reason) => panic!("never attached again: {reason}"),
                }
            };
            say("attached again".into());
            wait();
            drop((held, again));
        }
        "sockets" => {
            let mut app = Client::attach(socket, "hostile");
            let ctx = app.context();
            let mut slots = Vec::new();
            let errno = loop {
                let req = app.req();
                match app.call(ctx, Command::Open { req }, pump) {
                    Completion::Done { value, .. } => slots.push(value),
                    Completion::Failed { errno, .. } => break errno,
                    other => panic!("{other:?}"),
                }
            };
            say(format!("{} opened, then errno {errno}", slots.len()));
            wait();
            close(&mut app, ctx, slots[0]);
            let req = app.req();
            let c = app.call(ctx, Command::Open { req }, pump);
            say(format!("after a close: {}", outcome(&c)));
            wait();
        }
        "listeners" => {
            let (mut a, mut b) = (
                Client::attach(socket, "hostile-a"),
                Client::attach(socket, "hostile-b"),
            );
            let (ca, cb) = (a.context(), b.context());
            let mut r = Vec::new();
            let mut first = None;
            for port in [7001, 7002, 7003] {
                let (s, c) = try_listen(&mut a, ca, port);
                first.get_or_insert(s);
                r.push(outcome(&c));
            }
            for port in [7004, 7005] {
                r.push(outcome(&try_listen(&mut b, cb, port).1));
            }
            say(r.join(", "));
            wait();
            close(&mut a, ca, first.expect("a listener"));
            a.sync(ca, pump);
            say(format!(
                "after a close: {}",
                outcome(&try_listen(&mut b, cb, 7006).1)
            ));
            wait();
        }
        "connections" => {
            let (mut a, mut b) = (
                Client::attach(socket, "hostile-a"),
                Client::attach(socket, "hostile-b"),
            );
            let (ca, cb) = (a.context(), b.context());
            let mut r = Vec::new();
            let mut first = None;
            for _ in 0..3 {
                let c = try_connect(&mut a, ca, 9000, pump);
                if let Completion::Done { slot, .. } = c {
                    first.get_or_insert(slot);
                }
                r.push(outcome(&c));
            }
            for _ in 0..2 {
                r.push(outcome(&try_connect(&mut b, cb, 9000, pump)));
            }
            say(r.join(", "));
            wait();
            close(&mut a, ca, first.expect("a connection"));
            a.sync(ca, pump);
            let c = try_connect(&mut b, cb, 9000, pump);
            say(format!("after a close: {}", outcome(&c)));
            wait();
        }
        "drain" => {
            // Three connections (the uid's quota) whose peer does not read: closed with
            // bytes still in their TX rings, they drain after this process is gone.
            let mut a = Client::attach(socket, "hostile-drain");
            let ca = a.context();
            let slots: Vec<u32> = (0..3)
                .map(|_| match try_connect(&mut a, ca, 9100, pump) {
                    Completion::Done { slot, .. } => slot,
                    other => panic!("{other:?}"),
                })
                .collect();
            for &s in &slots {
                a.wait_flags(s, flags::CONNECTED, pump);
                let chunk = pattern(RING as usize, s);
                let mut idle = std::time::Instant::now();
                while idle.elapsed() < std::time::Duration::from_millis(200) {
                    if a.write_some(ca, s, &chunk) > 0 {
                        idle = std::time::Instant::now();
                    } else {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
            }
            for &s in &slots {
                a.post(
                    ca,
                    Command::Close {
                        slot: s,
                        abort: false,
                    },
                );
            }
            a.sync(ca, pump);
            say("closed".into());
        }
        "connect" => {
            let mut a = Client::attach(socket, "hostile-connect");
            let ca = a.context();
            say(outcome(&try_connect(&mut a, ca, 9100, pump)));
            wait();
            say(outcome(&try_connect(&mut a, ca, 9100, pump)));
            wait();
        }
        other => panic!("unknown action {other}"),
    }
}

#[test]
fn applications_per_uid_attach_is_refused_with_a_reason_and_others_attach() {
    if !root("applications_per_uid_attach_is_refused_with_a_reason_and_others_attach") {
        return;
    }
    let mut net = start("quota-apps");
    let mut hostile = Hostile::spawn(&net, "apps");
    let r = hostile.report(&mut net);
    assert!(r.starts_with("2 attached, then "), "{r}");
    let reason = r.trim_start_matches("2 attached, then ");
    assert!(reason.starts_with(QUOTA_EXCEEDED), "{reason}");
    assert!(reason.contains("uid 65534"), "{reason}");
    assert!(reason.contains("--apps-per-uid"), "{reason}");
    let c = net.until_counters("the refusal counted", |c| c.quota_apps_refused == 1);
    assert_eq!(c.apps_refused, 1);
    // Root (exempt) attaches more than the quota and is served.
    let _more = (net.attach("root-1"), net.attach("root-2"));
    still_served(&mut net, "root-3", 8101);
    // A detach gives the quota back.
    hostile.release();
    assert_eq!(hostile.report(&mut net), "attached again");
    hostile.finish(&mut net);
    assert_eq!(net.counters().quota_apps_refused, 1);
}

#[test]
fn sockets_per_uid_open_is_emfile_and_others_open() {
    if !root("sockets_per_uid_open_is_emfile_and_others_open") {
        return;
    }
    let mut net = start("quota-sockets");
    let mut hostile = Hostile::spawn(&net, "sockets");
    // The layout has 16 slots: the quota (8) refuses first.
    let r = hostile.report(&mut net);
    assert_eq!(r, format!("8 opened, then errno {}", libc::EMFILE));
    net.until_counters("the refusal counted", |c| c.quota_sockets_refused == 1);
    still_served(&mut net, "root", 8201);
    hostile.release();
    assert_eq!(hostile.report(&mut net), "after a close: ok");
    hostile.finish(&mut net);
    assert_eq!(net.counters().quota_sockets_refused, 1);
}

#[test]
fn listeners_per_app_and_per_uid_listen_is_enobufs_and_others_listen() {
    if !root("listeners_per_app_and_per_uid_listen_is_enobufs_and_others_listen") {
        return;
    }
    let mut net = start("quota-listeners");
    let mut hostile = Hostile::spawn(&net, "listeners");
    let r = hostile.report(&mut net);
    let enobufs = format!("errno {}", libc::ENOBUFS);
    // Two for application a, the third over its own quota; one for b, the next over the
    // uid's (3).
    assert_eq!(r, format!("ok, ok, {enobufs}, ok, {enobufs}"));
    net.until_counters("the refusals counted", |c| c.quota_listeners_refused == 2);
    still_served(&mut net, "root", 8301);
    hostile.release();
    assert_eq!(hostile.report(&mut net), "after a close: ok");
    hostile.finish(&mut net);
}

#[test]
fn connections_per_app_and_per_uid_connect_is_enobufs_and_others_connect() {
    if !root("connections_per_app_and_per_uid_connect_is_enobufs_and_others_connect") {
        return;
    }
    let mut net = start("quota-connections");
    let _listener = net.peer.stack.listen(9000, 64).unwrap();
    let mut hostile = Hostile::spawn(&net, "connections");
    let r = hostile.report(&mut net);
    let enobufs = format!("errno {}", libc::ENOBUFS);
    assert_eq!(r, format!("ok, ok, {enobufs}, ok, {enobufs}"));
    net.until_counters("the refusals counted", |c| c.quota_connections_refused == 2);
    still_served(&mut net, "root", 8401);
    hostile.release();
    assert_eq!(hostile.report(&mut net), "after a close: ok");
    hostile.finish(&mut net);
}

#[test]
fn an_accept_over_the_connections_quota_waits_until_the_application_closes_one() {
    // Per-application quotas apply to root as well: no child needed.
    let mut net = Net::start_with("quota-accept", |c| c.quotas = quotas());
    let mut app = net.attach("server");
    let ctx = app.context();
    let l = app.listen(ctx, 8501, &mut || net.peer.pump());
    let peers: Vec<_> = (0..3).map(|_| net.peer.connect(ENGINE_IP, 8501)).collect();
    let first = app.accept(ctx, l, &mut || net.peer.pump());
    let _second = app.accept(ctx, l, &mut || net.peer.pump());
    // The third waits in the core's accept queue, the listener stalled and counted.
    let c = net.until_counters("the stall counted", |c| c.quota_accept_stalls >= 1);
    assert_eq!(c.accepts, 2);
    app.wait_flags(l, flags::RX_STALLED, &mut || net.peer.pump());
    // A Connect is over the quota too.
    let refused = try_connect(&mut app, ctx, 9000, &mut || net.peer.pump());
    assert_eq!(outcome(&refused), format!("errno {}", libc::ENOBUFS));
    // Another application is not held back by this one's quota.
    still_served(&mut net, "other", 8511);
    // Closing one lets the third in.
    close(&mut app, ctx, first.slot);
    let third = app.accept(ctx, l, &mut || net.peer.pump());
    assert_ne!(third.slot, l);
    net.until_counters("the third accepted, and the other's", |c| c.accepts == 4);
    // The third carries bytes.
    let data = pattern(RING as usize, 3);
    net.peer.send_all(peers[2], &data);
    let mut got = Vec::new();
    let mut buf = vec![0u8; RING as usize];
    while got.len() < data.len() {
        let n = app.read_some(ctx, third.slot, &mut buf);
        got.extend_from_slice(&buf[..n]);
        net.peer.pump();
    }
    assert_eq!(got, data);
}

#[test]
fn an_application_with_many_contexts_flooding_commands_does_not_starve_another() {
    let per_app = quotas().commands_per_app;
    let mut net = Net::start_with("quota-commands", |c| {
        c.quotas = quotas();
        c.layout.max_contexts = 8;
    });
    let mut flood = net.attach("flood");
    let ctxs: Vec<u32> = (0..8).map(|_| flood.context()).collect();
    let s = flood.open(ctxs[0], &mut || {});
    // Every context's queue filled with commands that each take a completion.
    let entries = support::layout().queue_entries;
    let mut posted = 0u64;
    for &c in &ctxs {
        for _ in 0..entries {
            let req = flood.req();
            flood.post(
                c,
                Command::SetNoDelay {
                    req,
                    slot: s,
                    nodelay: true,
                },
            );
            posted += 1;
        }
    }
    assert!(
        posted > 4 * per_app as u64,
        "more than a few iterations' worth"
    );
    // The other application's command is served while the flood is queued.
    let mut other = net.attach("other");
    let oc = other.context();
    let opened = other.open(oc, &mut || net.peer.pump());
    assert!(opened < support::layout().max_sockets);
    // The flood is taken in iterations of at most the quota each: deferrals counted.
    let c = net.until_counters("the flood deferred", |c| c.quota_command_deferrals >= 1);
    assert!(c.quota_command_deferrals >= 1);
    // And every one of the flood's contexts is served in the end.
    for &c in &ctxs {
        for _ in 0..entries {
            match flood.completion(c, &mut || net.peer.pump()) {
                Completion::Done { .. } => {}
                other => panic!("{other:?}"),
            }
        }
    }
    still_served(&mut net, "after", 8601);
}

#[test]
fn a_departed_applications_draining_connections_count_for_its_uid_until_gone() {
    if !root("a_departed_applications_draining_connections_count_for_its_uid_until_gone") {
        return;
    }
    let mut net = Net::start_with("quota-drain", |c| {
        c.quotas = Quotas {
            connections_per_app: 3,
            ..quotas()
        };
        c.access.allow_uids = vec![NOBODY];
    });
    std::fs::set_permissions(&net.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let listener = net.peer.stack.listen(9100, 8).unwrap();
    let mut drain = Hostile::spawn(&net, "drain");
    assert_eq!(drain.report(&mut net), "closed");
    drain.finish(&mut net);
    net.until_counters("it departed", |c| c.apps_detached == 1);
    // Its three closed connections still hold the uid's quota (3).
    let mut next = Hostile::spawn(&net, "connect");
    assert_eq!(next.report(&mut net), format!("errno {}", libc::ENOBUFS));
    // The peer reads everything: they finish, the departed application is freed.
    let conns: Vec<_> = (0..3)
        .map(|_| {
            net.peer
                .until("peer accepts", |st| st.accept(listener).ok())
        })
        .collect();
    for c in conns {
        let (got, err) = net.peer.read_to_end(c);
        assert!(err.is_none(), "{err:?}");
        assert!(got.len() > RING as usize, "bytes were left to drain");
    }
    net.until_counters("the orphan freed", |c| c.orphans_freed == 1);
    next.release();
    assert_eq!(next.report(&mut net), "ok");
    next.finish(&mut net);
}

#[test]
fn a_quota_of_zero_is_refused() {
    let c = sluice_service::ServiceConfig::new("/nonexistent", ENGINE_IP, 24);
    assert_eq!(c.max_apps, 1024);
    assert_eq!(c.quotas, Quotas::default());
    assert!(c.validate().is_ok());
    let zeroes: [fn(&mut Quotas); 7] = [
        |q| q.apps_per_uid = 0,
        |q| q.sockets_per_uid = 0,
        |q| q.listeners_per_app = 0,
        |q| q.listeners_per_uid = 0,
        |q| q.connections_per_app = 0,
        |q| q.connections_per_uid = 0,
        |q| q.commands_per_app = 0,
    ];
    for zero in zeroes {
        let mut c = c.clone();
        zero(&mut c.quotas);
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("is 0"), "{e}");
    }
}
