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
    codegen::translate(program.insns())
}

/// Whether this build can JIT (x86-64 Linux).
pub fn available() -> bool {
    cfg!(all(target_arch = "x86_64", target_os = "linux"))
}

type Entry = unsafe extern "C" fn(*mut State) -> u64;

/// A verified program compiled to x86-64 machine code, with the state its runs reuse (the
/// stack is not zeroed between runs: the verifier refuses reads of bytes a run did not write).
pub struct Compiled {
    program: Program,
    code: ExecMem,
    len: usize,
    state: Box<State>,
    /// The program's budget (tests of unverified code set their own).
    budget: u64,
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
        let bytes = codegen::translate(program.insns())?;
        Ok(Compiled {
            program: program.clone(),
            code: ExecMem::new(&bytes)?,
            len: bytes.len(),
            state: State::new(),
            budget: program.budget(),
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
    pub fn run(&mut self, ctx: &mut XdpContext<'_>, env: &mut Env<'_>) -> Result<Action, RunError> {
        env.counters.runs += 1;
        let r = self.exec(ctx, env);
        env.counters.record(&r);
        r
    }

    fn exec(&mut self, ctx: &mut XdpContext<'_>, env: &mut Env<'_>) -> Result<Action, RunError> {
        if !self.program.matches(env.maps) {
            return Err(RunError::MapMismatch(0));
        }
        if ctx.data > ctx.data_end || ctx.data_end > ctx.buf.len() {
            return Err(RunError::OutOfBounds(0));
        }
        let budget = self.budget;
        let buf = ctx.buf.as_mut_ptr() as u64;
        let st = &mut *self.state;
        st.data = buf + ctx.data as u64;
        st.data_end = buf + ctx.data_end as u64;
        (st.unit_lo, st.unit_hi) = (u64::MAX, u64::MAX);
        st.ifindex = ctx.ingress_ifindex as u64;
        st.rxq = ctx.rx_queue_index as u64;
        st.budget = budget;
        st.error = runtime::err::NONE;
        st.ctx = ctx as *mut XdpContext<'_> as usize;
        st.env = env as *mut Env<'_> as usize;
        // SAFETY: the mapping holds code `codegen::translate` generated for the SysV ABI with
        // this signature; it lives as long as `self`, which this call borrows.
        let entry: Entry = unsafe { std::mem::transmute::<*const u8, Entry>(self.code.as_ptr()) };
        // SAFETY: the generated code touches only `st` (boxed, owned by self), the frame
        // between st.data and st.data_end, st's stack and map values (each access checked
        // against those regions first), and calls back only `runtime::helper` and
        // `runtime::check_map` with `&mut st`; `ctx` and `env` are not used meanwhile.
        let r0 = unsafe { entry(st) };
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
    pub fn run(&mut self, ctx: &mut XdpContext<'_>, env: &mut Env<'_>) -> Result<Action, RunError> {
        match self {
            Runner::Jit(c) => c.run(ctx, env),
            Runner::Interp(p, _) => sluice_ebpf::run(p, ctx, env),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The run-time checks on code the verifier never saw (a stand-in for a verifier bug):
    //! each is a `RunError`, never an access outside the frame, the stack or a map value, and
    //! never an endless run.
    use super::*;
    use sluice_ebpf::insn::{alu, class, jmp, Insn, PSEUDO_MAP_FD, SRC_X};
    use sluice_ebpf::{Counters, MapDef, MapKind, Maps, NoTrace};

    fn i(op: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn::new(op, dst, src, off, imm)
    }
    const LDXW: u8 = class::LDX | 0x60;
    const LDXB: u8 = class::LDX | 0x60 | 0x10;
    const LDXDW: u8 = class::LDX | 0x60 | 0x18;
    const STDW: u8 = class::ST | 0x60 | 0x18;
    const MOV_K: u8 = class::ALU64 | alu::MOV;
    const MOV_X: u8 = class::ALU64 | alu::MOV | SRC_X;
    const ADD_K: u8 = class::ALU64 | alu::ADD;
    const EXIT: u8 = class::JMP | jmp::EXIT;

    /// Runs unverified `insns` with `budget` on a 60-byte frame and one 8-byte array map.
    fn run_unverified(insns: &[Insn], budget: u64) -> (Result<Action, RunError>, Counters) {
        let defs = [MapDef {
            name: "a".into(),
            kind: MapKind::Array,
            key_size: 4,
            value_size: 8,
            max_entries: 4,
            flags: 0,
        }];
        // Any verified program with those maps; its code is replaced below.
        let stub = Program::verify(vec![i(MOV_K, 0, 0, 0, 2), i(EXIT, 0, 0, 0, 0)], &defs).unwrap();
        let bytes = codegen::translate(insns).unwrap();
        let mut c = Compiled {
            program: stub,
            code: ExecMem::new(&bytes).unwrap(),
            len: bytes.len(),
            state: State::new(),
            budget,
        };
        let mut maps = Maps::new(&defs).unwrap();
        let mut buf = [0u8; 128];
        let mut ctx = XdpContext::new(&mut buf, 16, 60).unwrap();
        let mut counters = Counters::default();
        let mut env = Env {
            maps: &mut maps,
            now_ns: 0,
            cpu: 0,
            trace: &mut NoTrace,
            counters: &mut counters,
        };
        let r = c.run(&mut ctx, &mut env);
        (r, counters)
    }

    #[test]
    fn out_of_region_accesses_stop_the_run() {
        if !available() {
            eprintln!("skip: no JIT on this architecture");
            return;
        }
        let data = i(LDXW, 2, 1, 0, 0);
        let cases: Vec<(Vec<Insn>, usize)> = vec![
            // Past data_end, and before data (in the headroom).
            (vec![data, i(LDXB, 0, 2, 60, 0), i(EXIT, 0, 0, 0, 0)], 1),
            (vec![data, i(LDXB, 0, 2, -1, 0), i(EXIT, 0, 0, 0, 0)], 1),
            // A scalar as an address; the context written, or read 8 bytes wide.
            (
                vec![
                    i(MOV_K, 2, 0, 0, 4096),
                    i(STDW, 2, 0, 0, 0),
                    i(EXIT, 0, 0, 0, 0),
                ],
                1,
            ),
            (vec![i(STDW, 1, 0, 0, 0), i(EXIT, 0, 0, 0, 0)], 0),
            (vec![i(LDXDW, 0, 1, 0, 0), i(EXIT, 0, 0, 0, 0)], 0),
            (vec![i(LDXW, 0, 1, 24, 0), i(EXIT, 0, 0, 0, 0)], 0),
            // Below the stack through R10, and through a copy of it.
            (vec![i(LDXDW, 0, 10, -520, 0), i(EXIT, 0, 0, 0, 0)], 0),
            (
                vec![
                    i(MOV_X, 2, 10, 0, 0),
                    i(ADD_K, 2, 0, 0, 8),
                    i(LDXB, 0, 2, -1, 0),
                    i(EXIT, 0, 0, 0, 0),
                ],
                2,
            ),
        ];
        for (insns, pc) in cases {
            let (r, c) = run_unverified(&insns, 100);
            assert_eq!(r, Err(RunError::OutOfBounds(pc)), "{insns:?}");
            assert_eq!(c.run_errors, 1);
        }
    }

    #[test]
    fn a_map_value_pointer_stays_inside_its_maps_values() {
        if !available() {
            eprintln!("skip: no JIT on this architecture");
            return;
        }
        // key 1 on the stack, lookup, then a load at r0 + off.
        let prog = |off: i16, size: u8| {
            let mut p = vec![
                i(class::ST | 0x60, 10, 0, -4, 1),
                i(MOV_X, 2, 10, 0, 0),
                i(ADD_K, 2, 0, 0, -4),
            ];
            p.extend(Insn::lddw(1, PSEUDO_MAP_FD, 0));
            p.extend([
                i(class::JMP | jmp::CALL, 0, 0, 0, 1),
                i(class::JMP | jmp::JNE, 0, 0, 1, 0),
                i(EXIT, 0, 0, 0, 0),
                i(class::LDX | 0x60 | size, 0, 0, off, 0),
                i(EXIT, 0, 0, 0, 0),
            ]);
            p
        };
        assert_eq!(
            run_unverified(&prog(0, 0x18), 100).0,
            Ok(Action::Drop(sluice_ebpf::DropReason::Aborted))
        );
        assert_eq!(
            run_unverified(&prog(7, 0x10), 100).0,
            Ok(Action::Drop(sluice_ebpf::DropReason::Aborted))
        );
        // Past the map's storage, before it, and straddling two values: stopped.
        for (off, size) in [(24, 0x10), (-9, 0x10), (4, 0x18)] {
            assert_eq!(
                run_unverified(&prog(off, size), 100).0,
                Err(RunError::OutOfBounds(8))
            );
        }
        // Into the next value of the same map: host pointers carry no provenance, so this is
        // one map value like any other here (the interpreter's tagged pointers refuse it).
        assert_eq!(
            run_unverified(&prog(8, 0x10), 100).0,
            Ok(Action::Drop(sluice_ebpf::DropReason::Aborted))
        );
    }

    #[test]
    fn an_endless_loop_runs_out_of_budget() {
        if !available() {
            eprintln!("skip: no JIT on this architecture");
            return;
        }
        let ja_back = i(class::JMP | jmp::JA, 0, 0, -1, 0);
        let (r, c) = run_unverified(&[i(MOV_K, 0, 0, 0, 2), ja_back, i(EXIT, 0, 0, 0, 0)], 1000);
        assert_eq!(r, Err(RunError::Budget));
        assert_eq!(c.insns, 1000, "the budget, as the interpreter counts it");
    }

    #[test]
    fn division_by_zero_and_wide_shifts_as_the_kernel() {
        if !available() {
            eprintln!("skip: no JIT on this architecture");
            return;
        }
        let ret = |op: u8, a: u64, b: i32| {
            let mut p = Insn::lddw(0, 0, a).to_vec();
            p.extend([
                i(MOV_K, 1, 0, 0, b),
                i(op | SRC_X, 0, 1, 0, 0),
                i(EXIT, 0, 0, 0, 0),
            ]);
            match run_unverified(&p, 100).0 {
                Ok(Action::Drop(sluice_ebpf::DropReason::InvalidAction(v))) => v,
                Ok(Action::Drop(sluice_ebpf::DropReason::Aborted)) => 0,
                other => panic!("{other:?}"),
            }
        };
        let a = 0xdead_beef_0000_0007;
        assert_eq!(ret(class::ALU64 | alu::DIV, a, 0), 0);
        assert_eq!(ret(class::ALU64 | alu::MOD, a, 0), a);
        assert_eq!(
            ret(class::ALU | alu::MOD, a, 0),
            7,
            "32-bit: the upper half cleared"
        );
        assert_eq!(ret(class::ALU | alu::DIV, a, 0), 0);
        assert_eq!(
            ret(class::ALU64 | alu::LSH, a, 64),
            a,
            "shift counts masked to 63"
        );
        assert_eq!(ret(class::ALU | alu::RSH, a, 32), 7, "and to 31");
        assert_eq!(
            ret(class::ALU | alu::RSH, 0x1_0000_0007, 0),
            7,
            "a 32-bit shift by 0 zero-extends"
        );
    }
}
