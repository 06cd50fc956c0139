//! What one application owns of MTP: its registered memory and its endpoints with their
//! queues (docs/mtp.md "Messages in service mode"). Every key and endpoint an application
//! names is looked up here, in its own tables.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddrV4;

use sluice_mtp::stack::Message;
use sluice_shm::mtp::{MtpCqe, RecvEntry};
use sluice_shm::{Consumer, EventFd, MappedFile, Producer};

use crate::queues::VerbsQueues;

/// Registered memory: the application's `addr .. addr + len`, mapped from its memfd.
pub(crate) struct Mem {
    /// First byte, as the application addresses it.
    pub addr: u64,
    /// The mapping.
    pub file: MappedFile,
}

impl Mem {
    /// The offset in the mapping of `addr .. addr + len`, if it lies inside.
    pub fn offset(&self, addr: u64, len: u32) -> Option<u64> {
        let at = addr.checked_sub(self.addr)?;
        let end = at.checked_add(u64::from(len))?;
        (end <= self.file.len()).then_some(at)
    }
}

/// A message being sent: what its completion says.
#[derive(Clone, Copy)]
pub(crate) struct Sending {
    /// The send entry's cookie.
    pub cookie: u64,
    /// Its destination.
    pub dst: SocketAddrV4,
    /// Its length.
    pub len: u32,
}

/// A bound endpoint.
pub(crate) struct EpRec {
    /// Its send, receive and completion verbs queues.
    pub queues: [u32; 3],
    /// The engine's end of the send queue.
    pub sq_in: Consumer,
    /// The engine's end of the receive queue.
    pub rq_in: Consumer,
    /// The engine's end of the completion queue.
    pub cq_out: Producer,
    /// The readiness eventfd, if one was given.
    pub eventfd: Option<EventFd>,
    /// What an event writes to it.
    pub token: u64,
    /// Buffers posted and checked, oldest first (at most the receive queue's capacity).
    pub posted: VecDeque<RecvEntry>,
    /// A message taken from the transport that the first posted buffer could not hold;
    /// it waits for the next buffer (nothing accepted is lost).
    pub held: Option<Message>,
    /// Messages in the transport by id.
    pub sending: HashMap<u32, Sending>,
    /// Completions waiting for room in the completion queue.
    pub made: VecDeque<MtpCqe>,
    /// The transport may hold a whole message for it.
    pub readable: bool,
    /// On the retry list.
    pub listed: bool,
    /// The application wrote the completion queue's head out of bounds: no longer served.
    pub dead: bool,
}

impl EpRec {
    /// Completions the endpoint may have waiting before it takes no more entries (so that
    /// `made` stays bounded: the queue's capacity plus what is in flight).
    pub fn made_room(&self) -> bool {
        (self.made.len() as u64) < self.cq_out.capacity()
    }
}

/// What one application owns.
pub(crate) struct MtpApp {
    /// Its registered memory by key.
    pub mems: HashMap<u32, Mem>,
    /// The next key (never reused while it is attached).
    pub next_key: u32,
    /// Its endpoints by handle (the transport's endpoint id).
    pub eps: HashMap<u32, EpRec>,
    /// Its verbs queues (shared with its RDMA objects).
    pub queues: VerbsQueues,
}

impl MtpApp {
    /// An application that owns nothing yet.
    pub fn new(queues: VerbsQueues) -> MtpApp {
        MtpApp {
            mems: HashMap::new(),
            next_key: 1,
            eps: HashMap::new(),
            queues,
        }
    }

    /// Gives an endpoint's queues back.
    pub fn free_queues(&mut self, qs: [u32; 3]) {
        for q in qs {
            self.queues.free(q);
        }
    }

    /// The memory `key` and the offset in it of `addr .. addr + len`, if the application
    /// owns `key` and the range lies inside it.
    pub fn locate(&self, key: u32, addr: u64, len: u32) -> Option<(&Mem, u64)> {
        locate(&self.mems, key, addr, len)
    }
}

/// [`MtpApp::locate`] over an application's memory table alone.
pub(crate) fn locate(
    mems: &HashMap<u32, Mem>,
    key: u32,
    addr: u64,
    len: u32,
) -> Option<(&Mem, u64)> {
    let m = mems.get(&key)?;
    Some((m, m.offset(addr, len)?))
}
