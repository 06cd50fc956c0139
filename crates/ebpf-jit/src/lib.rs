//! An x86-64 JIT for the programs sluice-ebpf's verifier accepts (issue 19 item 1d), with the
//! interpreter as the fallback on other architectures and for anything it does not translate.
//!
//! This crate is an OS boundary: it maps executable memory (W^X: written read-write, then
//! made read-execute) and calls into it, so it has `unsafe`, each block with its SAFETY
//! comment. The translation keeps the interpreter's run-time checks (region checks on every
//! access, the instruction budget, the kernel's division by zero) and calls the very helper
//! functions the interpreter calls (`sluice_ebpf::helpers::call`), so both runtimes give the
//! same action, frame bytes, map contents and errors (tests/differential.rs).
//!
//! ```text
//! let jit = sluice_ebpf_jit::Compiled::compile(&program)?;   // or Runner::new(program, true)
//! let action = jit.run(&mut ctx, &mut env)?;                 // as sluice_ebpf::run
//! ```

mod codegen;
pub mod differential;
mod exec_mem;
pub mod runtime;
pub mod x86;

use std::fmt;

use sluice_ebpf::{Action, Env, Program, RunError, XdpContext};

use crate::exec_mem::ExecMem;
use crate::runtime::State;

/// Why a program was not compiled (it then runs interpreted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JitError {
    /// Not x86-64 Linux.
    Unavailable,
    /// An instruction this translation does not handle (its index).
    Unsupported(usize),
    /// Executable memory could not be had (the failing call).
    Memory(&'static str),
}

impl fmt::Display for JitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JitError::Unavailable => write!(f, "no JIT for this architecture"),
            JitError::Unsupported(pc) => write!(f, "insn {pc}: not supported by the JIT"),
            JitError::Memory(call) => write!(f, "executable memory: {call} failed"),
        }
    }
}

impl std::error::Error for JitError {}

/// The x86-64 machine code for a program (what `Compiled::compile` maps), for inspection
/// (`objdump -D -b binary -m i386:x86-64`).
pub fn machine_code(program: &Program) -> Result<Vec<u8>, JitError> {
    codegen::translate(program)
}

/// Whether this build can JIT (x86-64 Linux).
pub fn available() -> bool {
    cfg!(all(target_arch = "x86_64", target_os = "linux"))
}

type Entry = unsafe extern "C" fn(*mut State) -> u64;

/// A verified program compiled to x86-64 machine code.
pub struct Compiled {
    program: Program,
    code: ExecMem,
    len: usize,
}

impl fmt::Debug for Compiled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Compiled({} bytes)", self.len)
    }
}

impl Compiled {
    /// Compiles a program the verifier accepted.
    pub fn compile(program: &Program) -> Result<Compiled, JitError> {
        if !available() {
            return Err(JitError::Unavailable);
        }
        let bytes = codegen::translate(program)?;
        Ok(Compiled {
            program: program.clone(),
            code: ExecMem::new(&bytes)?,
            len: bytes.len(),
        })
    }

    /// The program it was compiled from.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Bytes of machine code.
    pub fn code_len(&self) -> usize {
        self.len
    }

    /// Runs on a frame, exactly as `sluice_ebpf::run` would (the same counters too).
    pub fn run(&self, ctx: &mut XdpContext<'_>, env: &mut Env<'_>) -> Result<Action, RunError> {
        env.counters.runs += 1;
        let r = self.exec(ctx, env);
        env.counters.record(&r);
        r
    }

    fn exec(&self, ctx: &mut XdpContext<'_>, env: &mut Env<'_>) -> Result<Action, RunError> {
        if !self.program.matches(env.maps) {
            return Err(RunError::MapMismatch(0));
        }
        if ctx.data > ctx.data_end || ctx.data_end > ctx.buf.len() {
            return Err(RunError::OutOfBounds(0));
        }
        let budget = self.program.budget();
        let buf = ctx.buf.as_mut_ptr() as u64;
        let mut st = State {
            stack: [0; runtime::STACK_SIZE],
            data: buf + ctx.data as u64,
            data_end: buf + ctx.data_end as u64,
            stack_lo: 0,
            stack_hi: 0,
            unit_lo: u64::MAX,
            unit_hi: u64::MAX,
            ifindex: ctx.ingress_ifindex as u64,
            rxq: ctx.rx_queue_index as u64,
            budget,
            error: runtime::err::NONE,
            error_pc: 0,
            helper_id: 0,
            helper_pc: 0,
            save: [0; 10],
            ctx: ctx as *mut XdpContext<'_> as *mut std::ffi::c_void,
            env: env as *mut Env<'_> as *mut std::ffi::c_void,
        };
        st.stack_lo = st.stack.as_mut_ptr() as u64;
        st.stack_hi = st.stack_lo + runtime::STACK_SIZE as u64;
        // SAFETY: the mapping holds code `codegen::translate` generated for the SysV ABI with
        // this signature; it lives as long as `self`, which this call borrows.
        let entry: Entry = unsafe { std::mem::transmute::<*const u8, Entry>(self.code.as_ptr()) };
        // SAFETY: the generated code touches only `st` (which outlives the call), the frame
        // between st.data and st.data_end, st's stack and map values (each access checked
        // against those regions first), and calls back only `runtime::helper` and
        // `runtime::check_map` with `&mut st`; `ctx` and `env` are not used meanwhile.
        let r0 = unsafe { entry(&mut st) };
        match st.error {
            runtime::err::NONE => {
                env.counters.insns += budget - st.budget;
                Ok(Action::from_return(r0))
            }
            runtime::err::BUDGET => {
                env.counters.insns += budget;
                Err(RunError::Budget)
            }
            code => Err(runtime::error_of(code, st.error_pc)),
        }
    }
}

/// How a module runs: compiled, or interpreted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// x86-64 machine code.
    Jit,
    /// sluice-ebpf's interpreter.
    Interp,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Jit => "jit",
            Mode::Interp => "interp",
        })
    }
}

/// A program ready to run: compiled when the JIT is available and takes it, else interpreted.
#[derive(Debug)]
pub enum Runner {
    /// Compiled.
    Jit(Compiled),
    /// Interpreted (JIT off, unavailable, or the program not supported: the reason).
    Interp(Program, Option<JitError>),
}

impl Runner {
    /// Compiles `program` if `jit` and the JIT takes it; otherwise keeps it for the interpreter.
    pub fn new(program: Program, jit: bool) -> Runner {
        if !jit {
            return Runner::Interp(program, None);
        }
        match Compiled::compile(&program) {
            Ok(c) => Runner::Jit(c),
            Err(e) => Runner::Interp(program, Some(e)),
        }
    }

    /// Jit or Interp.
    pub fn mode(&self) -> Mode {
        match self {
            Runner::Jit(_) => Mode::Jit,
            Runner::Interp(..) => Mode::Interp,
        }
    }

    /// Why the JIT was asked and refused, if it was.
    pub fn fallback(&self) -> Option<JitError> {
        match self {
            Runner::Interp(_, e) => *e,
            Runner::Jit(_) => None,
        }
    }

    /// The program.
    pub fn program(&self) -> &Program {
        match self {
            Runner::Jit(c) => c.program(),
            Runner::Interp(p, _) => p,
        }
    }

    /// Runs on a frame (as `sluice_ebpf::run`).
    pub fn run(&self, ctx: &mut XdpContext<'_>, env: &mut Env<'_>) -> Result<Action, RunError> {
        match self {
            Runner::Jit(c) => c.run(ctx, env),
            Runner::Interp(p, _) => sluice_ebpf::run(p, ctx, env),
        }
    }
}
