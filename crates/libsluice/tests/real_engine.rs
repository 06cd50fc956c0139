//! libsluice against the real engine (crates/service run by the engine runtime over the
//! in-memory device pair, a plain TCP core as the peer host; tests/common/real_engine.rs):
//! the Rust API as client and server over real TCP, zero copy, the C program, and the
//! engine going away. No root needed.

mod common;

use std::net::{Shutdown, SocketAddrV4};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::pattern;
use common::real_engine::{PeerClient, RealEngine, ECHO_PORT, ENGINE_IP, PEER_IP};
use sluice::{Error, Sluice, Socket};
use sluice_shm::Layout;

/// Small rings so that transfers wrap and stall many times.
fn layout() -> Layout {
    Layout {
        max_sockets: 32,
        max_contexts: 8,
        queue_entries: 64,
        ring_size: 8192,
        ..Layout::default()
    }
}

fn engine(name: &str) -> (RealEngine, Arc<Sluice>) {
    let e = RealEngine::start(name, layout(), 100);
    let app = Sluice::attach(&e.socket).expect("attach to the real engine");
    (e, app)
}

/// Sends `data` and reads the echo back concurrently; returns what came back.
fn echo_through(sock: Socket, data: Vec<u8>) -> Vec<u8> {
    let sock = Arc::new(sock);
    let writer = {
        let sock = sock.clone();
        std::thread::spawn(move || {
            for chunk in data.chunks(5000) {
                assert_eq!(sock.send(chunk).unwrap(), chunk.len());
            }
            sock.shutdown(Shutdown::Write).unwrap();
        })
    };
    let mut back = Vec::new();
    let mut buf = vec![0u8; 3000];
    loop {
        let n = sock.recv(&mut buf).expect("recv");
        if n == 0 {
            break;
        }
        back.extend_from_slice(&buf[..n]);
    }
    writer.join().unwrap();
    back
}

#[test]
fn a_client_echoes_a_megabyte_through_the_real_core() {
    let (_e, app) = engine("client");
    assert_eq!(app.engine().ip, ENGINE_IP);
    assert!(app.routes(PEER_IP));
    let s = Socket::open(&app).unwrap();
    s.set_nodelay(true).unwrap();
    s.connect(SocketAddrV4::new(PEER_IP, ECHO_PORT)).unwrap();
    assert_eq!(
        s.peer_addr().unwrap(),
        SocketAddrV4::new(PEER_IP, ECHO_PORT)
    );
    assert_eq!(*s.local_addr().unwrap().ip(), ENGINE_IP);
    let data = pattern(1 << 20, 5);
    let back = echo_through(s, data.clone());
    assert_eq!(back.len(), data.len());
    assert!(back == data, "the echo differs");
}

#[test]
fn a_server_accepts_peer_clients_and_echoes_with_zero_copy() {
    let (e, app) = engine("server");
    let l = Socket::open(&app).unwrap();
    l.bind(SocketAddrV4::new(ENGINE_IP, 5001)).unwrap();
    l.listen(16).unwrap();
    let outcomes: Vec<_> = (0..3)
        .map(|i| {
            e.peer_client(PeerClient {
                port: 5001,
                bytes: 300_000,
                seed: 10 + i,
                reset: false,
            })
        })
        .collect();
    let servers: Vec<_> = (0..3)
        .map(|_| {
            let (s, peer) = l.accept().unwrap();
            assert_eq!(*peer.ip(), PEER_IP);
            std::thread::spawn(move || {
                let app = s.sluice().clone();
                loop {
                    let w = app
                        .wait(Some(Duration::from_secs(20)), &mut [], &mut || {
                            let r = s.readiness();
                            r.readable || r.error
                        })
                        .unwrap();
                    assert!(w.ready, "no data for 20 s");
                    let data = s.rx_slice().unwrap();
                    if data.is_empty() {
                        break;
                    }
                    let mut room = match s.tx_slice() {
                        Ok(r) => r,
                        Err(Error::WouldBlock) => {
                            let w = app
                                .wait(Some(Duration::from_secs(20)), &mut [], &mut || {
                                    s.readiness().writable
                                })
                                .unwrap();
                            assert!(w.ready, "no room for 20 s");
                            continue;
                        }
                        Err(e) => panic!("{e}"),
                    };
                    let n = room.len().min(data.len());
                    room[..n].copy_from_slice(&data[..n]);
                    drop(room);
                    s.tx_commit(n).unwrap();
                    s.rx_consume(n).unwrap();
                }
                s.shutdown(Shutdown::Write).unwrap();
                s
            })
        })
        .collect();
    for o in outcomes {
        o.recv_timeout(Duration::from_secs(60))
            .expect("the peer client finished")
            .expect("the echo matched");
    }
    for s in servers {
        drop(s.join().unwrap());
    }
}

/// A peer that sends more than the RX ring holds and then resets: the application reads
/// every byte that arrived before the reset, then the error (ECONNRESET), then end of
/// stream, as on Linux. The engine reports ERROR at once while it still holds bytes the
/// full ring could not take (RX_STALLED); they come first.
#[test]
fn bytes_received_before_a_reset_are_all_read_before_the_error() {
    let (e, app) = engine("reset-after-data");
    let l = Socket::open(&app).unwrap();
    l.bind(SocketAddrV4::new(ENGINE_IP, 5002)).unwrap();
    l.listen(4).unwrap();
    let bytes = 3 * layout().ring_size as usize + 777;
    let outcome = e.peer_client(PeerClient {
        port: 5002,
        bytes,
        seed: 21,
        reset: true,
    });
    let (s, _) = l.accept().unwrap();
    outcome
        .recv_timeout(Duration::from_secs(60))
        .expect("the peer client finished")
        .expect("the peer sent and reset");
    let w = app
        .wait(Some(Duration::from_secs(20)), &mut [], &mut || {
            s.readiness().error
        })
        .unwrap();
    assert!(w.ready, "the engine never reported the reset");
    // Let the engine fall asleep: its answer to each Consumed then takes a wake-up, so a
    // read that finds the ring empty right after emptying it is the common case.
    std::thread::sleep(Duration::from_millis(50));
    let mut got = Vec::new();
    // Larger than the ring: each read empties it, before the engine can refill it.
    let mut buf = vec![0u8; 8 * layout().ring_size as usize];
    let err = loop {
        match s.recv(&mut buf) {
            Ok(0) => panic!("end of stream before the error, after {} bytes", got.len()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => break e,
        }
    };
    assert_eq!(got.len(), bytes, "bytes lost to the reset");
    assert!(got == pattern(bytes, 21), "the bytes differ");
    assert_eq!(err.errno(), libc::ECONNRESET);
    assert_eq!(s.recv(&mut buf).unwrap(), 0, "then end of stream");
}

/// Teardown offload set on a listener is inherited by its accepted sockets: each server
/// reads its client's request to end of stream, answers and closes, and the engine's
/// teardown stage finishes those closes (LAST-ACK) with the answer delivered byte-exact.
#[test]
fn accepted_sockets_inherit_teardown_offload_and_their_closes_go_to_the_stage() {
    let (mut e, app) = engine("teardown");
    let l = Socket::open(&app).unwrap();
    l.set_teardown_offload(true).unwrap();
    assert!(l.teardown_offload());
    l.bind(SocketAddrV4::new(ENGINE_IP, 5003)).unwrap();
    l.listen(16).unwrap();
    let outcomes: Vec<_> = (0..4)
        .map(|i| {
            e.peer_client(PeerClient {
                port: 5003,
                bytes: 3000 + i * 1000,
                seed: 40 + i as u32,
                reset: false,
            })
        })
        .collect();
    for _ in 0..4 {
        let (s, _) = l.accept().unwrap();
        assert!(s.teardown_offload(), "inherited from the listener");
        let mut request = Vec::new();
        let mut buf = vec![0u8; 4096];
        loop {
            let n = s.recv(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            request.extend_from_slice(&buf[..n]);
        }
        let mut at = 0;
        while at < request.len() {
            at += s.send(&request[at..]).unwrap();
        }
        // No shutdown: close hands the connection (CLOSE-WAIT) to the stage.
        drop(s);
    }
    for o in outcomes {
        o.recv_timeout(Duration::from_secs(60))
            .expect("the peer client finished")
            .expect("the echo matched");
    }
    e.stop_engine();
    let core = e
        .core_counters
        .lock()
        .unwrap()
        .clone()
        .expect("engine stopped");
    assert_eq!(core.teardown_offloaded, 4, "{core:?}");
    assert_eq!(core.teardown_completed, 4, "{core:?}");
}

#[test]
fn refused_and_non_blocking_connects() {
    let (_e, app) = engine("refused");
    let s = Socket::open(&app).unwrap();
    let r = s.connect(SocketAddrV4::new(PEER_IP, 9));
    assert_eq!(r.unwrap_err().errno(), libc::ECONNREFUSED);
    let s = Socket::open(&app).unwrap();
    s.set_nonblocking(true);
    assert!(matches!(
        s.connect(SocketAddrV4::new(PEER_IP, ECHO_PORT)),
        Err(Error::InProgress)
    ));
    let w = app
        .wait(Some(Duration::from_secs(20)), &mut [], &mut || {
            s.readiness().writable
        })
        .unwrap();
    assert!(w.ready);
    assert!(s.take_error().is_none());
    assert!(s.is_connected());
}

#[test]
fn the_engine_stopping_fails_calls_cleanly() {
    let (mut e, app) = engine("stop");
    let s = Socket::open(&app).unwrap();
    s.connect(SocketAddrV4::new(PEER_IP, ECHO_PORT)).unwrap();
    let s = Arc::new(s);
    let blocked = {
        let s = s.clone();
        std::thread::spawn(move || s.recv(&mut [0u8; 16]))
    };
    std::thread::sleep(Duration::from_millis(50));
    e.stop_engine();
    let r = blocked.join().unwrap();
    assert_eq!(r.unwrap_err().errno(), libc::ECONNRESET);
    assert_eq!(s.send(b"x").unwrap_err().errno(), libc::EPIPE);
    assert_eq!(Socket::open(&app).unwrap_err().errno(), libc::ECONNREFUSED);
    assert!(!app.is_alive());
}

#[test]
fn the_c_zero_copy_client_verifies_the_peers_echo() {
    let (e, _app) = engine("c-client");
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = std::env::temp_dir().join(format!("libsluice-real-c-{}", std::process::id()));
    common::c::compile(&crate_dir.join("examples/c/zero_copy_echo.c"), &exe);
    let out = common::c::command(&exe)
        .args([
            "client",
            &PEER_IP.to_string(),
            &ECHO_PORT.to_string(),
            "4",
            "200000",
        ])
        .env("SLUICE_SOCKET", &e.socket)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&exe);
    assert!(
        out.status.success(),
        "{}{}\n{:?}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        *e.counters.lock().unwrap()
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok 4 connections"));
}

/// TCP_CONGESTION through the Rust API against the real service: the engine's default on a
/// new socket, unknown names refused with ENOENT (as Linux), a choice before connect kept
/// through the handshake, a change on a live connection, a listener's choice inherited by
/// accepted connections; data flows under each.
#[test]
fn congestion_control_is_chosen_by_name_per_socket() {
    let (e, app) = engine("congestion");
    let s = Socket::open(&app).unwrap();
    assert_eq!(s.congestion_control().unwrap(), "dctcp");
    assert_eq!(
        s.set_congestion_control("bbr2").unwrap_err().errno(),
        libc::ENOENT
    );
    assert_eq!(
        s.set_congestion_control("").unwrap_err().errno(),
        libc::ENOENT
    );
    assert_eq!(
        s.congestion_control().unwrap(),
        "dctcp",
        "a refused name changes nothing"
    );
    s.set_congestion_control("CUBIC").unwrap();
    assert_eq!(s.congestion_control().unwrap(), "cubic");
    s.connect(SocketAddrV4::new(PEER_IP, ECHO_PORT)).unwrap();
    assert_eq!(
        s.congestion_control().unwrap(),
        "cubic",
        "kept through the handshake"
    );
    s.set_congestion_control("newreno\0").unwrap();
    assert_eq!(s.congestion_control().unwrap(), "reno");
    let data = pattern(100_000, 31);
    assert!(echo_through(s, data.clone()) == data, "the echo differs");

    let l = Socket::open(&app).unwrap();
    l.set_congestion_control("timely").unwrap();
    l.bind(SocketAddrV4::new(ENGINE_IP, 5010)).unwrap();
    l.listen(4).unwrap();
    assert_eq!(l.congestion_control().unwrap(), "timely");
    let outcome = e.peer_client(PeerClient {
        port: 5010,
        bytes: 50_000,
        seed: 32,
        reset: false,
    });
    let (c, _) = l.accept().unwrap();
    assert_eq!(
        c.congestion_control().unwrap(),
        "timely",
        "inherited from the listener"
    );
    let mut buf = vec![0u8; 4096];
    loop {
        let n = c.recv(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        assert_eq!(c.send(&buf[..n]).unwrap(), n);
    }
    c.shutdown(Shutdown::Write).unwrap();
    outcome
        .recv_timeout(Duration::from_secs(60))
        .expect("the peer client finished")
        .expect("the echo matched");
}

extern "C" {
    fn sluice_attach(path: *const std::ffi::c_char) -> std::ffi::c_int;
    fn sluice_socket_open() -> *mut std::ffi::c_void;
    fn sluice_set_congestion(
        s: *mut std::ffi::c_void,
        name: *const std::ffi::c_char,
    ) -> std::ffi::c_int;
    fn sluice_get_congestion(
        s: *mut std::ffi::c_void,
        buf: *mut std::ffi::c_char,
        len: usize,
    ) -> std::ffi::c_int;
    fn sluice_close(s: *mut std::ffi::c_void) -> std::ffi::c_int;
}

fn errno_now() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The C API's sluice_set_congestion/sluice_get_congestion (include/sluice.h) against the
/// real service: ENOENT for unknown names and for an unterminated over-long one, snprintf
/// truncation, EINVAL for null arguments.
#[test]
fn congestion_control_through_the_c_api() {
    let (_e, _app) = engine("congestion-c");
    let path = std::ffi::CString::new(_e.socket.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path; the socket pointer is used only while open, then
    // closed once; buffers are as long as the lengths passed.
    unsafe {
        assert_eq!(sluice_attach(path.as_ptr()), 0);
        let s = sluice_socket_open();
        assert!(!s.is_null());
        let mut buf = [0x7f as std::ffi::c_char; 16];
        assert_eq!(sluice_get_congestion(s, buf.as_mut_ptr(), buf.len()), 5);
        assert_eq!(
            std::ffi::CStr::from_ptr(buf.as_ptr()).to_str().unwrap(),
            "dctcp"
        );
        assert_eq!(sluice_set_congestion(s, c"vegas".as_ptr()), -1);
        assert_eq!(errno_now(), libc::ENOENT);
        let long = [b'a' as std::ffi::c_char; 40];
        assert_eq!(
            sluice_set_congestion(s, long.as_ptr()),
            -1,
            "read stops at 16 bytes"
        );
        assert_eq!(errno_now(), libc::ENOENT);
        assert_eq!(sluice_set_congestion(s, std::ptr::null()), -1);
        assert_eq!(errno_now(), libc::EINVAL);
        assert_eq!(sluice_set_congestion(s, c"Cubic".as_ptr()), 0);
        assert_eq!(sluice_get_congestion(s, buf.as_mut_ptr(), buf.len()), 5);
        assert_eq!(
            std::ffi::CStr::from_ptr(buf.as_ptr()).to_str().unwrap(),
            "cubic"
        );
        // Truncated like snprintf: the length says how much room the whole name needs.
        assert_eq!(sluice_get_congestion(s, buf.as_mut_ptr(), 3), 5);
        assert_eq!(
            std::ffi::CStr::from_ptr(buf.as_ptr()).to_str().unwrap(),
            "cu"
        );
        assert_eq!(sluice_get_congestion(s, std::ptr::null_mut(), 0), 5);
        assert_eq!(
            sluice_get_congestion(std::ptr::null_mut(), buf.as_mut_ptr(), 16),
            -1
        );
        assert_eq!(errno_now(), libc::EINVAL);
        assert_eq!(sluice_close(s), 0);
    }
}

/// The Rust examples of the native API (examples/echo_server.rs, sockets-like with a thread
/// per connection; examples/zero_copy_echo.rs, one thread on the rings in place) each serve
/// three of the peer's clients through the real engine, and every echo matches.
#[test]
fn the_rust_examples_echo_the_peers_clients() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    for example in ["echo_server", "zero_copy_echo"] {
        let (e, _app) = engine(example);
        let port = 5050;
        let mut child = Command::new(common::example(example))
            .args([port.to_string(), "3".to_string()])
            .env("SLUICE_SOCKET", &e.socket)
            .stdout(Stdio::piped())
            .spawn()
            .expect("the example starts");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), format!("listening {port}"), "{example}");
        let outcomes: Vec<_> = (0..3)
            .map(|i| {
                e.peer_client(PeerClient {
                    port,
                    bytes: 100_000 + 7_777 * i as usize,
                    seed: 40 + i,
                    reset: false,
                })
            })
            .collect();
        for o in outcomes {
            o.recv_timeout(Duration::from_secs(60))
                .expect("the peer client finished")
                .unwrap_or_else(|err| panic!("{example}: {err}"));
        }
        let status = child.wait().unwrap();
        assert!(status.success(), "{example} exited with {status}");
    }
}

#[test]
fn so_reuseport_sockets_share_a_port_and_so_reuseaddr_ones_bind_but_one_listens() {
    let (_e, app) = engine("reuse");
    let shared = SocketAddrV4::new(ENGINE_IP, 5077);
    let a = Socket::open(&app).unwrap();
    a.set_reuse_port(true);
    assert!(a.reuse().port && !a.reuse().addr);
    a.bind(shared).unwrap();
    a.listen(4).unwrap();
    let b = Socket::open(&app).unwrap();
    assert_eq!(
        b.bind(shared).unwrap_err().errno(),
        libc::EADDRINUSE,
        "without SO_REUSEPORT"
    );
    b.set_reuse_port(true);
    b.bind(shared).expect("SO_REUSEPORT on both: shared");
    b.listen(4).expect("both listen");

    let one = SocketAddrV4::new(ENGINE_IP, 5078);
    let c = Socket::open(&app).unwrap();
    let d = Socket::open(&app).unwrap();
    c.set_reuse_address(true);
    d.set_reuse_address(true);
    c.bind(one).unwrap();
    d.bind(one).expect("SO_REUSEADDR on both: both bind");
    c.listen(4).unwrap();
    assert_eq!(d.listen(4).unwrap_err().errno(), libc::EADDRINUSE);
}
