//! flexins-tx's TCP rows: header-only TX for TCP sends (the socket's ring as the send buffer,
//! `sluice_tcp::PayloadSource`) against the staging copy (`Stack::send`), as engine bytes
//! touched per payload byte from the core's `tx_touch` counters. Two cores joined by a
//! lossless in-memory link in virtual time: a count, not a timing, so it is exact and the
//! same on every machine.

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_tcp::{Config, Event, Instant, PayloadSource, Stack, Touched, TxPath};
use sluice_wire::EthernetAddress;

/// The sender's ring: the stand-in for a service socket's shared TX ring.
const RING: usize = 256 << 10;

/// One transfer's outcome.
#[derive(Clone, Copy, Debug)]
pub struct TcpPoint {
    /// Bytes per application write.
    pub write: usize,
    /// The transmit path.
    pub path: TxPath,
    /// Bytes transferred.
    pub bytes: usize,
    /// The sender's transmit-side bytes touched.
    pub touched: Touched,
    /// The receiver got every byte, in order.
    pub exact: bool,
}

/// The ring, shared by the "application" (writes) and the core (gathers).
#[derive(Clone)]
struct Ring(Arc<Mutex<Vec<u8>>>);

impl PayloadSource for Ring {
    fn capacity(&self) -> u64 {
        RING as u64
    }

    fn gather(&self, pos: u64, dst: &mut [u8]) -> bool {
        let r = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let at = (pos % RING as u64) as usize;
        let first = dst.len().min(RING - at);
        dst[..first].copy_from_slice(&r[at..at + first]);
        let rest = dst.len() - first;
        dst[first..].copy_from_slice(&r[..rest]);
        true
    }
}

impl Ring {
    fn write(&self, pos: u64, data: &[u8]) {
        let mut r = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for (i, &b) in data.iter().enumerate() {
            r[(pos as usize + i) % RING] = b;
        }
    }
}

fn core(last: u8) -> Config {
    let mut c = Config::new(
        EthernetAddress([0x02, 0, 0, 0, 0, last]),
        Ipv4Addr::new(10, 21, 0, last),
    );
    c.seed = 21;
    c.max_connections = 4;
    c.tx_buffer = RING;
    c.rx_buffer = 1 << 20;
    c
}

/// Sends `bytes` in writes of `write` bytes from one core to the other on `path`.
pub fn transfer(path: TxPath, write: usize, bytes: usize) -> TcpPoint {
    let (mut a, mut b) = match (Stack::new(core(1)), Stack::new(core(2))) {
        (Ok(a), Ok(b)) => (a, b),
        _ => unreachable!("a fixed valid configuration"),
    };
    a.add_neighbor(b.config().ip, b.config().mac);
    b.add_neighbor(a.config().ip, a.config().mac);
    let listener = b.listen(7, 1).ok();
    let mut now = Instant::ZERO;
    let id = a.connect(now, b.config().ip, 7).ok();
    let ring = Ring(Arc::new(Mutex::new(vec![0; RING])));
    if let (TxPath::HeaderOnly, Some(id)) = (path, id) {
        let _ = a.set_payload_source(id, Box::new(ring.clone()), 0);
    }
    let byte = |i: usize| (i as u8).wrapping_mul(7) ^ (i >> 10) as u8;
    let (mut written, mut received, mut exact) = (0, 0, true);
    let (mut server, mut frame) = (None, vec![0u8; 2048]);
    let mut chunk = vec![0u8; 64 << 10];
    let end = Instant::from_millis(120_000);
    while received < bytes && now < end {
        if let Some(id) = id {
            while written < bytes {
                let n = (bytes - written).min(write);
                let data: Vec<u8> = (written..written + n).map(byte).collect();
                let took = match path {
                    TxPath::Staging => a.send(id, &data).unwrap_or(0),
                    TxPath::HeaderOnly => match a.tx_positions(id) {
                        Ok(Some(p)) if RING as u64 - (p.committed - p.released) >= n as u64 => {
                            ring.write(p.committed, &data);
                            a.send_external(id, n).unwrap_or(0)
                        }
                        _ => 0,
                    },
                };
                written += took;
                if took < n {
                    break;
                }
            }
        }
        while a.poll_event().is_some() {}
        while let Some(e) = b.poll_event() {
            if let (Event::Acceptable(_), Some(l)) = (e, listener) {
                server = b.accept(l).ok();
            }
        }
        if let Some(s) = server {
            while let Ok(n) = b.recv(s, &mut chunk) {
                if n == 0 {
                    break;
                }
                exact &= chunk[..n]
                    .iter()
                    .enumerate()
                    .all(|(i, &v)| v == byte(received + i));
                received += n;
            }
        }
        // A lossless link with no delay: each side's frames straight to the other.
        while let Some(n) = a.poll_transmit(now, &mut frame) {
            b.handle_frame(now, &frame[..n]);
        }
        while let Some(n) = b.poll_transmit(now, &mut frame) {
            a.handle_frame(now, &frame[..n]);
        }
        now += Duration::from_micros(100);
        for s in [&mut a, &mut b] {
            if s.poll_timeout().is_some_and(|t| t <= now) {
                s.handle_timeout(now);
            }
        }
    }
    TcpPoint {
        write,
        path,
        bytes,
        touched: a.tx_touch(),
        exact: exact && received == bytes,
    }
}

/// Both paths for each write size, `bytes` each.
pub fn measure(writes: &[usize], bytes: usize) -> Vec<TcpPoint> {
    writes
        .iter()
        .flat_map(|&w| [TxPath::HeaderOnly, TxPath::Staging].map(|p| transfer(p, w, bytes)))
        .collect()
}

/// The report's note lines: engine bytes touched per payload byte, each path.
pub fn notes(points: &[TcpPoint]) -> Vec<String> {
    points
        .iter()
        .map(|p| {
            let t = p.touched;
            let per = |v: u64| v as f64 / t.payload.max(1) as f64;
            format!(
                "TCP send, {} B writes, {} B, {}: touched/B {:.2} (frame copy {:.2}, staging \
                 {:.2}, checksum {:.2}){}",
                p.write,
                p.bytes,
                match p.path {
                    TxPath::HeaderOnly => "header-only",
                    TxPath::Staging => "staging",
                },
                t.per_payload_byte(),
                t.payload as f64 / p.bytes.max(1) as f64,
                per(t.staging),
                per(t.checksum),
                if p.exact { "" } else { " NOT EXACT" }
            )
        })
        .collect()
}
