//! The service in flow groups (`sluice engine --cores N --layout flow-groups`; issue 20):
//! one part per flow group of the multi-core engine, part k serving queue pair k of every
//! context and the slots `s % N == k`, over the in-memory device pair. The client routes
//! as libsluice does (a slot's commands to its core, Open round robin). No root needed.

mod support;

use nix::errno::Errno;
use sluice_shm::flags::CONNECTED;
use sluice_shm::{Command, Reuse};
use sluice_tcp::{ConnError, Error};
use support::*;

/// A service of two parts whose applications have 32 slots (16 per part).
fn start(name: &str, adjust: impl FnOnce(&mut sluice_service::ServiceConfig)) -> Net {
    Net::start_groups(name, 2, |sc| {
        sc.layout.max_sockets = 32;
        adjust(sc)
    })
}

/// Connections to or from the application of the service's part `k` (slot parity).
fn on_part(slots: &[u32], k: u32) -> usize {
    slots.iter().filter(|&&s| s % 2 == k).count()
}

#[test]
fn connections_accepted_and_opened_spread_over_both_parts_and_carry_bytes_exactly() {
    let mut net = start("fg-spread", |_| {});
    let mut app = net.attach("fg-spread");
    let ctx = app.context();
    const N: usize = 8;

    // Passive opens: the listener is one part's; SYNs reach the part their tuple hashes to.
    let l = app.listen(ctx, 7000, &mut || net.peer.pump());
    let mut accepted = Vec::new();
    for _ in 0..N {
        let c = net.peer.connect(ENGINE_IP, 7000);
        let rec = app.accept(ctx, l, &mut || net.peer.pump());
        accepted.push((rec.slot, c));
    }
    let slots: Vec<u32> = accepted.iter().map(|a| a.0).collect();
    assert!(
        on_part(&slots, 0) > 0 && on_part(&slots, 1) > 0,
        "accepted on both parts: {slots:?}"
    );
    for (i, &(s, c)) in accepted.iter().enumerate() {
        let down = pattern(2 * RING as usize + 100 * i, i as u32);
        let up = pattern(RING as usize + 77 * i, 100 + i as u32);
        let (at_app, at_peer) = exchange(&mut net, &mut app, ctx, s, c, &down, &up);
        assert_eq!(sha256(&at_app), sha256(&down), "accepted {s}: peer to app");
        assert_eq!(sha256(&at_peer), sha256(&up), "accepted {s}: app to peer");
    }

    // Active opens: Open goes round robin, so the connections start on both parts.
    let pl = net.peer.stack.listen(8000, 16).unwrap();
    let mut opened = Vec::new();
    for _ in 0..N {
        let (t, _) = app.connect(ctx, PEER_IP, 8000, &mut || net.peer.pump());
        let d = net.peer.until("peer accepts", |st| st.accept(pl).ok());
        app.wait_flags(t, CONNECTED, &mut || net.peer.pump());
        opened.push((t, d));
    }
    let slots: Vec<u32> = opened.iter().map(|a| a.0).collect();
    assert_eq!(on_part(&slots, 0), N / 2, "{slots:?}");
    assert_eq!(on_part(&slots, 1), N / 2, "{slots:?}");
    for (i, &(t, d)) in opened.iter().enumerate() {
        let down = pattern(RING as usize + 33 * i, 200 + i as u32);
        let up = pattern(2 * RING as usize + 5 * i, 300 + i as u32);
        let (at_app, at_peer) = exchange(&mut net, &mut app, ctx, t, d, &down, &up);
        assert_eq!(sha256(&at_app), sha256(&down), "opened {t}: peer to app");
        assert_eq!(sha256(&at_peer), sha256(&up), "opened {t}: app to peer");
    }

    for slot in slots
        .iter()
        .chain(accepted.iter().map(|a| &a.0))
        .chain([&l])
    {
        let slot = *slot;
        app.post(ctx, Command::Close { slot, abort: false });
    }
    let counters = net.stop();
    assert_eq!(counters.accepts, N as u64, "{counters}");
    let handed = on_part(&accepted.iter().map(|a| a.0).collect::<Vec<_>>(), 1 - l % 2);
    assert_eq!(
        counters.accepts_handed_over, handed as u64,
        "the other part's accepts went over the link: {counters}"
    );
    assert_eq!(counters.accepts_refused_closed, 0, "{counters}");
    assert_eq!(counters.listen_replicas_failed, 0, "{counters}");
    assert_eq!(
        counters.bad_positions + counters.bad_slots + counters.bad_entries,
        0,
        "{counters}"
    );
}

#[test]
fn a_listener_closed_with_accepts_unread_frees_every_slot_on_both_parts() {
    let mut net = start("fg-unread", |_| {});
    let mut app = net.attach("fg-unread");
    let ctx = app.context();
    let l = app.listen(ctx, 7100, &mut || net.peer.pump());
    const N: u64 = 8;
    let conns: Vec<_> = (0..N).map(|_| net.peer.connect(ENGINE_IP, 7100)).collect();
    // Every connection is announced in the listener's ring; the application reads none.
    net.until_counters("every accept announced", |c| c.accepts == N);
    app.post(
        ctx,
        Command::Close {
            slot: l,
            abort: false,
        },
    );
    // The unread ones are reset, on whichever part holds them.
    let c = net.until_counters("unread accepts reset", |c| c.resets_on_close == N);
    assert!(c.accepts_handed_over > 0, "{c}");
    for conn in conns {
        let (_, end) = net.peer.read_to_end(conn);
        assert_eq!(
            end,
            Some(Error::Connection(ConnError::Reset)),
            "the peer sees the reset"
        );
    }
    // Every slot is free again: the application can open all 32, on both parts.
    let mut slots = Vec::new();
    for _ in 0..32 {
        slots.push(app.open(ctx, &mut || net.peer.pump()));
    }
    assert_eq!(on_part(&slots, 0), 16);
    let req = app.req();
    let errno = app.fails(ctx, Command::Open { req }, &mut || net.peer.pump());
    assert_eq!(errno, Errno::EMFILE as i32, "and no more");
    let counters = net.stop();
    assert_eq!(counters.bad_slots + counters.bad_positions, 0, "{counters}");
}

#[test]
fn an_application_gone_with_sockets_on_both_parts_frees_them_all_and_its_index() {
    // One application at a time: the next attach needs the index every part let go.
    let mut net = start("fg-detach", |sc| sc.max_apps = 1);
    let mut app = net.attach("fg-detach");
    let ctx = app.context();
    let l = app.listen(ctx, 7200, &mut || net.peer.pump());
    let mut conns = Vec::new();
    let mut slots = Vec::new();
    for _ in 0..6 {
        conns.push(net.peer.connect(ENGINE_IP, 7200));
        slots.push(app.accept(ctx, l, &mut || net.peer.pump()).slot);
    }
    let pl = net.peer.stack.listen(8200, 16).unwrap();
    for _ in 0..4 {
        let (t, _) = app.connect(ctx, PEER_IP, 8200, &mut || net.peer.pump());
        conns.push(net.peer.until("peer accepts", |st| st.accept(pl).ok()));
        app.wait_flags(t, CONNECTED, &mut || net.peer.pump());
        slots.push(t);
    }
    assert!(
        on_part(&slots, 0) > 0 && on_part(&slots, 1) > 0,
        "{slots:?}"
    );
    drop(app);
    net.until_counters("detached", |c| c.apps_detached == 1);
    for conn in conns {
        let (_, end) = net.peer.read_to_end(conn);
        assert_eq!(
            end,
            Some(Error::Connection(ConnError::Reset)),
            "every connection is reset"
        );
    }
    // The index comes free once both parts let it go; the port is free on both.
    let deadline = std::time::Instant::now() + WAIT;
    let mut next = loop {
        match Client::try_attach(&net.socket, "fg-detach-next") {
            Ok(c) => break c,
            Err(_) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the index never came free"
                );
                net.peer.pump();
            }
        }
    };
    let ctx = next.context();
    let l = next.listen(ctx, 7200, &mut || net.peer.pump());
    let c = net.peer.connect(ENGINE_IP, 7200);
    let rec = next.accept(ctx, l, &mut || net.peer.pump());
    let (at_app, _) = exchange(&mut net, &mut next, ctx, rec.slot, c, b"again", b"");
    assert_eq!(at_app, b"again");
    let counters = net.stop();
    assert_eq!(counters.resets_on_detach, 10, "{counters}");
    assert_eq!(counters.apps_attached, 2, "{counters}");
}

#[test]
fn binds_and_quotas_are_exact_across_parts() {
    let mut net = start("fg-books", |sc| {
        sc.quotas.listeners_per_app = 1;
        sc.quotas.connections_per_app = 2;
    });
    let mut app = net.attach("fg-books");
    let ctx = app.context();
    let on = |app: &mut Client, net: &mut Net, core: u32| {
        app.open_core = Some(core);
        let s = app.open(ctx, &mut || net.peer.pump());
        assert_eq!(s % 2, core);
        s
    };
    let (a, b) = (on(&mut app, &mut net, 0), on(&mut app, &mut net, 1));
    let bind = |slot, req, port| Command::Bind {
        req,
        slot,
        ip: std::net::Ipv4Addr::UNSPECIFIED,
        port,
        reuse: Reuse::default(),
    };
    let req = app.req();
    app.ok(ctx, bind(a, req, 7300), &mut || net.peer.pump());
    let req = app.req();
    let errno = app.fails(ctx, bind(b, req, 7300), &mut || net.peer.pump());
    assert_eq!(
        errno,
        Errno::EADDRINUSE as i32,
        "the port is bound on part 0"
    );
    // One listener per application, whichever part listens.
    let req = app.req();
    app.ok(
        ctx,
        Command::Listen {
            req,
            slot: a,
            backlog: 4,
        },
        &mut || net.peer.pump(),
    );
    let c = on(&mut app, &mut net, 1);
    let req = app.req();
    app.ok(ctx, bind(c, req, 7301), &mut || net.peer.pump());
    let req = app.req();
    let errno = app.fails(
        ctx,
        Command::Listen {
            req,
            slot: c,
            backlog: 4,
        },
        &mut || net.peer.pump(),
    );
    assert_eq!(
        errno,
        Errno::ENOBUFS as i32,
        "the listeners quota counts part 0's"
    );
    // Two connections per application over both parts.
    let _pl = net.peer.stack.listen(8300, 16).unwrap();
    let (d, e, f) = (
        on(&mut app, &mut net, 0),
        on(&mut app, &mut net, 1),
        on(&mut app, &mut net, 0),
    );
    for s in [d, e] {
        let req = app.req();
        let cmd = Command::Connect {
            req,
            slot: s,
            ip: PEER_IP,
            port: 8300,
        };
        app.ok(ctx, cmd, &mut || net.peer.pump());
    }
    let req = app.req();
    let cmd = Command::Connect {
        req,
        slot: f,
        ip: PEER_IP,
        port: 8300,
    };
    let errno = app.fails(ctx, cmd, &mut || net.peer.pump());
    assert_eq!(errno, Errno::ENOBUFS as i32, "the third over both parts");
    let counters = net.stop();
    assert_eq!(counters.quota_listeners_refused, 1, "{counters}");
    assert_eq!(counters.quota_connections_refused, 1, "{counters}");
}

#[test]
fn a_splice_across_parts_is_refused_and_counted() {
    let mut net = start("fg-splice", |_| {});
    let mut app = net.attach("fg-splice");
    let ctx = app.context();
    app.open_core = Some(0);
    let a = app.open(ctx, &mut || net.peer.pump());
    app.open_core = Some(1);
    let b = app.open(ctx, &mut || net.peer.pump());
    let req = app.req();
    let cmd = Command::Splice {
        req,
        slot_a: a,
        slot_b: b,
    };
    let errno = app.fails(ctx, cmd, &mut || net.peer.pump());
    assert_eq!(errno, Errno::EOPNOTSUPP as i32);
    let counters = net.stop();
    assert_eq!(counters.splices_across_parts, 1, "{counters}");
}

#[test]
fn a_port_closed_on_one_part_is_bound_and_listened_on_another_at_once() {
    let mut net = start("fg-rebind", |_| {});
    let mut app = net.attach("fg-rebind");
    let ctx = app.context();
    for round in 0..6u32 {
        // The listener alternates between the parts; its Close and the next Bind and
        // Listen go to different queues, with no wait in between (as iperf3 re-listens).
        app.open_core = Some(round % 2);
        let l = app.listen(ctx, 7400, &mut || net.peer.pump());
        assert_eq!(l % 2, round % 2);
        let c = net.peer.connect(ENGINE_IP, 7400);
        let rec = app.accept(ctx, l, &mut || net.peer.pump());
        let (at_app, _) = exchange(&mut net, &mut app, ctx, rec.slot, c, b"round", b"");
        assert_eq!(at_app, b"round");
        for slot in [rec.slot, l] {
            app.post(ctx, Command::Close { slot, abort: false });
        }
    }
    let counters = net.stop();
    assert_eq!(counters.accepts, 6, "{counters}");
    assert_eq!(counters.listen_replicas_failed, 0, "{counters}");
}

#[test]
fn both_parts_sleep_when_idle_and_wake_for_accepts_handed_over_and_data() {
    // 30 s naps: a lost wake-up stalls the traffic below past its 5 s bound, instead of
    // hiding behind the default 100 ms cap.
    let mut net = Net::start_groups_sleeping("fg-wake", 2, std::time::Duration::from_secs(30));
    let mut app = net.attach("fg-wake");
    let ctx = app.context();
    let l = app.listen(ctx, 7500, &mut || net.peer.pump());
    let bells = net.bells.lock().unwrap().clone();
    assert_eq!(bells.len(), 2, "one thread per flow group");

    // Idle: nothing to pump, the application posts nothing.
    let before: Vec<_> = bells.iter().map(|b| b.counters()).collect();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let after: Vec<_> = bells.iter().map(|b| b.counters()).collect();
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        // A thread asleep since before the idle spell (a 30 s nap) starts no new sleep.
        let asleep_throughout = b.sleeps > 0 && a.sleeps == b.sleeps && bells[i].announced();
        assert!(
            a.sleeps > b.sleeps || asleep_throughout,
            "thread {i} slept while idle: {b:?} -> {a:?}"
        );
    }
    let idle = net.until_counters("the parts announced sleeps", |c| c.sleeps > 0);
    assert_eq!(idle.doorbells_unwatched, 0, "{idle}");

    // Traffic on both parts: accepts (some handed over between the parts) and bytes both
    // ways, each started while the engine's threads may sleep.
    let start = std::time::Instant::now();
    const N: usize = 8;
    let mut accepted = Vec::new();
    for i in 0..N {
        // Idle again between connections, so each SYN and command meets sleeping parts.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let c = net.peer.connect(ENGINE_IP, 7500);
        let rec = app.accept(ctx, l, &mut || net.peer.pump());
        let down = pattern(RING as usize + 91 * i, 400 + i as u32);
        let up = pattern(RING as usize / 2 + 13 * i, 500 + i as u32);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (at_app, at_peer) = exchange(&mut net, &mut app, ctx, rec.slot, c, &down, &up);
        assert_eq!(
            sha256(&at_app),
            sha256(&down),
            "slot {}: peer to app",
            rec.slot
        );
        assert_eq!(
            sha256(&at_peer),
            sha256(&up),
            "slot {}: app to peer",
            rec.slot
        );
        accepted.push(rec.slot);
    }
    let took = start.elapsed();
    assert!(
        on_part(&accepted, 0) > 0 && on_part(&accepted, 1) > 0,
        "accepted on both parts: {accepted:?}"
    );
    // Not a performance bound: the 8 x 40 ms of idling plus slack; a lost wake-up waits
    // for the 30 s max_sleep (or the client's 20 s WAIT).
    assert!(took < std::time::Duration::from_secs(5), "took {took:?}");
    let woken: u64 = bells.iter().map(|b| b.counters().woken).sum();
    for slot in accepted.iter().chain([&l]) {
        app.post(
            ctx,
            Command::Close {
                slot: *slot,
                abort: false,
            },
        );
    }
    let counters = net.stop();
    let handed = on_part(&accepted, 1 - l % 2);
    assert!(handed > 0, "{accepted:?}, listener {l}");
    assert_eq!(counters.accepts_handed_over, handed as u64, "{counters}");
    assert!(counters.sleeps > 0, "{counters}");
    assert!(woken > 0, "a thread was woken by its doorbell");
    assert_eq!(
        counters.bad_positions + counters.bad_slots + counters.bad_entries,
        0,
        "{counters}"
    );
}
