//! The offload engine: handlers run on offload threads apart from the data-path
//! (flexins.txt 3.5: "dedicated Arm cores isolated from the network stack"), fed through
//! bounded single-producer/single-consumer rings (the paper's atomic queues): the data-path
//! pushes requests and pops responses, never blocks and never allocates a queue.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rtrb::{Consumer, Producer, RingBuffer};
use sluice_rdma::qp::OffloadRequest;
use sluice_rdma::wire::Psn;

use crate::api::{run_handler, Handler, HandlerError, Limits};
use crate::region::{RegionTable, SharedRegion};

/// Requests (and responses) each offload thread's rings hold.
pub const RING: usize = 256;

/// A handler's answer, for [`sluice_rdma::stack::RdmaStack::complete_offload`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffloadResponse {
    /// The QP and PSN of its request.
    pub qpn: u32,
    /// Its request's PSN.
    pub psn: Psn,
    /// 0, or a [`HandlerError`] code.
    pub status: u32,
    /// The response bytes (empty on error).
    pub body: Vec<u8>,
}

/// The engine's counters (shared with its threads).
#[derive(Debug, Default)]
pub struct EngineCounters {
    /// Requests run.
    pub requests: AtomicU64,
    /// Handlers that failed (any error).
    pub errors: AtomicU64,
    /// Handlers stopped by their step budget or deadline.
    pub budget_stops: AtomicU64,
    /// Accesses outside the registered regions.
    pub outside_region: AtomicU64,
    /// Responses refused for their size.
    pub too_large: AtomicU64,
    /// Requests for an opcode with no handler.
    pub no_handler: AtomicU64,
    /// Requests refused because a ring was full.
    pub ring_full: AtomicU64,
    /// Handlers that panicked (caught; the offload thread goes on).
    pub panics: AtomicU64,
}

/// A handler registered at run time with what it may use: the engine runs the request
/// handed in with it ([`OffloadEngine::submit_to`]) under these, not the builder's tables.
pub struct Registration {
    /// The handler.
    pub handler: Arc<dyn Handler>,
    /// The regions it may access.
    pub regions: RegionTable,
    /// Its limits.
    pub limits: Limits,
}

/// A request and, if registered at run time, what to run it with.
struct Job {
    req: OffloadRequest,
    reg: Option<Arc<Registration>>,
}

/// Registers handlers and regions, then starts the engine.
#[derive(Default)]
pub struct OffloadEngineBuilder {
    handlers: HashMap<u32, Arc<dyn Handler>>,
    regions: RegionTable,
    limits: Limits,
}

impl OffloadEngineBuilder {
    /// An engine with no handler, no region and default limits.
    pub fn new() -> OffloadEngineBuilder {
        OffloadEngineBuilder::default()
    }

    /// Runs `handler` for offload opcode `opcode` (the engine's half of Table 2's
    /// register_opcode; the QP's half is `RdmaStack::register_offload`). False if taken.
    pub fn register_opcode(&mut self, opcode: u32, handler: Arc<dyn Handler>) -> bool {
        if self.handlers.contains_key(&opcode) {
            return false;
        }
        self.handlers.insert(opcode, handler);
        true
    }

    /// Lets handlers access `len` bytes of `region` at application address `addr`
    /// (register_dma_region). False if it overlaps one or the table is full.
    pub fn register_region(&mut self, addr: u64, len: u64, region: SharedRegion) -> bool {
        self.regions.register(addr, len, region)
    }

    /// Every handler's limits.
    pub fn limits(&mut self, limits: Limits) -> &mut Self {
        self.limits = limits;
        self
    }

    /// Starts `threads` offload threads (at least one).
    pub fn start(self, threads: usize) -> OffloadEngine {
        let shared = Arc::new(Shared {
            handlers: self.handlers,
            regions: self.regions,
            limits: self.limits,
            counters: EngineCounters::default(),
            stop: AtomicBool::new(false),
        });
        let mut workers = Vec::new();
        for i in 0..threads.max(1) {
            let (req_tx, req_rx) = RingBuffer::<Job>::new(RING);
            let (resp_tx, resp_rx) = RingBuffer::<OffloadResponse>::new(RING);
            let s = Arc::clone(&shared);
            let join = std::thread::Builder::new()
                .name(format!("sluice-offload-{i}"))
                .spawn(move || worker(&s, req_rx, resp_tx))
                .ok();
            workers.push(Worker {
                req_tx,
                resp_rx,
                join,
            });
        }
        OffloadEngine {
            shared,
            workers,
            next: 0,
        }
    }
}

struct Shared {
    handlers: HashMap<u32, Arc<dyn Handler>>,
    regions: RegionTable,
    limits: Limits,
    counters: EngineCounters,
    stop: AtomicBool,
}

struct Worker {
    req_tx: Producer<Job>,
    resp_rx: Consumer<OffloadResponse>,
    join: Option<JoinHandle<()>>,
}

/// The running engine: the data-path's end of the rings.
pub struct OffloadEngine {
    shared: Arc<Shared>,
    workers: Vec<Worker>,
    next: usize,
}

impl OffloadEngine {
    /// Hands `req` to an offload thread (round robin); Err(req) if every ring is full
    /// (counted; the caller keeps it and tries again).
    pub fn submit(&mut self, req: OffloadRequest) -> Result<(), OffloadRequest> {
        self.push(Job { req, reg: None })
    }

    /// Hands `req` to an offload thread to run with `reg` (a handler registered at run
    /// time); Err(req) if every ring is full, as [`OffloadEngine::submit`].
    pub fn submit_to(
        &mut self,
        req: OffloadRequest,
        reg: Arc<Registration>,
    ) -> Result<(), OffloadRequest> {
        self.push(Job {
            req,
            reg: Some(reg),
        })
    }

    fn push(&mut self, job: Job) -> Result<(), OffloadRequest> {
        let mut job = job;
        let n = self.workers.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            match self.workers[i].req_tx.push(job) {
                Ok(()) => {
                    self.next = (i + 1) % n;
                    return Ok(());
                }
                Err(rtrb::PushError::Full(j)) => job = j,
            }
        }
        self.shared
            .counters
            .ring_full
            .fetch_add(1, Ordering::Relaxed);
        Err(job.req)
    }

    /// The next response any offload thread finished.
    pub fn poll(&mut self) -> Option<OffloadResponse> {
        self.workers.iter_mut().find_map(|w| w.resp_rx.pop().ok())
    }

    /// Its counters.
    pub fn counters(&self) -> &EngineCounters {
        &self.shared.counters
    }
}

impl Drop for OffloadEngine {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for w in &mut self.workers {
            if let Some(j) = w.join.take() {
                let _ = j.join();
            }
        }
    }
}

/// One offload thread: polls its request ring (spinning, then yielding, then sleeping
/// briefly when idle), runs the handler, pushes the response.
fn worker(s: &Shared, mut rx: Consumer<Job>, mut tx: Producer<OffloadResponse>) {
    let mut idle_since: Option<Instant> = None;
    let mut spins = 0u32;
    while !s.stop.load(Ordering::Relaxed) {
        let Ok(job) = rx.pop() else {
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else if idle_since.get_or_insert_with(Instant::now).elapsed()
                < Duration::from_millis(5)
            {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
            continue;
        };
        spins = 0;
        idle_since = None;
        let mut resp = Some(serve(s, &job));
        // The response ring is as large as the request ring: a full one means the
        // data-path is not polling; wait for it rather than drop an answer.
        while let Some(r) = resp.take() {
            if let Err(rtrb::PushError::Full(r)) = tx.push(r) {
                if s.stop.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::yield_now();
                resp = Some(r);
            }
        }
    }
}

/// Runs the handler of `req` within the limits; failures become statuses, counted.
/// A handler that panics is caught here: its request gets `Panicked`, the thread goes on.
fn serve(s: &Shared, job: &Job) -> OffloadResponse {
    let c = &s.counters;
    let req = &job.req;
    c.requests.fetch_add(1, Ordering::Relaxed);
    let (handler, regions, limits) = match &job.reg {
        Some(r) => (Some(&r.handler), &r.regions, r.limits),
        None => (s.handlers.get(&req.opcode), &s.regions, s.limits),
    };
    let result = match handler {
        Some(h) => std::panic::catch_unwind(AssertUnwindSafe(|| {
            run_handler(
                h.as_ref(),
                &req.payload,
                req.resp_cap as usize,
                regions,
                limits,
            )
        }))
        .unwrap_or(Err(HandlerError::Panicked)),
        None => Err(HandlerError::NoHandler),
    };
    let (status, body) = match result {
        Ok(body) => (0, body),
        Err(e) => {
            c.errors.fetch_add(1, Ordering::Relaxed);
            let counter = match e {
                HandlerError::BudgetExhausted => Some(&c.budget_stops),
                HandlerError::OutsideRegion => Some(&c.outside_region),
                HandlerError::ResponseTooLarge => Some(&c.too_large),
                HandlerError::NoHandler => Some(&c.no_handler),
                // Caught here, or by a library's own boundary and reported.
                HandlerError::Panicked => Some(&c.panics),
                _ => None,
            };
            if let Some(k) = counter {
                k.fetch_add(1, Ordering::Relaxed);
            }
            (e.code(), Vec::new())
        }
    };
    OffloadResponse {
        qpn: req.qpn,
        psn: req.psn,
        status,
        body,
    }
}
