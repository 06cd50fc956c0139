//! The load-time verifier: the interpreter trusts nothing it was not shown here.
//!
//! After a pass over the control-flow graph (cfg.rs), it explores every path of the program by
//! abstract interpretation (value.rs, state.rs): registers carry types — scalar ranges,
//! context, packet pointers with offsets, data_end, stack pointers, maps, map values and
//! maybe-null lookup results — and every memory access, helper call (call.rs) and exit is
//! checked against them. Loops are allowed when the exploration terminates within a budget
//! of processed instructions, like the kernel's complexity limit; a branch whose outcome the
//! ranges decide is followed one way only, so a counted loop is explored iteration by
//! iteration and an unbounded one runs out of budget.

mod call;
mod cfg;
pub mod state;
pub mod value;

pub use crate::insn::MAX_INSNS;

use crate::error::{Reason, VerifyError};
use crate::insn::{alu, atomic, class, jmp, mode, Insn, PSEUDO_MAP_FD};
use crate::maps::MapDef;
use state::State;
use value::{Range, Val, MAX_PACKET_OFF};

/// The kernel's complexity limit: instructions processed over all paths.
pub const MAX_EXPLORED: usize = 1_000_000;
/// The most paths waiting to be explored at once (the kernel's jump-sequence limit).
pub const MAX_PENDING: usize = 8192;

/// What a successful verification found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verified {
    /// Instructions processed over all paths: an upper bound on any one run's length.
    pub explored: usize,
}

enum Next {
    Fall,
    Jump(usize),
    /// (state if taken, state if not, target); `None` where the branch cannot happen.
    Branch(Option<Box<State>>, Option<Box<State>>, usize),
    Exit,
}

/// Verifies a program against the maps it references (by index), within `max_explored`.
pub fn verify(
    insns: &[Insn],
    maps: &[MapDef],
    max_explored: usize,
) -> Result<Verified, VerifyError> {
    cfg::check(insns)?;
    let mut pending: Vec<(usize, State)> = vec![(0, State::entry())];
    let mut explored = 0usize;
    while let Some((mut pc, mut st)) = pending.pop() {
        loop {
            explored += 1;
            if explored > max_explored {
                return Err(VerifyError {
                    insn: pc,
                    reason: Reason::Complexity(max_explored),
                });
            }
            let next = step(&mut st, &insns[pc], pc, maps)
                .map_err(|reason| VerifyError { insn: pc, reason })?;
            match next {
                Next::Fall => pc = cfg::next(insns, pc),
                Next::Jump(t) => pc = t,
                Next::Exit => break,
                Next::Branch(taken, fall, target) => match (taken, fall) {
                    (Some(t), Some(f)) => {
                        if pending.len() >= MAX_PENDING {
                            return Err(VerifyError {
                                insn: pc,
                                reason: Reason::Complexity(max_explored),
                            });
                        }
                        pending.push((target, *t));
                        st = *f;
                        pc += 1;
                    }
                    (Some(t), None) => {
                        st = *t;
                        pc = target;
                    }
                    (None, Some(f)) => {
                        st = *f;
                        pc += 1;
                    }
                    (None, None) => break,
                },
            }
        }
    }
    Ok(Verified { explored })
}

fn read(st: &State, r: u8) -> Result<Val, Reason> {
    match st.regs[r as usize] {
        Val::Uninit => Err(Reason::UninitRegister(r)),
        Val::Invalid => Err(Reason::InvalidatedPacketPointer(r)),
        v => Ok(v),
    }
}

fn step(st: &mut State, i: &Insn, pc: usize, maps: &[MapDef]) -> Result<Next, Reason> {
    match i.class() {
        class::ALU | class::ALU64 => alu_step(st, i).map(|_| Next::Fall),
        class::LD => {
            st.regs[i.dst as usize] = if i.src == PSEUDO_MAP_FD {
                if i.imm64 >= maps.len() as u64 {
                    return Err(Reason::BadMapReference(i.imm64 as u32));
                }
                Val::MapPtr(i.imm64 as u32)
            } else {
                Val::Scalar(Range::exact(i.imm64))
            };
            Ok(Next::Fall)
        }
        class::LDX => {
            let base = read(st, i.src)?;
            let v = access(st, maps, i.src, base, i.off as i64, i.size(), None)?;
            st.regs[i.dst as usize] = v;
            Ok(Next::Fall)
        }
        class::ST => {
            let base = read(st, i.dst)?;
            let v = Val::Scalar(Range::exact(i.imm as i64 as u64));
            access(st, maps, i.dst, base, i.off as i64, i.size(), Some(v))?;
            Ok(Next::Fall)
        }
        class::STX if i.mode() == mode::ATOMIC => {
            let base = read(st, i.dst)?;
            let src = read(st, i.src)?;
            if !matches!(src, Val::Scalar(_)) {
                return Err(Reason::PointerLeak);
            }
            let size = i.size();
            // Arithmetic on a spilled pointer's bytes, or fetching them, would leak its address.
            if !matches!(
                access(st, maps, i.dst, base, i.off as i64, size, None)?,
                Val::Scalar(_)
            ) {
                let off = match base {
                    Val::Stack(o) => o + i.off as i64,
                    _ => i.off as i64,
                };
                return Err(Reason::SpilledPointerRead(off, size));
            }
            access(
                st,
                maps,
                i.dst,
                base,
                i.off as i64,
                size,
                Some(Val::Scalar(Range::bytes(size))),
            )?;
            if i.imm == atomic::CMPXCHG {
                if !matches!(read(st, 0)?, Val::Scalar(_)) {
                    return Err(Reason::PointerLeak);
                }
                st.regs[0] = Val::Scalar(Range::bytes(size));
            } else if i.imm & atomic::FETCH != 0 {
                st.regs[i.src as usize] = Val::Scalar(Range::bytes(size));
            }
            Ok(Next::Fall)
        }
        class::STX => {
            let base = read(st, i.dst)?;
            let v = read(st, i.src)?;
            access(st, maps, i.dst, base, i.off as i64, i.size(), Some(v))?;
            Ok(Next::Fall)
        }
        _ => jmp_step(st, i, pc, maps),
    }
}

fn alu_step(st: &mut State, i: &Insn) -> Result<(), Reason> {
    let is64 = i.class() == class::ALU64;
    let code = i.code();
    let d = i.dst as usize;
    let imm = if is64 {
        i.imm as i64 as u64
    } else {
        i.imm as u32 as u64
    };
    let src = if i.src_is_reg() && code != alu::END {
        read(st, i.src)?
    } else {
        Val::Scalar(Range::exact(imm))
    };
    if code == alu::MOV {
        st.regs[d] = match src {
            _ if is64 => src,
            Val::Scalar(b) => {
                Val::Scalar(value::scalar_op(code, Range::exact(0), b, false, false, 0))
            }
            _ => return Err(Reason::BadPointerArithmetic("32-bit move of a pointer")),
        };
        return Ok(());
    }
    let dst = read(st, i.dst)?;
    let to_be = i.src_is_reg() || is64;
    st.next_id = st.next_id.wrapping_add(1);
    let fresh = st.next_id;
    st.regs[d] = match (dst, src) {
        (Val::Scalar(a), Val::Scalar(b)) => {
            if matches!(code, alu::DIV | alu::MOD) && b.may_be_zero() {
                return Err(Reason::DivisionByZero);
            }
            Val::Scalar(value::scalar_op(code, a, b, is64, to_be, i.imm))
        }
        _ if !is64 => {
            return Err(Reason::BadPointerArithmetic(
                "32-bit arithmetic on a pointer",
            ))
        }
        (p, Val::Scalar(b)) if code == alu::ADD || code == alu::SUB => {
            ptr_add(p, b, code == alu::SUB, fresh)?
        }
        (Val::Scalar(a), p) if code == alu::ADD => ptr_add(p, a, false, fresh)?,
        (p, q) if code == alu::SUB => match (p, q) {
            (Val::Pkt { .. } | Val::PktEnd, Val::Pkt { .. } | Val::PktEnd) => {
                Val::Scalar(Range::ANY)
            }
            (Val::Stack(x), Val::Stack(y)) => Val::Scalar(Range::exact(x.wrapping_sub(y) as u64)),
            _ => {
                return Err(Reason::BadPointerArithmetic(
                    "subtracting pointers into different regions",
                ))
            }
        },
        _ => {
            return Err(Reason::BadPointerArithmetic(
                "only adding or subtracting a scalar",
            ))
        }
    };
    Ok(())
}

/// ptr + b (or ptr - b).
fn ptr_add(p: Val, b: Range, sub: bool, fresh: u32) -> Result<Val, Reason> {
    let bound = |lo: i64, hi: i64, max: i64, what| {
        let (lo, hi) = match b.known() {
            Some(c) => {
                let c = if sub {
                    (c as i64).wrapping_neg()
                } else {
                    c as i64
                };
                (lo.saturating_add(c), hi.saturating_add(c))
            }
            None if !sub && b.max <= max as u64 => (lo + b.min as i64, hi + b.max as i64),
            None => return Err(Reason::BadPointerArithmetic(what)),
        };
        if lo < -max || hi > max {
            return Err(Reason::BadPointerArithmetic(what));
        }
        Ok((lo, hi))
    };
    match p {
        Val::Pkt {
            id,
            off,
            vmin,
            vmax,
        } => {
            let what = "packet pointer offset beyond 0xffff or unbounded";
            match b.known() {
                Some(_) => {
                    let (off, _) = bound(off, off, MAX_PACKET_OFF, what)?;
                    Ok(Val::Pkt {
                        id,
                        off,
                        vmin,
                        vmax,
                    })
                }
                // A new variable part: a new identity, nothing proven for it yet.
                None => {
                    let (vmin, vmax) = bound(vmin, vmax, MAX_PACKET_OFF, what)?;
                    if off + vmax > MAX_PACKET_OFF {
                        return Err(Reason::BadPointerArithmetic(what));
                    }
                    Ok(Val::Pkt {
                        id: fresh,
                        off,
                        vmin,
                        vmax,
                    })
                }
            }
        }
        Val::MapValue { map, lo, hi } => {
            let max = crate::maps::MAX_VALUE_SIZE as i64;
            let (lo, hi) = bound(
                lo,
                hi,
                max,
                "map value pointer offset beyond its size or unbounded",
            )?;
            Ok(Val::MapValue { map, lo, hi })
        }
        Val::Stack(o) => match b.known() {
            Some(_) => {
                let (lo, _) = bound(o, o, 1 << 20, "stack pointer offset out of range")?;
                Ok(Val::Stack(lo))
            }
            None => Err(Reason::StackVariableOffset),
        },
        Val::Ctx => Err(Reason::BadPointerArithmetic("context pointer")),
        Val::PktEnd => Err(Reason::BadPointerArithmetic("data_end")),
        Val::MapPtr(_) => Err(Reason::BadPointerArithmetic("map pointer")),
        Val::MapValueOrNull { .. } => Err(Reason::BadPointerArithmetic(
            "map lookup result before its null check",
        )),
        Val::Scalar(_) | Val::Uninit | Val::Invalid => {
            Err(Reason::BadPointerArithmetic("not a pointer"))
        }
    }
}

/// Checks a load (`write` None) or store of `size` bytes at base+off; a load's value.
fn access(
    st: &mut State,
    maps: &[MapDef],
    r: u8,
    base: Val,
    off: i64,
    size: usize,
    write: Option<Val>,
) -> Result<Val, Reason> {
    let leak = matches!(write, Some(v) if !matches!(v, Val::Scalar(_)));
    match base {
        Val::Pkt {
            id,
            off: o,
            vmin,
            vmax,
        } => {
            let proven = st.proven(id);
            if o + off + vmin < 0 || o + off + size as i64 > proven {
                let (lo, hi) = (o + off + vmin, o + off + vmax);
                let proven = proven.max(0) as u64;
                return Err(Reason::PacketOutOfBounds {
                    write: write.is_some(),
                    size,
                    lo,
                    hi,
                    proven,
                });
            }
            if leak {
                return Err(Reason::PointerLeak);
            }
            Ok(Val::Scalar(Range::bytes(size)))
        }
        Val::Stack(o) => match write {
            Some(v) => st.stack_write(o + off, size, v).map(|_| Val::Uninit),
            None => st.stack_read(o + off, size),
        },
        Val::Ctx => {
            if write.is_some() {
                return Err(Reason::BadContextAccess(off, size));
            }
            match (off, size) {
                // data and data_meta (no metadata area: data_meta == data).
                (0, 4) | (8, 4) => Ok(Val::Pkt {
                    id: 0,
                    off: 0,
                    vmin: 0,
                    vmax: 0,
                }),
                (4, 4) => Ok(Val::PktEnd),
                // ingress_ifindex, rx_queue_index, egress_ifindex.
                (12, 4) | (16, 4) | (20, 4) => Ok(Val::Scalar(Range::U32)),
                _ => Err(Reason::BadContextAccess(off, size)),
            }
        }
        Val::MapValue { map, lo, hi } => {
            let value_size = maps[map as usize].value_size;
            let (lo, hi) = (lo + off, hi + off);
            if lo < 0 || hi + size as i64 > value_size as i64 {
                return Err(Reason::MapValueOutOfBounds {
                    lo,
                    hi,
                    size,
                    value_size,
                });
            }
            if leak {
                return Err(Reason::PointerLeak);
            }
            Ok(Val::Scalar(Range::bytes(size)))
        }
        Val::MapValueOrNull { .. } => Err(Reason::MaybeNull(r)),
        Val::Scalar(_) => Err(Reason::NotAPointer(r, "a scalar")),
        Val::PktEnd => Err(Reason::NotAPointer(r, "data_end")),
        Val::MapPtr(_) => Err(Reason::NotAPointer(r, "a map")),
        Val::Uninit => Err(Reason::UninitRegister(r)),
        Val::Invalid => Err(Reason::InvalidatedPacketPointer(r)),
    }
}

fn jmp_step(st: &mut State, i: &Insn, pc: usize, maps: &[MapDef]) -> Result<Next, Reason> {
    let target = (pc as i64 + 1 + i.off as i64) as usize;
    let code = i.code();
    match code {
        jmp::JA => return Ok(Next::Jump(target)),
        jmp::EXIT => {
            return match st.regs[0] {
                Val::Scalar(_) => Ok(Next::Exit),
                _ => Err(Reason::BadReturn),
            };
        }
        jmp::CALL => {
            call::call(st, maps, i.imm)?;
            return Ok(Next::Fall);
        }
        _ => {}
    }
    let is64 = i.class() == class::JMP;
    let a = read(st, i.dst)?;
    let imm = if is64 {
        i.imm as i64 as u64
    } else {
        i.imm as u32 as u64
    };
    let b = if i.src_is_reg() {
        read(st, i.src)?
    } else {
        Val::Scalar(Range::exact(imm))
    };
    match (a, b) {
        (Val::Scalar(ra), Val::Scalar(rb)) => {
            if let Some(taken) = value::decide(code, ra, rb, is64) {
                return Ok(if taken {
                    Next::Jump(target)
                } else {
                    Next::Fall
                });
            }
            let branch = |taken: bool| {
                value::refine(code, ra, rb, taken, is64).map(|(na, nb)| {
                    let mut s = Box::new(st.clone());
                    s.regs[i.dst as usize] = Val::Scalar(na);
                    if i.src_is_reg() {
                        s.regs[i.src as usize] = Val::Scalar(nb);
                    }
                    s
                })
            };
            let (t, f) = (branch(true), branch(false));
            Ok(Next::Branch(t, f, target))
        }
        (
            Val::Pkt {
                id, off: lo, vmin, ..
            },
            Val::PktEnd,
        )
        | (
            Val::PktEnd,
            Val::Pkt {
                id, off: lo, vmin, ..
            },
        ) if is64 && lo >= 0 && vmin >= 0 => {
            let pkt_first = matches!(a, Val::Pkt { .. });
            // (branch where the bound holds, bytes proven): pkt <= end proves lo, pkt < end lo+1.
            let proof = match (code, pkt_first) {
                (jmp::JGT, true) => Some((false, lo)),
                (jmp::JGE, true) => Some((false, lo + 1)),
                (jmp::JLT, true) => Some((true, lo + 1)),
                (jmp::JLE, true) => Some((true, lo)),
                (jmp::JGT, false) => Some((true, lo + 1)),
                (jmp::JGE, false) => Some((true, lo)),
                (jmp::JLT, false) => Some((false, lo)),
                (jmp::JLE, false) => Some((false, lo + 1)),
                _ => None,
            };
            let (mut t, mut f) = (st.clone(), st.clone());
            match proof {
                Some((true, n)) => t.prove(id, n),
                Some((false, n)) => f.prove(id, n),
                None => {}
            }
            Ok(Next::Branch(Some(Box::new(t)), Some(Box::new(f)), target))
        }
        // 64-bit only: a value's address may have zero low 32 bits.
        (Val::MapValueOrNull { map, id }, Val::Scalar(z))
        | (Val::Scalar(z), Val::MapValueOrNull { map, id })
            if is64 && z.known() == Some(0) && matches!(code, jmp::JEQ | jmp::JNE) =>
        {
            let (mut null, mut some) = (st.clone(), st.clone());
            null.for_each_val(|v| {
                if matches!(v, Val::MapValueOrNull { id: x, .. } if *x == id) {
                    *v = Val::Scalar(Range::exact(0));
                }
            });
            some.for_each_val(|v| {
                if matches!(v, Val::MapValueOrNull { id: x, .. } if *x == id) {
                    *v = Val::MapValue { map, lo: 0, hi: 0 };
                }
            });
            Ok(if code == jmp::JEQ {
                Next::Branch(Some(Box::new(null)), Some(Box::new(some)), target)
            } else {
                Next::Branch(Some(Box::new(some)), Some(Box::new(null)), target)
            })
        }
        (a, b) => pointer_compare(st, code, a, b, is64, target),
    }
}

/// A comparison involving a pointer that the arms above do not handle: allowed only where its
/// outcome is the same wherever memory is, since the interpreter's pointers are tagged
/// addresses and the JIT's host addresses (the kernel's "pointer comparison prohibited").
fn pointer_compare(
    st: &State,
    code: u8,
    a: Val,
    b: Val,
    is64: bool,
    target: usize,
) -> Result<Next, Reason> {
    if !is64 {
        return Err(Reason::PointerComparison("32-bit comparison of a pointer"));
    }
    if code == jmp::JSET {
        return Err(Reason::PointerComparison("JSET on a pointer's bits"));
    }
    let decided = |taken: bool| {
        Ok(if taken {
            Next::Jump(target)
        } else {
            Next::Fall
        })
    };
    match (a, b) {
        // Offsets from one base, which is far from 0 and 2^63 in both runtimes.
        (Val::Pkt { .. } | Val::PktEnd, Val::Pkt { .. } | Val::PktEnd) => Ok(Next::Branch(
            Some(Box::new(st.clone())),
            Some(Box::new(st.clone())),
            target,
        )),
        (Val::Stack(x), Val::Stack(y)) => {
            // fp+x against fp+y orders as x against y, signed or not: bias both into u64.
            let code = match code {
                jmp::JSGT => jmp::JGT,
                jmp::JSGE => jmp::JGE,
                jmp::JSLT => jmp::JLT,
                jmp::JSLE => jmp::JLE,
                c => c,
            };
            let bias = |v: i64| (v as u64) ^ (1 << 63);
            match crate::alu::cond(code, bias(x), bias(y), true) {
                Some(taken) => decided(taken),
                None => Err(Reason::PointerComparison(
                    "unknown comparison of stack pointers",
                )),
            }
        }
        // A pointer that cannot be NULL against the constant 0: never equal.
        (p, Val::Scalar(z)) | (Val::Scalar(z), p)
            if z.known() == Some(0)
                && matches!(code, jmp::JEQ | jmp::JNE)
                && matches!(
                    p,
                    Val::Ctx
                        | Val::Pkt { .. }
                        | Val::PktEnd
                        | Val::Stack(_)
                        | Val::MapPtr(_)
                        | Val::MapValue { .. }
                ) =>
        {
            decided(code == jmp::JNE)
        }
        (Val::Scalar(_), _) | (_, Val::Scalar(_)) => Err(Reason::PointerComparison(
            "a pointer against a scalar other than a null check against 0",
        )),
        _ => Err(Reason::PointerComparison(
            "pointers into different regions, or not both into the packet or stack",
        )),
    }
}
