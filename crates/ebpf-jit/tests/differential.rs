//! The JIT against the interpreter: the shipped programs on crafted frames, every ALU and
//! JMP opcode at both widths on edge values, byte swaps, atomics, and random verified programs.
//! Each comparison is of the whole outcome: action or error, buffer bytes, data/data_end,
//! redirect target, counters, trace output and every map's contents.

use std::cell::Cell;

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use sluice_ebpf::fuzzing::{fuzz_maps, FUZZ_EXPLORED};
use sluice_ebpf::insn::{alu, atomic, class, encode, jmp, Insn, PSEUDO_MAP_FD, SRC_X};
use sluice_ebpf::{programs, Action, MapDef, Maps, Program, RunError};
use sluice_ebpf_jit::differential::{self, both, Outcome};
use sluice_ebpf_jit::{available, Compiled, JitError, Mode, Runner};

const LDXW: u8 = class::LDX | 0x60;
const LDXDW: u8 = class::LDX | 0x60 | 0x18;
const STW: u8 = class::ST | 0x60;
const STDW: u8 = class::ST | 0x60 | 0x18;
const MOV_K: u8 = class::ALU64 | alu::MOV;
const MOV_X: u8 = class::ALU64 | alu::MOV | SRC_X;
const ADD_K: u8 = class::ALU64 | alu::ADD;
const EXIT: u8 = class::JMP | jmp::EXIT;
const CALL: u8 = class::JMP | jmp::CALL;

fn i(op: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn::new(op, dst, src, off, imm)
}

/// Both runtimes on `frame` (at `headroom` in a buffer with 64 bytes of tailroom), `rounds`
/// times on the same two map sets; asserts equal outcomes and returns the last.
fn compare(p: &Program, setup: &dyn Fn(&mut Maps), frame: &[u8], headroom: usize) -> Outcome {
    compare_rounds(p, setup, &[frame], headroom)
}

fn compare_rounds(
    p: &Program,
    setup: &dyn Fn(&mut Maps),
    frames: &[&[u8]],
    headroom: usize,
) -> Outcome {
    let mut jit = Compiled::compile(p).expect("the JIT takes every verified program");
    let (mut im, mut jm) = (Maps::new(p.maps()).unwrap(), Maps::new(p.maps()).unwrap());
    setup(&mut im);
    setup(&mut jm);
    let mut last = None;
    for (n, f) in frames.iter().enumerate() {
        let mut buf = vec![0u8; headroom + f.len() + 64];
        buf[headroom..headroom + f.len()].copy_from_slice(f);
        let (a, b) = both(p, &mut jit, &mut im, &mut jm, &buf, headroom, f.len());
        assert_eq!(a, b, "frame {n}: interpreter (left) and JIT (right) differ");
        last = Some(a);
    }
    last.expect("at least one frame")
}

/// Ethernet (optionally 802.1Q) + IPv4 + ports, padded to `len`.
fn frame(vlan: Option<u16>, proto: u8, sport: u16, dport: u16, len: usize) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    if let Some(tci) = vlan {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 0, 0, 0, 0, 0, 64, proto, 0, 0]);
    f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.resize(len.max(f.len()), 0xab);
    f
}

fn crafted_frames() -> Vec<Vec<u8>> {
    let mut v = vec![
        frame(None, 6, 4000, 80, 60),
        frame(None, 17, 53, 5353, 90),
        frame(Some(0x0064), 6, 4000, 80, 64),
        frame(Some(0x2005), 17, 1, 2, 1500),
        frame(None, 1, 0, 0, 42),
    ];
    // Short and odd frames: every prefix length of a tagged one up to 40 bytes.
    let tagged = frame(Some(7), 6, 4000, 80, 60);
    v.extend((0..40).map(|n| tagged[..n].to_vec()));
    let mut bad_ihl = frame(None, 6, 4000, 80, 60);
    bad_ihl[14] = 0x4f; // ihl = 15: the ports past the frame's end
    v.push(bad_ihl);
    v
}

fn five_tuple(sport: u16, dport: u16, proto: u8) -> Vec<u8> {
    let mut k = vec![10, 0, 0, 1, 10, 0, 0, 2];
    k.extend_from_slice(&sport.to_be_bytes());
    k.extend_from_slice(&dport.to_be_bytes());
    k.extend_from_slice(&[proto, 0, 0, 0]);
    k
}

#[test]
fn every_shipped_program_agrees_on_crafted_frames() {
    if !available() {
        eprintln!("skip: no JIT on this architecture");
        return;
    }
    let frames = crafted_frames();
    let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
    for &(name, bytes, section) in programs::SHIPPED {
        let (p, _) = sluice_ebpf::load(bytes, section).unwrap();
        let setup = |maps: &mut Maps| {
            if let Some(rules) = maps.id("rules") {
                // firewall's value is a u64, classify's a u32 class.
                let size = maps.map(rules).unwrap().def().value_size as usize;
                let value = &5u64.to_le_bytes()[..size];
                maps.set(rules, &five_tuple(4000, 80, 6), value, 0).unwrap();
            }
        };
        // Several headrooms: adjust_head's room differs.
        for headroom in [0, 4, 32, 256] {
            let out = compare_rounds(&p, &setup, &refs, headroom);
            assert!(out.result.is_ok(), "{name}: {:?}", out.result);
        }
    }
}

#[test]
fn shipped_programs_do_what_they_say_under_the_jit() {
    if !available() {
        eprintln!("skip: no JIT on this architecture");
        return;
    }
    let load = |name: &str| {
        let (bytes, section) = programs::shipped(name).unwrap();
        sluice_ebpf::load(bytes, section).unwrap().0
    };
    let none = |_: &mut Maps| {};
    let tagged = frame(Some(0x0064), 6, 4000, 80, 64);
    // VLAN strip: the tag is gone, byte for byte.
    let out = compare(&load("vlan_strip"), &none, &tagged, 32);
    let (d, e) = out.bounds;
    let mut untagged = tagged.clone();
    untagged.drain(12..16);
    assert_eq!(&out.buf[d..e], &untagged[..]);
    // Firewall: the rule's frame dropped and its hit counted; others pass.
    let fw = load("firewall");
    let rule = |maps: &mut Maps| {
        let rules = maps.id("rules").unwrap();
        maps.set(rules, &five_tuple(4000, 80, 6), &0u64.to_le_bytes(), 0)
            .unwrap();
    };
    let hit = frame(None, 6, 4000, 80, 60);
    let miss = frame(None, 6, 4000, 81, 60);
    let out = compare_rounds(&fw, &rule, &[&hit, &miss, &hit], 0);
    assert_eq!(
        out.result,
        Ok(Action::Drop(sluice_ebpf::DropReason::Program))
    );
    let hits: Vec<u8> = out.maps[0][0].1.clone();
    assert_eq!(hits, 2u64.to_le_bytes());
    // Port counter: frames and bytes per destination port.
    let out = compare_rounds(&load("port_counter"), &none, &[&hit, &miss, &hit], 0);
    let counted: Vec<_> = out.maps[0]
        .iter()
        .filter(|(_, v)| v.iter().any(|&b| b != 0))
        .collect();
    assert_eq!(counted.len(), 2, "ports 80 and 81");
    // Reflect: Tx with the addresses swapped; drop drops.
    let out = compare(&load("reflect"), &none, &hit, 0);
    assert_eq!(out.result, Ok(Action::Tx));
    assert_eq!(&out.buf[..6], &hit[6..12]);
    assert_eq!(
        compare(&load("drop"), &none, &hit, 0).result,
        Ok(Action::Drop(sluice_ebpf::DropReason::Program))
    );
}

/// `r0 = a; r1 = b; r0 OP= r1 (or imm b); exit`, if the verifier takes it.
fn alu_prog(op: u8, a: u64, b: u64) -> Option<Program> {
    let mut p = Vec::new();
    p.extend(Insn::lddw(0, 0, a));
    p.extend(Insn::lddw(1, 0, b));
    p.push(if op & SRC_X != 0 {
        i(op, 0, 1, 0, 0)
    } else {
        i(op, 0, 0, 0, b as i32)
    });
    p.push(i(EXIT, 0, 0, 0, 0));
    Program::verify(p, &[]).ok()
}

const EDGES: [u64; 18] = [
    0,
    1,
    2,
    7,
    31,
    32,
    33,
    63,
    64,
    65,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    0x1_0000_0000,
    0x8000_0000_0000_0000,
    0x7fff_ffff_ffff_ffff,
    u64::MAX,
    0x0123_4567_89ab_cdef,
];

fn r0(out: &Outcome) -> u64 {
    match out.result {
        Ok(Action::Drop(sluice_ebpf::DropReason::InvalidAction(v))) => v,
        Ok(Action::Drop(sluice_ebpf::DropReason::Aborted)) => 0,
        Ok(Action::Drop(sluice_ebpf::DropReason::Program)) => 1,
        Ok(Action::Pass) => 2,
        Ok(Action::Tx) => 3,
        Ok(Action::Redirect) => 4,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn every_alu_opcode_at_both_widths_on_edge_values() {
    if !available() {
        eprintln!("skip: no JIT on this architecture");
        return;
    }
    let none = |_: &mut Maps| {};
    let codes = [
        alu::ADD,
        alu::SUB,
        alu::MUL,
        alu::DIV,
        alu::OR,
        alu::AND,
        alu::LSH,
        alu::RSH,
        alu::NEG,
        alu::MOD,
        alu::XOR,
        alu::MOV,
        alu::ARSH,
    ];
    let mut ran = 0;
    for cls in [class::ALU, class::ALU64] {
        for code in codes {
            for x in [0, SRC_X] {
                for &a in &EDGES {
                    for &b in &EDGES {
                        let Some(p) = alu_prog(cls | code | x, a, b) else {
                            continue;
                        };
                        let out = compare(&p, &none, &[0u8; 60], 0);
                        let src = if x != 0 { b } else { b as i32 as i64 as u64 };
                        let want =
                            sluice_ebpf::alu::eval(code, a, src, cls == class::ALU64, false, 0)
                                .unwrap();
                        assert_eq!(r0(&out), want, "{cls:#x} {code:#x} {x:#x} {a:#x} {b:#x}");
                        ran += 1;
                    }
                }
            }
        }
    }
    // Division and modulo by a zero register are refused; everything else runs.
    assert!(ran > 7000, "only {ran} programs verified");
}

#[test]
fn byte_swaps_both_directions_and_widths() {
    if !available() {
        eprintln!("skip: no JIT on this architecture");
        return;
    }
    let none = |_: &mut Maps| {};
    let mut ran = 0;
    for op in [
        class::ALU | alu::END,
        class::ALU | alu::END | SRC_X,
        class::ALU64 | alu::END,
    ] {
        for bits in [16, 32, 64] {
            for &a in &EDGES {
                let mut p = Vec::new();
                p.extend(Insn::lddw(0, 0, a));
                p.push(i(op, 0, 0, 0, bits));
                p.push(i(EXIT, 0, 0, 0, 0));
                let Ok(p) = Program::verify(p, &[]) else {
                    continue;
                };
                let out = compare(&p, &none, &[0u8; 60], 0);
                let to_be = op & SRC_X != 0 || op & 0x07 == class::ALU64;
                let want = sluice_ebpf::alu::eval(alu::END, a, 0, false, to_be, bits).unwrap();
                assert_eq!(r0(&out), want, "{op:#x} {bits} {a:#x}");
                ran += 1;
            }
        }
    }
    assert!(ran >= 2 * 3 * EDGES.len(), "only {ran} byte swaps verified");
}

#[test]
fn every_jump_opcode_at_both_widths_on_edge_values() {
    if !available() {
        eprintln!("skip: no JIT on this architecture");
        return;
    }
    let none = |_: &mut Maps| {};
    let codes = [
        jmp::JEQ,
        jmp::JGT,
        jmp::JGE,
        jmp::JSET,
        jmp::JNE,
        jmp::JSGT,
        jmp::JSGE,
        jmp::JLT,
        jmp::JLE,
        jmp::JSLT,
        jmp::JSLE,
    ];
    let mut ran = 0;
    for cls in [class::JMP, class::JMP32] {
        for code in codes {
            for x in [0, SRC_X] {
                for &a in &EDGES {
                    for &b in &EDGES {
                        // r2 = a; r1 = b; if r2 OP r1 goto +2; r0 = 1; exit; r0 = 2; exit
                        let mut p = Vec::new();
                        p.extend(Insn::lddw(2, 0, a));
                        p.extend(Insn::lddw(1, 0, b));
                        p.push(if x != 0 {
                            i(cls | code | x, 2, 1, 2, 0)
                        } else {
                            i(cls | code, 2, 0, 2, b as i32)
                        });
                        p.extend([i(MOV_K, 0, 0, 0, 1), i(EXIT, 0, 0, 0, 0)]);
                        p.extend([i(MOV_K, 0, 0, 0, 2), i(EXIT, 0, 0, 0, 0)]);
                        let Ok(p) = Program::verify(p, &[]) else {
                            continue;
                        };
                        let out = compare(&p, &none, &[0u8; 60], 0);
                        let src = if x != 0 { b } else { b as i32 as i64 as u64 };
                        let taken =
                            sluice_ebpf::alu::cond(code, a, src, cls == class::JMP).unwrap();
                        assert_eq!(r0(&out), if taken { 2 } else { 1 });
                        ran += 1;
                    }
                }
            }
        }
    }
    assert_eq!(ran, 2 * codes.len() * 2 * EDGES.len() * EDGES.len());
}

#[test]
fn every_atomic_the_verifier_accepts_on_the_stack_and_a_map_value() {
    if !available() {
        eprintln!("skip: no JIT on this architecture");
        return;
    }
    let ops = [
        atomic::ADD,
        atomic::OR,
        atomic::AND,
        atomic::XOR,
        atomic::ADD | atomic::FETCH,
        atomic::OR | atomic::FETCH,
        atomic::AND | atomic::FETCH,
        atomic::XOR | atomic::FETCH,
        atomic::XCHG,
        atomic::CMPXCHG,
    ];
    let maps = vec![MapDef {
        name: "a".into(),
        kind: sluice_ebpf::MapKind::Array,
        key_size: 4,
        value_size: 16,
        max_entries: 2,
        flags: 0,
    }];
    let seed = |m: &mut Maps| {
        if !m.is_empty() {
            m.set(0, &1u32.to_le_bytes(), &[0x5a; 16], 0).unwrap();
        }
    };
    let mut ran = 0;
    for size in [0x00u8, 0x18] {
        for &op in &ops {
            for (src_reg, r0_init) in [(1u8, 0x00ff_00ff_00ff_00ffu64), (0, 0x5a5a_5a5a), (3, 7)] {
                let st = class::STX | 0xc0 | size;
                // On the stack: *(fp-8) = 0x5a..; r1 = 0xf0f0..; r0 = r0_init; atomic;
                // r0 ^= *(fp-8) ^ (r1 << 1); exit
                let mut p = vec![i(STDW, 10, 0, -8, 0x5a5a_5a5a)];
                p.extend(Insn::lddw(1, 0, 0xf0f0_f0f0_0f0f_0f0f));
                p.extend(Insn::lddw(3, 0, 0x1234_5678_9abc_def0));
                p.extend(Insn::lddw(0, 0, r0_init));
                p.push(i(st, 10, src_reg, -8, op));
                p.extend([
                    i(LDXDW, 4, 10, -8, 0),
                    i(class::ALU64 | alu::XOR | SRC_X, 0, 4, 0, 0),
                    i(MOV_X, 5, src_reg, 0, 0),
                    i(class::ALU64 | alu::LSH, 5, 0, 0, 1),
                    i(class::ALU64 | alu::XOR | SRC_X, 0, 5, 0, 0),
                    i(EXIT, 0, 0, 0, 0),
                ]);
                let stack = Program::verify(p, &[]);
                // In a map value: lookup key 1, then the same at value offset 8.
                let mut q = vec![
                    i(STW, 10, 0, -4, 1),
                    i(MOV_X, 2, 10, 0, 0),
                    i(ADD_K, 2, 0, 0, -4),
                ];
                q.extend(Insn::lddw(1, PSEUDO_MAP_FD, 0));
                q.extend([
                    i(CALL, 0, 0, 0, 1),
                    i(class::JMP | jmp::JNE, 0, 0, 2, 0),
                    i(MOV_K, 0, 0, 0, 2),
                    i(EXIT, 0, 0, 0, 0),
                    i(MOV_X, 6, 0, 0, 0),
                ]);
                q.extend(Insn::lddw(1, 0, 0xf0f0_f0f0_0f0f_0f0f));
                q.extend(Insn::lddw(3, 0, 0x1234_5678_9abc_def0));
                q.extend(Insn::lddw(0, 0, r0_init));
                q.push(i(st, 6, src_reg, 8, op));
                q.extend([
                    i(LDXDW, 4, 6, 8, 0),
                    i(class::ALU64 | alu::XOR | SRC_X, 0, 4, 0, 0),
                    i(MOV_X, 5, src_reg, 0, 0),
                    i(class::ALU64 | alu::LSH, 5, 0, 0, 1),
                    i(class::ALU64 | alu::XOR | SRC_X, 0, 5, 0, 0),
                    i(EXIT, 0, 0, 0, 0),
                ]);
                let in_map = Program::verify(q, &maps);
                // A fetch into R0 (src_reg 0) is a pointer leak for CMPXCHG's R0 only when
                // R0 is a pointer; here it is a scalar, so all of these verify.
                for p in [stack, in_map] {
                    let p = p.unwrap_or_else(|e| panic!("op {op:#x} size {size:#x}: {e}"));
                    let out = compare(&p, &seed, &[0u8; 60], 0);
                    assert!(out.result.is_ok(), "{:?}", out.result);
                    ran += 1;
                }
            }
        }
    }
    assert_eq!(ran, 2 * ops.len() * 3 * 2);
}

#[test]
fn helpers_agree_and_their_errors_are_the_interpreters() {
    if !available() {
        eprintln!("skip: no JIT on this architecture");
        return;
    }
    let none = |_: &mut Maps| {};
    // ktime, smp id, trace_printk of stack bytes, redirect, csum_diff of the frame, then
    // adjust_head by -4 and +4 and a read of the moved data.
    let mut p = vec![
        i(MOV_X, 6, 1, 0, 0),
        i(CALL, 0, 0, 0, 5),
        i(MOV_X, 7, 0, 0, 0),
        i(CALL, 0, 0, 0, 8),
        i(class::ALU64 | alu::ADD | SRC_X, 7, 0, 0, 0),
        i(STDW, 10, 0, -8, 0x6c6c_6568),
        i(MOV_X, 1, 10, 0, 0),
        i(ADD_K, 1, 0, 0, -8),
        i(MOV_K, 2, 0, 0, 8),
        i(MOV_X, 3, 7, 0, 0),
        i(MOV_K, 4, 0, 0, 4),
        i(MOV_K, 5, 0, 0, 5),
        i(CALL, 0, 0, 0, 6),
        i(class::ALU64 | alu::ADD | SRC_X, 7, 0, 0, 0),
        i(MOV_X, 1, 6, 0, 0),
        i(MOV_K, 2, 0, 0, -4),
        i(CALL, 0, 0, 0, 44),
        i(class::ALU64 | alu::ADD | SRC_X, 7, 0, 0, 0),
        i(LDXW, 2, 6, 0, 0),
        i(LDXW, 3, 6, 4, 0),
        i(MOV_X, 4, 2, 0, 0),
        i(ADD_K, 4, 0, 0, 16),
        i(class::JMP | jmp::JGT | SRC_X, 4, 3, 7, 0),
        i(MOV_X, 1, 2, 0, 0),
        i(MOV_K, 2, 0, 0, 16),
        i(MOV_K, 3, 0, 0, 0),
        i(MOV_K, 4, 0, 0, 0),
        i(MOV_X, 5, 7, 0, 0),
        i(CALL, 0, 0, 0, 28),
        i(class::ALU64 | alu::ADD | SRC_X, 7, 0, 0, 0),
        i(MOV_K, 1, 0, 0, 9),
        i(MOV_K, 2, 0, 0, 0),
        i(CALL, 0, 0, 0, 23),
        i(class::ALU64 | alu::ADD | SRC_X, 0, 7, 0, 0),
        i(EXIT, 0, 0, 0, 0),
    ];
    let prog = Program::verify(p.clone(), &[]).unwrap();
    for headroom in [0, 2, 4, 64] {
        let out = compare(&prog, &none, &frame(None, 6, 1, 2, 60), headroom);
        assert!(out.result.is_ok());
        assert_eq!(out.trace.len(), 1);
        assert_eq!(out.redirect, Some(9));
    }
    // A program the JIT refuses nothing of: an unknown opcode never verifies, so refusal is
    // only for what this translation lacks (none today).
    p.truncate(1);
    p.push(i(EXIT, 0, 0, 0, 0));
    assert!(Program::verify(p, &[]).is_err(), "R0 unset at exit");
}

#[test]
fn map_mismatch_and_bad_bounds_are_the_interpreters_errors() {
    if !available() {
        eprintln!("skip: no JIT on this architecture");
        return;
    }
    let (p, _) = sluice_ebpf::load(programs::FIREWALL, "xdp").unwrap();
    let mut jit = Compiled::compile(&p).unwrap();
    let (mut a, mut b) = (Maps::new(&[]).unwrap(), Maps::new(&[]).unwrap());
    let (x, y) = both(&p, &mut jit, &mut a, &mut b, &[0u8; 80], 0, 60);
    assert_eq!(x, y);
    assert_eq!(x.result, Err(RunError::MapMismatch(0)));
    assert_eq!(x.counters.run_errors, 1);
}

#[test]
fn runner_falls_back_when_asked_or_unavailable() {
    let (p, _) = sluice_ebpf::load(programs::NULL, "xdp").unwrap();
    let off = Runner::new(p.clone(), false);
    assert_eq!((off.mode(), off.fallback()), (Mode::Interp, None));
    let on = Runner::new(p, true);
    if available() {
        assert_eq!(on.mode(), Mode::Jit);
        assert_eq!(on.mode().to_string(), "jit");
    } else {
        assert_eq!(on.fallback(), Some(JitError::Unavailable));
    }
}

/// Scalar registers of the random bodies (R6 is the memory base, R9 the context, R10 the
/// stack; R1-R5 are clobbered by calls).
const SCALARS: [u8; 3] = [0, 7, 8];

/// Plausible instructions over the whole instruction set: every ALU op at both widths on
/// scalars, every jump at both widths, loads and stores of every size through R6 (the
/// frame's first 14 bytes, or a 16-byte map value), the stack and the context, every atomic,
/// helpers without arguments; so that most bodies verify.
fn insn() -> impl Strategy<Value = Insn> {
    let scalar = proptest::sample::select(SCALARS.to_vec());
    let imm = prop_oneof![
        Just(0i32),
        Just(1),
        Just(8),
        Just(16),
        Just(31),
        Just(32),
        Just(63),
        Just(64),
        -70i32..70,
        any::<i32>()
    ];
    let alu = (
        proptest::sample::select(vec![class::ALU, class::ALU64]),
        0u8..14,
        any::<bool>(),
        scalar.clone(),
        scalar.clone(),
        imm.clone(),
    )
        .prop_map(|(cls, code, x, d, s, imm)| {
            let code = code << 4;
            let x = x && code != alu::NEG && !(code == alu::END && cls == class::ALU64);
            let imm = match code {
                alu::END => [16, 32, 64][imm.unsigned_abs() as usize % 3],
                alu::DIV | alu::MOD if imm == 0 => 3,
                _ => imm,
            };
            Insn::new(cls | code | if x { SRC_X } else { 0 }, d, s, 0, imm)
        });
    let mem = (
        proptest::sample::select(vec![class::LDX, class::ST, class::STX]),
        proptest::sample::select(vec![0x00u8, 0x08, 0x10, 0x18]),
        proptest::sample::select(vec![6u8, 10, 9]),
        scalar.clone(),
        0i16..16,
        imm.clone(),
    )
        .prop_map(|(cls, size, base, s, k, imm)| {
            let bytes = [4i16, 2, 1, 8][size as usize >> 3];
            let (cls, size, off) = match base {
                10 => (cls, size, -8 * (1 + k % 8)),
                // Only 4-byte reads of the scalar fields of xdp_md.
                9 => (class::LDX, 0x00, [12, 16, 20][k as usize % 3]),
                _ => (cls, size, k % (15 - bytes)),
            };
            let op = cls | 0x60 | size;
            if cls == class::LDX {
                Insn::new(op, s, base, off, imm)
            } else {
                Insn::new(op, base, s, off, imm)
            }
        });
    let atomic = (
        proptest::sample::select(vec![0x00u8, 0x18]),
        proptest::sample::select(vec![10u8, 6]),
        scalar.clone(),
        proptest::sample::select(vec![
            0x00, 0x40, 0x50, 0xa0, 0x01, 0x41, 0x51, 0xa1, 0xe1, 0xf1,
        ]),
        0i16..8,
    )
        .prop_map(|(size, base, s, op, k)| {
            let off = if base == 10 {
                -8 * (1 + k)
            } else {
                [0, 4][k as usize % 2] * i16::from(size == 0)
            };
            Insn::new(class::STX | 0xc0 | size, base, s, off, op)
        });
    let jump = (
        proptest::sample::select(vec![class::JMP, class::JMP32]),
        proptest::sample::select(vec![
            0x00u8, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0xa0, 0xb0, 0xc0, 0xd0,
        ]),
        any::<bool>(),
        scalar.clone(),
        scalar,
        0i16..6,
        imm,
    )
        .prop_map(|(cls, code, x, d, s, off, imm)| {
            if code == jmp::JA {
                return Insn::new(class::JMP | jmp::JA, 0, 0, off, 0);
            }
            Insn::new(cls | code | if x { SRC_X } else { 0 }, d, s, off, imm)
        });
    let call = proptest::sample::select(vec![5i32, 8]).prop_map(|h| Insn::new(CALL, 0, 0, 0, h));
    prop_oneof![6 => alu, 4 => mem, 1 => atomic, 2 => jump, 1 => call]
}

/// Keeps every jump of a body inside it (its target at most the final exit).
fn clamp_jumps(body: &mut [Insn]) {
    let n = body.len() as i16;
    for (k, insn) in body.iter_mut().enumerate() {
        let is_jump = matches!(insn.op & 0x07, class::JMP | class::JMP32)
            && !matches!(insn.op & 0xf0, jmp::CALL | jmp::EXIT);
        if is_jump {
            insn.off = insn.off.min(n - k as i16 - 1);
        }
    }
}

/// One random case: the prologue (scalars set, the stack written, R9 the context, R6 the
/// frame with 14 bytes proven or a 16-byte value of `fuzz_maps`' hash map), then `body`.
/// If it verifies, both runtimes run it twice on the same maps with equal outcomes; returns
/// whether it verified.
fn random_case(
    mut body: Vec<Insn>,
    len: u8,
    headroom: u8,
    fill: Vec<u8>,
    with_value: bool,
    seeds: Vec<u32>,
) -> Result<bool, TestCaseError> {
    clamp_jumps(&mut body);
    let mut prog: Vec<Insn> = Vec::new();
    for (r, v) in SCALARS.iter().zip(&seeds) {
        prog.extend(Insn::lddw(
            *r,
            0,
            (*v as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        ));
    }
    prog.extend((1..=8).map(|k| i(STDW, 10, 0, -8 * k, k as i32)));
    prog.push(i(MOV_X, 9, 1, 0, 0));
    if with_value {
        // Insert key fp-8 with the value at fp-32, look it up: R6 = a 16-byte value.
        prog.extend([
            i(MOV_X, 2, 10, 0, 0),
            i(ADD_K, 2, 0, 0, -8),
            i(MOV_X, 3, 10, 0, 0),
            i(ADD_K, 3, 0, 0, -32),
        ]);
        prog.extend(Insn::lddw(1, PSEUDO_MAP_FD, 1));
        prog.extend([i(MOV_K, 4, 0, 0, 0), i(CALL, 0, 0, 0, 2)]);
        prog.extend([i(MOV_X, 2, 10, 0, 0), i(ADD_K, 2, 0, 0, -8)]);
        prog.extend(Insn::lddw(1, PSEUDO_MAP_FD, 1));
        prog.extend([
            i(CALL, 0, 0, 0, 1),
            i(class::JMP | jmp::JNE, 0, 0, 1, 0),
            i(EXIT, 0, 0, 0, 0),
            i(MOV_X, 6, 0, 0, 0),
            i(MOV_K, 0, 0, 0, 2),
        ]);
    } else {
        prog.extend([
            i(LDXW, 6, 9, 0, 0),
            i(LDXW, 3, 9, 4, 0),
            i(MOV_X, 4, 6, 0, 0),
            i(ADD_K, 4, 0, 0, 14),
            i(MOV_K, 0, 0, 0, 2),
            i(class::JMP | jmp::JGT | SRC_X, 4, 3, body.len() as i16, 0),
        ]);
    }
    prog.extend(body);
    prog.push(i(EXIT, 0, 0, 0, 0));
    let maps = fuzz_maps();
    let verified = match Program::verify_within(prog.clone(), &maps, FUZZ_EXPLORED) {
        Ok(p) => {
            let jit = Compiled::compile(&p);
            prop_assert!(jit.is_ok(), "{jit:?}");
            let mut jit = jit.unwrap();
            let (mut im, mut jm) = (Maps::new(&maps).unwrap(), Maps::new(&maps).unwrap());
            let mut buf = vec![0u8; 64 + 256 + 64];
            for (k, b) in buf[headroom as usize..][..len as usize]
                .iter_mut()
                .enumerate()
            {
                *b = fill[k % fill.len()];
            }
            for _ in 0..2 {
                let (a, b) = both(
                    &p,
                    &mut jit,
                    &mut im,
                    &mut jm,
                    &buf,
                    headroom as usize,
                    len as usize,
                );
                prop_assert_eq!(&a, &b);
                prop_assert!(a.result.is_ok(), "{:?}", a.result);
            }
            true
        }
        Err(_) => false,
    };
    // The fuzz target's byte layout reaches the same property.
    let mut data = vec![len, headroom];
    data.extend(std::iter::repeat_n(0x11u8, 256));
    data.extend(encode(&prog));
    let _ = differential::check(&data);
    Ok(verified)
}

#[test]
fn random_verified_programs_agree() {
    if !available() {
        eprintln!("skip: no JIT on this architecture");
        return;
    }
    let strategy = (
        proptest::collection::vec(insn(), 1..16),
        0u8..=255,
        0u8..64,
        proptest::collection::vec(any::<u8>(), 1..64),
        any::<bool>(),
        proptest::collection::vec(any::<u32>(), 3),
    );
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 5000,
        ..ProptestConfig::default()
    });
    let (verified, total) = (Cell::new(0u32), Cell::new(0u32));
    runner
        .run(
            &strategy,
            |(body, len, headroom, fill, with_value, seeds)| {
                let v = random_case(body, len, headroom, fill, with_value, seeds)?;
                total.set(total.get() + 1);
                verified.set(verified.get() + u32::from(v));
                Ok(())
            },
        )
        .unwrap();
    let (v, t) = (verified.get(), total.get());
    eprintln!("{v} of {t} random programs verified and agreed");
    // The generator aims at valid code: most bodies must reach both runtimes.
    assert!(v * 2 >= t, "only {v} of {t} random programs verified");
}

#[test]
fn fuzz_seed_corpus_agrees() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let mut ran = 0;
    for corpus in ["ebpf_verify_run", "ebpf_jit_differential"] {
        for entry in std::fs::read_dir(root.join(corpus)).unwrap() {
            let data = std::fs::read(entry.unwrap().path()).unwrap();
            if differential::check(&data).is_some() {
                ran += 1;
            }
        }
    }
    if available() {
        assert!(ran >= 3, "only {ran} seeds ran");
    }
}

/// Fuzz findings the verifier must refuse (fuzz/corpus/ebpf_jit_differential/NAME, replayed
/// above as well): the verifier's error for each, decoded as `fuzzing::prepare` does.
fn refused_seed(name: &str) -> sluice_ebpf::VerifyError {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus/ebpf_jit_differential")
        .join(name);
    let data = std::fs::read(path).unwrap();
    let code = &data[258..];
    let mut insns = sluice_ebpf::insn::decode(&code[..code.len() - code.len() % 8]).unwrap();
    let maps = fuzz_maps();
    for i in insns
        .iter_mut()
        .filter(|i| i.is_lddw() && i.src == PSEUDO_MAP_FD)
    {
        i.imm64 %= maps.len() as u64 + 1;
    }
    assert!(differential::check(&data).is_none());
    Program::verify_within(insns, &maps, FUZZ_EXPLORED).unwrap_err()
}

#[test]
fn pointer_value_dependent_comparison_is_refused() {
    // `if w2 s>= 0` with R2 a packet pointer: the runtimes' addresses took different branches.
    let e = refused_seed("pointer_compare");
    assert_eq!(
        e.reason,
        sluice_ebpf::Reason::PointerComparison("32-bit comparison of a pointer"),
        "{e}"
    );
}
