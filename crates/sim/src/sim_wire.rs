//! The simulator's wire as a device backend (`--backend sim`): the real engine runtime, unchanged,
//! attached to a simulated network, so it can be tested without root, exactly and fast.
//!
//! The engine's port is a host of a [`Sim`]: its link (bandwidth, delay, queue,
//! loss/reordering/duplication/corruption from [`LinkConfig`]) leads to a learning switch that
//! joins one or more simulated peers, each a sans-IO core running a peer application (a
//! source, a sink or a closed-loop RPC client from `sluice-apps`).
//!
//! Time is virtual: the wire owns a [`Clock`] shared with the engine (built by
//! [`SimWire::into_engine`]). Polling takes no virtual time; when the engine sleeps on the
//! device, [`Device::wait`] runs the simulation to the next frame for the engine or to the
//! timeout, and moves the clock there. [`run_with_peers`] drives a whole run to the end of
//! the engine application and every peer.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

/// The simulator's link settings and counters, re-exported for building a [`SimWireConfig`].
pub use crate::{GilbertElliott, Impairment, LinkConfig, LinkStats};
use crate::{Host, LinkId, NodeId, Sim, SimError};
use sluice_apps::{RpcClient, RpcClientError, Sink, SinkReport, Source};
use sluice_device::{
    complete_partial_checksum, Device, DeviceError, DeviceStats, RxChecksum, RxMeta, TxBatch,
    TxFrame,
};
use sluice_tcp::{Instant, Stack};
use sluice_wire::gso::segment_tcp4;
use sluice_wire::EthernetAddress;

use sluice_engine::setup::{core_config, offload_config, Transport};
use sluice_engine::{App, AppStatus, Clock, Engine, EngineError};

/// The engine's MAC address on the simulated wire.
pub const ENGINE_MAC: EthernetAddress = EthernetAddress([0x02, 0x53, 0x4c, 0x00, 0x00, 0x01]);

/// Largest Ethernet frame on the simulated wire (MTU 1500).
const MAX_FRAME: usize = 1514;
/// The largest large segment the wire takes with TSO: an IPv4 packet of 64 KB.
const TSO_FRAME: usize = 14 + 65_535;
/// Most peers one wire holds (their MACs number them in two bytes).
const MAX_PEERS: usize = 1024;
/// Longest one wait runs the simulation before returning (a wait may end early, and a
/// longer one would let an idle network jump far ahead of the engine's next look).
const MAX_WAIT: Duration = Duration::from_secs(1);
/// Virtual time the run driver lets the engine run between checks of the peers.
const RUN_SLICE: Duration = Duration::from_micros(50);

/// Configuration of a simulated wire.
#[derive(Clone, Debug)]
pub struct SimWireConfig {
    /// Seed of the link's impairments and of every simulated core (the engine's included).
    pub seed: u64,
    /// The engine's link to the switch, both directions alike; peers hang off the switch on
    /// ideal links, so this link is the bottleneck and the only impaired hop.
    pub link: LinkConfig,
    /// The engine's MAC address.
    pub mac: EthernetAddress,
    /// Frames received or queued for transmission per burst.
    pub batch: usize,
    /// Frames that may wait for the engine to receive them before more are dropped.
    pub rx_capacity: usize,
    /// Segmentation offload, like a NIC with TSO: the engine may hand over 64 KB segments,
    /// which the wire cuts into MTU-sized frames (sluice-wire's software GSO).
    pub tso: bool,
    /// Congestion control, ECN and recovery of the engine's core (the peers keep the
    /// core's defaults).
    pub transport: Transport,
}

impl Default for SimWireConfig {
    fn default() -> Self {
        SimWireConfig {
            seed: 1,
            link: LinkConfig::new(10_000_000_000, Duration::from_micros(10)),
            mac: ENGINE_MAC,
            batch: 64,
            rx_capacity: 4096,
            tso: true,
            transport: Transport::default(),
        }
    }
}

/// Why a simulated wire, a peer or a run could not be set up.
#[derive(Debug, Clone, PartialEq)]
pub enum SimWireError {
    /// A configuration value is out of range.
    InvalidConfig(String),
    /// A simulated core refused its configuration.
    Core(sluice_tcp::ConfigError),
    /// The simulator refused the topology.
    Sim(SimError),
}

impl std::fmt::Display for SimWireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimWireError::InvalidConfig(why) => write!(f, "simulated wire: {why}"),
            SimWireError::Core(e) => write!(f, "simulated core: {e}"),
            SimWireError::Sim(e) => write!(f, "simulator: {e}"),
        }
    }
}

impl std::error::Error for SimWireError {}

/// What a simulated peer does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerRole {
    /// Connects to the engine's server and sends `bytes` of the deterministic stream `seed`,
    /// then closes.
    Source {
        /// The engine's address and port.
        server: SocketAddrV4,
        /// Bytes to send.
        bytes: u64,
        /// Seed of the stream.
        seed: u64,
    },
    /// Listens on `port` and hashes what each connection sends until `connections` closed.
    Sink {
        /// Port to listen on.
        port: u16,
        /// Connections to receive before the peer is done.
        connections: usize,
    },
    /// Connects to the engine's echo server and runs `count` requests of `size` bytes, one at
    /// a time, checking each echo and timing it.
    Rpc {
        /// The engine's address and port.
        server: SocketAddrV4,
        /// Requests to complete.
        count: u64,
        /// Bytes per request.
        size: usize,
    },
}

/// Why a simulated peer failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerError {
    /// A core call on the peer failed (connect refused, reset, timed out).
    Core(sluice_tcp::Error),
    /// The RPC client stopped early.
    Rpc(RpcClientError),
}

impl std::fmt::Display for PeerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerError::Core(e) => write!(f, "{e}"),
            PeerError::Rpc(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PeerError {}

/// A peer application's running state.
enum PeerRun {
    /// Not started yet (it starts on its first poll).
    Idle,
    /// Sending.
    Source(Source),
    /// Receiving.
    Sink(Sink),
    /// Running requests.
    Rpc(Box<RpcClient>),
}

/// One simulated peer host: its address, role, progress and results.
pub struct Peer {
    /// The peer's address.
    pub ip: Ipv4Addr,
    /// What it does.
    pub role: PeerRole,
    node: NodeId,
    run: PeerRun,
    sink_reports: Vec<SinkReport>,
    sent: Option<(u64, [u8; 32])>,
    error: Option<PeerError>,
    finished_at: Option<Instant>,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("ip", &self.ip)
            .field("role", &self.role)
            .field("done", &self.done())
            .finish_non_exhaustive()
    }
}

impl Peer {
    /// Whether the peer finished its role or failed.
    pub fn done(&self) -> bool {
        self.error.is_some() || self.finished_at.is_some()
    }

    /// Why it failed, if it did.
    pub fn error(&self) -> Option<PeerError> {
        self.error
    }

    /// When it finished (virtual time), if it did.
    pub fn finished_at(&self) -> Option<Instant> {
        self.finished_at
    }

    /// A source's bytes sent and their SHA-256, once it finished.
    pub fn sent(&self) -> Option<(u64, [u8; 32])> {
        self.sent
    }

    /// A sink's reports, one per closed connection.
    pub fn sink_reports(&self) -> &[SinkReport] {
        &self.sink_reports
    }

    /// An RPC client's progress and latencies.
    pub fn rpc(&self) -> Option<&RpcClient> {
        match &self.run {
            PeerRun::Rpc(c) => Some(c),
            _ => None,
        }
    }

    /// Moves the peer's application forward at `now` on its core.
    fn poll(&mut self, now: Instant, stack: &mut Stack) {
        if self.done() {
            return;
        }
        if let Err(e) = self.step(now, stack) {
            self.error = Some(e);
        }
    }

    fn step(&mut self, now: Instant, stack: &mut Stack) -> Result<(), PeerError> {
        if matches!(self.run, PeerRun::Idle) {
            self.run = match self.role {
                PeerRole::Source {
                    server,
                    bytes,
                    seed,
                } => PeerRun::Source(
                    Source::connect(stack, now, *server.ip(), server.port(), bytes, seed)
                        .map_err(PeerError::Core)?,
                ),
                PeerRole::Sink { port, .. } => {
                    PeerRun::Sink(Sink::listen(stack, port, 1024).map_err(PeerError::Core)?)
                }
                PeerRole::Rpc {
                    server,
                    count,
                    size,
                } => PeerRun::Rpc(Box::new(
                    RpcClient::connect(
                        stack,
                        now,
                        *server.ip(),
                        server.port(),
                        count,
                        size,
                        u64::from(u32::from(self.ip)),
                    )
                    .map_err(PeerError::Core)?,
                )),
            };
        }
        match &mut self.run {
            PeerRun::Idle => {}
            PeerRun::Source(source) => {
                if source.poll(stack).map_err(PeerError::Core)? {
                    self.sent = Some((source.sent(), source.sha256.unwrap_or_default()));
                    self.finished_at = Some(now);
                }
            }
            PeerRun::Sink(sink) => {
                for report in sink.poll(stack) {
                    let failed = report.error;
                    self.sink_reports.push(report);
                    if let Some(e) = failed {
                        return Err(PeerError::Core(e));
                    }
                }
                let wanted = match self.role {
                    PeerRole::Sink { connections, .. } => connections,
                    _ => 0,
                };
                if self.sink_reports.len() >= wanted {
                    self.finished_at = Some(now);
                }
            }
            PeerRun::Rpc(client) => {
                if client.poll(stack, now) {
                    if let Some(e) = client.error {
                        return Err(PeerError::Rpc(e));
                    }
                    self.finished_at = Some(now);
                }
            }
        }
        Ok(())
    }
}

/// The engine's port on the simulated network: frames for the engine wait in `inbox`
/// (bounded), frames the engine flushed wait in `outbox` for the simulator's next poll.
/// Buffers are recycled through `free`, so nothing is allocated per frame once warm.
#[derive(Default)]
struct EnginePort {
    inbox: VecDeque<Vec<u8>>,
    outbox: VecDeque<Vec<u8>>,
    free: Vec<Vec<u8>>,
    rx_capacity: usize,
    rx_dropped: u64,
}

impl EnginePort {
    fn buffer_with(&mut self, frame: &[u8]) -> Vec<u8> {
        let mut b = self.free.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(frame);
        b
    }

    fn recycle(&mut self, b: Vec<u8>) {
        // Keep at most the inbox's worth of spare buffers.
        if self.free.len() < self.rx_capacity {
            self.free.push(b);
        }
    }
}

/// A node of the simulated network: the engine's port or a peer's core.
enum WireHost {
    Port(EnginePort),
    Peer(Box<Stack>),
}

impl Host for WireHost {
    fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        match self {
            WireHost::Port(port) => {
                if port.inbox.len() >= port.rx_capacity {
                    // The engine is not keeping up: drop like a full receive ring.
                    port.rx_dropped += 1;
                    return;
                }
                let b = port.buffer_with(frame);
                port.inbox.push_back(b);
            }
            WireHost::Peer(stack) => stack.handle_frame(now, frame),
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        match self {
            WireHost::Port(port) => {
                let frame = port.outbox.pop_front()?;
                let n = frame.len().min(buf.len());
                buf[..n].copy_from_slice(&frame[..n]);
                port.recycle(frame);
                Some(n)
            }
            WireHost::Peer(stack) => stack.poll_transmit(now, buf),
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            WireHost::Port(_) => None,
            WireHost::Peer(stack) => stack.poll_timeout(),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if let WireHost::Peer(stack) = self {
            stack.handle_timeout(now);
        }
    }
}

/// A [`Device`] whose wire is a simulated network with simulated peers (see the module docs).
pub struct SimWire {
    sim: Sim<WireHost>,
    port: NodeId,
    switch: NodeId,
    link: LinkId,
    peers: Vec<Peer>,
    clock: Clock,
    seed: u64,
    mac: EthernetAddress,
    transport: Transport,
    batch: usize,
    /// Frames queued for the link; bytes per slot: one MTU-sized frame, or a 64 KB segment
    /// with TSO (cut at flush time, as its GSO size says).
    tx: TxBatch,
    /// One segment being cut from a large one.
    gso_scratch: Box<[u8]>,
    stats: DeviceStats,
}

impl std::fmt::Debug for SimWire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimWire")
            .field("now", &self.sim.now())
            .field("peers", &self.peers)
            .finish_non_exhaustive()
    }
}

/// Checks that a probability is a number within 0..=1.
fn probability(name: &str, p: f64) -> Result<(), SimWireError> {
    if (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(SimWireError::InvalidConfig(format!(
            "{name} probability {p} is not within 0..=1"
        )))
    }
}

impl SimWire {
    /// A simulated network with the engine's port on `config.link` and no peers yet.
    pub fn new(config: SimWireConfig) -> Result<Self, SimWireError> {
        if !(1..=4096).contains(&config.batch) || config.rx_capacity < config.batch {
            return Err(SimWireError::InvalidConfig(
                "batch must be 1..=4096 frames and rx_capacity at least one batch".into(),
            ));
        }
        let imp = &config.link.impairment;
        for (name, p) in [
            ("loss", imp.loss),
            ("reorder", imp.reorder),
            ("duplicate", imp.duplicate),
            ("corrupt", imp.corrupt),
        ] {
            probability(name, p)?;
        }
        if config.link.queue_capacity_bytes < MAX_FRAME {
            return Err(SimWireError::InvalidConfig(format!(
                "the link queue must hold at least one {MAX_FRAME}-byte frame"
            )));
        }
        let tx_slot = if config.tso { TSO_FRAME } else { MAX_FRAME };
        let mut sim = Sim::new(config.seed);
        let port = sim.add_host(WireHost::Port(EnginePort {
            rx_capacity: config.rx_capacity,
            ..EnginePort::default()
        }));
        let switch = sim.add_switch();
        let link = sim
            .connect(port, switch, config.link)
            .map_err(SimWireError::Sim)?;
        Ok(SimWire {
            sim,
            port,
            switch,
            link,
            peers: Vec::new(),
            clock: Clock::virtual_time(),
            seed: config.seed,
            mac: config.mac,
            transport: config.transport,
            batch: config.batch,
            tx: TxBatch::new(config.batch, tx_slot),
            gso_scratch: vec![0u8; MAX_FRAME].into_boxed_slice(),
            stats: DeviceStats::default(),
        })
    }

    /// Adds a simulated peer at `ip` (a sans-IO core, seeded from the wire's seed) that plays
    /// `role`; it starts on the first poll of the wire.
    pub fn add_peer(&mut self, ip: Ipv4Addr, role: PeerRole) -> Result<(), SimWireError> {
        if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() || ip.is_loopback() {
            return Err(SimWireError::InvalidConfig(format!(
                "{ip} cannot be a simulated peer's address"
            )));
        }
        if self.peers.iter().any(|p| p.ip == ip) {
            return Err(SimWireError::InvalidConfig(format!(
                "two simulated peers at {ip}"
            )));
        }
        if self.peers.len() >= MAX_PEERS {
            return Err(SimWireError::InvalidConfig(format!(
                "at most {MAX_PEERS} simulated peers"
            )));
        }
        match role {
            PeerRole::Source { server, .. } | PeerRole::Rpc { server, .. }
                if *server.ip() == ip =>
            {
                return Err(SimWireError::InvalidConfig(format!(
                    "the peer at {ip} cannot connect to itself"
                )));
            }
            PeerRole::Rpc { size: 0, .. } => {
                return Err(SimWireError::InvalidConfig(
                    "RPC requests need at least one byte".into(),
                ));
            }
            _ => {}
        }
        let n = self.peers.len() + 1;
        let mac = EthernetAddress([0x02, 0x53, 0x4c, 0x01, (n >> 8) as u8, n as u8]);
        let mut config = core_config(mac, ip, 1500);
        config.seed = self.seed ^ (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // Virtual time from zero: a seeded run is the same every time.
        config.clock_epoch = Duration::ZERO;
        let stack = Stack::new(config).map_err(SimWireError::Core)?;
        let node = self.sim.add_host(WireHost::Peer(Box::new(stack)));
        // Peers reach the switch over ideal links: the engine's link is the one under test.
        self.sim
            .connect(node, self.switch, LinkConfig::new(0, Duration::ZERO))
            .map_err(SimWireError::Sim)?;
        self.peers.push(Peer {
            ip,
            role,
            node,
            run: PeerRun::Idle,
            sink_reports: Vec::new(),
            sent: None,
            error: None,
            finished_at: None,
        });
        Ok(())
    }

    /// Builds the engine at `ip` on this wire, sharing its virtual clock; the engine's core is
    /// seeded from the wire's seed, so the whole run is exact.
    pub fn into_engine(self, ip: Ipv4Addr) -> Result<Engine<SimWire>, SimWireError> {
        if let Some(p) = self.peers.iter().find(|p| p.ip == ip) {
            return Err(SimWireError::InvalidConfig(format!(
                "the engine and a simulated peer both at {}",
                p.ip
            )));
        }
        let mut config = core_config(self.mac, ip, 1500);
        config.seed = self.seed ^ 0x5eed_e4e1_0000_0000;
        config.clock_epoch = Duration::ZERO;
        self.transport.apply(&mut config);
        offload_config(&mut config, &self);
        let stack = Stack::new(config).map_err(SimWireError::Core)?;
        let clock = self.clock.clone();
        Ok(Engine::with_clock(stack, self, clock))
    }

    /// The wire's virtual clock (the engine built by [`SimWire::into_engine`] shares it).
    pub fn clock(&self) -> Clock {
        self.clock.clone()
    }

    /// The simulated peers, in the order they were added.
    pub fn peers(&self) -> &[Peer] {
        &self.peers
    }

    /// Whether every peer finished or failed.
    pub fn peers_done(&self) -> bool {
        self.peers.iter().all(Peer::done)
    }

    /// Counters of the engine's link: (engine → network, network → engine).
    pub fn link_stats(&self) -> (LinkStats, LinkStats) {
        self.sim.link_stats(self.link)
    }

    /// A peer's core, for counters and invariant checks.
    pub fn peer_stack(&self, index: usize) -> Option<&Stack> {
        let node = self.peers.get(index)?.node;
        match self.sim.host(node) {
            Some(WireHost::Peer(stack)) => Some(stack),
            _ => None,
        }
    }

    /// The engine's port (always present: new() adds it first and nothing removes it).
    fn engine_port(&mut self) -> Option<&mut EnginePort> {
        match self.sim.host_mut(self.port) {
            Some(WireHost::Port(port)) => Some(port),
            _ => None,
        }
    }

    fn inbox_len(&self) -> usize {
        match self.sim.host(self.port) {
            Some(WireHost::Port(port)) => port.inbox.len(),
            _ => 0,
        }
    }

    /// Runs the simulation (peers' applications included) until `deadline`, stopping early
    /// once `frames` wait for the engine; then moves the shared clock to the simulator's time.
    fn run_sim(&mut self, deadline: Instant, frames: usize) {
        let port = self.port;
        let peers = &mut self.peers;
        let result = self.sim.run_until(deadline, |now, hosts| {
            for peer in peers.iter_mut() {
                if let Some(WireHost::Peer(stack)) = hosts.get_mut(peer.node) {
                    peer.poll(now, stack);
                }
            }
            match hosts.get(port) {
                Some(WireHost::Port(p)) => p.inbox.len() >= frames,
                _ => true,
            }
        });
        // Deadline and Idle both mean "time reached the deadline"; the clock follows either way.
        let _ = result;
        self.clock.advance_to(self.sim.now());
    }
}

impl Device for SimWire {
    fn receive(&mut self, f: &mut dyn FnMut(&[u8], RxMeta)) -> Result<usize, DeviceError> {
        // Catch up with what is due at this instant (no time passes while polling).
        let now = self.clock.now();
        self.run_sim(now, self.batch);
        let meta = RxMeta {
            checksum: RxChecksum::Unverified,
        };
        let mut n = 0;
        while n < self.batch {
            let Some(port) = self.engine_port() else {
                break;
            };
            let Some(frame) = port.inbox.pop_front() else {
                break;
            };
            f(&frame, meta);
            if let Some(port) = self.engine_port() {
                port.recycle(frame);
            }
            n += 1;
        }
        self.stats.rx_frames += n as u64;
        Ok(n)
    }

    fn transmit_with(
        &mut self,
        f: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<bool, DeviceError> {
        let tx_slot = self.tx.slot_len();
        let Some(slot) = self.tx.next_slot() else {
            return Ok(false);
        };
        match f(slot) {
            None | Some(TxFrame { len: 0, .. }) => {}
            Some(TxFrame { len, gso_size, .. }) if gso_size != 0 => {
                if tx_slot == MAX_FRAME {
                    return Err(DeviceError::NoSegmentationOffload { len });
                }
                if len > tx_slot {
                    return Err(DeviceError::FrameTooLong { len, max: tx_slot });
                }
                // Cut at flush time; segment_tcp4 also completes the checksums.
                self.tx.commit(len, gso_size);
            }
            Some(TxFrame { len, .. }) if len > MAX_FRAME => {
                return Err(DeviceError::FrameTooLong {
                    len,
                    max: MAX_FRAME,
                })
            }
            Some(TxFrame {
                len, csum_partial, ..
            }) => {
                // The simulated peers verify checksums like any receiver without offload.
                if csum_partial && !complete_partial_checksum(&mut slot[..len]) {
                    self.stats.tx_dropped += 1;
                } else {
                    self.tx.commit(len, 0);
                }
            }
        }
        Ok(true)
    }

    fn flush(&mut self) -> Result<(), DeviceError> {
        let count = self.tx.count();
        if count == 0 {
            return Ok(());
        }
        let mut frames = 0;
        if let Some(WireHost::Port(port)) = self.sim.host_mut(self.port) {
            for i in 0..count {
                let (frame, gso) = self.tx.frame(i);
                if gso == 0 {
                    let b = port.buffer_with(frame);
                    port.outbox.push_back(b);
                    frames += 1;
                    continue;
                }
                let cut = segment_tcp4(frame, usize::from(gso), &mut self.gso_scratch, |seg| {
                    let b = port.buffer_with(seg);
                    port.outbox.push_back(b);
                    frames += 1;
                });
                if cut.is_err() {
                    self.stats.tx_dropped += 1;
                }
            }
        }
        self.tx.clear();
        self.stats.tx_frames += frames;
        // Hand the burst to the link now (its queue decides what is dropped), without running
        // any event: a stop condition that holds at once only polls the hosts.
        let now = self.clock.now();
        self.run_sim(now, 0);
        Ok(())
    }

    fn wait(&mut self, timeout: Option<Duration>) -> Result<(), DeviceError> {
        if self.inbox_len() > 0 {
            return Ok(());
        }
        let now = self.clock.now();
        self.run_sim(now + timeout.map_or(MAX_WAIT, |t| t.min(MAX_WAIT)), 1);
        Ok(())
    }

    fn max_frame(&self) -> usize {
        MAX_FRAME
    }

    fn max_tso_frame(&self) -> usize {
        self.tx.slot_len()
    }

    fn mac(&self) -> EthernetAddress {
        self.mac
    }

    fn stats(&self) -> DeviceStats {
        let mut stats = self.stats;
        if let Some(WireHost::Port(port)) = self.sim.host(self.port) {
            stats.rx_dropped = port.rx_dropped;
        }
        let (out, _) = self.link_stats();
        stats.tx_dropped += out.queue_drops;
        stats
    }
}

/// An application that does nothing: the engine keeps answering the peers (ACKs, FINs)
/// after the real application finished.
struct Linger;

impl App for Linger {
    fn poll(&mut self, _stack: &mut Stack, _now: Instant) -> Result<AppStatus, EngineError> {
        Ok(AppStatus::Running)
    }
}

/// How a run over the simulated wire ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimRun {
    /// Virtual time when the engine application and every peer had finished.
    pub finished_at: Instant,
}

/// Why a run over the simulated wire failed.
#[derive(Debug)]
pub enum SimRunError {
    /// The engine stopped with an error.
    Engine(EngineError),
    /// A simulated peer failed.
    Peer {
        /// The peer's address.
        ip: Ipv4Addr,
        /// What went wrong.
        error: PeerError,
    },
    /// The budget of virtual time ran out first.
    Budget {
        /// The budget.
        budget: Duration,
        /// Whether the engine application had finished.
        app_done: bool,
        /// Peers not yet finished.
        peers_left: usize,
    },
}

impl std::fmt::Display for SimRunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimRunError::Engine(e) => write!(f, "{e}"),
            SimRunError::Peer { ip, error } => write!(f, "simulated peer {ip}: {error}"),
            SimRunError::Budget {
                budget,
                app_done,
                peers_left,
            } => write!(
                f,
                "not finished after {:.3} s of virtual time (engine application {}, {peers_left} simulated peer(s) still running)",
                budget.as_secs_f64(),
                if *app_done { "done" } else { "running" }
            ),
        }
    }
}

impl std::error::Error for SimRunError {}

impl From<EngineError> for SimRunError {
    fn from(e: EngineError) -> Self {
        SimRunError::Engine(e)
    }
}

/// Runs the engine with `app` until the application is done and every simulated peer has
/// finished, within `budget` of virtual time; a failing peer stops the run at once.
pub fn run_with_peers(
    engine: &mut Engine<SimWire>,
    app: &mut dyn App,
    budget: Duration,
) -> Result<SimRun, SimRunError> {
    let clock = engine.clock();
    let stop = clock.now() + budget;
    let mut app_done = false;
    loop {
        let failed = engine
            .device
            .peers()
            .iter()
            .find_map(|p| p.error.map(|e| (p.ip, e)));
        if let Some((ip, error)) = failed {
            return Err(SimRunError::Peer { ip, error });
        }
        if app_done && engine.device.peers_done() {
            return Ok(SimRun {
                finished_at: clock.now(),
            });
        }
        let now = clock.now();
        if now >= stop {
            return Err(SimRunError::Budget {
                budget,
                app_done,
                peers_left: engine.device.peers().iter().filter(|p| !p.done()).count(),
            });
        }
        let slice = RUN_SLICE.min(stop.saturating_since(now));
        let status = if app_done {
            engine.run(&mut Linger, Some(slice))?
        } else {
            engine.run(app, Some(slice))?
        };
        app_done |= status == AppStatus::Done;
    }
}
