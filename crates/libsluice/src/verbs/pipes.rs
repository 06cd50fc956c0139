//! The library's ends of the notification pipes (docs/verbs.md "Notification pipes"): per
//! attachment, the work-request pipes its pipe-mode QPs post to (one per context and
//! engine core, shared by the QPs placed there, behind a lock) and the completion pipes it
//! drains, demultiplexed into each completion queue's buffer by the CQ handle every entry
//! carries. A CQ's buffer holds at most its `cqe` completions: one more is an overrun,
//! counted and dropped, as an RNIC's CQ overflows.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sluice_shm::verbs::pipe::PipeCqe;
use sluice_shm::verbs::Cqe;
use sluice_shm::{PipeConsumer, PipeKind, PipeProducer, Region};

use crate::lock::lock;
use crate::verbs::error::VerbsError;

/// `ibv_wc_opcode`s of receives start here (IBV_WC_RECV).
const WC_RECV: u8 = 128;

/// How many completions the library takes from a completion pipe before it publishes its
/// head (the engine reads it only when its credit runs out): the default of
/// [`Pipes::set_completion_lag`].
pub const DEFAULT_COMPLETION_LAG: u64 = 16;

/// A work-request pipe, shared by the QPs placed on it.
pub(crate) type WorkPipe = Arc<Mutex<PipeProducer>>;

/// One completion queue's completions, taken from the pipes and not yet polled.
struct CqBuf {
    queue: VecDeque<Cqe>,
    cqe: u32,
}

/// What the drain shares.
struct Sink {
    /// Completion pipes opened, by (context, core).
    pipes: Vec<((u32, u32), PipeConsumer)>,
    cqs: HashMap<u32, CqBuf>,
    /// Per pipe-mode QP, its receives' tags and the `wr_id`s they were posted with.
    tags: HashMap<u32, HashMap<u32, u64>>,
}

/// An attachment's pipes.
pub(crate) struct Pipes {
    region: Arc<Region>,
    work: Mutex<HashMap<(u32, u32), WorkPipe>>,
    sink: Mutex<Sink>,
    lag: AtomicU64,
    /// Completions dropped because their CQ's buffer was full.
    overruns: AtomicU64,
    /// Completion entries that did not decode, or named no CQ of ours.
    bad: AtomicU64,
}

impl Pipes {
    /// No pipes open yet.
    pub(crate) fn new(region: Arc<Region>) -> Pipes {
        Pipes {
            region,
            work: Mutex::new(HashMap::new()),
            sink: Mutex::new(Sink {
                pipes: Vec::new(),
                cqs: HashMap::new(),
                tags: HashMap::new(),
            }),
            lag: AtomicU64::new(DEFAULT_COMPLETION_LAG),
            overruns: AtomicU64::new(0),
            bad: AtomicU64::new(0),
        }
    }

    /// Sets how many completions are taken between publications of the head (for pipes
    /// opened from now on; clamped to 1 ..= half a pipe).
    pub(crate) fn set_completion_lag(&self, n: u64) {
        self.lag.store(n, Ordering::Relaxed);
    }

    /// The work-request pipe of `context` for engine core `core` (opening it, and its
    /// completion pipe, on first use).
    pub(crate) fn work_pipe(&self, context: u32, core: u32) -> Result<WorkPipe, VerbsError> {
        let mut work = lock(&self.work);
        if let Some(p) = work.get(&(context, core)) {
            return Ok(p.clone());
        }
        let out_of_range = || VerbsError::Protocol(format!("pipe {context}/{core} out of range"));
        let producer = PipeProducer::new(self.region.clone(), context, core, PipeKind::Work)
            .ok_or_else(out_of_range)?;
        let consumer = PipeConsumer::new(
            self.region.clone(),
            context,
            core,
            PipeKind::Completion,
            self.lag.load(Ordering::Relaxed),
        )
        .ok_or_else(out_of_range)?;
        lock(&self.sink).pipes.push(((context, core), consumer));
        let p = Arc::new(Mutex::new(producer));
        work.insert((context, core), p.clone());
        Ok(p)
    }

    /// A pipe-mode CQ of `cqe` entries now takes completions.
    pub(crate) fn add_cq(&self, cq: u32, cqe: u32) {
        lock(&self.sink).cqs.insert(
            cq,
            CqBuf {
                queue: VecDeque::new(),
                cqe,
            },
        );
    }

    /// A CQ went away (its late completions count as bad).
    pub(crate) fn remove_cq(&self, cq: u32) {
        lock(&self.sink).cqs.remove(&cq);
    }

    /// Receives of `qpn` are about to be posted with these tags.
    pub(crate) fn add_tags(&self, qpn: u32, tags: impl Iterator<Item = (u32, u64)>) {
        lock(&self.sink).tags.entry(qpn).or_default().extend(tags);
    }

    /// Receives that were not posted after all.
    pub(crate) fn remove_tags(&self, qpn: u32, tags: impl Iterator<Item = u32>) {
        if let Some(t) = lock(&self.sink).tags.get_mut(&qpn) {
            for tag in tags {
                t.remove(&tag);
            }
        }
    }

    /// A QP went away: its tags with it.
    pub(crate) fn remove_qp(&self, qpn: u32) {
        lock(&self.sink).tags.remove(&qpn);
    }

    /// Hands up to `max` completions of `cq` to `take`, oldest first, after draining the
    /// pipes; how many.
    pub(crate) fn poll(&self, cq: u32, max: usize, take: impl FnMut(Cqe)) -> usize {
        let mut sink = lock(&self.sink);
        self.drain(&mut sink);
        let Some(buf) = sink.cqs.get_mut(&cq) else {
            return 0;
        };
        let n = max.min(buf.queue.len());
        buf.queue.drain(..n).for_each(take);
        n
    }

    /// Whether `cq` has a completion (after draining the pipes).
    pub(crate) fn has_completion(&self, cq: u32) -> bool {
        let mut sink = lock(&self.sink);
        self.drain(&mut sink);
        sink.cqs.get(&cq).is_some_and(|b| !b.queue.is_empty())
    }

    /// Completions dropped because a CQ's buffer was full.
    pub(crate) fn overruns(&self) -> u64 {
        self.overruns.load(Ordering::Relaxed)
    }

    /// Completion entries that were no completion of a CQ of ours.
    pub(crate) fn bad_entries(&self) -> u64 {
        self.bad.load(Ordering::Relaxed)
    }

    /// Moves every completion waiting in the pipes into its CQ's buffer (a pipe's entries
    /// are in the engine's order, so each CQ's are too), translating receive tags back.
    fn drain(&self, sink: &mut Sink) {
        let Sink { pipes, cqs, tags } = sink;
        for (_, pipe) in pipes.iter_mut() {
            while let Some(e) = pipe.pop() {
                let Ok(c) = PipeCqe::decode(&e) else {
                    self.bad.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let Some(buf) = cqs.get_mut(&c.cq) else {
                    self.bad.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let mut wc = c.cqe;
                if wc.opcode >= WC_RECV {
                    if let Some(id) = tags
                        .get_mut(&wc.qp_num)
                        .and_then(|t| t.remove(&(wc.wr_id as u32)))
                    {
                        wc.wr_id = id;
                    }
                }
                if buf.queue.len() >= buf.cqe as usize {
                    self.overruns.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                buf.queue.push_back(wc);
            }
        }
    }
}
