//! What the core does as the bytes all connections buffer cross the thresholds of
//! `Config::tcp_mem` (counted in crate::pressure), after Linux's tcp_mem
//! (Documentation/networking/ip-sysctl.rst):
//!
//! - Under pressure (tcp_under_memory_pressure): rings stop growing; a read reopens the
//!   window only up to a few segments (tcp_adjust_rcv_ssthresh clamps rcv_ssthresh to
//!   4 * advmss), never moving its right edge back (RFC 9293 3.8.6, RFC 7323 2.4); a ring
//!   emptied by a read, or a send ring with nothing unacknowledged, that had grown goes back
//!   to its initial size (tcp_moderate_sndbuf, sk_mem_reclaim).
//! - Over the limit (the hard limit, where sk_wmem_schedule and tcp_try_rmem_schedule
//!   fail): besides that, SYNs get no SYN-ACK, the ACK of a SYN cookie sent before the
//!   crossing gets a RST instead of a connection, out-of-order data that would add bytes is
//!   dropped (tcp_data_queue_ofo's TCPOFODrop), and a connection may keep only an initial
//!   ring's worth unacknowledged (the tcp_wmem minimum every socket keeps). In-order data
//!   within the window already offered is always taken.
//!
//! A connection in a memory group (control/memory_group.rs) gets each of these also when
//! its group's own count is in that state, and only its group's connections do.

use crate::buffer::PayloadRing;
use crate::control::state::TcpState;
use crate::datapath::summary::{Actions, HeaderSummary};
use crate::host::Stack;
use crate::invariant::InvariantViolation;
use crate::pressure::{Crossed, MemoryState};

/// Under pressure a read reopens the window to at most this many segments (Linux's
/// tcp_adjust_rcv_ssthresh: 4 * advmss): enough to keep the connection going.
pub(crate) const PRESSURE_WINDOW_SEGMENTS: u32 = 4;

impl Stack {
    /// Bytes all connections buffer now: received and not yet read, received out of
    /// order, and sent but not yet acknowledged (not ring capacity: see
    /// [`Stack::buffer_memory`]).
    pub fn buffered_bytes(&self) -> u64 {
        self.memory.total()
    }

    /// Bytes of payload storage allocated now: (receive rings, send rings, the pools'
    /// spare storage). A drained ring gives its storage back, so idle connections add
    /// nothing here. Walks the slots: for statistics.
    pub fn buffer_memory_allocated(&self) -> (usize, usize, usize) {
        let (rx, tx) = self.bufs.iter().flatten().fold((0, 0), |(rx, tx), b| {
            (rx + b.rx.allocated(), tx + b.tx.allocated())
        });
        (rx, tx, self.rx_pool.bytes() + self.tx_pool.bytes())
    }

    /// Where [`Stack::buffered_bytes`] stands against `Config::tcp_mem`.
    pub fn memory_state(&self) -> MemoryState {
        self.memory.state()
    }

    /// Counts the bytes `slot` holds now into the total, after anything that changed them.
    /// A freed slot holds nothing, whatever its kept rings still say (later segments of a
    /// batch may reach a connection an earlier one ended).
    #[inline]
    pub(crate) fn recharge(&mut self, slot: u32) {
        let held = self.held_bytes(slot as usize);
        self.charge(slot, held);
    }

    /// Whether slot `s` holds a connection: not freed (state Closed with no handle and no
    /// listener is a freed slot).
    #[inline]
    fn holds_connection(&self, s: usize) -> bool {
        // The data-path's own flag answers for every segment of the fast path.
        if self.dp.pre[s].active {
            return true;
        }
        let c = &self.conns[s];
        c.state != TcpState::Closed || c.app_owned || c.listener.is_some()
    }

    /// Changes the bytes `slot` holds by `delta`, known exactly (bytes written, read,
    /// delivered in order or acknowledged): no recount on the fast path. A freed slot stays
    /// at nothing.
    #[inline]
    pub(crate) fn charge_delta(&mut self, slot: u32, delta: i64) {
        if !self.holds_connection(slot as usize) {
            return;
        }
        let before = self.memory.charged(slot);
        let crossed = self.memory.add(slot, delta);
        if crossed != Crossed::default() {
            self.counters.memory_pressure_entered += u64::from(crossed.pressure);
            self.counters.memory_over_limit_entered += u64::from(crossed.over_limit);
        }
        self.charge_group(slot, before);
    }

    /// The post stage's update for a segment that changed what its connection holds.
    /// Intervals changed: recount. Otherwise it delivered `rx_advance` bytes in order and
    /// freed `tx_freed`, exactly what the count changes by. Kept out of line: inlined, it
    /// slowed the single-segment receive path by more than its own work.
    #[inline(never)]
    pub(crate) fn count_segment(&mut self, s: &HeaderSummary) {
        if s.actions.contains(Actions::OOO_CHANGED) {
            self.recharge(s.slot);
        } else {
            // A shared log's connection delivers in order to the log, not its ring.
            let delivered = if s.log { 0 } else { s.rx_advance };
            self.charge_delta(s.slot, i64::from(delivered) - i64::from(s.tx_freed));
        }
    }

    /// Takes `slot`'s bytes out of the total: its connection is gone, or just begun (and
    /// so out of its memory group).
    pub(crate) fn uncharge(&mut self, slot: u32) {
        self.charge(slot, 0);
        self.leave_group(slot);
    }

    #[inline]
    fn charge(&mut self, slot: u32, bytes: u32) {
        let before = self.memory.charged(slot);
        let crossed = self.memory.charge(slot, bytes);
        self.charge_group(slot, before);
        self.counters.memory_pressure_entered += u64::from(crossed.pressure);
        self.counters.memory_over_limit_entered += u64::from(crossed.over_limit);
    }

    /// Checks that every connection is counted for what it holds, and a freed slot for
    /// nothing (for `check_invariants`: it walks the slots).
    pub(crate) fn check_buffered(&self) -> Result<(), InvariantViolation> {
        for s in 0..self.conns.len() {
            let held = self.held_bytes(s);
            let counted = self.memory.charged(s as u32);
            if counted != held {
                return Err(InvariantViolation::BufferedBytes {
                    slot: s as u32,
                    counted,
                    held,
                });
            }
        }
        Ok(())
    }

    /// Unread plus unacknowledged plus out-of-order bytes of the slot's connection (none
    /// for a freed slot). The
    /// interval sum runs over at most `Config::ooo_intervals`, as storing a segment does.
    #[inline]
    fn held_bytes(&self, s: usize) -> u32 {
        let Some(b) = self.bufs[s].as_ref().filter(|_| self.holds_connection(s)) else {
            return 0;
        };
        let unread = b.rx_tail.diff(b.rx_head).max(0) as u32;
        let unacked = b.tx_tail.diff(b.tx_head).max(0) as u32;
        let count = usize::from(self.dp.proto[s].ooo_count);
        let ooo = if count == 0 {
            0
        } else {
            self.dp.intervals_of(s as u32)[..count]
                .iter()
                .fold(0u32, |sum, iv| {
                    sum.saturating_add(iv.end.diff(iv.start).max(0) as u32)
                })
        };
        unread.saturating_add(unacked).saturating_add(ooo)
    }

    /// The receive window after the application read `n` bytes from a window of `before`
    /// (HC workflow). Normally all the ring's room beyond rcv_nxt, including any a window
    /// held back under pressure had left out; under pressure at most
    /// [`PRESSURE_WINDOW_SEGMENTS`] segments of it. Never below `before`: reading does not
    /// move rcv_nxt, so the right edge already offered stays (RFC 9293 3.8.6, RFC 7323 2.4).
    pub(crate) fn window_after_read(&mut self, slot: u32, before: u32, n: u32) -> u32 {
        let s = slot as usize;
        let reopened = before.saturating_add(n);
        let Some(b) = &self.bufs[s] else {
            return reopened;
        };
        // The ring holds [rx_head, rx_head + capacity): the window may reach its end.
        let room = (b.rx_head + b.rx.capacity())
            .diff(self.dp.proto[s].rcv_nxt)
            .max(0) as u32;
        if !self.slot_pressured(slot) {
            return reopened.max(room);
        }
        let clamp = PRESSURE_WINDOW_SEGMENTS * u32::from(self.cfg.local_mss());
        let window = before.max(room.min(clamp));
        if window < room {
            self.counters.memory_window_clamped += 1;
        }
        window
    }

    /// Under pressure, a receive ring that had grown and that a read left empty goes back
    /// to the initial size, if the window it offered fits there (the right edge stays).
    pub(crate) fn release_idle_rx(&mut self, slot: u32) {
        if !self.slot_pressured(slot) {
            return;
        }
        let s = slot as usize;
        let initial = self.cfg.rx_initial().next_power_of_two();
        let ps = &self.dp.proto[s];
        let Some(b) = self.bufs[s].as_mut() else {
            return;
        };
        let empty = b.rx_tail == b.rx_head && ps.rcv_nxt == b.rx_head && ps.ooo_count == 0;
        if b.rx.capacity() as usize <= initial || !empty || b.eof || ps.rx_avail as usize > initial
        {
            return;
        }
        let mut ring = PayloadRing::unallocated(initial);
        // The window [rcv_nxt, rcv_nxt + rx_avail) starts at the ring's first byte.
        ring.rebase(b.rx_head);
        b.rx = ring;
        let rcv_nxt = ps.rcv_nxt;
        self.conns[s]
            .rcv_space
            .restart(rcv_nxt, initial as u32, self.now);
        self.counters.memory_rings_released += 1;
    }

    /// Whether a SYN to listener `index` may open a connection now; counts a refusal. Over
    /// the limit (the global one, or the listener's memory group's) it gets no SYN-ACK: the
    /// client sends its SYN again and gets in once reads and ACKs have brought the total
    /// down (as a SYN finding a full accept queue in Linux).
    pub(crate) fn admit_syn(&mut self, index: u16) -> bool {
        if self.memory.state() == MemoryState::OverLimit {
            self.counters.memory_syn_refused += 1;
            return false;
        }
        self.admit_to_group(index, false)
    }

    /// Whether the ACK of a valid SYN cookie may open a connection now; counts a refusal.
    /// The cookie went out while the total was below the high threshold (over it, SYNs get
    /// no SYN-ACK: [`Stack::admit_syn`]), but the peer is already established on it: the
    /// caller answers a refusal with a RST (RFC 9293 3.10.7.2, an ACK in LISTEN), so that
    /// the client's next call fails at once instead of its data going unacknowledged into
    /// a connection the engine never took. Unlike a SYN, a cookie's ACK is not sent again.
    pub(crate) fn admit_cookie(&mut self, index: u16) -> bool {
        if self.memory.state() == MemoryState::OverLimit {
            self.counters.memory_cookie_refused += 1;
            return false;
        }
        self.admit_to_group(index, true)
    }
}
