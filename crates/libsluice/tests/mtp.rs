//! MTP messages end to end: two real engines (the service over each end of the in-memory
//! device pair, docs/mtp.md "Messages in service mode"), an application attached to each;
//! messages of 0 B, 1 B, one packet, two packets and 1 MiB delivered byte for byte both
//! ways; RPC round trips; bad entries refused with error completions and counters; another
//! application's endpoint left alone; and the same from C, whose exit cleans up. No root.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::two_engines::TwoEngines;
use sluice::mtp::{
    ring_doorbell, CqeKind, Endpoint, EndpointConfig, MtpCqe, MtpStatus, Rpc, SendEntry,
};
use sluice::Sluice;
use sluice_shm::mtp::RecvEntry;
use sluice_shm::PAYLOAD_BYTES;

const A_IP: Ipv4Addr = Ipv4Addr::new(10, 12, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 12, 0, 2);
const WAIT: Duration = Duration::from_secs(30);

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1] ^ seed)
        .collect()
}

/// The next message on `ep`, waiting at most [`WAIT`].
fn next_message(ep: &Endpoint) -> sluice::mtp::Received {
    let until = Instant::now() + WAIT;
    loop {
        if let Some(m) = ep.recv_message() {
            return m;
        }
        assert!(Instant::now() < until, "no message within {WAIT:?}");
        ep.wait(Some(Duration::from_millis(200))).unwrap();
    }
}

/// The next completion on `ep`, waiting at most [`WAIT`].
fn next_completion(ep: &Endpoint) -> MtpCqe {
    let until = Instant::now() + WAIT;
    loop {
        if let Some(c) = ep.completion() {
            return c;
        }
        assert!(Instant::now() < until, "no completion within {WAIT:?}");
        ep.wait(Some(Duration::from_millis(200))).unwrap();
    }
}

#[test]
fn messages_of_every_size_arrive_byte_exact_both_ways() {
    let e = TwoEngines::start("mtp", "sizes", [A_IP, B_IP], 0x3770, true);
    let (app_a, app_b) = (
        Sluice::attach(&e.sockets[0]).unwrap(),
        Sluice::attach(&e.sockets[1]).unwrap(),
    );
    let a = Endpoint::bind(&app_a, 7001).unwrap();
    let b = Endpoint::bind(&app_b, 0).unwrap();
    assert_eq!(a.port(), 7001);
    assert!(b.port() >= 49152, "ephemeral port {}", b.port());
    assert!(a.max_message() >= 1 << 20);
    let to_a = SocketAddrV4::new(A_IP, a.port());
    let to_b = SocketAddrV4::new(B_IP, b.port());
    // 0 B, 1 B, one packet, two packets, 1 MiB.
    let sizes = [0usize, 1, 1300, 1500, 1 << 20];
    for (k, &n) in sizes.iter().enumerate() {
        for (from, to, dst, src_ip, seed) in [(&a, &b, to_b, A_IP, 1u8), (&b, &a, to_a, B_IP, 2u8)]
        {
            let data = pattern(n, seed ^ k as u8);
            let id = from.send_message(dst, &data, 3, 1).unwrap();
            let m = next_message(to);
            assert_eq!(m.data.len(), n, "size {n}");
            assert!(m.data == data, "{n} bytes differ");
            assert_eq!(m.src, SocketAddrV4::new(src_ip, from.port()));
            assert_eq!((m.priority, m.tc), (3, 1));
            let msg_id = from.wait_sent(id, Some(WAIT)).unwrap();
            assert_eq!(
                msg_id, m.msg_id,
                "the completion names the wire's message id"
            );
        }
    }
    // Several in flight at once, each delivered whole.
    let ids: Vec<u32> = (0..20)
        .map(|k| {
            a.send_message(to_b, &pattern(3000 + k, k as u8), 0, 0)
                .unwrap()
        })
        .collect();
    let mut got: Vec<Vec<u8>> = (0..20).map(|_| next_message(&b).data).collect();
    got.sort_by_key(|d| d.len());
    for (k, d) in got.iter().enumerate() {
        assert!(*d == pattern(3000 + k, k as u8), "message {k}");
    }
    for id in ids {
        a.wait_sent(id, Some(WAIT)).unwrap();
    }
    let c = e.counters_when(1, WAIT, |c| c.mtp_received >= 25);
    assert_eq!(c.mtp_received, 25, "B received every message once");
    assert_eq!(c.mtp_bad_entries, 0);
}

#[test]
fn messages_wait_in_the_engine_until_a_buffer_is_posted() {
    let e = TwoEngines::start("mtp", "wait", [A_IP, B_IP], 0x3770, true);
    let (app_a, app_b) = (
        Sluice::attach(&e.sockets[0]).unwrap(),
        Sluice::attach(&e.sockets[1]).unwrap(),
    );
    // One buffer: the other messages wait in the transport's endpoint queue.
    let cfg = EndpointConfig {
        send_slots: 4,
        recv_buffers: 1,
    };
    let b = Endpoint::bind_with(&app_b, 7400, cfg).unwrap();
    let a = Endpoint::bind(&app_a, 0).unwrap();
    let to_b = SocketAddrV4::new(B_IP, 7400);
    let ids: Vec<u32> = (0..6)
        .map(|k| {
            a.send_message(to_b, &pattern(100 * k + 1, k as u8), 0, 0)
                .unwrap()
        })
        .collect();
    // Every message is accepted (acknowledged) before the receiver takes any.
    for id in ids {
        a.wait_sent(id, Some(WAIT)).unwrap();
    }
    let c = e.counters_when(1, WAIT, |c| c.mtp_received >= 1);
    assert_eq!(c.mtp_received, 1, "one buffer, one message placed");
    let mut got: Vec<Vec<u8>> = (0..6).map(|_| next_message(&b).data).collect();
    got.sort_by_key(|d| d.len());
    for (k, d) in got.iter().enumerate() {
        assert!(*d == pattern(100 * k + 1, k as u8), "message {k}");
    }
    assert!(b.recv_message().is_none(), "nothing twice");
    // A buffer too short for the next message completes with its length; the message
    // stays for the next buffer.
    let c = e.counters_when(1, WAIT, |c| c.mtp_entries >= 7);
    let (key, base, _) = b.memory();
    let short = RecvEntry {
        cookie: 77,
        key,
        addr: base,
        len: 10,
    };
    // The endpoint's own buffer holds one message; the short one is posted behind it.
    let first = a.send_message(to_b, b"first", 0, 0).unwrap();
    a.wait_sent(first, Some(WAIT)).unwrap();
    e.counters_when(1, WAIT, |x| x.mtp_received > c.mtp_received);
    b.post_raw(true, &short.encode()).unwrap();
    let long = pattern(500, 9);
    let id = a.send_message(to_b, &long, 0, 0).unwrap();
    a.wait_sent(id, Some(WAIT)).unwrap();
    let refused = next_completion(&b);
    assert_eq!(
        (refused.cookie, refused.kind, refused.status, refused.len),
        (77, CqeKind::Received, MtpStatus::BufferTooSmall, 500)
    );
    assert_eq!(next_message(&b).data, b"first");
    assert!(
        next_message(&b).data == long,
        "the long message waited for a buffer"
    );
}

#[test]
fn rpc_round_trips_pair_responses_with_requests_after_arp() {
    // The engines do not know each other's MAC: the first request waits for ARP.
    let e = TwoEngines::start("mtp", "rpc", [A_IP, B_IP], 0x3770, false);
    let app_b = Sluice::attach(&e.sockets[1]).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let server = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut rpc = Rpc::new(Endpoint::bind(&app_b, 7100).unwrap());
            let mut served = 0;
            while !stop.load(Ordering::Relaxed) {
                let mut h = |_: SocketAddrV4, req: &[u8]| {
                    let mut r = req.to_vec();
                    r.reverse();
                    r
                };
                if rpc.serve(Some(Duration::from_millis(100)), &mut h).unwrap() {
                    served += 1;
                }
            }
            served
        })
    };
    let app_a = Sluice::attach(&e.sockets[0]).unwrap();
    let mut rpc = Rpc::new(Endpoint::bind(&app_a, 0).unwrap());
    let to = SocketAddrV4::new(B_IP, 7100);
    for k in 0..50usize {
        let req = pattern(k * 97 % 5000, k as u8);
        let mut want = req.clone();
        want.reverse();
        assert_eq!(rpc.call(to, &req, WAIT).unwrap(), want, "call {k}");
    }
    assert_eq!(rpc.stale(), 0);
    stop.store(true, Ordering::Relaxed);
    assert_eq!(server.join().unwrap(), 50);
    let c = e.counters_when(0, WAIT, |c| c.mtp_arp_waits >= 1);
    assert_eq!(c.mtp_arp_waits, 1, "one destination resolved once");
}

#[test]
fn bad_entries_are_refused_with_error_completions_and_counters() {
    let e = TwoEngines::start("mtp", "bad", [A_IP, B_IP], 0x3770, true);
    let app = Sluice::attach(&e.sockets[0]).unwrap();
    let ep = Endpoint::bind(&app, 7200).unwrap();
    let (key, base, len) = ep.memory();
    let dst = SocketAddrV4::new(B_IP, 7201);
    let send = |cookie, key, addr, n| SendEntry {
        cookie,
        dst,
        priority: 0,
        tc: 0,
        key,
        addr,
        len: n,
    };
    // A range running past the registered memory.
    ep.post_raw(false, &send(101, key, base + len as u64 - 10, 100).encode())
        .unwrap();
    // A key this application does not have.
    ep.post_raw(false, &send(102, key + 1000, base, 10).encode())
        .unwrap();
    // An unknown opcode (kind byte), its cookie where every entry keeps it.
    let mut unknown = [0u8; PAYLOAD_BYTES];
    unknown[0] = 0x99;
    unknown[8..16].copy_from_slice(&103u64.to_le_bytes());
    ep.post_raw(false, &unknown).unwrap();
    // A message longer than the engine takes (the range itself is inside memory).
    ep.post_raw(
        false,
        &send(104, key, base, ep.max_message() as u32 + 1).encode(),
    )
    .unwrap();
    // A receive buffer below the registered memory.
    let below = RecvEntry {
        cookie: 105,
        key,
        addr: base - 4096,
        len: 64,
    };
    ep.post_raw(true, &below.encode()).unwrap();
    let mut got: Vec<(u64, CqeKind, MtpStatus)> = (0..5)
        .map(|_| {
            let c = next_completion(&ep);
            (c.cookie, c.kind, c.status)
        })
        .collect();
    got.sort_by_key(|g| g.0);
    assert_eq!(
        got,
        [
            (101, CqeKind::Sent, MtpStatus::BadMemory),
            (102, CqeKind::Sent, MtpStatus::BadMemory),
            (103, CqeKind::Sent, MtpStatus::BadEntry),
            (104, CqeKind::Sent, MtpStatus::TooLong),
            (105, CqeKind::Received, MtpStatus::BadMemory),
        ]
    );
    // Another application rings this endpoint's doorbell: counted, nothing taken.
    let other = Sluice::attach(&e.sockets[0]).unwrap();
    let before = e.counters_when(0, WAIT, |c| c.mtp_bad_entries >= 5);
    assert_eq!(before.mtp_bad_entries, 5);
    ring_doorbell(&other, ep.handle()).unwrap();
    ring_doorbell(&other, 0xdead).unwrap();
    let after = e.counters_when(0, WAIT, |c| c.mtp_not_owned >= before.mtp_not_owned + 2);
    assert_eq!(after.mtp_not_owned, before.mtp_not_owned + 2);
    assert_eq!(
        after.mtp_entries, before.mtp_entries,
        "no entry taken for it"
    );
    // The endpoint still works: a good message after the bad ones.
    let app_b = Sluice::attach(&e.sockets[1]).unwrap();
    let b = Endpoint::bind(&app_b, 7201).unwrap();
    let id = ep.send_message(dst, b"still fine", 0, 0).unwrap();
    assert_eq!(next_message(&b).data, b"still fine");
    ep.wait_sent(id, Some(WAIT)).unwrap();
    // A port bound already is refused.
    let taken = Endpoint::bind(&other, 7200).err().expect("7200 is bound");
    assert_eq!(taken.errno(), libc::EADDRINUSE);
}

#[test]
fn the_c_ping_echoes_and_its_exit_cleans_up() {
    let e = TwoEngines::start("mtp", "c", [A_IP, B_IP], 0x3770, true);
    let dir = std::env::temp_dir().join(format!("libsluice-mtp-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("mtp_ping");
    common::c::compile(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/c/mtp_ping.c"),
        &exe,
    );
    // An echo on engine B.
    let app_b = Sluice::attach(&e.sockets[1]).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let echo = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let ep = Endpoint::bind(&app_b, 7300).unwrap();
            let mut echoed = 0;
            while !stop.load(Ordering::Relaxed) {
                match ep.recv_message() {
                    Some(m) => {
                        ep.send_message(m.src, &m.data, 0, 0).unwrap();
                        echoed += 1;
                    }
                    None => {
                        ep.wait(Some(Duration::from_millis(50))).unwrap();
                        while ep.completion().is_some() {}
                    }
                }
            }
            echoed
        })
    };
    let out = common::c::command(&exe)
        .args([&B_IP.to_string(), "7300", "7301"])
        .env("SLUICE_SOCKET", &e.sockets[0])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "mtp_ping: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.trim(), "ok");
    stop.store(true, Ordering::Relaxed);
    assert_eq!(echo.join().unwrap(), 4);
    // The program exited with its endpoint bound: the engine unbound it when it detached.
    let c = e.counters_when(0, WAIT, |c| c.apps_detached >= 1);
    assert_eq!(c.apps_detached, 1);
    let app = Sluice::attach(&e.sockets[0]).unwrap();
    let again = Endpoint::bind(&app, 7301).expect("port 7301 is free again after the detach");
    assert_eq!(again.port(), 7301);
    let _ = std::fs::remove_dir_all(&dir);
}
