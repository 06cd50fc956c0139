//! What one application owns of the verbs: protection domains, memory regions,
//! completion queues and queue pairs, with the verbs queues they were given. Every handle
//! an application names is looked up here, in its own tables (docs/verbs.md "Isolation").

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use sluice_rdma::qp::{RecvWr, SendWr};
use sluice_rdma::verbs::Key;
use sluice_shm::verbs::{Cqe, QpAttrs};
use sluice_shm::{Consumer, EventFd, Producer, Region};

use crate::queues::VerbsQueues;

/// A completion queue: the transport's CQ `cq` and the verbs queue it is delivered to.
pub(crate) struct CqRec {
    /// Its verbs queue.
    pub queue: u32,
    /// The engine's end of it.
    pub producer: Producer,
    /// The region it lies in (for its arm word).
    pub region: Arc<Region>,
    /// The completion channel, if one was given.
    pub eventfd: Option<EventFd>,
    /// What an event writes to it (CreateCq's token).
    pub token: u64,
    /// Entries it holds (what the application asked for).
    pub cqe: u32,
    /// The application wrote the queue's head out of bounds: it is no longer served.
    pub dead: bool,
    /// Completions the service made itself (a work request that did not decode, or one
    /// flushed before it reached the transport), delivered after the transport's.
    pub made: VecDeque<Cqe>,
}

/// A queue pair.
pub(crate) struct QpRec {
    /// Its protection domain.
    pub pd: u32,
    /// Its send and receive completion queues.
    pub send_cq: u32,
    /// Its receive completion queue.
    pub recv_cq: u32,
    /// Its send queue's verbs queue.
    pub sq: u32,
    /// Its receive queue's verbs queue.
    pub rq: u32,
    /// The engine's end of the send queue.
    pub sq_in: Consumer,
    /// The engine's end of the receive queue.
    pub rq_in: Consumer,
    /// Send work requests the transport holds at most.
    pub max_send_wr: u32,
    /// Inline bytes per send work request at most.
    pub max_inline: u32,
    /// The inline buffer: backing id and the local-only region over it.
    pub inline: Option<(u32, Key)>,
    /// Send work requests taken so far (picks the inline slot).
    pub sends_taken: u64,
    /// A send taken from the queue that the transport could not hold yet.
    pub held_send: Option<SendWr>,
    /// A receive taken from the queue that the transport could not hold yet.
    pub held_recv: Option<RecvWr>,
    /// The attributes given so far (ibv_query_qp answers them).
    pub attrs: QpAttrs,
    /// On the retry list.
    pub listed: bool,
}

/// What one application owns.
pub(crate) struct VerbsApp {
    /// Its region (the verbs queues are there).
    pub region: Arc<Region>,
    /// Its protection domains.
    pub pds: HashSet<u32>,
    /// Its memory regions: key to (protection domain, backing id).
    pub mrs: HashMap<u32, (u32, u32)>,
    /// Its completion queues by the transport's number.
    pub cqs: HashMap<u32, CqRec>,
    /// Its queue pairs by number.
    pub qps: HashMap<u32, QpRec>,
    /// Its verbs queues (shared with its MTP endpoints).
    pub queues: VerbsQueues,
}

impl VerbsApp {
    /// An application that owns nothing yet.
    pub fn new(queues: VerbsQueues) -> VerbsApp {
        VerbsApp {
            region: queues.region.clone(),
            pds: HashSet::new(),
            mrs: HashMap::new(),
            cqs: HashMap::new(),
            qps: HashMap::new(),
            queues,
        }
    }

    /// Takes `n` free verbs queues, zeroed; None (nothing taken) if there are not `n`.
    pub fn take_queues<const N: usize>(&mut self) -> Option<[u32; N]> {
        self.queues.take::<N>()
    }

    /// Gives verbs queue `q` back.
    pub fn free_queue(&mut self, q: u32) {
        self.queues.free(q);
    }

    /// Whether protection domain `pd` is used by a region or a QP.
    pub fn pd_in_use(&self, pd: u32) -> bool {
        self.mrs.values().any(|&(p, _)| p == pd) || self.qps.values().any(|q| q.pd == pd)
    }

    /// Whether completion queue `cq` is used by a QP.
    pub fn cq_in_use(&self, cq: u32) -> bool {
        self.qps
            .values()
            .any(|q| q.send_cq == cq || q.recv_cq == cq)
    }
}
