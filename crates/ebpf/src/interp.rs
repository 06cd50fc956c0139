//! The interpreter. It runs only verified programs but still checks every memory access and
//! bounds the instructions of a run (defence in depth: a verifier bug becomes a counted
//! `RunError`, never a panic or an access outside the frame, the stack or a map value).
//!
//! Pointers are tagged addresses, not host addresses (the crate forbids `unsafe`): the top
//! byte names the region (context, packet, stack, map value, map), the rest an offset in it.

use crate::alu;
use crate::error::RunError;
use crate::helpers::{self, Memory};
use crate::insn::{atomic, class, jmp, mode, Insn, PSEUDO_MAP_FD};
use crate::maps::Maps;
use crate::program::Program;
use crate::xdp::{Action, Env, XdpContext};

const KIND_SHIFT: u32 = 56;
const CTX: u64 = 1;
const PKT: u64 = 2;
const STACK: u64 = 3;
const MAP_VALUE: u64 = 4;
const OFF_MASK: u64 = (1 << KIND_SHIFT) - 1;
/// A map value address: map index (12 bits) | value unit (24 bits) | byte offset (20 bits).
const MV_MAP_SHIFT: u32 = 44;
const MV_UNIT_SHIFT: u32 = 20;
const STACK_SIZE: usize = 512;

// The helpers' context pointer is this interpreter's context tag.
const _: () = assert!(helpers::CTX_POINTER == CTX << KIND_SHIFT);

fn tag(kind: u64, off: u64) -> u64 {
    (kind << KIND_SHIFT) | (off & OFF_MASK)
}

/// The address of a value unit of a map, as bpf_map_lookup_elem returns it.
fn map_value(map: usize, unit: u32) -> u64 {
    tag(
        MAP_VALUE,
        ((map as u64) << MV_MAP_SHIFT) | ((unit as u64) << MV_UNIT_SHIFT),
    )
}

/// The bytes at `addr..addr+len` in whichever region it names, if inside it.
fn mem<'b>(
    ctx: &'b mut XdpContext<'_>,
    stack: &'b mut [u8; STACK_SIZE],
    maps: &'b mut Maps,
    addr: u64,
    len: usize,
) -> Option<&'b mut [u8]> {
    let off = addr & OFF_MASK;
    match addr >> KIND_SHIFT {
        PKT => {
            let start = usize::try_from(off).ok()?;
            let end = start.checked_add(len)?;
            if start < ctx.data || end > ctx.data_end {
                return None;
            }
            ctx.buf.get_mut(start..end)
        }
        STACK => {
            let start = usize::try_from(off).ok()?;
            stack.get_mut(start..start.checked_add(len)?)
        }
        MAP_VALUE => {
            let map = (off >> MV_MAP_SHIFT) as usize;
            let unit = ((off >> MV_UNIT_SHIFT) & 0xff_ffff) as u32;
            let start = (off & 0xf_ffff) as usize;
            let value = maps.maps_mut().get_mut(map)?.unit_mut(unit)?;
            value.get_mut(start..start.checked_add(len)?)
        }
        _ => None,
    }
}

fn load_le(b: &[u8]) -> u64 {
    let mut v = [0u8; 8];
    v[..b.len()].copy_from_slice(b);
    u64::from_le_bytes(v)
}

/// Runs a verified program on a frame: the action, or why it stopped (both counted).
pub fn run(
    program: &Program,
    ctx: &mut XdpContext<'_>,
    env: &mut Env<'_>,
) -> Result<Action, RunError> {
    env.counters.runs += 1;
    let r = exec(program, ctx, env);
    env.counters.record(&r);
    r
}

fn exec(p: &Program, ctx: &mut XdpContext<'_>, env: &mut Env<'_>) -> Result<Action, RunError> {
    if !p.matches(env.maps) {
        return Err(RunError::MapMismatch(0));
    }
    if ctx.data > ctx.data_end || ctx.data_end > ctx.buf.len() {
        return Err(RunError::OutOfBounds(0));
    }
    let insns = p.insns();
    // 16 registers so that any 4-bit register field indexes in range.
    let mut reg = [0u64; 16];
    reg[1] = helpers::CTX_POINTER;
    reg[10] = tag(STACK, STACK_SIZE as u64);
    let mut stack = [0u8; STACK_SIZE];
    let mut pc = 0usize;
    let mut steps = 0u64;
    loop {
        steps += 1;
        if steps > p.budget() {
            env.counters.insns += steps - 1;
            return Err(RunError::Budget);
        }
        let i: &Insn = insns.get(pc).ok_or(RunError::BadInsn(pc))?;
        let (d, s) = (i.dst as usize, i.src as usize);
        let off = i.off as i64 as u64;
        match i.class() {
            class::ALU | class::ALU64 => {
                let is64 = i.class() == class::ALU64;
                let code = i.code();
                let src = if i.src_is_reg() && code != crate::insn::alu::END {
                    reg[s]
                } else {
                    i.imm as i64 as u64
                };
                let to_be = i.src_is_reg() || is64;
                reg[d] = alu::eval(code, reg[d], src, is64, to_be, i.imm)
                    .ok_or(RunError::BadInsn(pc))?;
                pc += 1;
            }
            class::LD => {
                if !i.is_lddw() {
                    return Err(RunError::BadInsn(pc));
                }
                reg[d] = if i.src == PSEUDO_MAP_FD {
                    helpers::map_pointer(i.imm64)
                } else {
                    i.imm64
                };
                pc += 2;
            }
            class::LDX => {
                let addr = reg[s].wrapping_add(off);
                let size = i.size();
                reg[d] = if addr >> KIND_SHIFT == CTX {
                    if size != 4 {
                        return Err(RunError::OutOfBounds(pc));
                    }
                    match addr & OFF_MASK {
                        0 | 8 => tag(PKT, ctx.data as u64),
                        4 => tag(PKT, ctx.data_end as u64),
                        12 => ctx.ingress_ifindex as u64,
                        16 => ctx.rx_queue_index as u64,
                        20 => 0,
                        _ => return Err(RunError::OutOfBounds(pc)),
                    }
                } else {
                    load_le(
                        mem(ctx, &mut stack, env.maps, addr, size)
                            .ok_or(RunError::OutOfBounds(pc))?,
                    )
                };
                pc += 1;
            }
            class::ST | class::STX if i.mode() == mode::MEM => {
                let v = if i.class() == class::ST {
                    i.imm as i64 as u64
                } else {
                    reg[s]
                };
                let size = i.size();
                let b = mem(ctx, &mut stack, env.maps, reg[d].wrapping_add(off), size)
                    .ok_or(RunError::OutOfBounds(pc))?;
                b.copy_from_slice(&v.to_le_bytes()[..size]);
                pc += 1;
            }
            class::STX if i.mode() == mode::ATOMIC => {
                let size = i.size();
                let b = mem(ctx, &mut stack, env.maps, reg[d].wrapping_add(off), size)
                    .ok_or(RunError::OutOfBounds(pc))?;
                let old = load_le(b);
                let mask = if size == 8 { u64::MAX } else { u32::MAX as u64 };
                let src = reg[s] & mask;
                let new = match i.imm {
                    atomic::XCHG => src,
                    atomic::CMPXCHG => {
                        if old == reg[0] & mask {
                            src
                        } else {
                            old
                        }
                    }
                    op => match op & !atomic::FETCH {
                        atomic::ADD => old.wrapping_add(src),
                        atomic::OR => old | src,
                        atomic::AND => old & src,
                        atomic::XOR => old ^ src,
                        _ => return Err(RunError::BadInsn(pc)),
                    },
                } & mask;
                b.copy_from_slice(&new.to_le_bytes()[..size]);
                if i.imm == atomic::CMPXCHG {
                    reg[0] = old;
                } else if i.imm & atomic::FETCH != 0 {
                    reg[s] = old;
                }
                pc += 1;
            }
            class::JMP | class::JMP32 => {
                let target = (pc as i64).wrapping_add(1).wrapping_add(i.off as i64);
                let jump = |t: i64| usize::try_from(t).map_err(|_| RunError::BadInsn(pc));
                match (i.class(), i.code()) {
                    (class::JMP, jmp::JA) => pc = jump(target)?,
                    (class::JMP, jmp::EXIT) => {
                        env.counters.insns += steps;
                        return Ok(Action::from_return(reg[0]));
                    }
                    (class::JMP, jmp::CALL) => {
                        let args = [reg[1], reg[2], reg[3], reg[4], reg[5]];
                        reg[0] = helpers::call(i.imm, args, &mut Tagged(&mut stack), ctx, env, pc)?;
                        pc += 1;
                    }
                    (cls, code) => {
                        let is64 = cls == class::JMP;
                        let src = if i.src_is_reg() {
                            reg[s]
                        } else {
                            i.imm as i64 as u64
                        };
                        pc = if alu::cond(code, reg[d], src, is64).ok_or(RunError::BadInsn(pc))? {
                            jump(target)?
                        } else {
                            pc + 1
                        };
                    }
                }
            }
            _ => return Err(RunError::BadInsn(pc)),
        }
    }
}

/// The interpreter's memory for helpers: tagged addresses over the frame, its stack and maps.
struct Tagged<'s>(&'s mut [u8; STACK_SIZE]);

impl Memory for Tagged<'_> {
    fn bytes<'b>(
        &'b mut self,
        ctx: &'b mut XdpContext<'_>,
        maps: &'b mut Maps,
        addr: u64,
        len: usize,
    ) -> Option<&'b mut [u8]> {
        mem(ctx, self.0, maps, addr, len)
    }

    fn value_addr(&mut self, _maps: &mut Maps, map: usize, unit: u32) -> u64 {
        map_value(map, unit)
    }
}
