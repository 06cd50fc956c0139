//! What one application owns of the verbs: protection domains, memory regions,
//! completion queues and queue pairs, with the verbs queues they were given. Every handle
//! an application names is looked up here, in its own tables (docs/verbs.md "Isolation").

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use sluice_rdma::qp::{RecvWr, SendWr};
use sluice_rdma::verbs::{Key, WcOpcode, WcStatus};
use sluice_shm::verbs::{Cqe, QpAttrs};
use sluice_shm::{Consumer, EventFd, PipeConsumer, PipeProducer, Producer, Region};

use crate::queues::VerbsQueues;

/// A completion queue: the transport's CQ `cq` and the verbs queue it is delivered to.
pub(crate) struct CqRec {
    /// Its verbs queue (pipe mode: its arm slot).
    pub queue: u32,
    /// The engine's end of it (None in pipe mode: completions go to the QPs' pipes).
    pub producer: Option<Producer>,
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
    /// Its send queue's verbs queue (None in pipe mode).
    pub sq: Option<u32>,
    /// Its receive queue's verbs queue (None in pipe mode).
    pub rq: Option<u32>,
    /// The engine's end of the send queue (None in pipe mode).
    pub sq_in: Option<Consumer>,
    /// The engine's end of the receive queue (None in pipe mode).
    pub rq_in: Option<Consumer>,
    /// Pipe mode: its pipe and the work requests taken from it the transport has no room
    /// for yet.
    pub pipe: Option<PipeQp>,
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

/// A work request taken from a pipe, waiting for room in the transport.
pub(crate) enum Queued<W> {
    /// For the transport.
    Work(W),
    /// A bad one: completes with this status (and the QP goes to ERR).
    Bad(u64, WcStatus, WcOpcode),
}

/// A pipe-mode QP's part: which pipe, and its backlog (bounded by its `max_*_wr`: a pipe is
/// shared, so one QP's full transport queue must not stop the others' entries).
pub(crate) struct PipeQp {
    /// Index of its pipe in [`VerbsApp::pipes`].
    pub set: usize,
    /// Sends taken from the pipe, in order.
    pub sends: VecDeque<Queued<SendWr>>,
    /// Receives taken from the pipe, in order.
    pub recvs: VecDeque<Queued<RecvWr>>,
    /// Receive work requests the transport holds at most (the backlog's bound too).
    pub max_recv_wr: u32,
}

/// One context's pair of pipes for one engine core.
pub(crate) struct PipeSet {
    /// The application context.
    pub context: u32,
    /// The engine core.
    pub core: u32,
    /// Work requests in (application to engine).
    pub work: PipeConsumer,
    /// Completions out (engine to application).
    pub completions: PipeProducer,
    /// QPs placed on it.
    pub qps: u32,
    /// The application wrote the completion pipe's head out of bounds: no longer served.
    pub dead: bool,
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
    /// Its notification pipes in use, by context and core.
    pub pipes: Vec<PipeSet>,
    /// Pipe-mode arm slots given back.
    pub arm_free: Vec<u32>,
    /// The next pipe-mode arm slot never given out.
    pub arm_next: u32,
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
            pipes: Vec::new(),
            arm_free: Vec::new(),
            arm_next: 0,
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

    /// A free pipe-mode arm slot (zeroed), or None when the layout's are all taken.
    pub fn take_arm_slot(&mut self) -> Option<u32> {
        let slot = match self.arm_free.pop() {
            Some(s) => s,
            None if self.arm_next < self.region.layout().verbs_pipe_cqs => {
                self.arm_next += 1;
                self.arm_next - 1
            }
            None => return None,
        };
        if let Some(w) = self.region.pipe_arm(slot) {
            w.store(0, std::sync::atomic::Ordering::Release);
        }
        Some(slot)
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
