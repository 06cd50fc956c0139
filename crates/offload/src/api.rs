//! Table 2's API (flexins.txt 3.5) as a handler sees it: the request, allocating the
//! response, asynchronous reads and writes of the registered regions and waiting for them,
//! submitting the response — each call checked against the handler's [`Limits`].

use std::fmt;
use std::time::{Duration, Instant};

use crate::region::RegionTable;

/// A handler for one offload opcode, run on an offload thread: Rust compiled into the
/// program that starts the engine, an eBPF program ([`crate::EbpfHandler`]) or a Rust
/// library loaded at run time ([`crate::DylibHandler`]); it reaches memory only through
/// [`OffloadCtx`].
pub trait Handler: Send + Sync {
    /// Handles `ctx`'s request; Ok once the response is submitted.
    fn handle(&self, ctx: &mut OffloadCtx<'_>) -> Result<(), HandlerError>;
}

/// What a handler may use per request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// API calls (steps) per request: a handler that loops through the API is stopped.
    pub max_steps: u32,
    /// Response bytes (also capped by the requester's buffer).
    pub max_resp: usize,
    /// Reads and writes submitted and not yet waited for.
    pub max_outstanding: usize,
    /// Wall-clock time per request, checked at every API call.
    pub deadline: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_steps: 4096,
            max_resp: 4096,
            max_outstanding: 64,
            deadline: Duration::from_millis(10),
        }
    }
}

/// Why a handler failed; its code is the status of the OFFLOAD response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandlerError {
    /// An access outside every registered region.
    OutsideRegion,
    /// The step budget or the deadline ran out.
    BudgetExhausted,
    /// A response larger than allowed, or an access past the response.
    ResponseTooLarge,
    /// Too many reads/writes outstanding.
    TooManyOutstanding,
    /// The request does not parse.
    BadRequest,
    /// The key (list traversal) was not found within the hop limit.
    NotFound,
    /// No handler for the opcode on this engine.
    NoHandler,
    /// The handler returned without submitting a response.
    NoResponse,
    /// The handler panicked (caught at the boundary; the offload thread goes on).
    Panicked,
    /// A handler's own error code (>= 16).
    Custom(u32),
}

impl HandlerError {
    /// The status code an OFFLOAD response carries (0 is success).
    pub fn code(self) -> u32 {
        match self {
            HandlerError::OutsideRegion => 1,
            HandlerError::BudgetExhausted => 2,
            HandlerError::ResponseTooLarge => 3,
            HandlerError::TooManyOutstanding => 4,
            HandlerError::BadRequest => 5,
            HandlerError::NotFound => 6,
            HandlerError::NoHandler => 7,
            HandlerError::NoResponse => 8,
            HandlerError::Panicked => 9,
            HandlerError::Custom(c) => c.max(16),
        }
    }

    /// The error a status code names (None for 0, success).
    pub fn from_code(code: u32) -> Option<HandlerError> {
        Some(match code {
            0 => return None,
            1 => HandlerError::OutsideRegion,
            2 => HandlerError::BudgetExhausted,
            3 => HandlerError::ResponseTooLarge,
            4 => HandlerError::TooManyOutstanding,
            5 => HandlerError::BadRequest,
            6 => HandlerError::NotFound,
            7 => HandlerError::NoHandler,
            8 => HandlerError::NoResponse,
            9 => HandlerError::Panicked,
            c => HandlerError::Custom(c),
        })
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandlerError::OutsideRegion => f.write_str("access outside the registered regions"),
            HandlerError::BudgetExhausted => f.write_str("step budget or deadline exhausted"),
            HandlerError::ResponseTooLarge => f.write_str("response too large"),
            HandlerError::TooManyOutstanding => f.write_str("too many outstanding reads/writes"),
            HandlerError::BadRequest => f.write_str("malformed request"),
            HandlerError::NotFound => f.write_str("key not found"),
            HandlerError::NoHandler => f.write_str("no handler for this opcode"),
            HandlerError::NoResponse => f.write_str("handler submitted no response"),
            HandlerError::Panicked => f.write_str("handler panicked"),
            HandlerError::Custom(c) => write!(f, "handler error {c}"),
        }
    }
}

impl std::error::Error for HandlerError {}

/// Names a submitted read or write (Table 2's dma id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DmaId(u32);

impl DmaId {
    /// Its number (what a library handler holds across the C ABI).
    pub fn index(self) -> u32 {
        self.0
    }

    /// The id numbered `i` (an unknown one waits for everything up to it).
    pub fn from_index(i: u32) -> DmaId {
        DmaId(i)
    }
}

#[derive(Clone, Copy, Debug)]
enum Dma {
    /// Region bytes at `addr` into the response at `at`.
    Read { addr: u64, at: usize, len: usize },
    /// Response bytes at `at` to region `addr`.
    Write { addr: u64, at: usize, len: usize },
}

/// One request's view of the engine (Table 2's context).
pub struct OffloadCtx<'a> {
    request: &'a [u8],
    regions: &'a RegionTable,
    limits: Limits,
    resp_cap: usize,
    resp: Option<Vec<u8>>,
    submitted: Option<usize>,
    queue: Vec<(DmaId, Dma)>,
    next_id: u32,
    steps: u32,
    started: Instant,
}

impl<'a> OffloadCtx<'a> {
    /// A context for `request`, whose response may have `resp_cap` bytes.
    pub fn new(
        request: &'a [u8],
        resp_cap: usize,
        regions: &'a RegionTable,
        limits: Limits,
    ) -> OffloadCtx<'a> {
        OffloadCtx {
            request,
            regions,
            limits,
            resp_cap: resp_cap.min(limits.max_resp),
            resp: None,
            submitted: None,
            queue: Vec::new(),
            next_id: 0,
            steps: 0,
            started: Instant::now(),
        }
    }

    /// The request bytes.
    pub fn request(&self) -> &[u8] {
        self.request
    }

    /// The most bytes the response may have.
    pub fn resp_cap(&self) -> usize {
        self.resp_cap
    }

    /// One step of the budget; every API call takes one. Handlers that loop call it per
    /// iteration.
    pub fn step(&mut self) -> Result<(), HandlerError> {
        self.steps += 1;
        if self.steps > self.limits.max_steps || self.started.elapsed() > self.limits.deadline {
            return Err(HandlerError::BudgetExhausted);
        }
        Ok(())
    }

    /// Allocates a zeroed response of `size` bytes (Table 2's alloc_resp).
    pub fn alloc_resp(&mut self, size: usize) -> Result<(), HandlerError> {
        self.step()?;
        if size > self.resp_cap {
            return Err(HandlerError::ResponseTooLarge);
        }
        self.resp = Some(vec![0; size]);
        Ok(())
    }

    /// The response allocated, to fill directly.
    pub fn resp_mut(&mut self) -> Option<&mut [u8]> {
        self.resp.as_deref_mut()
    }

    fn check(&self, addr: u64, at: usize, len: usize) -> Result<(), HandlerError> {
        let resp_len = self.resp.as_ref().map_or(0, Vec::len);
        if at.checked_add(len).is_none_or(|e| e > resp_len) {
            return Err(HandlerError::ResponseTooLarge);
        }
        if self.regions.find(addr, len as u64).is_none() {
            return Err(HandlerError::OutsideRegion);
        }
        if self.queue.len() >= self.limits.max_outstanding {
            return Err(HandlerError::TooManyOutstanding);
        }
        Ok(())
    }

    fn submit(&mut self, dma: Dma) -> DmaId {
        let id = DmaId(self.next_id);
        self.next_id += 1;
        self.queue.push((id, dma));
        id
    }

    /// Submits a read of `len` region bytes at application address `addr` into the
    /// response at `at` (Table 2's submit_dma READ); it happens by [`OffloadCtx::wait`].
    pub fn submit_read(&mut self, addr: u64, at: usize, len: usize) -> Result<DmaId, HandlerError> {
        self.step()?;
        self.check(addr, at, len)?;
        Ok(self.submit(Dma::Read { addr, at, len }))
    }

    /// Submits a write of the response's bytes `[at, at + len)` to region address `addr`
    /// (submit_dma WRITE).
    pub fn submit_write(
        &mut self,
        addr: u64,
        at: usize,
        len: usize,
    ) -> Result<DmaId, HandlerError> {
        self.step()?;
        self.check(addr, at, len)?;
        Ok(self.submit(Dma::Write { addr, at, len }))
    }

    /// Waits for `id` and everything submitted before it (Table 2's wait_dma_finish):
    /// the copies run here, in submission order.
    pub fn wait(&mut self, id: DmaId) -> Result<(), HandlerError> {
        self.step()?;
        let n = self.queue.partition_point(|(i, _)| *i <= id);
        let resp = self.resp.as_mut().ok_or(HandlerError::ResponseTooLarge)?;
        for (_, dma) in self.queue.drain(..n) {
            let ok = match dma {
                Dma::Read { addr, at, len } => {
                    let (r, off) = self
                        .regions
                        .find(addr, len as u64)
                        .ok_or(HandlerError::OutsideRegion)?;
                    r.read_at(off, &mut resp[at..at + len])
                }
                Dma::Write { addr, at, len } => {
                    let (r, off) = self
                        .regions
                        .find(addr, len as u64)
                        .ok_or(HandlerError::OutsideRegion)?;
                    r.write_at(off, &resp[at..at + len])
                }
            };
            if !ok {
                return Err(HandlerError::OutsideRegion);
            }
        }
        Ok(())
    }

    /// Reads `out.len()` region bytes at `addr` now (a submit and its wait in one step:
    /// what an eBPF handler's bpf_sluice_region_read does).
    pub fn read_region(&mut self, addr: u64, out: &mut [u8]) -> Result<(), HandlerError> {
        self.step()?;
        let (r, off) = self
            .regions
            .find(addr, out.len() as u64)
            .ok_or(HandlerError::OutsideRegion)?;
        if r.read_at(off, out) {
            Ok(())
        } else {
            Err(HandlerError::OutsideRegion)
        }
    }

    /// Waits for everything submitted.
    pub fn wait_all(&mut self) -> Result<(), HandlerError> {
        match self.queue.last() {
            Some(&(id, _)) => self.wait(id),
            None => Ok(()),
        }
    }

    /// Submits the first `size` bytes of the response (Table 2's submit_resp).
    pub fn submit_resp(&mut self, size: usize) -> Result<(), HandlerError> {
        self.step()?;
        if self.resp.as_ref().is_none_or(|r| size > r.len()) {
            return Err(HandlerError::ResponseTooLarge);
        }
        self.submitted = Some(size);
        Ok(())
    }

    /// The response submitted, if any (what the engine sends).
    pub fn into_response(self) -> Option<Vec<u8>> {
        let size = self.submitted?;
        let mut r = self.resp?;
        r.truncate(size);
        Some(r)
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u32 {
        self.steps
    }
}

/// Runs `handler` on one request: its response, or the error that stopped it.
pub fn run_handler(
    handler: &dyn Handler,
    request: &[u8],
    resp_cap: usize,
    regions: &RegionTable,
    limits: Limits,
) -> Result<Vec<u8>, HandlerError> {
    let mut ctx = OffloadCtx::new(request, resp_cap, regions, limits);
    handler.handle(&mut ctx)?;
    ctx.into_response().ok_or(HandlerError::NoResponse)
}
