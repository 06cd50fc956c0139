//! Many idle connections on one core (issue 18 item 3): a server core takes `conns`
//! connections from simulated peers and holds them established and idle, then serves an
//! echo workload on a few more from a client core; the report gives the server's memory
//! per connection and the cost per segment of that workload.
//!
//! The peers are stateless: the k-th peer's address, port and initial sequence number are
//! functions of k, so a SYN-ACK is answered from its own fields and a million peers cost
//! nothing beside the server. Frames go straight between the cores, in virtual time.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant as WallClock};

use sluice_tcp::frame::{emit_segment, Route, TxChecksum, TCP_HEADER_OFFSET};
use sluice_tcp::{Config, ConfigError, ConnId, Event, Instant, Stack, StateBytes};
use sluice_wire::tcp::{ChecksumCheck, SeqNumber, TcpFlags, TcpHeader, TcpOptions};
use sluice_wire::EthernetAddress;

/// The server's address.
pub const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
/// The echo client's address.
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// The first idle peer's address; the k-th uses address `k / PEER_PORTS` after it.
pub const PEER_BASE: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 0);
/// Source ports per peer address.
pub const PEER_PORTS: usize = 50_000;
/// The server's port.
pub const SERVER_PORT: u16 = 7;
/// SYNs handed to the server per batch.
const SYN_BATCH: usize = 32;
/// The echo workload's request size.
const REQUEST: usize = 64;

const SERVER_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const CLIENT_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
const PEER_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 3]);

/// What to run.
#[derive(Clone, Copy, Debug)]
pub struct MillionConfig {
    /// Idle connections the server holds.
    pub conns: usize,
    /// Connections of the echo workload (beside the idle ones).
    pub active: usize,
    /// Requests each active connection sends, one at a time.
    pub rounds: usize,
    /// The cores' seed.
    pub seed: u64,
}

impl Default for MillionConfig {
    fn default() -> Self {
        MillionConfig {
            conns: 1000,
            active: 8,
            rounds: 2000,
            seed: 1,
        }
    }
}

/// What a run measured.
#[derive(Clone, Copy, Debug)]
pub struct MillionReport {
    /// Idle connections established on the server (and accepted by its application).
    pub established: usize,
    /// The server's resident memory added by the core and its connections, bytes: VmRSS
    /// of /proc/self/status after the idle connections were up, minus before the core
    /// was made (0 where /proc is not there).
    pub rss_bytes: u64,
    /// Payload storage allocated in the server once idle: receive rings, send rings and
    /// the pools' spare storage (`Stack::buffer_memory_allocated`).
    pub ring_bytes: (usize, usize, usize),
    /// The server's per-connection data-path state.
    pub state: StateBytes,
    /// How far the server's next deadline lay once the connections were idle (None: no
    /// timer armed at all).
    pub next_timer: Option<Duration>,
    /// Segments the server took in and sent during the echo workload.
    pub segments: u64,
    /// Wall time spent in the server's calls during the echo workload.
    pub server_time: Duration,
    /// The lowest wall nanoseconds per segment over the workload's blocks (a tenth of its
    /// round trips each): the figure least disturbed by other work on a shared machine.
    pub best_ns_per_segment: f64,
    /// Echo round trips completed.
    pub echoes: u64,
    /// Virtual time the whole run took.
    pub virtual_time: Duration,
}

impl MillionReport {
    /// Resident bytes per idle connection.
    pub fn bytes_per_connection(&self) -> f64 {
        self.rss_bytes as f64 / self.established.max(1) as f64
    }

    /// Wall nanoseconds of server work per segment of the whole echo workload.
    pub fn ns_per_segment(&self) -> f64 {
        self.server_time.as_nanos() as f64 / self.segments.max(1) as f64
    }
}

/// Why a run failed.
#[derive(Debug)]
pub enum MillionError {
    /// A core refused its configuration.
    Config(ConfigError),
    /// A step did not complete: what.
    Stuck(String),
}

impl std::fmt::Display for MillionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MillionError::Config(e) => write!(f, "configuration: {e}"),
            MillionError::Stuck(what) => write!(f, "stuck: {what}"),
        }
    }
}

impl std::error::Error for MillionError {}

impl From<ConfigError> for MillionError {
    fn from(e: ConfigError) -> Self {
        MillionError::Config(e)
    }
}

/// The server's configuration for `conns` idle plus `active` connections.
pub fn server_config(conns: usize, active: usize, seed: u64) -> Config {
    let mut cfg = Config::new(SERVER_MAC, SERVER_IP);
    cfg.max_connections = conns + active + 16;
    cfg.seed = seed;
    cfg
}

/// The k-th idle peer's address and port.
pub fn peer_of(k: usize) -> (Ipv4Addr, u16) {
    let ip = Ipv4Addr::from(u32::from(PEER_BASE) + (k / PEER_PORTS) as u32);
    (ip, 10_000 + (k % PEER_PORTS) as u16)
}

/// The k-th peer's initial sequence number.
fn peer_isn(k: usize, seed: u64) -> SeqNumber {
    SeqNumber((k as u32).wrapping_mul(0x9e37_79b9) ^ seed as u32)
}

/// A peer's segment to the server, as a frame.
fn peer_frame(ip: Ipv4Addr, header: &TcpHeader) -> Vec<u8> {
    let route = Route {
        src_mac: PEER_MAC,
        dst_mac: SERVER_MAC,
        src_ip: ip,
        dst_ip: SERVER_IP,
    };
    let mut buf = vec![0u8; 128];
    let n =
        emit_segment(&mut buf, &route, 0, header, 0, TxChecksum::Full, |_| {}).unwrap_or_default();
    buf.truncate(n);
    buf
}

/// Resident set size of this process in bytes, from /proc/self/status (None without it).
pub fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Runs `cfg`: idle connections up, memory measured, then the echo workload.
pub fn run(cfg: &MillionConfig) -> Result<MillionReport, MillionError> {
    let before = rss_bytes();
    let mut server = Stack::new(server_config(cfg.conns, cfg.active, cfg.seed))?;
    let listener = server
        .listen(SERVER_PORT, 1024)
        .map_err(|e| MillionError::Stuck(format!("listen: {e}")))?;
    let mut now = Instant::ZERO;
    let mut frames: Vec<Vec<u8>> = Vec::with_capacity(SYN_BATCH);
    let mut out = vec![0u8; 2048];
    let mut established = 0;
    for first in (0..cfg.conns).step_by(SYN_BATCH) {
        let last = (first + SYN_BATCH).min(cfg.conns);
        frames.clear();
        for k in first..last {
            let (ip, port) = peer_of(k);
            let syn = TcpHeader {
                src_port: port,
                dst_port: SERVER_PORT,
                seq: peer_isn(k, cfg.seed),
                ack: SeqNumber(0),
                flags: TcpFlags::SYN,
                window: 65535,
                urgent: 0,
                options: TcpOptions {
                    mss: Some(1460),
                    ..TcpOptions::default()
                },
            };
            frames.push(peer_frame(ip, &syn));
        }
        handle(&mut server, now, &frames);
        now += Duration::from_micros(10);
        // Each SYN-ACK answered by its peer's ACK, from the SYN-ACK's own fields.
        frames.clear();
        while let Some(n) = server.poll_transmit(now, &mut out) {
            if let Some(ack) = answer_syn_ack(&out[..n]) {
                frames.push(ack);
            }
        }
        handle(&mut server, now, &frames);
        while server.accept(listener).is_ok() {
            established += 1;
        }
        while server.poll_event().is_some() {}
        serve_timers(&mut server, now);
        now += Duration::from_micros(10);
    }
    if established != cfg.conns {
        return Err(MillionError::Stuck(format!(
            "{established} of {} connections established",
            cfg.conns
        )));
    }
    // Past every handshake's timers: the connections are idle, with none armed.
    now += Duration::from_secs(2);
    serve_timers(&mut server, now);
    let after = rss_bytes();
    let rss = match (before, after) {
        (Some(b), Some(a)) => a.saturating_sub(b),
        _ => 0,
    };
    let ring_bytes = server.buffer_memory_allocated();
    let next_timer = server
        .poll_timeout()
        .map(|t| Duration::from_nanos(t.as_nanos().saturating_sub(now.as_nanos())));
    let (segments, server_time, best_ns_per_segment, echoes, end) =
        echo(&mut server, listener, cfg, now)?;
    Ok(MillionReport {
        established,
        rss_bytes: rss,
        ring_bytes,
        state: server.datapath_state_bytes(),
        next_timer,
        segments,
        server_time,
        best_ns_per_segment,
        echoes,
        virtual_time: Duration::from_nanos(end.as_nanos()),
    })
}

/// Hands `frames` to `stack`.
fn handle(stack: &mut Stack, now: Instant, frames: &[Vec<u8>]) {
    let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    stack.handle_frames(now, &refs);
}

/// Runs `stack`'s due timers.
fn serve_timers(stack: &mut Stack, now: Instant) {
    while stack.poll_timeout().is_some_and(|t| t <= now) {
        stack.handle_timeout(now);
    }
}

/// The stateless peer's ACK of a SYN-ACK the server sent (None for any other frame).
fn answer_syn_ack(frame: &[u8]) -> Option<Vec<u8>> {
    let ip_dst = frame.get(30..34)?;
    let dst = Ipv4Addr::new(ip_dst[0], ip_dst[1], ip_dst[2], ip_dst[3]);
    let (h, _) = TcpHeader::parse(
        frame.get(TCP_HEADER_OFFSET..)?,
        SERVER_IP,
        dst,
        ChecksumCheck::Skip,
    )
    .ok()?;
    if !h.flags.contains(TcpFlags::SYN | TcpFlags::ACK) {
        return None;
    }
    let ack = TcpHeader {
        src_port: h.dst_port,
        dst_port: h.src_port,
        seq: h.ack,
        ack: h.seq + 1u32,
        flags: TcpFlags::ACK,
        window: 65535,
        urgent: 0,
        options: TcpOptions::default(),
    };
    Some(peer_frame(dst, &ack))
}

/// The echo workload: `cfg.active` connections from a client core, each sending
/// `cfg.rounds` requests of 64 bytes one at a time, echoed by the server's application.
/// Returns the server's segments, its wall time, the best block's ns per segment, the
/// echoes and the virtual end time.
fn echo(
    server: &mut Stack,
    listener: sluice_tcp::ListenerId,
    cfg: &MillionConfig,
    mut now: Instant,
) -> Result<(u64, Duration, f64, u64, Instant), MillionError> {
    let mut ccfg = Config::new(CLIENT_MAC, CLIENT_IP);
    ccfg.max_connections = cfg.active.max(1);
    ccfg.seed = cfg.seed ^ 0x5eed;
    let mut client = Stack::new(ccfg)?;
    client.add_neighbor(SERVER_IP, SERVER_MAC);
    server.add_neighbor(CLIENT_IP, CLIENT_MAC);
    let mut conns = Vec::with_capacity(cfg.active);
    for _ in 0..cfg.active {
        let id = client
            .connect(now, SERVER_IP, SERVER_PORT)
            .map_err(|e| MillionError::Stuck(format!("connect: {e}")))?;
        conns.push((id, 0usize, false));
    }
    let request = [0x5au8; REQUEST];
    let mut buf = vec![0u8; 4096];
    let mut out = vec![0u8; 2048];
    let mut to_server: Vec<Vec<u8>> = Vec::new();
    let mut to_client: Vec<Vec<u8>> = Vec::new();
    let mut accepted: Vec<ConnId> = Vec::new();
    let (mut segments, mut server_time, mut echoes) = (0u64, Duration::ZERO, 0u64);
    let mut got = vec![0usize; cfg.active];
    let target = (cfg.active * cfg.rounds) as u64;
    let block = (target / 10).max(1);
    // Where the current block began: echoes, segments, server time.
    let mut mark = (0u64, 0u64, Duration::ZERO);
    let mut best = f64::INFINITY;
    let mut idle_steps = 0;
    while echoes < target {
        if echoes - mark.0 >= block && segments > mark.1 {
            let ns = (server_time - mark.2).as_nanos() as f64 / (segments - mark.1) as f64;
            best = best.min(ns);
            mark = (echoes, segments, server_time);
        }
        // Client: new requests on connections with none outstanding, replies read.
        while let Some(ev) = client.poll_event() {
            if let Event::Conn(id, _) = ev {
                if let Some(i) = conns.iter().position(|c| c.0 == id) {
                    while let Ok(n) = client.recv(id, &mut buf) {
                        if n == 0 {
                            break;
                        }
                        got[i] += n;
                    }
                    if got[i] >= REQUEST && conns[i].2 {
                        got[i] -= REQUEST;
                        conns[i].2 = false;
                        conns[i].1 += 1;
                        echoes += 1;
                    }
                }
            }
        }
        for (id, done, outstanding) in conns.iter_mut() {
            if !*outstanding
                && *done < cfg.rounds
                && client
                    .info(*id)
                    .is_ok_and(|i| i.state == sluice_tcp::TcpState::Established)
                && client.send(*id, &request).is_ok()
            {
                *outstanding = true;
            }
        }
        to_server.clear();
        while let Some(n) = client.poll_transmit(now, &mut out) {
            to_server.push(out[..n].to_vec());
        }
        // Server: frames in, the application's echo, frames out; only this is timed.
        let t0 = WallClock::now();
        segments += to_server.len() as u64;
        handle(server, now, &to_server);
        while let Ok(id) = server.accept(listener) {
            accepted.push(id);
        }
        while let Some(ev) = server.poll_event() {
            if let Event::Conn(id, r) = ev {
                if r.readable() {
                    while let Ok(n) = server.recv(id, &mut buf) {
                        if n == 0 {
                            break;
                        }
                        let _ = server.send(id, &buf[..n]);
                    }
                }
            }
        }
        serve_timers(server, now);
        to_client.clear();
        while let Some(n) = server.poll_transmit(now, &mut out) {
            to_client.push(out[..n].to_vec());
        }
        server_time += t0.elapsed();
        segments += to_client.len() as u64;
        handle(&mut client, now, &to_client);
        now += Duration::from_micros(5);
        serve_timers(&mut client, now);
        if to_server.is_empty() && to_client.is_empty() {
            idle_steps += 1;
            if idle_steps > 1_000_000 {
                return Err(MillionError::Stuck(format!(
                    "echo: {echoes} of {target} round trips"
                )));
            }
            // Nothing moved: jump to the next timer of either core.
            let next = [server.poll_timeout(), client.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            if let Some(t) = next.filter(|&t| t > now) {
                now = t;
            }
        }
    }
    if echoes - mark.0 >= block && segments > mark.1 {
        let ns = (server_time - mark.2).as_nanos() as f64 / (segments - mark.1) as f64;
        best = best.min(ns);
    }
    Ok((segments, server_time, best, echoes, now))
}
