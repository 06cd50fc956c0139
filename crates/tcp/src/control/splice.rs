//! The control plane's side of connection splicing (acceltcp.txt 4.3): `Stack::splice`
//! takes two established connections from the application, relays what is still buffered
//! between them, and once both are drained hands them to the splice stage as one value
//! each ([`Side`]) and frees their slots; afterwards it routes the spliced tuples' frames
//! through the stage and reports the splice's end.

use std::fmt;

use super::isn;
use super::state::TcpState;
use crate::datapath::state::flags;
use crate::handle::ConnId;
use crate::host::Stack;
use crate::offload::splice::{Pending, Relay, RelayChecksum, Side};
pub use crate::offload::splice::{SpliceEnd, SpliceEvent, SpliceId, SpliceRewrite, SpliceStats};
use crate::table::FourTuple;

/// Why [`Stack::splice`] refused (nothing changed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpliceError {
    /// A handle is stale, closed, or not the application's.
    InvalidHandle,
    /// Both handles name the same connection.
    SameConnection,
    /// A connection is not established, or not half-closed by its peer only (handshake,
    /// closing, or failed).
    NotEstablished,
    /// A connection is already being spliced.
    AlreadySpliced,
    /// A peer's MSS is below ours, so segments from the other side would not fit it.
    MssMismatch,
    /// One connection uses timestamps (RFC 7323) and the other does not.
    TimestampsMismatch,
    /// The splice stage holds its configured number of splices (or splicing is off).
    Full,
}

impl fmt::Display for SpliceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SpliceError::InvalidHandle => "invalid connection handle",
            SpliceError::SameConnection => "cannot splice a connection to itself",
            SpliceError::NotEstablished => "connection not established",
            SpliceError::AlreadySpliced => "connection already being spliced",
            SpliceError::MssMismatch => "a peer's MSS is smaller than ours",
            SpliceError::TimestampsMismatch => "timestamps on one connection only",
            SpliceError::Full => "splice table full",
        })
    }
}

impl std::error::Error for SpliceError {}

impl Stack {
    /// Joins two established connections (acceltcp.txt 4.3): the application gives both
    /// handles up; the core relays whatever either has buffered to the other, and once
    /// both are drained it hands them to the splice stage, which rewrites each peer's
    /// frames for the other without waking anyone. [`Stack::poll_splice_event`] reports
    /// the handover and the end, with byte counts. Data the application wrote before
    /// (a rewritten request header) is delivered first.
    pub fn splice(&mut self, a: ConnId, b: ConnId) -> Result<SpliceId, SpliceError> {
        let sa = self.slot_of(a).map_err(|_| SpliceError::InvalidHandle)?;
        let sb = self.slot_of(b).map_err(|_| SpliceError::InvalidHandle)?;
        if sa == sb {
            return Err(SpliceError::SameConnection);
        }
        let local_mss = self.cfg.local_mss();
        for s in [sa, sb] {
            let c = &self.conns[s as usize];
            if c.splicing {
                return Err(SpliceError::AlreadySpliced);
            }
            // Open, or half-closed by its peer (a request followed by its FIN): the rest is
            // relayed, the FIN too.
            if c.error.is_some()
                || !matches!(c.state, TcpState::Established | TcpState::CloseWait)
                || self.dp.proto[s as usize].has(flags::FIN_QUEUED)
            {
                return Err(SpliceError::NotEstablished);
            }
            if c.negotiated.peer_mss < local_mss {
                return Err(SpliceError::MssMismatch);
            }
        }
        let ts = |s: u32| self.dp.proto[s as usize].has(flags::TIMESTAMPS);
        if ts(sa) != ts(sb) {
            return Err(SpliceError::TimestampsMismatch);
        }
        if self.cfg.splice_max == 0
            || self.splice.len() + self.splice_pending.len() >= self.cfg.splice_max
        {
            return Err(SpliceError::Full);
        }
        self.next_splice_id += 1;
        let id = self.next_splice_id;
        for s in [sa, sb] {
            // The splice relays from the core's ring: a caller's buffer is taken in first.
            self.internalize_tx(s);
            self.conns[s as usize].splicing = true;
            // The handles are the core's now: no more readiness for the application.
            self.events.clear(s);
        }
        self.counters.splices_requested += 1;
        self.splice_pending.push(Pending {
            id,
            conns: [a, b],
            fin_relayed: [false, false],
            relayed: [0, 0],
        });
        self.progress_splices();
        Ok(SpliceId(id))
    }

    /// The next splice event, if any.
    pub fn poll_splice_event(&mut self) -> Option<SpliceEvent> {
        self.splice_events.pop_front()
    }

    /// Queues a splice event for the application. The queue holds two events per splice
    /// the stage may hold; an application that never reads them loses the oldest (counted),
    /// never memory.
    fn report_splice(&mut self, e: SpliceEvent) {
        if self.splice_events.len() >= 2 * self.cfg.splice_max.max(1) {
            self.splice_events.pop_front();
            self.counters.splice_events_dropped += 1;
        }
        self.splice_events.push_back(e);
    }

    /// Hands an installed splice's common case to a fast path outside the core (the
    /// engine's eBPF splice module): returns the two rewrites it is to apply, and from now on
    /// the splice stage, which still holds the splice and relays what the fast path passes
    /// on (SYN, FIN, RST, SACK blocks, the close), drops nothing for the receivers'
    /// windows, since their ACKs go by on the fast path. None if the stage does not hold it.
    pub fn splice_fast_path(&mut self, id: SpliceId) -> Option<[SpliceRewrite; 2]> {
        let r = self
            .splice
            .hand_to_fast_path(id.0, (self.cfg.ip, self.cfg.mac));
        if r.is_some() {
            self.counters.splices_fast_path += 1;
        }
        r
    }

    /// Splices the stage holds (installed, not yet ended).
    pub fn splice_count(&self) -> usize {
        self.splice.len()
    }

    /// Whether the splice stage holds `tuple` (a new connection must not take it).
    pub(crate) fn splice_holds(&self, tuple: &FourTuple) -> bool {
        self.splice.holds(tuple)
    }

    /// Moves pending splices on: relays what is buffered, and hands over the drained ones.
    pub(crate) fn progress_splices(&mut self) {
        let mut i = 0;
        while i < self.splice_pending.len() {
            let p = self.splice_pending[i];
            match self.progress_one(p) {
                Progress::Waiting(p) => {
                    self.splice_pending[i] = p;
                    i += 1;
                }
                Progress::Done => {
                    self.splice_pending.swap_remove(i);
                }
            }
        }
    }

    fn progress_one(&mut self, mut p: Pending) -> Progress {
        // Both peers closed while the core relayed (a short exchange, Connection: close):
        // one connection finished its close cleanly, so both directions ended; there is
        // nothing left to splice. Each connection closes the core's way from here.
        let closed_cleanly = p.conns.iter().any(|&id| {
            self.slot_of(id).is_ok_and(|slot| {
                let c = &self.conns[slot as usize];
                c.state == TcpState::Closed && c.error.is_none()
            })
        });
        if closed_cleanly && p.fin_relayed == [true, true] {
            for id in p.conns {
                if let Ok(slot) = self.slot_of(id) {
                    self.conns[slot as usize].splicing = false;
                    let _ = self.close(id);
                }
            }
            self.counters.splices_closed += 1;
            self.report_splice(SpliceEvent::Ended(
                SpliceId(p.id),
                SpliceEnd::Closed,
                SpliceStats {
                    a_to_b: p.relayed[0],
                    b_to_a: p.relayed[1],
                },
            ));
            return Progress::Done;
        }
        let alive = |s: &Stack, id: ConnId| {
            s.slot_of(id).ok().filter(|&slot| {
                let c = &s.conns[slot as usize];
                c.error.is_none() && c.state != TcpState::Closed
            })
        };
        let (Some(sa), Some(sb)) = (alive(self, p.conns[0]), alive(self, p.conns[1])) else {
            // One failed: the other cannot be joined to anything; reset it, free both.
            for id in p.conns {
                if let Ok(slot) = self.slot_of(id) {
                    self.conns[slot as usize].app_owned = false;
                    self.conns[slot as usize].splicing = false;
                    if self.conns[slot as usize].error.is_none()
                        && self.conns[slot as usize].state != TcpState::Closed
                    {
                        self.abort_slot(slot, super::state::ConnError::Aborted);
                    } else {
                        self.free_slot(slot);
                    }
                }
            }
            self.counters.splices_failed += 1;
            self.report_splice(SpliceEvent::Failed(SpliceId(p.id)));
            return Progress::Done;
        };
        let slots = [sa, sb];
        for x in 0..2 {
            p.relayed[x] += self.relay_buffered(p.conns[x], p.conns[1 - x]);
            // The peer of x closed and everything it sent went to the other side: our FIN
            // follows it there.
            let eof = self.bufs[slots[x] as usize]
                .as_ref()
                .is_some_and(|b| b.eof && b.rx_tail == b.rx_head);
            if eof && !p.fin_relayed[1 - x] && self.queue_fin(slots[1 - x]).is_ok() {
                p.fin_relayed[1 - x] = true;
            }
        }
        if !slots.iter().all(|&s| self.drained(s)) {
            return Progress::Waiting(p);
        }
        let sides = [self.side_of(sa), self.side_of(sb)];
        if !self
            .splice
            .install(self.now, p.id, (&sides[0], &sides[1]), p.relayed)
        {
            return Progress::Waiting(p);
        }
        // Each peer's window was held while draining: a last ACK from each connection
        // offers it the other peer's window, so neither waits on a window probe.
        for x in 0..2 {
            let s = slots[x] as usize;
            if self.dp.pre[s].active {
                self.dp.proto[s].rx_avail = sides[1 - x].snd_wnd;
                self.send_ack(slots[x]);
            }
        }
        for s in slots {
            self.conns[s as usize].splicing = false;
            self.free_slot(s);
        }
        self.counters.splices_installed += 1;
        self.report_splice(SpliceEvent::Installed(SpliceId(p.id)));
        Progress::Done
    }

    /// Moves what `from` received into `to`'s send buffer, as far as it has room; returns
    /// the bytes moved.
    fn relay_buffered(&mut self, from: ConnId, to: ConnId) -> u64 {
        let mut buf = [0u8; 4096];
        let mut moved = 0;
        loop {
            let Ok(room) = self.send_room(to) else {
                return moved;
            };
            if room == 0 {
                return moved;
            }
            let want = room.min(buf.len());
            let n = match self.recv(from, &mut buf[..want]) {
                Ok(n) if n > 0 => n,
                _ => return moved,
            };
            moved += n as u64;
            let sent = self.send(to, &buf[..n]).unwrap_or(0);
            debug_assert_eq!(sent, n, "room was checked");
        }
    }

    /// Bytes `id`'s send buffer takes now.
    fn send_room(&self, id: ConnId) -> Result<usize, crate::Error> {
        let slot = self.slot_of(id)?;
        let limit = self.tx_limit();
        Ok(self.bufs[slot as usize]
            .as_ref()
            .map_or(0, |b| b.tx_room(limit)))
    }

    /// Whether a connection has nothing left in flight or buffered either way.
    fn drained(&self, slot: u32) -> bool {
        let s = slot as usize;
        let ps = &self.dp.proto[s];
        let fin = u32::from(ps.has(flags::FIN_QUEUED));
        let rx_empty = self.bufs[s].as_ref().is_none_or(|b| b.rx_tail == b.rx_head);
        ps.snd_una == ps.snd_max
            && ps.snd_max == ps.tx_end + fin
            && rx_empty
            && ps.ooo_count == 0
            && !ps.has(flags::FIN_PENDING)
    }

    /// The handover value of a drained connection.
    fn side_of(&self, slot: u32) -> Side {
        let s = slot as usize;
        let ps = &self.dp.proto[s];
        let c = &self.conns[s];
        let ts = ps.has(flags::TIMESTAMPS).then(|| {
            let offset =
                isn::timestamp_offset(&self.ts_secret, self.cfg.ip, &c.tuple, self.cfg.clock_epoch);
            (ps.ts_recent, self.ts_clock().wrapping_add(offset))
        });
        Side {
            tuple: c.tuple,
            peer_mac: self.dp.pre[s].peer_mac,
            snd_nxt: ps.snd_max,
            rcv_nxt: ps.rcv_nxt,
            snd_wnd: ps.snd_wnd,
            snd_wscale: c.negotiated.snd_wscale.unwrap_or(0),
            rcv_wscale: ps.rcv_wscale,
            ts,
            peer_fin: ps.has(flags::FIN_RECEIVED),
        }
    }

    /// A frame of a spliced tuple (a connection-table miss found it): rewritten into the
    /// relay queue for the other peer. False if the tuple is not spliced.
    pub(crate) fn splice_frame(
        &mut self,
        tuple: &FourTuple,
        frame: &[u8],
        full_checksum: bool,
    ) -> bool {
        if !self.splice.holds(tuple) {
            return false;
        }
        if let Some((id, stats)) = self.splice.reopen(tuple, frame) {
            self.counters.splice_reopened += 1;
            self.counters.splices_closed += 1;
            self.report_splice(SpliceEvent::Ended(SpliceId(id), SpliceEnd::Closed, stats));
            return false;
        }
        let frame_max = usize::from(self.cfg.mtu) + 18;
        let csum = if full_checksum {
            RelayChecksum::Full
        } else {
            RelayChecksum::Differential
        };
        if frame.len() > frame_max {
            // A large segment (a Linux sender's GSO across a veth).
            self.counters.splice_large_frames += 1;
            let mss = headers_fit(frame, usize::from(self.cfg.mtu));
            if self.cfg.tso_max_payload as usize + 94 >= frame.len() && self.cfg.tx_checksum_offload
            {
                // The device segments: relay it whole, its checksum left for the device.
                if self.splice_one(tuple, frame, RelayChecksum::Partial, mss as u16) {
                    return true;
                }
            }
            self.counters.splice_large_segmented += 1;
            // Cut into segments that fit the other peer's link, as its device would have
            // (sluice_wire::gso); each one's checksums are complete, so the differential
            // update applies.
            let mut scratch = std::mem::take(&mut self.gso_scratch);
            scratch.resize(frame_max, 0);
            let r = sluice_wire::gso::segment_tcp4(frame, mss, &mut scratch, |seg| {
                self.splice_one(tuple, seg, RelayChecksum::Differential, 0);
            });
            self.gso_scratch = scratch;
            if r.is_err() {
                self.counters.malformed += 1;
            }
            return true;
        }
        self.splice_one(tuple, frame, csum, 0);
        true
    }

    /// Relays one frame (`gso_size` > 0: a large one the device is to segment). False only
    /// if a large frame found no slot (the caller segments it instead).
    fn splice_one(
        &mut self,
        tuple: &FourTuple,
        frame: &[u8],
        csum: RelayChecksum,
        gso_size: u16,
    ) -> bool {
        let now = self.now;
        let mac = self.cfg.mac;
        let mut outcome = None;
        let stage = &mut self.splice;
        let mut relay = |out: &mut [u8]| {
            let r = stage.relay(now, tuple, frame, out, mac, csum)?;
            outcome = Some(r);
            match r {
                Relay::Forward(n) | Relay::ForwardAndEnd(n, ..) => Some(n),
                _ => None,
            }
        };
        let queued = if self.relay.is_full() {
            // The stage still sees the frame (a RST ends the splice), but it is dropped:
            // the peers' TCPs retransmit what matters.
            let scratch = self.relay_scratch.get_or_insert_with(Vec::new);
            scratch.resize(scratch.len().max(frame.len()), 0);
            relay(scratch);
            false
        } else {
            self.relay.push_with(frame.len(), gso_size, relay)
        };
        if outcome.is_none() && gso_size != 0 {
            // No large slot free: the stage did not see it; the caller segments it.
            return false;
        }
        match outcome {
            Some(Relay::Forward(n)) if queued => {
                self.counters.splice_frames_relayed += 1;
                self.counters.splice_bytes_relayed += n as u64;
            }
            Some(Relay::ForwardAndEnd(n, id, end, stats)) => {
                if queued {
                    self.counters.splice_frames_relayed += 1;
                    self.counters.splice_bytes_relayed += n as u64;
                }
                self.counters.splices_reset += 1;
                self.report_splice(SpliceEvent::Ended(SpliceId(id), end, stats));
            }
            Some(Relay::Forward(_)) => self.counters.splice_relay_full += 1,
            Some(Relay::DropRstOutOfWindow) => self.counters.splice_rst_out_of_window += 1,
            Some(Relay::DropOutOfWindow) => self.counters.splice_out_of_window += 1,
            Some(Relay::DropMalformed) | None => self.counters.malformed += 1,
        }
        true
    }

    /// Runs the splice stage's TIME-WAIT timers due by now.
    pub(crate) fn splice_timeout(&mut self) {
        let mut ended = std::mem::take(&mut self.splice_ended);
        ended.clear();
        self.splice.on_timeout(self.now, &mut ended);
        for &(id, stats) in &ended {
            self.counters.splices_closed += 1;
            self.report_splice(SpliceEvent::Ended(SpliceId(id), SpliceEnd::Closed, stats));
        }
        self.splice_ended = ended;
    }
}

/// The payload per segment that keeps a frame with `frame`'s IP and TCP headers within
/// `mtu` (at least 1).
fn headers_fit(frame: &[u8], mtu: usize) -> usize {
    let ip = frame.get(14).map_or(20, |b| usize::from(b & 0x0f) * 4);
    let tcp = frame
        .get(14 + ip + 12)
        .map_or(20, |b| usize::from(b >> 4) * 4);
    mtu.saturating_sub(ip + tcp).max(1)
}

enum Progress {
    Waiting(Pending),
    Done,
}
