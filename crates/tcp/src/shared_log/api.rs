//! The application's calls on shared logs (laminar.txt 5): register a log, attach client
//! connections, read it up to the first unfilled gap, trim it, take the redirected bytes
//! and fill the gaps with them. Trims reopen the attached connections' windows.

use super::log::{
    LogError, LogId, LogInfo, LogRedirect, SharedLog, SlotLog, MAX_LOGS, MAX_LOG_CAPACITY, NO_LOG,
};
use crate::datapath::state::{flags, post_flags, ProtoState};
use crate::handle::ConnId;
use crate::host::Stack;

/// Log bytes promised to the attached connections' windows beyond what they mapped: each
/// connection may still place up to its window's right edge.
fn promised(log: &SharedLog, slots: &[SlotLog], proto: &[ProtoState]) -> u64 {
    log.conns
        .iter()
        .map(|&slot| grant(&proto[slot as usize], slots[slot as usize]))
        .sum()
}

/// What `ps`'s window still lets its peer place in the log: nothing once the peer's FIN
/// arrived (the FIN takes a sequence number, not a log byte: found by the fuzz campaign,
/// whose invariant check saw the promise grow by one at every FIN).
fn grant(ps: &ProtoState, row: SlotLog) -> u64 {
    if ps.has(flags::FIN_RECEIVED) {
        return 0;
    }
    (ps.rcv_nxt + ps.rx_avail).diff(row.mapped_end).max(0) as u64
}

impl Stack {
    /// Registers a shared log of `capacity` bytes, owned by the core.
    pub fn log_register(&mut self, capacity: usize) -> Result<LogId, LogError> {
        if capacity == 0 {
            return Err(LogError::CapacityZero);
        }
        if capacity > MAX_LOG_CAPACITY {
            return Err(LogError::CapacityTooLarge { asked: capacity });
        }
        let logs = &mut self.logs;
        let index = match logs.logs.iter().position(Option::is_none) {
            Some(i) => i,
            None if logs.logs.len() < MAX_LOGS => {
                logs.logs.push(None);
                logs.logs.len() - 1
            }
            None => return Err(LogError::TooManyLogs),
        };
        let generation = logs.next_generation;
        logs.next_generation = generation.wrapping_add(1);
        logs.logs[index] = Some(SharedLog::new(capacity, generation));
        Ok(LogId {
            index: index as u16,
            generation,
        })
    }

    /// Frees a log with no connection attached.
    pub fn log_unregister(&mut self, id: LogId) -> Result<(), LogError> {
        if !self.logs.get(id)?.conns.is_empty() {
            return Err(LogError::Attached);
        }
        self.logs.logs[usize::from(id.index)] = None;
        Ok(())
    }

    /// Attaches a synchronized connection to the log: from now on its payload is appended
    /// to the log instead of its receive ring (what it holds unread moves to the log
    /// first), and its window is its share of the log's free space.
    pub fn log_attach(&mut self, id: LogId, conn: ConnId) -> Result<(), LogError> {
        let slot = self
            .slot_of(conn)
            .map_err(|_| LogError::InvalidConnection)?;
        let s = slot as usize;
        self.logs.get(id)?;
        if self.logs.slot(slot).log != NO_LOG {
            return Err(LogError::AlreadyAttached);
        }
        if !self.dp.pre[s].active || self.conns[s].splicing {
            return Err(LogError::NotEstablished);
        }
        let ps = self.dp.proto[s];
        if ps.ooo_count > 0 {
            return Err(LogError::OutOfOrderData);
        }
        let Some(b) = self.bufs[s].as_mut() else {
            return Err(LogError::InvalidConnection);
        };
        let unread = b.rx_tail.diff(b.rx_head).max(0) as u32;
        let log = self.logs.get(id)?;
        let free = log
            .capacity()
            .saturating_sub(log.used() + promised(log, &self.logs.slots, &self.dp.proto));
        let needed = u64::from(unread) + u64::from(ps.rx_avail);
        if needed > free {
            return Err(LogError::NoRoom { needed, free });
        }
        let mut moved = vec![0; unread as usize];
        b.rx.read(b.rx_head, &mut moved);
        b.rx_head = b.rx_tail;
        self.rx_pool.detach(&mut b.rx);
        let log = self.logs.get_mut(id)?;
        let tail = log.tail;
        log.write(tail, &moved);
        log.tail += u64::from(unread);
        log.conns.push(slot);
        *self.logs.slot_mut(slot) = SlotLog {
            log: id.index,
            generation: conn.generation,
            mapped_end: ps.rcv_nxt,
        };
        self.dp.pre[s].log = true;
        self.charge_delta(slot, -i64::from(unread));
        self.log_reopen(id.index);
        Ok(())
    }

    /// Detaches a connection whose bytes have all arrived: its payload goes to its receive
    /// ring again, and its window shrinks to what the ring holds if it offered more.
    pub fn log_detach(&mut self, id: LogId, conn: ConnId) -> Result<(), LogError> {
        let slot = self
            .slot_of(conn)
            .map_err(|_| LogError::InvalidConnection)?;
        self.logs.get(id)?;
        let row = self.logs.slot(slot);
        if row.log != id.index {
            return Err(LogError::NotAttached);
        }
        let s = slot as usize;
        if row.mapped_end != self.dp.proto[s].rcv_nxt {
            return Err(LogError::GapsPending);
        }
        self.log_leave(slot);
        let room = self.bufs[s].as_ref().map_or(0, |b| b.rx.capacity());
        let ps = &mut self.dp.proto[s];
        ps.rx_avail = ps.rx_avail.min(room);
        self.log_reopen(id.index);
        Ok(())
    }

    /// The log's readable bytes from its head, up to the first unfilled gap (two slices
    /// when they wrap around the buffer's end).
    pub fn log_peek(&self, id: LogId) -> Result<(&[u8], &[u8]), LogError> {
        Ok(self.logs.get(id)?.readable())
    }

    /// Frees `n` bytes at the log's head (at most what is readable) and reopens the attached
    /// connections' windows with the space.
    pub fn log_trim(&mut self, id: LogId, n: u64) -> Result<(), LogError> {
        let log = self.logs.get_mut(id)?;
        let readable = log.readable_end() - log.head;
        if n > readable {
            return Err(LogError::TrimPastReadable { asked: n, readable });
        }
        log.head += n;
        self.log_reopen(id.index);
        Ok(())
    }

    /// The next bytes the data-path redirected for a gap of the log (front to back), if any.
    pub fn poll_log_redirect(&mut self, id: LogId) -> Result<Option<LogRedirect>, LogError> {
        let log = self.logs.get_mut(id)?;
        let Some(i) = log.gaps.iter().position(|g| g.arrived > g.polled) else {
            return Ok(None);
        };
        let g = log.gaps[i];
        let offset = g.offset + u64::from(g.polled);
        let data = log.staged(offset, (g.arrived - g.polled) as usize);
        log.gaps[i].polled = g.arrived;
        Ok(Some(LogRedirect {
            offset,
            conn: ConnId {
                slot: g.slot,
                generation: g.generation,
            },
            data,
            abandoned: g.abandoned,
        }))
    }

    /// Fills a gap with bytes redirected for it: `offset` is where the gap's unfilled bytes
    /// start (a [`LogRedirect`]'s), `data` at most what was polled for it.
    pub fn log_fill(&mut self, id: LogId, offset: u64, data: &[u8]) -> Result<(), LogError> {
        self.logs.get_mut(id)?.fill(offset, data)
    }

    /// The log's pointers and counts.
    pub fn log_info(&self, id: LogId) -> Result<LogInfo, LogError> {
        let log = self.logs.get(id)?;
        Ok(LogInfo {
            capacity: log.capacity(),
            head: log.head,
            readable_end: log.readable_end(),
            tail: log.tail,
            gaps: log.gaps.len(),
            connections: log.conns.len(),
            promised: promised(log, &self.logs.slots, &self.dp.proto),
        })
    }

    /// The log a connection is attached to, if any.
    pub fn log_of(&self, conn: ConnId) -> Option<LogId> {
        let slot = self.slot_of(conn).ok()?;
        let row = self.logs.slot(slot);
        let log = self.logs.logs.get(usize::from(row.log))?.as_ref()?;
        Some(LogId {
            index: row.log,
            generation: log.generation,
        })
    }

    /// The connection in `slot` leaves the data-path (closed, reset, freed): it leaves its
    /// log, and bytes of its gaps that never arrived are redirected as zeros, marked
    /// abandoned, so the application can fill (skip) them and read on.
    pub(crate) fn log_release(&mut self, slot: u32) {
        let row = self.logs.slot(slot);
        if row.log == NO_LOG {
            return;
        }
        if let Some(Some(log)) = self.logs.logs.get_mut(usize::from(row.log)) {
            for i in 0..log.gaps.len() {
                let g = log.gaps[i];
                if g.slot == slot && g.generation == row.generation && g.arrived < g.len {
                    let zeros = vec![0; (g.len - g.arrived) as usize];
                    log.stage(g.offset + u64::from(g.arrived), &zeros);
                    log.gaps[i].arrived = g.len;
                    log.gaps[i].abandoned = true;
                    self.counters.log_gaps_abandoned += 1;
                }
            }
        }
        self.log_leave(slot);
        self.log_reopen(row.log);
    }

    /// Takes `slot` off its log's list and out of the data-path's log flag.
    fn log_leave(&mut self, slot: u32) {
        let row = self.logs.slot(slot);
        if let Some(Some(log)) = self.logs.logs.get_mut(usize::from(row.log)) {
            log.conns.retain(|&c| c != slot);
        }
        *self.logs.slot_mut(slot) = SlotLog::default();
        if let Some(pre) = self.dp.pre.get_mut(slot as usize) {
            pre.log = false;
        }
    }

    /// Gives the log's free space not yet promised to the attached connections' windows,
    /// each up to an equal share of the log, its receive buffer's size
    /// (`Config::rx_buffer`) and what its window field can say; a window
    /// that opens by a segment or more, or from nothing, is advertised at once.
    fn log_reopen(&mut self, index: u16) {
        let Some(Some(log)) = self.logs.logs.get(usize::from(index)) else {
            return;
        };
        if log.conns.is_empty() {
            return;
        }
        let cap = log.capacity();
        let mut free =
            cap.saturating_sub(log.used() + promised(log, &self.logs.slots, &self.dp.proto));
        let share = cap / log.conns.len() as u64;
        for &slot in &log.conns {
            if free == 0 {
                break;
            }
            let s = slot as usize;
            let ps = &mut self.dp.proto[s];
            if ps.has(flags::FIN_RECEIVED) {
                // Nothing more comes: no window to open, no update to send.
                continue;
            }
            let given = grant(ps, self.logs.slots[s]);
            // Never more than its receive buffer could offer, so that connections
            // attached later find room too.
            let most = (u64::from(u16::MAX) << ps.rcv_wscale).min(self.cfg.rx_buffer as u64);
            let target = share.min(most);
            if given >= target {
                continue;
            }
            let add = (target - given).min(free);
            free -= add;
            ps.rx_avail += add as u32;
            // RFC 9293 3.8.6.2.2 (receiver SWS avoidance): advertise a window that opened
            // by at least min(a segment, half the buffer), or out of zero.
            let worth = u64::from(ps.mss).min(cap / 2).max(1);
            if (add >= worth || given == 0) && self.dp.pre[s].active {
                self.dp.post[s].set(post_flags::ACK_PENDING, true);
                self.dp.ready.push(slot);
            }
        }
    }

    /// Checks every log: gaps in order within [head, tail), and what is used plus what
    /// windows promise within the capacity (nothing accepted can be lost).
    pub(crate) fn check_logs(&self) -> Result<(), &'static str> {
        for log in self.logs.logs.iter().flatten() {
            if log.head > log.tail {
                return Err("shared log: head past tail");
            }
            let mut prev = log.head;
            for g in &log.gaps {
                if g.offset < prev
                    || g.offset + u64::from(g.len) > log.tail
                    || g.filled > g.polled
                    || g.polled > g.arrived
                    || g.arrived > g.len
                {
                    return Err("shared log: gap out of order or out of bounds");
                }
                prev = g.offset + u64::from(g.len);
            }
            if log.used() + promised(log, &self.logs.slots, &self.dp.proto) > log.capacity() {
                return Err("shared log: used and promised bytes above its capacity");
            }
            for &slot in &log.conns {
                if !self.dp.pre.get(slot as usize).is_some_and(|p| p.log) {
                    return Err("shared log: attached connection without the data-path flag");
                }
            }
        }
        Ok(())
    }
}
