//! Engine sockets: the application's side of a socket block and its payload rings
//! (docs/service.md "Socket block semantics").
//!
//! The engine writes its line of the block (rx_tail, tx_head, flags, error, event_seq); we
//! write ours (rx_head, tx_tail). Receiving copies out of the RX ring and advances rx_head;
//! sending copies into the TX ring, advances tx_tail and rings the `Send` doorbell. Both
//! are one memcpy because each ring is mapped twice back to back. No call allocates, and
//! none makes a system call unless the engine sleeps (then one eventfd write) or the
//! caller must wait.

use std::io::{IoSlice, IoSliceMut};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sluice_shm::{
    flags, AcceptRecord, Command, Congestion, Dir, Reuse, Ring, Shut, SocketBlock,
    ACCEPT_RECORD_BYTES,
};

use crate::attach::Sluice;
use crate::error::{Error, Op};
use crate::lock::lock;

/// What a socket is ready for, computed from its block (docs/service.md "Readiness").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// A read would not block: bytes, end of stream, an error, or (listener) a connection.
    pub readable: bool,
    /// A write would not block: room in the TX ring, or an error.
    pub writable: bool,
    /// The peer shut its side (EPOLLRDHUP).
    pub rdhup: bool,
    /// Hung up (EPOLLHUP): closed, or both directions shut.
    pub hup: bool,
    /// An error is pending (EPOLLERR).
    pub error: bool,
}

/// The lifecycle step the application took (the engine's view is in the block's flags).
mod phase {
    pub const FRESH: u8 = 0;
    pub const BOUND: u8 = 1;
    pub const LISTENING: u8 = 2;
    pub const CONNECTING: u8 = 3;
    pub const CONNECTED: u8 = 4;
}

/// The application's ring positions (its line of the block, kept privately as well so we
/// never read back what only we write), behind the per-socket lock.
#[derive(Debug, Default)]
pub(crate) struct AppLine {
    pub(crate) rx_head: u64,
    pub(crate) tx_tail: u64,
    /// Length of the last zero-copy TX reservation (what tx_commit may commit).
    pub(crate) tx_reserved: usize,
    /// event_seq when we last sent `Consumed`: while the engine has not answered it (the
    /// sequence did not move), another would say nothing new.
    consumed_seq: Option<u32>,
}

/// An engine socket. Send + Sync: methods take `&self`; an internal per-socket lock
/// serializes the application-side ring positions.
pub struct Socket {
    sluice: Arc<Sluice>,
    /// The engine's slot; replaced only by a connect that moves the socket to another
    /// core's slot (flow_group_move.rs).
    slot: AtomicU32,
    pub(crate) line: Mutex<AppLine>,
    phase: AtomicU8,
    nonblocking: AtomicBool,
    nodelay: AtomicBool,
    /// Teardown offload asked for (accepted sockets inherit their listener's).
    teardown_offload: AtomicBool,
    /// The congestion control chosen by the application (its `Congestion` code; 0: none),
    /// so a move to another core's slot can choose it again.
    pub(crate) congestion_chosen: AtomicU8,
    /// SO_REUSEADDR / SO_REUSEPORT ([`Reuse::bits`]), carried by bind.
    reuse: AtomicU8,
    shut_read: AtomicBool,
    shut_write: AtomicBool,
    /// The pending error was reported (SO_ERROR or a failed call); it is not reported again.
    error_taken: AtomicBool,
    /// SO_LINGER: 0 = off, otherwise the timeout in nanoseconds plus one.
    linger: AtomicU64,
    /// SO_RCVTIMEO / SO_SNDTIMEO in nanoseconds (0 = none, as in Linux).
    read_timeout: AtomicU64,
    write_timeout: AtomicU64,
    /// The address given to bind: bit 48 set, ip << 16 | port.
    pub(crate) bound: AtomicU64,
    /// Set once the socket was released, so drop does not close twice.
    closed: AtomicBool,
    /// A [`crate::TxSlice`] of this socket is alive.
    pub(crate) tx_lent: AtomicBool,
}

impl std::fmt::Debug for Socket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Socket")
            .field("slot", &self.slot())
            .field("phase", &self.phase.load(Ordering::Relaxed))
            .field("readiness", &self.readiness())
            .finish_non_exhaustive()
    }
}

fn duration_to_nanos(d: Option<Duration>) -> u64 {
    d.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn nanos_to_duration(n: u64) -> Option<Duration> {
    (n != 0).then(|| Duration::from_nanos(n))
}

/// Options an accepted socket takes from its listener.
#[derive(Clone, Copy, Debug, Default)]
struct Inherited {
    nodelay: bool,
    teardown_offload: bool,
}

impl Socket {
    /// Opens a new engine socket (the engine allocates a slot).
    pub fn open(sluice: &Arc<Sluice>) -> Result<Socket, Error> {
        sluice.usable()?;
        let (_, slot) = sluice
            .call(|req| Command::Open { req })
            .map_err(|e| e.for_op(Op::Open))?;
        Socket::for_slot(sluice, slot, phase::FRESH, Inherited::default())
    }

    /// A socket for a slot the engine allocated (by Open or by accepting on a listener).
    fn for_slot(
        sluice: &Arc<Sluice>,
        slot: u32,
        phase: u8,
        inherited: Inherited,
    ) -> Result<Socket, Error> {
        let block = SocketBlock::new(&sluice.region, slot).ok_or(Error::Os(libc::EPROTO))?;
        // The engine reset the block for the new slot; start from what it says.
        let line = AppLine {
            rx_head: block.rx_head().load(Ordering::Acquire),
            tx_tail: block.tx_tail().load(Ordering::Acquire),
            ..AppLine::default()
        };
        let sock = Socket {
            sluice: sluice.clone(),
            slot: AtomicU32::new(slot),
            line: Mutex::new(line),
            phase: AtomicU8::new(phase),
            nonblocking: AtomicBool::new(false),
            nodelay: AtomicBool::new(inherited.nodelay),
            teardown_offload: AtomicBool::new(inherited.teardown_offload),
            congestion_chosen: AtomicU8::new(0),
            reuse: AtomicU8::new(0),
            shut_read: AtomicBool::new(false),
            shut_write: AtomicBool::new(false),
            error_taken: AtomicBool::new(false),
            linger: AtomicU64::new(0),
            read_timeout: AtomicU64::new(0),
            write_timeout: AtomicU64::new(0),
            bound: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            tx_lent: AtomicBool::new(false),
        };
        // The rings are mapped when a socket is made, not at attach (issue 23): a refused
        // mapping (vm.max_map_count) closes the slot again and fails this socket only.
        if sluice.region.map_rings(slot).is_err() {
            drop(sock);
            return Err(Error::Os(libc::ENOMEM));
        }
        Ok(sock)
    }

    /// The attachment this socket belongs to.
    pub fn sluice(&self) -> &Arc<Sluice> {
        &self.sluice
    }

    /// The engine's slot number of this socket (for logs). On an engine with several
    /// cores a connect may move the socket to another core's slot (flow_group_move.rs).
    pub fn slot(&self) -> u32 {
        self.slot.load(Ordering::Acquire)
    }

    /// Takes `slot` (an opened one) in place of the socket's: its rings mapped, the
    /// application's positions read from its block. The caller gives up the old one.
    pub(crate) fn take_slot(&self, slot: u32) -> Result<(), Error> {
        let block = SocketBlock::new(&self.sluice.region, slot).ok_or(Error::Os(libc::EPROTO))?;
        if self.sluice.region.map_rings(slot).is_err() {
            let _ = self.sluice.post(Command::Close { slot, abort: true });
            return Err(Error::Os(libc::ENOMEM));
        }
        let mut line = self.lock_line();
        *line = AppLine {
            rx_head: block.rx_head().load(Ordering::Acquire),
            tx_tail: block.tx_tail().load(Ordering::Acquire),
            ..AppLine::default()
        };
        self.slot.store(slot, Ordering::Release);
        Ok(())
    }

    pub(crate) fn block(&self) -> SocketBlock<'_> {
        SocketBlock::new(&self.sluice.region, self.slot()).expect("slot checked at open")
    }

    pub(crate) fn ring(&self, dir: Dir) -> Ring<'_> {
        self.sluice
            .region
            .ring(self.slot(), dir)
            .expect("slot checked at open")
    }

    pub(crate) fn ring_size(&self) -> u64 {
        u64::from(self.sluice.layout.ring_size)
    }

    pub(crate) fn lock_line(&self) -> MutexGuard<'_, AppLine> {
        lock(&self.line)
    }

    pub(crate) fn usable(&self) -> Result<(), Error> {
        self.sluice.usable()
    }

    // ---- setup -------------------------------------------------------------------------

    /// Binds to the engine's address (or 0.0.0.0); port 0 lets the engine pick one.
    pub fn bind(&self, addr: SocketAddrV4) -> Result<(), Error> {
        self.usable()?;
        if self.phase.load(Ordering::Acquire) != phase::FRESH {
            return Err(Error::Os(libc::EINVAL));
        }
        let (_, port) = self
            .sluice
            .call(|req| Command::Bind {
                req,
                slot: self.slot(),
                ip: *addr.ip(),
                port: addr.port(),
                reuse: self.reuse(),
            })
            .map_err(|e| e.for_op(Op::Open))?;
        let packed = 1u64 << 48 | u64::from(u32::from(*addr.ip())) << 16 | u64::from(port as u16);
        self.bound.store(packed, Ordering::Release);
        self.phase.store(phase::BOUND, Ordering::Release);
        Ok(())
    }

    /// Listens (an unbound socket is bound to 0.0.0.0 and a port the engine picks).
    pub fn listen(&self, backlog: u32) -> Result<(), Error> {
        self.usable()?;
        match self.phase.load(Ordering::Acquire) {
            phase::FRESH => self.bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))?,
            phase::BOUND => {}
            // As in Linux, listening again only changes the backlog (the engine's is fixed).
            phase::LISTENING => return Ok(()),
            _ => return Err(Error::Os(libc::EINVAL)),
        }
        self.sluice
            .call(|req| Command::Listen {
                req,
                slot: self.slot(),
                backlog,
            })
            .map_err(|e| e.for_op(Op::Open))?;
        self.phase.store(phase::LISTENING, Ordering::Release);
        Ok(())
    }

    /// Connects. Blocking unless non-blocking, then `Err(InProgress)`; afterwards
    /// `take_error` / readiness tell the outcome. A write timeout that expires first gives
    /// `Err(InProgress)` as well (as Linux does with SO_SNDTIMEO).
    pub fn connect(&self, addr: SocketAddrV4) -> Result<(), Error> {
        self.usable()?;
        match self.phase.load(Ordering::Acquire) {
            phase::FRESH | phase::BOUND => {}
            phase::CONNECTING => {
                let f = self.block().flags().load(Ordering::Acquire);
                if f & flags::CONNECTED != 0 {
                    self.phase.store(phase::CONNECTED, Ordering::Release);
                    return Err(Error::Os(libc::EISCONN));
                }
                if f & flags::ERROR == 0 && self.is_nonblocking() {
                    return Err(Error::Os(libc::EALREADY));
                }
                return self.finish_connect();
            }
            phase::CONNECTED => return Err(Error::Os(libc::EISCONN)),
            _ => return Err(Error::Os(libc::EINVAL)),
        }
        if !self.sluice.is_alive() {
            return Err(Error::Os(libc::ECONNREFUSED));
        }
        let r = self.sluice.call(|req| Command::Connect {
            req,
            slot: self.slot(),
            ip: *addr.ip(),
            port: addr.port(),
        });
        match r {
            // The tuple hashes to another core's flow group (a port bound by hand).
            Err(Error::Os(libc::EXDEV)) if self.sluice.layout.queue_cores > 1 => {
                self.connect_from_another_core(addr).map(|_| ())
            }
            r => r.map(|_| ()),
        }
        .map_err(|e| e.for_op(Op::Open))?;
        self.phase.store(phase::CONNECTING, Ordering::Release);
        if self.is_nonblocking() {
            return Err(Error::InProgress);
        }
        self.finish_connect()
    }

    /// Waits for the handshake's outcome.
    fn finish_connect(&self) -> Result<(), Error> {
        let connected_or_failed =
            || self.block().flags().load(Ordering::Acquire) & (flags::CONNECTED | flags::ERROR);
        loop {
            let f = connected_or_failed();
            if f & flags::CONNECTED != 0 {
                self.phase.store(phase::CONNECTED, Ordering::Release);
                return Ok(());
            }
            if f & flags::ERROR != 0 {
                return Err(self.take_error().unwrap_or(Error::Os(libc::ECONNREFUSED)));
            }
            if !self.sluice.is_alive() {
                return Err(Error::Os(libc::ECONNREFUSED));
            }
            let w = self
                .sluice
                .wait(self.write_timeout(), &mut [], &mut || {
                    connected_or_failed() != 0
                })
                .map_err(|e| e.for_op(Op::Open))?;
            if w.timed_out {
                return Err(Error::InProgress);
            }
        }
    }

    /// Accepts a connection. Blocking unless non-blocking (then `Err(WouldBlock)`); the new
    /// socket is blocking and inherits the listener's TCP_NODELAY.
    pub fn accept(&self) -> Result<(Socket, SocketAddrV4), Error> {
        loop {
            if let Some(r) = self.try_accept()? {
                return Ok(r);
            }
            if self.is_nonblocking() {
                return Err(Error::WouldBlock);
            }
            let w = self
                .sluice
                .wait(self.read_timeout(), &mut [], &mut || {
                    self.readiness().readable
                })
                .map_err(|e| e.for_op(Op::Read))?;
            if w.timed_out {
                return Err(Error::WouldBlock);
            }
        }
    }

    /// One accept record from the listener's RX ring, if there is one.
    fn try_accept(&self) -> Result<Option<(Socket, SocketAddrV4)>, Error> {
        self.usable()?;
        if self.phase.load(Ordering::Acquire) != phase::LISTENING {
            return Err(Error::Os(libc::EINVAL));
        }
        let block = self.block();
        let f = block.flags().load(Ordering::Acquire);
        let mut line = self.lock_line();
        let tail = block.rx_tail().load(Ordering::Acquire);
        if tail.saturating_sub(line.rx_head) >= ACCEPT_RECORD_BYTES as u64 {
            let mut rec = [0u8; ACCEPT_RECORD_BYTES];
            self.ring(Dir::Rx).read(line.rx_head, &mut rec);
            self.advance_rx(&mut line, ACCEPT_RECORD_BYTES as u64);
            drop(line);
            let rec = AcceptRecord::decode(&rec);
            let sock = Socket::for_slot(
                &self.sluice,
                rec.slot,
                phase::CONNECTED,
                Inherited {
                    nodelay: self.nodelay.load(Ordering::Relaxed),
                    teardown_offload: self.teardown_offload.load(Ordering::Relaxed),
                },
            )?;
            return Ok(Some((sock, rec.peer)));
        }
        drop(line);
        if f & flags::ERROR != 0 {
            return Err(self.take_error().unwrap_or(Error::Os(libc::EINVAL)));
        }
        if !self.sluice.is_alive() {
            return Err(Error::Os(libc::ECONNABORTED));
        }
        Ok(None)
    }

    // ---- data --------------------------------------------------------------------------

    /// Sends; blocking unless non-blocking (then `Err(WouldBlock)` when nothing fits). A
    /// blocking send returns once every byte is in the TX ring (or a timeout or error cut it
    /// short after some bytes: then the count so far). EPIPE after shutdown.
    pub fn send(&self, data: &[u8]) -> Result<usize, Error> {
        self.send_vectored(&[IoSlice::new(data)])
    }

    /// Like [`Socket::send`], gathering from several buffers.
    pub fn send_vectored(&self, bufs: &[IoSlice<'_>]) -> Result<usize, Error> {
        self.send_with(bufs, self.is_nonblocking())
    }

    /// Sends what fits now, never blocking regardless of the socket's mode (MSG_DONTWAIT).
    pub fn send_nonblocking(&self, data: &[u8]) -> Result<usize, Error> {
        self.send_with(&[IoSlice::new(data)], true)
    }

    fn send_with(&self, bufs: &[IoSlice<'_>], nonblocking: bool) -> Result<usize, Error> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let mut sent = 0;
        loop {
            match self.try_send(bufs, sent) {
                Ok(Some(n)) => {
                    sent += n;
                    if sent >= total {
                        return Ok(sent);
                    }
                }
                Ok(None) => {}
                Err(e) if sent > 0 => {
                    // Report the bytes that went; the error shows on the next call.
                    let _ = e;
                    return Ok(sent);
                }
                Err(e) => return Err(e.for_op(Op::Write)),
            }
            if nonblocking {
                return if sent > 0 {
                    Ok(sent)
                } else {
                    Err(Error::WouldBlock)
                };
            }
            let w = self.sluice.wait(self.write_timeout(), &mut [], &mut || {
                self.readiness().writable
            });
            match w {
                Ok(w) if w.timed_out => {
                    return if sent > 0 {
                        Ok(sent)
                    } else {
                        Err(Error::WouldBlock)
                    }
                }
                Ok(_) => {}
                Err(_) if sent > 0 => return Ok(sent),
                Err(e) => return Err(e.for_op(Op::Write)),
            }
        }
    }

    /// Checks that the socket may send now: Ok(false) if it must wait for the handshake.
    pub(crate) fn send_allowed(&self) -> Result<bool, Error> {
        self.usable()?;
        let f = self.block().flags().load(Ordering::Acquire);
        if f & flags::SPLICED != 0 {
            // The connection is the splice stage's now.
            return Err(Error::Os(libc::EBADFD));
        }
        if self.shut_write.load(Ordering::Relaxed) {
            return Err(Error::Os(libc::EPIPE));
        }
        let f = self.block().flags().load(Ordering::Acquire);
        if f & flags::ERROR != 0 {
            // The first call after a reset reports it (ECONNRESET), later ones EPIPE.
            return Err(self.take_error().unwrap_or(Error::Os(libc::EPIPE)));
        }
        if f & flags::TX_SHUT != 0 || !self.sluice.is_alive() {
            return Err(Error::Os(libc::EPIPE));
        }
        if f & flags::CONNECTED == 0 {
            if f & flags::CONNECTING != 0 || self.phase.load(Ordering::Acquire) == phase::CONNECTING
            {
                return Ok(false);
            }
            return Err(Error::Os(libc::ENOTCONN));
        }
        Ok(true)
    }

    /// Copies what fits of `bufs` (skipping the first `skip` bytes) into the TX ring.
    /// Ok(None) when nothing fits yet.
    fn try_send(&self, bufs: &[IoSlice<'_>], skip: usize) -> Result<Option<usize>, Error> {
        if !self.send_allowed()? {
            return Ok(None);
        }
        let want: usize = bufs.iter().map(|b| b.len()).sum::<usize>() - skip;
        if want == 0 {
            return Ok(Some(0));
        }
        let block = self.block();
        let size = self.ring_size();
        let mut line = self.lock_line();
        if self.tx_lent.load(Ordering::Acquire) {
            // A live TxSlice lends the free space as `&mut [u8]`: writing there now would
            // alias it (checked under the line lock, which tx_slice also takes).
            return Err(Error::Os(libc::EBUSY));
        }
        let head = block.tx_head().load(Ordering::Acquire);
        let free = size - line.tx_tail.saturating_sub(head).min(size);
        if free == 0 {
            return Ok(None);
        }
        let ring = self.ring(Dir::Tx);
        let mut room = free.min(want as u64) as usize;
        let mut pos = line.tx_tail;
        let mut skip = skip;
        for b in bufs {
            if room == 0 {
                break;
            }
            if skip >= b.len() {
                skip -= b.len();
                continue;
            }
            let part = &b[skip..];
            skip = 0;
            let n = part.len().min(room);
            ring.write(pos, &part[..n]);
            pos += n as u64;
            room -= n;
        }
        let n = (pos - line.tx_tail) as usize;
        self.commit_tx(&mut line, n as u64);
        drop(line);
        // The bytes are in the ring; if the doorbell cannot be posted the engine is gone
        // and the next call says so.
        let _ = self.sluice.post(Command::Send { slot: self.slot() });
        Ok(Some(n))
    }

    /// Publishes `n` more bytes of the TX ring (the caller posts the Send doorbell).
    pub(crate) fn commit_tx(&self, line: &mut AppLine, n: u64) {
        line.tx_tail += n;
        line.tx_reserved = 0;
        self.block()
            .tx_tail()
            .store(line.tx_tail, Ordering::Release);
    }

    /// Receives; blocking unless non-blocking (then `Err(WouldBlock)` when nothing is
    /// there). Ok(0) is the end of the stream.
    pub fn recv(&self, buf: &mut [u8]) -> Result<usize, Error> {
        self.recv_with(&mut [IoSliceMut::new(buf)], self.is_nonblocking(), false)
    }

    /// Like [`Socket::recv`], scattering into several buffers.
    pub fn recv_vectored(&self, bufs: &mut [IoSliceMut<'_>]) -> Result<usize, Error> {
        self.recv_with(bufs, self.is_nonblocking(), false)
    }

    /// Copies the readable bytes without consuming them (MSG_PEEK).
    pub fn peek(&self, buf: &mut [u8]) -> Result<usize, Error> {
        self.recv_with(&mut [IoSliceMut::new(buf)], self.is_nonblocking(), true)
    }

    /// Receives what is there, never blocking regardless of the socket's mode (MSG_DONTWAIT).
    pub fn recv_nonblocking(&self, buf: &mut [u8]) -> Result<usize, Error> {
        self.recv_with(&mut [IoSliceMut::new(buf)], true, false)
    }

    /// [`Socket::peek`] that never blocks (MSG_PEEK | MSG_DONTWAIT).
    pub fn peek_nonblocking(&self, buf: &mut [u8]) -> Result<usize, Error> {
        self.recv_with(&mut [IoSliceMut::new(buf)], true, true)
    }

    fn recv_with(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        nonblocking: bool,
        peek: bool,
    ) -> Result<usize, Error> {
        loop {
            match self.try_recv(bufs, peek) {
                Ok(Some(n)) => return Ok(n),
                Ok(None) => {}
                Err(e) => return Err(e.for_op(Op::Read)),
            }
            if nonblocking {
                return Err(Error::WouldBlock);
            }
            let w = self
                .sluice
                .wait(self.read_timeout(), &mut [], &mut || {
                    self.readiness().readable
                })
                .map_err(|e| e.for_op(Op::Read))?;
            if w.timed_out {
                return Err(Error::WouldBlock);
            }
        }
    }

    /// What a read finds when no bytes are readable: Ok(Some(0)) at the end of the stream,
    /// an error, or Ok(None) when it must wait.
    pub(crate) fn rx_empty_outcome(&self, f: u32) -> Result<Option<usize>, Error> {
        if f & flags::ERROR != 0 {
            if f & flags::RX_STALLED != 0 && self.sluice.is_alive() {
                // The engine still holds bytes that arrived before the error (the ring was
                // full): they are read first, as on Linux; it places them on `Consumed`.
                return Ok(None);
            }
            // Reported once (ECONNRESET, ...), then the stream reads as ended.
            return match self.take_error() {
                Some(e) => Err(e),
                None => Ok(Some(0)),
            };
        }
        // Only RX_FIN ends the stream: CLOSED can come while the engine still holds
        // received bytes it could not place yet (the ring was full).
        if f & flags::RX_FIN != 0 {
            return Ok(Some(0));
        }
        if !self.sluice.is_alive() {
            return Err(Error::Os(libc::ECONNRESET));
        }
        if f & (flags::CONNECTED | flags::CONNECTING | flags::CLOSED) != 0
            || self.phase.load(Ordering::Acquire) == phase::CONNECTING
        {
            return Ok(None);
        }
        Err(Error::Os(libc::ENOTCONN))
    }

    /// Checks that the socket may read: Err for listeners, Ok(false) after shutdown(Read).
    pub(crate) fn recv_allowed(&self) -> Result<bool, Error> {
        self.usable()?;
        if self.block().flags().load(Ordering::Acquire) & flags::SPLICED != 0 {
            return Err(Error::Os(libc::EBADFD));
        }
        if self.phase.load(Ordering::Acquire) == phase::LISTENING {
            return Err(Error::Os(libc::ENOTCONN));
        }
        Ok(!self.shut_read.load(Ordering::Relaxed))
    }

    fn try_recv(&self, bufs: &mut [IoSliceMut<'_>], peek: bool) -> Result<Option<usize>, Error> {
        if !self.recv_allowed()? {
            return Ok(Some(0));
        }
        let want: usize = bufs.iter().map(|b| b.len()).sum();
        if want == 0 {
            return Ok(Some(0));
        }
        let block = self.block();
        // Flags before rx_tail: the engine publishes the last bytes before RX_FIN, so a FIN
        // seen here means the tail read next is final (no bytes lost to an early EOF).
        let f = block.flags().load(Ordering::Acquire);
        let mut line = self.lock_line();
        let tail = block.rx_tail().load(Ordering::Acquire);
        let avail = tail.saturating_sub(line.rx_head).min(self.ring_size());
        if avail == 0 {
            drop(line);
            return self.rx_empty_outcome(f);
        }
        let ring = self.ring(Dir::Rx);
        let mut left = avail.min(want as u64) as usize;
        let mut pos = line.rx_head;
        for b in bufs.iter_mut() {
            if left == 0 {
                break;
            }
            let n = b.len().min(left);
            ring.read(pos, &mut b[..n]);
            pos += n as u64;
            left -= n;
        }
        let n = pos - line.rx_head;
        if !peek {
            self.advance_rx(&mut line, n);
        }
        Ok(Some(n as usize))
    }

    /// Releases `n` bytes of the RX ring to the engine, and sends `Consumed` if the engine
    /// stalled on a full ring.
    pub(crate) fn advance_rx(&self, line: &mut AppLine, n: u64) {
        if n == 0 {
            return;
        }
        let block = self.block();
        line.rx_head += n;
        block.rx_head().store(line.rx_head, Ordering::Release);
        // Pairs with the engine's fence between setting RX_STALLED and re-reading rx_head:
        // either it sees our new head, or we see its flag and tell it.
        fence(Ordering::SeqCst);
        if block.flags().load(Ordering::Relaxed) & flags::RX_STALLED != 0 {
            let seq = block.event_seq().load(Ordering::Acquire);
            if line.consumed_seq != Some(seq) {
                line.consumed_seq = Some(seq);
                let _ = self.sluice.post(Command::Consumed { slot: self.slot() });
            }
        }
    }

    // ---- teardown ----------------------------------------------------------------------

    /// Shuts down a direction. Write/Both queue a FIN after the bytes already sent; Read
    /// makes later reads return end of stream.
    pub fn shutdown(&self, how: Shutdown) -> Result<(), Error> {
        self.usable()?;
        let f = self.block().flags().load(Ordering::Acquire);
        if f & (flags::CONNECTED | flags::CONNECTING) == 0
            && self.phase.load(Ordering::Acquire) != phase::CONNECTED
        {
            return Err(Error::Os(libc::ENOTCONN));
        }
        if matches!(how, Shutdown::Read | Shutdown::Both) {
            self.shut_read.store(true, Ordering::Relaxed);
        }
        if how == Shutdown::Read {
            // Nothing goes on the wire for SHUT_RD (as in Linux).
            return Ok(());
        }
        self.shut_write.store(true, Ordering::Relaxed);
        let how = if how == Shutdown::Both {
            Shut::Both
        } else {
            Shut::Write
        };
        match self.sluice.call(|req| Command::Shutdown {
            req,
            slot: self.slot(),
            how,
        }) {
            Ok(_) => Ok(()),
            // The connection is gone with the engine: nothing is left to shut.
            Err(Error::EngineGone) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Releases the socket (also on drop): graceful, or a reset if linger is `Some(0)`.
    /// In a forked child it only forgets the socket (the parent keeps it).
    pub fn close(self) {}

    fn release(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        if self.sluice.inherited() || !self.sluice.is_alive() {
            return;
        }
        let abort = self.linger() == Some(Duration::ZERO);
        let _ = self.sluice.post(Command::Close {
            slot: self.slot(),
            abort,
        });
    }

    // ---- options -----------------------------------------------------------------------

    /// O_NONBLOCK.
    pub fn set_nonblocking(&self, on: bool) {
        self.nonblocking.store(on, Ordering::Relaxed);
    }

    /// Whether O_NONBLOCK is set.
    pub fn is_nonblocking(&self) -> bool {
        self.nonblocking.load(Ordering::Relaxed)
    }

    /// TCP_NODELAY (Nagle off); the engine remembers it before the connection exists.
    pub fn set_nodelay(&self, on: bool) -> Result<(), Error> {
        self.usable()?;
        self.nodelay.store(on, Ordering::Relaxed);
        match self.sluice.call(|req| Command::SetNoDelay {
            req,
            slot: self.slot(),
            nodelay: on,
        }) {
            // As in Linux, an option on a dead connection is still set.
            Ok(_) | Err(Error::EngineGone) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Whether TCP_NODELAY is set.
    pub fn nodelay(&self) -> bool {
        self.nodelay.load(Ordering::Relaxed)
    }

    /// SO_REUSEADDR: set before bind, a port may be bound by other sockets of the same uid
    /// that set it too (only one of them may listen). Carried by bind; no engine call.
    pub fn set_reuse_address(&self, on: bool) {
        self.set_reuse(Reuse {
            addr: on,
            ..self.reuse()
        });
    }

    /// SO_REUSEPORT: set before bind, sockets of the same uid that all set it share the
    /// port, and their listeners share its connections (the engine picks one per 4-tuple).
    pub fn set_reuse_port(&self, on: bool) {
        self.set_reuse(Reuse {
            port: on,
            ..self.reuse()
        });
    }

    /// Both reuse options at once.
    pub fn set_reuse(&self, reuse: Reuse) {
        self.reuse.store(reuse.bits(), Ordering::Relaxed);
    }

    /// SO_REUSEADDR and SO_REUSEPORT as set.
    pub fn reuse(&self) -> Reuse {
        Reuse::from_bits(self.reuse.load(Ordering::Relaxed)).unwrap_or_default()
    }

    /// Asks for this socket's close to be offloaded to the engine's teardown stage
    /// (AccelTCP 4.2; advisory): when the application closes, the engine's stage sends the
    /// rest of the data and the FIN, retransmits and keeps TIME-WAIT in a 32-byte record,
    /// and the connection's slot is freed at once. Closes that do not qualify (data beyond
    /// the send window, stage full) take the normal path. Set on a listener, accepted
    /// sockets inherit it; before connect, the engine remembers it.
    pub fn set_teardown_offload(&self, on: bool) -> Result<(), Error> {
        self.usable()?;
        self.teardown_offload.store(on, Ordering::Relaxed);
        match self.sluice.call(|req| Command::SetTeardownOffload {
            req,
            slot: self.slot(),
            on,
        }) {
            Ok(_) | Err(Error::EngineGone) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Whether teardown offload is asked for.
    pub fn teardown_offload(&self) -> bool {
        self.teardown_offload.load(Ordering::Relaxed)
    }

    /// TCP_CONGESTION by name ("dctcp", "timely", "reno"/"newreno", "cubic"; ASCII
    /// case-insensitive, NUL padding ignored): ENOENT for a name the engine does not run,
    /// as Linux answers for an unknown algorithm. Before connect or listen the engine
    /// remembers it (and it decides whether the SYN asks for ECN); accepted connections
    /// inherit their listener's.
    pub fn set_congestion_control(&self, name: &str) -> Result<(), Error> {
        let algorithm = Congestion::from_name(name.as_bytes()).ok_or(Error::Os(libc::ENOENT))?;
        self.set_congestion(algorithm)
    }

    /// [`Socket::set_congestion_control`] with the algorithm already parsed.
    pub fn set_congestion(&self, algorithm: Congestion) -> Result<(), Error> {
        self.usable()?;
        self.sluice
            .call(|req| Command::SetCongestion {
                req,
                slot: self.slot(),
                algorithm,
            })
            .map(|_| ())?;
        self.congestion_chosen
            .store(algorithm.code(), Ordering::Relaxed);
        Ok(())
    }

    /// The socket's congestion-control algorithm as the engine reports it (its default
    /// until one is chosen), read from the socket block without a round trip.
    pub fn congestion(&self) -> Result<Congestion, Error> {
        self.usable()?;
        // An engine that never wrote one speaks an older contract.
        self.block().congestion().ok_or(Error::Os(libc::EPROTO))
    }

    /// The name of [`Socket::congestion`] (Linux's spelling, what getsockopt returns).
    pub fn congestion_control(&self) -> Result<&'static str, Error> {
        self.congestion().map(Congestion::name)
    }

    /// SO_LINGER: `Some(Duration::ZERO)` makes close reset the connection. (The engine
    /// closes gracefully in the background otherwise; close never blocks.)
    pub fn set_linger(&self, linger: Option<Duration>) {
        let v = linger.map_or(0, |d| duration_to_nanos(Some(d)).saturating_add(1));
        self.linger.store(v, Ordering::Relaxed);
    }

    /// SO_LINGER's value.
    pub fn linger(&self) -> Option<Duration> {
        match self.linger.load(Ordering::Relaxed) {
            0 => None,
            v => Some(Duration::from_nanos(v - 1)),
        }
    }

    /// SO_RCVTIMEO (None or zero: wait forever).
    pub fn set_read_timeout(&self, t: Option<Duration>) {
        self.read_timeout
            .store(duration_to_nanos(t), Ordering::Relaxed);
    }

    /// SO_SNDTIMEO (None or zero: wait forever); also bounds a blocking connect.
    pub fn set_write_timeout(&self, t: Option<Duration>) {
        self.write_timeout
            .store(duration_to_nanos(t), Ordering::Relaxed);
    }

    /// SO_RCVTIMEO's value.
    pub fn read_timeout(&self) -> Option<Duration> {
        nanos_to_duration(self.read_timeout.load(Ordering::Relaxed))
    }

    /// SO_SNDTIMEO's value.
    pub fn write_timeout(&self) -> Option<Duration> {
        nanos_to_duration(self.write_timeout.load(Ordering::Relaxed))
    }

    // ---- state -------------------------------------------------------------------------

    /// The local address: what the engine recorded, else what bind was given, else
    /// 0.0.0.0:0 (as getsockname on an unbound socket).
    pub fn local_addr(&self) -> Result<SocketAddrV4, Error> {
        self.usable()?;
        let recorded = self.block().local_addr();
        if recorded.port() != 0 {
            return Ok(recorded);
        }
        let b = self.bound.load(Ordering::Acquire);
        if b & 1 << 48 != 0 {
            return Ok(SocketAddrV4::new(
                Ipv4Addr::from((b >> 16) as u32),
                b as u16,
            ));
        }
        Ok(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))
    }

    /// The peer's address; ENOTCONN unless connected (or connecting).
    pub fn peer_addr(&self) -> Result<SocketAddrV4, Error> {
        self.usable()?;
        let block = self.block();
        let f = block.flags().load(Ordering::Acquire);
        let p = self.phase.load(Ordering::Acquire);
        let connected = f & flags::CONNECTED != 0 || p == phase::CONNECTED;
        let peer = block.peer_addr();
        if connected && peer.port() != 0 {
            Ok(peer)
        } else {
            Err(Error::Os(libc::ENOTCONN))
        }
    }

    /// SO_ERROR: the pending error, cleared by reading it.
    pub fn take_error(&self) -> Option<Error> {
        if self.sluice.inherited() {
            return None;
        }
        let block = self.block();
        let f = block.flags().load(Ordering::Acquire);
        if f & flags::ERROR != 0 {
            if self.error_taken.swap(true, Ordering::AcqRel) {
                return None;
            }
            let e = block.error().load(Ordering::Acquire) as i32;
            return Some(Error::Os(if e > 0 { e } else { libc::EIO }));
        }
        if !self.sluice.is_alive()
            && self.phase.load(Ordering::Acquire) >= phase::CONNECTING
            && !self.error_taken.swap(true, Ordering::AcqRel)
        {
            return Some(Error::Os(libc::ECONNRESET));
        }
        None
    }

    /// What the socket is ready for (lock-free: atomics of the block only).
    pub fn readiness(&self) -> Readiness {
        if self.sluice.inherited() || !self.sluice.is_alive() {
            // Every event, so that waiters wake and their calls fail at once.
            return Readiness {
                readable: true,
                writable: true,
                rdhup: true,
                hup: true,
                error: true,
            };
        }
        let block = self.block();
        let f = block.flags().load(Ordering::Acquire);
        let rx_tail = block.rx_tail().load(Ordering::Acquire);
        // Our own line: Relaxed suffices, only this process writes it.
        let rx_head = block.rx_head().load(Ordering::Relaxed);
        let tx_tail = block.tx_tail().load(Ordering::Relaxed);
        let tx_head = block.tx_head().load(Ordering::Acquire);
        readiness_of(ReadinessInput {
            flags: f,
            rx_tail,
            rx_head,
            tx_tail,
            tx_head,
            ring_size: self.ring_size(),
            listener: self.phase.load(Ordering::Relaxed) == phase::LISTENING,
            shut_read: self.shut_read.load(Ordering::Relaxed),
            error_taken: self.error_taken.load(Ordering::Relaxed),
        })
    }

    /// Changes whenever the engine changed the socket (for edge-triggered epoll); it also
    /// changes once when the engine dies.
    pub fn event_seq(&self) -> u32 {
        if self.sluice.inherited() {
            return 0;
        }
        let seq = self.block().event_seq().load(Ordering::Acquire);
        if self.sluice.is_alive() {
            seq
        } else {
            seq.wrapping_add(1 << 31)
        }
    }

    /// Readable bytes (FIONREAD); 0 for a listener.
    pub fn available(&self) -> usize {
        if self.sluice.inherited() || self.is_listener() {
            return 0;
        }
        let block = self.block();
        let tail = block.rx_tail().load(Ordering::Acquire);
        let head = block.rx_head().load(Ordering::Relaxed);
        tail.saturating_sub(head).min(self.ring_size()) as usize
    }

    /// Whether the socket listens.
    pub fn is_listener(&self) -> bool {
        self.phase.load(Ordering::Relaxed) == phase::LISTENING
    }

    /// Whether the connection is established (the engine's CONNECTED flag).
    pub fn is_connected(&self) -> bool {
        !self.sluice.inherited()
            && self.block().flags().load(Ordering::Acquire) & flags::CONNECTED != 0
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        self.release();
    }
}

/// Everything readiness depends on (a pure function of it, for tests).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ReadinessInput {
    pub flags: u32,
    pub rx_tail: u64,
    pub rx_head: u64,
    pub tx_tail: u64,
    pub tx_head: u64,
    pub ring_size: u64,
    pub listener: bool,
    pub shut_read: bool,
    pub error_taken: bool,
}

/// docs/service.md "Readiness as the application computes it".
pub(crate) fn readiness_of(i: ReadinessInput) -> Readiness {
    let has = |bit: u32| i.flags & bit != 0;
    let error = has(flags::ERROR);
    let unread = i.rx_tail.saturating_sub(i.rx_head);
    if i.listener {
        return Readiness {
            readable: unread >= ACCEPT_RECORD_BYTES as u64 || error,
            writable: false,
            rdhup: false,
            hup: has(flags::CLOSED),
            error: error && !i.error_taken,
        };
    }
    let queued = i.tx_tail.saturating_sub(i.tx_head);
    // An error with bytes still held by the engine (RX_STALLED) is read after them.
    let error_readable = error && !has(flags::RX_STALLED);
    Readiness {
        readable: unread > 0 || has(flags::RX_FIN) || error_readable || i.shut_read,
        writable: (has(flags::CONNECTED) && !has(flags::TX_SHUT) && queued < i.ring_size) || error,
        rdhup: has(flags::RX_FIN),
        // CLOSED alone is not a hang-up yet: the engine may still hold received bytes it
        // had no room for, and (as in Linux) POLLHUP must not come before them.
        hup: (has(flags::CLOSED) && (has(flags::RX_FIN) || error))
            || (has(flags::RX_FIN) && has(flags::TX_SHUT)),
        error: error && !i.error_taken,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RING: u64 = 4096;

    fn input(flags: u32) -> ReadinessInput {
        ReadinessInput {
            flags,
            ring_size: RING,
            ..ReadinessInput::default()
        }
    }

    #[test]
    fn a_connected_socket_is_writable_until_its_ring_is_full() {
        let c = flags::ALLOCATED | flags::CONNECTED;
        let r = readiness_of(input(c));
        assert!(r.writable && !r.readable && !r.hup && !r.error);
        let full = ReadinessInput {
            tx_tail: 10 * RING + 5,
            tx_head: 9 * RING + 5,
            ..input(c)
        };
        assert!(!readiness_of(full).writable);
        let one_free = ReadinessInput {
            tx_head: 9 * RING + 6,
            ..full
        };
        assert!(readiness_of(one_free).writable);
        assert!(!readiness_of(input(c | flags::TX_SHUT)).writable);
        assert!(!readiness_of(input(flags::ALLOCATED | flags::CONNECTING)).writable);
    }

    #[test]
    fn bytes_fin_and_errors_are_readable() {
        let c = flags::ALLOCATED | flags::CONNECTED;
        let data = ReadinessInput {
            rx_tail: 1 << 40,
            rx_head: (1 << 40) - 1,
            ..input(c)
        };
        assert!(readiness_of(data).readable);
        let fin = readiness_of(input(c | flags::RX_FIN));
        assert!(fin.readable && fin.rdhup && !fin.hup);
        let both = readiness_of(input(c | flags::RX_FIN | flags::TX_SHUT));
        assert!(both.hup);
        let err = readiness_of(input(flags::ALLOCATED | flags::ERROR));
        assert!(err.readable && err.writable && err.error);
        let taken = readiness_of(ReadinessInput {
            error_taken: true,
            ..input(flags::ALLOCATED | flags::ERROR)
        });
        assert!(taken.readable && !taken.error);
        assert!(readiness_of(input(flags::ALLOCATED | flags::CLOSED | flags::RX_FIN)).hup);
        assert!(readiness_of(input(flags::ALLOCATED | flags::CLOSED | flags::ERROR)).hup);
        let held = readiness_of(input(flags::ALLOCATED | flags::ERROR | flags::RX_STALLED));
        assert!(
            !held.readable && held.writable && held.error,
            "an error with bytes still to come is not readable yet"
        );
        let early = readiness_of(input(flags::ALLOCATED | flags::CONNECTED | flags::CLOSED));
        assert!(
            !early.hup && !early.readable,
            "CLOSED before the last bytes are placed is neither"
        );
        assert!(
            readiness_of(ReadinessInput {
                shut_read: true,
                ..input(c)
            })
            .readable
        );
    }

    #[test]
    fn a_listener_is_readable_with_a_whole_accept_record() {
        let l = ReadinessInput {
            listener: true,
            rx_tail: 15,
            ..input(flags::ALLOCATED | flags::LISTENING)
        };
        assert!(!readiness_of(l).readable);
        assert!(readiness_of(ReadinessInput { rx_tail: 16, ..l }).readable);
        assert!(!readiness_of(ReadinessInput { rx_tail: 16, ..l }).writable);
    }

    #[test]
    fn an_engine_that_goes_backwards_is_not_readable() {
        // The application trusts the engine, but a position behind ours must not underflow.
        let r = readiness_of(ReadinessInput {
            rx_tail: 5,
            rx_head: 10,
            tx_tail: 3,
            tx_head: 7,
            ..input(flags::ALLOCATED | flags::CONNECTED)
        });
        assert!(!r.readable && r.writable);
    }

    #[test]
    fn durations_round_trip_through_their_atomics() {
        assert_eq!(nanos_to_duration(duration_to_nanos(None)), None);
        let d = Duration::from_millis(1500);
        assert_eq!(nanos_to_duration(duration_to_nanos(Some(d))), Some(d));
        assert_eq!(
            nanos_to_duration(duration_to_nanos(Some(Duration::ZERO))),
            None
        );
    }
}
