//! A minimal service-mode application written directly on `sluice-shm` (not libsluice):
//! attach, contexts, commands and completions, and the payload rings. Tests only.
//!
//! Waiting calls take a `pump` closure the caller uses to drive whatever else must progress
//! meanwhile (a peer stack in the same thread), and give up at a deadline.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use sluice_shm::control::{
    connect_to, peer_gone, recv_message, send_message, EngineInfo, Reply, Request, PROTOCOL_VERSION,
};
use sluice_shm::flags;
use sluice_shm::{
    AcceptRecord, Command, Completion, Consumer, Dir, EventFd, Layout, Producer, QueueKind, Region,
    SocketBlock, SpliceReport, ACCEPT_RECORD_BYTES,
};

/// How long any wait may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(20);

/// One context of the client.
pub struct Ctx {
    pub index: u32,
    cmd: Producer,
    comp: Consumer,
    pub eventfd: EventFd,
    /// The other engine cores' queue pairs (the service in flow groups), core k at k - 1.
    more: Vec<(Producer, Consumer)>,
    /// The core the last command went to (its completion comes back there).
    last: u32,
}

/// An attached application.
pub struct Client {
    pub sock: OwnedFd,
    pub region: Arc<Region>,
    pub doorbell: EventFd,
    pub engine: EngineInfo,
    pub layout: Layout,
    pub app: u32,
    pub ctxs: Vec<Ctx>,
    next_req: u32,
    /// Splice reports met while waiting for completions, in order.
    pub reports: Vec<SpliceReport>,
    /// The engine core the next Open goes to (None: round robin, as libsluice).
    pub open_core: Option<u32>,
    next_open: u32,
}

/// Receives one reply, failing the test after [`WAIT`].
fn reply(sock: &OwnedFd) -> (Reply, Vec<OwnedFd>) {
    let mut pfd = [PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
    let n = poll(&mut pfd, PollTimeout::try_from(WAIT).unwrap()).expect("poll");
    assert!(n > 0, "the engine did not answer within {WAIT:?}");
    recv_message::<Reply>(sock.as_fd())
        .expect("a reply")
        .expect("a message")
}

impl Client {
    /// Attaches to the engine at `path`.
    pub fn attach(path: &Path, name: &str) -> Client {
        Self::try_attach(path, name).expect("attached")
    }

    /// Attaches, or returns the refusal's reason.
    pub fn try_attach(path: &Path, name: &str) -> Result<Client, String> {
        let sock = connect_to(path).map_err(|e| e.to_string())?;
        let hello = Request::Hello {
            version: PROTOCOL_VERSION,
            pid: std::process::id(),
            name: name.into(),
        };
        send_message(sock.as_fd(), &hello, &[]).map_err(|e| e.to_string())?;
        match reply(&sock) {
            (
                Reply::Welcome {
                    app,
                    layout,
                    engine,
                },
                mut fds,
            ) => {
                assert_eq!(fds.len(), 2, "region and doorbell");
                let region = Arc::new(Region::open(fds.remove(0), layout).expect("region maps"));
                let doorbell = EventFd::from_owned(fds.remove(0));
                Ok(Client {
                    sock,
                    region,
                    doorbell,
                    engine,
                    layout,
                    app,
                    ctxs: Vec::new(),
                    next_req: 1,
                    reports: Vec::new(),
                    open_core: None,
                    next_open: 0,
                })
            }
            (Reply::Refused { reason }, _) => Err(reason),
            (other, _) => panic!("unexpected reply {other:?}"),
        }
    }

    /// Asks for a context; Err(reason) when refused.
    pub fn try_context(&mut self) -> Result<u32, String> {
        send_message(self.sock.as_fd(), &Request::NewContext, &[]).expect("send NewContext");
        match reply(&self.sock) {
            (Reply::Context { index }, mut fds) => {
                assert_eq!(fds.len(), 1, "the context's eventfd");
                let cmd = Producer::new(self.region.clone(), index, QueueKind::Command).unwrap();
                let comp =
                    Consumer::new(self.region.clone(), index, QueueKind::Completion).unwrap();
                let more = (1..self.layout.queue_cores)
                    .map(|k| {
                        let r = self.region.clone();
                        (
                            Producer::on_core(r.clone(), index, k, QueueKind::Command).unwrap(),
                            Consumer::on_core(r, index, k, QueueKind::Completion).unwrap(),
                        )
                    })
                    .collect();
                self.ctxs.push(Ctx {
                    index,
                    cmd,
                    comp,
                    eventfd: EventFd::from_owned(fds.remove(0)),
                    more,
                    last: 0,
                });
                Ok(self.ctxs.len() as u32 - 1)
            }
            (Reply::Refused { reason }, _) => Err(reason),
            (other, _) => panic!("unexpected reply {other:?}"),
        }
    }

    /// A new context (its position in `ctxs`).
    pub fn context(&mut self) -> u32 {
        self.try_context().expect("a context")
    }

    /// A fresh request id.
    pub fn req(&mut self) -> u32 {
        self.next_req += 1;
        self.next_req
    }

    /// The engine core a command goes to, as libsluice routes it: a slot's command to
    /// the slot's core, Open round robin (or to `open_core`), the rest to core 0.
    pub fn core_for(&mut self, entry: &[u8; sluice_shm::PAYLOAD_BYTES]) -> u32 {
        let n = self.layout.queue_cores.max(1);
        match Command::decode(entry) {
            Ok(Command::Open { .. }) => {
                self.open_core.unwrap_or_else(|| {
                    self.next_open = self.next_open.wrapping_add(1);
                    self.next_open % n
                }) % n
            }
            Ok(Command::Splice { slot_a, .. }) => slot_a % n,
            Ok(cmd) => cmd.slot().map_or(0, |s| s % n),
            Err(_) => 0,
        }
    }

    /// Posts raw entry bytes on context `c` and rings the doorbell if the engine sleeps.
    pub fn post_raw(&mut self, c: u32, entry: &[u8; sluice_shm::PAYLOAD_BYTES]) {
        let core = self.core_for(entry);
        let ctx = &mut self.ctxs[c as usize];
        ctx.last = core;
        let cmd = match core {
            0 => &mut ctx.cmd,
            k => &mut ctx.more[k as usize - 1].0,
        };
        assert!(cmd.push(entry).expect("queue intact"), "command queue full");
        // docs/service.md: post, fence, then ring if the engine announced its sleep.
        fence(Ordering::SeqCst);
        if self.region.engine_sleeping().load(Ordering::SeqCst) != 0 {
            self.doorbell.signal();
        }
    }

    /// Posts a command (no completion awaited).
    pub fn post(&mut self, c: u32, cmd: Command) {
        self.post_raw(c, &cmd.encode());
    }

    /// Takes what context `c` holds: splice reports go to [`Client::reports`]; returns the
    /// first other completion.
    fn take(&mut self, c: u32) -> Option<Completion> {
        let ctx = &mut self.ctxs[c as usize];
        let comp = match ctx.last {
            0 => &mut ctx.comp,
            k => &mut ctx.more[k as usize - 1].1,
        };
        while let Some(e) = comp.pop() {
            comp.publish();
            match Completion::decode(&e).expect("the engine writes valid completions") {
                Completion::Splice(r) => self.reports.push(r),
                other => return Some(other),
            }
        }
        None
    }

    /// Waits for the next completion on context `c` (splice reports set aside).
    pub fn completion(&mut self, c: u32, pump: &mut dyn FnMut()) -> Completion {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(done) = self.take(c) {
                return done;
            }
            assert!(Instant::now() < deadline, "no completion within {WAIT:?}");
            pump();
        }
    }

    /// Posts raw entry bytes and waits for its completion.
    pub fn call_raw(
        &mut self,
        c: u32,
        entry: &[u8; sluice_shm::PAYLOAD_BYTES],
        pump: &mut dyn FnMut(),
    ) -> Completion {
        self.post_raw(c, entry);
        self.completion(c, pump)
    }

    /// Posts a command with a request id and waits for its completion.
    pub fn call(&mut self, c: u32, cmd: Command, pump: &mut dyn FnMut()) -> Completion {
        let completion = self.call_raw(c, &cmd.encode(), pump);
        let req = cmd
            .req()
            .unwrap_or_else(|| panic!("{cmd:?} has no completion"));
        assert_eq!(completion.req(), req, "completions come back in order");
        completion
    }

    /// Calls and expects Done; returns its value.
    pub fn ok(&mut self, c: u32, cmd: Command, pump: &mut dyn FnMut()) -> u32 {
        match self.call(c, cmd, pump) {
            Completion::Done { value, .. } => value,
            f => panic!("{cmd:?} failed: {f:?}"),
        }
    }

    /// Calls and expects Failed; returns the errno.
    pub fn fails(&mut self, c: u32, cmd: Command, pump: &mut dyn FnMut()) -> i32 {
        match self.call(c, cmd, pump) {
            Completion::Failed { errno, .. } => errno,
            d => panic!("{cmd:?} succeeded: {d:?}"),
        }
    }

    /// Returns once the engine executed everything posted on context `c` before (commands
    /// of a context run in order): an Open, and a Close of what it opened.
    pub fn sync(&mut self, c: u32, pump: &mut dyn FnMut()) {
        let s = self.open(c, pump);
        self.post(
            c,
            Command::Close {
                slot: s,
                abort: false,
            },
        );
    }

    /// Open: a new slot.
    pub fn open(&mut self, c: u32, pump: &mut dyn FnMut()) -> u32 {
        let req = self.req();
        self.ok(c, Command::Open { req }, pump)
    }

    /// Open, Bind(0.0.0.0:port), Listen: a listening slot.
    pub fn listen(&mut self, c: u32, port: u16, pump: &mut dyn FnMut()) -> u32 {
        let slot = self.open(c, pump);
        let req = self.req();
        let bound = self.ok(
            c,
            Command::Bind {
                req,
                slot,
                ip: Ipv4Addr::UNSPECIFIED,
                port,
                reuse: Default::default(),
            },
            pump,
        );
        assert_eq!(bound, port as u32);
        let req = self.req();
        self.ok(
            c,
            Command::Listen {
                req,
                slot,
                backlog: 16,
            },
            pump,
        );
        slot
    }

    /// Open and Connect; returns (slot, local port) once the SYN is queued.
    pub fn connect(
        &mut self,
        c: u32,
        ip: Ipv4Addr,
        port: u16,
        pump: &mut dyn FnMut(),
    ) -> (u32, u16) {
        let slot = self.open(c, pump);
        let req = self.req();
        let local = self.ok(
            c,
            Command::Connect {
                req,
                slot,
                ip,
                port,
            },
            pump,
        );
        (slot, local as u16)
    }

    /// Slot `s`'s block.
    pub fn block(&self, s: u32) -> SocketBlock<'_> {
        SocketBlock::new(&self.region, s).expect("slot in range")
    }

    /// Slot `s`'s flags.
    pub fn flags(&self, s: u32) -> u32 {
        self.block(s).flags().load(Ordering::Acquire)
    }

    /// Waits until slot `s` has any of `want` set.
    pub fn wait_flags(&self, s: u32, want: u32, pump: &mut dyn FnMut()) -> u32 {
        let deadline = Instant::now() + WAIT;
        loop {
            let f = self.flags(s);
            if f & want != 0 {
                return f;
            }
            assert!(
                Instant::now() < deadline,
                "slot {s}: flags {f:#x} never had {want:#x}"
            );
            pump();
        }
    }

    /// Waits for the next accept record on listener `l`.
    pub fn accept(&mut self, c: u32, l: u32, pump: &mut dyn FnMut()) -> AcceptRecord {
        let deadline = Instant::now() + WAIT;
        let b = self.block(l);
        loop {
            let head = b.rx_head().load(Ordering::Relaxed);
            let tail = b.rx_tail().load(Ordering::Acquire);
            if tail >= head + ACCEPT_RECORD_BYTES as u64 {
                let mut rec = [0u8; ACCEPT_RECORD_BYTES];
                self.region.ring(l, Dir::Rx).unwrap().read(head, &mut rec);
                b.rx_head()
                    .store(head + ACCEPT_RECORD_BYTES as u64, Ordering::Release);
                fence(Ordering::SeqCst);
                if b.flags().load(Ordering::Acquire) & flags::RX_STALLED != 0 {
                    self.post(c, Command::Consumed { slot: l });
                }
                return AcceptRecord::decode(&rec);
            }
            assert!(
                Instant::now() < deadline,
                "no connection accepted on slot {l}"
            );
            pump();
        }
    }

    /// Copies as much of `data` as fits into slot `s`'s TX ring and rings Send.
    pub fn write_some(&mut self, c: u32, s: u32, data: &[u8]) -> usize {
        let b = self.block(s);
        let head = b.tx_head().load(Ordering::Acquire);
        let tail = b.tx_tail().load(Ordering::Relaxed);
        let free = self.layout.ring_size as u64 - (tail - head);
        let n = (free as usize).min(data.len());
        if n == 0 {
            return 0;
        }
        self.region
            .ring(s, Dir::Tx)
            .unwrap()
            .write(tail, &data[..n]);
        b.tx_tail().store(tail + n as u64, Ordering::Release);
        self.post(c, Command::Send { slot: s });
        n
    }

    /// Copies what slot `s`'s RX ring holds (up to `buf.len()`), moving rx_head, and sends
    /// Consumed when the engine said it stalled.
    pub fn read_some(&mut self, c: u32, s: u32, buf: &mut [u8]) -> usize {
        let b = self.block(s);
        let head = b.rx_head().load(Ordering::Relaxed);
        let tail = b.rx_tail().load(Ordering::Acquire);
        let n = ((tail - head) as usize).min(buf.len());
        if n > 0 {
            self.region
                .ring(s, Dir::Rx)
                .unwrap()
                .read(head, &mut buf[..n]);
            b.rx_head().store(head + n as u64, Ordering::Release);
        }
        // docs/service.md RX_STALLED: read, fence, then look at the flag.
        fence(Ordering::SeqCst);
        if b.flags().load(Ordering::Acquire) & flags::RX_STALLED != 0 {
            self.post(c, Command::Consumed { slot: s });
        }
        n
    }

    /// Reads slot `s` until the peer's FIN (RX_FIN with the ring empty); panics on ERROR.
    pub fn read_to_fin(&mut self, c: u32, s: u32, pump: &mut dyn FnMut()) -> Vec<u8> {
        let deadline = Instant::now() + WAIT;
        let mut out = Vec::new();
        let mut buf = vec![0u8; self.layout.ring_size as usize];
        loop {
            let n = self.read_some(c, s, &mut buf);
            out.extend_from_slice(&buf[..n]);
            if n > 0 {
                continue;
            }
            let f = self.flags(s);
            assert_eq!(
                f & flags::ERROR,
                0,
                "slot {s} failed after {} bytes",
                out.len()
            );
            let b = self.block(s);
            let empty = b.rx_tail().load(Ordering::Acquire) == b.rx_head().load(Ordering::Relaxed);
            if f & flags::RX_FIN != 0 && empty {
                return out;
            }
            assert!(
                Instant::now() < deadline,
                "no FIN on slot {s} after {} bytes",
                out.len()
            );
            pump();
        }
    }

    /// Writes all of `data` into slot `s`, waiting for room as the engine drains the ring.
    pub fn write_all(&mut self, c: u32, s: u32, data: &[u8], pump: &mut dyn FnMut()) {
        let deadline = Instant::now() + WAIT;
        let mut sent = 0;
        while sent < data.len() {
            let n = self.write_some(c, s, &data[sent..]);
            sent += n;
            if n == 0 {
                assert_eq!(self.flags(s) & flags::ERROR, 0, "slot {s} failed");
                assert!(
                    Instant::now() < deadline,
                    "slot {s}: stuck after {sent} bytes"
                );
                pump();
            }
        }
    }

    /// Waits for a splice report for `handle` on context `c` that satisfies `f`; the reports
    /// met before it stay in [`Client::reports`].
    pub fn report(
        &mut self,
        c: u32,
        handle: u32,
        f: impl Fn(&SpliceReport) -> bool,
        pump: &mut dyn FnMut(),
    ) -> SpliceReport {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(done) = self.take(c) {
                panic!("an unexpected completion {done:?}");
            }
            if let Some(r) = self.reports.iter().find(|r| r.handle == handle && f(r)) {
                return *r;
            }
            assert!(
                Instant::now() < deadline,
                "no such report for splice {handle}: {:?}",
                self.reports
            );
            pump();
        }
    }

    /// Whether the engine's end of the control socket hung up.
    pub fn engine_gone(&self) -> bool {
        peer_gone(self.sock.as_fd())
    }
}
