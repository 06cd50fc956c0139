//! Header-only TX (flexins.txt 3.2): a connection whose send buffer is the caller's
//! `PayloadSource`. Two cores over an in-test link with seeded loss and reordering, in
//! virtual time: the header-only path puts the same frames on the wire as `send` (staging)
//! and the same stream arrives; bytes are released only when acknowledged; the send buffer
//! is the source's capacity; a caller that overwrites committed bytes changes only what its
//! own connection carries; a source that fails resets only its connection; close takes the
//! unacknowledged bytes in, so the caller's memory is never read after it.

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use sluice_tcp::{Config, ConnId, Event, Instant, PayloadSource, Stack, TxPath};
use sluice_wire::EthernetAddress;

const A_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x0a]);
const B_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x0b]);
const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 10);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 11);
const PORT: u16 = 5001;
/// The send buffer on both paths: the staging ring's size and the source's capacity.
const SNDBUF: usize = 16384;

/// A ring of `SNDBUF` bytes the "application" writes at stream positions, shared with the
/// core through [`RingSource`] (a stand-in for the service's shared TX ring).
#[derive(Clone)]
struct SharedRing(Arc<Mutex<Vec<u8>>>);

impl SharedRing {
    fn new() -> Self {
        SharedRing(Arc::new(Mutex::new(vec![0; SNDBUF])))
    }

    fn write(&self, pos: u64, data: &[u8]) {
        let mut r = self.0.lock().unwrap();
        for (i, &b) in data.iter().enumerate() {
            r[(pos as usize + i) % SNDBUF] = b;
        }
    }
}

struct RingSource {
    ring: SharedRing,
    /// Gathers fail from this position on (None: never).
    fail_from: Option<u64>,
}

impl PayloadSource for RingSource {
    fn capacity(&self) -> u64 {
        SNDBUF as u64
    }

    fn gather(&self, pos: u64, dst: &mut [u8]) -> bool {
        if self.fail_from.is_some_and(|f| pos + dst.len() as u64 > f) {
            return false;
        }
        let r = self.ring.0.lock().unwrap();
        for (i, b) in dst.iter_mut().enumerate() {
            *b = r[(pos as usize + i) % SNDBUF];
        }
        true
    }
}

fn config(mac: EthernetAddress, ip: Ipv4Addr) -> Config {
    let mut cfg = Config::new(mac, ip);
    cfg.seed = 0x4e4f_4e4c;
    cfg.max_connections = 8;
    cfg.tx_buffer = SNDBUF;
    cfg.tx_buffer_initial = SNDBUF;
    cfg.rx_buffer = 32768;
    cfg.rto_min = Duration::from_millis(5);
    cfg.rto_initial = Duration::from_millis(20);
    cfg
}

/// A deterministic generator for the link's loss and delays.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// The link between the two cores: frames delivered after a delay with jitter (so later
/// frames may overtake earlier ones), some dropped.
struct Link {
    rng: Lcg,
    /// Drop probability in 1/1000.
    loss: u64,
    /// (delivery time, to B?, frame), in order of sending.
    queue: Vec<(Instant, bool, Vec<u8>)>,
}

impl Link {
    fn carry(&mut self, now: Instant, to_b: bool, frame: &[u8]) {
        if self.rng.next() % 1000 < self.loss {
            return;
        }
        let delay = 200 + self.rng.next() % 300;
        let at = now + Duration::from_micros(delay);
        self.queue.push((at, to_b, frame.to_vec()));
    }

    fn next_due(&self) -> Option<Instant> {
        self.queue.iter().map(|f| f.0).min()
    }

    /// Frames due by `now`, earliest first (ties in sending order).
    fn due(&mut self, now: Instant) -> Vec<(bool, Vec<u8>)> {
        let mut due: Vec<_> = Vec::new();
        let mut i = 0;
        while i < self.queue.len() {
            if self.queue[i].0 <= now {
                let (at, to_b, f) = self.queue.remove(i);
                due.push((at, to_b, f));
            } else {
                i += 1;
            }
        }
        due.sort_by_key(|f| f.0);
        due.into_iter().map(|(_, b, f)| (b, f)).collect()
    }
}

/// What one transfer produced.
struct Run {
    /// Every frame A put on the wire, in order.
    wire: Vec<Vec<u8>>,
    /// The stream B received.
    received: Vec<u8>,
    touched: sluice_tcp::Touched,
    /// (released, committed) as seen after each step, header-only only.
    positions: Vec<(u64, u64)>,
    /// A's retransmitted bytes.
    retransmitted: u64,
}

/// A sends `data` to B over a link with `loss`/1000 drops, on `path`; `overwrite` (header
/// only) rewrites committed bytes at the given position with 0xEE once they were first sent.
fn transfer(path: TxPath, data: &[u8], loss: u64, seed: u64, overwrite: Option<u64>) -> Run {
    let mut a = Stack::new(config(A_MAC, A_IP)).unwrap();
    let mut b = Stack::new(config(B_MAC, B_IP)).unwrap();
    a.add_neighbor(B_IP, B_MAC);
    b.add_neighbor(A_IP, A_MAC);
    let l = b.listen(PORT, 4).unwrap();
    let mut now = Instant::ZERO;
    let id = a.connect(now, B_IP, PORT).unwrap();
    let ring = SharedRing::new();
    // The application's stream position of its next byte: starts anywhere.
    let base = 1_000_000_007u64;
    if path == TxPath::HeaderOnly {
        let src = RingSource {
            ring: ring.clone(),
            fail_from: None,
        };
        a.set_payload_source(id, Box::new(src), base).unwrap();
    }
    let mut link = Link {
        rng: Lcg(seed),
        loss,
        queue: Vec::new(),
    };
    let mut run = Run {
        wire: Vec::new(),
        received: Vec::new(),
        touched: Default::default(),
        positions: Vec::new(),
        retransmitted: 0,
    };
    let mut server: Option<ConnId> = None;
    let mut written = 0usize;
    let mut overwritten = false;
    let mut buf = vec![0u8; 2048];
    let end = Instant::from_millis(60_000);
    while now < end && run.received.len() < data.len() {
        // The application: as much as the send buffer takes, on either path.
        if written < data.len() {
            let rest = &data[written..];
            let n = match path {
                TxPath::Staging => a.send(id, rest).unwrap_or(0),
                TxPath::HeaderOnly => {
                    let p = a.tx_positions(id).unwrap().unwrap();
                    let room = (SNDBUF as u64 - (p.committed - p.released)) as usize;
                    let k = room.min(rest.len());
                    ring.write(p.committed, &rest[..k]);
                    if k > 0 {
                        a.send_external(id, k).unwrap_or(0)
                    } else {
                        0
                    }
                }
            };
            written += n;
        }
        while a.poll_event().is_some() {}
        while let Some(e) = b.poll_event() {
            if let Event::Acceptable(_) = e {
                server = b.accept(l).ok();
            }
        }
        if let Some(s) = server {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = b.recv(s, &mut chunk) {
                if n == 0 {
                    break;
                }
                run.received.extend_from_slice(&chunk[..n]);
            }
        }
        while let Some(n) = a.poll_transmit(now, &mut buf) {
            run.wire.push(buf[..n].to_vec());
            link.carry(now, true, &buf[..n]);
        }
        while let Some(n) = b.poll_transmit(now, &mut buf) {
            link.carry(now, false, &buf[..n]);
        }
        if let (Some(at), false) = (overwrite, overwritten) {
            let p = a.tx_positions(id).unwrap().unwrap();
            // Once the byte at `at` is committed (and so sent): the caller breaks the
            // rule and changes it before its release.
            if p.committed > at && p.released <= at {
                ring.write(at, &[0xEE; 100]);
                overwritten = true;
            }
        }
        if path == TxPath::HeaderOnly {
            let p = a.tx_positions(id).unwrap().unwrap();
            run.positions.push((p.released, p.committed));
        }
        // Next: a frame's delivery, a timer, or the application's next tick.
        let tick = now + Duration::from_micros(500);
        let next = [link.next_due(), a.poll_timeout(), b.poll_timeout()]
            .into_iter()
            .flatten()
            .fold(tick, |m, t| m.min(t))
            .max(now);
        now = if next == now {
            now + Duration::from_micros(1)
        } else {
            next
        };
        for (to_b, f) in link.due(now) {
            if to_b {
                b.handle_frame(now, &f);
            } else {
                a.handle_frame(now, &f);
            }
        }
        for s in [&mut a, &mut b] {
            if s.poll_timeout().is_some_and(|t| t <= now) {
                s.handle_timeout(now);
            }
        }
        a.check_invariants().unwrap();
    }
    run.touched = a.tx_touch();
    run.retransmitted = a.counters().retransmitted_bytes;
    run
}

fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31) ^ salt ^ (i >> 8) as u8)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// The header-only path is invisible on the wire: every frame A sends, first
    /// transmissions and retransmissions alike, is byte-identical to the staging path's,
    /// and B receives the stream exactly, under loss and reordering.
    #[test]
    fn header_only_sends_the_same_frames_as_send(
        len in 1usize..120_000,
        loss in prop_oneof![Just(0u64), 10u64..80],
        seed in any::<u64>(),
    ) {
        let data = pattern(len, seed as u8);
        let staged = transfer(TxPath::Staging, &data, loss, seed, None);
        let direct = transfer(TxPath::HeaderOnly, &data, loss, seed, None);
        prop_assert!(staged.received == data, "staging delivered the stream");
        prop_assert!(direct.received == data, "header-only delivered the stream");
        prop_assert_eq!(staged.retransmitted, direct.retransmitted);
        prop_assert_eq!(staged.wire.len(), direct.wire.len());
        for (i, (s, d)) in staged.wire.iter().zip(&direct.wire).enumerate() {
            prop_assert!(s == d, "frame {} differs", i);
        }
        // The counters: one copy into frames each; the staging copy only on staging.
        prop_assert_eq!(staged.touched.payload, direct.touched.payload);
        prop_assert!(direct.touched.payload >= len as u64);
        prop_assert_eq!(direct.touched.staging, 0);
        prop_assert_eq!(staged.touched.staging, len as u64);
        prop_assert!(direct.touched.per_payload_byte() < staged.touched.per_payload_byte());
        // Released never passes committed, never moves back, and never passes what B
        // could have acknowledged.
        let mut last = 0;
        for &(rel, com) in &direct.positions {
            prop_assert!(rel <= com && rel >= last && com - rel <= SNDBUF as u64);
            last = rel;
        }
    }
}

#[test]
fn bytes_are_released_only_when_acknowledged() {
    let mut a = Stack::new(config(A_MAC, A_IP)).unwrap();
    let mut b = Stack::new(config(B_MAC, B_IP)).unwrap();
    a.add_neighbor(B_IP, B_MAC);
    b.add_neighbor(A_IP, A_MAC);
    b.listen(PORT, 4).unwrap();
    let t = Instant::from_millis(1);
    let id = a.connect(t, B_IP, PORT).unwrap();
    let ring = SharedRing::new();
    let src = RingSource {
        ring: ring.clone(),
        fail_from: None,
    };
    a.set_payload_source(id, Box::new(src), 77).unwrap();
    let mut buf = vec![0u8; 2048];
    // Handshake, with every frame delivered.
    let mut exchange = |a: &mut Stack, b: &mut Stack, deliver_data: bool| {
        for _ in 0..8 {
            while let Some(n) = a.poll_transmit(t, &mut buf) {
                let data_frame = n > 54 + 12;
                if deliver_data || !data_frame {
                    b.handle_frame(t, &buf[..n]);
                }
            }
            while let Some(n) = b.poll_transmit(t, &mut buf) {
                a.handle_frame(t, &buf[..n]);
            }
        }
    };
    exchange(&mut a, &mut b, true);
    // Sending before the handshake ends would block; now it is established.
    ring.write(77, &[7u8; 5000]);
    assert_eq!(a.send_external(id, 5000), Ok(5000));
    let p = a.tx_positions(id).unwrap().unwrap();
    assert_eq!((p.released, p.committed, p.external), (77, 5077, true));
    // The segments leave but B never sees them: nothing is released.
    exchange(&mut a, &mut b, false);
    let p = a.tx_positions(id).unwrap().unwrap();
    assert_eq!(p.released, 77, "sent is not acknowledged");
    assert!(
        a.tx_touch().payload > 0,
        "segments were built from the source"
    );
    // The retransmission timeout resends them from the source; B acknowledges.
    let later = Instant::from_millis(2000);
    a.handle_timeout(later);
    for _ in 0..16 {
        while let Some(n) = a.poll_transmit(later, &mut buf) {
            b.handle_frame(later, &buf[..n]);
        }
        while let Some(n) = b.poll_transmit(later, &mut buf) {
            a.handle_frame(later, &buf[..n]);
        }
        a.handle_timeout(later);
    }
    let p = a.tx_positions(id).unwrap().unwrap();
    assert_eq!((p.released, p.committed), (5077, 5077));
    let woke = std::iter::from_fn(|| a.poll_event())
        .any(|e| matches!(e, Event::Conn(c, r) if c == id && r.writable()));
    assert!(woke, "a release raises WRITABLE for the caller to see");
}

#[test]
fn the_send_buffer_is_the_sources_capacity() {
    let mut a = Stack::new(config(A_MAC, A_IP)).unwrap();
    let mut b = Stack::new(config(B_MAC, B_IP)).unwrap();
    a.add_neighbor(B_IP, B_MAC);
    b.add_neighbor(A_IP, A_MAC);
    b.listen(PORT, 4).unwrap();
    let t = Instant::from_millis(1);
    let id = a.connect(t, B_IP, PORT).unwrap();
    let src = RingSource {
        ring: SharedRing::new(),
        fail_from: None,
    };
    assert_eq!(
        a.send_external(id, 10),
        Err(sluice_tcp::Error::InvalidHandle),
        "no source yet"
    );
    a.set_payload_source(id, Box::new(src), 0).unwrap();
    let mut buf = vec![0u8; 2048];
    for _ in 0..4 {
        while let Some(n) = a.poll_transmit(t, &mut buf) {
            b.handle_frame(t, &buf[..n]);
        }
        while let Some(n) = b.poll_transmit(t, &mut buf) {
            a.handle_frame(t, &buf[..n]);
        }
    }
    assert_eq!(a.send_external(id, SNDBUF + 100), Ok(SNDBUF));
    assert_eq!(a.send_external(id, 1), Err(sluice_tcp::Error::WouldBlock));
    assert_eq!(a.info(id).unwrap().writable, 0);
    // A second source while bytes are unacknowledged is refused.
    let again = RingSource {
        ring: SharedRing::new(),
        fail_from: None,
    };
    assert_eq!(
        a.set_payload_source(id, Box::new(again), 0),
        Err(sluice_tcp::Error::WouldBlock)
    );
}

/// Breaking the rule (changing committed bytes before their release) changes only what the
/// connection carries from then on: no panic, the stream arrives with the new bytes where a
/// segment was built after the change, and the checksums are right (B accepted them).
#[test]
fn overwriting_committed_bytes_changes_only_that_stream() {
    let data = pattern(60_000, 3);
    // Loss so that some of the overwritten range is sent again after the change.
    let (mut changed, mut retransmitted) = (false, 0);
    for seed in 1..6u64 {
        let run = transfer(
            TxPath::HeaderOnly,
            &data,
            50,
            seed,
            Some(30_000 + 1_000_000_007),
        );
        assert_eq!(run.received.len(), data.len(), "the stream completes");
        let at = 30_000;
        for (i, (&got, &want)) in run.received.iter().zip(&data).enumerate() {
            if !(at..at + 100).contains(&i) {
                assert_eq!(got, want, "byte {i} outside the overwritten range");
            } else {
                assert!(
                    got == want || got == 0xEE,
                    "byte {i}: old or new, nothing else"
                );
            }
        }
        changed |= run.received[at..at + 100].contains(&0xEE);
        retransmitted += run.retransmitted;
    }
    assert!(
        changed,
        "segments built after the change carry the new bytes"
    );
    assert!(retransmitted > 0, "the runs had retransmissions");
}

/// A source that cannot gather (the caller's buffer is gone) resets its connection only.
#[test]
fn a_failing_source_resets_only_its_connection() {
    let mut a = Stack::new(config(A_MAC, A_IP)).unwrap();
    let mut b = Stack::new(config(B_MAC, B_IP)).unwrap();
    a.add_neighbor(B_IP, B_MAC);
    b.add_neighbor(A_IP, A_MAC);
    let l = b.listen(PORT, 4).unwrap();
    let t = Instant::from_millis(1);
    let bad = a.connect(t, B_IP, PORT).unwrap();
    let good = a.connect(t, B_IP, PORT).unwrap();
    let (rb, rg) = (SharedRing::new(), SharedRing::new());
    let src = RingSource {
        ring: rb.clone(),
        fail_from: Some(100),
    };
    a.set_payload_source(bad, Box::new(src), 0).unwrap();
    let src = RingSource {
        ring: rg.clone(),
        fail_from: None,
    };
    a.set_payload_source(good, Box::new(src), 0).unwrap();
    let mut buf = vec![0u8; 2048];
    let mut pump = |a: &mut Stack, b: &mut Stack| {
        for _ in 0..8 {
            while let Some(n) = a.poll_transmit(t, &mut buf) {
                b.handle_frame(t, &buf[..n]);
            }
            while let Some(n) = b.poll_transmit(t, &mut buf) {
                a.handle_frame(t, &buf[..n]);
            }
        }
    };
    pump(&mut a, &mut b);
    rb.write(0, &[1u8; 500]);
    rg.write(0, &pattern(500, 9));
    assert_eq!(a.send_external(bad, 500), Ok(500));
    assert_eq!(a.send_external(good, 500), Ok(500));
    pump(&mut a, &mut b);
    assert_eq!(a.tx_touch().gather_failed, 1);
    assert!(
        a.error(bad).unwrap().is_some(),
        "the failing connection is reset"
    );
    assert_eq!(a.error(good).unwrap(), None);
    let mut got = Vec::new();
    while let Ok(s) = b.accept(l) {
        let mut chunk = [0u8; 1024];
        while let Ok(n) = b.recv(s, &mut chunk) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&chunk[..n]);
        }
    }
    assert_eq!(got, pattern(500, 9), "only the good stream's bytes arrive");
}

/// Close takes the unacknowledged bytes into the core: the caller may reuse its buffer at
/// once, and the source is dropped (never read again).
#[test]
fn close_takes_unacknowledged_bytes_in() {
    let mut a = Stack::new(config(A_MAC, A_IP)).unwrap();
    let mut b = Stack::new(config(B_MAC, B_IP)).unwrap();
    a.add_neighbor(B_IP, B_MAC);
    b.add_neighbor(A_IP, A_MAC);
    let l = b.listen(PORT, 4).unwrap();
    let t = Instant::from_millis(1);
    let id = a.connect(t, B_IP, PORT).unwrap();
    let ring = SharedRing::new();
    let src = RingSource {
        ring: ring.clone(),
        fail_from: None,
    };
    a.set_payload_source(id, Box::new(src), 10).unwrap();
    let mut buf = vec![0u8; 2048];
    for _ in 0..4 {
        while let Some(n) = a.poll_transmit(t, &mut buf) {
            b.handle_frame(t, &buf[..n]);
        }
        while let Some(n) = b.poll_transmit(t, &mut buf) {
            a.handle_frame(t, &buf[..n]);
        }
    }
    let data = pattern(9000, 5);
    ring.write(10, &data);
    assert_eq!(a.send_external(id, 9000), Ok(9000));
    // Sent, lost, then closed: the retransmissions must come from the core's copy.
    while a.poll_transmit(t, &mut buf).is_some() {}
    a.close(id).unwrap();
    assert_eq!(
        Arc::strong_count(&ring.0),
        1,
        "the source was dropped at close"
    );
    assert_eq!(a.tx_touch().staging, 9000, "taken in: one copy");
    ring.write(10, &[0xAA; 9000]);
    let mut got = Vec::new();
    let mut server = None;
    for step in 0..200u64 {
        let now = Instant::from_millis(10 + step * 50);
        a.handle_timeout(now);
        b.handle_timeout(now);
        while let Some(n) = a.poll_transmit(now, &mut buf) {
            b.handle_frame(now, &buf[..n]);
        }
        while let Some(n) = b.poll_transmit(now, &mut buf) {
            a.handle_frame(now, &buf[..n]);
        }
        if server.is_none() {
            server = b.accept(l).ok();
        }
        if let Some(s) = server {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = b.recv(s, &mut chunk) {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&chunk[..n]);
            }
        }
    }
    assert_eq!(got, data);
}
