//! MTP in the simulator: [`MtpHost`], the sans-IO `MtpStack` as a [`sluice_sim::Host`]
//! (virtual time converted to the stack's nanoseconds; neighbours set statically), and
//! [`MtpMessages`], the experiments' message driver: it sends messages (holding back what
//! the stack will not take yet), receives them whole and records each one's completion
//! time, from the moment it was queued until the receiver had all of it.

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use sluice_mtp::stack::{EndpointId, Event, MtpStack, Nanos, SendError, SendOptions, StackConfig};
use sluice_sim::{Host, HostsView, Instant, NodeId, Sim};

use crate::error::ExperimentError;
use crate::fabric::host_addr;

/// The port every MTP host binds.
pub const PORT: u16 = 7100;

/// An MTP stack as a simulated host, bound to [`PORT`].
pub struct MtpHost {
    /// The transport.
    pub stack: MtpStack,
    /// Its one endpoint.
    pub ep: EndpointId,
}

impl MtpHost {
    /// Host `i` of `n` ([`host_addr`]), every other host a static neighbour; `tune` edits the
    /// configuration first.
    pub fn new(
        i: usize,
        n: usize,
        tune: impl FnOnce(&mut StackConfig),
    ) -> Result<MtpHost, ExperimentError> {
        let (mac, ip) = host_addr(i);
        let mut cfg = StackConfig::new(mac, ip);
        // Microsecond RTTs (the same floor as the TCP side's 1 ms would idle MTP as long).
        cfg.rto_min = 1_000_000;
        cfg.rto_initial = 5_000_000;
        // The simulator's links serialize a frame's bytes only (no preamble or gap): pacing
        // that counted 20 more a frame would idle the link 6 % of the time for 300-byte frames.
        cfg.line_frame_overhead = 0;
        tune(&mut cfg);
        let mut stack =
            MtpStack::new(cfg).map_err(|e| ExperimentError::Usage(format!("MTP config: {e}")))?;
        for j in (0..n).filter(|&j| j != i) {
            let (m, a) = host_addr(j);
            stack.set_neighbor(a, m);
        }
        let ep = stack
            .bind(PORT)
            .map_err(|e| ExperimentError::Workload(format!("MTP bind: {e}")))?;
        Ok(MtpHost { stack, ep })
    }
}

/// Virtual time as the stack's nanoseconds.
fn nanos(t: Instant) -> Nanos {
    t.as_nanos()
}

impl Host for MtpHost {
    fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        self.stack.handle_frame(nanos(now), frame)
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.stack.poll_transmit(nanos(now), buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.stack.poll_timeout().map(Instant::from_nanos)
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.stack.handle_timeout(nanos(now))
    }
}

/// A message the driver was asked to send.
#[derive(Clone, Copy, Debug)]
struct Request {
    dst: usize,
    bytes: u64,
    tag: u32,
    tc: u8,
    start: Instant,
}

/// A message received whole.
#[derive(Clone, Copy, Debug)]
pub struct MsgDone {
    /// Sending host (index).
    pub src: usize,
    /// Receiving host.
    pub dst: usize,
    /// Its size.
    pub bytes: u64,
    /// The caller's tag (a size bucket, a tenant).
    pub tag: u32,
    /// Queued to received.
    pub fct: Duration,
}

/// Messages between the MTP hosts of one simulation.
pub struct MtpMessages {
    nodes: Vec<NodeId>,
    host_of: HashMap<NodeId, usize>,
    by_ip: HashMap<Ipv4Addr, usize>,
    ips: Vec<Ipv4Addr>,
    /// (sending host, message id) to its request.
    in_flight: HashMap<(usize, u32), Request>,
    /// Per sending host: requests the stack did not take yet (too many outstanding).
    held: Vec<VecDeque<Request>>,
    /// Per sending host: messages queued and not yet received.
    pending: Vec<usize>,
    /// Bytes received whole, per receiving host.
    pub received: Vec<u64>,
    /// Finished messages.
    pub done: Vec<MsgDone>,
    payload: Vec<u8>,
    error: Option<String>,
}

impl MtpMessages {
    /// A driver for hosts `nodes` (host `i` has address [`host_addr`]`(i)`), for messages
    /// of at most `max_bytes`.
    pub fn new(nodes: &[NodeId], max_bytes: usize) -> MtpMessages {
        let ips: Vec<Ipv4Addr> = (0..nodes.len()).map(|i| host_addr(i).1).collect();
        MtpMessages {
            nodes: nodes.to_vec(),
            host_of: nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect(),
            by_ip: ips.iter().enumerate().map(|(i, &a)| (a, i)).collect(),
            ips,
            in_flight: HashMap::new(),
            held: vec![VecDeque::new(); nodes.len()],
            pending: vec![0; nodes.len()],
            received: vec![0; nodes.len()],
            done: Vec::new(),
            payload: vec![0x5a; max_bytes],
            error: None,
        }
    }

    /// The first failure, if any.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Messages sent or held and not yet received.
    pub fn outstanding(&self) -> usize {
        self.in_flight.len() + self.held.iter().map(VecDeque::len).sum::<usize>()
    }

    /// Messages from host `src` not yet received.
    pub fn outstanding_from(&self, src: usize) -> usize {
        self.pending.get(src).copied().unwrap_or(0)
    }

    /// Queues a message of `bytes` from host `src` to host `dst` in class `tc` now.
    pub fn send(
        &mut self,
        sim: &mut Sim<MtpHost>,
        src: usize,
        dst: usize,
        bytes: u64,
        tc: u8,
        tag: u32,
    ) -> Result<(), ExperimentError> {
        let now = sim.now();
        let node = *self.nodes.get(src).ok_or_else(|| no_host(src))?;
        let host = sim.host_mut(node).ok_or_else(|| no_host(src))?;
        self.queue(now, src, host, dst, bytes, tc, tag)
    }

    /// [`MtpMessages::send`] from inside a run (the application closure's hosts).
    #[allow(clippy::too_many_arguments)]
    pub fn send_within(
        &mut self,
        now: Instant,
        hosts: &mut HostsView<'_, MtpHost>,
        src: usize,
        dst: usize,
        bytes: u64,
        tc: u8,
        tag: u32,
    ) -> Result<(), ExperimentError> {
        let node = *self.nodes.get(src).ok_or_else(|| no_host(src))?;
        let host = hosts.get_mut(node).ok_or_else(|| no_host(src))?;
        self.queue(now, src, host, dst, bytes, tc, tag)
    }

    #[allow(clippy::too_many_arguments)]
    fn queue(
        &mut self,
        now: Instant,
        src: usize,
        host: &mut MtpHost,
        dst: usize,
        bytes: u64,
        tc: u8,
        tag: u32,
    ) -> Result<(), ExperimentError> {
        if bytes as usize > self.payload.len() || dst >= self.ips.len() {
            return Err(ExperimentError::Usage(format!(
                "a message of {bytes} bytes to host {dst}"
            )));
        }
        self.held[src].push_back(Request {
            dst,
            bytes,
            tag,
            tc,
            start: now,
        });
        self.pending[src] += 1;
        self.release(src, host, now);
        Ok(())
    }

    /// Hands host `src`'s held requests to its stack, oldest first, while it takes them.
    fn release(&mut self, src: usize, host: &mut MtpHost, now: Instant) {
        while let Some(&req) = self.held[src].front() {
            let dst = SocketAddrV4::new(self.ips[req.dst], PORT);
            let data = &self.payload[..req.bytes as usize];
            let opts = SendOptions {
                priority: 0,
                tc: req.tc,
            };
            match host
                .stack
                .send_message(nanos(now), host.ep, dst, data, opts)
            {
                Ok(id) => {
                    self.held[src].pop_front();
                    self.in_flight.insert((src, id), req);
                }
                Err(SendError::TooManyOutstanding) => return,
                Err(e) => {
                    self.error.get_or_insert(format!("send_message: {e}"));
                    return;
                }
            }
        }
    }

    /// Handles the events of every host a frame or timer reached.
    pub fn step(&mut self, now: Instant, hosts: &mut HostsView<'_, MtpHost>) {
        hosts.for_each_touched(|node, host| self.step_host(now, node, host));
    }

    fn step_host(&mut self, now: Instant, node: NodeId, host: &mut MtpHost) {
        let Some(&h) = self.host_of.get(&node) else {
            return;
        };
        let mut freed = false;
        while let Some(event) = host.stack.poll_event() {
            match event {
                Event::Readable { ep } => {
                    while let Some(m) = host.stack.recv_message(ep) {
                        self.received[h] += m.data.len() as u64;
                        let src = self.by_ip.get(m.src.ip()).copied();
                        let req = src.and_then(|s| self.in_flight.remove(&(s, m.msg_id)));
                        match (src, req) {
                            (Some(src), Some(req)) if req.bytes == m.data.len() as u64 => {
                                self.pending[src] -= 1;
                                self.done.push(MsgDone {
                                    src,
                                    dst: h,
                                    bytes: req.bytes,
                                    tag: req.tag,
                                    fct: now.saturating_since(req.start),
                                })
                            }
                            _ => {
                                self.error.get_or_insert(format!(
                                    "host {h} received message {} from {} that nobody sent \
                                     (or of the wrong size)",
                                    m.msg_id, m.src
                                ));
                            }
                        }
                    }
                }
                Event::Delivered { .. } => freed = true,
                Event::Failed { msg_id, reason, .. } => {
                    self.error
                        .get_or_insert(format!("host {h}: message {msg_id} failed: {reason}"));
                }
            }
        }
        if freed {
            self.release(h, host, now);
        }
    }
}

fn no_host(i: usize) -> ExperimentError {
    ExperimentError::Sim(format!("no host {i}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mtp::paths::{self, Hop, PathsSpec};

    #[test]
    fn messages_the_stack_will_not_take_yet_are_held_then_all_arrive_whole_and_timed() {
        let hop = Hop {
            bps: 10_000_000_000,
            delay: Duration::from_micros(1),
        };
        let spec = PathsSpec {
            host: hop,
            paths: [hop, hop],
            queue_packets: 128,
            ecn_k_bytes: None,
        };
        let mut sim: Sim<MtpHost> = Sim::new(5);
        // At most 2 messages outstanding in the sender's stack: the rest wait in the driver.
        let topo = paths::build(&mut sim, &spec, |i| {
            MtpHost::new(i, 2, |c| c.max_outstanding = 2)
        })
        .unwrap();
        let mut msgs = MtpMessages::new(&[topo.sender, topo.receiver], 100_000);
        let sizes = [0u64, 1, 1396, 1397, 50_000, 100_000, 7, 3000];
        for (i, &b) in sizes.iter().enumerate() {
            msgs.send(&mut sim, 0, 1, b, 0, i as u32).unwrap();
        }
        assert_eq!(msgs.outstanding_from(0), sizes.len());
        assert_eq!(msgs.in_flight.len(), 2, "the stack took two");
        assert!(
            msgs.send(&mut sim, 0, 1, 100_001, 0, 0).is_err(),
            "too long"
        );
        let deadline = sim.now() + Duration::from_millis(50);
        sim.run_until(deadline, |now, hosts| {
            msgs.step(now, hosts);
            msgs.outstanding() == 0
        })
        .unwrap();
        assert_eq!(msgs.error(), None);
        assert_eq!(msgs.outstanding_from(0), 0);
        let mut got: Vec<(u32, u64)> = msgs.done.iter().map(|d| (d.tag, d.bytes)).collect();
        got.sort_unstable();
        let want: Vec<(u32, u64)> = sizes
            .iter()
            .enumerate()
            .map(|(i, &b)| (i as u32, b))
            .collect();
        assert_eq!(got, want);
        assert_eq!(msgs.received[1], sizes.iter().sum::<u64>());
        // 100 KB at 10 Gbit/s takes at least 80 us; every message took at least a one-way
        // trip (3 links of 1 us).
        let big = msgs.done.iter().find(|d| d.bytes == 100_000).unwrap();
        assert!(big.fct >= Duration::from_micros(80), "{:?}", big.fct);
        assert!(msgs
            .done
            .iter()
            .all(|d| d.fct >= Duration::from_micros(3) && d.src == 0 && d.dst == 1));
    }
}
