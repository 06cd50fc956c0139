//! The verifier's first pass over the control-flow graph: opcodes and registers are valid,
//! every jump lands on an instruction, nothing falls off the end, and every instruction is
//! reachable from the entry.

use crate::error::{Reason, VerifyError};
use crate::insn::{alu, atomic, class, jmp, mode, Insn, FP, MAX_INSNS, PSEUDO_CALL, PSEUDO_MAP_FD};

fn err(insn: usize, reason: Reason) -> VerifyError {
    VerifyError { insn, reason }
}

/// Whether an opcode (with its fields) is one this verifier handles.
fn check_opcode(i: &Insn) -> Result<(), Reason> {
    let bad = Err(Reason::BadOpcode(i.op));
    if i.dst > FP {
        return Err(Reason::BadRegister(i.dst));
    }
    if i.src > FP && !i.is_lddw() {
        return Err(Reason::BadRegister(i.src));
    }
    match i.class() {
        class::ALU | class::ALU64 => {
            let code = i.code();
            if i.dst == FP {
                return Err(Reason::BadRegister(FP));
            }
            match code {
                alu::END
                    if !matches!(i.imm, 16 | 32 | 64)
                        || (i.class() == class::ALU64 && i.src_is_reg()) =>
                {
                    return bad
                }
                alu::END => {}
                alu::NEG if i.src_is_reg() || i.off != 0 => return bad,
                // A non-zero offset selects the v4 signed division and sign-extending moves.
                _ if code > alu::ARSH || i.off != 0 => return bad,
                _ => {}
            }
            if matches!(code, alu::DIV | alu::MOD) && !i.src_is_reg() && i.imm == 0 {
                return Err(Reason::DivisionByZero);
            }
            Ok(())
        }
        class::JMP | class::JMP32 => {
            let code = i.code();
            let is_jmp = i.class() == class::JMP;
            match code {
                jmp::JA if is_jmp && i.op == 0x05 => Ok(()),
                jmp::CALL if is_jmp && i.op == 0x85 => match i.src {
                    0 => Ok(()),
                    PSEUDO_CALL => Err(Reason::BpfToBpfCall),
                    _ => bad,
                },
                jmp::EXIT if is_jmp && i.op == 0x95 => Ok(()),
                jmp::JEQ..=jmp::JSGE | jmp::JLT..=jmp::JSLE => Ok(()),
                _ => bad,
            }
        }
        class::LD => {
            if matches!(i.mode(), mode::ABS | mode::IND) {
                return Err(Reason::LegacyPacketAccess);
            }
            if !i.is_lddw() || !(i.src == 0 || i.src == PSEUDO_MAP_FD) {
                return bad;
            }
            if i.dst == FP {
                return Err(Reason::BadRegister(FP));
            }
            Ok(())
        }
        class::LDX => {
            if i.mode() != mode::MEM {
                return bad;
            }
            if i.dst == FP {
                return Err(Reason::BadRegister(FP));
            }
            Ok(())
        }
        class::ST if i.mode() == mode::MEM => Ok(()),
        class::STX if i.mode() == mode::MEM => Ok(()),
        class::STX if i.mode() == mode::ATOMIC => {
            let ok_size = matches!(i.size(), 4 | 8);
            let op = i.imm & !atomic::FETCH;
            let ok_op = matches!(op, atomic::ADD | atomic::OR | atomic::AND | atomic::XOR)
                || i.imm == atomic::XCHG
                || i.imm == atomic::CMPXCHG;
            if ok_size && ok_op {
                Ok(())
            } else {
                bad
            }
        }
        _ => bad,
    }
}

/// The instruction after `i` in straight-line order (LDDW takes two slots).
pub fn next(insns: &[Insn], i: usize) -> usize {
    if insns[i].is_lddw() {
        i + 2
    } else {
        i + 1
    }
}

/// Checks the graph; returns which slots are LDDW second halves.
pub fn check(insns: &[Insn]) -> Result<Vec<bool>, VerifyError> {
    let n = insns.len();
    if n == 0 {
        return Err(err(0, Reason::Empty));
    }
    if n > MAX_INSNS {
        return Err(err(MAX_INSNS, Reason::TooLong(n)));
    }
    let mut second = vec![false; n];
    let mut i = 0;
    while i < n {
        check_opcode(&insns[i]).map_err(|r| err(i, r))?;
        if insns[i].is_lddw() {
            if i + 1 >= n {
                return Err(err(i, Reason::FallThrough));
            }
            second[i + 1] = true;
        }
        i = next(insns, i);
    }
    let mut seen = vec![false; n];
    let mut todo = vec![0usize];
    seen[0] = true;
    while let Some(i) = todo.pop() {
        let ins = &insns[i];
        let mut succ = [None, None];
        match (ins.class(), ins.code()) {
            (class::JMP, jmp::EXIT) => {}
            (class::JMP, jmp::JA) => succ[0] = Some((i as i64 + 1 + ins.off as i64, true)),
            (class::JMP, jmp::CALL) => succ[0] = Some((i as i64 + 1, false)),
            (class::JMP | class::JMP32, _) => {
                succ[0] = Some((i as i64 + 1, false));
                succ[1] = Some((i as i64 + 1 + ins.off as i64, true));
            }
            _ => succ[0] = Some((next(insns, i) as i64, false)),
        }
        for (t, is_jump) in succ.into_iter().flatten() {
            if t < 0 || t >= n as i64 || second[t as usize] {
                let reason = if is_jump {
                    Reason::JumpOutOfRange(t)
                } else {
                    Reason::FallThrough
                };
                return Err(err(i, reason));
            }
            if !seen[t as usize] {
                seen[t as usize] = true;
                todo.push(t as usize);
            }
        }
    }
    if let Some(i) = (0..n).find(|&i| !seen[i] && !second[i]) {
        return Err(err(i, Reason::Unreachable));
    }
    Ok(second)
}
