//! An MTP endpoint (docs/mtp.md "Messages in service mode"): a bound port with its send,
//! receive and completion queues, and one registered arena of memory holding a slot per
//! message in flight and a buffer per posted receive.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddrV4;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_shm::control::{Reply, Request};
use sluice_shm::mtp::{MtpCqe, MtpReply, MtpRequest, RecvEntry, SendEntry};
use sluice_shm::{Command, Consumer, Payload, Producer};

use crate::attach::Sluice;
use crate::lock::lock;
use crate::mtp::error::MtpError;
use crate::verbs::remap;

/// Marks a receive buffer's cookie (send cookies are the ids `send_message` returns).
pub(super) const RECV_COOKIE: u64 = 1 << 63;

/// How many messages an endpoint keeps in flight and how many buffers it posts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointConfig {
    /// Messages sent and not yet completed at most (a slot of `max_message` bytes each).
    pub send_slots: usize,
    /// Receive buffers kept posted (of the engine's `max_message` bytes each).
    pub recv_buffers: usize,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            send_slots: 8,
            recv_buffers: 8,
        }
    }
}

/// A whole received message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// The sender's address and port.
    pub src: SocketAddrV4,
    /// The sender's message id.
    pub msg_id: u32,
    /// Its priority.
    pub priority: u8,
    /// Its traffic class.
    pub tc: u8,
    /// Its bytes.
    pub data: Vec<u8>,
}

pub(super) struct Inner {
    pub(super) sq: Producer,
    pub(super) rq: Producer,
    pub(super) cq: Consumer,
    /// Free send slots.
    pub(super) free: Vec<usize>,
    /// Send ids in flight to their slots.
    pub(super) in_flight: HashMap<u64, usize>,
    pub(super) next_id: u32,
    /// Send completions (and error completions of buffers) not yet taken (bounded: the
    /// oldest go past [`MAX_COMPLETIONS`], counted).
    pub(super) completions: VecDeque<MtpCqe>,
    pub(super) dropped: u64,
    /// Messages placed in buffers, not yet taken: (buffer, completion). A buffer is posted
    /// again only when its message is taken, so the engine holds the rest (bounded).
    pub(super) received: VecDeque<(usize, MtpCqe)>,
}

/// Completions kept untaken at most.
const MAX_COMPLETIONS: usize = 4096;

impl Inner {
    pub(super) fn complete(&mut self, c: MtpCqe) {
        if self.completions.len() >= MAX_COMPLETIONS {
            self.completions.pop_front();
            self.dropped += 1;
        }
        self.completions.push_back(c);
    }
}

/// A bound MTP endpoint. Dropping it unbinds it and frees its memory.
pub struct Endpoint {
    pub(super) sluice: Arc<Sluice>,
    pub(super) ep: u32,
    pub(super) port: u16,
    pub(super) cq_queue: u32,
    pub(super) max_message: usize,
    pub(super) slots: usize,
    pub(super) key: u32,
    pub(super) arena: (usize, usize),
    pub(super) event_fd: OwnedFd,
    pub(super) inner: Mutex<Inner>,
}

fn call(
    sluice: &Sluice,
    req: MtpRequest,
    fds: &[std::os::fd::BorrowedFd<'_>],
) -> Result<MtpReply, MtpError> {
    let (reply, _): (Reply, Vec<OwnedFd>) = sluice.control_call(&Request::Mtp(req), fds)?;
    match reply {
        Reply::Mtp(MtpReply::Failed { errno }) => Err(MtpError::Refused(errno)),
        Reply::Mtp(r) => Ok(r),
        Reply::Refused { reason } => Err(MtpError::NoMtp(reason)),
        other => Err(MtpError::Protocol(format!("{other:?} to {req:?}"))),
    }
}

fn eventfd() -> Result<OwnedFd, MtpError> {
    // SAFETY: eventfd takes no pointers; a descriptor it returns is ours alone.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(MtpError::Os(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        ));
    }
    // SAFETY: fd is a new descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Endpoint {
    /// Binds MTP port `port` (0: an ephemeral one) with the default [`EndpointConfig`].
    pub fn bind(sluice: &Arc<Sluice>, port: u16) -> Result<Endpoint, MtpError> {
        Endpoint::bind_with(sluice, port, EndpointConfig::default())
    }

    /// Binds MTP port `port` (0: ephemeral) with `cfg`.
    pub fn bind_with(
        sluice: &Arc<Sluice>,
        port: u16,
        cfg: EndpointConfig,
    ) -> Result<Endpoint, MtpError> {
        if cfg.send_slots == 0 || cfg.recv_buffers == 0 {
            return Err(MtpError::Os(libc::EINVAL));
        }
        let event_fd = eventfd()?;
        let req = MtpRequest::Bind { port, token: 1 };
        let MtpReply::Bound {
            ep,
            port,
            sq,
            rq,
            cq,
            max_message,
        } = call(sluice, req, &[event_fd.as_fd()])?
        else {
            return Err(MtpError::Protocol("Bind not answered with Bound".into()));
        };
        let unbind = || {
            let _ = call(sluice, MtpRequest::Unbind { ep }, &[]);
        };
        let queues = (
            Producer::verbs(sluice.region.clone(), sq),
            Producer::verbs(sluice.region.clone(), rq),
            Consumer::verbs(sluice.region.clone(), cq),
        );
        let (Some(sqp), Some(rqp), Some(cqc)) = queues else {
            unbind();
            return Err(MtpError::Protocol(format!(
                "queues {sq}/{rq}/{cq} out of range"
            )));
        };
        let max = (max_message as usize).max(1);
        let slots = cfg.send_slots + cfg.recv_buffers;
        let len = max.checked_mul(slots).ok_or(MtpError::Os(libc::ENOMEM))?;
        let (addr, mapped, memfd) = remap::alloc(len).inspect_err(|_| unbind())?;
        let reg = MtpRequest::RegMem {
            addr: addr as u64,
            len: len as u64,
            file_offset: 0,
        };
        let key = match call(sluice, reg, &[memfd.as_fd()]) {
            Ok(MtpReply::Mem { key }) => key,
            other => {
                remap::free(addr, mapped);
                unbind();
                return Err(other
                    .err()
                    .unwrap_or_else(|| MtpError::Protocol("RegMem not answered with Mem".into())));
            }
        };
        let e = Endpoint {
            sluice: sluice.clone(),
            ep,
            port,
            cq_queue: cq,
            max_message: max,
            slots: cfg.send_slots,
            key,
            arena: (addr, mapped),
            event_fd,
            inner: Mutex::new(Inner {
                sq: sqp,
                rq: rqp,
                cq: cqc,
                free: (0..cfg.send_slots).rev().collect(),
                in_flight: HashMap::new(),
                next_id: 1,
                completions: VecDeque::new(),
                dropped: 0,
                received: VecDeque::new(),
            }),
        };
        {
            let mut inner = lock(&e.inner);
            for b in 0..cfg.recv_buffers {
                e.post_buffer(&mut inner, b)?;
            }
        }
        e.doorbell()?;
        Ok(e)
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The engine's handle for it (what its doorbells name).
    pub fn handle(&self) -> u32 {
        self.ep
    }

    /// The longest message it sends or receives.
    pub fn max_message(&self) -> usize {
        self.max_message
    }

    /// The registered arena: its key, first address and length (for [`Endpoint::post_raw`]).
    pub fn memory(&self) -> (u32, u64, usize) {
        (self.key, self.arena.0 as u64, self.arena.1)
    }

    pub(super) fn slot_addr(&self, slot: usize) -> usize {
        self.arena.0 + slot * self.max_message
    }

    pub(super) fn post_buffer(&self, inner: &mut Inner, b: usize) -> Result<(), MtpError> {
        let r = RecvEntry {
            cookie: RECV_COOKIE | b as u64,
            key: self.key,
            addr: self.slot_addr(self.slots + b) as u64,
            len: self.max_message as u32,
        };
        match inner.rq.push(&r.encode()) {
            Ok(true) => Ok(()),
            _ => Err(MtpError::Os(libc::ENOBUFS)),
        }
    }

    pub(super) fn doorbell(&self) -> Result<(), MtpError> {
        Ok(self.sluice.post(Command::MtpDoorbell { ep: self.ep })?)
    }

    /// Sends `data` to `dst` with `priority` and traffic class `tc`, waiting for a free
    /// slot if every one is in flight; returns the id its completion names.
    pub fn send_message(
        &self,
        dst: SocketAddrV4,
        data: &[u8],
        priority: u8,
        tc: u8,
    ) -> Result<u32, MtpError> {
        if data.len() > self.max_message {
            return Err(MtpError::TooLong(data.len()));
        }
        let slot = loop {
            if let Some(s) = lock(&self.inner).free.pop() {
                break s;
            }
            if !self.poll() {
                self.wait_for(Some(Duration::from_secs(1)), &mut |i| !i.free.is_empty())?;
            }
        };
        let addr = self.slot_addr(slot);
        // SAFETY: the slot lies inside the arena this endpoint mapped (slot < send_slots),
        // and a free slot is read by the engine only after the entry below is posted.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut u8, data.len()) };
        let mut inner = lock(&self.inner);
        let id = inner.next_id;
        inner.next_id = inner.next_id.wrapping_add(1).max(1);
        let e = SendEntry {
            cookie: u64::from(id),
            dst,
            priority,
            tc,
            key: self.key,
            addr: addr as u64,
            len: data.len() as u32,
        };
        if !matches!(inner.sq.push(&e.encode()), Ok(true)) {
            inner.free.push(slot);
            return Err(MtpError::Os(libc::ENOBUFS));
        }
        inner.in_flight.insert(u64::from(id), slot);
        drop(inner);
        self.doorbell()?;
        Ok(id)
    }

    /// Posts `entry` as it is on the send queue (`receive`: the receive queue) and rings
    /// the engine: for tests of the engine's checks, and for entries naming other
    /// registered memory. Its completion comes back through [`Endpoint::completion`].
    pub fn post_raw(&self, receive: bool, entry: &Payload) -> Result<(), MtpError> {
        {
            let mut inner = lock(&self.inner);
            let q = if receive {
                &mut inner.rq
            } else {
                &mut inner.sq
            };
            if !matches!(q.push(entry), Ok(true)) {
                return Err(MtpError::Os(libc::ENOBUFS));
            }
        }
        self.doorbell()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if self.sluice.is_alive() {
            // Unbound first: the engine stops writing into the buffers before they go.
            let _ = call(&self.sluice, MtpRequest::Unbind { ep: self.ep }, &[]);
            let _ = call(&self.sluice, MtpRequest::DeregMem { key: self.key }, &[]);
        }
        remap::free(self.arena.0, self.arena.1);
    }
}

/// Rings the engine for endpoint `ep` from this application, whoever owns it: for tests
/// of the engine's ownership check.
#[doc(hidden)]
pub fn ring_doorbell(sluice: &Sluice, ep: u32) -> Result<(), MtpError> {
    Ok(sluice.post(Command::MtpDoorbell { ep })?)
}
