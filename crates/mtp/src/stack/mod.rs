//! [`MtpStack`]: the MTP transport as a sans-IO core (docs/mtp.md "The transport"): given
//! frames, application calls and the time, it returns frames, events and its next deadline.

mod api;
mod config;
mod counters;
mod pace;
mod rack;
mod rx;
mod timer;
mod tx;

pub use api::{BindError, EndpointId, Event, FailReason, Message, SendError, SendOptions};
pub use config::{
    CcParams, ConfigError, Encapsulation, Nanos, StackConfig, MAX_FEEDBACK_CAP, MAX_LINE_BACKLOG,
    MAX_LINE_FRAME_OVERHEAD,
};
pub use counters::StackCounters;

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};

use sluice_wire::EthernetAddress;

use crate::cc::{Cc, DestPaths, Window};
use crate::msg::rack::SendLog;
use crate::msg::{OutMessage, PktState, Reassembly, RttEstimator, Scheduler};
use crate::wire::PathletTc;

use rx::PendingAck;

/// The first ephemeral port (RFC 6335's dynamic range).
const EPHEMERAL_FIRST: u16 = 49152;

/// An application's endpoint.
#[derive(Debug)]
struct Endpoint {
    port: u16,
    queue: VecDeque<Message>,
}

/// What the sender keeps per destination host.
#[derive(Debug)]
struct Dest {
    rtt: RttEstimator,
    paths: DestPaths,
    /// Outstanding messages to it (the timeout walks them).
    msgs: BTreeSet<u32>,
    /// When its retransmission timer fires.
    deadline: Option<Nanos>,
    /// The earliest entry it has in the timer heap.
    armed: Option<Nanos>,
    /// Its transmissions in send order, for RACK-style loss detection: one log per priority
    /// class (`dscp_cutoffs`), since switch priority queues reorder packets of different
    /// classes on one path and a later short message's ACK says nothing of a long one.
    log: [SendLog; 8],
}

/// How much state the stack holds (for tests of its bounds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Incomplete messages in reassembly.
    pub reassembly_messages: usize,
    /// Their bytes.
    pub reassembly_bytes: usize,
    /// Completed ids remembered.
    pub remembered_ids: usize,
    /// Outstanding messages.
    pub outstanding: usize,
    /// ACKs waiting.
    pub acks_queued: usize,
    /// Events waiting.
    pub events_queued: usize,
    /// Messages waiting in endpoint queues.
    pub queued_messages: usize,
    /// (pathlet, TC) windows.
    pub pathlets: usize,
    /// Interned paths.
    pub paths: usize,
    /// Destinations.
    pub destinations: usize,
    /// Timer heap entries.
    pub timers: usize,
}

/// The MTP transport.
#[derive(Debug)]
pub struct MtpStack {
    cfg: StackConfig,
    mss: usize,
    counters: StackCounters,
    neighbors: HashMap<Ipv4Addr, EthernetAddress>,
    endpoints: HashMap<EndpointId, Endpoint>,
    ports: HashMap<u16, EndpointId>,
    next_ep: u32,
    next_ephemeral: u16,
    out: HashMap<u32, OutMessage>,
    next_msg_id: u32,
    dests: HashMap<Ipv4Addr, Dest>,
    sched: Scheduler,
    timers: BinaryHeap<Reverse<(Nanos, Ipv4Addr)>>,
    cc: Cc,
    rx: Reassembly,
    acks: VecDeque<PendingAck>,
    events: VecDeque<Event>,
    scan: Vec<u32>,
    /// When the local line has sent everything handed to it (`link_bps` pacing).
    line_free_at: Nanos,
    /// When paced data may leave (a deadline `poll_timeout` reports).
    pace_at: Option<Nanos>,
    /// The last scan for data found nothing that may leave; nothing changed since (a frame,
    /// a timeout or a call clears it). The engine polls every loop iteration: a blocked
    /// window then costs nothing, not a scan of the outstanding messages (issue 17).
    tx_blocked: bool,
    /// Data packets sent by SRPT since the oldest message last had its turn (`srpt_aging`).
    since_aged: u32,
}

impl MtpStack {
    /// A stack with `cfg`, or why `cfg` is refused.
    pub fn new(cfg: StackConfig) -> Result<MtpStack, ConfigError> {
        cfg.validate()?;
        let mss = cfg.payload_per_packet();
        Ok(MtpStack {
            mss,
            counters: StackCounters::default(),
            neighbors: HashMap::new(),
            endpoints: HashMap::new(),
            ports: HashMap::new(),
            next_ep: 1,
            next_ephemeral: EPHEMERAL_FIRST,
            out: HashMap::new(),
            next_msg_id: 1,
            dests: HashMap::new(),
            sched: Scheduler::default(),
            line_free_at: 0,
            pace_at: None,
            tx_blocked: false,
            since_aged: 0,
            timers: BinaryHeap::new(),
            cc: Cc::new(
                cfg.cc,
                mss as u64,
                cfg.initial_window,
                cfg.max_pathlets,
                cfg.max_paths,
                cfg.max_exclude,
            ),
            rx: Reassembly::new(
                cfg.reassembly_bytes,
                cfg.reassembly_messages,
                cfg.completed_ids,
                cfg.max_message_len,
            ),
            acks: VecDeque::new(),
            events: VecDeque::new(),
            scan: Vec::with_capacity(cfg.sched_scan),
            cfg,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &StackConfig {
        &self.cfg
    }

    /// Payload bytes per data packet.
    pub fn mss(&self) -> usize {
        self.mss
    }

    /// Sets the next hop's MAC for `ip`.
    pub fn set_neighbor(&mut self, ip: Ipv4Addr, mac: EthernetAddress) {
        self.tx_blocked = false;
        self.neighbors.insert(ip, mac);
    }

    /// Binds `port` (0: an ephemeral one) for an application.
    pub fn bind(&mut self, port: u16) -> Result<EndpointId, BindError> {
        if self.endpoints.len() >= self.cfg.max_endpoints {
            return Err(BindError::TooMany);
        }
        let port = if port == 0 {
            let span = u16::MAX - EPHEMERAL_FIRST + 1;
            let found = (0..span)
                .map(|i| EPHEMERAL_FIRST + (self.next_ephemeral - EPHEMERAL_FIRST + i) % span)
                .find(|p| !self.ports.contains_key(p))
                .ok_or(BindError::NoEphemeral)?;
            self.next_ephemeral = if found == u16::MAX {
                EPHEMERAL_FIRST
            } else {
                found + 1
            };
            found
        } else if self.ports.contains_key(&port) {
            return Err(BindError::InUse(port));
        } else {
            port
        };
        let ep = EndpointId(self.next_ep);
        self.next_ep = self.next_ep.wrapping_add(1);
        self.ports.insert(port, ep);
        self.endpoints.insert(
            ep,
            Endpoint {
                port,
                queue: VecDeque::new(),
            },
        );
        Ok(ep)
    }

    /// The port `ep` is bound to.
    pub fn local_port(&self, ep: EndpointId) -> Option<u16> {
        self.endpoints.get(&ep).map(|e| e.port)
    }

    /// Unbinds `ep`: its queued messages go, its outstanding messages fail.
    pub fn unbind(&mut self, ep: EndpointId) {
        self.tx_blocked = false;
        let Some(e) = self.endpoints.remove(&ep) else {
            return;
        };
        self.ports.remove(&e.port);
        let ids: Vec<u32> = self
            .out
            .iter()
            .filter(|(_, m)| m.ep == ep)
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            self.fail(id, FailReason::Unbound);
        }
    }

    /// Queues a message of `data` to `dst`; returns its id.
    pub fn send_message(
        &mut self,
        now: Nanos,
        ep: EndpointId,
        dst: SocketAddrV4,
        data: &[u8],
        opts: SendOptions,
    ) -> Result<u32, SendError> {
        if data.len() > self.cfg.max_message_len as usize {
            return Err(SendError::TooLong(data.len()));
        }
        self.send_message_owned(now, ep, dst, data.to_vec(), opts)
    }

    /// [`MtpStack::send_message`] of bytes the caller already copied out (the engine reads
    /// them from an application's memory): kept as they are, not copied again.
    pub fn send_message_owned(
        &mut self,
        now: Nanos,
        ep: EndpointId,
        dst: SocketAddrV4,
        data: Vec<u8>,
        opts: SendOptions,
    ) -> Result<u32, SendError> {
        let _ = now;
        self.tx_blocked = false;
        let src_port = self
            .endpoints
            .get(&ep)
            .map(|e| e.port)
            .ok_or(SendError::UnknownEndpoint)?;
        if data.len() > self.cfg.max_message_len as usize {
            return Err(SendError::TooLong(data.len()));
        }
        if self.out.len() >= self.cfg.max_outstanding {
            return Err(SendError::TooManyOutstanding);
        }
        let ip = *dst.ip();
        if dst.port() == 0 || ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() {
            return Err(SendError::BadDestination);
        }
        self.ensure_dest(ip)?;
        // Unique among outstanding messages: at most max_outstanding ids are taken.
        while self.out.contains_key(&self.next_msg_id) {
            self.next_msg_id = self.next_msg_id.wrapping_add(1);
        }
        let id = self.next_msg_id;
        self.next_msg_id = self.next_msg_id.wrapping_add(1);
        let pkts = OutMessage::packets_for(data.len(), self.mss);
        let msg = OutMessage {
            ep,
            src_port,
            dst,
            id,
            priority: opts.priority,
            tc: opts.tc,
            data,
            mss: self.mss,
            pkt: vec![PktState::default(); pkts],
            acked: 0,
            acked_prefix: 0,
            next_new: 0,
            lost_scan: 0,
            retx: VecDeque::new(),
            route: None,
            timeouts: 0,
            charge: None,
            charged_bytes: 0,
            learned: None,
        };
        self.sched
            .update(id, msg.priority, msg.remaining(), msg.wants_to_send());
        self.out.insert(id, msg);
        if let Some(d) = self.dests.get_mut(&ip) {
            d.msgs.insert(id);
        }
        Ok(id)
    }

    fn ensure_dest(&mut self, ip: Ipv4Addr) -> Result<(), SendError> {
        if self.dests.contains_key(&ip) {
            return Ok(());
        }
        if self.dests.len() >= self.cfg.max_destinations {
            // Forget an idle destination (only when the table is full).
            let idle = self
                .dests
                .iter()
                .find(|(_, d)| d.msgs.is_empty() && d.paths.inflight == 0)
                .map(|(&ip, _)| ip)
                .ok_or(SendError::TooManyDestinations)?;
            if let Some(mut d) = self.dests.remove(&idle) {
                d.paths.clear(&mut self.cc.paths);
            }
        }
        let c = &self.cfg;
        self.dests.insert(
            ip,
            Dest {
                rtt: RttEstimator::new(c.rto_initial, c.rto_min, c.rto_max),
                paths: DestPaths::default(),
                msgs: BTreeSet::new(),
                deadline: None,
                armed: None,
                log: Default::default(),
            },
        );
        Ok(())
    }

    /// A whole message received on `ep`, if one waits.
    pub fn recv_message(&mut self, ep: EndpointId) -> Option<Message> {
        self.endpoints.get_mut(&ep)?.queue.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn push_event(&mut self, e: Event) {
        if self.events.len() >= self.cfg.event_queue {
            self.counters.event_queue_full += 1;
            return;
        }
        self.events.push_back(e);
    }

    /// What it did.
    pub fn counters(&self) -> &StackCounters {
        &self.counters
    }

    /// The per-(pathlet, TC) windows, in key order.
    pub fn pathlets(&self) -> Vec<(PathletTc, Window)> {
        let mut v: Vec<_> = self.cc.windows.iter().map(|(k, w)| (*k, *w)).collect();
        v.sort_by_key(|(k, _)| *k);
        v
    }

    /// The smoothed RTT to `ip`, if sampled.
    pub fn srtt(&self, ip: Ipv4Addr) -> Option<Nanos> {
        self.dests.get(&ip).and_then(|d| d.rtt.srtt)
    }

    /// How much state it holds.
    pub fn usage(&self) -> Usage {
        Usage {
            reassembly_messages: self.rx.messages(),
            reassembly_bytes: self.rx.bytes(),
            remembered_ids: self.rx.remembered(),
            outstanding: self.out.len(),
            acks_queued: self.acks.len(),
            events_queued: self.events.len(),
            queued_messages: self.endpoints.values().map(|e| e.queue.len()).sum(),
            pathlets: self.cc.windows.len(),
            paths: self.cc.paths.len(),
            destinations: self.dests.len(),
            timers: self.timers.len(),
        }
    }

    /// Removes message `id` and reports it failed.
    fn fail(&mut self, id: u32, reason: FailReason) {
        let Some(msg) = self.remove_message(id) else {
            return;
        };
        self.counters.messages_failed += 1;
        self.push_event(Event::Failed {
            ep: msg.ep,
            msg_id: id,
            reason,
        });
    }

    /// Takes message `id` out of every table, releasing what its packets hold.
    fn remove_message(&mut self, id: u32) -> Option<OutMessage> {
        let mut msg = self.out.remove(&id)?;
        self.sched.remove(id);
        let ip = *msg.dst.ip();
        if let Some(d) = self.dests.get_mut(&ip) {
            d.msgs.remove(&id);
            msg.release_all(&mut self.cc, &mut d.paths);
        }
        Some(msg)
    }
}
