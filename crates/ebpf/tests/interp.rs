//! The interpreter on hand-assembled programs: helpers, atomics, XDP actions, adjust_head,
//! and the property that random programs either fail verification or run without panic.

use proptest::prelude::*;
use sluice_ebpf::fuzzing::{fuzz_maps, run_on, verify_and_run};
use sluice_ebpf::insn::{alu, atomic, class, encode, jmp, Insn, PSEUDO_MAP_FD, SRC_X};
use sluice_ebpf::{
    Action, Counters, DropReason, Env, MapDef, MapKind, Maps, Program, TraceSink, XdpContext,
};

const LDXW: u8 = class::LDX | 0x60;
const LDXDW: u8 = class::LDX | 0x60 | 0x18;
const STW: u8 = class::ST | 0x60;
const STDW: u8 = class::ST | 0x60 | 0x18;
const ATOMIC_DW: u8 = class::STX | 0xc0 | 0x18;
const MOV_K: u8 = class::ALU64 | alu::MOV;
const MOV_X: u8 = class::ALU64 | alu::MOV | SRC_X;
const ADD_K: u8 = class::ALU64 | alu::ADD;
const EXIT: u8 = class::JMP | jmp::EXIT;
const CALL: u8 = class::JMP | jmp::CALL;

fn i(op: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn::new(op, dst, src, off, imm)
}

#[derive(Default)]
struct Lines(Vec<(Vec<u8>, [u64; 3])>);

impl TraceSink for Lines {
    fn print(&mut self, fmt: &[u8], args: [u64; 3]) {
        self.0.push((fmt.to_vec(), args));
    }
}

struct Out {
    action: Result<Action, sluice_ebpf::RunError>,
    frame: Vec<u8>,
    redirect: Option<u32>,
    trace: Lines,
    counters: Counters,
}

fn exec(p: &Program, maps: &mut Maps, frame: &[u8], headroom: usize) -> Out {
    let mut buf = vec![0u8; headroom + frame.len()];
    buf[headroom..].copy_from_slice(frame);
    let mut ctx = XdpContext::new(&mut buf, headroom, frame.len()).unwrap();
    ctx.ingress_ifindex = 3;
    let mut trace = Lines::default();
    let mut counters = Counters::default();
    let mut env = Env {
        maps,
        now_ns: 12345,
        cpu: 0,
        trace: &mut trace,
        counters: &mut counters,
    };
    let action = sluice_ebpf::run(p, &mut ctx, &mut env);
    let (frame, redirect) = (ctx.frame().to_vec(), ctx.redirect);
    Out {
        action,
        frame,
        redirect,
        trace,
        counters,
    }
}

#[test]
fn return_codes_map_to_actions() {
    for (r0, want) in [
        (0, Action::Drop(DropReason::Aborted)),
        (1, Action::Drop(DropReason::Program)),
        (2, Action::Pass),
        (3, Action::Tx),
        (4, Action::Redirect),
        (9, Action::Drop(DropReason::InvalidAction(9))),
    ] {
        let p = Program::verify(vec![i(MOV_K, 0, 0, 0, r0), i(EXIT, 0, 0, 0, 0)], &[]).unwrap();
        let out = exec(&p, &mut Maps::new(&[]).unwrap(), &[0; 20], 0);
        assert_eq!(out.action, Ok(want));
        let c = out.counters;
        assert_eq!(
            c.aborted + c.dropped + c.passed + c.tx + c.redirected + c.invalid_action,
            1
        );
    }
}

#[test]
fn helpers_ktime_trace_redirect() {
    // "hi\0" on the stack; trace_printk(fp-4, 3, ifindex); r0 = ktime; store; redirect(7, 0)
    let p = vec![
        i(STW, 10, 0, -4, i32::from_le_bytes(*b"hi\0\0")),
        i(LDXW, 3, 1, 12, 0),
        i(MOV_X, 1, 10, 0, 0),
        i(ADD_K, 1, 0, 0, -4),
        i(MOV_K, 2, 0, 0, 3),
        i(CALL, 0, 0, 0, 6),
        i(CALL, 0, 0, 0, 5),
        i(class::STX | 0x60 | 0x18, 10, 0, -16, 0),
        i(MOV_K, 1, 0, 0, 7),
        i(MOV_K, 2, 0, 0, 0),
        i(CALL, 0, 0, 0, 23),
        i(EXIT, 0, 0, 0, 0),
    ];
    let p = Program::verify(p, &[]).unwrap();
    let out = exec(&p, &mut Maps::new(&[]).unwrap(), &[0; 20], 0);
    assert_eq!(out.action, Ok(Action::Redirect));
    assert_eq!(out.redirect, Some(7));
    assert_eq!(out.trace.0, vec![(b"hi\0".to_vec(), [3, 0, 0])]);
}

fn array(kind: MapKind) -> Vec<MapDef> {
    vec![MapDef {
        name: "a".into(),
        kind,
        key_size: 4,
        value_size: 8,
        max_entries: 4,
        flags: 0,
    }]
}

/// key 1 on the stack; v = lookup; if v: atomic v += 5 (fetch: r0 = old); update key 2 = v.
fn counter_program() -> Vec<Insn> {
    let mut p = vec![
        i(STW, 10, 0, -4, 1),
        i(MOV_X, 2, 10, 0, 0),
        i(ADD_K, 2, 0, 0, -4),
    ];
    p.extend(Insn::lddw(1, PSEUDO_MAP_FD, 0));
    p.push(i(CALL, 0, 0, 0, 1));
    p.push(i(class::JMP | jmp::JNE, 0, 0, 2, 0));
    p.extend([i(MOV_K, 0, 0, 0, 2), i(EXIT, 0, 0, 0, 0)]);
    p.extend([
        i(MOV_X, 6, 0, 0, 0),
        i(MOV_K, 1, 0, 0, 5),
        i(ATOMIC_DW, 6, 1, 0, atomic::ADD | atomic::FETCH),
        // key 2 at fp-8, value = *v
        i(STW, 10, 0, -8, 2),
        i(MOV_X, 2, 10, 0, 0),
        i(ADD_K, 2, 0, 0, -8),
        i(MOV_X, 3, 6, 0, 0),
        i(MOV_K, 4, 0, 0, 0),
    ]);
    p.extend(Insn::lddw(1, PSEUDO_MAP_FD, 0));
    p.extend([
        i(CALL, 0, 0, 0, 2),
        i(MOV_K, 0, 0, 0, 2),
        i(EXIT, 0, 0, 0, 0),
    ]);
    p
}

#[test]
fn array_lookup_atomic_and_update_from_a_map_value() {
    for kind in [
        MapKind::Array,
        MapKind::PerCpuArray,
        MapKind::Hash,
        MapKind::LruHash,
    ] {
        let defs = array(kind);
        let p = Program::verify(counter_program(), &defs).unwrap();
        let mut maps = Maps::new(&defs).unwrap();
        if matches!(kind, MapKind::Hash | MapKind::LruHash) {
            maps.set(0, &1u32.to_le_bytes(), &0u64.to_le_bytes(), 0)
                .unwrap();
        }
        for _ in 0..3 {
            assert_eq!(exec(&p, &mut maps, &[0; 20], 0).action, Ok(Action::Pass));
        }
        let get = |maps: &mut Maps, k: u32| {
            maps.get(0, &k.to_le_bytes())
                .unwrap()
                .map(|v| u64::from_le_bytes(v.try_into().unwrap()))
        };
        assert_eq!(get(&mut maps, 1), Some(15), "{kind:?}");
        assert_eq!(
            get(&mut maps, 2),
            Some(15),
            "{kind:?}: updated from the map value"
        );
    }
}

#[test]
fn adjust_head_moves_data_within_headroom() {
    // bpf_xdp_adjust_head(ctx, -4); then r0 = data_end - data as the... returns XDP_PASS
    let p = vec![
        i(MOV_X, 6, 1, 0, 0),
        i(MOV_K, 2, 0, 0, -4),
        i(CALL, 0, 0, 0, 44),
        i(MOV_X, 7, 0, 0, 0),
        // data and data_end again: a 4-byte write at the new start after a proof.
        i(LDXW, 2, 6, 0, 0),
        i(LDXW, 3, 6, 4, 0),
        i(MOV_X, 4, 2, 0, 0),
        i(ADD_K, 4, 0, 0, 4),
        i(class::JMP | jmp::JGT | SRC_X, 4, 3, 1, 0),
        i(STW, 2, 0, 0, 0x0a0b0c0d),
        i(MOV_K, 0, 0, 0, 2),
        i(class::JMP | jmp::JEQ, 7, 0, 1, 0),
        i(MOV_K, 0, 0, 0, 0),
        i(EXIT, 0, 0, 0, 0),
    ];
    let p = Program::verify(p, &[]).unwrap();
    let out = exec(&p, &mut Maps::new(&[]).unwrap(), &[1; 20], 8);
    assert_eq!(out.action, Ok(Action::Pass));
    assert_eq!(&out.frame[..4], &[0x0d, 0x0c, 0x0b, 0x0a]);
    assert_eq!(out.frame.len(), 24);
    // Without headroom the helper fails (-EINVAL), data stays: the write lands on the old start.
    let out = exec(&p, &mut Maps::new(&[]).unwrap(), &[1; 20], 0);
    assert_eq!(out.action, Ok(Action::Drop(DropReason::Aborted)));
    assert_eq!(out.frame.len(), 20);
    assert_eq!(&out.frame[..5], &[0x0d, 0x0c, 0x0b, 0x0a, 1]);
}

#[test]
fn csum_diff_matches_rfc1624() {
    // csum_diff(from = old 4 bytes at fp-4, 4, to = new 4 bytes at fp-8, 4, seed 0)
    let p = vec![
        i(STW, 10, 0, -4, 0x0000_1234),
        i(STW, 10, 0, -8, 0x0000_1240),
        i(MOV_X, 1, 10, 0, 0),
        i(ADD_K, 1, 0, 0, -4),
        i(MOV_K, 2, 0, 0, 4),
        i(MOV_X, 3, 10, 0, 0),
        i(ADD_K, 3, 0, 0, -8),
        i(MOV_K, 4, 0, 0, 4),
        i(MOV_K, 5, 0, 0, 0),
        i(CALL, 0, 0, 0, 28),
        i(EXIT, 0, 0, 0, 0),
    ];
    let p = Program::verify(p, &[]).unwrap();
    let Ok(Action::Drop(DropReason::InvalidAction(sum))) =
        exec(&p, &mut Maps::new(&[]).unwrap(), &[0; 20], 0).action
    else {
        panic!("the sum is returned as the action");
    };
    // !0x1234 + 0x1240 folded with end-around carry: the difference, 12.
    assert_eq!(sum, 12);
}

#[test]
fn budget_is_the_longest_explored_path() {
    let p = vec![
        i(MOV_K, 0, 0, 0, 0),
        i(ADD_K, 0, 0, 0, 1),
        i(class::JMP | jmp::JLT, 0, 0, -2, 50),
        i(EXIT, 0, 0, 0, 0),
    ];
    let p = Program::verify(p, &[]).unwrap();
    let out = exec(&p, &mut Maps::new(&[]).unwrap(), &[0; 20], 0);
    assert_eq!(out.action, Ok(Action::Drop(DropReason::InvalidAction(50))));
    assert_eq!(out.counters.insns, 1 + 50 * 2 + 1);
    assert!(out.counters.insns <= p.budget());
}

#[test]
fn runs_allocate_per_map_not_per_run_and_maps_are_send() {
    fn is_send<T: Send>() {}
    is_send::<Maps>();
    is_send::<Program>();
}

/// Plausible instructions: valid opcodes, initialized registers, memory through the context,
/// packet or stack pointers at small offsets, mostly forward jumps, so that many programs pass
/// verification and reach the interpreter.
fn insn() -> impl Strategy<Value = Insn> {
    let alu_ops = vec![
        MOV_K,
        MOV_X,
        ADD_K,
        class::ALU64 | alu::ADD | SRC_X,
        class::ALU64 | alu::SUB | SRC_X,
        class::ALU64 | alu::AND,
        class::ALU64 | alu::LSH,
        class::ALU64 | alu::RSH,
        class::ALU64 | alu::DIV | SRC_X,
        class::ALU64 | alu::MOD,
        class::ALU | alu::ADD | SRC_X,
        class::ALU | alu::END | SRC_X,
        class::ALU64 | alu::ARSH,
        class::ALU64 | alu::NEG,
        class::ALU | alu::MUL,
        class::ALU64 | alu::XOR | SRC_X,
        class::ALU64 | alu::OR,
    ];
    let mem_ops = vec![
        LDXW,
        LDXDW,
        class::LDX | 0x60 | 0x10,
        class::LDX | 0x60 | 0x08,
        STW,
        STDW,
        class::STX | 0x60 | 0x18,
        class::STX | 0x60 | 0x10,
        ATOMIC_DW,
    ];
    let jmp_ops = vec![
        class::JMP | jmp::JEQ,
        class::JMP | jmp::JGT | SRC_X,
        class::JMP | jmp::JLT,
        class::JMP | jmp::JNE,
        class::JMP | jmp::JSGT,
        class::JMP32 | jmp::JLE,
        class::JMP | jmp::JSET,
        class::JMP | jmp::JA,
    ];
    let imm = prop_oneof![
        Just(0i32),
        Just(1),
        Just(2),
        Just(4),
        Just(8),
        Just(14),
        -16i32..64
    ];
    let reg = 0u8..10;
    let alu = (
        proptest::sample::select(alu_ops),
        reg.clone(),
        reg.clone(),
        imm.clone(),
    )
        .prop_map(|(op, d, s, imm)| {
            Insn::new(op, d, s, 0, if op & 0xf0 == alu::END { 16 } else { imm })
        });
    let mem = (
        proptest::sample::select(mem_ops),
        proptest::sample::select(vec![1u8, 2, 10]),
        0u8..10,
        0i16..16,
        imm.clone(),
    )
        .prop_map(|(op, base, s, k, imm)| {
            let off = match base {
                10 => -8 * (1 + k % 8),
                1 => 4 * (k % 6),
                _ => k % 14,
            };
            let (d, s) = if op & 0x07 == class::LDX {
                (s, base)
            } else {
                (base, s)
            };
            Insn::new(op, d, s, off, imm)
        });
    let jump = (
        proptest::sample::select(jmp_ops),
        reg.clone(),
        reg,
        -2i16..6,
        imm,
    )
        .prop_map(|(op, d, s, off, imm)| Insn::new(op, d, s, off, imm));
    let call = proptest::sample::select(vec![5i32, 8, 23, 44, 1])
        .prop_map(|h| Insn::new(CALL, 0, 0, 0, h));
    prop_oneof![4 => alu, 4 => mem, 2 => jump, 1 => call]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn random_programs_fail_verification_or_run_safely(
        body in proptest::collection::vec(insn(), 1..16),
        len in 0u8..=255,
        headroom in 0u8..64,
        fill in proptest::collection::vec(any::<u8>(), 1..64),
    ) {
        // A usual prologue: every register written, the stack's first 64 bytes zeroed, data
        // and data_end loaded and 14 bytes proven, so bodies can touch packet and stack.
        let mut prog: Vec<Insn> = (5..10).map(|r| i(MOV_K, r, 0, 0, r as i32)).collect();
        prog.extend((1..=8).map(|k| i(STDW, 10, 0, -8 * k, 0)));
        prog.extend([
            i(LDXW, 2, 1, 0, 0), i(LDXW, 3, 1, 4, 0), i(MOV_X, 4, 2, 0, 0), i(ADD_K, 4, 0, 0, 14),
            i(MOV_K, 0, 0, 0, 2),
            i(class::JMP | jmp::JGT | SRC_X, 4, 3, body.len() as i16, 0),
        ]);
        prog.extend(body);
        prog.push(i(EXIT, 0, 0, 0, 0));
        let maps = fuzz_maps();
        if let Ok(p) = Program::verify_within(prog.clone(), &maps, sluice_ebpf::fuzzing::FUZZ_EXPLORED) {
            // A verified program never hits a run-time check.
            let r = run_on(&p, &maps, len as usize, headroom as usize, &fill);
            prop_assert!(r.is_ok(), "{r:?}");
        }
        // The fuzz target's byte layout reaches the same code.
        let mut data = vec![len, headroom];
        data.extend(std::iter::repeat_n(0u8, 256));
        data.extend(encode(&prog));
        let _ = verify_and_run(&data);
    }
}

#[test]
fn fuzz_seed_corpus_replays_and_reaches_the_interpreter() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/ebpf_verify_run");
    let mut ran = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        if verify_and_run(&data).is_some() {
            ran += 1;
        }
    }
    // null, drop and the two parsers with map 0 in the fuzz set's shapes verify and run.
    assert!(ran >= 3, "only {ran} seeds reached the interpreter");
}

fn seeds() -> Vec<Vec<u8>> {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/ebpf_verify_run");
    let mut v: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    v.sort();
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// Mutants of the shipped programs (near-valid code, so many verify): the fuzz target's
    /// property holds — accepted programs never stop with a run-time error.
    #[test]
    fn mutated_programs_fail_verification_or_run_safely(
        which in 0usize..5,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        frame_len in 0u8..=255,
    ) {
        let mut data = seeds()[which].clone();
        data[0] = frame_len;
        let code = data.len() - 258;
        for (at, byte) in edits {
            let k = 258 + at.index(code.max(1));
            if k < data.len() {
                data[k] = byte;
            }
        }
        let _ = verify_and_run(&data);
    }
}
