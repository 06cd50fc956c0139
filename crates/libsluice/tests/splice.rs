//! `Socket::splice` (acceltcp.txt 4.3; docs/service.md, Splice): every refusal against the
//! fake engine (which joins the two peers directly), and a proxy on the real engine
//! (in-process, over the in-memory device pair; no root) that accepts a client, connects to
//! the peer host's echo server and splices them; the echo comes back byte-exact and the
//! splice's end reports the byte counts.

mod common;

use std::net::{Shutdown, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::real_engine::{PeerClient, RealEngine, ECHO_PORT, PEER_IP};
use common::*;
use sluice::{Error, Sluice, Socket, SpliceError, SpliceOutcome};
use sluice_shm::Layout;

/// Reads exactly `n` bytes.
fn read_n(s: &Socket, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    let mut got = 0;
    while got < n {
        let k = s.recv(&mut out[got..]).expect("recv");
        assert!(k > 0, "end of stream after {got} of {n}");
        got += k;
    }
    out
}

/// Waits until `s` has bytes to read.
fn until_readable(s: &Socket) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.available() == 0 {
        assert!(Instant::now() < deadline, "nothing arrived");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn every_refusal_is_its_typed_error_and_changes_nothing() {
    let (_engine, app) = engine_and_app();
    let (client, a) = pair(&app);
    let (b, server) = pair(&app);
    let (l, _) = listener(&app);
    let fresh = Socket::open(&app).unwrap();
    let other_app = Sluice::attach(&_engine.path).unwrap();
    let (_x, foreign) = pair(&other_app);

    assert!(matches!(a.splice(&a), Err(SpliceError::Invalid)));
    assert!(matches!(a.splice(&l), Err(SpliceError::Invalid)));
    assert!(matches!(a.splice(&fresh), Err(SpliceError::NotConnected)));
    assert!(matches!(a.splice(&foreign), Err(SpliceError::BadSocket)));
    let (shut, _shut_peer) = pair(&app);
    shut.shutdown(Shutdown::Write).unwrap();
    assert!(matches!(a.splice(&shut), Err(SpliceError::NotConnected)));
    assert_eq!(SpliceError::Invalid.errno(), libc::EINVAL);
    assert_eq!(SpliceError::AlreadySpliced.errno(), libc::EALREADY);
    assert_eq!(
        SpliceError::BadSocket.to_string(),
        "socket closed or of another attachment"
    );
    // Nothing changed: both still carry bytes.
    assert!(!a.is_spliced() && !b.is_spliced());
    a.send(b"ping").unwrap();
    assert_eq!(read_n(&client, 4), b"ping");

    // Unread bytes in a's ring are forwarded to b before the splice.
    client.send(b"hello").unwrap();
    until_readable(&a);
    let sp = a.splice(&b).expect("splice");
    assert_eq!(sp.forwarded(), (5, 0));
    assert_eq!(read_n(&server, 5), b"hello");
    assert!(a.is_spliced() && b.is_spliced());
    assert!(matches!(a.splice(&b), Err(SpliceError::AlreadySpliced)));
    assert_eq!(a.send(b"x").unwrap_err().errno(), libc::EBADFD);
    let mut buf = [0u8; 8];
    assert_eq!(a.recv(&mut buf).unwrap_err().errno(), libc::EBADFD);
    assert_eq!(sp.poll().map(|r| r.outcome), Some(SpliceOutcome::Installed));
    assert_eq!(sp.wait(Some(Duration::from_millis(30))).unwrap(), None);

    // Closing the spliced sockets does not touch the splice.
    drop(a);
    drop(b);
    let up = pattern(100_000, 1);
    let down = pattern(50_000, 2);
    let client = std::sync::Arc::new(client);
    let server = std::sync::Arc::new(server);
    let writers = [(client.clone(), up.clone()), (server.clone(), down.clone())]
        .map(|(s, data)| std::thread::spawn(move || s.send(&data).unwrap()));
    assert_eq!(read_n(&server, up.len()), up);
    assert_eq!(read_n(&client, down.len()), down);
    for w in writers {
        w.join().unwrap();
    }
    drop(client);
    let end = sp
        .wait(Some(Duration::from_secs(10)))
        .unwrap()
        .expect("the splice ended");
    assert_eq!(end.outcome, SpliceOutcome::Closed);
    assert_eq!((end.a_to_b, end.b_to_a), (100_000, 50_000));
    assert_eq!(_engine.stats.bad_commands.load(Ordering::Relaxed), 0);
}

/// Small rings so that the forwarding before the splice and the relay both see wraps.
fn layout() -> Layout {
    Layout {
        max_sockets: 32,
        max_contexts: 8,
        queue_entries: 64,
        ring_size: 8192,
        ..Layout::default()
    }
}

#[test]
fn a_proxy_splices_a_client_to_the_echo_server_through_the_real_core() {
    let engine = RealEngine::start("splice", layout(), 100);
    let app = Sluice::attach(&engine.socket).unwrap();
    let l = Socket::open(&app).unwrap();
    l.bind(SocketAddrV4::new(common::real_engine::ENGINE_IP, 7500))
        .unwrap();
    l.listen(4).unwrap();
    let bytes = 3 << 20;
    let outcome = engine.peer_client(PeerClient {
        port: 7500,
        bytes,
        seed: 21,
        reset: false,
    });
    let (a, _) = l.accept().unwrap();
    let b = Socket::open(&app).unwrap();
    b.connect(SocketAddrV4::new(PEER_IP, ECHO_PORT)).unwrap();
    let sp = a.splice(&b).expect("splice");
    drop((a, b));
    let end = sp
        .wait(Some(Duration::from_secs(60)))
        .unwrap()
        .expect("the splice ended");
    outcome
        .recv_timeout(Duration::from_secs(60))
        .expect("the client finished")
        .expect("the echo came back byte-exact through the splice");
    assert_eq!(end.outcome, SpliceOutcome::Closed, "{end:?}");
    let (fa, fb) = sp.forwarded();
    assert_eq!(end.a_to_b + fa, bytes as u64, "{end:?} forwarded {fa}");
    assert_eq!(end.b_to_a + fb, bytes as u64, "{end:?} forwarded {fb}");
    assert!(end.a_to_b > 0, "the splice relayed the bulk: {end:?}");
    let mut engine = engine;
    let k = engine.stop_engine();
    assert_eq!((k.splices, k.splice_reports), (1, 2), "{k}");
    let _ = Error::WouldBlock;
}
