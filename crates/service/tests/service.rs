//! The engine side of service mode end to end without root: an engine running the service
//! over the in-memory device pair, a plain core as the peer, and a minimal application
//! written on `sluice-shm` (docs/service.md is the spec these tests check).

mod support;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use sluice_shm::flags::{
    ALLOCATED, CLOSED, CONNECTED, CONNECTING, ERROR, LISTENING, RX_FIN, RX_STALLED, TX_SHUT,
};
use sluice_shm::{Command, Completion, Congestion, Shut, PAYLOAD_BYTES};
use sluice_tcp::{ConnError, ConnId, Error, TcpState};
use support::*;

/// Moves `data` from the peer's connection into the application's slot; returns what the
/// application read.
fn peer_to_app(
    net: &mut Net,
    app: &mut Client,
    ctx: u32,
    s: u32,
    c: ConnId,
    data: &[u8],
) -> Vec<u8> {
    let deadline = Instant::now() + WAIT;
    let (mut sent, mut got) = (0, Vec::with_capacity(data.len()));
    let mut buf = vec![0u8; 3000];
    while got.len() < data.len() {
        if sent < data.len() {
            match net.peer.stack.send(c, &data[sent..]) {
                Ok(n) => sent += n,
                Err(Error::WouldBlock) => {}
                Err(e) => panic!("peer send: {e}"),
            }
        }
        let n = app.read_some(ctx, s, &mut buf);
        got.extend_from_slice(&buf[..n]);
        net.peer.pump();
        assert!(
            Instant::now() < deadline,
            "stuck after {} of {} bytes",
            got.len(),
            data.len()
        );
    }
    got
}

/// Moves `data` from the application's slot to the peer's connection; returns what the
/// peer read.
fn app_to_peer(
    net: &mut Net,
    app: &mut Client,
    ctx: u32,
    s: u32,
    c: ConnId,
    data: &[u8],
) -> Vec<u8> {
    let deadline = Instant::now() + WAIT;
    let (mut sent, mut got) = (0, Vec::with_capacity(data.len()));
    let mut buf = vec![0u8; 16 << 10];
    while got.len() < data.len() {
        if sent < data.len() {
            // Odd-sized writes, so ring positions fall everywhere.
            let chunk = (data.len() - sent).min(2999);
            sent += app.write_some(ctx, s, &data[sent..sent + chunk]);
        }
        loop {
            match net.peer.stack.recv(c, &mut buf) {
                Ok(0) => panic!("peer saw end of stream early"),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(Error::WouldBlock) => break,
                Err(e) => panic!("peer recv: {e}"),
            }
        }
        net.peer.pump();
        assert!(
            Instant::now() < deadline,
            "stuck after {} of {} bytes",
            got.len(),
            data.len()
        );
    }
    got
}

/// A listener on `port` and one connection from the peer, accepted: (listener slot,
/// connection slot, the peer's connection).
fn accepted(net: &mut Net, app: &mut Client, ctx: u32, port: u16) -> (u32, u32, ConnId) {
    let l = app.listen(ctx, port, &mut || net.peer.pump());
    let (s, c) = accept_one(net, app, ctx, l, port);
    (l, s, c)
}

/// One more connection from the peer to listener `l` on `port`, accepted.
fn accept_one(net: &mut Net, app: &mut Client, ctx: u32, l: u32, port: u16) -> (u32, ConnId) {
    let c = net.peer.connect(ENGINE_IP, port);
    let rec = app.accept(ctx, l, &mut || net.peer.pump());
    let (peer_local, _) = net.peer.stack.endpoints(c).unwrap();
    assert_eq!(rec.peer, peer_local, "the accept record names the peer");
    assert_eq!(rec.local_port, port);
    (rec.slot, c)
}

/// Waits until the peer's connection fails; returns its error.
fn peer_error(net: &mut Net, c: ConnId) -> Error {
    let mut buf = [0u8; 4096];
    net.peer.until("the peer's connection fails", |s| loop {
        match s.recv(c, &mut buf) {
            Ok(n) if n > 0 => continue,
            Ok(_) | Err(Error::WouldBlock) => return None,
            Err(e) => return Some(e),
        }
    })
}

#[test]
fn an_application_attaches_gets_contexts_and_is_woken_while_the_engine_sleeps() {
    let mut net = Net::start("attach");
    let mut app = net.attach("attach-test");
    assert_eq!(app.engine.ip, ENGINE_IP);
    assert_eq!(app.engine.prefix_len, 24);
    assert_eq!(app.engine.app_idle_us, 100);
    assert_eq!(app.layout, layout());
    assert_eq!(app.context(), 0);
    assert_eq!(app.context(), 1);
    assert!(app.try_context().is_err(), "max_contexts is 2");
    let mut pump = || net.peer.pump();
    // Each context's commands complete on its own queue.
    let a = app.open(0, &mut pump);
    let b = app.open(1, &mut pump);
    assert_ne!(a, b);
    assert_eq!(app.flags(a), ALLOCATED);
    // Idle long enough for the engine to sleep; a command then reaches it by the doorbell.
    let deadline = Instant::now() + WAIT;
    while app.region.engine_sleeping().load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the idle engine never slept");
        std::thread::sleep(Duration::from_millis(1));
    }
    // A sleeping context is signalled when its completion is posted.
    let region = app.region.clone();
    let flag = region.context_sleeping(0).unwrap();
    flag.store(1, Ordering::SeqCst);
    let c = app.open(0, &mut pump);
    // The engine signals sleepers at the end of the iteration that posted the completion,
    // which the application may already have read: wait for the signal, boundedly.
    let deadline = Instant::now() + WAIT;
    while !app.ctxs[0].eventfd.drain() {
        assert!(
            Instant::now() < deadline,
            "the sleeping context was signalled"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    flag.store(0, Ordering::SeqCst);
    assert!(![a, b].contains(&c));
    let counters = net.stop();
    assert_eq!(counters.apps_attached, 1);
    assert_eq!(
        (counters.contexts_created, counters.contexts_refused),
        (2, 1)
    );
    assert!(counters.sleeps >= 1, "{counters}");
    assert!(counters.wakeups >= 1, "{counters}");
    assert!(app.engine_gone());
}

#[test]
fn accepted_connection_carries_bytes_both_ways_across_the_ring_wrap() {
    let mut net = Net::start("stream");
    let mut app = net.attach("stream");
    let ctx = app.context();
    let (l, s, c) = accepted(&mut net, &mut app, ctx, 7000);
    assert_eq!(app.flags(l) & LISTENING, LISTENING);
    assert_eq!(
        app.block(l).local_addr(),
        SocketAddrV4::new(ENGINE_IP, 7000)
    );
    assert_eq!(
        app.flags(s) & (ALLOCATED | CONNECTED),
        ALLOCATED | CONNECTED
    );
    let (peer_local, _) = net.peer.stack.endpoints(c).unwrap();
    assert_eq!(app.block(s).peer_addr(), peer_local);
    assert_eq!(
        app.block(s).local_addr(),
        SocketAddrV4::new(ENGINE_IP, 7000)
    );

    // More than 4 × ring_size each way: every byte crosses the wrap point several times.
    let down = pattern(5 * RING as usize + 1234, 1);
    let got = peer_to_app(&mut net, &mut app, ctx, s, c, &down);
    assert_eq!(sha256(&got), sha256(&down));
    let up = pattern(6 * RING as usize + 777, 2);
    let got = app_to_peer(&mut net, &mut app, ctx, s, c, &up);
    assert_eq!(sha256(&got), sha256(&up));

    // A graceful close: the peer reads end of stream, then closes its side.
    app.post(
        ctx,
        Command::Close {
            slot: s,
            abort: false,
        },
    );
    let (rest, err) = net.peer.read_to_end(c);
    assert!(rest.is_empty() && err.is_none(), "{err:?}");
    net.peer.stack.close(c).unwrap();
    app.post(
        ctx,
        Command::Close {
            slot: l,
            abort: false,
        },
    );
    let counters = net.until_counters("the engine moved every byte", |k| {
        k.rx_bytes == down.len() as u64 && k.tx_bytes == up.len() as u64
    });
    assert!(
        counters.rx_stalls > 0,
        "the small ring stalled the receiver: {counters}"
    );
    assert_eq!(counters.accepts, 1);
    let counters = net.stop();
    assert_eq!(
        counters.resets_on_close + counters.resets_bad_input,
        0,
        "{counters}"
    );
    assert_eq!(
        counters.bad_positions + counters.bad_slots + counters.bad_entries,
        0
    );
}

#[test]
fn connect_to_the_peer_then_shutdown_write_keeps_the_read_side_open() {
    let mut net = Net::start("connect");
    let mut app = net.attach("connect");
    let ctx = app.context();
    let listener = net.peer.stack.listen(8000, 8).unwrap();
    let (s, local) = app.connect(ctx, PEER_IP, 8000, &mut || net.peer.pump());
    assert!(app.flags(s) & (CONNECTING | CONNECTED) != 0);
    let c = net
        .peer
        .until("peer accepts", |st| st.accept(listener).ok());
    app.wait_flags(s, CONNECTED, &mut || net.peer.pump());
    assert_eq!(app.flags(s) & CONNECTING, 0);
    assert_eq!(app.block(s).peer_addr(), SocketAddrV4::new(PEER_IP, 8000));
    assert_eq!(
        app.block(s).local_addr(),
        SocketAddrV4::new(ENGINE_IP, local)
    );
    assert_eq!(
        net.peer.stack.endpoints(c).unwrap().1,
        SocketAddrV4::new(ENGINE_IP, local)
    );

    let up = pattern(3 * RING as usize, 3);
    assert_eq!(app_to_peer(&mut net, &mut app, ctx, s, c, &up), up);
    // Shutdown(Write): the FIN follows what is queued; reading goes on.
    let tail = pattern(100, 4);
    assert_eq!(app.write_some(ctx, s, &tail), 100);
    let req = app.req();
    app.ok(
        ctx,
        Command::Shutdown {
            req,
            slot: s,
            how: Shut::Write,
        },
        &mut || net.peer.pump(),
    );
    assert_eq!(app.flags(s) & TX_SHUT, TX_SHUT);
    let (rest, err) = net.peer.read_to_end(c);
    assert_eq!(
        (rest, err),
        (tail, None),
        "the peer reads the tail, then end of stream"
    );
    let down = pattern(2 * RING as usize + 5, 5);
    assert_eq!(peer_to_app(&mut net, &mut app, ctx, s, c, &down), down);
    net.peer.stack.close(c).unwrap();
    app.wait_flags(s, RX_FIN, &mut || net.peer.pump());
    app.wait_flags(s, CLOSED, &mut || net.peer.pump());
    app.post(
        ctx,
        Command::Close {
            slot: s,
            abort: false,
        },
    );
    app.sync(ctx, &mut net_pump(&mut net));
    let counters = net.stop();
    assert_eq!(
        counters.resets_on_close + counters.resets_on_stop,
        0,
        "{counters}"
    );
}

#[test]
fn abort_and_close_with_unread_data_reset_the_peer() {
    let mut net = Net::start("abort");
    let mut app = net.attach("abort");
    let ctx = app.context();
    let (l, s1, c1) = accepted(&mut net, &mut app, ctx, 7001);
    let (s2, c2) = accept_one(&mut net, &mut app, ctx, l, 7001);
    // SO_LINGER 0: Close with abort sends RST at once.
    app.post(
        ctx,
        Command::Close {
            slot: s1,
            abort: true,
        },
    );
    assert_eq!(
        peer_error(&mut net, c1),
        Error::Connection(ConnError::Reset)
    );
    // RFC 2525 2.17: closing with bytes unread in the RX ring resets too.
    net.peer.send_all(c2, b"never read");
    let b = app.block(s2);
    net.peer.until("the bytes reach the ring", |_| {
        (b.rx_tail().load(Ordering::Acquire) == 10).then_some(())
    });
    app.post(
        ctx,
        Command::Close {
            slot: s2,
            abort: false,
        },
    );
    assert_eq!(
        peer_error(&mut net, c2),
        Error::Connection(ConnError::Reset)
    );
    app.sync(ctx, &mut net_pump(&mut net));
    let counters = net.stop();
    assert_eq!(counters.resets_on_close, 2, "{counters}");
}

#[test]
fn bad_input_fails_commands_or_resets_one_connection_and_is_counted() {
    let mut net = Net::start("bad");
    let mut app = net.attach("bad");
    let ctx = app.context();
    let mut pump = || net.peer.pump();

    // An unknown opcode with a request id: Failed(EINVAL).
    let mut entry = [0u8; PAYLOAD_BYTES];
    entry[0] = 200;
    entry[4..8].copy_from_slice(&77u32.to_le_bytes());
    assert_eq!(
        app.call_raw(ctx, &entry, &mut pump),
        Completion::Failed {
            req: 77,
            errno: Errno::EINVAL as i32
        }
    );
    // A slot out of range, and one never opened: EBADF.
    let req = app.req();
    let bind = |req, slot| Command::Bind {
        req,
        slot,
        ip: Ipv4Addr::UNSPECIFIED,
        port: 9,
        reuse: Default::default(),
    };
    assert_eq!(
        app.fails(ctx, bind(req, 999), &mut pump),
        Errno::EBADF as i32
    );
    let req = app.req();
    assert_eq!(app.fails(ctx, bind(req, 5), &mut pump), Errno::EBADF as i32);
    // Doorbells for bad slots are dropped (counted); the queue goes on.
    app.post(ctx, Command::Send { slot: 12345 });
    app.post(ctx, Command::Consumed { slot: 7 });
    // Wrong address and wrong state.
    let s = app.open(ctx, &mut pump);
    let req = app.req();
    let foreign = Command::Bind {
        req,
        slot: s,
        ip: Ipv4Addr::new(10, 9, 0, 77),
        port: 9,
        reuse: Default::default(),
    };
    assert_eq!(
        app.fails(ctx, foreign, &mut pump),
        Errno::EADDRNOTAVAIL as i32
    );
    let req = app.req();
    let shut = Command::Shutdown {
        req,
        slot: s,
        how: Shut::Write,
    };
    assert_eq!(app.fails(ctx, shut, &mut pump), Errno::ENOTCONN as i32);
    app.post(
        ctx,
        Command::Close {
            slot: s,
            abort: false,
        },
    );

    let (l, s1, c1) = accepted(&mut net, &mut app, ctx, 7002);
    let (s2, c2) = accept_one(&mut net, &mut app, ctx, l, 7002);
    let (s3, c3) = accept_one(&mut net, &mut app, ctx, l, 7002);
    let req = app.req();
    let again = Command::Bind {
        req,
        slot: s1,
        ip: Ipv4Addr::UNSPECIFIED,
        port: 1,
        reuse: Default::default(),
    };
    assert_eq!(
        app.fails(ctx, again, &mut net_pump(&mut net)),
        Errno::EINVAL as i32
    );
    let req = app.req();
    let connected = Command::Connect {
        req,
        slot: s1,
        ip: PEER_IP,
        port: 1,
    };
    assert_eq!(
        app.fails(ctx, connected, &mut net_pump(&mut net)),
        Errno::EISCONN as i32
    );

    // tx_tail beyond tx_head + ring_size: that connection is reset with EFAULT.
    let b1 = app.block(s1);
    b1.tx_tail().store(RING as u64 + 1, Ordering::Release);
    app.post(ctx, Command::Send { slot: s1 });
    app.wait_flags(s1, ERROR, &mut net_pump(&mut net));
    assert_eq!(
        app.block(s1).error().load(Ordering::Acquire),
        Errno::EFAULT as u32
    );
    assert_eq!(
        peer_error(&mut net, c1),
        Error::Connection(ConnError::Reset)
    );

    // rx_head moved backwards: reset with EFAULT as well.
    let first = pattern(100, 6);
    assert_eq!(peer_to_app(&mut net, &mut app, ctx, s3, c3, &first), first);
    let b3 = app.block(s3);
    net.peer.send_all(c3, &pattern(100, 7));
    net.peer.until("more bytes reach the ring", |_| {
        (b3.rx_tail().load(Ordering::Acquire) == 200).then_some(())
    });
    b3.rx_head().store(50, Ordering::Release);
    app.post(ctx, Command::Consumed { slot: s3 });
    app.wait_flags(s3, ERROR, &mut net_pump(&mut net));
    assert_eq!(
        app.block(s3).error().load(Ordering::Acquire),
        Errno::EFAULT as u32
    );
    assert_eq!(
        peer_error(&mut net, c3),
        Error::Connection(ConnError::Reset)
    );

    // The application's other connection is untouched.
    let down = pattern(3 * RING as usize, 8);
    assert_eq!(peer_to_app(&mut net, &mut app, ctx, s2, c2, &down), down);
    let up = pattern(3 * RING as usize, 9);
    assert_eq!(app_to_peer(&mut net, &mut app, ctx, s2, c2, &up), up);
    // The reset slots are still the application's until it closes them.
    for s in [s1, s3] {
        app.post(
            ctx,
            Command::Close {
                slot: s,
                abort: false,
            },
        );
    }
    app.sync(ctx, &mut net_pump(&mut net));
    let counters = net.stop();
    assert_eq!(counters.bad_entries, 1, "{counters}");
    assert_eq!(counters.bad_slots, 4, "{counters}");
    assert_eq!(counters.bad_positions, 2, "{counters}");
    assert_eq!(counters.resets_bad_input, 2, "{counters}");
    assert!(counters.bad_state >= 4, "{counters}");
    assert_eq!(
        counters.resets_on_stop, 1,
        "only the good connection was left: {counters}"
    );
}

/// A pump closure for `net`'s peer.
fn net_pump(net: &mut Net) -> impl FnMut() + '_ {
    move || net.peer.pump()
}

#[test]
fn an_application_that_goes_away_leaves_nothing_behind() {
    let mut net = Net::start("detach");
    let mut app = net.attach("leaver");
    let ctx = app.context();
    let (_l, _s, c_in) = accepted(&mut net, &mut app, ctx, 7100);
    let listener = net.peer.stack.listen(8100, 8).unwrap();
    let (s_out, _) = app.connect(ctx, PEER_IP, 8100, &mut net_pump(&mut net));
    app.wait_flags(s_out, CONNECTED, &mut net_pump(&mut net));
    let c_out = net
        .peer
        .until("peer accepts", |st| st.accept(listener).ok());
    // Unread bytes on both sides do not matter: the engine resets everything.
    net.peer.send_all(c_in, b"pending");
    drop(app);
    assert_eq!(
        peer_error(&mut net, c_in),
        Error::Connection(ConnError::Reset)
    );
    assert_eq!(
        peer_error(&mut net, c_out),
        Error::Connection(ConnError::Reset)
    );
    let counters = net.until_counters("the engine saw the hang-up", |k| k.apps_detached == 1);
    assert_eq!(counters.resets_on_detach, 2, "{counters}");
    // The port and the listener are free again for the next application.
    let mut next = net.attach("next");
    let ctx = next.context();
    let (_, s, c) = accepted(&mut net, &mut next, ctx, 7100);
    let data = pattern(2 * RING as usize, 10);
    assert_eq!(peer_to_app(&mut net, &mut next, ctx, s, c, &data), data);
    let counters = net.stop();
    assert_eq!((counters.apps_attached, counters.apps_detached), (2, 2));
}

#[test]
fn two_applications_are_isolated_from_each_other() {
    let mut net = Net::start("two");
    let mut a = net.attach("a");
    let mut b = net.attach("b");
    assert_ne!(a.app, b.app);
    let (ca, cb) = (a.context(), b.context());
    let (la, sa, pa) = accepted(&mut net, &mut a, ca, 7200);
    // B's slots are its own: A's slot numbers name nothing in B's region.
    for s in [la, sa] {
        let req = b.req();
        let cmd = Command::Listen {
            req,
            slot: s,
            backlog: 1,
        };
        assert_eq!(
            b.fails(cb, cmd, &mut net_pump(&mut net)),
            Errno::EBADF as i32
        );
    }
    b.post(
        cb,
        Command::Close {
            slot: sa,
            abort: true,
        },
    );
    b.post(cb, Command::Send { slot: sa });
    // Ports are shared: A's port is in use for B.
    let s = b.open(cb, &mut net_pump(&mut net));
    let req = b.req();
    let taken = Command::Bind {
        req,
        slot: s,
        ip: ENGINE_IP,
        port: 7200,
        reuse: Default::default(),
    };
    assert_eq!(
        b.fails(cb, taken, &mut net_pump(&mut net)),
        Errno::EADDRINUSE as i32
    );
    b.post(
        cb,
        Command::Close {
            slot: s,
            abort: false,
        },
    );
    let (_, sb, pb) = accepted(&mut net, &mut b, cb, 7201);
    // B breaks its own connection; A's goes on.
    b.block(sb).tx_tail().store(u64::MAX, Ordering::Release);
    b.post(cb, Command::Send { slot: sb });
    assert_eq!(
        peer_error(&mut net, pb),
        Error::Connection(ConnError::Reset)
    );
    let data = pattern(4 * RING as usize + 1, 11);
    assert_eq!(peer_to_app(&mut net, &mut a, ca, sa, pa, &data), data);
    assert_eq!(app_to_peer(&mut net, &mut a, ca, sa, pa, &data), data);
    assert_eq!(a.flags(sa) & ERROR, 0);
    let counters = net.stop();
    assert_eq!(counters.resets_bad_input, 1, "{counters}");
}

#[test]
fn engine_shutdown_resets_connections_and_hangs_up_on_applications() {
    let mut net = Net::start("stop");
    let mut app = net.attach("stays");
    let ctx = app.context();
    let (_, _, c) = accepted(&mut net, &mut app, ctx, 7300);
    assert!(net.socket.exists());
    assert!(!app.engine_gone());
    let counters = net.stop();
    assert_eq!(counters.resets_on_stop, 1, "{counters}");
    assert!(app.engine_gone(), "the control socket hung up");
    assert!(!net.socket.exists(), "the socket file is removed");
    assert_eq!(peer_error(&mut net, c), Error::Connection(ConnError::Reset));
}

#[test]
fn a_listener_without_free_slots_stalls_and_closing_it_resets_unread_connections() {
    let mut net = Net::start("stall");
    let mut app = net.attach("stall");
    let ctx = app.context();
    let l = app.listen(ctx, 7400, &mut net_pump(&mut net));
    // Use up all but one slot (16 in the layout, one is the listener).
    let fillers: Vec<u32> = (0..14)
        .map(|_| app.open(ctx, &mut net_pump(&mut net)))
        .collect();
    let c1 = net.peer.connect(ENGINE_IP, 7400);
    let c2 = net.peer.connect(ENGINE_IP, 7400);
    // The first takes the last slot; the second waits in the core's backlog.
    let region = app.region.clone();
    let lb = sluice_shm::SocketBlock::new(&region, l).unwrap();
    net.peer.until("one record", |_| {
        (lb.rx_tail().load(Ordering::Acquire) == 16).then_some(())
    });
    app.wait_flags(l, sluice_shm::flags::RX_STALLED, &mut net_pump(&mut net));
    let stalled = net.until_counters("a stall", |k| k.accept_stalls >= 1);
    assert_eq!(stalled.accepts, 1);
    // A slot frees up: the second connection is accepted too (neither record is read).
    app.post(
        ctx,
        Command::Close {
            slot: fillers[0],
            abort: false,
        },
    );
    net.peer.until("two records", |_| {
        (lb.rx_tail().load(Ordering::Acquire) == 32).then_some(())
    });
    // Closing the listener resets both: nobody took them from its ring.
    app.post(
        ctx,
        Command::Close {
            slot: l,
            abort: false,
        },
    );
    for c in [c1, c2] {
        assert_eq!(peer_error(&mut net, c), Error::Connection(ConnError::Reset));
    }
    app.sync(ctx, &mut net_pump(&mut net));
    let counters = net.stop();
    assert_eq!(counters.accepts, 2, "{counters}");
    assert_eq!(counters.resets_on_close, 2, "{counters}");
    assert_eq!(counters.resets_on_stop, 0, "{counters}");
}

/// docs/service.md: CLOSED says the connection is over and nothing more will come, so it is
/// published only once every byte received before the FIN is in the RX ring. Here the ring
/// is full and the core holds the rest when the connection closes (the peer's FIN, our
/// FIN, its ACK): CLOSED must wait for the application to read and the engine to place it.
#[test]
fn closed_is_published_only_after_every_received_byte_is_in_the_ring() {
    let mut net = Net::start("closed-after-data");
    let mut app = net.attach("closed-after-data");
    let ctx = app.context();
    let (_l, s, c) = accepted(&mut net, &mut app, ctx, 7500);
    // Three rings' worth: one in the ring, the rest held by the engine's core.
    let data = pattern(3 * RING as usize + 321, 12);
    net.peer.send_all(c, &data);
    net.peer.stack.shutdown(c).unwrap();
    let b = app.block(s);
    net.peer.until("the ring fills", |_| {
        (b.rx_tail().load(Ordering::Acquire) == RING as u64).then_some(())
    });
    app.wait_flags(s, RX_STALLED, &mut net_pump(&mut net));
    // Our FIN: the peer's ACK of it closes the connection in the engine's core.
    let req = app.req();
    app.ok(
        ctx,
        Command::Shutdown {
            req,
            slot: s,
            how: Shut::Write,
        },
        &mut net_pump(&mut net),
    );
    net.peer.until("the peer acknowledges our FIN", |st| {
        (st.state(c) == Ok(TcpState::TimeWait)).then_some(())
    });
    // Give the engine several iterations to take the ACK and report the close.
    let check = |app: &Client| {
        let f = app.flags(s);
        if f & CLOSED != 0 {
            assert_eq!(f & RX_STALLED, 0, "CLOSED while the engine holds bytes");
            assert_eq!(
                app.block(s).rx_tail().load(Ordering::Acquire),
                data.len() as u64,
                "CLOSED before every byte is in the ring"
            );
        }
    };
    for _ in 0..5 {
        app.sync(ctx, &mut net_pump(&mut net));
        check(&app);
    }
    assert_eq!(
        app.flags(s) & (RX_FIN | CLOSED),
        0,
        "the ring is still full"
    );
    let got = app.read_to_fin(ctx, s, &mut net_pump(&mut net));
    assert_eq!(sha256(&got), sha256(&data));
    app.wait_flags(s, CLOSED, &mut net_pump(&mut net));
    check(&app);
    assert_eq!(app.flags(s) & RX_FIN, RX_FIN);
}

/// An application that never takes its completions stalls only its own context: the engine
/// still goes to sleep (it does not spin on a command it cannot answer), and once the
/// application takes its completions and posts again, the waiting command runs.
#[test]
fn a_context_that_never_takes_its_completions_does_not_keep_the_engine_awake() {
    let mut net = Net::start("full-completions");
    let mut app = net.attach("full-completions");
    let ctx = app.context();
    let entries = layout().queue_entries;
    let bad = |req| Command::SetNoDelay {
        req,
        slot: 999,
        nodelay: true,
    };
    // Fill the completion queue, then one more command that has no room to be answered.
    for req in 1..=entries {
        app.post(ctx, bad(req));
    }
    net.until_counters("the completion queue fills", |k| {
        k.completions == entries as u64
    });
    app.post(ctx, bad(entries + 1));
    let stuck = net.counters();
    net.until_counters("the engine sleeps with the command waiting", |k| {
        k.sleeps >= stuck.sleeps + 3
    });
    assert_eq!(net.counters().completions, entries as u64);
    // The application catches up; its next command wakes the engine, which runs both.
    for req in 1..=entries {
        let c = app.completion(ctx, &mut net_pump(&mut net));
        assert_eq!(c.req(), req);
    }
    app.post(ctx, bad(entries + 2));
    for req in [entries + 1, entries + 2] {
        let c = app.completion(ctx, &mut net_pump(&mut net));
        assert_eq!(
            c,
            Completion::Failed {
                req,
                errno: Errno::EBADF as i32
            }
        );
    }
    let counters = net.stop();
    assert_eq!(counters.corrupt_queues, 0, "{counters}");
}

/// A connection reset for a bad position is dead: the engine places nothing more in its
/// ring, so it must not leave RX_STALLED set (an application reading the error after the
/// bytes the engine still holds would wait for them forever).
#[test]
fn a_connection_reset_for_bad_input_does_not_stay_stalled() {
    let mut net = Net::start("dead-not-stalled");
    let mut app = net.attach("dead-not-stalled");
    let ctx = app.context();
    let (_l, s, c) = accepted(&mut net, &mut app, ctx, 7600);
    net.peer.send_all(c, &pattern(2 * RING as usize, 13));
    app.wait_flags(s, RX_STALLED, &mut net_pump(&mut net));
    // rx_head past rx_tail: reset with EFAULT.
    app.block(s)
        .rx_head()
        .store(RING as u64 + 1, Ordering::Release);
    app.post(ctx, Command::Consumed { slot: s });
    let f = app.wait_flags(s, ERROR, &mut net_pump(&mut net));
    assert_eq!(
        app.block(s).error().load(Ordering::Acquire),
        Errno::EFAULT as u32
    );
    assert_eq!(f & RX_STALLED, 0, "flags {f:#x}");
    assert_eq!(peer_error(&mut net, c), Error::Connection(ConnError::Reset));
}

/// The control socket takes whatever an application sends without blocking the engine or
/// keeping anything: a connection that never says Hello, an oversized message, bad JSON,
/// descriptors passed along (closed at once), requests beyond the context limit.
#[test]
fn control_messages_that_are_bad_cost_the_sender_only() {
    use nix::sys::socket::{send, MsgFlags};
    use sluice_shm::control::{connect_to, recv_message, send_message, Reply, Request};
    use std::os::fd::AsFd;
    let mut net = Net::start("bad-control");
    // Silent connections: the engine never waits for them.
    let silent: Vec<_> = (0..4).map(|_| connect_to(&net.socket).unwrap()).collect();
    // A Hello carrying a descriptor: the engine closes its copy (the pipe sees EOF).
    let (pipe_r, pipe_w) = nix::unistd::pipe().unwrap();
    let sock = connect_to(&net.socket).unwrap();
    let hello = Request::Hello {
        version: sluice_shm::control::PROTOCOL_VERSION,
        pid: 1,
        name: "x".repeat(3000),
    };
    send_message(sock.as_fd(), &hello, &[pipe_w.as_fd()]).unwrap();
    drop(pipe_w);
    let mut pfd = [nix::poll::PollFd::new(
        pipe_r.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    let n = nix::poll::poll(&mut pfd, nix::poll::PollTimeout::try_from(WAIT).unwrap()).unwrap();
    assert_eq!(n, 1, "the engine kept the descriptor passed with Hello");
    // A first message that is too long, and one that is not JSON: dropped.
    for body in [vec![b'{'; 10_000], b"not json".to_vec()] {
        let s = connect_to(&net.socket).unwrap();
        send(
            std::os::fd::AsRawFd::as_raw_fd(&s),
            &body,
            MsgFlags::empty(),
        )
        .unwrap();
    }
    // An attached application: bad messages are refused, it stays attached.
    let mut app = net.attach("noisy");
    for body in [vec![b'['; 10_000], b"{}".to_vec()] {
        send(
            std::os::fd::AsRawFd::as_raw_fd(&app.sock),
            &body,
            MsgFlags::empty(),
        )
        .unwrap();
        let mut pfd = [nix::poll::PollFd::new(
            app.sock.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        nix::poll::poll(&mut pfd, nix::poll::PollTimeout::try_from(WAIT).unwrap()).unwrap();
        let (reply, fds) = recv_message::<Reply>(app.sock.as_fd()).unwrap().unwrap();
        assert!(matches!(reply, Reply::Refused { .. }), "{reply:?}");
        assert!(fds.is_empty());
    }
    assert_eq!(app.context(), 0);
    assert_eq!(app.context(), 1);
    for _ in 0..3 {
        assert!(app.try_context().is_err());
    }
    // Everything still works for it and for the others.
    let ctx = 0;
    let (_, s, c) = accepted(&mut net, &mut app, ctx, 7700);
    let data = pattern(2 * RING as usize, 14);
    assert_eq!(peer_to_app(&mut net, &mut app, ctx, s, c, &data), data);
    drop(silent);
    let counters = net.stop();
    assert_eq!(counters.apps_attached, 2, "{counters}");
    assert!(counters.bad_control >= 4, "{counters}");
    assert_eq!(counters.contexts_refused, 3, "{counters}");
}

/// Fills slot `s`'s TX ring while the peer reads nothing, until the engine can move no
/// more (the peer's window and the core's send buffer are full); returns the bytes written.
fn fill_until_stuck(net: &mut Net, app: &mut Client, ctx: u32, s: u32, data: &[u8]) -> usize {
    let (mut sent, mut idle) = (0, 0);
    while idle < 50 {
        let n = app.write_some(ctx, s, &data[sent..]);
        sent += n;
        idle = if n == 0 { idle + 1 } else { 0 };
        net.peer.pump();
    }
    assert!(sent < data.len(), "the peer took everything");
    let b = app.block(s);
    assert!(
        b.tx_tail().load(Ordering::Acquire) > b.tx_head().load(Ordering::Acquire),
        "bytes are left in the TX ring"
    );
    sent
}

/// Close is graceful (docs/service.md): the engine sends the rest of the TX ring, then a
/// FIN. An application that closes and then exits at once (a client that writes and quits)
/// does not hold that connection any more, so its going away must not reset it: the peer
/// reads every byte, then end of stream.
#[test]
fn a_connection_closed_before_its_application_exits_still_delivers_everything() {
    let mut net = Net::start("close-then-exit");
    let mut app = net.attach("close-then-exit");
    let ctx = app.context();
    let (_l, s, c) = accepted(&mut net, &mut app, ctx, 7800);
    let data = pattern(1 << 20, 15);
    let sent = fill_until_stuck(&mut net, &mut app, ctx, s, &data);
    app.post(
        ctx,
        Command::Close {
            slot: s,
            abort: false,
        },
    );
    app.sync(ctx, &mut net_pump(&mut net));
    drop(app);
    net.until_counters("the engine saw the hang-up", |k| k.apps_detached == 1);
    let (got, err) = net.peer.read_to_end(c);
    assert_eq!(err, None, "reset after {} of {sent} bytes", got.len());
    assert_eq!(got.len(), sent);
    assert!(got == data[..sent], "the bytes differ");
    // The departed application's region goes once its last connection is done.
    let counters = net.until_counters("the departed application is freed", |k| {
        k.orphans_freed == 1
    });
    assert_eq!(counters.resets_on_detach, 0, "{counters}");
    // Its index is free again for the next application.
    let mut next = net.attach("next");
    let ctx = next.context();
    let (_, s, c) = accepted(&mut net, &mut next, ctx, 7801);
    let data = pattern(2 * RING as usize, 16);
    assert_eq!(peer_to_app(&mut net, &mut next, ctx, s, c, &data), data);
}

/// A departed application's closing connections are not kept forever: after the service's
/// orphan linger, whatever still has not drained (a peer that never reads) is reset and the
/// region freed.
#[test]
fn a_departed_applications_undrainable_connections_are_reset_after_the_linger() {
    let mut net = Net::start_with("orphan-linger", |c| {
        c.orphan_linger = Duration::from_millis(200);
    });
    let mut app = net.attach("orphan-linger");
    let ctx = app.context();
    let (_l, s, c) = accepted(&mut net, &mut app, ctx, 7900);
    fill_until_stuck(&mut net, &mut app, ctx, s, &pattern(1 << 20, 17));
    app.post(
        ctx,
        Command::Close {
            slot: s,
            abort: false,
        },
    );
    app.sync(ctx, &mut net_pump(&mut net));
    drop(app);
    // The peer reads nothing: the connection can never drain.
    let counters = net.until_counters("the orphan is reset and freed", |k| k.orphans_freed == 1);
    assert_eq!(counters.resets_on_detach, 1, "{counters}");
    let mut buf = vec![0u8; 1 << 16];
    let err = net.peer.until("the peer sees the reset", |st| loop {
        match st.recv(c, &mut buf) {
            Ok(n) if n > 0 => continue,
            Ok(_) | Err(Error::WouldBlock) => return None,
            Err(e) => return Some(e),
        }
    });
    assert_eq!(err, Error::Connection(ConnError::Reset));
}

/// SetCongestion on slot `s` (expects Done).
fn set_congestion(
    app: &mut Client,
    ctx: u32,
    s: u32,
    algorithm: Congestion,
    pump: &mut dyn FnMut(),
) {
    let req = app.req();
    app.ok(
        ctx,
        Command::SetCongestion {
            req,
            slot: s,
            algorithm,
        },
        pump,
    );
}

#[test]
fn congestion_control_is_chosen_before_or_after_connect_and_inherited_by_accepted_connections() {
    let mut net = Net::start("congestion");
    let mut app = net.attach("congestion");
    let ctx = app.context();
    let peer_listener = net.peer.stack.listen(8001, 8).unwrap();

    // A new socket reports the engine's default, as a new Linux socket reports the system's.
    let s = app.open(ctx, &mut || net.peer.pump());
    assert_eq!(app.block(s).congestion(), Some(Congestion::Dctcp));
    // Chosen before connect: remembered, reported, and in force before the SYN is built,
    // so the SYN does not ask for ECN (RFC 3168 6.1.1: only DCTCP wants it).
    set_congestion(&mut app, ctx, s, Congestion::Cubic, &mut || net.peer.pump());
    assert_eq!(app.block(s).congestion(), Some(Congestion::Cubic));
    let req = app.req();
    app.ok(
        ctx,
        Command::Connect {
            req,
            slot: s,
            ip: PEER_IP,
            port: 8001,
        },
        &mut || net.peer.pump(),
    );
    let c = net
        .peer
        .until("peer accepts", |st| st.accept(peer_listener).ok());
    app.wait_flags(s, CONNECTED, &mut || net.peer.pump());
    assert_eq!(app.block(s).congestion(), Some(Congestion::Cubic));
    assert!(
        !net.peer.stack.info(c).unwrap().ecn,
        "a CUBIC connection's SYN asked for no ECN"
    );
    // With the default, the same connect negotiates ECN (the control for the check above).
    let (d, _) = app.connect(ctx, PEER_IP, 8001, &mut || net.peer.pump());
    let cd = net
        .peer
        .until("peer accepts", |st| st.accept(peer_listener).ok());
    app.wait_flags(d, CONNECTED, &mut || net.peer.pump());
    assert!(net.peer.stack.info(cd).unwrap().ecn, "DCTCP asks for ECN");
    assert_eq!(app.block(d).congestion(), Some(Congestion::Dctcp));

    // After connect: the core switches the connection (the block shows what the core runs),
    // and data still flows under the new policy.
    set_congestion(&mut app, ctx, s, Congestion::Timely, &mut || {
        net.peer.pump()
    });
    assert_eq!(app.block(s).congestion(), Some(Congestion::Timely));
    let up = pattern(3 * RING as usize, 11);
    assert_eq!(app_to_peer(&mut net, &mut app, ctx, s, c, &up), up);
    set_congestion(&mut app, ctx, s, Congestion::Reno, &mut || net.peer.pump());
    assert_eq!(app.block(s).congestion(), Some(Congestion::Reno));

    // A listener's choice is inherited by every connection it accepts; a sibling listener
    // without one gives the default.
    let l = app.open(ctx, &mut || net.peer.pump());
    set_congestion(&mut app, ctx, l, Congestion::Timely, &mut || {
        net.peer.pump()
    });
    set_congestion(&mut app, ctx, l, Congestion::Reno, &mut || net.peer.pump());
    let req = app.req();
    app.ok(
        ctx,
        Command::Bind {
            req,
            slot: l,
            ip: Ipv4Addr::UNSPECIFIED,
            port: 7010,
            reuse: Default::default(),
        },
        &mut || net.peer.pump(),
    );
    let req = app.req();
    app.ok(
        ctx,
        Command::Listen {
            req,
            slot: l,
            backlog: 4,
        },
        &mut || net.peer.pump(),
    );
    assert_eq!(app.block(l).congestion(), Some(Congestion::Reno));
    for _ in 0..2 {
        let (a, ca) = accept_one(&mut net, &mut app, ctx, l, 7010);
        assert_eq!(app.block(a).congestion(), Some(Congestion::Reno));
        let down = pattern(RING as usize + 7, 12);
        assert_eq!(peer_to_app(&mut net, &mut app, ctx, a, ca, &down), down);
    }
    let (_, plain, _) = accepted(&mut net, &mut app, ctx, 7011);
    assert_eq!(app.block(plain).congestion(), Some(Congestion::Dctcp));

    // Bad input: an unknown algorithm code fails with EINVAL and is counted; a slot never
    // opened is EBADF; nothing changes on the connection.
    let before = net.counters();
    let mut entry = Command::SetCongestion {
        req: 4242,
        slot: s,
        algorithm: Congestion::Cubic,
    }
    .encode();
    entry[12] = 99;
    assert_eq!(
        app.call_raw(ctx, &entry, &mut || net.peer.pump()),
        Completion::Failed {
            req: 4242,
            errno: Errno::EINVAL as i32
        }
    );
    let req = app.req();
    let unopened = Command::SetCongestion {
        req,
        slot: 15,
        algorithm: Congestion::Cubic,
    };
    assert_eq!(
        app.fails(ctx, unopened, &mut || net.peer.pump()),
        Errno::EBADF as i32
    );
    assert_eq!(app.block(s).congestion(), Some(Congestion::Reno));
    let after = net.until_counters("counters published", |c| c.bad_slots > before.bad_slots);
    assert_eq!(after.bad_entries, before.bad_entries + 1, "{after}");
    assert_eq!(after.bad_slots, before.bad_slots + 1, "{after}");
}
