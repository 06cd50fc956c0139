//! The offload engine: handlers run on offload threads apart from the data-path
//! (flexins.txt 3.5: "dedicated Arm cores isolated from the network stack"), fed through
//! bounded single-producer/single-consumer rings (the paper's atomic queues): the data-path
//! pushes requests and pops responses, never blocks and never allocates a queue.

use std::collections::HashMap;
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
            let (req_tx, req_rx) = RingBuffer::<OffloadRequest>::new(RING);
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
    req_tx: Producer<OffloadRequest>,
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
        let mut req = req;
        let n = self.workers.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            match self.workers[i].req_tx.push(req) {
                Ok(()) => {
                    self.next = (i + 1) % n;
                    return Ok(());
                }
                Err(rtrb::PushError::Full(r)) => req = r,
            }
        }
        self.shared
            .counters
            .ring_full
            .fetch_add(1, Ordering::Relaxed);
        Err(req)
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
fn worker(s: &Shared, mut rx: Consumer<OffloadRequest>, mut tx: Producer<OffloadResponse>) {
    let mut idle_since: Option<Instant> = None;
    let mut spins = 0u32;
    while !s.stop.load(Ordering::Relaxed) {
        let Ok(req) = rx.pop() else {
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
        let mut resp = Some(serve(s, &req));
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
fn serve(s: &Shared, req: &OffloadRequest) -> OffloadResponse {
    let c = &s.counters;
    c.requests.fetch_add(1, Ordering::Relaxed);
    let result = match s.handlers.get(&req.opcode) {
        Some(h) => run_handler(
            h.as_ref(),
            &req.payload,
            req.resp_cap as usize,
            &s.regions,
            s.limits,
        ),
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
