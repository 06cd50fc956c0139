//! eBPF offload handlers: a program of Sluice's offload type (section `offload`), loaded at
//! run time from a clang-built object and verified as the data-path's modules are, run by
//! the same interpreter within its verified instruction budget.
//!
//! The ABI rides XDP's: R1 is a `struct xdp_md *` whose frame is `[0, 8)` the response
//! length (u32, the program writes it), `[8, ...)` the request in and the response out (the
//! frame is 8 + max(request, response capacity) bytes). The helper
//! `bpf_sluice_region_read(dst, size, addr)` (id 0x5100) reads the registered regions.
//! Returns: XDP_TX, the response is ready; XDP_DROP, not found; anything else, an error.

use std::sync::Mutex;

use sluice_ebpf::{Action, Counters, Env, Maps, ModuleError, Program, TraceSink, XdpContext};

use crate::api::{Handler, HandlerError, OffloadCtx};

/// Bytes before the request in the frame (the response length and padding).
pub const HEADER: usize = 8;

/// A verified eBPF program serving one offload opcode.
pub struct EbpfHandler {
    program: Program,
    maps: Mutex<Maps>,
}

impl EbpfHandler {
    /// Loads and verifies section `offload` of the object `bytes`.
    pub fn load(bytes: &[u8]) -> Result<EbpfHandler, ModuleError> {
        let (program, maps) = sluice_ebpf::load(bytes, "offload")?;
        Ok(EbpfHandler {
            program,
            maps: Mutex::new(maps),
        })
    }
}

/// The program's view of the regions: every read is a step of the handler's budget.
struct Regions<'c, 'a> {
    ctx: &'c mut OffloadCtx<'a>,
    /// The first error a read met (the program sees only -EFAULT).
    error: Option<HandlerError>,
}

impl TraceSink for Regions<'_, '_> {
    fn print(&mut self, _fmt: &[u8], _args: [u64; 3]) {}

    fn region_read(&mut self, addr: u64, out: &mut [u8]) -> bool {
        match self.ctx.read_region(addr, out) {
            Ok(()) => true,
            Err(e) => {
                self.error.get_or_insert(e);
                false
            }
        }
    }
}

impl Handler for EbpfHandler {
    fn handle(&self, ctx: &mut OffloadCtx<'_>) -> Result<(), HandlerError> {
        let req = ctx.request().to_vec();
        let cap = ctx.resp_cap();
        let mut frame = vec![0u8; HEADER + req.len().max(cap)];
        frame[HEADER..HEADER + req.len()].copy_from_slice(&req);
        let len = frame.len();
        let mut maps = self.maps.lock().map_err(|_| HandlerError::Custom(17))?;
        let mut counters = Counters::default();
        let mut sink = Regions { ctx, error: None };
        let result = {
            let mut x = XdpContext::new(&mut frame, 0, len).ok_or(HandlerError::BadRequest)?;
            let mut env = Env {
                maps: &mut maps,
                now_ns: 0,
                cpu: 0,
                trace: &mut sink,
                counters: &mut counters,
            };
            sluice_ebpf::run(&self.program, &mut x, &mut env)
        };
        if let Some(e) = sink.error {
            return Err(e);
        }
        match result {
            Ok(Action::Tx) => {}
            Ok(Action::Drop(sluice_ebpf::DropReason::Program)) => {
                return Err(HandlerError::NotFound)
            }
            Err(sluice_ebpf::RunError::Budget) => return Err(HandlerError::BudgetExhausted),
            // Aborted, another action, or a run error: the program failed.
            _ => return Err(HandlerError::Custom(16)),
        }
        let n = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        if n > cap || HEADER + n > frame.len() {
            return Err(HandlerError::ResponseTooLarge);
        }
        ctx.alloc_resp(n)?;
        ctx.resp_mut()
            .ok_or(HandlerError::NoResponse)?
            .copy_from_slice(&frame[HEADER..HEADER + n]);
        ctx.submit_resp(n)
    }
}
