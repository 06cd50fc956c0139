//! The event loop: nodes, links, virtual time and the run methods.

mod mtp_device;

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use sluice_fabric::mtp::Verdict;
use sluice_fabric::{Channel, Forward, FramePool, Offer};

use crate::pcap::PcapWriter;
use crate::switch::Switch;
use crate::{
    Direction, Host, Impairment, Instant, LinkConfig, LinkStats, SimError, SwitchStats, TraceEvent,
    TraceKind, MAX_FRAME_LEN,
};

/// Same-instant timer firings per host after which the next firing is pushed 1 ns later.
const SAME_INSTANT_TIMER_CAP: u32 = 1000;
/// Most MACs one static switch routes (house rule 1: every table has a bound).
const MAX_ROUTES: usize = 65_536;
/// Frames taken from one host in one poll before yielding to other events.
const POLL_BURST_CAP: usize = 10_000;

/// Identifies a node (host or switch) of a [`Sim`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub usize);

/// Identifies a full-duplex link of a [`Sim`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LinkId(pub usize);

/// Bytes queued at a switch's egress `port` (its link's channel away from the switch).
fn queued_bytes(links: &[Link], ports: &[(usize, usize)], port: usize) -> usize {
    ports
        .get(port)
        .and_then(|&(link, side)| links.get(link).map(|l| l.chans[side & 1].queued_bytes()))
        .unwrap_or(0)
}

/// Simulator-wide counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Events processed (including stale timer events).
    pub events: u64,
    /// Frames hosts tried to send that exceeded [`MAX_FRAME_LEN`].
    pub oversized_drops: u64,
    /// Frames sent by hosts with no connected port.
    pub unconnected_drops: u64,
    /// Host timers fired.
    pub timer_fires: u64,
}

/// What a node is.
#[derive(Clone, Copy, Debug)]
enum NodeKind {
    Host(usize),
    Switch(usize),
}

/// A host's timer bookkeeping.
#[derive(Debug, Default)]
struct TimerState {
    /// Bumped whenever the scheduled deadline changes; older events are stale.
    generation: u64,
    /// The deadline currently scheduled, as last read from the host.
    scheduled: Option<Instant>,
    /// When the timer last fired.
    last_fire: Option<Instant>,
    /// How many times in a row it fired at `last_fire`.
    same_instant: u32,
}

/// A host and its port.
struct HostSlot<H> {
    id: NodeId,
    host: H,
    /// (link index, side of the link the host is on).
    port: Option<(usize, usize)>,
    timer: TimerState,
}

/// One end of a link.
#[derive(Clone, Copy, Debug)]
struct End {
    node: NodeId,
    /// Port index on that node (always 0 for hosts).
    port: usize,
}

/// A full-duplex link: channel 0 carries a→b, channel 1 carries b→a.
struct Link {
    ends: [End; 2],
    chans: [Channel; 2],
    capture: Option<PcapWriter>,
}

/// What an event does.
#[derive(Debug)]
enum EventKind {
    /// A channel finished serializing its in-flight frame.
    TxDone { link: usize, chan: usize },
    /// A frame reaches the far end of a channel.
    Arrive {
        link: usize,
        chan: usize,
        frame: Vec<u8>,
    },
    /// A host timer, valid only if `generation` is still current.
    Timer { host: usize, generation: u64 },
    /// Nothing to do but poll this host again (it hit the burst cap).
    Poll { host: usize },
}

/// An event in the queue, ordered by (time, insertion sequence).
#[derive(Debug)]
struct Event {
    time: Instant,
    seq: u64,
    kind: EventKind,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.time == other.time && self.seq == other.seq
    }
}

impl Eq for Event {}

impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Event {
    fn cmp(&self, other: &Self) -> Ordering {
        // BinaryHeap is a max-heap: the earliest (time, seq) must compare greatest.
        (other.time, other.seq).cmp(&(self.time, self.seq))
    }
}

/// Everything but the hosts, so hosts and the network can be borrowed apart.
struct Net {
    now: Instant,
    seed: u64,
    seq: u64,
    events: BinaryHeap<Event>,
    nodes: Vec<NodeKind>,
    switches: Vec<Switch>,
    links: Vec<Link>,
    pool: FramePool,
    tx_buf: Vec<u8>,
    stats: SimStats,
    trace: Option<Vec<TraceEvent>>,
}

impl Net {
    fn schedule(&mut self, time: Instant, kind: EventKind) {
        let seq = self.seq;
        self.seq += 1;
        self.events.push(Event { time, seq, kind });
    }

    fn trace(&mut self, link: usize, chan: usize, kind: TraceKind, len: usize) {
        if let Some(t) = &mut self.trace {
            t.push(TraceEvent {
                time: self.now,
                link: LinkId(link),
                direction: Direction::from_index(chan),
                kind,
                len,
            });
        }
    }

    /// Sends a frame out of the given side of a link.
    fn send(&mut self, link: usize, side: usize, frame: Vec<u8>) {
        self.send_with_headroom(link, side, frame, 0);
    }

    /// Sends a frame that may use `headroom` bytes beyond the egress queue's capacity (an
    /// MTP device's trimmed header).
    fn send_with_headroom(&mut self, link: usize, side: usize, frame: Vec<u8>, headroom: usize) {
        let len = frame.len();
        let Some(l) = self.links.get_mut(link) else {
            self.pool.put(frame);
            return;
        };
        let chan = side & 1;
        let (offer, marked) = l.chans[chan].offer_with_headroom(frame, headroom);
        if let Offer::Dropped(f) = offer {
            self.trace(link, chan, TraceKind::QueueDrop, len);
            self.pool.put(f);
            return;
        }
        if marked {
            self.trace(link, chan, TraceKind::EcnMarked, len);
        }
        self.trace(link, chan, TraceKind::Enqueued, len);
        match offer {
            Offer::Dropped(f) => self.pool.put(f),
            Offer::Queued => {}
            Offer::Started(ns) => {
                let at = self.now + Duration::from_nanos(ns);
                self.schedule(at, EventKind::TxDone { link, chan });
            }
            Offer::Immediate(f) => self.transmit(link, chan, f),
        }
    }

    /// Puts a frame on the wire now: impairments, then arrival events.
    fn transmit(&mut self, link: usize, chan: usize, frame: Vec<u8>) {
        let len = frame.len();
        let Some(l) = self.links.get_mut(link) else {
            self.pool.put(frame);
            return;
        };
        let ch = &mut l.chans[chan];
        let delay = ch.config.delay;
        let tx = ch.transmit(frame, &mut self.pool);
        if tx.lost {
            self.trace(link, chan, TraceKind::Lost, len);
            return;
        }
        if tx.corrupted {
            self.trace(link, chan, TraceKind::Corrupted, len);
        }
        if tx.reordered {
            self.trace(link, chan, TraceKind::Reordered, len);
        }
        let at = self.now + delay + tx.extra_delay;
        if let Some(frame) = tx.frame {
            self.schedule(at, EventKind::Arrive { link, chan, frame });
        }
        if let Some(frame) = tx.duplicate {
            self.trace(link, chan, TraceKind::Duplicated, len);
            self.schedule(at, EventKind::Arrive { link, chan, frame });
        }
    }

    /// A channel finished serializing: transmit that frame and start the next.
    fn tx_done(&mut self, link: usize, chan: usize) {
        let Some(l) = self.links.get_mut(link) else {
            return;
        };
        let ch = &mut l.chans[chan];
        let done = ch.finish();
        let next = ch.start_next();
        if let Some(ns) = next {
            let at = self.now + Duration::from_nanos(ns);
            self.schedule(at, EventKind::TxDone { link, chan });
        }
        if let Some(frame) = done {
            self.transmit(link, chan, frame);
        }
    }

    /// Forwards a frame received by a switch on `in_port`.
    fn switch_forward(&mut self, sw: usize, in_port: usize, mut frame: Vec<u8>) {
        let now = self.now - Instant::ZERO;
        let Some(s) = self.switches.get_mut(sw) else {
            self.pool.put(frame);
            return;
        };
        if let Some(dev) = s.mtp.as_deref_mut() {
            if !dev.ingress(in_port, &mut frame) {
                self.pool.put(frame);
                return;
            }
        }
        let forward = match s.mtp.as_deref_mut() {
            None => s.bridge.route(now, in_port, &frame),
            Some(dev) => {
                let (links, ports) = (&self.links, &s.ports);
                s.bridge.route_by(now, in_port, &frame, |group, hash| {
                    dev.choose(now, group, hash, &frame, |p| queued_bytes(links, ports, p))
                })
            }
        };
        match forward {
            Forward::Drop => self.pool.put(frame),
            Forward::Port(p) => match s.ports.get(p).copied() {
                Some((link, side)) => {
                    let verdict = match (s.mtp.as_deref_mut(), self.links.get(link)) {
                        (Some(dev), Some(l)) => dev.admit(now, p, &mut frame, &l.chans[side & 1]),
                        _ => Verdict::Forward { headroom: 0 },
                    };
                    match verdict {
                        Verdict::Forward { headroom } => {
                            self.send_with_headroom(link, side, frame, headroom)
                        }
                        Verdict::Drop => self.pool.put(frame),
                    }
                }
                None => self.pool.put(frame),
            },
            Forward::Flood => {
                let nports = s.ports.len();
                let last = (0..nports).rev().find(|&p| p != in_port);
                let Some(last) = last else {
                    self.pool.put(frame);
                    return;
                };
                for p in 0..last {
                    if p == in_port {
                        continue;
                    }
                    let Some(&(link, side)) = self.switches[sw].ports.get(p) else {
                        continue;
                    };
                    let copy = self.pool.copy_of(&frame);
                    self.send(link, side, copy);
                }
                match self.switches[sw].ports.get(last).copied() {
                    Some((link, side)) => self.send(link, side, frame),
                    None => self.pool.put(frame),
                }
            }
        }
    }

    /// Drains a host's transmit queue and reschedules its timer.
    fn poll_host<H: Host>(&mut self, index: usize, slot: &mut HostSlot<H>) {
        let now = self.now;
        let mut count = 0;
        while let Some(n) = slot.host.poll_transmit(now, &mut self.tx_buf) {
            match (self.tx_buf.get(..n), slot.port) {
                (None, _) => self.stats.oversized_drops += 1,
                (Some(_), None) => self.stats.unconnected_drops += 1,
                (Some(data), Some((link, side))) => {
                    let frame = self.pool.copy_of(data);
                    self.send(link, side, frame);
                }
            }
            count += 1;
            if count >= POLL_BURST_CAP {
                self.schedule(now, EventKind::Poll { host: index });
                break;
            }
        }
        let want = slot.host.poll_timeout();
        let t = &mut slot.timer;
        if want != t.scheduled {
            t.generation += 1;
            t.scheduled = want;
            if let Some(deadline) = want {
                let mut at = deadline.max(now);
                if at == now && t.last_fire == Some(now) && t.same_instant >= SAME_INSTANT_TIMER_CAP
                {
                    at = now + Duration::from_nanos(1);
                }
                let generation = t.generation;
                self.schedule(
                    at,
                    EventKind::Timer {
                        host: index,
                        generation,
                    },
                );
            }
        }
    }
}

/// Hosts that need polling: a host's transmit queue and timer change only when a frame
/// reaches it, its timer fires, or an application touches it, so only those are polled
/// after an event (not every host: the cost of an event stays independent of their number).
#[derive(Debug, Default)]
struct Dirty {
    flag: Vec<bool>,
    list: Vec<usize>,
    /// Hosts that network events (frames, timers) touched since the application last ran.
    touched_flag: Vec<bool>,
    touched: Vec<usize>,
}

impl Dirty {
    fn mark(&mut self, i: usize) {
        if let Some(f) = self.flag.get_mut(i) {
            if !*f {
                *f = true;
                self.list.push(i);
            }
        }
    }

    /// Marks host `i` dirty and remembers the network event for the application.
    fn touch(&mut self, i: usize) {
        self.mark(i);
        if let Some(f) = self.touched_flag.get_mut(i) {
            if !*f {
                *f = true;
                self.touched.push(i);
            }
        }
    }

    fn mark_all(&mut self) {
        for i in 0..self.flag.len() {
            self.mark(i);
        }
    }
}

/// Mutable access to a simulator's hosts, handed to the `app` closure of [`Sim::run_until`].
pub struct HostsView<'a, H> {
    nodes: &'a [NodeKind],
    hosts: &'a mut [HostSlot<H>],
    dirty: &'a mut Dirty,
    /// Hosts that frames or timers reached since the application last ran, in index order.
    touched: &'a [usize],
}

impl<'a, H> HostsView<'a, H> {
    /// The host with this id, if it is a host.
    pub fn get(&self, id: NodeId) -> Option<&H> {
        match self.nodes.get(id.0) {
            Some(NodeKind::Host(i)) => self.hosts.get(*i).map(|s| &s.host),
            _ => None,
        }
    }

    /// The host with this id, mutably, if it is a host.
    pub fn get_mut(&mut self, id: NodeId) -> Option<&mut H> {
        match self.nodes.get(id.0) {
            Some(NodeKind::Host(i)) => {
                self.dirty.mark(*i);
                self.hosts.get_mut(*i).map(|s| &mut s.host)
            }
            _ => None,
        }
    }

    /// Calls `f` on every host a frame or a timer reached since the application last ran,
    /// in id order: the only hosts whose readiness can have changed by itself, so an
    /// event-driven application need not visit every host after every event.
    pub fn for_each_touched(&mut self, mut f: impl FnMut(NodeId, &mut H)) {
        for &i in self.touched {
            if let Some(slot) = self.hosts.get_mut(i) {
                self.dirty.mark(i);
                f(slot.id, &mut slot.host);
            }
        }
    }

    /// Two distinct hosts at once, mutably (for an application spanning both ends).
    pub fn get_pair_mut(&mut self, a: NodeId, b: NodeId) -> Option<(&mut H, &mut H)> {
        let ia = match self.nodes.get(a.0) {
            Some(NodeKind::Host(i)) => *i,
            _ => return None,
        };
        let ib = match self.nodes.get(b.0) {
            Some(NodeKind::Host(i)) => *i,
            _ => return None,
        };
        if ia == ib || ia >= self.hosts.len() || ib >= self.hosts.len() {
            return None;
        }
        self.dirty.mark(ia);
        self.dirty.mark(ib);
        if ia < ib {
            let (lo, hi) = self.hosts.split_at_mut(ib);
            Some((&mut lo[ia].host, &mut hi[0].host))
        } else {
            let (lo, hi) = self.hosts.split_at_mut(ia);
            Some((&mut hi[0].host, &mut lo[ib].host))
        }
    }

    /// All hosts in id order.
    pub fn iter(&self) -> impl Iterator<Item = (NodeId, &H)> {
        self.hosts.iter().map(|s| (s.id, &s.host))
    }

    /// All hosts in id order, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (NodeId, &mut H)> {
        self.dirty.mark_all();
        self.hosts.iter_mut().map(|s| (s.id, &mut s.host))
    }
}

/// A deterministic discrete-event network simulator over hosts of type `H`.
pub struct Sim<H: Host> {
    hosts: Vec<HostSlot<H>>,
    net: Net,
    dirty: Dirty,
}

impl<H: Host> Sim<H> {
    /// An empty simulator at time zero whose randomness derives from `seed`.
    pub fn new(seed: u64) -> Self {
        Sim {
            dirty: Dirty::default(),
            hosts: Vec::new(),
            net: Net {
                now: Instant::ZERO,
                seed,
                seq: 0,
                events: BinaryHeap::new(),
                nodes: Vec::new(),
                switches: Vec::new(),
                links: Vec::new(),
                pool: FramePool::default(),
                tx_buf: vec![0u8; MAX_FRAME_LEN],
                stats: SimStats::default(),
                trace: None,
            },
        }
    }

    /// The seed this simulator was created with.
    pub fn seed(&self) -> u64 {
        self.net.seed
    }

    /// Adds a host with exactly one (not yet connected) port.
    pub fn add_host(&mut self, host: H) -> NodeId {
        let id = NodeId(self.net.nodes.len());
        self.net.nodes.push(NodeKind::Host(self.hosts.len()));
        self.hosts.push(HostSlot {
            id,
            host,
            port: None,
            timer: TimerState::default(),
        });
        self.dirty.flag.push(false);
        self.dirty.touched_flag.push(false);
        // It may have frames queued already.
        self.dirty.mark(self.hosts.len() - 1);
        id
    }

    /// Adds a learning Ethernet switch; it gains a port per connected link.
    ///
    /// Broadcast and unknown-unicast frames are flooded, there is no spanning
    /// tree, and forwarding takes no time, so switched topologies must be loop-free.
    pub fn add_switch(&mut self) -> NodeId {
        let id = NodeId(self.net.nodes.len());
        self.net
            .nodes
            .push(NodeKind::Switch(self.net.switches.len()));
        self.net.switches.push(Switch::default());
        id
    }

    /// Adds a static switch: it forwards only to MACs given routes with [`Sim::add_route`],
    /// never learns and never floods (so fabrics with several paths cannot loop); hosts
    /// behind it need static neighbors. Each route may be an ECMP group, spread by flow.
    pub fn add_static_switch(&mut self) -> NodeId {
        let id = NodeId(self.net.nodes.len());
        let hash_seed = self.net.seed ^ (id.0 as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.net
            .nodes
            .push(NodeKind::Switch(self.net.switches.len()));
        self.net.switches.push(Switch {
            ports: Vec::new(),
            bridge: sluice_fabric::Bridge::new_static(hash_seed),
            mtp: None,
        });
        id
    }

    /// Routes frames for `mac` at static switch `switch` out of one of `links` (an ECMP
    /// group when there are several; each link must already join the switch).
    pub fn add_route(
        &mut self,
        switch: NodeId,
        mac: [u8; 6],
        links: &[LinkId],
    ) -> Result<(), SimError> {
        let Some(NodeKind::Switch(s)) = self.net.nodes.get(switch.0).copied() else {
            return Err(SimError::NotAStaticSwitch(switch));
        };
        let sw = &mut self.net.switches[s];
        let ports = links
            .iter()
            .map(|l| {
                sw.ports
                    .iter()
                    .position(|&(link, _)| link == l.0)
                    .ok_or(SimError::NotAttached(*l, switch))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if !sw.bridge.add_route(mac, ports, MAX_ROUTES) {
            return Err(SimError::NotAStaticSwitch(switch));
        }
        Ok(())
    }

    /// Connects two nodes with a full-duplex link, both directions configured alike.
    pub fn connect(
        &mut self,
        a: NodeId,
        b: NodeId,
        config: LinkConfig,
    ) -> Result<LinkId, SimError> {
        self.connect_asymmetric(a, b, config.clone(), config)
    }

    /// Connects two nodes with a full-duplex link whose directions differ.
    pub fn connect_asymmetric(
        &mut self,
        a: NodeId,
        b: NodeId,
        a_to_b: LinkConfig,
        b_to_a: LinkConfig,
    ) -> Result<LinkId, SimError> {
        let ka = *self.net.nodes.get(a.0).ok_or(SimError::NoSuchNode(a))?;
        let kb = *self.net.nodes.get(b.0).ok_or(SimError::NoSuchNode(b))?;
        if a == b {
            return Err(SimError::SelfLoop(a));
        }
        for (id, kind) in [(a, ka), (b, kb)] {
            if let NodeKind::Host(i) = kind {
                if self.hosts[i].port.is_some() {
                    return Err(SimError::HostAlreadyConnected(id));
                }
            }
        }
        let link = self.net.links.len();
        let mut ends = [End { node: a, port: 0 }, End { node: b, port: 0 }];
        for (side, kind) in [ka, kb].into_iter().enumerate() {
            match kind {
                NodeKind::Host(i) => self.hosts[i].port = Some((link, side)),
                NodeKind::Switch(s) => {
                    let sw = &mut self.net.switches[s];
                    ends[side].port = sw.ports.len();
                    sw.ports.push((link, side));
                }
            }
        }
        let seed = self.net.seed;
        let rng_for = |stream: u64| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(stream);
            rng
        };
        let base = 2 * link as u64;
        self.net.links.push(Link {
            ends,
            chans: [
                Channel::new(a_to_b, rng_for(base + 1)),
                Channel::new(b_to_a, rng_for(base + 2)),
            ],
            capture: None,
        });
        Ok(LinkId(link))
    }

    /// Current virtual time.
    pub fn now(&self) -> Instant {
        self.net.now
    }

    /// The host with this id, if it is a host.
    pub fn host(&self, id: NodeId) -> Option<&H> {
        match self.net.nodes.get(id.0) {
            Some(NodeKind::Host(i)) => self.hosts.get(*i).map(|s| &s.host),
            _ => None,
        }
    }

    /// The host with this id, mutably, if it is a host.
    pub fn host_mut(&mut self, id: NodeId) -> Option<&mut H> {
        match self.net.nodes.get(id.0) {
            Some(NodeKind::Host(i)) => {
                self.dirty.mark(*i);
                self.hosts.get_mut(*i).map(|s| &mut s.host)
            }
            _ => None,
        }
    }

    /// All hosts in id order, mutably.
    pub fn hosts_mut(&mut self) -> impl Iterator<Item = (NodeId, &mut H)> {
        self.dirty.mark_all();
        self.hosts.iter_mut().map(|s| (s.id, &mut s.host))
    }

    /// Counters of both directions of a link: (a→b, b→a); defaults for an unknown link.
    pub fn link_stats(&self, link: LinkId) -> (LinkStats, LinkStats) {
        match self.net.links.get(link.0) {
            Some(l) => (l.chans[0].stats.clone(), l.chans[1].stats.clone()),
            None => (LinkStats::default(), LinkStats::default()),
        }
    }

    /// Counters of both directions of a link, reset to zero (for measuring an interval,
    /// such as the steady state after a warm-up); defaults for an unknown link.
    pub fn take_link_stats(&mut self, link: LinkId) -> (LinkStats, LinkStats) {
        match self.net.links.get_mut(link.0) {
            Some(l) => (
                std::mem::take(&mut l.chans[0].stats),
                std::mem::take(&mut l.chans[1].stats),
            ),
            None => (LinkStats::default(), LinkStats::default()),
        }
    }

    /// Counters of a switch, if `id` is a switch.
    pub fn switch_stats(&self, id: NodeId) -> Option<SwitchStats> {
        match self.net.nodes.get(id.0) {
            Some(NodeKind::Switch(s)) => self.net.switches.get(*s).map(|s| s.bridge.stats.clone()),
            _ => None,
        }
    }

    /// Simulator-wide counters.
    pub fn stats(&self) -> &SimStats {
        &self.net.stats
    }

    /// Events waiting in the queue (including stale timers).
    pub fn pending_events(&self) -> usize {
        self.net.events.len()
    }

    /// Changes a link's impairments mid-run; ignored for an unknown link.
    pub fn set_impairment(&mut self, link: LinkId, a_to_b: Impairment, b_to_a: Impairment) {
        if let Some(l) = self.net.links.get_mut(link.0) {
            l.chans[0].config.impairment = a_to_b;
            l.chans[1].config.impairment = b_to_a;
        }
    }

    /// Turns the event trace on (clearing it) or off.
    pub fn set_trace(&mut self, enabled: bool) {
        self.net.trace = enabled.then(Vec::new);
    }

    /// Takes the trace recorded so far, leaving tracing on if it was on.
    pub fn take_trace(&mut self) -> Vec<TraceEvent> {
        match &mut self.net.trace {
            Some(t) => std::mem::take(t),
            None => Vec::new(),
        }
    }

    /// Starts (or restarts) an in-memory pcap capture of frames delivered on a link, both directions.
    pub fn start_capture(&mut self, link: LinkId) -> Result<(), SimError> {
        let l = self
            .net
            .links
            .get_mut(link.0)
            .ok_or(SimError::NoSuchLink(link))?;
        l.capture = Some(PcapWriter::new());
        Ok(())
    }

    /// Stops a link's capture and returns the pcap file bytes, if one was running.
    pub fn take_capture(&mut self, link: LinkId) -> Option<Vec<u8>> {
        self.net
            .links
            .get_mut(link.0)
            .and_then(|l| l.capture.take())
            .map(PcapWriter::into_bytes)
    }

    /// Polls the hosts that may have something to send or a new deadline, in index order
    /// (the order polling every host would send in, so runs stay exactly as they were).
    fn poll_dirty(&mut self) {
        let list = &mut self.dirty.list;
        list.sort_unstable();
        for &i in list.iter() {
            self.dirty.flag[i] = false;
            if let Some(slot) = self.hosts.get_mut(i) {
                self.net.poll_host(i, slot);
            }
        }
        list.clear();
    }

    /// Processes one event (time has already advanced to it).
    fn process(&mut self, kind: EventKind) {
        let net = &mut self.net;
        net.stats.events += 1;
        match kind {
            EventKind::TxDone { link, chan } => net.tx_done(link, chan),
            EventKind::Arrive { link, chan, frame } => {
                let Some(l) = net.links.get_mut(link) else {
                    net.pool.put(frame);
                    return;
                };
                let ch = &mut l.chans[chan];
                ch.stats.delivered += 1;
                ch.stats.bytes_delivered += frame.len() as u64;
                if let Some(cap) = &mut l.capture {
                    cap.record(net.now, &frame);
                }
                let end = l.ends[1 - chan];
                net.trace(link, chan, TraceKind::Delivered, frame.len());
                match net.nodes.get(end.node.0).copied() {
                    Some(NodeKind::Host(h)) => {
                        if let Some(slot) = self.hosts.get_mut(h) {
                            slot.host.handle_frame(net.now, &frame);
                            self.dirty.touch(h);
                        }
                        net.pool.put(frame);
                    }
                    Some(NodeKind::Switch(s)) => net.switch_forward(s, end.port, frame),
                    None => net.pool.put(frame),
                }
            }
            EventKind::Timer { host, generation } => {
                let Some(slot) = self.hosts.get_mut(host) else {
                    return;
                };
                let t = &mut slot.timer;
                if t.generation != generation || t.scheduled.is_none() {
                    return;
                }
                t.scheduled = None;
                if t.last_fire == Some(net.now) {
                    t.same_instant = t.same_instant.saturating_add(1);
                } else {
                    t.last_fire = Some(net.now);
                    t.same_instant = 1;
                }
                net.stats.timer_fires += 1;
                slot.host.handle_timeout(net.now);
                self.dirty.touch(host);
            }
            EventKind::Poll { host } => self.dirty.mark(host),
        }
    }

    /// Runs events until `app` returns true (checked once before the first event and after every event) or virtual time would pass `deadline`.
    ///
    /// `app` gets the current time and the hosts so a test can drive
    /// application calls on them. After each event and after each `app` call
    /// every host the event reached or the application touched is polled for
    /// transmits and its timer rescheduled. Returns
    /// `Ok(now)` when `app` returned true, [`SimError::Deadline`] when the next
    /// event lies beyond `deadline`, and [`SimError::Idle`] (with time advanced
    /// to `deadline`) when no events remain. Events at exactly `deadline` run.
    pub fn run_until<F>(&mut self, deadline: Instant, mut app: F) -> Result<Instant, SimError>
    where
        F: FnMut(Instant, &mut HostsView<'_, H>) -> bool,
    {
        // Hosts changed between runs (through host_mut) are dirty already.
        self.poll_dirty();
        loop {
            let done = {
                let mut touched = std::mem::take(&mut self.dirty.touched);
                touched.sort_unstable();
                for &i in &touched {
                    self.dirty.touched_flag[i] = false;
                }
                let mut view = HostsView {
                    nodes: &self.net.nodes,
                    hosts: &mut self.hosts,
                    dirty: &mut self.dirty,
                    touched: &touched,
                };
                let done = app(self.net.now, &mut view);
                touched.clear();
                if self.dirty.touched.is_empty() {
                    // Keep the allocation.
                    self.dirty.touched = touched;
                }
                done
            };
            self.poll_dirty();
            if done {
                return Ok(self.net.now);
            }
            let next = self.net.events.peek().map(|e| e.time);
            match next {
                None => {
                    self.net.now = self.net.now.max(deadline);
                    return Err(SimError::Idle { now: self.net.now });
                }
                Some(t) if t > deadline => {
                    self.net.now = self.net.now.max(deadline);
                    return Err(SimError::Deadline { now: self.net.now });
                }
                Some(_) => {}
            }
            let Some(ev) = self.net.events.pop() else {
                continue;
            };
            self.net.now = self.net.now.max(ev.time);
            self.process(ev.kind);
            self.poll_dirty();
        }
    }

    /// Runs with a no-op app for `d` of virtual time (time ends exactly `d` later).
    pub fn run_for(&mut self, d: Duration) {
        let deadline = self.net.now + d;
        let _ = self.run_until(deadline, |_, _| false);
    }
}
