//! Messages over persistent connections in the simulator, each timed from the moment it is
//! queued at its sender until its last byte is read: flow completion times (FCT).
//!
//! A channel is one connection from a source host to a destination host; its messages go in
//! FIFO order. The workload is driven by the core's readiness events, so a step costs what
//! happened, not the number of channels.

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use sluice_sim::{Host, HostsView, NodeId, Sim};
use sluice_tcp::{ConnId, Error, Event, Instant, ListenerId, Stack};

use crate::error::ExperimentError;

/// The port every host listens on for channels.
const PORT: u16 = 7000;

/// A simulated host that carries a TCP core: the core itself, or the core behind a NIC
/// that edits its frames (the MTP experiments mark tenants' DSCP so).
pub trait TcpHost: Host {
    /// The core, mutably.
    fn tcp(&mut self) -> &mut Stack;
    /// The core.
    fn tcp_ref(&self) -> &Stack;
}

impl TcpHost for Stack {
    fn tcp(&mut self) -> &mut Stack {
        self
    }
    fn tcp_ref(&self) -> &Stack {
        self
    }
}

/// Which set of flows a message is reported with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Latency-sensitive (partition-aggregate answers).
    Foreground,
    /// Bandwidth-heavy background transfers.
    Background,
}

#[derive(Clone, Copy, Debug)]
struct Message {
    bytes: u64,
    start: Instant,
    class: Class,
}

/// One direction of a channel as a host sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Tx,
    Rx,
}

struct Channel {
    src: usize,
    dst: usize,
    tx: Option<ConnId>,
    rx: Option<ConnId>,
    /// Messages not yet wholly read, oldest first.
    queue: VecDeque<Message>,
    /// Bytes queued that the source's core has not taken yet.
    to_send: u64,
    /// Bytes of the oldest message already read.
    head_read: u64,
    /// Bytes read so far.
    read: u64,
}

/// A finished message.
#[derive(Clone, Copy, Debug)]
pub struct Completion {
    /// The channel it went on.
    pub channel: usize,
    /// Its class.
    pub class: Class,
    /// Its size.
    pub bytes: u64,
    /// Queued to read.
    pub fct: Duration,
}

/// Channels between hosts of one simulation, and the completions so far.
pub struct Flows {
    channels: Vec<Channel>,
    /// Host index by node id.
    host_of: HashMap<NodeId, usize>,
    nodes: Vec<NodeId>,
    ips: Vec<Ipv4Addr>,
    listeners: Vec<ListenerId>,
    /// Per host: connection slot to (channel, end).
    by_slot: Vec<HashMap<u32, (usize, End)>>,
    /// A channel's source address, to match the accepted end.
    by_source: HashMap<SocketAddrV4, usize>,
    /// Finished messages.
    pub done: Vec<Completion>,
    error: Option<String>,
    buf: Vec<u8>,
}

impl Flows {
    /// Listens on every host of `nodes` (addresses `ips`).
    pub fn new<H: TcpHost>(
        sim: &mut Sim<H>,
        nodes: &[NodeId],
        ips: &[Ipv4Addr],
    ) -> Result<Self, ExperimentError> {
        let mut listeners = Vec::with_capacity(nodes.len());
        for &n in nodes {
            let stack = sim
                .host_mut(n)
                .ok_or_else(|| ExperimentError::Sim(format!("no host {}", n.0)))?
                .tcp();
            let backlog = stack.config().max_accept_queue;
            let l = stack
                .listen(PORT, backlog)
                .map_err(|e| ExperimentError::Workload(format!("listen: {e}")))?;
            listeners.push(l);
        }
        Ok(Flows {
            channels: Vec::new(),
            host_of: nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect(),
            nodes: nodes.to_vec(),
            ips: ips.to_vec(),
            listeners,
            by_slot: vec![HashMap::new(); nodes.len()],
            by_source: HashMap::new(),
            done: Vec::new(),
            error: None,
            buf: vec![0; 64 * 1024],
        })
    }

    /// Opens a channel from host `src` to host `dst` (indices); returns its index.
    pub fn open<H: TcpHost>(
        &mut self,
        sim: &mut Sim<H>,
        src: usize,
        dst: usize,
    ) -> Result<usize, ExperimentError> {
        let now = sim.now();
        let (Some(&node), Some(&ip)) = (self.nodes.get(src), self.ips.get(dst)) else {
            return Err(ExperimentError::Usage(format!("no host {src} or {dst}")));
        };
        let stack = sim
            .host_mut(node)
            .ok_or_else(|| ExperimentError::Sim(format!("no host {}", node.0)))?
            .tcp();
        let conn = stack
            .connect(now, ip, PORT)
            .map_err(|e| ExperimentError::Workload(format!("connect: {e}")))?;
        let (local, _) = stack
            .endpoints(conn)
            .map_err(|e| ExperimentError::Workload(format!("endpoints: {e}")))?;
        let index = self.channels.len();
        self.by_source.insert(local, index);
        self.by_slot[src].insert(conn.slot(), (index, End::Tx));
        self.channels.push(Channel {
            src,
            dst,
            tx: Some(conn),
            rx: None,
            queue: VecDeque::new(),
            to_send: 0,
            head_read: 0,
            read: 0,
        });
        Ok(index)
    }

    /// Whether every channel is established at both ends.
    pub fn all_open(&self) -> bool {
        self.channels.iter().all(|c| c.rx.is_some())
    }

    /// Whether every queued message has been read.
    pub fn idle(&self) -> bool {
        self.channels.iter().all(|c| c.queue.is_empty())
    }

    /// Messages queued and not yet read.
    pub fn outstanding(&self) -> usize {
        self.channels.iter().map(|c| c.queue.len()).sum()
    }

    /// The first failure, if any.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// The source and destination hosts of channel `index`.
    pub fn ends(&self, index: usize) -> Option<(usize, usize)> {
        self.channels.get(index).map(|c| (c.src, c.dst))
    }

    /// Bytes read so far on channel `index` (0 for an unknown channel).
    pub fn bytes_read(&self, index: usize) -> u64 {
        self.channels.get(index).map_or(0, |c| c.read)
    }

    /// Messages queued on channel `index` and not yet wholly read.
    pub fn pending(&self, index: usize) -> usize {
        self.channels.get(index).map_or(0, |c| c.queue.len())
    }

    /// Queues a message of `bytes` on channel `index` at `now`, and sends what fits.
    pub fn send<H: TcpHost>(
        &mut self,
        sim: &mut Sim<H>,
        index: usize,
        bytes: u64,
        class: Class,
    ) -> Result<(), ExperimentError> {
        let now = sim.now();
        let Some(ch) = self.channels.get_mut(index) else {
            return Err(ExperimentError::Usage(format!("no channel {index}")));
        };
        ch.queue.push_back(Message {
            bytes,
            start: now,
            class,
        });
        ch.to_send += bytes;
        let node = self.nodes[ch.src];
        if let Some(host) = sim.host_mut(node) {
            pump_send(ch, host.tcp(), &self.buf, &mut self.error);
        }
        Ok(())
    }

    /// Handles every host's readiness events: accepts channels, sends, reads, times.
    pub fn step<H: TcpHost>(&mut self, now: Instant, hosts: &mut HostsView<'_, H>) {
        // Readiness changes only where a frame or a timer arrived (our own calls are
        // handled as we make them), so only those hosts are visited.
        hosts.for_each_touched(|node, host| self.step_host(now, node, host.tcp()));
    }

    /// Drains one host's readiness events.
    fn step_host(&mut self, now: Instant, node: NodeId, stack: &mut Stack) {
        let Some(&h) = self.host_of.get(&node) else {
            return;
        };
        while let Some(event) = stack.poll_event() {
            match event {
                Event::Acceptable(l) if l == self.listeners[h] => self.accept_all(h, stack),
                Event::Acceptable(_) => {}
                Event::Conn(conn, ready) => {
                    let Some(&(index, end)) = self.by_slot[h].get(&conn.slot()) else {
                        continue;
                    };
                    let ch = &mut self.channels[index];
                    if ready.error() && self.error.is_none() {
                        self.error = Some(format!(
                            "channel {index} ({} -> {}) failed: {:?}",
                            ch.src,
                            ch.dst,
                            stack.error(conn)
                        ));
                    }
                    match end {
                        End::Tx => pump_send(ch, stack, &self.buf, &mut self.error),
                        End::Rx => pump_recv(
                            index,
                            ch,
                            stack,
                            now,
                            &mut self.buf,
                            &mut self.done,
                            &mut self.error,
                        ),
                    }
                }
            }
        }
    }

    fn accept_all(&mut self, h: usize, stack: &mut Stack) {
        loop {
            match stack.accept(self.listeners[h]) {
                Ok(conn) => {
                    let index = stack
                        .endpoints(conn)
                        .ok()
                        .and_then(|(_, peer)| self.by_source.get(&peer).copied());
                    match index {
                        Some(i) => {
                            self.channels[i].rx = Some(conn);
                            self.by_slot[h].insert(conn.slot(), (i, End::Rx));
                        }
                        None => {
                            let _ = stack.abort(conn);
                        }
                    }
                }
                Err(Error::WouldBlock) => return,
                Err(e) => {
                    self.error.get_or_insert(format!("accept: {e}"));
                    return;
                }
            }
        }
    }
}

/// Hands the source's core what it will take of the queued bytes.
fn pump_send(ch: &mut Channel, stack: &mut Stack, buf: &[u8], error: &mut Option<String>) {
    let Some(tx) = ch.tx else { return };
    while ch.to_send > 0 {
        let n = (ch.to_send as usize).min(buf.len());
        match stack.send(tx, &buf[..n]) {
            Ok(0) | Err(Error::WouldBlock) => return,
            Ok(sent) => ch.to_send -= sent as u64,
            Err(e) => {
                error.get_or_insert(format!("send: {e}"));
                return;
            }
        }
    }
}

/// Reads what arrived and completes the messages it finishes.
fn pump_recv(
    index: usize,
    ch: &mut Channel,
    stack: &mut Stack,
    now: Instant,
    buf: &mut [u8],
    done: &mut Vec<Completion>,
    error: &mut Option<String>,
) {
    let Some(rx) = ch.rx else { return };
    loop {
        match stack.recv(rx, buf) {
            Ok(0) | Err(Error::WouldBlock) => return,
            Ok(mut n) => {
                ch.read += n as u64;
                while n > 0 {
                    let Some(head) = ch.queue.front() else {
                        error.get_or_insert(format!(
                            "channel {} -> {} read {n} bytes nobody sent",
                            ch.src, ch.dst
                        ));
                        return;
                    };
                    let take = (head.bytes - ch.head_read).min(n as u64);
                    ch.head_read += take;
                    n -= take as usize;
                    if ch.head_read == head.bytes {
                        done.push(Completion {
                            channel: index,
                            class: head.class,
                            bytes: head.bytes,
                            fct: now.saturating_since(head.start),
                        });
                        ch.queue.pop_front();
                        ch.head_read = 0;
                    }
                }
            }
            Err(e) => {
                error.get_or_insert(format!("recv: {e}"));
                return;
            }
        }
    }
}

/// The `q`-quantile (0..=1) of `values` (sorted in place), or NaN if empty.
pub fn quantile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let rank = (q * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}
