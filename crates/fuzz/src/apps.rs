//! The applications on both stacks: they accept, stream their flow's known bytes, read and
//! verify the peer's, and make random API calls with random arguments, including handles
//! they already released (which the core must refuse, never misdirect).

use std::net::Ipv4Addr;

use rand::seq::SliceRandom;
use rand::Rng;
use sluice_tcp::{Error, ListenError, MemoryGroupError, TcpState};

use crate::case::{trace, Case, Handle};
use crate::config::SERVICE_PORTS;
use crate::net::Side;
use crate::violation::Violation;

/// What a call on a handle must return: released handles are refused; live ones are not.
fn check_handle<T>(h: &Handle, what: &'static str, r: &Result<T, Error>) -> Result<(), Violation> {
    match (h.released, r) {
        (true, Err(Error::InvalidHandle)) | (false, Ok(_)) => Ok(()),
        (true, _) => Err(Violation::ReleasedNotRefused {
            side: h.side,
            call: what,
            slot: h.id.slot(),
        }),
        (false, Err(Error::InvalidHandle)) => Err(Violation::LiveRefused {
            side: h.side,
            call: what,
            slot: h.id.slot(),
        }),
        (false, Err(_)) => Ok(()),
    }
}

/// A memory-group refusal in [`Error`]'s terms for [`check_handle`]: the groups asked for
/// exist, so a handle refusal is the only one expected.
fn group_error(e: MemoryGroupError) -> Error {
    match e {
        MemoryGroupError::InvalidHandle => Error::InvalidHandle,
        _ => Error::InvalidArgument,
    }
}

impl Case {
    pub(crate) fn listen(
        &mut self,
        side: Side,
        port: u16,
        backlog: usize,
    ) -> Result<(), Violation> {
        let r = self.stack(side).listen(port, backlog);
        trace!(self, "{side:?} listen({port}, {backlog}) = {r:?}");
        match r {
            Ok(id) => {
                let s = self.stack(side);
                let group = crate::config::group_of(s, u32::from(port));
                if s.set_listener_memory_group(id, group).is_err() {
                    return Err(Violation::LiveRefused {
                        side,
                        call: "set_listener_memory_group",
                        slot: u32::from(port),
                    });
                }
                self.listeners.push((side, id));
            }
            Err(ListenError::InvalidArgument) if port != 0 => {
                return Err(Violation::ListenRefused { side, port })
            }
            Err(_) => {}
        }
        Ok(())
    }

    pub(crate) fn connect(&mut self, side: Side, ip: Ipv4Addr, port: u16) -> Result<(), Violation> {
        let now = self.now;
        let r = self.stack(side).connect(now, ip, port);
        trace!(self, "{side:?} connect({ip}:{port}) = {r:?}");
        // A refusal is fine: ConnectError has no InvalidHandle, the type rules it out.
        if let Ok(id) = r {
            if port == 0 || ip == side.ip() || ip.is_broadcast() || ip.is_unspecified() {
                return Err(Violation::BadConnectAccepted { side, ip, port });
            }
            let s = self.stack(side);
            let group = crate::config::group_of(s, id.slot() + 1);
            let r = s.set_memory_group(id, group).map_err(group_error);
            self.handles.push(Handle::new(side, id, true));
            check_handle(
                &self.handles[self.handles.len() - 1],
                "set_memory_group",
                &r,
            )?;
        }
        Ok(())
    }

    /// Maps handles that became synchronized to their flows (see [`crate::flows`]).
    pub(crate) fn map_handles(&mut self) {
        for h in 0..self.handles.len() {
            let hd = self.handles[h].clone();
            if hd.released || hd.flow.is_some() || hd.untracked {
                continue;
            }
            let stack = &self.stacks[hd.side.index()];
            let (Ok(state), Ok(info)) = (stack.state(hd.id), stack.info(hd.id)) else {
                continue;
            };
            if !state.is_synchronized() {
                self.handles[h].untracked = state == TcpState::Closed;
                continue;
            }
            let fin_in = crate::invariants::fin_received(state);
            let iss = info.snd_una.0.wrapping_sub(1);
            let irs = info
                .rcv_nxt
                .0
                .wrapping_sub(info.readable as u32)
                .wrapping_sub(fin_in as u32)
                .wrapping_sub(1);
            let mapped = if hd.active {
                self.flows.map_client(hd.side, iss, h, irs)
            } else {
                self.flows.map_server(hd.side, iss, h, irs)
            };
            let Some(fi) = mapped else {
                self.handles[h].untracked = true;
                continue;
            };
            self.handles[h].flow = Some(fi);
            let target = match self.rng.gen_range(0..10) {
                0..=1 => 0,
                2..=7 => self.rng.gen_range(1..16_384),
                _ => self.rng.gen_range(16_384..131_072),
            };
            let f = &mut self.flows.list[fi];
            let out = f.dir_into(hd.side.other());
            let inn = f.dir_into(hd.side);
            f.dirs[out].target = target;
            f.dirs[out].shut |= hd.shut;
            if hd.io_unmapped {
                f.dirs[out].data_tainted = true;
                f.dirs[inn].data_tainted = true;
            }
            trace!(self, "{:?} handle {h} mapped to flow {fi}", hd.side);
        }
    }

    /// The data pump step: accept, stream, read, collect events.
    pub(crate) fn pump(&mut self) -> Result<(), Violation> {
        trace!(self, "pump");
        self.pump_apps(false)
    }

    /// Accepts on every listener, then lets every live handle send and read; `clean` moves
    /// more data per call.
    pub(crate) fn pump_apps(&mut self, clean: bool) -> Result<(), Violation> {
        for i in 0..self.listeners.len() {
            let (side, id) = self.listeners[i];
            for _ in 0..4 {
                if !self.accept_on(side, id)? {
                    break;
                }
            }
        }
        self.map_handles();
        let max = if clean { 16_384 } else { 3000 };
        for h in 0..self.handles.len() {
            if self.handles[h].released {
                continue;
            }
            if self.handles[h].flow.is_some() {
                self.send_stream(h, max)?;
            }
            self.recv_stream(h, if clean { 64 } else { 4 })?;
        }
        for side in Side::BOTH {
            crate::invariants::drain_events(&mut self.stacks[side.index()], side)?;
        }
        Ok(())
    }

    /// One accept; true if it returned a connection.
    fn accept_on(&mut self, side: Side, id: sluice_tcp::ListenerId) -> Result<bool, Violation> {
        match self.stack(side).accept(id) {
            Ok(conn) => {
                trace!(self, "{side:?} accepted slot {}", conn.slot());
                if self
                    .handles
                    .iter()
                    .any(|h| !h.released && h.side == side && h.id == conn)
                {
                    return Err(Violation::AcceptedHeldHandle { side });
                }
                self.handles.push(Handle::new(side, conn, false));
                Ok(true)
            }
            Err(_) => Ok(false),
        }
    }

    /// Sends the next chunk of the handle's outgoing stream.
    fn send_stream(&mut self, h: usize, max: usize) -> Result<(), Violation> {
        let hd = self.handles[h].clone();
        let Some(fi) = hd.flow else {
            return Ok(());
        };
        let f = &self.flows.list[fi];
        let d = f.dir_into(hd.side.other());
        let dir = &f.dirs[d];
        if dir.shut || dir.written >= dir.target {
            return Ok(());
        }
        let len = (dir.target - dir.written).min(self.rng.gen_range(1..=max) as u64) as usize;
        let mut data = vec![0u8; len];
        sluice_apps::pattern_fill(dir.seed, dir.written, &mut data);
        let r = self.stack(hd.side).send(hd.id, &data);
        check_handle(&hd, "send", &r)?;
        if let Ok(n) = r {
            if n > len {
                return Err(Violation::SendOverLen {
                    side: hd.side,
                    taken: n,
                    len,
                });
            }
            self.flows.list[fi].dirs[d].written += n as u64;
        }
        Ok(())
    }

    /// Reads (and checks) what the handle can read, in up to `rounds` calls.
    fn recv_stream(&mut self, h: usize, rounds: usize) -> Result<(), Violation> {
        for _ in 0..rounds {
            if !self.recv_once(h)? {
                break;
            }
        }
        Ok(())
    }

    /// One `recv` (or `peek` + `consume`) on handle `h`; false when nothing more comes.
    fn recv_once(&mut self, h: usize) -> Result<bool, Violation> {
        let hd = self.handles[h].clone();
        // Peek first sometimes; when it shows nothing, recv still runs, since only recv
        // reports the end of stream.
        if self.rng.gen_bool(0.15) && self.peek_consume(h)? {
            return Ok(true);
        }
        let len = if self.rng.gen_bool(0.05) {
            0
        } else {
            self.rng.gen_range(1..=4096)
        };
        let mut buf = vec![0u8; len];
        let r = self.stack(hd.side).recv(hd.id, &mut buf);
        trace!(self, "{:?} recv({len}) on handle {h} = {r:?}", hd.side);
        check_handle(&hd, "recv", &r)?;
        match r {
            Ok(n) if n > len => Err(Violation::RecvOverLen {
                side: hd.side,
                got: n,
                len,
            }),
            Ok(0) if len > 0 => {
                trace!(self, "{:?} handle {h}: end of stream", hd.side);
                if let Some(fi) = hd.flow {
                    self.flows.on_eof(fi, hd.side)?;
                }
                Ok(false)
            }
            Ok(n) => {
                self.record_read(h, &buf[..n])?;
                // A zero-length read says nothing; keep reading.
                Ok(n > 0 || len == 0)
            }
            Err(_) => Ok(false),
        }
    }

    fn peek_consume(&mut self, h: usize) -> Result<bool, Violation> {
        let hd = self.handles[h].clone();
        let stack = &self.stacks[hd.side.index()];
        let r = stack.peek(hd.id);
        check_handle(&hd, "peek", &r)?;
        let Ok((a, b)) = r else {
            return Ok(false);
        };
        let mut bytes = a.to_vec();
        bytes.extend_from_slice(b);
        if let Ok(info) = stack.info(hd.id) {
            if info.readable != bytes.len() {
                return Err(Violation::PeekDisagrees {
                    side: hd.side,
                    peeked: bytes.len(),
                    readable: info.readable,
                });
            }
        }
        let k = self.rng.gen_range(0..=bytes.len());
        let r = self.stack(hd.side).consume(hd.id, k);
        check_handle(&hd, "consume", &r)?;
        self.record_read(h, &bytes[..k])?;
        Ok(k > 0)
    }

    fn record_read(&mut self, h: usize, bytes: &[u8]) -> Result<(), Violation> {
        let hd = &self.handles[h];
        match hd.flow {
            Some(fi) => Ok(self.flows.on_read(fi, hd.side, bytes)?),
            None => {
                if !bytes.is_empty() {
                    self.handles[h].io_unmapped = true;
                }
                Ok(())
            }
        }
    }

    /// Shuts down senders that wrote their whole stream (end of the healing phase).
    /// Returns how many it shut down.
    pub(crate) fn shutdown_finished_senders(&mut self) -> Result<usize, Violation> {
        let mut shut = 0;
        for h in 0..self.handles.len() {
            let hd = self.handles[h].clone();
            let Some(fi) = hd.flow else { continue };
            if hd.released {
                continue;
            }
            let f = &self.flows.list[fi];
            let d = f.dir_into(hd.side.other());
            if f.dirs[d].shut || f.dirs[d].written < f.dirs[d].target {
                continue;
            }
            let r = self.stack(hd.side).shutdown(hd.id);
            trace!(self, "{:?} shutdown finished handle {h} = {r:?}", hd.side);
            check_handle(&hd, "shutdown", &r)?;
            if r.is_ok() {
                self.flows.list[fi].dirs[d].shut = true;
                shut += 1;
            }
        }
        Ok(shut)
    }

    /// Closes (or aborts) every handle and stops every listener.
    pub(crate) fn release_all(&mut self) -> Result<(), Violation> {
        for h in 0..self.handles.len() {
            if !self.handles[h].released {
                let abort = self.rng.gen_bool(0.2);
                self.release(h, abort)?;
            }
        }
        for (side, id) in std::mem::take(&mut self.listeners) {
            let r = self.stack(side).unlisten(id);
            if r.is_err() {
                return Err(Violation::UnlistenFailed {
                    side,
                    port: id.port(),
                    outcome: format!("{r:?}"),
                });
            }
            self.old_listeners.push((side, id));
        }
        Ok(())
    }

    fn release(&mut self, h: usize, abort: bool) -> Result<(), Violation> {
        let hd = self.handles[h].clone();
        let s = self.stack(hd.side);
        let before = s.info(hd.id);
        let r = if abort {
            s.abort(hd.id)
        } else {
            // Every other handle asks for teardown offload (by index, not the rng, so
            // that earlier seeds replay the same draws).
            if h.is_multiple_of(2) {
                let _ = s.set_teardown_offload(hd.id, true);
            }
            s.close(hd.id)
        };
        let what = if abort { "abort" } else { "close" };
        trace!(
            self,
            "{:?} {what} handle {h} = {r:?} (was {before:?})",
            hd.side
        );
        check_handle(&hd, if abort { "abort" } else { "close" }, &r)?;
        self.handles[h].released = true;
        self.handles[h].shut = true;
        if let Some(fi) = hd.flow {
            let f = &mut self.flows.list[fi];
            let d = f.dir_into(hd.side.other());
            f.dirs[d].shut = true;
        }
        Ok(())
    }

    fn random_ip(&mut self, side: Side) -> Ipv4Addr {
        match self.rng.gen_range(0..8) {
            0 => side.ip(),
            1 => Ipv4Addr::BROADCAST,
            2 => Ipv4Addr::UNSPECIFIED,
            3 => Ipv4Addr::new(10, 0, 0, self.rng.gen_range(3..6)),
            4 => Ipv4Addr::from(self.rng.gen::<u32>()),
            _ => side.other().ip(),
        }
    }

    fn random_port(&mut self) -> u16 {
        match self.rng.gen_range(0..6) {
            0 => 0,
            1 => self.rng.gen(),
            _ => *SERVICE_PORTS.choose(&mut self.rng).unwrap_or(&80),
        }
    }

    /// One random application call with random arguments.
    pub(crate) fn random_app_call(&mut self) -> Result<(), Violation> {
        let op = self.rng.gen_range(0..17);
        // Clean cases mostly spare their connections, so that many flows reach the
        // liveness check at the end.
        if !self.dirty && matches!(op, 3 | 4 | 5 | 8) && self.rng.gen_bool(0.8) {
            return Ok(());
        }
        let side = if self.rng.gen() { Side::A } else { Side::B };
        let h = (!self.handles.is_empty()).then(|| self.rng.gen_range(0..self.handles.len()));
        match (op, h) {
            (0, Some(h)) => {
                let hd = self.handles[h].clone();
                if hd.flow.is_some() && !hd.released {
                    return self.send_stream(h, 8192);
                }
                let len = self.rng.gen_range(0..3000);
                let data: Vec<u8> = (0..len).map(|_| self.rng.gen()).collect();
                let r = self.stack(hd.side).send(hd.id, &data);
                trace!(self, "{:?} send({len}) on handle {h} = {r:?}", hd.side);
                check_handle(&hd, "send", &r)?;
                if matches!(r, Ok(n) if n > 0) && !hd.untracked {
                    self.handles[h].io_unmapped = true;
                }
            }
            (1, Some(h)) => {
                self.recv_once(h)?;
            }
            (2, Some(h)) => {
                self.peek_consume(h)?;
            }
            (3, Some(h)) => {
                let hd = self.handles[h].clone();
                let r = self.stack(hd.side).shutdown(hd.id);
                trace!(self, "{:?} shutdown handle {h} = {r:?}", hd.side);
                check_handle(&hd, "shutdown", &r)?;
                if r.is_ok() {
                    self.handles[h].shut = true;
                    if let Some(fi) = hd.flow {
                        let f = &mut self.flows.list[fi];
                        let d = f.dir_into(hd.side.other());
                        f.dirs[d].shut = true;
                    }
                }
            }
            (4, Some(h)) => self.release(h, false)?,
            (5, Some(h)) => self.release(h, true)?,
            (6, _) => {
                let ip = self.random_ip(side);
                let port = self.random_port();
                self.connect(side, ip, port)?;
            }
            (7, _) => {
                let port = self.random_port();
                let backlog = self.rng.gen_range(0..10);
                self.listen(side, port, backlog)?;
            }
            (8, _) if !self.listeners.is_empty() => {
                let i = self.rng.gen_range(0..self.listeners.len());
                let (side, id) = self.listeners.swap_remove(i);
                let r = self.stack(side).unlisten(id);
                trace!(self, "{side:?} unlisten({}) = {r:?}", id.port());
                if r.is_err() {
                    return Err(Violation::UnlistenLiveFailed { side });
                }
                self.old_listeners.push((side, id));
            }
            (9, _) => {
                let all: Vec<_> = self
                    .listeners
                    .iter()
                    .chain(self.old_listeners.iter())
                    .copied()
                    .collect();
                if let Some(&(side, id)) = all.choose(&mut self.rng) {
                    self.accept_on(side, id)?;
                    self.map_handles();
                }
            }
            (10, Some(h)) => {
                let hd = self.handles[h].clone();
                let on = self.rng.gen();
                let r = self.stack(hd.side).set_nagle(hd.id, on);
                check_handle(&hd, "set_nagle", &r)?;
            }
            (11, Some(h)) => {
                let hd = self.handles[h].clone();
                let s = &self.stacks[hd.side.index()];
                check_handle(&hd, "state", &s.state(hd.id))?;
                check_handle(&hd, "error", &s.error(hd.id))?;
                check_handle(&hd, "info", &s.info(hd.id))?;
                // Into another group, with the bytes it holds (a per-group count that
                // drifts shows in the core's invariant check).
                let group = crate::config::group_of(s, hd.id.slot() + self.step as u32);
                let r = self.stack(hd.side).set_memory_group(hd.id, group);
                check_handle(&hd, "set_memory_group", &r.map_err(group_error))?;
            }
            (12, _) => {
                // A transmit buffer too small for a frame is refused without taking anything
                // from the queues (a connection that lost its turn would stall for good).
                let len = self.rng.gen_range(0..64);
                let now = self.now;
                let mut small = vec![0u8; len];
                let r = self.stack(side).poll_transmit(now, &mut small);
                trace!(self, "{side:?} poll_transmit into {len} bytes = {r:?}");
                if r.is_some() {
                    return Err(Violation::SmallBufferUsed { side, len });
                }
            }
            (13, _) => crate::invariants::drain_events(self.stack(side), side)?,
            (14, Some(h)) => {
                // Pace a connection (or lift its limit): the flow scheduler's timing wheel
                // then decides when it sends. Rates low enough to clamp to the wheel's
                // horizon, high enough for the liveness check's rounds; u64::MAX is never
                // held back.
                let hd = self.handles[h].clone();
                let rate = *[0, 0, 100_000_000, 1_000_000_000, u64::MAX]
                    .choose(&mut self.rng)
                    .unwrap_or(&0);
                let r = self.stack(hd.side).set_rate(hd.id, rate);
                check_handle(&hd, "set_rate", &r)?;
            }
            (15, Some(h)) => self.log_attach(h)?,
            (16, _) => self.log_serve(side, false)?,
            _ => {}
        }
        Ok(())
    }

    /// Attaches a connection to its stack's shared log, registering one of a random
    /// capacity first; a released handle must be refused. What arrives on it from then on
    /// goes to the log, not to `recv`: its flow's direction into it is no longer checked.
    fn log_attach(&mut self, h: usize) -> Result<(), Violation> {
        let hd = self.handles[h].clone();
        let side = hd.side;
        let log = match self.logs[side.index()] {
            Some(log) => log,
            None => {
                let capacity = *[0, 1, 4096, 65_536, 1 << 20, usize::MAX]
                    .choose(&mut self.rng)
                    .unwrap_or(&4096);
                let r = self.stack(side).log_register(capacity);
                trace!(self, "{side:?} log_register({capacity}) = {r:?}");
                match r {
                    Ok(log) => {
                        self.logs[side.index()] = Some(log);
                        log
                    }
                    Err(_) => return Ok(()),
                }
            }
        };
        let r = self.stack(side).log_attach(log, hd.id);
        trace!(self, "{side:?} log_attach handle {h} = {r:?}");
        if hd.released && r.is_ok() {
            return Err(Violation::ReleasedNotRefused {
                side,
                call: "log_attach",
                slot: hd.id.slot(),
            });
        }
        if r.is_ok() {
            if let Some(fi) = hd.flow {
                let f = &mut self.flows.list[fi];
                let d = f.dir_into(side);
                f.dirs[d].data_tainted = true;
                f.dirs[d].fin_tainted = true;
            } else {
                self.handles[h].io_unmapped = true;
            }
        }
        Ok(())
    }

    /// The log's application: fills every gap from the redirected bytes, reads what is
    /// readable and trims a random part of it (all of it with `trim_all`, as an application
    /// that keeps up does while the case heals and tears down).
    pub(crate) fn log_serve(&mut self, side: Side, trim_all: bool) -> Result<(), Violation> {
        let Some(log) = self.logs[side.index()] else {
            return Ok(());
        };
        let refused = |call| Violation::LiveRefused {
            side,
            call,
            slot: 0,
        };
        // Bounded by the gaps' bytes: each redirect is handed over once.
        while let Some(r) = self
            .stack(side)
            .poll_log_redirect(log)
            .map_err(|_| refused("poll_log_redirect"))?
        {
            trace!(
                self,
                "{side:?} log redirect {} bytes at {}",
                r.data.len(),
                r.offset
            );
            self.stack(side)
                .log_fill(log, r.offset, &r.data)
                .map_err(|_| refused("log_fill"))?;
        }
        let info = self
            .stack(side)
            .log_info(log)
            .map_err(|_| refused("log_info"))?;
        let (a, b) = self
            .stack(side)
            .log_peek(log)
            .map_err(|_| refused("log_peek"))?;
        if (a.len() + b.len()) as u64 != info.readable_end - info.head {
            return Err(refused("log_peek (its length is not readable_end - head)"));
        }
        let readable = info.readable_end - info.head;
        let n = if trim_all {
            readable
        } else {
            self.rng.gen_range(0..=readable)
        };
        self.stack(side)
            .log_trim(log, n)
            .map_err(|_| refused("log_trim"))?;
        // Trimming past the readable end is refused.
        if self.stack(side).log_trim(log, readable - n + 1).is_ok() {
            return Err(refused("log_trim (past the readable end was taken)"));
        }
        Ok(())
    }
}
