//! Coverage-guided target for the TCP core: two [`Stack`]s joined by a wire that the input
//! steers frame by frame.
//!
//! The input decodes (with `arbitrary`) into the two stacks' configurations and a sequence
//! of [`Step`]s: deliver, drop, duplicate, reorder, corrupt or mutate a frame in flight,
//! inject raw bytes or a segment forged against a live connection's sequence space, let
//! virtual time pass, and make application calls. After every step both stacks must pass
//! their own invariant check and bounds ([`crate::invariants`]), drain their transmit
//! queues and events within bounds, and emit frames that fit their MTU. Memory stays
//! bounded: the wire drops its oldest frame when full and the handle lists are capped.

use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sluice_tcp::{Algorithm, ConnId, Instant, ListenerId, Stack};
use sluice_wire::ipv4::Ecn;

use crate::config::{drain_bound, random_config, SERVICE_PORTS};
use crate::frames::{build_segment, fix_checksums, SegmentSpec, ETH_LEN, MAX_FRAME};
use crate::invariants::{check_stack, drain_events};
use crate::mutate::mutate;
use crate::net::{Packet, Side, Wire};
use crate::violation::Violation;

/// Frames the wire holds before it drops the oldest.
const WIRE_CAP: usize = 256;
/// Application handles (connections, listeners) remembered per run.
const MAX_HANDLES: usize = 64;
/// Steps decoded from one input at most, so a run's time is bounded whatever its length.
const MAX_STEPS: usize = 2048;

/// One of the two stacks.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Host {
    /// The client (side A).
    A,
    /// The server (side B).
    B,
}

impl Host {
    fn side(self) -> Side {
        match self {
            Host::A => Side::A,
            Host::B => Side::B,
        }
    }
}

/// A segment built against a live connection's state: seq and ack are offsets from what
/// the receiving end expects, so small offsets land in or near the window.
#[derive(Arbitrary, Clone, Debug)]
pub struct Forged {
    /// Which remembered connection (modulo their number) receives it.
    pub conn: u8,
    /// TCP control bits.
    pub flags: u8,
    /// Offset from the receiver's rcv_nxt.
    pub seq_off: i16,
    /// Offset from the receiver's snd_nxt.
    pub ack_off: i16,
    /// Window field.
    pub window: u16,
    /// ECN codepoint (low two bits).
    pub ecn: u8,
    /// Raw TCP option bytes (malformed ones included).
    pub options: Vec<u8>,
    /// Payload length (bytes of a fixed pattern).
    pub payload_len: u16,
}

/// One thing that happens on the wire, to the clock or in an application.
#[derive(Arbitrary, Clone, Debug)]
pub enum Step {
    /// Deliver the frame at `index` (modulo the frames in flight) to its host.
    Deliver {
        /// Frame in flight.
        index: u8,
    },
    /// Deliver up to `count` frames bound for `to`, oldest first, as one batch.
    DeliverBatch {
        /// The receiving host.
        to: Host,
        /// Most frames in the batch.
        count: u8,
    },
    /// Lose a frame.
    Drop {
        /// Frame in flight.
        index: u8,
    },
    /// Put a copy of a frame on the wire.
    Duplicate {
        /// Frame in flight.
        index: u8,
    },
    /// Swap two frames in flight.
    Reorder {
        /// One frame.
        i: u8,
        /// The other.
        j: u8,
    },
    /// XOR one byte of a frame in flight, checksums fixed or left stale.
    Corrupt {
        /// Frame in flight.
        index: u8,
        /// Byte offset (modulo the frame's length).
        offset: u16,
        /// The XOR mask (0 becomes 1).
        xor: u8,
        /// Recompute the IPv4 and TCP checksums afterwards.
        fix: bool,
    },
    /// Damage a copy of a frame with the seeded campaign's mutator and deliver it.
    Mutate {
        /// Frame in flight.
        index: u8,
        /// The mutator's seed.
        seed: u64,
    },
    /// Deliver raw bytes as a frame.
    Inject {
        /// The receiving host.
        to: Host,
        /// The frame (truncated to the harness's largest frame).
        bytes: Vec<u8>,
        /// Recompute checksums first (so bytes shaped like IPv4/TCP get past verification).
        fix: bool,
    },
    /// Deliver a segment forged against a live connection.
    Forge(Forged),
    /// Let time pass by `micros` microseconds and run due timers on both hosts.
    Advance {
        /// Microseconds.
        micros: u32,
    },
    /// Jump to the earliest timer deadline of either host and run it.
    NextTimer,
    /// Let time jump by `secs` seconds (idle periods, keepalive, TIME-WAIT, user timeout).
    Jump {
        /// Seconds.
        secs: u16,
    },
    /// Listen on one of the service ports.
    Listen {
        /// The host.
        on: Host,
        /// Port choice (modulo the service ports).
        port: u8,
        /// Accept backlog.
        backlog: u8,
    },
    /// Stop a remembered listener.
    Unlisten {
        /// Which (modulo their number).
        which: u8,
    },
    /// Actively open towards the other host's service port.
    Connect {
        /// The host opening.
        on: Host,
        /// Port choice (modulo the service ports).
        port: u8,
    },
    /// Accept from a remembered listener.
    Accept {
        /// Which (modulo their number).
        which: u8,
    },
    /// Send `len` bytes of a pattern.
    Send {
        /// Which connection (modulo their number).
        conn: u8,
        /// Bytes offered.
        len: u16,
    },
    /// Receive up to `len` bytes.
    Recv {
        /// Which connection.
        conn: u8,
        /// Buffer size.
        len: u16,
    },
    /// Shut down the sending direction.
    Shutdown {
        /// Which connection.
        conn: u8,
    },
    /// Close gracefully (the handle is released).
    Close {
        /// Which connection.
        conn: u8,
    },
    /// Reset (the handle is released).
    Abort {
        /// Which connection.
        conn: u8,
    },
    /// Nagle on or off.
    SetNagle {
        /// Which connection.
        conn: u8,
        /// Nagle's algorithm on.
        on: bool,
    },
    /// Switch congestion control.
    SetCongestion {
        /// Which connection.
        conn: u8,
        /// Algorithm choice (modulo the five).
        algorithm: u8,
    },
    /// Fix the sending rate (0: the policy's own).
    SetRate {
        /// Which connection.
        conn: u8,
        /// Kilobits per second.
        kbps: u32,
    },
}

/// The decoded input: the configurations' seeds and the steps.
#[derive(Arbitrary, Clone, Debug)]
pub struct CoreInput {
    /// Seeds of the two hosts' configurations ([`random_config`]).
    pub configs: [u64; 2],
    /// What happens.
    pub steps: Vec<Step>,
}

/// What a run did, so tests can see that inputs reach the core.
#[derive(Clone, Copy, Debug, Default)]
pub struct CoreStats {
    /// Steps run.
    pub steps: usize,
    /// Frames handed to the stacks.
    pub frames: u64,
    /// Connections that reached ESTABLISHED at some point (seen by an application call).
    pub established: u64,
    /// Bytes the applications received.
    pub received: u64,
}

struct Conn {
    side: Side,
    id: ConnId,
    released: bool,
}

struct Run {
    stacks: [Stack; 2],
    wire: Wire,
    now: Instant,
    conns: Vec<Conn>,
    listeners: Vec<(Side, ListenerId, bool)>,
    buf: Vec<u8>,
    stats: CoreStats,
}

/// Runs the target on raw bytes; panics on a violation, as a fuzz engine expects.
pub fn run(data: &[u8]) {
    if let Err(v) = check(data) {
        panic!("core target: {v}");
    }
}

/// Decodes `data` and runs it; a violation of the core's invariants or bounds is an error.
pub fn check(data: &[u8]) -> Result<CoreStats, Violation> {
    match decode(data) {
        Some(input) => run_input(&input),
        None => Ok(CoreStats::default()),
    }
}

/// The input `data` stands for (None when too short for the configurations), for replay
/// and for writing a crash down as a regression test.
pub fn decode(data: &[u8]) -> Option<CoreInput> {
    let mut u = Unstructured::new(data);
    let configs = <[u64; 2]>::arbitrary(&mut u).ok()?;
    let mut steps = Vec::new();
    // Decoded one by one (not as a Vec) so a long input is cut at MAX_STEPS cheaply.
    while steps.len() < MAX_STEPS && !u.is_empty() {
        match Step::arbitrary(&mut u) {
            Ok(s) => steps.push(s),
            Err(_) => break,
        }
    }
    Some(CoreInput { configs, steps })
}

/// Runs a decoded input.
pub fn run_input(input: &CoreInput) -> Result<CoreStats, Violation> {
    let mk = |side: Side| {
        let mut rng = ChaCha8Rng::seed_from_u64(input.configs[side.index()]);
        let mut s = Stack::new(random_config(&mut rng, side))
            .expect("random_config yields valid configurations");
        s.add_neighbor(side.other().ip(), side.other().mac());
        s
    };
    let mut r = Run {
        stacks: [mk(Side::A), mk(Side::B)],
        wire: Wire::new(WIRE_CAP),
        now: Instant::from_millis(1),
        conns: Vec::new(),
        listeners: Vec::new(),
        buf: vec![0; MAX_FRAME],
        stats: CoreStats::default(),
    };
    for step in input.steps.iter().take(MAX_STEPS) {
        r.step(step)?;
        r.stats.steps += 1;
        r.after_step()?;
    }
    Ok(r.stats)
}

fn pick(n: usize, i: u8) -> Option<usize> {
    (n > 0).then(|| usize::from(i) % n)
}

fn pattern(len: usize, salt: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(0x9E37_79B9).wrapping_add(salt) >> 7) as u8)
        .collect()
}

impl Run {
    fn stack(&mut self, side: Side) -> &mut Stack {
        &mut self.stacks[side.index()]
    }

    fn conn(&self, i: u8) -> Option<(Side, ConnId)> {
        pick(self.conns.len(), i).map(|k| (self.conns[k].side, self.conns[k].id))
    }

    fn remember(&mut self, side: Side, id: ConnId) {
        if self.conns.len() == MAX_HANDLES {
            self.conns.remove(0);
        }
        self.conns.push(Conn {
            side,
            id,
            released: false,
        });
    }

    fn release(&mut self, i: u8) {
        if let Some(k) = pick(self.conns.len(), i) {
            self.conns[k].released = true;
        }
    }

    fn deliver(&mut self, to: Side, frames: &[Vec<u8>]) {
        self.stats.frames += frames.len() as u64;
        let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        let now = self.now;
        self.stack(to).handle_frames(now, &refs);
    }

    /// Runs due timers; afterwards nothing may be due at `now` (a host would spin).
    fn run_timers(&mut self) -> Result<(), Violation> {
        let now = self.now;
        for side in Side::BOTH {
            let s = self.stack(side);
            if s.poll_timeout().is_some_and(|t| t <= now) {
                s.handle_timeout(now);
                if let Some(t) = s.poll_timeout().filter(|&t| t <= now) {
                    return Err(Violation::TimerStillDue {
                        side,
                        deadline: t,
                        now,
                    });
                }
            }
        }
        Ok(())
    }

    fn step(&mut self, step: &Step) -> Result<(), Violation> {
        match step {
            Step::Deliver { index } => {
                if let Some(p) = pick(self.wire.len(), *index).and_then(|i| self.wire.take(i)) {
                    self.deliver(p.to, &[p.bytes]);
                }
            }
            Step::DeliverBatch { to, count } => {
                let to = to.side();
                let mut batch = Vec::new();
                let mut i = 0;
                while batch.len() < usize::from(*count).max(1) && i < self.wire.len() {
                    if self.wire.get(i).is_some_and(|p| p.to == to) {
                        batch.extend(self.wire.take(i).map(|p| p.bytes));
                    } else {
                        i += 1;
                    }
                }
                self.deliver(to, &batch);
            }
            Step::Drop { index } => {
                if let Some(i) = pick(self.wire.len(), *index) {
                    self.wire.take(i);
                }
            }
            Step::Duplicate { index } => {
                if let Some(p) = pick(self.wire.len(), *index).and_then(|i| self.wire.get(i)) {
                    let p = p.clone();
                    self.wire.push(p);
                }
            }
            Step::Reorder { i, j } => {
                let n = self.wire.len();
                if let (Some(i), Some(j)) = (pick(n, *i), pick(n, *j)) {
                    self.wire.swap(i, j);
                }
            }
            Step::Corrupt {
                index,
                offset,
                xor,
                fix,
            } => {
                if let Some(mut p) = pick(self.wire.len(), *index).and_then(|i| self.wire.take(i)) {
                    if !p.bytes.is_empty() {
                        let at = usize::from(*offset) % p.bytes.len();
                        p.bytes[at] ^= (*xor).max(1);
                    }
                    if *fix {
                        fix_checksums(&mut p.bytes);
                    }
                    p.pristine = false;
                    self.wire.push(p);
                }
            }
            Step::Mutate { index, seed } => {
                if let Some(p) = pick(self.wire.len(), *index).and_then(|i| self.wire.get(i)) {
                    let (to, mut bytes) = (p.to, p.bytes.clone());
                    mutate(&mut ChaCha8Rng::seed_from_u64(*seed), &mut bytes, 0.75);
                    self.deliver(to, &[bytes]);
                }
            }
            Step::Inject { to, bytes, fix } => {
                let mut bytes = bytes[..bytes.len().min(MAX_FRAME)].to_vec();
                if *fix {
                    fix_checksums(&mut bytes);
                }
                self.deliver(to.side(), &[bytes]);
            }
            Step::Forge(f) => self.forge(f),
            Step::Advance { micros } => {
                self.now += Duration::from_micros(u64::from(*micros));
                self.run_timers()?;
            }
            Step::NextTimer => {
                let next = Side::BOTH
                    .iter()
                    .filter_map(|&s| self.stacks[s.index()].poll_timeout())
                    .min();
                if let Some(t) = next {
                    self.now = self.now.max(t);
                    self.run_timers()?;
                }
            }
            Step::Jump { secs } => {
                self.now += Duration::from_secs(u64::from(*secs));
                self.run_timers()?;
            }
            Step::Listen { on, port, backlog } => {
                let side = on.side();
                let port = SERVICE_PORTS[usize::from(*port) % SERVICE_PORTS.len()];
                if let Ok(l) = self.stack(side).listen(port, usize::from(*backlog)) {
                    if self.listeners.len() < MAX_HANDLES {
                        self.listeners.push((side, l, true));
                    }
                }
            }
            Step::Unlisten { which } => {
                if let Some(k) = pick(self.listeners.len(), *which) {
                    let (side, l, live) = self.listeners[k];
                    let r = self.stack(side).unlisten(l);
                    // A live listener's handle is honored; a stopped one's is refused.
                    if live && r.is_err() {
                        return Err(Violation::UnlistenLiveFailed { side });
                    }
                    self.listeners[k].2 = false;
                }
            }
            Step::Connect { on, port } => {
                let side = on.side();
                let port = SERVICE_PORTS[usize::from(*port) % SERVICE_PORTS.len()];
                let now = self.now;
                if let Ok(id) = self.stack(side).connect(now, side.other().ip(), port) {
                    self.remember(side, id);
                }
            }
            Step::Accept { which } => {
                if let Some(k) = pick(self.listeners.len(), *which) {
                    let (side, l, _) = self.listeners[k];
                    if let Ok(id) = self.stack(side).accept(l) {
                        self.remember(side, id);
                    }
                }
            }
            Step::Send { conn, len } => {
                if let Some((side, id)) = self.conn(*conn) {
                    let data = pattern(usize::from(*len), self.stats.frames);
                    if let Ok(n) = self.stack(side).send(id, &data) {
                        if n > data.len() {
                            return Err(Violation::SendOverLen {
                                side,
                                taken: n,
                                len: data.len(),
                            });
                        }
                    }
                }
            }
            Step::Recv { conn, len } => {
                if let Some((side, id)) = self.conn(*conn) {
                    let mut buf = vec![0u8; usize::from(*len)];
                    if self
                        .stack(side)
                        .state(id)
                        .is_ok_and(|s| matches!(s, sluice_tcp::TcpState::Established))
                    {
                        self.stats.established += 1;
                    }
                    if let Ok(n) = self.stack(side).recv(id, &mut buf) {
                        if n > buf.len() {
                            return Err(Violation::RecvOverLen {
                                side,
                                got: n,
                                len: buf.len(),
                            });
                        }
                        self.stats.received += n as u64;
                    }
                }
            }
            Step::Shutdown { conn } => {
                if let Some((side, id)) = self.conn(*conn) {
                    let _ = self.stack(side).shutdown(id);
                }
            }
            Step::Close { conn } => {
                if let Some((side, id)) = self.conn(*conn) {
                    // Odd connections ask for teardown offload (within the configured limits).
                    if conn % 2 == 1 {
                        let _ = self.stack(side).set_teardown_offload(id, true);
                    }
                    let _ = self.stack(side).close(id);
                    self.release(*conn);
                }
            }
            Step::Abort { conn } => {
                if let Some((side, id)) = self.conn(*conn) {
                    let _ = self.stack(side).abort(id);
                    self.release(*conn);
                }
            }
            Step::SetNagle { conn, on } => {
                if let Some((side, id)) = self.conn(*conn) {
                    let _ = self.stack(side).set_nagle(id, *on);
                }
            }
            Step::SetCongestion { conn, algorithm } => {
                if let Some((side, id)) = self.conn(*conn) {
                    let a = Algorithm::ALL[usize::from(*algorithm) % Algorithm::ALL.len()];
                    let _ = self.stack(side).set_congestion_control(id, a);
                }
            }
            Step::SetRate { conn, kbps } => {
                if let Some((side, id)) = self.conn(*conn) {
                    let _ = self.stack(side).set_rate(id, u64::from(*kbps) * 1000);
                }
            }
        }
        Ok(())
    }

    /// Builds a segment from the peer of a remembered connection to it, at offsets from the
    /// connection's own rcv_nxt and snd_nxt, and delivers it.
    fn forge(&mut self, f: &Forged) {
        let Some((side, id)) = self.conn(f.conn) else {
            return;
        };
        let s = &self.stacks[side.index()];
        let (Ok((local, peer)), Ok(info)) = (s.endpoints(id), s.info(id)) else {
            return;
        };
        let spec = SegmentSpec {
            src_mac: side.other().mac(),
            dst_mac: side.mac(),
            src_ip: *peer.ip(),
            dst_ip: *local.ip(),
            ecn: match f.ecn & 3 {
                0 => Ecn::NotEct,
                1 => Ecn::Ect1,
                2 => Ecn::Ect0,
                _ => Ecn::Ce,
            },
            src_port: peer.port(),
            dst_port: local.port(),
            seq: info.rcv_nxt.0.wrapping_add(f.seq_off as u32),
            ack: info.snd_nxt.0.wrapping_add(f.ack_off as u32),
            flags: f.flags,
            window: f.window,
            urgent: 0,
            options: f.options.clone(),
            payload: pattern(usize::from(f.payload_len) % 2048, u64::from(f.flags)),
        };
        let frame = build_segment(&spec);
        self.deliver(side, &[frame]);
    }

    /// Collects what both hosts transmit (bounded, each frame within the MTU), drains their
    /// events, and checks both stacks and every live handle.
    fn after_step(&mut self) -> Result<(), Violation> {
        let now = self.now;
        for side in Side::BOTH {
            let bound = drain_bound(self.stacks[side.index()].config());
            let mtu = self.stacks[side.index()].config().mtu;
            let mut drained = false;
            for _ in 0..=bound {
                let Some(n) = self.stacks[side.index()].poll_transmit(now, &mut self.buf) else {
                    drained = true;
                    break;
                };
                if n > self.buf.len() {
                    return Err(Violation::TransmitOverBuffer { side, len: n });
                }
                if n > usize::from(mtu) + ETH_LEN {
                    return Err(Violation::FrameOverMtu {
                        side,
                        len: n,
                        mtu,
                        frame: format!("{:02x?}", &self.buf[..n.min(64)]),
                    });
                }
                self.wire.push(Packet {
                    to: side.other(),
                    bytes: self.buf[..n].to_vec(),
                    pristine: true,
                });
            }
            if !drained {
                return Err(Violation::EndlessTransmit { side, bound });
            }
            drain_events(&mut self.stacks[side.index()], side)?;
            check_stack(&self.stacks[side.index()], side)?;
        }
        for c in &self.conns {
            // A handle the application still holds is honored until it lets go.
            if !c.released && self.stacks[c.side.index()].state(c.id).is_err() {
                return Err(Violation::StaleHandle {
                    side: c.side,
                    slot: c.id.slot(),
                });
            }
        }
        Ok(())
    }
}
