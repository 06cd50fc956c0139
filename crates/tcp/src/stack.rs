//! [`Stack`]: one host's TCP core behind a sans-IO API. Hand it frames and the time; take
//! frames to send and its next deadline; call it for listen, connect, accept, send, recv,
//! shutdown and close. It reads no clock, starts no thread and makes no syscall.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use sluice_wire::tcp::SeqNumber;

use crate::buffer::{rx_limit, ConnBuffers, PayloadRing};
use crate::cc::Algorithm;
use crate::config::Config;
use crate::control::state::{ConnControl, ConnError, TcpState};
use crate::counters::Counters;
use crate::datapath::state::flags;
use crate::datapath::{DataPath, StateBytes};
use crate::error::{ConnectError, Error, ListenError};
use crate::events::bits;
use crate::handle::{ConnId, ListenerId};
use crate::host::{Listener, Stack};
use crate::invariant::InvariantViolation;
use crate::pressure::{send_limit, MemoryState};
use crate::reuseport::JoinRefused;
use crate::table::FourTuple;
use crate::time::Instant;
use crate::timer::Timer;

/// What became ready on a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Readiness(pub(crate) u8);

impl Readiness {
    /// The active open completed.
    pub fn connected(self) -> bool {
        self.0 & bits::CONNECTED != 0
    }
    /// Data or end-of-stream can be read.
    pub fn readable(self) -> bool {
        self.0 & bits::READABLE != 0
    }
    /// Send-buffer space is available.
    pub fn writable(self) -> bool {
        self.0 & bits::WRITABLE != 0
    }
    /// The connection failed; `recv`/`send` return the error.
    pub fn error(self) -> bool {
        self.0 & bits::ERROR != 0
    }
    /// The connection is fully closed.
    pub fn closed(self) -> bool {
        self.0 & bits::CLOSED != 0
    }
}

/// An event for the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A listener has connections to accept.
    Acceptable(ListenerId),
    /// A connection's readiness changed.
    Conn(ConnId, Readiness),
}

/// A snapshot of one connection, for tests, tools and the demo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnInfo {
    /// RFC 9293 state.
    pub state: TcpState,
    /// Oldest unacknowledged sequence number.
    pub snd_una: SeqNumber,
    /// Next sequence number to send.
    pub snd_nxt: SeqNumber,
    /// Highest sequence number sent.
    pub snd_max: SeqNumber,
    /// Next sequence number expected.
    pub rcv_nxt: SeqNumber,
    /// Peer's window.
    pub snd_wnd: u32,
    /// Congestion window.
    pub cwnd: u32,
    /// Smoothed RTT.
    pub srtt: Duration,
    /// Current RTO.
    pub rto: Duration,
    /// Out-of-order intervals held.
    pub ooo_intervals: u8,
    /// Effective MSS.
    pub mss: u16,
    /// Bytes readable now.
    pub readable: usize,
    /// Bytes the send buffer can take now.
    pub writable: usize,
    /// Bytes queued and not yet acknowledged.
    pub unacked: usize,
    /// Fast retransmits on this connection.
    pub fast_retransmits: u16,
    /// The congestion-control algorithm.
    pub congestion_control: Algorithm,
    /// Slow-start threshold (u32::MAX: none yet).
    pub ssthresh: u32,
    /// The rate the flow scheduler enforces, bits per second (0: unlimited): the fixed rate
    /// (`Stack::set_rate`), else the rate a rate-based policy programmed.
    pub rate_bps: u64,
    /// ECN was negotiated (RFC 3168).
    pub ecn: bool,
}

impl Stack {
    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Event and drop counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The earliest time [`Stack::handle_timeout`] has work to do, if any: a connection
    /// timer, or a rate-limited connection's turn in the flow scheduler's wheel.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut timer = self.timer_queue.next_deadline();
        for due in [self.teardown.next_due(), self.splice.next_due()]
            .into_iter()
            .flatten()
        {
            timer = Some(timer.map_or(due, |t| t.min(due)));
        }
        match self.dp.wheel.next_due_ns().map(Instant::from_nanos) {
            Some(due) => Some(timer.map_or(due, |t| t.min(due))),
            None => timer,
        }
    }

    /// Adds a static neighbor (no ARP needed to reach `ip`).
    pub fn add_neighbor(&mut self, ip: Ipv4Addr, mac: sluice_wire::EthernetAddress) {
        self.neighbors.learn(ip, mac, Instant::MAX);
    }

    /// The next hop's MAC for `ip`, if known: the core sends to every address directly
    /// (it has no gateway), so that is `ip`'s own entry. For other transports on the same
    /// device (the RDMA transport's peers).
    pub fn neighbor(&self, ip: Ipv4Addr) -> Option<sluice_wire::EthernetAddress> {
        self.neighbors.lookup(ip)
    }

    /// Sends an ARP request for `ip` unless one went out for it within the last second
    /// (the same rate as the core's own, RFC 1122 2.3.2.1); whether one went out. The
    /// answer is learned as any ARP reply is, and [`Stack::neighbor`] then has it.
    pub fn resolve_neighbor(&mut self, ip: Ipv4Addr, now: Instant) -> bool {
        if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() {
            return false;
        }
        self.request_neighbor(ip, now)
    }

    /// Connections in the table (any state).
    pub fn connection_count(&self) -> usize {
        self.table.len()
    }

    /// Capacity of the payload rings, (receive, send), over every slot: the open
    /// connections' and the initial-size rings freed slots keep for reuse, whether their
    /// storage is allocated now or not (see [`Stack::buffer_memory_allocated`]). Walks the
    /// slots: for statistics, not the data-path.
    pub fn buffer_memory(&self) -> (usize, usize) {
        self.bufs.iter().flatten().fold((0, 0), |(rx, tx), b| {
            (rx + b.rx.capacity() as usize, tx + b.tx.capacity() as usize)
        })
    }

    // ---- application API -------------------------------------------------------------

    /// Starts listening on `port` with an accept queue of `backlog` connections
    /// (capped by the configuration).
    pub fn listen(&mut self, port: u16, backlog: usize) -> Result<ListenerId, ListenError> {
        self.listen_with(port, backlog, None)
    }

    /// [`Stack::listen`] with the congestion-control algorithm its connections run (None:
    /// the configured default), chosen before any SYN is answered so that the SYN-ACK
    /// accepts ECN only if that algorithm wants it (RFC 3168 6.1.1), as a TCP_CONGESTION
    /// set on a listening socket does.
    pub fn listen_with(
        &mut self,
        port: u16,
        backlog: usize,
        algorithm: Option<Algorithm>,
    ) -> Result<ListenerId, ListenError> {
        self.listen_group(port, backlog, algorithm, false)
    }

    /// [`Stack::listen_with`] for a listener that shares `port` with the others created
    /// this way (SO_REUSEPORT): each SYN goes to one member, picked by a hash of its
    /// 4-tuple. AddrInUse if a listener without reuseport holds the port.
    pub fn listen_reuseport(
        &mut self,
        port: u16,
        backlog: usize,
        algorithm: Option<Algorithm>,
    ) -> Result<ListenerId, ListenError> {
        self.listen_group(port, backlog, algorithm, true)
    }

    fn listen_group(
        &mut self,
        port: u16,
        backlog: usize,
        algorithm: Option<Algorithm>,
        reuseport: bool,
    ) -> Result<ListenerId, ListenError> {
        if port == 0 {
            return Err(ListenError::InvalidArgument);
        }
        let index = self
            .listener_by_port
            .join(port, reuseport)
            .map_err(|e| match e {
                JoinRefused::InUse => ListenError::AddrInUse,
                JoinRefused::Full => ListenError::NoResources,
            })?;
        let index = usize::from(index);
        // No more connections can wait to be accepted than the table holds.
        let backlog = backlog.clamp(1, self.cfg.max_accept_queue.min(self.cfg.max_connections));
        self.listeners[index] = Some(Listener {
            port,
            backlog,
            accept: VecDeque::with_capacity(backlog),
            syn_pending: 0,
            cc_algorithm: algorithm.unwrap_or(self.cfg.congestion_control),
            generation: self.next_listener_generation,
        });
        let generation = self.next_listener_generation;
        self.next_listener_generation = generation.wrapping_add(1);
        Ok(ListenerId {
            index: index as u16,
            port,
            generation,
        })
    }

    /// Stops listening; connections not yet accepted are reset.
    pub fn unlisten(&mut self, id: ListenerId) -> Result<(), Error> {
        self.listener(id)?;
        self.listeners[id.index as usize] = None;
        // The other members of a reuseport group keep the port and take its new SYNs.
        self.listener_by_port.leave(id.port, id.index);
        // Every connection still tied to the listener, queued for accept or half-open, is
        // reset and freed (RFC 9293 3.10.4: CLOSE in LISTEN deletes the TCB). None may keep
        // the index: it would leak its slot, or land in the accept queue of the next
        // listener to take the index.
        for slot in 0..self.conns.len() as u32 {
            if self.conns[slot as usize].listener == Some(id.index) {
                self.conns[slot as usize].listener = None;
                self.abort_slot(slot, ConnError::Aborted);
            }
        }
        Ok(())
    }

    /// Chooses the congestion-control algorithm of the listener's connections from now on
    /// (those already past their SYN keep theirs). See [`Stack::listen_with`].
    pub fn set_listener_congestion_control(
        &mut self,
        id: ListenerId,
        algorithm: Algorithm,
    ) -> Result<(), Error> {
        self.listener(id)?;
        if let Some(Some(l)) = self.listeners.get_mut(id.index as usize) {
            l.cc_algorithm = algorithm;
        }
        Ok(())
    }

    fn listener(&self, id: ListenerId) -> Result<&Listener, Error> {
        match self.listeners.get(id.index as usize) {
            Some(Some(l)) if l.port == id.port && l.generation == id.generation => Ok(l),
            _ => Err(Error::InvalidHandle),
        }
    }

    /// Takes an established connection from a listener's accept queue.
    pub fn accept(&mut self, id: ListenerId) -> Result<ConnId, Error> {
        self.listener(id)?;
        loop {
            let listener = self.listeners[id.index as usize]
                .as_mut()
                .ok_or(Error::InvalidHandle)?;
            let slot = listener.accept.pop_front().ok_or(Error::WouldBlock)?;
            let conn = &mut self.conns[slot as usize];
            conn.listener = None;
            if conn.error.is_some() || conn.state == TcpState::Closed {
                // Reset while waiting to be accepted: nobody will ever see it.
                self.free_slot(slot);
                continue;
            }
            conn.app_owned = true;
            return Ok(ConnId {
                slot,
                generation: self.table.generation(slot),
            });
        }
    }

    /// Opens a connection to `ip:port` from an ephemeral port (RFC 9293 3.10.1, active OPEN).
    pub fn connect(
        &mut self,
        now: Instant,
        ip: Ipv4Addr,
        port: u16,
    ) -> Result<ConnId, ConnectError> {
        self.connect_with(now, ip, port, None)
    }

    /// [`Stack::connect`] with the connection's congestion-control algorithm chosen before
    /// its SYN is built (None: the configured default), so that the SYN asks for ECN only if
    /// that algorithm wants it (RFC 3168 6.1.1), as a TCP_CONGESTION set before connect does.
    pub fn connect_with(
        &mut self,
        now: Instant,
        ip: Ipv4Addr,
        port: u16,
        algorithm: Option<crate::Algorithm>,
    ) -> Result<ConnId, ConnectError> {
        self.now = now;
        if port == 0
            || ip == self.cfg.ip
            || ip.is_broadcast()
            || ip.is_unspecified()
            || ip.is_multicast()
        {
            return Err(ConnectError::InvalidArgument);
        }
        let (lo, hi) = self.cfg.ephemeral_ports;
        let span = (hi - lo) as u32 + 1;
        let mut found = None;
        for _ in 0..span {
            let candidate = self.next_port;
            self.next_port = if self.next_port >= hi {
                lo
            } else {
                self.next_port + 1
            };
            let tuple = FourTuple {
                remote_ip: ip,
                remote_port: port,
                local_port: candidate,
            };
            if self.listener_by_port.contains(candidate)
                || !self.steered_here(&tuple)
                || self.teardown_holds(&tuple)
                || self.splice_holds(&tuple)
            {
                continue;
            }
            if let Some(slot) = self.table.insert(&tuple) {
                found = Some((slot, tuple));
                break;
            }
            if self.table.free_slots() == 0 {
                break;
            }
        }
        let (slot, tuple) = found.ok_or(ConnectError::NoResources)?;
        self.open_slot(slot, tuple);
        self.conns[slot as usize].app_owned = true;
        if let Some(algorithm) = algorithm {
            // Not yet active: the policy is built with this algorithm at establishment.
            self.conns[slot as usize].cc_algorithm = algorithm;
        }
        self.start_active_open(slot);
        Ok(ConnId {
            slot,
            generation: self.table.generation(slot),
        })
    }

    /// Whether the multi-core engine's dispatcher steers `tuple`'s frames to this stack
    /// (always, for a stack that is the only flow group).
    #[inline]
    fn steered_here(&self, tuple: &FourTuple) -> bool {
        self.cfg.flow_group.is_none_or(|m| {
            m.groups.group_of(
                (self.cfg.ip, tuple.local_port),
                (tuple.remote_ip, tuple.remote_port),
            ) == m.index
        })
    }

    pub(crate) fn slot_of(&self, id: ConnId) -> Result<u32, Error> {
        if self.table.generation(id.slot) == id.generation
            && self
                .conns
                .get(id.slot as usize)
                .is_some_and(|c| c.app_owned)
        {
            Ok(id.slot)
        } else {
            Err(Error::InvalidHandle)
        }
    }

    /// Copies up to `data.len()` bytes into the send buffer. Returns how many were taken.
    pub fn send(&mut self, id: ConnId, data: &[u8]) -> Result<usize, Error> {
        let slot = self.slot_of(id)?;
        self.sendable(slot)?;
        // A connection sending from a caller's buffer takes its unacknowledged bytes in
        // first: from here on the core's ring is its send buffer (header_only.rs).
        self.internalize_tx(slot);
        let limit = self.tx_limit_of(slot);
        // Under memory pressure an empty ring keeps only the initial size.
        let pressured = self.slot_pressured(slot);
        let keep = if pressured {
            limit.min(self.cfg.tx_initial())
        } else {
            limit
        };
        let b = self.bufs[slot as usize]
            .as_mut()
            .ok_or(Error::InvalidHandle)?;
        let used = b.tx_used();
        if used == 0 && b.tx.capacity() as usize > keep {
            // Empty and above today's share: give the memory back (writes cycle through the
            // whole ring, so holding it would touch all of it).
            b.tx = PayloadRing::unallocated(pow2_floor(keep));
            self.counters.memory_rings_released += u64::from(pressured);
        }
        if (b.tx.capacity() as usize).min(limit) < used + data.len() {
            // Send-buffer autotuning: room for twice what the windows let fly, so the flight
            // can reach cwnd while the application refills (Linux tcp_sndbuf_expand).
            let ps = &self.dp.proto[slot as usize];
            let target = 2 * ps.cwnd.min(ps.snd_wnd) as usize;
            let grown = pow2_floor(target.next_power_of_two().min(limit));
            if grown > b.tx.capacity() as usize {
                if pressured {
                    self.counters.memory_growth_refused += 1;
                } else {
                    b.tx.grow(b.tx_head, used as u32, grown);
                    self.counters.tx_buffer_grown += 1;
                }
            }
        }
        // A ring grown while fewer connections shared the memory is used only up to today's
        // share, so early connections keep no standing advantage over later ones.
        let n = b.tx_room(limit).min(data.len());
        if n == 0 {
            b.want_writable = true;
            return Err(Error::WouldBlock);
        }
        if n < data.len() {
            b.want_writable = true;
        }
        self.tx_pool.attach(&mut b.tx);
        b.tx.write(b.tx_tail, &data[..n]);
        self.tx_touch.staging += n as u64;
        b.tx_tail += n;
        // Doorbell (FlexTOE HC workflow): the protocol stage learns of the new data.
        self.dp.proto[slot as usize].tx_end = b.tx_tail;
        self.dp.ready.push(slot);
        self.charge_delta(slot, n as i64);
        Ok(n)
    }

    /// Whether the connection in `slot` may queue data now: open for sending (RFC 9293
    /// 3.10.2 SEND in ESTABLISHED or CLOSE-WAIT), no FIN queued; WouldBlock while the
    /// handshake runs.
    pub(crate) fn sendable(&self, slot: u32) -> Result<(), Error> {
        let conn = &self.conns[slot as usize];
        if let Some(e) = conn.error {
            return Err(Error::Connection(e));
        }
        if !matches!(conn.state, TcpState::Established | TcpState::CloseWait)
            || self.dp.proto[slot as usize].has(flags::FIN_QUEUED)
        {
            return Err(
                if conn.state == TcpState::SynSent || conn.state == TcpState::SynReceived {
                    Error::WouldBlock
                } else {
                    Error::NotConnected
                },
            );
        }
        Ok(())
    }

    /// The most a connection's send buffer may hold now: `tx_buffer`, or an equal share of
    /// `tx_memory` among the open connections if smaller, but never below the initial size
    /// (nor above it while buffered bytes are over `tcp_mem`'s high threshold).
    pub(crate) fn tx_limit(&self) -> usize {
        send_limit(&self.cfg, self.table.len(), self.memory.state())
    }

    /// Copies received bytes into `buf`. Ok(0) means the peer closed (end of stream).
    pub fn recv(&mut self, id: ConnId, buf: &mut [u8]) -> Result<usize, Error> {
        let slot = self.slot_of(id)?;
        let b = self.bufs[slot as usize]
            .as_mut()
            .ok_or(Error::InvalidHandle)?;
        let ready = b.rx_tail.diff(b.rx_head) as u32 as usize;
        if ready == 0 {
            if let Some(e) = self.conns[slot as usize].error {
                return Err(Error::Connection(e));
            }
            return if b.eof { Ok(0) } else { Err(Error::WouldBlock) };
        }
        let n = ready.min(buf.len());
        b.rx.read(b.rx_head, &mut buf[..n]);
        b.rx_head += n;
        self.rx_consumed(slot, n as u32);
        Ok(n)
    }

    /// The readable bytes in place (up to two slices), without copying; pair with [`Stack::consume`].
    pub fn peek(&self, id: ConnId) -> Result<(&[u8], &[u8]), Error> {
        let slot = self.slot_of(id)?;
        let b = self.bufs[slot as usize]
            .as_ref()
            .ok_or(Error::InvalidHandle)?;
        let ready = b.rx_tail.diff(b.rx_head) as u32 as usize;
        Ok(b.rx.slices(b.rx_head, ready))
    }

    /// Releases `n` bytes returned by [`Stack::peek`].
    pub fn consume(&mut self, id: ConnId, n: usize) -> Result<(), Error> {
        let slot = self.slot_of(id)?;
        let b = self.bufs[slot as usize]
            .as_mut()
            .ok_or(Error::InvalidHandle)?;
        let ready = b.rx_tail.diff(b.rx_head) as u32 as usize;
        let n = n.min(ready);
        b.rx_head += n;
        self.rx_consumed(slot, n as u32);
        Ok(())
    }

    /// Closes the sending side: a FIN follows the queued data (RFC 9293 3.10.4 CLOSE, half-close).
    pub fn shutdown(&mut self, id: ConnId) -> Result<(), Error> {
        let slot = self.slot_of(id)?;
        self.queue_fin(slot)
    }

    /// Closes the connection and releases the handle. Unread data makes it an abort
    /// (RST, RFC 9293 3.10.4 and RFC 2525 2.17); otherwise a FIN follows the queued data and
    /// the core finishes the teardown on its own, or its teardown stage does if the
    /// connection asked for it ([`Stack::set_teardown_offload`]).
    pub fn close(&mut self, id: ConnId) -> Result<(), Error> {
        let slot = self.slot_of(id)?;
        // The caller's buffer is not the core's after close: what is still unacknowledged
        // is taken in (header_only.rs), the FIN and retransmissions come from the core.
        self.internalize_tx(slot);
        let conn = &mut self.conns[slot as usize];
        conn.app_closed = true;
        conn.app_owned = false;
        let unread = self.bufs[slot as usize]
            .as_ref()
            .is_some_and(|b| b.rx_tail != b.rx_head);
        let (state, failed) = (conn.state, conn.error.is_some());
        match state {
            TcpState::Closed | TcpState::SynSent => self.free_slot(slot),
            _ if failed => self.free_slot(slot),
            _ if !unread && self.offload_close(slot) => {}
            TcpState::TimeWait | TcpState::LastAck | TcpState::Closing => {}
            TcpState::FinWait1 | TcpState::FinWait2 if !unread => self.arm_orphan_timer(slot),
            _ if unread => self.abort_slot(slot, ConnError::Aborted),
            _ => {
                let _ = self.queue_fin(slot);
            }
        }
        Ok(())
    }

    /// Resets the connection (RST) and releases the handle.
    pub fn abort(&mut self, id: ConnId) -> Result<(), Error> {
        let slot = self.slot_of(id)?;
        self.conns[slot as usize].app_owned = false;
        self.conns[slot as usize].app_closed = true;
        self.abort_slot(slot, ConnError::Aborted);
        Ok(())
    }

    /// Turns Nagle's algorithm on or off for a connection (TCP_NODELAY is `false`;
    /// RFC 9293 MUST-17: the application can disable it).
    pub fn set_nagle(&mut self, id: ConnId, on: bool) -> Result<(), Error> {
        let slot = self.slot_of(id)?;
        self.dp.proto[slot as usize].set(flags::NAGLE, on);
        self.dp.ready.push(slot);
        Ok(())
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        if let Some(index) = self.events.pop_listener() {
            if let Some(Some(l)) = self.listeners.get(index as usize) {
                return Some(Event::Acceptable(ListenerId {
                    index,
                    port: l.port,
                    generation: l.generation,
                }));
            }
        }
        // Connections still in an accept queue have no handle yet; the application learns
        // of them through Acceptable and reads whatever arrived after accepting.
        let (slot, b) = loop {
            let (slot, b) = self.events.pop_conn()?;
            let c = &self.conns[slot as usize];
            if c.app_owned && !c.splicing {
                break (slot, b);
            }
        };
        Some(Event::Conn(
            ConnId {
                slot,
                generation: self.table.generation(slot),
            },
            Readiness(b),
        ))
    }

    /// The connection's state.
    pub fn state(&self, id: ConnId) -> Result<TcpState, Error> {
        Ok(self.conns[self.slot_of(id)? as usize].state)
    }

    /// The connection's error, if it failed.
    pub fn error(&self, id: ConnId) -> Result<Option<ConnError>, Error> {
        Ok(self.conns[self.slot_of(id)? as usize].error)
    }

    /// The connection's (local, remote) addresses, for getsockname/getpeername and accept.
    pub fn endpoints(&self, id: ConnId) -> Result<(SocketAddrV4, SocketAddrV4), Error> {
        let t = self.conns[self.slot_of(id)? as usize].tuple;
        Ok((
            SocketAddrV4::new(self.cfg.ip, t.local_port),
            SocketAddrV4::new(t.remote_ip, t.remote_port),
        ))
    }

    /// A snapshot of the connection's variables.
    pub fn info(&self, id: ConnId) -> Result<ConnInfo, Error> {
        Ok(self.info_at(self.slot_of(id)? as usize))
    }

    /// A snapshot of the connection in `slot` (allocated; owned by the application or not).
    pub(crate) fn info_at(&self, slot: usize) -> ConnInfo {
        let ps = &self.dp.proto[slot];
        let post = &self.dp.post[slot];
        let limit = self.tx_limit_of(slot as u32);
        let (readable, writable, unacked) = match &self.bufs[slot] {
            Some(b) => (
                b.rx_tail.diff(b.rx_head) as u32 as usize,
                b.tx_room(limit),
                b.tx_used(),
            ),
            None => (0, 0, 0),
        };
        ConnInfo {
            state: self.conns[slot].state,
            snd_una: ps.snd_una,
            snd_nxt: ps.snd_nxt,
            snd_max: ps.snd_max,
            rcv_nxt: ps.rcv_nxt,
            snd_wnd: ps.snd_wnd,
            cwnd: ps.cwnd,
            srtt: Duration::from_micros(post.srtt_us as u64),
            rto: self.conns[slot].rto,
            ooo_intervals: ps.ooo_count,
            mss: ps.mss,
            readable,
            writable,
            unacked,
            fast_retransmits: self.dp.post_cold[slot].total_fretx,
            congestion_control: self.conns[slot].cc_algorithm,
            ssthresh: self.cc[slot].ssthresh(),
            rate_bps: self.dp.sched[slot].rate_bps,
            ecn: ps.ecn & crate::datapath::ecn::bits::ON != 0,
        }
    }

    /// Rows of the cold pool held by connections now, and the pool's bound
    /// (`Config::cold_pool`): a connection holds one only while it is out of order, has
    /// SACKed ranges or is recovering.
    pub fn cold_pool_usage(&self) -> (usize, usize) {
        (self.dp.pool.in_use(), self.dp.pool.capacity())
    }

    /// Per-connection data-path state in bytes, hot (what an in-order segment and an ACK
    /// touch) and cold, by stage — compare FlexTOE's 108 B (Table 5).
    pub fn datapath_state_bytes(&self) -> StateBytes {
        DataPath::state_bytes(
            self.cfg.ooo_intervals,
            self.cfg.scoreboard_ranges(),
            self.dp.pool.capacity(),
            self.dp.xmit_stride,
        )
    }

    /// Checks internal invariants; used by the fuzzer and tests. Returns the first violation.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        self.dp.wheel.check()?;
        self.teardown
            .check()
            .map_err(InvariantViolation::Teardown)?;
        self.splice.check().map_err(InvariantViolation::Teardown)?;
        if self.relay.len() > self.cfg.splice_relay_frames {
            return Err(InvariantViolation::Teardown(
                "splice: relay queue over its bound",
            ));
        }
        self.check_buffered()?;
        self.check_groups()?;
        self.check_logs().map_err(InvariantViolation::SharedLog)?;
        for s in 0..self.conns.len() {
            let pre = &self.dp.pre[s];
            if !pre.active {
                continue;
            }
            let slot = s as u32;
            let ps = &self.dp.proto[s];
            if ps.snd_una.seq_gt(ps.snd_nxt) {
                return Err(InvariantViolation::SndUnaPastSndNxt {
                    slot,
                    snd_una: ps.snd_una,
                    snd_nxt: ps.snd_nxt,
                });
            }
            if ps.snd_nxt.seq_gt(ps.snd_max) {
                return Err(InvariantViolation::SndNxtPastSndMax {
                    slot,
                    snd_nxt: ps.snd_nxt,
                    snd_max: ps.snd_max,
                });
            }
            if ps.ooo_count as usize > self.cfg.ooo_intervals {
                return Err(InvariantViolation::TooManyIntervals {
                    slot,
                    count: ps.ooo_count,
                    bound: self.cfg.ooo_intervals,
                });
            }
            if let Some(b) = &self.bufs[s] {
                let unread = b.rx_tail.diff(b.rx_head);
                let capacity = b.rx.capacity();
                if unread < 0 || unread as u32 > capacity {
                    return Err(InvariantViolation::RxRingOverfull {
                        slot,
                        unread,
                        capacity,
                    });
                }
                // A shared log's connection offers its share of the log instead.
                if !pre.log && ps.rx_avail as i64 + unread as i64 > capacity as i64 {
                    return Err(InvariantViolation::WindowOverRing {
                        slot,
                        rx_avail: ps.rx_avail,
                        unread,
                        capacity,
                    });
                }
                let unacked = b.tx_tail.diff(ps.snd_una.max(b.tx_head));
                // Our FIN takes the sequence number after the last data byte (RFC 9293 3.4),
                // so once it is acknowledged snd_una is one past tx_tail.
                let fin = ps.has(flags::FIN_QUEUED) as i32;
                let capacity = b.tx_capacity() as u32;
                if unacked < -fin || unacked > 0 && unacked as u32 > capacity {
                    return Err(InvariantViolation::TxRingOverfull {
                        slot,
                        unacked,
                        capacity,
                    });
                }
            }
            let board = self.dp.sacked_of(slot);
            let used = board.get(..usize::from(ps.sack.count)).ok_or(
                InvariantViolation::TooManySackedRanges {
                    slot,
                    count: ps.sack.count,
                    bound: board.len(),
                },
            )?;
            let mut prev = ps.snd_una;
            for r in used {
                // Sorted, disjoint, within (snd_una, snd_max] (RFC 6675 Update()).
                if !(r.start.seq_gt(prev) && r.start.seq_lt(r.end) && r.end.seq_le(ps.snd_max)) {
                    return Err(InvariantViolation::SackedRangeOutOfOrder {
                        slot,
                        start: r.start,
                        end: r.end,
                        snd_una: ps.snd_una,
                        snd_max: ps.snd_max,
                    });
                }
                prev = r.end;
            }
            let ooo = &self.dp.intervals_of(slot)[..ps.ooo_count as usize];
            let right = ps.rcv_nxt + ps.rx_avail;
            for iv in ooo {
                if !(iv.start.seq_gt(ps.rcv_nxt) && iv.end.seq_le(right) && iv.start.seq_lt(iv.end))
                {
                    return Err(InvariantViolation::IntervalOutsideWindow {
                        slot,
                        start: iv.start,
                        end: iv.end,
                        seen: iv.seen,
                        rcv_nxt: ps.rcv_nxt,
                        right,
                    });
                }
            }
        }
        Ok(())
    }

    // ---- shared helpers ---------------------------------------------------------------

    /// Takes a fresh slot into use for `tuple`: control record, buffers, cleared stage state.
    pub(crate) fn open_slot(&mut self, slot: u32, tuple: FourTuple) {
        self.add_slots_through(slot);
        let s = slot as usize;
        self.conns[s] = ConnControl::new(tuple, self.cfg.rto_initial);
        self.conns[s].cc_algorithm = self.cfg.congestion_control;
        self.dp.pre[s] = Default::default();
        self.dp.wheel.remove(slot);
        self.dp.sched[s] = Default::default();
        self.dp.drop_cold_row(s);
        self.dp.proto[s] = Default::default();
        self.dp.reordering[s] = crate::datapath::scoreboard::DUP_THRESH as u8;
        self.dp.post[s] = Default::default();
        self.dp.post_cold[s] = Default::default();
        self.events.clear(slot);
        // The rings are kept for the next connection in the slot, but never its positions:
        // until `install` sets them, the new connection has nothing to read and is not at
        // end of stream (the previous one may have been freed with unread data).
        let (rx, tx) = (self.cfg.rx_initial(), self.cfg.tx_initial());
        let b = self.bufs[s].get_or_insert_with(|| {
            ConnBuffers::new(PayloadRing::unallocated(rx), PayloadRing::unallocated(tx))
        });
        b.reset_at(SeqNumber(0), SeqNumber(0));
        b.ext = None;
        self.uncharge(slot);
    }

    /// Returns a slot to the free list (the connection is gone for everyone).
    pub(crate) fn free_slot(&mut self, slot: u32) {
        let s = slot as usize;
        let tuple = self.conns[s].tuple;
        if let Some(index) = self.conns[s].listener.take() {
            if let Some(Some(l)) = self.listeners.get_mut(index as usize) {
                if self.conns[s].state == TcpState::SynReceived {
                    l.syn_pending = l.syn_pending.saturating_sub(1);
                }
                l.accept.retain(|&x| x != slot);
            }
        }
        self.log_release(slot);
        self.dp.pre[s].active = false;
        self.dp.drop_cold_row(s);
        self.set_state(s, TcpState::Closed);
        self.conns[s].app_owned = false;
        if let Some(b) = self.bufs[s].as_mut() {
            // Never read the caller's buffer again once the connection is gone.
            b.ext = None;
        }
        self.release_grown_buffers(s);
        self.uncharge(slot);
        self.timer_queue.disarm(slot);
        self.dp.wheel.remove(slot);
        self.events.clear(slot);
        // A connection closed while waiting for ARP must leave the wait list, or
        // connect/close to an unanswered address grows it without bound.
        self.awaiting_arp.retain(|&x| x != slot);
        self.table.release(&tuple, slot);
    }

    /// A freed slot keeps its rings for the next connection only at their initial sizes:
    /// grown ones are released, so a burst of busy connections gives its memory back, and
    /// what the slots keep is bounded by the initial sizes (and, as rings are rebased to
    /// each connection's ISN, by the pages its connections' bytes touched).
    fn release_grown_buffers(&mut self, s: usize) {
        let grown = self.bufs[s].as_ref().is_some_and(|b| {
            b.rx.capacity() as usize > self.cfg.rx_initial().next_power_of_two()
                || b.tx.capacity() as usize > self.cfg.tx_initial().next_power_of_two()
        });
        // Initial-size storage stays with the slot (the next connection in it reuses it
        // without the allocator: a second burst of connections takes no new memory);
        // established connections give theirs back when drained (`ConnBuffers` and the pools).
        if grown {
            self.bufs[s] = None;
        }
    }

    /// Moves a connection to CLOSED: freed now if the application holds no handle, else
    /// kept (state Closed) until it calls close.
    pub(crate) fn enter_closed(&mut self, slot: u32) {
        self.set_state(slot as usize, TcpState::Closed);
        self.log_release(slot);
        let c = &mut self.conns[slot as usize];
        self.dp.pre[slot as usize].active = false;
        self.dp.drop_cold_row(slot as usize);
        c.timers.stop_all();
        if c.app_owned || c.listener.is_some() {
            // The slot waits for its application (or its listener's accept queue), but the
            // tuple is free at once: a new SYN from it reaches the listener instead of a RST.
            let tuple = c.tuple;
            if c.app_owned {
                self.events.raise(slot, bits::CLOSED);
            }
            self.table.unhash(&tuple, slot);
            // The pooled row took its out-of-order bytes with it: count what is left.
            self.recharge(slot);
        } else {
            self.free_slot(slot);
        }
    }

    /// Fails the connection with `error`, sending RST if it was synchronized; the
    /// application is told (RFC 9293 MUST-12).
    pub(crate) fn abort_slot(&mut self, slot: u32, error: ConnError) {
        let s = slot as usize;
        if self.conns[s].state.is_synchronized() && self.conns[s].state != TcpState::TimeWait
            || self.conns[s].state == TcpState::SynReceived
        {
            let ps = self.dp.proto[s];
            let seq = if self.conns[s].state == TcpState::SynReceived {
                self.conns[s].iss + 1u32
            } else {
                ps.snd_nxt
            };
            self.send_rst_for(slot, seq);
        }
        self.conns[s].error = Some(error);
        self.events.raise(slot, bits::ERROR);
        self.enter_closed(slot);
    }

    pub(crate) fn queue_fin(&mut self, slot: u32) -> Result<(), Error> {
        let s = slot as usize;
        let state = self.conns[s].state;
        let next = match state {
            TcpState::Established => TcpState::FinWait1,
            TcpState::SynReceived => {
                // RFC 9293 3.10.4: CLOSE in SYN-RECEIVED queues the FIN until ESTABLISHED;
                // the data-path that sends it does not own the connection yet.
                self.conns[s].fin_deferred = true;
                return Ok(());
            }
            TcpState::CloseWait => TcpState::LastAck,
            TcpState::FinWait1
            | TcpState::FinWait2
            | TcpState::Closing
            | TcpState::LastAck
            | TcpState::TimeWait => return Ok(()),
            TcpState::SynSent | TcpState::Closed => return Err(Error::NotConnected),
        };
        self.set_state(s, next);
        self.dp.proto[s].set(flags::FIN_QUEUED, true);
        self.dp.ready.push(slot);
        Ok(())
    }

    /// An orphaned connection in FIN-WAIT gets a bounded lifetime, so a peer that never
    /// sends its FIN cannot hold the slot forever.
    pub(crate) fn arm_orphan_timer(&mut self, slot: u32) {
        let deadline = self.now + self.cfg.time_wait.max(Duration::from_secs(1));
        let c = &mut self.conns[slot as usize];
        let deadline = c
            .timers
            .get(Timer::TimeWait)
            .map_or(deadline, |d| d.min(deadline));
        c.timers.set(Timer::TimeWait, deadline);
        self.timer_queue.arm(slot, c.next_deadline());
    }

    /// Sets the connection's `timer` to `at` and makes sure the timer queue wakes it by then.
    #[inline]
    pub(crate) fn arm_timer(&mut self, slot: u32, timer: Timer, at: Instant) {
        self.conns[slot as usize].timers.set(timer, at);
        self.timer_queue.arm(slot, at);
    }

    /// HC workflow: the application consumed `n` bytes; the window grows. A window update is
    /// sent when it opens by enough to matter (RFC 9293 3.8.6.2.2, MUST-39 receiver SWS).
    pub(crate) fn rx_consumed(&mut self, slot: u32, n: u32) {
        let s = slot as usize;
        if self.conns[s].splicing {
            // A splice drains the connection: its window's right edge stays where it is,
            // so the peer stops at it and the connection empties (control/splice.rs).
            self.charge_delta(slot, -i64::from(n));
            return;
        }
        if self.dp.pre[s].log {
            // Attached to a shared log: its window is the log's free space, reopened by
            // trims (shared_log/api.rs), never the empty ring's (a zero-byte consume opened
            // it past the log's capacity: found by the fuzz campaign).
            self.charge_delta(slot, -i64::from(n));
            return;
        }
        let before = self.dp.proto[s].rx_avail;
        let window = self.window_after_read(slot, before, n);
        let ps = &mut self.dp.proto[s];
        ps.rx_avail = window;
        let rcv_nxt = ps.rcv_nxt;
        let cap = self.bufs[s].as_ref().map_or(0, |b| b.rx.capacity());
        let grown = self.conns[s].rcv_space.sample(rcv_nxt, cap, self.now) && self.grow_rx(slot);
        self.release_idle_rx(slot);
        self.charge_delta(slot, -i64::from(n));
        let ps = &mut self.dp.proto[s];
        let cap = self.bufs[s].as_ref().map_or(0, |b| b.rx.capacity());
        let threshold = (cap / 2).min(ps.mss as u32);
        let opened = before < threshold.max(1) * 2 && ps.rx_avail >= threshold * 2;
        // A window held back under pressure and now given its room back is news too.
        let restored = window > before.saturating_add(n);
        if self.dp.pre[s].active && (opened || grown || restored) {
            self.dp.post[s].set(crate::datapath::state::post_flags::ACK_PENDING, true);
            self.dp.ready.push(slot);
        }
        // Read to the end with nothing out of order: the ring's storage goes back to the
        // pool (its capacity, and so the window, stays).
        let ooo = self.dp.proto[s].ooo_count;
        if let Some(b) = self.bufs[s]
            .as_mut()
            .filter(|b| b.rx_head == b.rx_tail && ooo == 0)
        {
            self.rx_pool.detach(&mut b.rx);
        }
    }
}

impl Stack {
    /// Receive-buffer autotuning: doubles the ring, up to today's share of `rx_memory`, and
    /// opens the window by what it adds (never shrinking it: RFC 9293 3.8.6.2.1). True if
    /// it grew.
    fn grow_rx(&mut self, slot: u32) -> bool {
        let s = slot as usize;
        let limit = rx_limit(&self.cfg, self.table.len());
        let ps = &mut self.dp.proto[s];
        let Some(b) = self.bufs[s].as_mut() else {
            return false;
        };
        let cap = b.rx.capacity() as usize;
        // Without window scaling the window field cannot say more than 64 KiB.
        let most = if ps.rcv_wscale == 0 {
            limit.min(65536)
        } else {
            limit
        };
        let grown = pow2_floor((cap * 2).min(most));
        if grown <= cap {
            return false;
        }
        if self.memory.state().worse(self.groups.state_of(slot)) != MemoryState::Normal {
            self.counters.memory_growth_refused += 1;
            return false;
        }
        // All the ring holds lies in [rx_head, rx_head + cap): unread bytes, then the
        // window with any out-of-order data.
        b.rx.grow(b.rx_head, cap as u32, grown);
        ps.rx_avail += (grown - cap) as u32;
        self.conns[s]
            .rcv_space
            .restart(ps.rcv_nxt, grown as u32, self.now);
        self.counters.rx_buffer_grown += 1;
        true
    }
}

/// The largest power of two at most `n` (1 for 0).
fn pow2_floor(n: usize) -> usize {
    if n.is_power_of_two() {
        n
    } else {
        (n.next_power_of_two() / 2).max(1)
    }
}
