//! The Rust API against the fake engine (tests/common/fake_engine.rs): attach, sockets,
//! data through small rings (wrap-around, RX_STALLED/Consumed), readiness, non-blocking
//! calls and timeouts, shutdown and close, zero copy, contexts, fork, and the engine dying.

mod common;

use std::io::{IoSlice, IoSliceMut};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use sluice::{Error, Sluice, Socket};

fn errno<T: std::fmt::Debug>(r: Result<T, Error>) -> i32 {
    r.expect_err("expected an error").errno()
}

#[test]
fn attach_tells_the_engine_and_what_it_routes() {
    let (engine, app) = engine_and_app();
    assert_eq!(app.engine().ip, ENGINE_IP);
    assert!(app.is_alive());
    assert!(app.routes(Ipv4Addr::new(10, 77, 0, 2)));
    assert!(!app.routes(Ipv4Addr::new(192, 168, 1, 1)));
    assert!(!app.routes(Ipv4Addr::LOCALHOST));
    assert!(app.owns(ENGINE_IP) && app.owns(Ipv4Addr::UNSPECIFIED));
    assert!(!app.owns(Ipv4Addr::new(10, 77, 0, 2)));
    assert_eq!(engine.stats.apps_attached.load(Ordering::Relaxed), 1);
}

#[test]
fn attaching_to_nothing_is_econnrefused() {
    let e = Sluice::attach(std::path::Path::new("/nonexistent/sluice.sock")).unwrap_err();
    assert!(matches!(e, Error::Shm(_)));
    assert_eq!(e.errno(), libc::ECONNREFUSED);
}

#[test]
fn bind_checks_the_address_and_the_port() {
    let (_engine, app) = engine_and_app();
    let (_l, addr) = listener(&app);
    let s = Socket::open(&app).unwrap();
    assert_eq!(errno(s.bind(addr)), libc::EADDRINUSE);
    let other = SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 7), 80);
    assert_eq!(errno(s.bind(other)), libc::EADDRNOTAVAIL);
    s.bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 5555))
        .unwrap();
    assert_eq!(s.local_addr().unwrap().port(), 5555);
    assert_eq!(
        errno(s.bind(SocketAddrV4::new(ENGINE_IP, 5556))),
        libc::EINVAL
    );
    assert_eq!(errno(s.peer_addr()), libc::ENOTCONN);
    assert_eq!(errno(s.recv(&mut [0; 4])), libc::ENOTCONN);
    assert_eq!(errno(s.send(b"x")), libc::ENOTCONN);
}

#[test]
fn a_request_and_its_reply_cross_and_addresses_match() {
    let (engine, app) = engine_and_app();
    let (l, addr) = listener(&app);
    let server = std::thread::spawn(move || {
        let (s, peer) = l.accept().unwrap();
        let mut buf = [0u8; 64];
        let n = s.recv(&mut buf).unwrap();
        s.send(&buf[..n]).unwrap();
        (peer, s.local_addr().unwrap())
    });
    let c = Socket::open(&app).unwrap();
    c.connect(addr).unwrap();
    assert!(c.is_connected());
    assert_eq!(c.peer_addr().unwrap(), addr);
    assert_eq!(c.send(b"hello, engine").unwrap(), 13);
    let mut buf = [0u8; 64];
    let n = c.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"hello, engine");
    let (peer, server_local) = server.join().unwrap();
    assert_eq!(peer, c.local_addr().unwrap());
    assert_eq!(server_local, addr);
    assert_eq!(engine.stats.lost_wakeups.load(Ordering::Relaxed), 0);
}

/// 4 MiB through 8 KiB rings, both directions at once: every byte arrives in order, the
/// rings wrap hundreds of times, and the receiver's `Consumed` restarts a stalled engine.
#[test]
fn a_large_transfer_wraps_the_rings_and_recovers_from_stalls() {
    let (engine, app) = engine_and_app();
    let (c, s) = pair(&app);
    const LEN: usize = 4 << 20;
    let up = pattern(LEN, 1);
    let down = pattern(LEN, 2);
    let (c, s) = (Arc::new(c), Arc::new(s));
    let sender = |sock: Arc<Socket>, data: Vec<u8>| {
        std::thread::spawn(move || {
            // Odd-sized writes so that positions land everywhere in the ring.
            for chunk in data.chunks(3001) {
                assert_eq!(sock.send(chunk).unwrap(), chunk.len());
            }
        })
    };
    let receiver = |sock: Arc<Socket>, len: usize| {
        std::thread::spawn(move || {
            let mut got = Vec::with_capacity(len);
            let mut buf = vec![0u8; 1777];
            while got.len() < len {
                let n = sock.recv(&mut buf).unwrap();
                assert!(n > 0, "early end of stream");
                got.extend_from_slice(&buf[..n]);
            }
            got
        })
    };
    let t1 = sender(c.clone(), up.clone());
    let t2 = sender(s.clone(), down.clone());
    let r1 = receiver(s.clone(), LEN);
    let r2 = receiver(c.clone(), LEN);
    t1.join().unwrap();
    t2.join().unwrap();
    assert!(r1.join().unwrap() == up, "upstream bytes differ");
    assert!(r2.join().unwrap() == down, "downstream bytes differ");
    let st = &engine.stats;
    assert!(
        st.stalls.load(Ordering::Relaxed) > 0,
        "the rings never filled"
    );
    assert!(
        st.consumed.load(Ordering::Relaxed) > 0,
        "no Consumed was sent"
    );
    assert_eq!(st.bytes_moved.load(Ordering::Relaxed), 2 * LEN as u64);
    assert_eq!(st.lost_wakeups.load(Ordering::Relaxed), 0);
}

#[test]
fn vectored_calls_and_peek() {
    let (_engine, app) = engine_and_app();
    let (c, s) = pair(&app);
    let n = c
        .send_vectored(&[
            IoSlice::new(b"abc"),
            IoSlice::new(b""),
            IoSlice::new(b"defgh"),
        ])
        .unwrap();
    assert_eq!(n, 8);
    let mut seen = [0u8; 8];
    while s.available() < 8 {
        std::thread::yield_now();
    }
    assert_eq!(s.peek(&mut seen).unwrap(), 8);
    assert_eq!(&seen, b"abcdefgh");
    assert_eq!(s.available(), 8);
    let (mut a, mut b) = ([0u8; 2], [0u8; 10]);
    let n = s
        .recv_vectored(&mut [IoSliceMut::new(&mut a), IoSliceMut::new(&mut b)])
        .unwrap();
    assert_eq!(n, 8);
    assert_eq!(&a, b"ab");
    assert_eq!(&b[..6], b"cdefgh");
    assert_eq!(s.available(), 0);
    assert_eq!(s.recv(&mut []).unwrap(), 0, "an empty read returns at once");
}

#[test]
fn non_blocking_calls_would_block_and_readiness_tells_when_to_retry() {
    let (_engine, app) = engine_and_app();
    let (l, addr) = listener(&app);
    l.set_nonblocking(true);
    assert!(matches!(l.accept(), Err(Error::WouldBlock)));
    assert!(!l.readiness().readable);

    let c = Socket::open(&app).unwrap();
    c.set_nonblocking(true);
    match c.connect(addr) {
        Err(Error::InProgress) => {}
        other => panic!("connect gave {other:?}"),
    }
    let wait = |s: &Socket, what: &dyn Fn(&Socket) -> bool| {
        let w = app
            .wait(Some(Duration::from_secs(10)), &mut [], &mut || what(s))
            .unwrap();
        assert!(w.ready);
    };
    wait(&c, &|s| s.readiness().writable);
    assert!(c.take_error().is_none());
    assert_eq!(errno(c.connect(addr)), libc::EISCONN);
    wait(&l, &|s| s.readiness().readable);
    let (s, _) = l.accept().unwrap();
    assert!(!s.is_nonblocking(), "accepted sockets start blocking");
    s.set_nonblocking(true);
    assert!(matches!(s.recv(&mut [0; 8]), Err(Error::WouldBlock)));
    let seq = s.event_seq();
    assert!(!s.readiness().readable);
    c.send(b"ping").unwrap();
    wait(&s, &|s| s.readiness().readable);
    assert_ne!(s.event_seq(), seq, "data arrival changes event_seq");
    assert_eq!(s.available(), 4);
    assert_eq!(s.recv(&mut [0; 8]).unwrap(), 4);
    // MSG_DONTWAIT on a blocking socket.
    assert!(matches!(
        c.recv_nonblocking(&mut [0; 8]),
        Err(Error::WouldBlock)
    ));
}

#[test]
fn a_non_blocking_send_fills_the_ring_then_would_block() {
    let (_engine, app) = engine_and_app();
    let (c, s) = pair(&app);
    let ring = app.layout().ring_size as usize;
    let mut total = 0;
    // The TX ring and the peer's RX ring fill (the fake engine holds nothing), and then
    // nothing more goes in: WouldBlock until the peer reads.
    while total < 2 * ring {
        match c.send_nonblocking(&[7u8; 1000]) {
            Ok(n) => total += n,
            Err(Error::WouldBlock) => std::thread::sleep(Duration::from_millis(1)),
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(total, 2 * ring);
    std::thread::sleep(Duration::from_millis(20));
    assert!(matches!(c.send_nonblocking(b"x"), Err(Error::WouldBlock)));
    assert!(!c.readiness().writable);
    let mut buf = vec![0u8; 2 * ring];
    let mut got = 0;
    while got < total {
        got += s.recv(&mut buf[got..]).unwrap();
    }
    assert!(buf.iter().all(|&b| b == 7));
    let w = app
        .wait(Some(Duration::from_secs(10)), &mut [], &mut || {
            c.readiness().writable
        })
        .unwrap();
    assert!(w.ready);
}

#[test]
fn connection_refused_blocking_and_not() {
    let (_engine, app) = engine_and_app();
    let nobody = SocketAddrV4::new(ENGINE_IP, 1);
    let c = Socket::open(&app).unwrap();
    assert_eq!(errno(c.connect(nobody)), libc::ECONNREFUSED);
    let c = Socket::open(&app).unwrap();
    c.set_nonblocking(true);
    assert!(matches!(c.connect(nobody), Err(Error::InProgress)));
    let w = app
        .wait(Some(Duration::from_secs(10)), &mut [], &mut || {
            c.readiness().error
        })
        .unwrap();
    assert!(w.ready);
    assert!(
        c.readiness().writable,
        "a failed connect is writable (to be noticed)"
    );
    assert_eq!(c.take_error().unwrap().errno(), libc::ECONNREFUSED);
    assert!(c.take_error().is_none(), "SO_ERROR clears the error");
}

#[test]
fn timeouts_end_blocking_calls() {
    let (_engine, app) = engine_and_app();
    let (c, _s) = pair(&app);
    c.set_read_timeout(Some(Duration::from_millis(20)));
    assert_eq!(c.read_timeout(), Some(Duration::from_millis(20)));
    assert!(matches!(c.recv(&mut [0; 4]), Err(Error::WouldBlock)));

    let h = Socket::open(&app).unwrap();
    h.set_write_timeout(Some(Duration::from_millis(20)));
    assert!(matches!(
        h.connect(SocketAddrV4::new(BLACKHOLE_IP, 80)),
        Err(Error::InProgress)
    ));
    assert!(!h.is_connected());
    let (l, _) = listener(&app);
    l.set_read_timeout(Some(Duration::from_millis(20)));
    assert!(matches!(l.accept(), Err(Error::WouldBlock)));
    // A wait with nothing to wait for times out.
    let w = app
        .wait(Some(Duration::from_millis(5)), &mut [], &mut || false)
        .unwrap();
    assert!(w.timed_out && !w.ready);
}

#[test]
fn shutdown_write_ends_the_peers_stream_after_the_data() {
    let (_engine, app) = engine_and_app();
    let (c, s) = pair(&app);
    c.send(b"last words").unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    assert_eq!(errno(c.send(b"more")), libc::EPIPE);
    let mut buf = [0u8; 32];
    let mut got = Vec::new();
    loop {
        let n = s.recv(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, b"last words");
    let r = s.readiness();
    assert!(r.readable && r.rdhup && !r.hup);
    // The other direction still works.
    s.send(b"reply").unwrap();
    assert_eq!(c.recv(&mut buf).unwrap(), 5);
    s.shutdown(Shutdown::Both).unwrap();
    assert_eq!(c.recv(&mut buf).unwrap(), 0);
    let w = app
        .wait(Some(Duration::from_secs(10)), &mut [], &mut || {
            c.readiness().hup
        })
        .unwrap();
    assert!(w.ready, "both directions shut: hang-up");
    // SHUT_RD is local: reads end at once.
    let (c2, _s2) = pair(&app);
    c2.shutdown(Shutdown::Read).unwrap();
    assert_eq!(c2.recv(&mut buf).unwrap(), 0);
}

#[test]
fn close_is_graceful_and_linger_zero_resets() {
    let (_engine, app) = engine_and_app();
    let (c, s) = pair(&app);
    c.send(b"bye").unwrap();
    c.close();
    let mut buf = [0u8; 8];
    assert_eq!(s.recv(&mut buf).unwrap(), 3);
    assert_eq!(s.recv(&mut buf).unwrap(), 0);

    let (c, s) = pair(&app);
    c.set_linger(Some(Duration::ZERO));
    assert_eq!(c.linger(), Some(Duration::ZERO));
    drop(c);
    assert_eq!(errno(s.recv(&mut buf)), libc::ECONNRESET);
    assert_eq!(s.recv(&mut buf).unwrap(), 0, "the reset is reported once");
    assert_eq!(errno(s.send(b"x")), libc::EPIPE);
}

#[test]
fn zero_copy_echo() {
    let (_engine, app) = engine_and_app();
    let (c, s) = pair(&app);
    let msg = pattern(20_000, 9); // more than the 8 KiB ring: several rounds
    let echo = std::thread::spawn(move || {
        let mut echoed = 0;
        while echoed < 20_000 {
            let w = s
                .sluice()
                .clone()
                .wait(None, &mut [], &mut || s.readiness().readable)
                .unwrap();
            assert!(w.ready);
            // Ring to ring: the received bytes are copied once, into the TX ring.
            let data = s.rx_slice().unwrap();
            assert!(!data.is_empty());
            let mut room = match s.tx_slice() {
                Ok(room) => room,
                Err(Error::WouldBlock) => {
                    std::thread::yield_now();
                    continue;
                }
                Err(e) => panic!("{e}"),
            };
            assert_eq!(errno(s.tx_slice()), libc::EBUSY, "one TX slice at a time");
            let n = room.len().min(data.len());
            room[..n].copy_from_slice(&data[..n]);
            drop(room);
            s.tx_commit(n).unwrap();
            s.rx_consume(n).unwrap();
            echoed += n;
        }
        s.shutdown(Shutdown::Write).unwrap();
        s
    });
    let c = Arc::new(c);
    let writer = {
        let c = c.clone();
        let msg = msg.clone();
        std::thread::spawn(move || c.send(&msg).unwrap())
    };
    let mut back = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = c.recv(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        back.extend_from_slice(&buf[..n]);
    }
    assert_eq!(writer.join().unwrap(), msg.len());
    assert!(back == msg);
    let s = echo.join().unwrap();
    // Consuming more than is there is clamped; a commit without a reservation is a no-op.
    s.rx_consume(1 << 20).unwrap();
    s.tx_commit(100).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let w = app
        .wait(Some(Duration::from_secs(10)), &mut [], &mut || {
            s.readiness().rdhup
        })
        .unwrap();
    assert!(w.ready);
    assert!(
        s.rx_slice().unwrap().is_empty(),
        "end of stream is an empty slice"
    );
    assert_eq!(errno(s.tx_slice()), libc::EPIPE);
}

/// A TxSlice lends the TX ring's free space as `&mut [u8]`: a send on the same socket
/// meanwhile would write those very bytes under it, so it is EBUSY until the guard drops.
#[test]
fn a_send_while_a_tx_slice_is_lent_is_ebusy() {
    let (_engine, app) = engine_and_app();
    let (c, s) = pair(&app);
    let mut room = c.tx_slice().unwrap();
    room[..3].copy_from_slice(b"abc");
    assert_eq!(errno(c.send(b"xyz")), libc::EBUSY);
    assert_eq!(&room[..3], b"abc", "the lent bytes are the guard's alone");
    c.tx_commit(3).unwrap();
    assert_eq!(errno(c.send_nonblocking(b"xyz")), libc::EBUSY);
    drop(room);
    assert_eq!(c.send(b"def").unwrap(), 3);
    let mut got = Vec::new();
    let mut buf = [0u8; 16];
    while got.len() < 6 {
        let n = s.recv(&mut buf).unwrap();
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, b"abcdef");
}

#[test]
fn a_listener_accepts_many_and_rejects_data_calls() {
    let (_engine, app) = engine_and_app();
    let (l, addr) = listener(&app);
    assert!(l.is_listener());
    assert_eq!(errno(l.recv(&mut [0; 4])), libc::ENOTCONN);
    let clients: Vec<Socket> = (0..20)
        .map(|_| {
            let c = Socket::open(&app).unwrap();
            c.connect(addr).unwrap();
            c
        })
        .collect();
    let mut ports: Vec<u16> = (0..20).map(|_| l.accept().unwrap().1.port()).collect();
    let mut want: Vec<u16> = clients
        .iter()
        .map(|c| c.local_addr().unwrap().port())
        .collect();
    ports.sort_unstable();
    want.sort_unstable();
    assert_eq!(ports, want);
}

#[test]
fn more_threads_than_contexts_share_them() {
    let engine = FakeEngine::start(Options {
        max_contexts: 2,
        ..Options::default()
    });
    let app = Sluice::attach(&engine.path).unwrap();
    let threads: Vec<_> = (0..6u32)
        .map(|i| {
            let app = app.clone();
            std::thread::spawn(move || {
                let (c, s) = pair(&app);
                for round in 0..50u32 {
                    let m = (i * 1000 + round).to_le_bytes();
                    c.send(&m).unwrap();
                    let mut b = [0u8; 4];
                    let mut got = 0;
                    while got < 4 {
                        got += s.recv(&mut b[got..]).unwrap();
                    }
                    assert_eq!(b, m);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(engine.stats.contexts_created.load(Ordering::Relaxed), 2);
    assert!(engine.stats.contexts_refused.load(Ordering::Relaxed) > 0);
}

#[test]
fn contexts_of_finished_threads_are_reused() {
    let engine = FakeEngine::start(Options {
        max_contexts: 3,
        ..Options::default()
    });
    let app = Sluice::attach(&engine.path).unwrap();
    for _ in 0..10 {
        let app = app.clone();
        std::thread::spawn(move || {
            let s = Socket::open(&app).unwrap();
            s.set_nodelay(true).unwrap();
        })
        .join()
        .unwrap();
    }
    assert_eq!(engine.stats.contexts_created.load(Ordering::Relaxed), 1);
    assert_eq!(engine.stats.contexts_refused.load(Ordering::Relaxed), 0);
}

#[test]
fn wait_wakes_for_kernel_descriptors_too() {
    let (_engine, app) = engine_and_app();
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for the two descriptors pipe() writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let writer = fds[1];
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        // SAFETY: writes one byte from a live buffer to our pipe.
        unsafe { libc::write(writer, b"x".as_ptr().cast(), 1) };
    });
    let mut pfd = [libc::pollfd {
        fd: fds[0],
        events: libc::POLLIN,
        revents: 0,
    }];
    let w = app
        .wait(Some(Duration::from_secs(10)), &mut pfd, &mut || false)
        .unwrap();
    t.join().unwrap();
    assert_eq!(w.fds_ready, 1);
    assert!(pfd[0].revents & libc::POLLIN != 0);
    // SAFETY: closing the pipe we opened.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
}

#[test]
fn nodelay_and_options_are_remembered() {
    let (_engine, app) = engine_and_app();
    let (l, addr) = listener(&app);
    l.set_nodelay(true).unwrap();
    assert!(l.nodelay());
    let c = Socket::open(&app).unwrap();
    c.connect(addr).unwrap();
    let (s, _) = l.accept().unwrap();
    assert!(s.nodelay(), "accepted sockets inherit TCP_NODELAY");
    c.set_write_timeout(Some(Duration::from_secs(3)));
    assert_eq!(c.write_timeout(), Some(Duration::from_secs(3)));
    c.set_write_timeout(None);
    assert_eq!(c.write_timeout(), None);
    assert_eq!(c.linger(), None);
}

#[test]
fn the_engine_dying_fails_every_call_cleanly() {
    let (engine, app) = engine_and_app();
    let (c, s) = pair(&app);
    let (l, _) = listener(&app);
    c.send(b"in flight").unwrap();
    let blocked = {
        let app = app.clone();
        std::thread::spawn(move || {
            let (a, _b) = pair(&app);
            // Blocks until the engine dies.
            a.recv(&mut [0; 8])
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    engine.stop();
    let r = blocked.join().unwrap();
    assert_eq!(r.unwrap_err().errno(), libc::ECONNRESET);
    assert!(!app.is_alive());
    // What had arrived is still readable, then the reset.
    let mut buf = [0u8; 32];
    assert_eq!(s.recv(&mut buf).unwrap(), 9);
    assert_eq!(errno(s.recv(&mut buf)), libc::ECONNRESET);
    assert_eq!(errno(c.send(b"x")), libc::EPIPE);
    assert_eq!(errno(l.accept()), libc::ECONNABORTED);
    assert_eq!(errno(Socket::open(&app)), libc::ECONNREFUSED);
    let r = c.readiness();
    assert!(r.readable && r.writable && r.hup && r.error);
    assert!(matches!(
        app.wait(None, &mut [], &mut || false),
        Err(Error::EngineGone)
    ));
    // Kernel descriptors can still be waited for.
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for the two descriptors pipe() writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: writes one byte from a live buffer to our pipe.
    assert_eq!(unsafe { libc::write(fds[1], b"x".as_ptr().cast(), 1) }, 1);
    let mut pfd = [libc::pollfd {
        fd: fds[0],
        events: libc::POLLIN,
        revents: 0,
    }];
    let w = app
        .wait(Some(Duration::from_secs(10)), &mut pfd, &mut || false)
        .unwrap();
    assert_eq!(w.fds_ready, 1);
    // SAFETY: closing the pipe we opened.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
}

/// An application that detaches (its attachment and sockets dropped) leaves nothing behind:
/// its ports are free again and other applications are untouched. (A killed application is
/// in tests/c_api.rs.)
#[test]
fn an_application_that_detaches_frees_its_ports() {
    let engine = FakeEngine::start(Options::default());
    let a = Sluice::attach(&engine.path).unwrap();
    let b = Sluice::attach(&engine.path).unwrap();
    let (l, addr) = listener(&a);
    let c = Socket::open(&b).unwrap();
    c.connect(addr).unwrap();
    let (s, _) = l.accept().unwrap();
    s.send(b"from a").unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(c.recv(&mut buf).unwrap(), 6);
    drop((l, s, a));
    // Graceful: the peer reads the end of the stream (or a reset if the hang-up came first).
    match c.recv(&mut buf) {
        Ok(0) => {}
        Err(e) => assert_eq!(e.errno(), libc::ECONNRESET),
        Ok(n) => panic!("{n} more bytes"),
    }
    let again = Socket::open(&b).unwrap();
    let mut tries = 0;
    while let Err(e) = again.bind(addr) {
        assert_eq!(e.errno(), libc::EADDRINUSE);
        tries += 1;
        assert!(tries < 10_000, "the port stayed bound");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(b.is_alive(), "the other application is untouched");
    let (c2, s2) = pair(&b);
    c2.send(b"still fine").unwrap();
    assert_eq!(s2.recv(&mut buf).unwrap(), 10);
    while engine.stats.apps_gone.load(Ordering::Relaxed) == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_forked_child_gets_ebadf_and_leaves_the_parents_sockets_alone() {
    let (_engine, app) = engine_and_app();
    let (c, s) = pair(&app);
    // SAFETY: the child only touches atomics and our own memory, then _exits; it takes no
    // lock another thread could hold.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        sluice::after_fork_child();
        let mut code = 0;
        if c.send(b"child").map_err(|e| e.errno()) != Err(libc::EBADF) {
            code |= 1;
        }
        if s.recv(&mut [0; 8]).map_err(|e| e.errno()) != Err(libc::EBADF) {
            code |= 2;
        }
        if !app.is_inherited() || app.is_alive() {
            code |= 4;
        }
        if !c.readiness().error {
            code |= 8;
        }
        // Closing in the child only forgets the socket.
        std::mem::forget(c);
        // SAFETY: leaving the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status));
    assert_eq!(libc::WEXITSTATUS(status), 0, "child checks failed");
    // The parent's connection still works.
    c.send(b"parent").unwrap();
    assert_eq!(s.recv(&mut [0; 8]).unwrap(), 6);
}

/// A forked child (a worker, a daemon) does not keep its parent's attachment alive: when
/// the parent detaches or dies, the engine sees the control socket hang up and cleans up,
/// even though the child still runs.
#[test]
fn a_forked_child_does_not_keep_the_parents_attachment_alive() {
    let engine = FakeEngine::start(Options::default());
    let app = Sluice::attach(&engine.path).unwrap();
    let (_c, _s) = pair(&app);
    let mut pipe = [0i32; 2];
    // SAFETY: pipe has room for the two descriptors pipe() writes.
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    // SAFETY: the child only calls after_fork_child (async-signal-safe), read, close and
    // _exit; it takes no lock another thread could hold.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        sluice::after_fork_child();
        let mut b = [0u8; 1];
        // SAFETY: our own pipe descriptors and a live one-byte buffer; lives until the
        // parent closes its end.
        unsafe {
            libc::close(pipe[1]);
            libc::read(pipe[0], b.as_mut_ptr().cast(), 1);
            libc::_exit(0);
        }
    }
    // SAFETY: closing the parent's copy of the read end.
    unsafe { libc::close(pipe[0]) };
    drop((_c, _s, app));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut gone = false;
    while std::time::Instant::now() < deadline {
        if engine.stats.apps_gone.load(Ordering::Relaxed) > 0 {
            gone = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut status = 0;
    // SAFETY: closing our write end lets the child exit; then we reap it.
    unsafe {
        libc::close(pipe[1]);
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
    }
    assert!(
        gone,
        "the engine did not see the parent detach while its forked child lived"
    );
}

/// Both sides sleep when idle: the engine is woken by the doorbell after commands (never by
/// its fallback timeout), and a sleeping application thread by its context's eventfd.
#[test]
fn sleeping_sides_are_woken_not_timed_out() {
    let engine = FakeEngine::start(Options {
        app_idle_us: 0,
        ..Options::default()
    });
    let app = Sluice::attach(&engine.path).unwrap();
    let (c, s) = pair(&app);
    let s = Arc::new(s);
    let echo = {
        let s = s.clone();
        std::thread::spawn(move || {
            let mut b = [0u8; 8];
            for _ in 0..20 {
                let n = s.recv(&mut b).unwrap();
                s.send(&b[..n]).unwrap();
            }
        })
    };
    for i in 0..20u8 {
        // Let the engine fall asleep before each request.
        let before = engine.stats.sleeps.load(Ordering::Relaxed);
        while engine.stats.sleeps.load(Ordering::Relaxed) == before {
            std::thread::sleep(Duration::from_millis(1));
        }
        c.send(&[i]).unwrap();
        let mut b = [0u8; 8];
        assert_eq!(c.recv(&mut b).unwrap(), 1);
        assert_eq!(b[0], i);
    }
    echo.join().unwrap();
    let st = &engine.stats;
    assert!(st.doorbell_wakeups.load(Ordering::Relaxed) >= 20);
    assert!(st.context_wakeups.load(Ordering::Relaxed) > 0);
    assert_eq!(st.lost_wakeups.load(Ordering::Relaxed), 0);
}
