//! `sluice bench shared-log` (issue 20 item 2): laminar.txt 5's shared-log microbenchmark.
//! Up to 32 client connections send records (64-1024 B, 256 in flight each) to one server
//! that keeps them in one linear log, three ways in one run:
//!
//! - `extension`: the core's shared log (`Stack::log_attach`): the data-path appends the
//!   records at the log's tail; the application parses and trims the log.
//! - `sluice-sockets`: the same log built by the application over the core's sockets:
//!   `Stack::recv` on every connection, then a copy of each whole record into the log.
//! - `linux-sockets`: the same application over Linux TCP on loopback.
//!
//! Both Sluice rows run two sans-IO cores (clients, server) in this process, frames handed
//! between them in memory; the Linux row runs both ends on the kernel's loopback. No
//! namespace, no root. Records/s is records the server's application took; CPU per record
//! is this process's user and system time (both ends, engine and application) over them.
//! Records are sized to divide the MSS (4096: MTU 4136, no timestamps), so each segment
//! holds whole records (laminar.txt 5 footnote 2).

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::{Duration, Instant as WallClock};

use clap::Args;
use sluice_tcp::{Config, ConnId, Event, Instant, LogId, Stack};
use sluice_wire::EthernetAddress;

use crate::apps::AppsError;
use crate::measure::cpu_seconds;

/// Records a client keeps in flight (sent, not yet taken by the server's application).
pub const IN_FLIGHT: u32 = 256;
/// A record's header: a marker byte, client (1), length (2), index (4).
const HEADER: usize = 8;
/// The first byte of every record: a parse that lands anywhere else notices.
const MARKER: u8 = 0xa5;
/// The cores' MSS: every record size divides it.
const MSS: u16 = 4096;
const PORT: u16 = 9000;
const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);

/// `sluice bench shared-log`.
#[derive(Args, Debug)]
pub struct BenchSharedLogArgs {
    /// A short run: 4 clients, 64 and 1024 B records, 0.2 s per row.
    #[arg(long)]
    pub quick: bool,
    /// Seconds per row (default 2, or 0.2 with --quick).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Client connections, comma-separated (default 1,8,32; at most 32).
    #[arg(long, value_delimiter = ',')]
    pub clients: Vec<u16>,
    /// Record sizes in bytes, comma-separated (default 64,256,1024; 8 to 4096, dividing 4096).
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<usize>,
}

/// One way of building the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The core's shared-log extension.
    Extension,
    /// An application over the core's sockets.
    SluiceSockets,
    /// An application over Linux sockets.
    LinuxSockets,
}

impl Variant {
    /// Its name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Extension => "extension",
            Variant::SluiceSockets => "sluice-sockets",
            Variant::LinuxSockets => "linux-sockets",
        }
    }
}

/// One measured row.
#[derive(Clone, Copy, Debug)]
pub struct Outcome {
    /// Records the server's application took.
    pub records: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Process CPU seconds (both ends).
    pub cpu: f64,
}

impl Outcome {
    /// Records per second.
    pub fn rate(&self) -> f64 {
        self.records as f64 / self.seconds.max(1e-9)
    }

    /// CPU microseconds per record.
    pub fn cpu_us(&self) -> f64 {
        self.cpu * 1e6 / (self.records.max(1) as f64)
    }
}

/// A record: header then a body the client and index determine.
fn record(client: u16, index: u32, size: usize, out: &mut Vec<u8>) {
    out.push(MARKER);
    out.push(client as u8);
    out.extend_from_slice(&(size as u16).to_be_bytes());
    out.extend_from_slice(&index.to_be_bytes());
    out.extend((HEADER..size).map(|i| (i as u8) ^ (index as u8)));
}

/// The application's linear log for the socket rows: a bounded ring records are copied in.
struct AppLog {
    bytes: Vec<u8>,
    tail: usize,
}

impl AppLog {
    fn append(&mut self, rec: &[u8]) {
        let cap = self.bytes.len();
        let start = self.tail % cap;
        let first = rec.len().min(cap - start);
        self.bytes[start..start + first].copy_from_slice(&rec[..first]);
        self.bytes[..rec.len() - first].copy_from_slice(&rec[first..]);
        self.tail += rec.len();
    }
}

/// Whole records at the front of `buf`: (client, length) of each, calling `take` with the
/// record's bytes. Returns the bytes parsed. A bad length is an error (a split record).
fn parse(buf: &[u8], mut take: impl FnMut(u16, &[u8])) -> Result<usize, AppsError> {
    let mut at = 0;
    while buf.len() - at >= HEADER {
        let len = usize::from(u16::from_be_bytes([buf[at + 2], buf[at + 3]]));
        if buf[at] != MARKER || len < HEADER {
            return Err(AppsError::Mismatch(format!(
                "no record boundary at log offset {at}"
            )));
        }
        if buf.len() - at < len {
            break;
        }
        let client = u16::from(buf[at + 1]);
        take(client, &buf[at..at + len]);
        at += len;
    }
    Ok(at)
}

fn core(n: u8, ip: Ipv4Addr) -> Stack {
    let mut cfg = Config::new(EthernetAddress([2, 0, 0, 0, 9, n]), ip);
    cfg.seed = 0x5eed + u64::from(n);
    cfg.mtu = MSS + 40;
    cfg.timestamps = false;
    cfg.max_connections = 128;
    cfg.rx_buffer = 4 << 20;
    cfg.tx_buffer = 4 << 20;
    let mut s = Stack::new(cfg).expect("a valid configuration");
    let (peer, mac) = if n == 1 {
        (CLIENT_IP, 2)
    } else {
        (SERVER_IP, 1)
    };
    s.add_neighbor(peer, EthernetAddress([2, 0, 0, 0, 9, mac]));
    s
}

fn now_of(start: WallClock) -> Instant {
    Instant::from_nanos(start.elapsed().as_nanos() as u64)
}

/// Frames from `from` to `to`, handed over in one batch.
fn pump(
    from: &mut Stack,
    to: &mut Stack,
    now: Instant,
    arena: &mut Vec<u8>,
    ends: &mut Vec<usize>,
) {
    arena.clear();
    ends.clear();
    let mut buf = vec![0u8; usize::from(MSS) + 100];
    while let Some(n) = from.poll_transmit(now, &mut buf) {
        arena.extend_from_slice(&buf[..n]);
        ends.push(arena.len());
    }
    let mut frames = Vec::with_capacity(ends.len());
    let mut start = 0;
    for &e in ends.iter() {
        frames.push(&arena[start..e]);
        start = e;
    }
    for chunk in frames.chunks(32) {
        to.handle_frames_checksum_ok(now, chunk);
    }
}

fn timers(s: &mut Stack, now: Instant) {
    if s.poll_timeout().is_some_and(|t| t <= now) {
        s.handle_timeout(now);
    }
}

/// The Sluice rows: two cores in this process.
fn run_sluice(
    variant: Variant,
    clients: u16,
    size: usize,
    seconds: f64,
) -> Result<Outcome, AppsError> {
    let mut server = core(1, SERVER_IP);
    let mut client = core(2, CLIENT_IP);
    let start = WallClock::now();
    let listener = server
        .listen(PORT, 128)
        .map_err(|e| AppsError::Usage(format!("listen: {e}")))?;
    let conns: Vec<ConnId> = (0..clients)
        .map(|_| client.connect(now_of(start), SERVER_IP, PORT))
        .collect::<Result<_, _>>()
        .map_err(|e| AppsError::Usage(format!("connect: {e}")))?;
    let log: Option<LogId> = match variant {
        Variant::Extension => Some(
            server
                .log_register(64 << 20)
                .map_err(|e| AppsError::Usage(format!("log: {e}")))?,
        ),
        _ => None,
    };
    let mut app_log = AppLog {
        bytes: vec![0; 64 << 20],
        tail: 0,
    };
    let mut accepted: Vec<ConnId> = Vec::new();
    let mut pending_attach: Vec<ConnId> = Vec::new();
    let mut sent = vec![0u32; usize::from(clients)];
    let mut taken = vec![0u32; usize::from(clients)];
    let mut partial: Vec<Vec<u8>> = vec![Vec::new(); usize::from(clients)];
    let (mut arena, mut ends) = (Vec::new(), Vec::new());
    let mut rec = Vec::with_capacity(size);
    let mut rx = vec![0u8; 256 << 10];
    let mut records = 0u64;
    let mut measuring: Option<(WallClock, f64, u64)> = None;
    loop {
        let now = now_of(start);
        // Clients: whole records while fewer than IN_FLIGHT are untaken.
        for (i, &c) in conns.iter().enumerate() {
            while sent[i] - taken[i] < IN_FLIGHT {
                rec.clear();
                record(i as u16, sent[i], size, &mut rec);
                match client.send(c, &rec) {
                    Ok(n) if n == size => sent[i] += 1,
                    Ok(n) => {
                        return Err(AppsError::Mismatch(format!(
                            "a partial send of {n} of {size} bytes"
                        )))
                    }
                    Err(_) => break,
                }
            }
        }
        pump(&mut client, &mut server, now, &mut arena, &mut ends);
        while let Some(ev) = server.poll_event() {
            if let Event::Acceptable(l) = ev {
                while let Ok(c) = server.accept(l) {
                    accepted.push(c);
                    pending_attach.push(c);
                }
            }
        }
        let _ = listener;
        // The server's application.
        match (variant, log) {
            (Variant::Extension, Some(log)) => {
                pending_attach.retain(|&c| server.log_attach(log, c).is_err());
                while let Some(r) = server.poll_log_redirect(log).map_err(usage)? {
                    server.log_fill(log, r.offset, &r.data).map_err(usage)?;
                }
                let (a, b) = server.log_peek(log).map_err(usage)?;
                let mut used = parse(a, |cl, _| {
                    taken[usize::from(cl)] += 1;
                    records += 1;
                })?;
                if used == a.len() && !b.is_empty() {
                    // A record never straddles the wrap of a log sized in whole records.
                    used += parse(b, |cl, _| {
                        taken[usize::from(cl)] += 1;
                        records += 1;
                    })?;
                }
                server.log_trim(log, used as u64).map_err(usage)?;
            }
            _ => {
                for (k, &c) in accepted.iter().enumerate() {
                    let pend = &mut partial[k];
                    while let Ok(n) = server.recv(c, &mut rx) {
                        if n == 0 {
                            break;
                        }
                        pend.extend_from_slice(&rx[..n]);
                    }
                    let used = parse(pend, |cl, r| {
                        app_log.append(r);
                        taken[usize::from(cl)] += 1;
                        records += 1;
                    })?;
                    pend.drain(..used);
                }
            }
        }
        pump(&mut server, &mut client, now, &mut arena, &mut ends);
        while client.poll_event().is_some() {}
        timers(&mut server, now);
        timers(&mut client, now);
        match measuring {
            // Warm up for a tenth of the run, then measure.
            None if start.elapsed().as_secs_f64() > seconds / 10.0 => {
                measuring = Some((WallClock::now(), cpu_seconds("/proc/self/stat"), records));
            }
            Some((t0, cpu0, r0)) if t0.elapsed().as_secs_f64() >= seconds => {
                return Ok(Outcome {
                    records: records - r0,
                    seconds: t0.elapsed().as_secs_f64(),
                    cpu: cpu_seconds("/proc/self/stat") - cpu0,
                });
            }
            _ => {}
        }
        if start.elapsed() > Duration::from_secs_f64(seconds * 3.0 + 5.0) {
            return Err(AppsError::Mismatch("the Sluice row did not finish".into()));
        }
    }
}

fn usage(e: sluice_tcp::LogError) -> AppsError {
    AppsError::Protocol(format!("shared log: {e}"))
}

/// The Linux row: both ends on loopback sockets, one thread, nonblocking.
fn run_linux(clients: u16, size: usize, seconds: f64) -> Result<Outcome, AppsError> {
    let io = |what: &str| {
        let what = what.to_string();
        move |e| AppsError::io(what.clone(), e)
    };
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io("bind"))?;
    let addr = listener.local_addr().map_err(io("local_addr"))?;
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..clients {
        let c = TcpStream::connect(addr).map_err(io("connect"))?;
        let (s, _) = listener.accept().map_err(io("accept"))?;
        for x in [&c, &s] {
            x.set_nodelay(true).map_err(io("nodelay"))?;
            x.set_nonblocking(true).map_err(io("nonblocking"))?;
        }
        senders.push((c, VecDeque::<u8>::new()));
        receivers.push((s, Vec::<u8>::new()));
    }
    let mut app_log = AppLog {
        bytes: vec![0; 64 << 20],
        tail: 0,
    };
    let n = usize::from(clients);
    let (mut sent, mut taken) = (vec![0u32; n], vec![0u32; n]);
    let mut rec = Vec::with_capacity(size);
    let mut rx = vec![0u8; 256 << 10];
    let mut records = 0u64;
    let start = WallClock::now();
    let mut measuring: Option<(WallClock, f64, u64)> = None;
    loop {
        for (i, (c, out)) in senders.iter_mut().enumerate() {
            while sent[i] - taken[i] < IN_FLIGHT && out.len() < 64 << 10 {
                rec.clear();
                record(i as u16, sent[i], size, &mut rec);
                out.extend(rec.iter().copied());
                sent[i] += 1;
            }
            while !out.is_empty() {
                let (a, _) = out.as_slices();
                match c.write(a) {
                    Ok(k) => {
                        out.drain(..k);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => return Err(AppsError::io("write", e)),
                }
            }
        }
        for (s, pend) in receivers.iter_mut() {
            loop {
                match s.read(&mut rx) {
                    Ok(0) => break,
                    Ok(k) => pend.extend_from_slice(&rx[..k]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => return Err(AppsError::io("read", e)),
                }
            }
            let used = parse(pend, |cl, r| {
                app_log.append(r);
                taken[usize::from(cl)] += 1;
                records += 1;
            })?;
            pend.drain(..used);
        }
        match measuring {
            None if start.elapsed().as_secs_f64() > seconds / 10.0 => {
                measuring = Some((WallClock::now(), cpu_seconds("/proc/self/stat"), records));
            }
            Some((t0, cpu0, r0)) if t0.elapsed().as_secs_f64() >= seconds => {
                return Ok(Outcome {
                    records: records - r0,
                    seconds: t0.elapsed().as_secs_f64(),
                    cpu: cpu_seconds("/proc/self/stat") - cpu0,
                });
            }
            _ => {}
        }
    }
}

/// Runs one row.
pub fn run_row(
    variant: Variant,
    clients: u16,
    size: usize,
    seconds: f64,
) -> Result<Outcome, AppsError> {
    match variant {
        Variant::LinuxSockets => run_linux(clients, size, seconds),
        v => run_sluice(v, clients, size, seconds),
    }
}

/// `sluice bench shared-log`: every (clients, size) three ways, ratios against Linux.
pub fn run(args: &BenchSharedLogArgs) -> Result<(), AppsError> {
    let seconds = args.seconds.unwrap_or(if args.quick { 0.2 } else { 2.0 });
    let clients = match (&args.clients[..], args.quick) {
        ([], true) => vec![4],
        ([], false) => vec![1, 8, 32],
        (c, _) => c.to_vec(),
    };
    let sizes = match (&args.sizes[..], args.quick) {
        ([], true) => vec![64, 1024],
        ([], false) => vec![64, 256, 1024],
        (s, _) => s.to_vec(),
    };
    if let Some(&c) = clients.iter().find(|&&c| c == 0 || c > 32) {
        return Err(AppsError::Usage(format!("--clients {c}: 1 to 32")));
    }
    if let Some(&s) = sizes
        .iter()
        .find(|&&s| !(HEADER..=usize::from(MSS)).contains(&s) || usize::from(MSS) % s != 0)
    {
        return Err(AppsError::Usage(format!(
            "--sizes {s}: {HEADER} to {MSS} bytes, dividing {MSS}"
        )));
    }
    println!(
        "{:>7} {:>6} {:<15} {:>12} {:>12} {:>9} {:>9}",
        "clients", "size", "log", "records/s", "cpu_us/rec", "x_linux", "cpu_x_lnx"
    );
    for &c in &clients {
        for &s in &sizes {
            let linux = run_row(Variant::LinuxSockets, c, s, seconds)?;
            for v in [
                Variant::Extension,
                Variant::SluiceSockets,
                Variant::LinuxSockets,
            ] {
                let o = if v == Variant::LinuxSockets {
                    linux
                } else {
                    run_row(v, c, s, seconds)?
                };
                println!(
                    "{:>7} {:>6} {:<15} {:>12.0} {:>12.3} {:>9.2} {:>9.2}",
                    c,
                    s,
                    v.name(),
                    o.rate(),
                    o.cpu_us(),
                    o.rate() / linux.rate().max(1e-9),
                    o.cpu_us() / linux.cpu_us().max(1e-9),
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_parse_back_and_a_split_one_is_refused() {
        let mut buf = Vec::new();
        record(3, 7, 64, &mut buf);
        record(4, 8, 128, &mut buf);
        let mut seen = Vec::new();
        let used = parse(&buf[..100], |c, r| seen.push((c, r.len()))).unwrap();
        assert_eq!((used, seen.clone()), (64, vec![(3, 64)]));
        let used = parse(&buf, |c, r| seen.push((c, r.len()))).unwrap();
        assert_eq!(used, 192);
        assert_eq!(seen[1..], [(3, 64), (4, 128)]);
        assert!(parse(&buf[10..], |_, _| {}).is_err(), "mid-record");
    }

    /// Each way of building the log takes records (a smoke run of a few milliseconds; no
    /// rate is asserted).
    #[test]
    fn each_way_takes_records() {
        for v in [
            Variant::Extension,
            Variant::SluiceSockets,
            Variant::LinuxSockets,
        ] {
            let o = run_row(v, 2, 64, 0.02).unwrap();
            assert!(o.records > 0, "{v:?}: {o:?}");
        }
    }
}
