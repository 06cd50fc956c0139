//! What JIT code runs against: the per-run state block (R12 points at it), the host-address
//! memory model helpers see, and the `extern "C"` trampolines JIT code calls.

use std::mem::offset_of;

use sluice_ebpf::helpers::{self, Memory};
use sluice_ebpf::{Env, Maps, RunError, XdpContext};

/// Bytes of eBPF stack (R10 is its end).
pub const STACK_SIZE: usize = 512;

/// Error codes JIT code and trampolines leave in `State::error`.
pub mod err {
    /// No error.
    pub const NONE: u32 = 0;
    /// RunError::OutOfBounds
    pub const OUT_OF_BOUNDS: u32 = 1;
    /// RunError::Budget
    pub const BUDGET: u32 = 2;
    /// RunError::BadInsn
    pub const BAD_INSN: u32 = 3;
    /// RunError::MapMismatch
    pub const MAP_MISMATCH: u32 = 4;
    /// RunError::Helper
    pub const HELPER: u32 = 5;
}

/// One run's state, at a fixed layout JIT code addresses by offset from R12. A region is
/// `[lo, hi)`; an empty one is `lo = hi = u64::MAX` so that no access passes its check.
#[repr(C)]
pub struct State {
    /// The program's stack; R10 = its end.
    pub stack: [u8; STACK_SIZE],
    /// Host address of `data`.
    pub data: u64,
    /// Host address of `data_end`.
    pub data_end: u64,
    /// Host address of the stack's start.
    pub stack_lo: u64,
    /// Host address of the stack's end.
    pub stack_hi: u64,
    /// The map value unit the last lookup or map access named (a cache that saves a call).
    pub unit_lo: u64,
    /// Its end.
    pub unit_hi: u64,
    /// xdp_md.ingress_ifindex
    pub ifindex: u64,
    /// xdp_md.rx_queue_index
    pub rxq: u64,
    /// Instructions left in the budget (R9 while JIT code runs).
    pub budget: u64,
    /// `err::*`
    pub error: u32,
    /// The instruction of the error.
    pub error_pc: u32,
    /// The helper a CALL names.
    pub helper_id: u32,
    /// The CALL's instruction index.
    pub helper_pc: u32,
    /// Registers saved around calls from JIT code into Rust.
    pub save: [u64; 10],
    /// Address of the run's `XdpContext` (valid during a run only).
    pub ctx: usize,
    /// Address of the run's `Env` (valid during a run only).
    pub env: usize,
}

impl State {
    /// A zeroed state, its regions empty.
    pub fn new() -> Box<State> {
        let mut st = Box::new(State {
            stack: [0; STACK_SIZE],
            data: u64::MAX,
            data_end: u64::MAX,
            stack_lo: 0,
            stack_hi: 0,
            unit_lo: u64::MAX,
            unit_hi: u64::MAX,
            ifindex: 0,
            rxq: 0,
            budget: 0,
            error: err::NONE,
            error_pc: 0,
            helper_id: 0,
            helper_pc: 0,
            save: [0; 10],
            ctx: 0,
            env: 0,
        });
        // Boxed, so the stack's address is fixed for the state's life.
        st.stack_lo = st.stack.as_ptr() as u64;
        st.stack_hi = st.stack_lo + STACK_SIZE as u64;
        st
    }
}

/// Offsets JIT code uses (`i32` displacements).
pub mod off {
    use super::*;
    /// State::data
    pub const DATA: i32 = offset_of!(State, data) as i32;
    /// State::data_end
    pub const DATA_END: i32 = offset_of!(State, data_end) as i32;
    /// State::stack_lo
    pub const STACK_LO: i32 = offset_of!(State, stack_lo) as i32;
    /// State::unit_lo
    pub const UNIT_LO: i32 = offset_of!(State, unit_lo) as i32;
    /// State::ifindex
    pub const IFINDEX: i32 = offset_of!(State, ifindex) as i32;
    /// State::rxq
    pub const RXQ: i32 = offset_of!(State, rxq) as i32;
    /// State::budget
    pub const BUDGET: i32 = offset_of!(State, budget) as i32;
    /// State::error
    pub const ERROR: i32 = offset_of!(State, error) as i32;
    /// State::error_pc
    pub const ERROR_PC: i32 = offset_of!(State, error_pc) as i32;
    /// State::helper_id
    pub const HELPER_ID: i32 = offset_of!(State, helper_id) as i32;
    /// State::helper_pc
    pub const HELPER_PC: i32 = offset_of!(State, helper_pc) as i32;
    /// State::save
    pub const SAVE: i32 = offset_of!(State, save) as i32;
    /// The stack's end (R10).
    pub const STACK_END: i32 = (offset_of!(State, stack) + super::STACK_SIZE) as i32;
}

/// Error code of a `RunError` (and its instruction).
fn code_of(e: RunError) -> (u32, usize) {
    match e {
        RunError::OutOfBounds(pc) => (err::OUT_OF_BOUNDS, pc),
        RunError::Budget => (err::BUDGET, 0),
        RunError::BadInsn(pc) => (err::BAD_INSN, pc),
        RunError::MapMismatch(pc) => (err::MAP_MISMATCH, pc),
        RunError::Helper(pc) => (err::HELPER, pc),
    }
}

/// The `RunError` of an error code left by a run.
pub fn error_of(code: u32, pc: u32) -> RunError {
    let pc = pc as usize;
    match code {
        err::OUT_OF_BOUNDS => RunError::OutOfBounds(pc),
        err::BUDGET => RunError::Budget,
        err::MAP_MISMATCH => RunError::MapMismatch(pc),
        err::HELPER => RunError::Helper(pc),
        _ => RunError::BadInsn(pc),
    }
}

/// Host-address memory: the frame in `ctx.buf`, the stack in `State`, map values in `Maps`'
/// storage. Every access is checked against exactly one region, as the interpreter's.
pub struct Host<'s> {
    /// The stack.
    pub stack: &'s mut [u8; STACK_SIZE],
    /// The cached map value unit (`State::unit_lo/hi`).
    pub unit: (&'s mut u64, &'s mut u64),
}

/// `[lo, lo + len)` as an offset range in a region of `region_len` bytes starting at `base`.
fn within(addr: u64, len: usize, base: u64, start: u64, end: u64) -> Option<(usize, usize)> {
    let off = addr.wrapping_sub(base);
    let last = off.checked_add(len as u64)?;
    (off >= start && last <= end).then_some((off as usize, last as usize))
}

/// The map value unit holding `addr..addr+len`: (map, unit start, unit end) as host addresses.
fn find_unit(maps: &mut Maps, addr: u64, len: usize) -> Option<(usize, u64, u64)> {
    for m in 0..maps.len() {
        let map = maps.map_mut(m)?;
        let vs = map.def().value_size as u64;
        let values = map.values_mut();
        let base = values.as_mut_ptr() as u64;
        let off = addr.wrapping_sub(base);
        if off < values.len() as u64 {
            let start = off - off % vs;
            if (off - start).checked_add(len as u64)? <= vs {
                return Some((m, base + start, base + start + vs));
            }
            return None;
        }
    }
    None
}

impl Memory for Host<'_> {
    fn bytes<'b>(
        &'b mut self,
        ctx: &'b mut XdpContext<'_>,
        maps: &'b mut Maps,
        addr: u64,
        len: usize,
    ) -> Option<&'b mut [u8]> {
        let buf = ctx.buf.as_mut_ptr() as u64;
        if let Some((a, b)) = within(addr, len, buf, ctx.data as u64, ctx.data_end as u64) {
            return ctx.buf.get_mut(a..b);
        }
        let stack = self.stack.as_mut_ptr() as u64;
        if let Some((a, b)) = within(addr, len, stack, 0, STACK_SIZE as u64) {
            return self.stack.get_mut(a..b);
        }
        let (m, lo, hi) = find_unit(maps, addr, len)?;
        (*self.unit.0, *self.unit.1) = (lo, hi);
        let values = maps.map_mut(m)?.values_mut();
        let start = (addr - values.as_mut_ptr() as u64) as usize;
        values.get_mut(start..start + len)
    }

    fn value_addr(&mut self, maps: &mut Maps, map: usize, unit: u32) -> u64 {
        let Some(m) = maps.map_mut(map) else {
            return 0;
        };
        let vs = m.def().value_size as u64;
        let lo = m.values_mut().as_mut_ptr() as u64 + unit as u64 * vs;
        (*self.unit.0, *self.unit.1) = (lo, lo + vs);
        lo
    }
}

/// Called by JIT code for a CALL: helper `State::helper_id` at `State::helper_pc` with R1-R5.
/// R0, or 0 with `State::error` set.
///
/// # Safety
/// `state` is the running `Compiled`'s state, whose `ctx` and `env` point at the run's live
/// `XdpContext` and `Env`, none of them otherwise in use during the call (JIT code only).
pub unsafe extern "C" fn helper(
    state: *mut State,
    r1: u64,
    r2: u64,
    r3: u64,
    r4: u64,
    r5: u64,
) -> u64 {
    // SAFETY: the caller's contract: JIT code passes the `State` boxed in the `Compiled` that
    // `Compiled::run` borrows mutably for the run; nothing else touches it during this call.
    let st = unsafe { &mut *state };
    // SAFETY: `ctx` and `env` point at the `&mut XdpContext` and `&mut Env` that `run` holds
    // (exclusively) for the whole run and does not use until JIT code returns.
    let (ctx, env) = unsafe {
        (
            &mut *(st.ctx as *mut XdpContext<'_>),
            &mut *(st.env as *mut Env<'_>),
        )
    };
    let (id, pc) = (st.helper_id as i32, st.helper_pc as usize);
    let mut host = Host {
        stack: &mut st.stack,
        unit: (&mut st.unit_lo, &mut st.unit_hi),
    };
    // A panicking trace sink must not unwind through JIT frames: it becomes a helper error.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        helpers::call(id, [r1, r2, r3, r4, r5], &mut host, ctx, env, pc)
    }))
    .unwrap_or(Err(RunError::Helper(pc)));
    // bpf_xdp_adjust_head moves data: JIT code reads the bounds from here.
    let buf = ctx.buf.as_mut_ptr() as u64;
    st.data = buf + ctx.data as u64;
    st.data_end = buf + ctx.data_end as u64;
    match r {
        Ok(v) => v,
        Err(e) => {
            let (code, pc) = code_of(e);
            st.error = code;
            st.error_pc = pc as u32;
            0
        }
    }
}

/// Called by JIT code when an access is in neither the frame nor the stack nor the cached
/// unit: 1 if `addr..addr+len` is inside one map value (which becomes the cached unit), else 0.
///
/// # Safety
/// As [`helper`].
pub unsafe extern "C" fn check_map(state: *mut State, addr: u64, len: u64) -> u64 {
    // SAFETY: as in `helper`: the run's own `State` and `Env`, exclusively ours during the call.
    let st = unsafe { &mut *state };
    // SAFETY: as in `helper`.
    let env = unsafe { &mut *(st.env as *mut Env<'_>) };
    match find_unit(env.maps, addr, len as usize) {
        Some((_, lo, hi)) => {
            (st.unit_lo, st.unit_hi) = (lo, hi);
            1
        }
        None => 0,
    }
}
