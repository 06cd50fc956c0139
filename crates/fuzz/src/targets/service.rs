//! Coverage-guided target for the service's command interface as an application sees it:
//! context-queue entries and ring positions in shared memory.
//!
//! One process holds everything, in virtual time: a [`Service`] over an engine core, a
//! plain peer core joined to it in memory, and an application attached over the service's
//! real Unix socket and shared region. The application keeps one well-behaved connection
//! to the peer on context 0, moving a byte stream each way through its payload rings; on
//! context 1 the input posts arbitrary entries (any opcode, slot, request id, fields) and
//! well-formed commands with arbitrary arguments, and writes arbitrary positions into the
//! socket blocks of every other slot, between service polls.
//!
//! Checked: no panic; every entry that carries a request id is answered, in order, and every
//! failure is counted (`bad_entries`, `bad_slots`, `bad_state`, `bad_positions`); every entry
//! that does not decode is counted in `bad_entries`; and the well-behaved connection still
//! delivers both streams exactly, each ended by its FIN.

use std::net::Ipv4Addr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use sluice_engine::App;
use sluice_service::{Counters, Service, ServiceConfig};
use sluice_shm::control::{connect_to, recv_message, send_message, Reply, Request};
use sluice_shm::{
    flags, Command, Completion, Congestion, Consumer, Dir, Layout, Payload, Producer, QueueKind,
    Region, Shut, SocketBlock, PAYLOAD_BYTES,
};
use sluice_tcp::{Config, ConnId, Error, Instant, ListenerId, Stack};

use crate::net::Side;

/// The engine's side of the in-memory link.
const ENGINE: Side = Side::A;
/// The peer's side.
const PEER: Side = Side::B;
/// The port the peer listens on for the well-behaved connection.
const PEER_PORT: u16 = 7000;
/// Operations decoded from one input at most.
const MAX_OPS: usize = 512;
/// Rounds the final phase may take to finish both streams (virtual milliseconds).
const FINISH_ROUNDS: usize = 20_000;
/// Rounds any setup wait may take.
const SETUP_ROUNDS: usize = 2_000;

/// Where a well-formed command's address points.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum IpChoice {
    /// The engine's own address.
    Engine,
    /// 0.0.0.0.
    Unspecified,
    /// The peer.
    Peer,
    /// Anything.
    Any(u32),
}

/// A well-formed command whose fields are arbitrary.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub struct FuzzCommand {
    /// Which command (modulo the eleven opcodes).
    pub opcode: u8,
    /// Request id.
    pub req: u32,
    /// Slot (small values reach allocated slots; `wide` makes it any u32).
    pub slot: u16,
    /// Take `slot` times 65537, to reach slots far out of range.
    pub wide: bool,
    /// Address for Bind and Connect.
    pub ip: IpChoice,
    /// Port for Bind and Connect (0 picks one; the peer's port reaches its listener).
    pub port: u16,
    /// Use the peer's listening port instead of `port`.
    pub peer_port: bool,
    /// Backlog, direction, abort, nodelay and algorithm choices.
    pub arg: u32,
}

/// Which application-written position of a socket block.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Position {
    /// The application's RX head.
    RxHead,
    /// The application's TX tail.
    TxTail,
}

/// How a position is written.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum PositionValue {
    /// Moved by a small amount from the engine's side of the ring (tail or head).
    Near(i16),
    /// Anything.
    Any(u64),
}

/// One thing the application or the clock does.
#[derive(Arbitrary, Clone, Debug)]
pub enum Op {
    /// An arbitrary entry on context 1: opcode byte, then the rest of the entry.
    Raw {
        /// The opcode byte.
        opcode: u8,
        /// Every other byte of the entry (request id at 4, slot at 8, arguments from 12).
        rest: [u8; 27],
    },
    /// A well-formed command on context 1.
    Command(FuzzCommand),
    /// A position written into a slot's block (never the well-behaved slot's).
    Position {
        /// Slot (modulo the layout's sockets).
        slot: u8,
        /// Which position.
        which: Position,
        /// What is written.
        value: PositionValue,
        /// Ring Send or Consumed on that slot right after.
        doorbell: bool,
    },
    /// Bytes written into a slot's TX ring at its tail, tail moved, Send rung.
    Write {
        /// Slot.
        slot: u8,
        /// Bytes.
        len: u16,
    },
    /// The service polls and the network runs `rounds` times, a virtual millisecond each.
    Poll {
        /// Rounds.
        rounds: u8,
    },
    /// The well-behaved application and the peer move their streams along.
    GoodIo,
    /// The peer accepts what waits and reads and drops what the fuzzed connections send.
    PeerAccept,
}

/// The decoded input.
#[derive(Arbitrary, Clone, Debug)]
pub struct ServiceInput {
    /// Bytes of each well-behaved stream (modulo 24 KiB, at least 1).
    pub stream_len: u16,
    /// Commands the service takes from a context per poll (1..=64).
    pub command_batch: u8,
    /// What happens.
    pub ops: Vec<Op>,
}

/// What a run saw, so tests can see that inputs reach the service.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServiceStats {
    /// Entries posted on the fuzzed context.
    pub entries: u64,
    /// Completions read from it.
    pub completions: u64,
    /// Failed completions among them.
    pub failed: u64,
    /// The service's counters at the end.
    pub counters: Counters,
}

/// Runs the target on raw bytes; panics on a violation, as a fuzz engine expects.
pub fn run(data: &[u8]) {
    if let Err(v) = check(data) {
        panic!("service target: {v}");
    }
}

/// Decodes `data` and runs it; a broken property is an error that says which.
pub fn check(data: &[u8]) -> Result<ServiceStats, String> {
    let mut u = Unstructured::new(data);
    let (Ok(stream_len), Ok(command_batch)) = (u16::arbitrary(&mut u), u8::arbitrary(&mut u))
    else {
        return Ok(ServiceStats::default());
    };
    let mut ops = Vec::new();
    while ops.len() < MAX_OPS && !u.is_empty() {
        match Op::arbitrary(&mut u) {
            Ok(op) => ops.push(op),
            Err(_) => break,
        }
    }
    run_input(&ServiceInput {
        stream_len,
        command_batch,
        ops,
    })
}

/// Runs a decoded input.
pub fn run_input(input: &ServiceInput) -> Result<ServiceStats, String> {
    let dir = scratch_dir();
    let result = World::new(&dir, input).and_then(|mut w| {
        let r = w.run(input);
        w.service.shutdown(&mut w.engine);
        r
    });
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// A directory of its own for each run's socket (runs may be concurrent in tests).
fn scratch_dir() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("sluice-fuzz-svc-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn layout() -> Layout {
    Layout {
        max_sockets: 8,
        max_contexts: 2,
        queue_entries: 32,
        ring_size: 4096,
        ..Layout::default()
    }
}

fn core_config(side: Side) -> Config {
    let mut c = Config::new(side.mac(), side.ip());
    c.seed = 0x5e41 + side.index() as u64;
    c.max_connections = 16;
    c.rx_buffer = 16 << 10;
    c.tx_buffer = 16 << 10;
    c.rto_min = Duration::from_millis(5);
    c.rto_initial = Duration::from_millis(50);
    c.time_wait = Duration::from_millis(100);
    c
}

fn pattern(n: usize, salt: u32) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(salt) >> 13) as u8)
        .collect()
}

/// One direction of the well-behaved connection.
#[derive(Default)]
struct Stream {
    data: Vec<u8>,
    written: usize,
    read: Vec<u8>,
    fin_sent: bool,
    fin_seen: bool,
}

struct World {
    service: Service,
    engine: Stack,
    peer: Stack,
    now: Instant,
    buf: Vec<u8>,
    _sock: OwnedFd,
    region: Arc<Region>,
    cmd: [Producer; 2],
    comp: [Consumer; 2],
    listener: ListenerId,
    good_slot: u32,
    good_port: u16,
    peer_conn: Option<ConnId>,
    others: Vec<ConnId>,
    up: Stream,
    down: Stream,
    expected_reqs: std::collections::VecDeque<u32>,
    stats: ServiceStats,
    undecodable: u64,
}

impl World {
    fn new(dir: &std::path::Path, input: &ServiceInput) -> Result<World, String> {
        let socket = dir.join("engine.sock");
        let mut sc = ServiceConfig::new(&socket, ENGINE.ip(), 24);
        sc.layout = layout();
        sc.command_batch = u32::from(input.command_batch % 64) + 1;
        let mut service = Service::new(sc).map_err(|e| format!("service: {e}"))?;
        let mut engine = Stack::new(core_config(ENGINE)).map_err(|e| format!("{e:?}"))?;
        engine.add_neighbor(PEER.ip(), PEER.mac());
        let mut peer = Stack::new(core_config(PEER)).map_err(|e| format!("{e:?}"))?;
        peer.add_neighbor(ENGINE.ip(), ENGINE.mac());
        let listener = peer
            .listen(PEER_PORT, 64)
            .map_err(|e| format!("peer listen: {e:?}"))?;
        let sock = connect_to(&socket).map_err(|e| format!("connect: {e}"))?;
        let mut now = Instant::from_millis(1);
        let hello = Request::Hello {
            version: sluice_shm::control::PROTOCOL_VERSION,
            pid: std::process::id(),
            name: "fuzz".into(),
        };
        send_message(sock.as_fd(), &hello, &[]).map_err(|e| format!("hello: {e}"))?;
        let (reply, mut fds) = control_reply(&mut service, &mut engine, &mut now, &sock)?;
        let Reply::Welcome { layout, .. } = reply else {
            return Err(format!("attach refused: {reply:?}"));
        };
        if fds.len() != 2 {
            return Err(format!("welcome carried {} descriptors", fds.len()));
        }
        let region =
            Arc::new(Region::open(fds.remove(0), layout).map_err(|e| format!("region: {e}"))?);
        let mut cmd = Vec::new();
        let mut comp = Vec::new();
        for _ in 0..2 {
            send_message(sock.as_fd(), &Request::NewContext, &[])
                .map_err(|e| format!("new context: {e}"))?;
            let (reply, _fds) = control_reply(&mut service, &mut engine, &mut now, &sock)?;
            let Reply::Context { index } = reply else {
                return Err(format!("context refused: {reply:?}"));
            };
            cmd.push(Producer::new(region.clone(), index, QueueKind::Command).ok_or("queue")?);
            comp.push(Consumer::new(region.clone(), index, QueueKind::Completion).ok_or("queue")?);
        }
        let n = usize::from(input.stream_len) % (24 << 10) + 1;
        let (Ok(cmd), Ok(comp)) = (
            <[Producer; 2]>::try_from(cmd),
            <[Consumer; 2]>::try_from(comp),
        ) else {
            return Err("two contexts".into());
        };
        let mut w = World {
            service,
            engine,
            peer,
            now,
            buf: vec![0; 2048],
            _sock: sock,
            region,
            cmd,
            comp,
            listener,
            good_slot: 0,
            good_port: 0,
            peer_conn: None,
            others: Vec::new(),
            up: Stream {
                data: pattern(n, 1),
                ..Stream::default()
            },
            down: Stream {
                data: pattern(n, 2),
                ..Stream::default()
            },
            expected_reqs: Default::default(),
            stats: ServiceStats::default(),
            undecodable: 0,
        };
        w.good_slot = match w.good_call(Command::Open { req: 1 })? {
            Completion::Done { value, .. } => value,
            f => return Err(format!("open failed: {f:?}")),
        };
        let slot = w.good_slot;
        w.good_port = match w.good_call(Command::Connect {
            req: 2,
            slot,
            ip: PEER.ip(),
            port: PEER_PORT,
        })? {
            Completion::Done { value, .. } => value as u16,
            f => return Err(format!("connect failed: {f:?}")),
        };
        for _ in 0..SETUP_ROUNDS {
            if w.peer_conn.is_some()
                && block(&w.region, slot).flags().load(Ordering::Acquire) & flags::CONNECTED != 0
            {
                return Ok(w);
            }
            w.peer_accept();
            w.round();
        }
        Err("the well-behaved connection never opened".into())
    }

    /// Posts on context `c`, polling the service while its queue is full.
    fn post(&mut self, c: usize, entry: &Payload) -> Result<(), String> {
        for _ in 0..SETUP_ROUNDS {
            match self.cmd[c].push(entry) {
                Ok(true) => return Ok(()),
                Ok(false) => {
                    self.round();
                    // The service answers only into free room: keep the answers read.
                    if c == 1 {
                        self.read_completions()?;
                    }
                }
                Err(e) => return Err(format!("context {c} queue: {e}")),
            }
        }
        Err(format!("context {c}'s command queue never drained"))
    }

    /// A command on the good context, and its completion.
    fn good_call(&mut self, cmd: Command) -> Result<Completion, String> {
        self.post(0, &cmd.encode())?;
        for _ in 0..SETUP_ROUNDS {
            self.round();
            if let Some(e) = self.comp[0].pop() {
                self.comp[0].publish();
                return Completion::decode(&e).map_err(|e| format!("bad completion {e}"));
            }
        }
        Err(format!("{cmd:?} never completed"))
    }

    /// One virtual millisecond: the service polls, both cores exchange frames and run their
    /// timers, and the fuzzed context's completions are read and checked.
    fn round(&mut self) {
        let now = self.now;
        // The service's poll never fails on its own account; an error is the engine's.
        let _ = self.service.poll(&mut self.engine, now);
        for _ in 0..4 {
            let mut moved = false;
            for from in [ENGINE, PEER] {
                let mut frames = Vec::new();
                let (src, dst) = if from == ENGINE {
                    (&mut self.engine, &mut self.peer)
                } else {
                    (&mut self.peer, &mut self.engine)
                };
                while let Some(n) = src.poll_transmit(now, &mut self.buf) {
                    frames.push(self.buf[..n.min(self.buf.len())].to_vec());
                    if frames.len() > 4096 {
                        break;
                    }
                }
                moved |= !frames.is_empty();
                let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
                dst.handle_frames(now, &refs);
            }
            if !moved {
                break;
            }
        }
        for s in [&mut self.engine, &mut self.peer] {
            if s.poll_timeout().is_some_and(|t| t <= now) {
                s.handle_timeout(now);
            }
        }
        while self.peer.poll_event().is_some() {}
        self.now += Duration::from_millis(1);
    }

    /// Reads the fuzzed context's completions: each answers the oldest entry still owed one.
    fn read_completions(&mut self) -> Result<(), String> {
        while let Some(e) = self.comp[1].pop() {
            self.comp[1].publish();
            let c = Completion::decode(&e).map_err(|e| format!("undecodable completion: {e}"))?;
            let req = match c {
                Completion::Done { req, .. } => req,
                Completion::Failed { req, .. } => {
                    self.stats.failed += 1;
                    req
                }
                // Unsolicited: a splice the input asked for moved on.
                Completion::Splice(_) => continue,
            };
            self.stats.completions += 1;
            match self.expected_reqs.pop_front() {
                Some(want) if want == req => {}
                other => return Err(format!("completion {c:?} where req {other:?} was owed")),
            }
        }
        Ok(())
    }

    fn peer_accept(&mut self) {
        while let Ok(id) = self.peer.accept(self.listener) {
            let good = self
                .peer
                .endpoints(id)
                .is_ok_and(|(_, remote)| remote.port() == self.good_port);
            if good && self.peer_conn.is_none() {
                self.peer_conn = Some(id);
            } else if self.others.len() < 64 {
                self.others.push(id);
            } else {
                let _ = self.peer.abort(id);
            }
        }
        let mut sink = [0u8; 2048];
        for &id in &self.others {
            while matches!(self.peer.recv(id, &mut sink), Ok(n) if n > 0) {}
        }
    }

    /// The well-behaved application and the peer move their streams along by one step.
    fn good_io(&mut self) -> Result<(), String> {
        let s = self.good_slot;
        let ring = layout().ring_size as u64;
        // Application → peer through the TX ring.
        // The region's handle is cloned so the blocks borrow it, not `self`.
        let region = self.region.clone();
        if self.up.written < self.up.data.len() {
            let b = block(&region, s);
            let head = b.tx_head().load(Ordering::Acquire);
            let tail = b.tx_tail().load(Ordering::Relaxed);
            let n = ((ring - (tail - head)) as usize).min(self.up.data.len() - self.up.written);
            if n > 0 {
                let tx = self.region.ring(s, Dir::Tx).ok_or("tx ring")?;
                tx.write(tail, &self.up.data[self.up.written..self.up.written + n]);
                b.tx_tail().store(tail + n as u64, Ordering::Release);
                self.up.written += n;
                self.post(0, &Command::Send { slot: s }.encode())?;
            }
        } else if !self.up.fin_sent {
            self.up.fin_sent = true;
            match self.good_call(Command::Shutdown {
                req: 3,
                slot: s,
                how: Shut::Write,
            })? {
                Completion::Done { .. } => {}
                f => return Err(format!("shutdown of the well-behaved slot failed: {f:?}")),
            }
        }
        // Peer → application through the RX ring.
        let b = block(&region, s);
        let head = b.rx_head().load(Ordering::Relaxed);
        let tail = b.rx_tail().load(Ordering::Acquire);
        if tail < head || tail - head > ring {
            return Err(format!(
                "the engine wrote rx_tail {tail} for rx_head {head}"
            ));
        }
        if tail > head {
            let mut chunk = vec![0u8; (tail - head) as usize];
            self.region
                .ring(s, Dir::Rx)
                .ok_or("rx ring")?
                .read(head, &mut chunk);
            self.down.read.extend_from_slice(&chunk);
            b.rx_head().store(tail, Ordering::Release);
        }
        let f = b.flags().load(Ordering::Acquire);
        if f & flags::ERROR != 0 {
            return Err(format!(
                "the well-behaved slot failed (error {}) after {} of {} bytes",
                b.error().load(Ordering::Acquire),
                self.down.read.len(),
                self.down.data.len()
            ));
        }
        // RX_FIN with nothing placed after what was just read: the stream is complete.
        if f & flags::RX_FIN != 0 && b.rx_tail().load(Ordering::Acquire) == tail {
            self.down.fin_seen = true;
        }
        if f & flags::RX_STALLED != 0 {
            self.post(0, &Command::Consumed { slot: s }.encode())?;
        }
        // The peer's end.
        let Some(pc) = self.peer_conn else {
            return Ok(());
        };
        while self.down.written < self.down.data.len() {
            match self.peer.send(pc, &self.down.data[self.down.written..]) {
                Ok(n) if n > 0 => self.down.written += n,
                Ok(_) | Err(Error::WouldBlock) => break,
                Err(e) => return Err(format!("peer send: {e}")),
            }
        }
        if self.down.written == self.down.data.len() && !self.down.fin_sent {
            self.down.fin_sent = true;
            self.peer
                .shutdown(pc)
                .map_err(|e| format!("peer shutdown: {e}"))?;
        }
        let mut buf = [0u8; 4096];
        loop {
            match self.peer.recv(pc, &mut buf) {
                Ok(0) => {
                    self.up.fin_seen = true;
                    break;
                }
                Ok(n) => self.up.read.extend_from_slice(&buf[..n]),
                Err(Error::WouldBlock) => break,
                Err(e) => return Err(format!("peer recv: {e}")),
            }
        }
        Ok(())
    }

    /// Posts an entry on the fuzzed context, remembering what it is owed.
    fn post_fuzz(&mut self, mut entry: Payload) -> Result<(), String> {
        // The well-behaved slot is not the input's to touch.
        if Command::decode(&entry).is_ok_and(|c| c.slot() == Some(self.good_slot)) {
            entry[8] ^= 1;
        }
        // Nor is it to splice (the second slot of a Splice is at offset 12).
        let names_good = |c: &Command| {
            c.slot() == Some(self.good_slot)
                || matches!(c, Command::Splice { slot_b, .. } if *slot_b == self.good_slot)
        };
        if Command::decode(&entry).is_ok_and(|c| names_good(&c)) {
            entry[12] ^= 1;
        }
        match Command::decode(&entry) {
            Err(_) => self.undecodable += 1,
            Ok(c) if names_good(&c) => return Ok(()),
            Ok(_) => {}
        }
        if let Some(req) = Command::req_of(&entry) {
            self.expected_reqs.push_back(req);
        }
        self.stats.entries += 1;
        // Keep the completion queue read, so the service always has room to answer.
        self.read_completions()?;
        self.post(1, &entry)
    }

    fn command(&self, f: &FuzzCommand) -> Command {
        let slot = if f.wide {
            u32::from(f.slot).wrapping_mul(65537)
        } else {
            u32::from(f.slot) % (layout().max_sockets + 2)
        };
        let ip = match f.ip {
            IpChoice::Engine => ENGINE.ip(),
            IpChoice::Unspecified => Ipv4Addr::UNSPECIFIED,
            IpChoice::Peer => PEER.ip(),
            IpChoice::Any(v) => Ipv4Addr::from(v),
        };
        let port = if f.peer_port { PEER_PORT } else { f.port };
        let req = f.req;
        match f.opcode % 12 {
            0 => Command::Open { req },
            1 => Command::Bind {
                req,
                slot,
                ip,
                port,
                reuse: Default::default(),
            },
            2 => Command::Listen {
                req,
                slot,
                backlog: f.arg,
            },
            3 => Command::Connect {
                req,
                slot,
                ip,
                port,
            },
            4 => Command::Send { slot },
            5 => Command::Consumed { slot },
            6 => Command::Shutdown {
                req,
                slot,
                how: [Shut::Read, Shut::Write, Shut::Both][(f.arg % 3) as usize],
            },
            7 => Command::Close {
                slot,
                abort: f.arg & 1 != 0,
            },
            8 => Command::SetNoDelay {
                req,
                slot,
                nodelay: f.arg & 1 != 0,
            },
            9 => Command::SetCongestion {
                req,
                slot,
                algorithm: Congestion::ALL[f.arg as usize % Congestion::ALL.len()],
            },
            10 => Command::SetTeardownOffload {
                req,
                slot,
                on: f.arg & 1 != 0,
            },
            _ => Command::Splice {
                req,
                slot_a: slot,
                slot_b: f.arg % (layout().max_sockets + 2),
            },
        }
    }

    fn op(&mut self, op: &Op) -> Result<(), String> {
        match op {
            Op::Raw { opcode, rest } => {
                let mut e = [0u8; PAYLOAD_BYTES];
                e[0] = *opcode;
                e[1..1 + rest.len()].copy_from_slice(rest);
                self.post_fuzz(e)?;
            }
            Op::Command(f) => {
                let e = self.command(f).encode();
                self.post_fuzz(e)?;
            }
            Op::Position {
                slot,
                which,
                value,
                doorbell,
            } => {
                let s = u32::from(*slot) % layout().max_sockets;
                if s == self.good_slot {
                    return Ok(());
                }
                let region = self.region.clone();
                let b = block(&region, s);
                let (pos, engine_side) = match which {
                    Position::RxHead => (b.rx_head(), b.rx_tail()),
                    Position::TxTail => (b.tx_tail(), b.tx_head()),
                };
                let v = match value {
                    PositionValue::Near(d) => engine_side
                        .load(Ordering::Acquire)
                        .wrapping_add(*d as i64 as u64),
                    PositionValue::Any(v) => *v,
                };
                pos.store(v, Ordering::Release);
                if *doorbell {
                    let cmd = match which {
                        Position::RxHead => Command::Consumed { slot: s },
                        Position::TxTail => Command::Send { slot: s },
                    };
                    self.post_fuzz(cmd.encode())?;
                }
            }
            Op::Write { slot, len } => {
                let s = u32::from(*slot) % layout().max_sockets;
                if s == self.good_slot {
                    return Ok(());
                }
                let region = self.region.clone();
                let b = block(&region, s);
                let tail = b.tx_tail().load(Ordering::Relaxed);
                let data = pattern(usize::from(*len) % 4096, s);
                self.region
                    .ring(s, Dir::Tx)
                    .ok_or("tx ring")?
                    .write(tail, &data);
                b.tx_tail()
                    .store(tail.wrapping_add(data.len() as u64), Ordering::Release);
                self.post_fuzz(Command::Send { slot: s }.encode())?;
            }
            Op::Poll { rounds } => {
                for _ in 0..=(*rounds % 32) {
                    self.round();
                    self.read_completions()?;
                }
            }
            Op::GoodIo => self.good_io()?,
            Op::PeerAccept => self.peer_accept(),
        }
        Ok(())
    }

    fn run(&mut self, input: &ServiceInput) -> Result<ServiceStats, String> {
        for op in input.ops.iter().take(MAX_OPS) {
            self.op(op)?;
        }
        // Heal: the fuzzed context stops; both streams must finish, exactly, with FINs.
        for _ in 0..FINISH_ROUNDS {
            self.peer_accept();
            self.good_io()?;
            self.round();
            self.read_completions()?;
            // Entries without a request id are owed no answer: the queue itself must drain.
            let done = self.up.fin_seen
                && self.down.fin_seen
                && self.expected_reqs.is_empty()
                && self.cmd[1].pending().is_ok_and(|n| n == 0);
            if done {
                break;
            }
        }
        self.read_completions()?;
        if self.up.read != self.up.data || !self.up.fin_seen {
            return Err(format!(
                "application to peer: {} of {} bytes, {} at the first difference, FIN {}",
                self.up.read.len(),
                self.up.data.len(),
                first_difference(&self.up.read, &self.up.data),
                self.up.fin_seen
            ));
        }
        if self.down.read != self.down.data || !self.down.fin_seen {
            return Err(format!(
                "peer to application: {} of {} bytes, {} at the first difference, FIN {}",
                self.down.read.len(),
                self.down.data.len(),
                first_difference(&self.down.read, &self.down.data),
                self.down.fin_seen
            ));
        }
        if self.cmd[1].pending().map_or(true, |n| n != 0) {
            return Err(format!(
                "the fuzzed context's command queue never drained: {:?}",
                self.cmd[1].pending()
            ));
        }
        if !self.expected_reqs.is_empty() {
            return Err(format!(
                "{} entries with a request id never answered",
                self.expected_reqs.len()
            ));
        }
        let c = self.service.counters();
        if c.bad_entries != self.undecodable {
            return Err(format!(
                "{} entries did not decode but bad_entries is {}",
                self.undecodable, c.bad_entries
            ));
        }
        let counted = c.bad_entries + c.bad_slots + c.bad_state + c.bad_positions;
        if self.stats.failed > counted {
            return Err(format!(
                "{} failed completions but only {counted} refusals counted: {c:?}",
                self.stats.failed
            ));
        }
        if c.corrupt_queues != 0 {
            return Err(format!(
                "{} context queues judged corrupt",
                c.corrupt_queues
            ));
        }
        self.stats.counters = c;
        Ok(self.stats)
    }
}

/// Slot `s`'s block; every slot the target names is taken modulo the layout's sockets.
fn block(region: &Region, s: u32) -> SocketBlock<'_> {
    SocketBlock::new(region, s).expect("slot within the layout")
}

fn first_difference(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Polls the service until the control socket has a reply, and reads it.
fn control_reply(
    service: &mut Service,
    engine: &mut Stack,
    now: &mut Instant,
    sock: &OwnedFd,
) -> Result<(Reply, Vec<OwnedFd>), String> {
    for _ in 0..SETUP_ROUNDS {
        let _ = service.poll(engine, *now);
        *now += Duration::from_millis(1);
        let mut pfd = [PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
        if poll(&mut pfd, PollTimeout::ZERO).map_err(|e| format!("poll: {e}"))? > 0 {
            return match recv_message::<Reply>(sock.as_fd()) {
                Ok(Some(r)) => Ok(r),
                Ok(None) => continue,
                Err(e) => Err(format!("control reply: {e}")),
            };
        }
    }
    Err("the service never answered on its control socket".into())
}
