//! An L7 proxy on the core's own API (acceltcp.txt 4.3, 6.3): it accepts a client, reads
//! its request header (HTTP mode) or nothing (TCP mode), picks a backend (by Host and path
//! prefix, route.rs, then round-robin in the pool), connects, forwards the header with an
//! `X-Forwarded-For` line added, and then splices the two connections, so that the core
//! relays the rest without waking it. Without splicing it relays the bytes itself, both
//! ways, as a user-space proxy does. A header it cannot route is answered (400, 404, 431)
//! and the connection closed.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, DefaultHasher};
use std::net::SocketAddrV4;

use sluice_tcp::{ConnId, Error, Event, Instant, ListenerId, SpliceEvent, SpliceId, Stack};

use crate::route::{Decision, Route, RouteError, Router};

/// What the proxy reads before choosing a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyMode {
    /// Nothing: connect as soon as the client is accepted.
    Tcp,
    /// The HTTP request header, up to its blank line.
    Http,
}

/// The proxy's configuration.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// The port it listens on.
    pub port: u16,
    /// The default pool, used round-robin when no route matches (may be empty if routes
    /// are given: an unrouted request then gets 404).
    pub backends: Vec<SocketAddrV4>,
    /// Routing rules by Host and path prefix (HTTP mode only).
    pub routes: Vec<Route>,
    /// What it reads first.
    pub mode: ProxyMode,
    /// Splice (else relay in the application).
    pub splice: bool,
    /// With `splice`: bytes the proxy relays itself in a session before it splices (0:
    /// at once after the header). Splicing costs a handover the core must drain for; a
    /// session that ends within its first request-response is cheaper relayed, as
    /// HAProxy's splice-auto splices only once the traffic is large.
    pub splice_after: u64,
}

impl ProxyConfig {
    /// Checks the pools and rules: the router the proxy will use.
    pub fn router(&self) -> Result<Router, RouteError> {
        if self.mode == ProxyMode::Tcp {
            if !self.routes.is_empty() {
                return Err(RouteError::RoutesNeedHttp);
            }
            if self.backends.is_empty() {
                return Err(RouteError::NoBackends);
            }
        }
        Router::new(self.routes.clone(), self.backends.clone())
    }
}

/// Longest request header read (a longer one is answered 431 and the connection closed).
pub const MAX_HEADER: usize = 16 * 1024;

/// Bytes of a refused client's request read and discarded after the answer, before the
/// connection is reset instead of closed.
const MAX_DISCARD: usize = 64 * 1024;

/// What the proxy did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyCounters {
    /// Clients accepted.
    pub accepted: u64,
    /// Splices the core installed.
    pub spliced: u64,
    /// Splices that failed before the handover, or that the core refused.
    pub splice_failed: u64,
    /// Bytes the proxy copied itself (headers, and everything without splicing).
    pub relayed_bytes: u64,
    /// Client sessions finished (closed both ways, or the splice ended).
    pub completed: u64,
    /// Clients reset: a backend that refused or failed, a client gone before its header.
    pub failed: u64,
    /// Requests sent to a route's pool.
    pub routed: u64,
    /// Requests (and TCP-mode clients) sent to the default pool.
    pub routed_default: u64,
    /// Requests no route matched, with no default pool: answered 404.
    pub unrouted: u64,
    /// Headers refused as malformed (RFC 9112: bad request line or header line, a missing
    /// or repeated Host, too many lines): answered 400.
    pub bad_request: u64,
    /// Headers longer than [`MAX_HEADER`]: answered 431.
    pub header_too_long: u64,
}

#[derive(Debug)]
enum Phase {
    /// Reading the HTTP request header.
    Header(Vec<u8>),
    /// Connecting to the backend; then these bytes go first.
    Connecting(Vec<u8>),
    /// Relaying in the application: bytes waiting for each side's send buffer, and
    /// whether each side's peer closed (client, backend).
    Relaying {
        to_backend: VecDeque<u8>,
        to_client: VecDeque<u8>,
        eof: [bool; 2],
        shut: [bool; 2],
    },
    /// Handed to the core.
    Spliced,
    /// Answered with an error and shut down: the client's bytes so far discarded.
    Refusing(usize),
}

#[derive(Debug)]
struct Session {
    client: ConnId,
    /// The backend chosen for it.
    upstream: Option<SocketAddrV4>,
    backend: Option<ConnId>,
    phase: Phase,
    /// Bytes the proxy relayed itself for this session.
    relayed: u64,
}

type FixedHash = BuildHasherDefault<DefaultHasher>;

/// The proxy.
pub struct Proxy {
    cfg: ProxyConfig,
    listener: ListenerId,
    sessions: HashMap<u64, Session, FixedHash>,
    by_conn: HashMap<ConnId, u64, FixedHash>,
    by_splice: HashMap<SpliceId, u64, FixedHash>,
    next_session: u64,
    router: Router,
    buf: Vec<u8>,
    ready: Vec<u64>,
    /// What it did so far.
    pub counters: ProxyCounters,
}

impl Proxy {
    /// Listens on `cfg.port` (InvalidArgument if [`ProxyConfig::router`] refuses it).
    pub fn listen(stack: &mut Stack, cfg: ProxyConfig) -> Result<Proxy, Error> {
        let router = cfg.router().map_err(|_| Error::InvalidArgument)?;
        Ok(Proxy {
            listener: stack.listen(cfg.port, 1024)?,
            cfg,
            sessions: HashMap::default(),
            by_conn: HashMap::default(),
            by_splice: HashMap::default(),
            next_session: 0,
            router,
            buf: vec![0; 64 * 1024],
            ready: Vec::new(),
            counters: ProxyCounters::default(),
        })
    }

    /// Sessions open.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Accepts, reads headers, connects, forwards and splices (or relays) as far as the
    /// core allows.
    pub fn poll(&mut self, stack: &mut Stack, now: Instant) {
        let mut ready = std::mem::take(&mut self.ready);
        while let Ok(c) = stack.accept(self.listener) {
            let _ = stack.set_nagle(c, false);
            // A proxy closes first on one side of every session: its TIME-WAITs go to the
            // teardown stage instead of holding connection slots (acceltcp.txt 4.2).
            let _ = stack.set_teardown_offload(c, true);
            self.counters.accepted += 1;
            let id = self.next_session;
            self.next_session += 1;
            let (phase, upstream) = match self.cfg.mode {
                ProxyMode::Http => (Phase::Header(Vec::new()), None),
                ProxyMode::Tcp => {
                    self.counters.routed_default += 1;
                    let pool = self.router.backend(Decision::Default);
                    (Phase::Connecting(Vec::new()), pool)
                }
            };
            self.sessions.insert(
                id,
                Session {
                    client: c,
                    upstream,
                    backend: None,
                    phase,
                    relayed: 0,
                },
            );
            self.by_conn.insert(c, id);
            ready.push(id);
        }
        while let Some(event) = stack.poll_event() {
            if let Event::Conn(c, _) = event {
                if let Some(&id) = self.by_conn.get(&c) {
                    ready.push(id);
                }
            }
        }
        while let Some(e) = stack.poll_splice_event() {
            self.on_splice_event(e);
        }
        ready.sort_unstable();
        ready.dedup();
        for &id in &ready {
            self.step(stack, now, id);
        }
        ready.clear();
        self.ready = ready;
    }

    fn on_splice_event(&mut self, e: SpliceEvent) {
        match e {
            SpliceEvent::Installed(_) => self.counters.spliced += 1,
            SpliceEvent::Failed(s) => {
                self.counters.splice_failed += 1;
                if let Some(id) = self.by_splice.remove(&s) {
                    self.sessions.remove(&id);
                    self.counters.failed += 1;
                }
            }
            SpliceEvent::Ended(s, _, _) => {
                if let Some(id) = self.by_splice.remove(&s) {
                    self.sessions.remove(&id);
                    self.counters.completed += 1;
                }
            }
        }
    }

    /// Moves one session on.
    fn step(&mut self, stack: &mut Stack, now: Instant, id: u64) {
        let Some(mut s) = self.sessions.remove(&id) else {
            return;
        };
        let keep = match std::mem::replace(&mut s.phase, Phase::Connecting(Vec::new())) {
            Phase::Header(h) => self.read_header(stack, now, &mut s, h),
            Phase::Connecting(first) => self.connecting(stack, now, &mut s, first),
            Phase::Relaying {
                to_backend,
                to_client,
                eof,
                shut,
            } => self.relay(stack, &mut s, to_backend, to_client, eof, shut),
            p @ Phase::Spliced => {
                s.phase = p;
                true
            }
            Phase::Refusing(discarded) => self.refusing(stack, &mut s, discarded),
        };
        if keep {
            self.sessions.insert(id, s);
        } else {
            self.by_conn.remove(&s.client);
            if let Some(b) = s.backend {
                self.by_conn.remove(&b);
            }
        }
    }

    fn fail(&mut self, stack: &mut Stack, s: &Session) -> bool {
        let _ = stack.abort(s.client);
        if let Some(b) = s.backend {
            let _ = stack.abort(b);
        }
        self.counters.failed += 1;
        false
    }

    fn read_header(
        &mut self,
        stack: &mut Stack,
        now: Instant,
        s: &mut Session,
        mut h: Vec<u8>,
    ) -> bool {
        loop {
            let room = (MAX_HEADER - h.len()).min(self.buf.len()).max(1);
            match stack.recv(s.client, &mut self.buf[..room]) {
                Ok(0) => return self.fail(stack, s),
                Ok(n) => {
                    // Read only up to the header's end: the rest stays for the splice.
                    h.extend_from_slice(&self.buf[..n]);
                    if let Some(end) = find(&h, b"\r\n\r\n") {
                        let body = h.split_off(end + 4);
                        let decision = self.router.decide(&h);
                        match decision {
                            Decision::Route(_) => self.counters.routed += 1,
                            Decision::Default => self.counters.routed_default += 1,
                            Decision::Unrouted => {
                                self.counters.unrouted += 1;
                                return self.refuse(stack, s, NOT_FOUND);
                            }
                            Decision::Refused(_) => {
                                self.counters.bad_request += 1;
                                return self.refuse(stack, s, BAD_REQUEST);
                            }
                        }
                        s.upstream = self.router.backend(decision);
                        let header = forwarded(&h, stack, s.client);
                        let mut first = header;
                        first.extend_from_slice(&body);
                        return self.connecting(stack, now, s, first);
                    }
                    if h.len() >= MAX_HEADER {
                        self.counters.header_too_long += 1;
                        return self.refuse(stack, s, TOO_LARGE);
                    }
                }
                Err(Error::WouldBlock) => {
                    s.phase = Phase::Header(h);
                    return true;
                }
                Err(_) => return self.fail(stack, s),
            }
        }
    }

    fn connecting(
        &mut self,
        stack: &mut Stack,
        now: Instant,
        s: &mut Session,
        mut first: Vec<u8>,
    ) -> bool {
        let b = match s.backend {
            Some(b) => b,
            None => {
                let Some(addr) = s.upstream else {
                    return self.fail(stack, s);
                };
                match stack.connect(now, *addr.ip(), addr.port()) {
                    Ok(b) => {
                        let _ = stack.set_nagle(b, false);
                        let _ = stack.set_teardown_offload(b, true);
                        s.backend = Some(b);
                        if let Some(&id) = self.by_conn.get(&s.client) {
                            self.by_conn.insert(b, id);
                        }
                        b
                    }
                    Err(_) => return self.fail(stack, s),
                }
            }
        };
        match stack.state(b) {
            Ok(sluice_tcp::TcpState::Established) => {}
            Ok(sluice_tcp::TcpState::SynSent | sluice_tcp::TcpState::SynReceived) => {
                s.phase = Phase::Connecting(first);
                return true;
            }
            _ => return self.fail(stack, s),
        }
        while !first.is_empty() {
            match stack.send(b, &first) {
                Ok(n) => {
                    self.counters.relayed_bytes += n as u64;
                    first.drain(..n);
                }
                Err(Error::WouldBlock) => {
                    s.phase = Phase::Connecting(first);
                    return true;
                }
                Err(_) => return self.fail(stack, s),
            }
        }
        if self.cfg.splice && self.cfg.splice_after == 0 && self.splice(stack, s, b) {
            return true;
        }
        self.relay(
            stack,
            s,
            VecDeque::new(),
            VecDeque::new(),
            [false; 2],
            [false; 2],
        )
    }

    /// Hands the session to the core's splice stage; false if the core refused (the
    /// session relays on).
    fn splice(&mut self, stack: &mut Stack, s: &mut Session, b: ConnId) -> bool {
        match stack.splice(s.client, b) {
            Ok(sid) => {
                s.phase = Phase::Spliced;
                if let Some(&id) = self.by_conn.get(&s.client) {
                    self.by_splice.insert(sid, id);
                }
                self.by_conn.remove(&s.client);
                self.by_conn.remove(&b);
                // Installed at once if both were idle: its event is read next poll.
                true
            }
            Err(_) => {
                // Refused (full, options that do not match): relay instead (with
                // `splice_after`, tried again after as many bytes more).
                self.counters.splice_failed += 1;
                s.relayed = 0;
                false
            }
        }
    }

    /// Answers the client with `response`, shuts its side down and reads what it still
    /// sends (discarded), so that the close that follows is a FIN, not a reset that could
    /// overtake the answer.
    fn refuse(&mut self, stack: &mut Stack, s: &mut Session, response: &[u8]) -> bool {
        match stack.send(s.client, response) {
            Ok(n) if n == response.len() => {}
            _ => return self.fail(stack, s),
        }
        let _ = stack.shutdown(s.client);
        self.refusing(stack, s, 0)
    }

    /// Discards what a refused client sends until it closes (then closes), or resets it
    /// past [`MAX_DISCARD`] bytes.
    fn refusing(&mut self, stack: &mut Stack, s: &mut Session, mut discarded: usize) -> bool {
        loop {
            match stack.recv(s.client, &mut self.buf) {
                Ok(0) => {
                    let _ = stack.close(s.client);
                    return false;
                }
                Ok(n) => {
                    discarded += n;
                    if discarded > MAX_DISCARD {
                        let _ = stack.abort(s.client);
                        return false;
                    }
                }
                Err(Error::WouldBlock) => {
                    s.phase = Phase::Refusing(discarded);
                    return true;
                }
                Err(_) => {
                    let _ = stack.abort(s.client);
                    return false;
                }
            }
        }
    }

    /// Relays both ways in the application (the no-splice baseline).
    fn relay(
        &mut self,
        stack: &mut Stack,
        s: &mut Session,
        mut to_backend: VecDeque<u8>,
        mut to_client: VecDeque<u8>,
        mut eof: [bool; 2],
        mut shut: [bool; 2],
    ) -> bool {
        let Some(b) = s.backend else {
            return self.fail(stack, s);
        };
        let ends = [s.client, b];
        for (from, pending) in [(0, &mut to_backend), (1, &mut to_client)] {
            let to = ends[1 - from];
            loop {
                // Flush what waits, then read more.
                while !pending.is_empty() {
                    let (a, _) = pending.as_slices();
                    match stack.send(to, a) {
                        Ok(0) | Err(Error::WouldBlock) => break,
                        Ok(n) => {
                            pending.drain(..n);
                        }
                        Err(_) => return self.fail(stack, s),
                    }
                }
                if !pending.is_empty() || eof[from] {
                    break;
                }
                match stack.recv(ends[from], &mut self.buf) {
                    Ok(0) => eof[from] = true,
                    Ok(n) => {
                        self.counters.relayed_bytes += n as u64;
                        s.relayed += n as u64;
                        pending.extend(&self.buf[..n]);
                    }
                    Err(Error::WouldBlock) => break,
                    Err(_) => return self.fail(stack, s),
                }
            }
            if eof[from] && pending.is_empty() && !shut[1 - from] {
                let _ = stack.shutdown(to);
                shut[1 - from] = true;
            }
        }
        if shut == [true, true] {
            let _ = stack.close(s.client);
            let _ = stack.close(b);
            self.counters.completed += 1;
            return false;
        }
        // Large enough to be worth a handover, and nothing held here or half-closed: the
        // core takes it from here.
        let worth =
            self.cfg.splice && self.cfg.splice_after > 0 && s.relayed >= self.cfg.splice_after;
        let idle = to_backend.is_empty() && to_client.is_empty() && eof == [false; 2];
        if worth && idle && self.splice(stack, s, b) {
            return true;
        }
        s.phase = Phase::Relaying {
            to_backend,
            to_client,
            eof,
            shut,
        };
        true
    }
}

/// The answer to a header that does not parse (RFC 9112 3.2: also a missing Host).
const BAD_REQUEST: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 12\r\n\
Connection: close\r\n\r\nbad request\n";
/// The answer to a request no route matches, without a default pool: nothing here serves
/// it (502 would say an upstream answered badly, RFC 9110 15.6.3; none was asked).
const NOT_FOUND: &[u8] = b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\
Connection: close\r\n\r\nno route\n";
/// The answer to a header longer than [`MAX_HEADER`] (RFC 6585 5).
const TOO_LARGE: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\n\
Content-Length: 17\r\nConnection: close\r\n\r\nheader too large\n";

fn find(h: &[u8], needle: &[u8]) -> Option<usize> {
    h.windows(needle.len()).position(|w| w == needle)
}

/// The header with `X-Forwarded-For: <client>` after its request line.
fn forwarded(h: &[u8], stack: &Stack, client: ConnId) -> Vec<u8> {
    let Some(line_end) = find(h, b"\r\n") else {
        return h.to_vec();
    };
    let ip = stack
        .endpoints(client)
        .map(|(_, peer)| peer.ip().to_string())
        .unwrap_or_default();
    let mut out = Vec::with_capacity(h.len() + 40);
    out.extend_from_slice(&h[..line_end + 2]);
    out.extend_from_slice(format!("X-Forwarded-For: {ip}\r\n").as_bytes());
    out.extend_from_slice(&h[line_end + 2..]);
    out
}
