//! eBPF to x86-64, one instruction at a time, with the registers mapped 1:1 as the Linux JIT
//! maps them (R0 = rax, R1-R5 = rdi rsi rdx rcx r8, R6-R9 = rbx r13 r14 r15, R10 = rbp).
//! R12 holds the run's `State`, R9 the instructions left in the budget, R10/R11 are scratch.
//!
//! What the verifier proves is still checked at run time, as the interpreter checks it: every
//! load, store and atomic goes through a region check (frame, stack, the cached map value,
//! else a call that finds the map value), so a verifier bug is a `RunError`, never an access
//! outside the frame, the stack or one map value. Each basic block subtracts its length
//! from the budget on entry, so no run exceeds the verifier's explored count.

use sluice_ebpf::helpers::{map_pointer, Helper, CTX_POINTER};
use sluice_ebpf::insn::{alu, atomic, class, jmp, mode, Insn, PSEUDO_MAP_FD};

use crate::runtime::{self, err, off};
use crate::x86::{cc, Asm, Label, Size, R10, R11, R12, R13, R14, R15, R8, R9, RAX, RBP, RBX};
use crate::x86::{RCX, RDI, RDX, RSI, RSP};
use crate::JitError;

/// eBPF register -> x86-64 register.
const REG: [u8; 11] = [RAX, RDI, RSI, RDX, RCX, R8, RBX, R13, R14, R15, RBP];

/// Code placed after the program's, reached only on a slow or failing path.
enum Stub {
    /// The access at R11 failed its first region check: try the others, then a call.
    Mem {
        at: Label,
        ok: Label,
        size: usize,
        pc: usize,
        stack_first: bool,
    },
    /// A 4-byte load through the context pointer: the xdp_md field at `field`.
    Ctx {
        at: Label,
        done: Label,
        dst: u8,
        field: i16,
        pc: usize,
    },
}

struct Gen {
    a: Asm,
    stubs: Vec<Stub>,
    exit: Label,
}

/// Machine code for a verified program's instructions; `Unsupported` for anything this
/// translation does not handle (the caller runs the interpreter instead). Its run-time checks
/// do not depend on the verifier (tests translate unverified code to exercise them).
pub fn translate(insns: &[Insn]) -> Result<Vec<u8>, JitError> {
    let n = insns.len();
    let (second, leader) = blocks(insns)?;
    let mut g = Gen {
        a: Asm::default(),
        stubs: Vec::new(),
        exit: Label(0),
    };
    g.exit = g.a.label();
    let labels: Vec<Label> = (0..n).map(|_| g.a.label()).collect();
    let budget_err = g.a.label();
    g.prologue();
    let mut pc = 0;
    while pc < n {
        let i = insns[pc];
        g.a.bind(labels[pc]);
        if let Some(len) = leader[pc] {
            g.a.alu_ri(true, 5, R9, len as i32); // sub r9, len
            g.a.jcc(cc::B, budget_err);
        }
        if i.dst > 10 || i.src > 10 {
            return Err(JitError::Unsupported(pc));
        }
        let target = |pc: usize| -> Result<Label, JitError> {
            let t = pc as i64 + 1 + i.off as i64;
            usize::try_from(t)
                .ok()
                .filter(|&t| t < n && !second[t])
                .map(|t| labels[t])
                .ok_or(JitError::Unsupported(pc))
        };
        match i.class() {
            class::ALU | class::ALU64 => g.alu(&i, pc)?,
            class::LD => {
                if !i.is_lddw() || i.dst == 10 {
                    return Err(JitError::Unsupported(pc));
                }
                let v = match i.src {
                    0 => i.imm64,
                    PSEUDO_MAP_FD => map_pointer(i.imm64),
                    _ => return Err(JitError::Unsupported(pc)),
                };
                g.a.mov_imm64(REG[i.dst as usize], v);
            }
            class::LDX if i.mode() == mode::MEM && i.dst != 10 => g.ldx(&i, pc),
            class::ST if i.mode() == mode::MEM => {
                let (b, disp) = g.addr(i.dst, i.off, i.size(), pc);
                g.a.store_imm(Size::of(i.size()), b, disp, i.imm);
            }
            class::STX if i.mode() == mode::MEM => {
                let (b, disp) = g.addr(i.dst, i.off, i.size(), pc);
                g.a.store(Size::of(i.size()), b, disp, REG[i.src as usize]);
            }
            class::STX if i.mode() == mode::ATOMIC => g.atomic(&i, pc)?,
            class::JMP | class::JMP32 => match (i.class(), i.code()) {
                (class::JMP, jmp::JA) => g.a.jmp(target(pc)?),
                (class::JMP, jmp::EXIT) => g.a.jmp(g.exit),
                (class::JMP, jmp::CALL) => g.call(&i, pc)?,
                (cls, code) => {
                    let t = target(pc)?;
                    g.cond(&i, cls == class::JMP, code, t, pc)?;
                }
            },
            _ => return Err(JitError::Unsupported(pc)),
        }
        pc += if i.is_lddw() { 2 } else { 1 };
    }
    // The verifier forbids falling off the end; if it ever happened, stop with its error.
    g.error_here(err::BAD_INSN, n);
    g.a.bind(budget_err);
    g.error_here(err::BUDGET, 0);
    g.epilogue();
    g.emit_stubs();
    g.a.finish().ok_or(JitError::Unsupported(0))
}

/// Which slots are LDDW second halves, and at each basic block's first instruction the
/// block's length in executed instructions (an LDDW is one, as the interpreter counts).
#[allow(clippy::type_complexity)]
fn blocks(insns: &[Insn]) -> Result<(Vec<bool>, Vec<Option<usize>>), JitError> {
    let n = insns.len();
    let mut second = vec![false; n];
    let mut is_leader = vec![false; n + 1];
    is_leader[0] = true;
    let mut pc = 0;
    while pc < n {
        let i = &insns[pc];
        let next = if i.is_lddw() { pc + 2 } else { pc + 1 };
        if i.is_lddw() {
            if pc + 1 >= n {
                return Err(JitError::Unsupported(pc));
            }
            second[pc + 1] = true;
        }
        if matches!(i.class(), class::JMP | class::JMP32) && i.code() != jmp::CALL {
            is_leader[next.min(n)] = true;
            if i.code() != jmp::EXIT {
                let t = pc as i64 + 1 + i.off as i64;
                match usize::try_from(t) {
                    Ok(t) if t < n => is_leader[t] = true,
                    _ => return Err(JitError::Unsupported(pc)),
                }
            }
        }
        pc = next;
    }
    let mut leader = vec![None; n];
    let mut current = 0;
    let mut pc = 0;
    while pc < n {
        if is_leader[pc] {
            current = pc;
            leader[pc] = Some(0);
        }
        if let Some(len) = leader[current].as_mut() {
            *len += 1;
        }
        pc += if insns[pc].is_lddw() { 2 } else { 1 };
    }
    Ok((second, leader))
}

impl Gen {
    fn prologue(&mut self) {
        let a = &mut self.a;
        for r in [RBP, RBX, R12, R13, R14, R15] {
            a.push(r);
        }
        // Six pushes after the return address leave rsp 8 off 16-byte alignment.
        a.alu_ri(true, 5, RSP, 8);
        a.mov_rr(true, R12, RDI);
        a.lea(RBP, R12, off::STACK_END);
        a.load(Size::B8, R9, R12, off::BUDGET);
        // Registers start at 0 as in the interpreter (the verifier refuses reading them).
        for r in [RAX, RSI, RDX, RCX, R8, RBX, R13, R14, R15] {
            a.alu_rr(false, 0x31, r, r);
        }
        a.mov_imm64(RDI, CTX_POINTER);
    }

    fn epilogue(&mut self) {
        let a = &mut self.a;
        a.bind(self.exit);
        a.store(Size::B8, R12, off::BUDGET, R9);
        a.alu_ri(true, 0, RSP, 8);
        for r in [R15, R14, R13, R12, RBX, RBP] {
            a.pop(r);
        }
        a.ret();
    }

    fn error_here(&mut self, code: u32, pc: usize) {
        self.a.mov_m32_imm(R12, off::ERROR, code);
        self.a.mov_m32_imm(R12, off::ERROR_PC, pc as u32);
        self.a.jmp(self.exit);
    }

    /// Falls through when R11 ..R11+size lies in the region `[lo, hi)` at `lo_off` in State.
    fn region_check(&mut self, lo_off: i32, size: usize, fail: Label) {
        let a = &mut self.a;
        a.cmp_rm(R11, R12, lo_off);
        a.jcc(cc::B, fail);
        a.load(Size::B8, R10, R12, lo_off + 8);
        a.alu_ri(true, 5, R10, size as i32);
        a.alu_rr(true, 0x39, R11, R10);
        a.jcc(cc::A, fail);
    }

    /// The operand `[reg + disp]` of an access of `size` bytes at base + off, checked: either
    /// R11 after a run-time region check, or rbp itself for a constant offset inside the stack
    /// (R10 is read-only, so such an access needs no check at run time).
    fn addr(&mut self, base: u8, disp: i16, size: usize, pc: usize) -> (u8, i32) {
        let disp = disp as i32;
        if base == 10 && disp >= -(runtime::STACK_SIZE as i32) && disp + size as i32 <= 0 {
            return (RBP, disp);
        }
        self.a.lea(R11, REG[base as usize], disp);
        let stack_first = base == 10;
        let (at, ok) = (self.a.label(), self.a.label());
        let first = if stack_first {
            off::STACK_LO
        } else {
            off::DATA
        };
        self.region_check(first, size, at);
        self.a.bind(ok);
        self.stubs.push(Stub::Mem {
            at,
            ok,
            size,
            pc,
            stack_first,
        });
        (R11, 0)
    }

    fn ldx(&mut self, i: &Insn, pc: usize) {
        let d = REG[i.dst as usize];
        let size = i.size();
        let done = self.a.label();
        if size == 4 && i.src != 10 {
            // The context is not memory: its fields are read from State (data and data_end
            // as host pointers), exactly when the base is the context pointer.
            let at = self.a.label();
            self.a.mov_imm64(R10, CTX_POINTER);
            self.a.alu_rr(true, 0x39, REG[i.src as usize], R10);
            self.a.jcc(cc::E, at);
            self.stubs.push(Stub::Ctx {
                at,
                done,
                dst: d,
                field: i.off,
                pc,
            });
        }
        let (b, disp) = self.addr(i.src, i.off, size, pc);
        self.a.load(Size::of(size), d, b, disp);
        self.a.bind(done);
    }

    fn alu(&mut self, i: &Insn, pc: usize) -> Result<(), JitError> {
        let w = i.class() == class::ALU64;
        let code = i.code();
        if i.dst == 10 {
            return Err(JitError::Unsupported(pc));
        }
        let d = REG[i.dst as usize];
        let s = REG[i.src as usize];
        let reg = i.src_is_reg();
        let a = &mut self.a;
        match code {
            alu::END => {
                let to_be = reg || w;
                match (i.imm, to_be) {
                    (16, false) => a.movzx16_rr(d, d),
                    (32, false) => a.mov_rr(false, d, d),
                    (64, false) => {}
                    (16, true) => {
                        a.ror16_8(d);
                        a.movzx16_rr(d, d);
                    }
                    (32, true) => a.bswap(false, d),
                    (64, true) => a.bswap(true, d),
                    _ => return Err(JitError::Unsupported(pc)),
                }
            }
            alu::ADD | alu::SUB | alu::OR | alu::AND | alu::XOR => {
                let (op, ext) = match code {
                    alu::ADD => (0x01, 0),
                    alu::SUB => (0x29, 5),
                    alu::OR => (0x09, 1),
                    alu::AND => (0x21, 4),
                    _ => (0x31, 6),
                };
                if reg {
                    a.alu_rr(w, op, d, s);
                } else {
                    a.alu_ri(w, ext, d, i.imm);
                }
            }
            alu::MOV => match (reg, w) {
                (true, _) => a.mov_rr(w, d, s),
                (false, true) => a.mov_imm64(d, i.imm as i64 as u64),
                (false, false) => a.mov_imm32(d, i.imm as u32),
            },
            alu::MUL => {
                if reg {
                    a.imul_rr(w, d, s);
                } else {
                    a.imul_ri(w, d, i.imm);
                }
            }
            alu::NEG => a.unary(w, 3, d),
            alu::LSH | alu::RSH | alu::ARSH => {
                let ext = match code {
                    alu::LSH => 4,
                    alu::RSH => 5,
                    _ => 7,
                };
                if !reg {
                    let mask = if w { 63 } else { 31 };
                    a.shift_ri(w, ext, d, (i.imm as u32 & mask) as u8);
                } else if s == RCX {
                    a.shift_cl(w, ext, d);
                } else if d == RCX {
                    a.mov_rr(true, R11, RCX);
                    a.mov_rr(true, RCX, s);
                    a.shift_cl(w, ext, R11);
                    a.mov_rr(true, RCX, R11);
                } else {
                    a.mov_rr(true, R11, RCX);
                    a.mov_rr(true, RCX, s);
                    a.shift_cl(w, ext, d);
                    a.mov_rr(true, RCX, R11);
                }
                if !w {
                    // A 32-bit shift by 0 need not clear the upper half: make it.
                    a.mov_rr(false, d, d);
                }
            }
            alu::DIV | alu::MOD => {
                let div = code == alu::DIV;
                if reg {
                    a.mov_rr(true, R11, s);
                } else {
                    a.mov_imm64(R11, i.imm as i64 as u64);
                }
                let (zero, done) = (a.label(), a.label());
                a.alu_rr(w, 0x85, R11, R11);
                a.jcc(cc::E, zero);
                a.store(Size::B8, R12, off::SAVE, RAX);
                a.store(Size::B8, R12, off::SAVE + 8, RDX);
                a.mov_rr(true, RAX, d);
                a.alu_rr(false, 0x31, RDX, RDX);
                a.unary(w, 6, R11);
                a.mov_rr(true, R11, if div { RAX } else { RDX });
                a.load(Size::B8, RAX, R12, off::SAVE);
                a.load(Size::B8, RDX, R12, off::SAVE + 8);
                a.mov_rr(true, d, R11);
                a.jmp(done);
                // The kernel's division by zero: x / 0 = 0, x % 0 = x.
                a.bind(zero);
                if div {
                    a.mov_imm32(d, 0);
                } else if !w {
                    a.mov_rr(false, d, d);
                }
                a.bind(done);
            }
            _ => return Err(JitError::Unsupported(pc)),
        }
        Ok(())
    }

    fn atomic(&mut self, i: &Insn, pc: usize) -> Result<(), JitError> {
        let size = i.size();
        if size != 4 && size != 8 {
            return Err(JitError::Unsupported(pc));
        }
        let w = size == 8;
        let s = REG[i.src as usize];
        let fetch_op = match i.imm {
            atomic::ADD | atomic::OR | atomic::AND | atomic::XOR => None,
            x if x == (atomic::ADD | atomic::FETCH) => None,
            atomic::XCHG | atomic::CMPXCHG => None,
            x if x == (atomic::OR | atomic::FETCH) => Some(0x09),
            x if x == (atomic::AND | atomic::FETCH) => Some(0x21),
            x if x == (atomic::XOR | atomic::FETCH) => Some(0x31),
            _ => return Err(JitError::Unsupported(pc)),
        };
        let (b, disp) = self.addr(i.dst, i.off, size, pc);
        let a = &mut self.a;
        match i.imm {
            atomic::ADD => a.lock_op(w, 0x01, b, disp, s),
            atomic::OR => a.lock_op(w, 0x09, b, disp, s),
            atomic::AND => a.lock_op(w, 0x21, b, disp, s),
            atomic::XOR => a.lock_op(w, 0x31, b, disp, s),
            x if x == (atomic::ADD | atomic::FETCH) => a.lock_xadd(w, b, disp, s),
            atomic::XCHG => a.xchg(w, b, disp, s),
            atomic::CMPXCHG => {
                a.lock_cmpxchg(w, b, disp, s);
                if !w {
                    // R0 = the old value, zero-extended, whether or not it was equal.
                    a.mov_rr(false, RAX, RAX);
                }
            }
            _ => {
                // Fetch-or/and/xor: a compare-exchange loop through rax (saved: it is R0).
                let op = fetch_op.unwrap_or(0x09);
                a.store(Size::B8, R12, off::SAVE, s);
                a.store(Size::B8, R12, off::SAVE + 8, RAX);
                a.load(Size::of(size), RAX, b, disp);
                let retry = a.label();
                a.bind(retry);
                a.mov_rr(w, R10, RAX);
                a.alu_rm(w, op, R10, R12, off::SAVE);
                a.lock_cmpxchg(w, b, disp, R10);
                a.jcc(cc::NE, retry);
                a.mov_rr(true, R10, RAX);
                a.load(Size::B8, RAX, R12, off::SAVE + 8);
                a.mov_rr(w, s, R10);
            }
        }
        Ok(())
    }

    fn call(&mut self, i: &Insn, pc: usize) -> Result<(), JitError> {
        if i.src != 0 {
            return Err(JitError::Unsupported(pc));
        }
        if Helper::from_id(i.imm).is_none() {
            // The verifier checks a helper only on paths it explores: on one it proved dead,
            // an unknown helper is the interpreter's BadInsn if ever reached.
            self.error_here(err::BAD_INSN, pc);
            return Ok(());
        }
        let a = &mut self.a;
        a.mov_m32_imm(R12, off::HELPER_ID, i.imm as u32);
        a.mov_m32_imm(R12, off::HELPER_PC, pc as u32);
        a.store(Size::B8, R12, off::SAVE, R9);
        // SysV arguments: (state, R1, ..., R5), shifted up one register from top to bottom.
        a.mov_rr(true, R9, R8);
        a.mov_rr(true, R8, RCX);
        a.mov_rr(true, RCX, RDX);
        a.mov_rr(true, RDX, RSI);
        a.mov_rr(true, RSI, RDI);
        a.mov_rr(true, RDI, R12);
        a.mov_imm64(R10, runtime::helper as *const () as u64);
        a.call_r(R10);
        a.load(Size::B8, R9, R12, off::SAVE);
        a.cmp_m32_i8(R12, off::ERROR, 0);
        a.jcc(cc::NE, self.exit);
        Ok(())
    }

    fn cond(
        &mut self,
        i: &Insn,
        w: bool,
        code: u8,
        target: Label,
        pc: usize,
    ) -> Result<(), JitError> {
        let cond = match code {
            jmp::JEQ => cc::E,
            jmp::JNE | jmp::JSET => cc::NE,
            jmp::JGT => cc::A,
            jmp::JGE => cc::AE,
            jmp::JLT => cc::B,
            jmp::JLE => cc::BE,
            jmp::JSGT => cc::G,
            jmp::JSGE => cc::GE,
            jmp::JSLT => cc::L,
            jmp::JSLE => cc::LE,
            _ => return Err(JitError::Unsupported(pc)),
        };
        let d = REG[i.dst as usize];
        let a = &mut self.a;
        match (i.src_is_reg(), code == jmp::JSET) {
            (true, false) => a.alu_rr(w, 0x39, d, REG[i.src as usize]),
            (true, true) => a.alu_rr(w, 0x85, d, REG[i.src as usize]),
            (false, false) => a.alu_ri(w, 7, d, i.imm),
            (false, true) => a.test_ri(w, d, i.imm),
        }
        a.jcc(cond, target);
        Ok(())
    }

    fn emit_stubs(&mut self) {
        let stubs = std::mem::take(&mut self.stubs);
        for stub in stubs {
            match stub {
                Stub::Ctx {
                    at,
                    done,
                    dst,
                    field,
                    pc,
                } => {
                    self.a.bind(at);
                    let from = match field {
                        0 | 8 => Some(off::DATA),
                        4 => Some(off::DATA_END),
                        12 => Some(off::IFINDEX),
                        16 => Some(off::RXQ),
                        20 => None,
                        _ => {
                            self.error_here(err::OUT_OF_BOUNDS, pc);
                            continue;
                        }
                    };
                    match from {
                        Some(o) => self.a.load(Size::B8, dst, R12, o),
                        None => self.a.mov_imm32(dst, 0),
                    }
                    self.a.jmp(done);
                }
                Stub::Mem {
                    at,
                    ok,
                    size,
                    pc,
                    stack_first,
                } => self.mem_stub(at, ok, size, pc, stack_first),
            }
        }
    }

    fn mem_stub(&mut self, at: Label, ok: Label, size: usize, pc: usize, stack_first: bool) {
        self.a.bind(at);
        let second = if stack_first {
            off::DATA
        } else {
            off::STACK_LO
        };
        let (no2, no3) = (self.a.label(), self.a.label());
        self.region_check(second, size, no2);
        self.a.jmp(ok);
        self.a.bind(no2);
        self.region_check(off::UNIT_LO, size, no3);
        self.a.jmp(ok);
        self.a.bind(no3);
        // Not the cached unit: ask Rust which map value (if any) holds it.
        const SAVED: [u8; 8] = [RAX, RDI, RSI, RDX, RCX, R8, R9, R11];
        for (k, r) in SAVED.iter().enumerate() {
            self.a.store(Size::B8, R12, off::SAVE + 8 * k as i32, *r);
        }
        self.a.mov_rr(true, RDI, R12);
        self.a.mov_rr(true, RSI, R11);
        self.a.mov_imm32(RDX, size as u32);
        self.a
            .mov_imm64(R10, runtime::check_map as *const () as u64);
        self.a.call_r(R10);
        self.a.mov_rr(true, R10, RAX);
        for (k, r) in SAVED.iter().enumerate() {
            self.a.load(Size::B8, *r, R12, off::SAVE + 8 * k as i32);
        }
        self.a.alu_rr(true, 0x85, R10, R10);
        self.a.jcc(cc::NE, ok);
        self.error_here(err::OUT_OF_BOUNDS, pc);
    }
}
