//! The verifier on hand-assembled programs: each class of bad program refused with its
//! instruction index and reason; the good twin of each accepted (so the refusal is the
//! class's, not an accident).

use sluice_ebpf::insn::{alu, atomic, class, jmp, Insn, PSEUDO_MAP_FD, SRC_X};
use sluice_ebpf::{MapDef, MapKind, Program, Reason, VerifyError};

const LDXW: u8 = class::LDX | 0x60; // 32-bit load
const LDXB: u8 = class::LDX | 0x60 | 0x10;
const LDXDW: u8 = class::LDX | 0x60 | 0x18;
const STDW: u8 = class::ST | 0x60 | 0x18;
const STW: u8 = class::ST | 0x60;
const STXDW: u8 = class::STX | 0x60 | 0x18;
const MOV_K: u8 = class::ALU64 | alu::MOV;
const MOV_X: u8 = class::ALU64 | alu::MOV | SRC_X;
const ADD_K: u8 = class::ALU64 | alu::ADD;
const EXIT: u8 = class::JMP | jmp::EXIT;
const CALL: u8 = class::JMP | jmp::CALL;

fn i(op: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn::new(op, dst, src, off, imm)
}

fn ret(v: i32) -> [Insn; 2] {
    [i(MOV_K, 0, 0, 0, v), i(EXIT, 0, 0, 0, 0)]
}

/// r2 = data, r3 = data_end, r4 = data + n; if r4 > r3 goto (skip `body` + 2)
fn guarded(n: i32, body: &[Insn]) -> Vec<Insn> {
    let mut p = vec![
        i(LDXW, 2, 1, 0, 0),
        i(LDXW, 3, 1, 4, 0),
        i(MOV_X, 4, 2, 0, 0),
        i(ADD_K, 4, 0, 0, n),
        i(
            class::JMP | jmp::JGT | SRC_X,
            4,
            3,
            body.len() as i16 + 2,
            0,
        ),
    ];
    p.extend_from_slice(body);
    p.extend(ret(2));
    p.extend(ret(1));
    p
}

fn maps() -> Vec<MapDef> {
    vec![MapDef {
        name: "m".into(),
        kind: MapKind::Hash,
        key_size: 4,
        value_size: 8,
        max_entries: 4,
        flags: 0,
    }]
}

fn verify(p: Vec<Insn>) -> Result<Program, VerifyError> {
    Program::verify(p, &maps())
}

fn refused(p: Vec<Insn>) -> VerifyError {
    match verify(p) {
        Err(e) => e,
        Ok(_) => panic!("accepted"),
    }
}

#[test]
fn out_of_bounds_packet_read() {
    assert!(verify(guarded(14, &[i(LDXB, 5, 2, 13, 0)])).is_ok());
    let e = refused(guarded(14, &[i(LDXB, 5, 2, 14, 0)]));
    assert_eq!(e.insn, 5);
    assert_eq!(
        e.to_string(),
        "insn 5: packet read of 1 bytes at offset 14 not proven within data_end (14 bytes proven)"
    );
    // A write past it, and a read before data.
    let e = refused(guarded(14, &[i(STW, 2, 0, 12, 0)]));
    assert!(
        matches!(
            e.reason,
            Reason::PacketOutOfBounds {
                write: true,
                size: 4,
                lo: 12,
                ..
            }
        ),
        "{e}"
    );
    assert!(matches!(
        refused(guarded(14, &[i(LDXB, 5, 2, -1, 0)])).reason,
        Reason::PacketOutOfBounds { .. }
    ));
    // Without any data_end comparison nothing is proven.
    let e = refused(vec![
        i(LDXW, 2, 1, 0, 0),
        i(LDXB, 0, 2, 0, 0),
        i(EXIT, 0, 0, 0, 0),
    ]);
    assert_eq!(
        (e.insn, e.to_string().contains("(0 bytes proven)")),
        (1, true)
    );
}

#[test]
fn unbounded_loop_refused_bounded_loop_accepted() {
    // r0 = 0; loop: r0 += 1; if r0 < 100 goto loop; exit
    let bounded = vec![
        i(MOV_K, 0, 0, 0, 0),
        i(ADD_K, 0, 0, 0, 1),
        i(class::JMP | jmp::JLT, 0, 0, -2, 100),
        i(EXIT, 0, 0, 0, 0),
    ];
    let p = verify(bounded).unwrap();
    assert!(
        p.budget() >= 200 && p.budget() < 1000,
        "budget {}",
        p.budget()
    );
    // while (ifindex != 0) ifindex += 1: the ranges never decide the exit.
    let unbounded = vec![
        i(LDXW, 2, 1, 12, 0),
        i(ADD_K, 2, 0, 0, 1),
        i(class::JMP | jmp::JNE, 2, 0, -2, 0),
        i(MOV_K, 0, 0, 0, 2),
        i(EXIT, 0, 0, 0, 0),
    ];
    let e = refused(unbounded);
    assert!(matches!(e.reason, Reason::Complexity(_)), "{e}");
    // goto self
    let e = refused(vec![i(class::JMP | jmp::JA, 0, 0, -1, 0)]);
    assert_eq!(
        (e.insn, matches!(e.reason, Reason::Complexity(_))),
        (0, true)
    );
}

#[test]
fn unknown_helper() {
    let e = refused(vec![i(CALL, 0, 0, 0, 12), i(EXIT, 0, 0, 0, 0)]);
    assert_eq!(
        e.to_string(),
        "insn 0: call to helper 12, which is not allowed"
    );
    let e = refused(vec![i(CALL, 0, 1, 0, 3), i(EXIT, 0, 0, 0, 0)]);
    assert_eq!(e.reason, Reason::BpfToBpfCall);
    assert!(
        verify(vec![i(CALL, 0, 0, 0, 5), i(EXIT, 0, 0, 0, 0)]).is_ok(),
        "ktime is whitelisted"
    );
}

/// *(u32 *)(fp-4) = 0; r2 = fp - 4; r1 = map 0; call lookup; then `after`.
fn lookup(after: &[Insn]) -> Vec<Insn> {
    let mut p = vec![
        i(STW, 10, 0, -4, 0),
        i(MOV_X, 2, 10, 0, 0),
        i(ADD_K, 2, 0, 0, -4),
    ];
    p.extend(Insn::lddw(1, PSEUDO_MAP_FD, 0));
    p.push(i(CALL, 0, 0, 0, 1));
    p.extend_from_slice(after);
    p
}

#[test]
fn bad_map_access() {
    // Null checked, in bounds: accepted.
    let good = lookup(&[
        i(class::JMP | jmp::JEQ, 0, 0, 1, 0),
        i(LDXDW, 0, 0, 0, 0),
        i(EXIT, 0, 0, 0, 0),
    ]);
    assert!(verify(good).is_ok());
    // Not null checked.
    let e = refused(lookup(&[i(LDXDW, 0, 0, 0, 0), i(EXIT, 0, 0, 0, 0)]));
    assert_eq!((e.insn, e.reason.clone()), (6, Reason::MaybeNull(0)));
    // Past the 8-byte value.
    let e = refused(lookup(&[
        i(class::JMP | jmp::JEQ, 0, 0, 1, 0),
        i(LDXW, 0, 0, 6, 0),
        i(EXIT, 0, 0, 0, 0),
    ]));
    assert_eq!(e.insn, 7);
    assert_eq!(
        e.to_string(),
        "insn 7: map value access of 4 bytes at offset 6..=6 outside its 8 bytes"
    );
    // Key on the stack not written (4 bytes wanted at fp-8, only fp-4.. written).
    let mut p = lookup(&[i(EXIT, 0, 0, 0, 0)]);
    p[2] = i(ADD_K, 2, 0, 0, -8);
    let e = refused(p);
    assert_eq!((e.insn, e.reason.clone()), (5, Reason::StackUninit(-8, 4)));
    // A map reference that does not exist.
    let mut p = vec![];
    p.extend(Insn::lddw(1, PSEUDO_MAP_FD, 3));
    p.extend(ret(2));
    assert_eq!(refused(p).reason, Reason::BadMapReference(3));
    // Storing a pointer into a map value leaks it.
    let e = refused(lookup(&[
        i(class::JMP | jmp::JEQ, 0, 0, 2, 0),
        i(STXDW, 0, 10, 0, 0),
        i(MOV_K, 0, 0, 0, 2),
        i(EXIT, 0, 0, 0, 0),
    ]));
    assert_eq!((e.insn, e.reason.clone()), (7, Reason::PointerLeak));
}

#[test]
fn stack_overflow_and_uninitialized_read() {
    let e = refused(vec![
        i(STDW, 10, 0, -520, 0),
        i(MOV_K, 0, 0, 0, 2),
        i(EXIT, 0, 0, 0, 0),
    ]);
    assert_eq!(
        e.to_string(),
        "insn 0: stack access of 8 bytes at fp-520 outside the 512-byte frame"
    );
    let e = refused(vec![i(STDW, 10, 0, 0, 0), i(EXIT, 0, 0, 0, 0)]);
    assert_eq!(e.reason, Reason::StackOutOfBounds(0, 8));
    let e = refused(vec![i(LDXDW, 0, 10, -8, 0), i(EXIT, 0, 0, 0, 0)]);
    assert_eq!(
        e.to_string(),
        "insn 0: stack read of 8 bytes at fp-8 reads uninitialized bytes"
    );
    // Written, then read: fine, and a spilled pointer comes back as a pointer.
    let ok = vec![
        i(STXDW, 10, 1, -8, 0),
        i(LDXDW, 6, 10, -8, 0),
        i(LDXW, 0, 6, 16, 0),
        i(EXIT, 0, 0, 0, 0),
    ];
    assert!(verify(ok).is_ok());
}

#[test]
fn division_by_zero() {
    // r2 = ifindex (may be 0); r0 = 10; r0 /= r2
    let div = |guard: bool| {
        let mut p = vec![i(LDXW, 2, 1, 12, 0), i(MOV_K, 0, 0, 0, 10)];
        if guard {
            p.push(i(class::JMP | jmp::JEQ, 2, 0, 1, 0));
        }
        p.push(i(class::ALU64 | alu::DIV | SRC_X, 0, 2, 0, 0));
        p.push(i(EXIT, 0, 0, 0, 0));
        p
    };
    let e = refused(div(false));
    assert_eq!(
        e.to_string(),
        "insn 2: division or modulo by a register that can be zero"
    );
    assert!(
        verify(div(true)).is_ok(),
        "a register proven non-zero divides"
    );
    let e = refused(vec![
        i(MOV_K, 0, 0, 0, 1),
        i(class::ALU | alu::MOD, 0, 0, 0, 0),
        i(EXIT, 0, 0, 0, 0),
    ]);
    assert_eq!((e.insn, e.reason.clone()), (1, Reason::DivisionByZero));
}

#[test]
fn control_flow_errors() {
    assert_eq!(refused(vec![]).reason, Reason::Empty);
    assert_eq!(
        refused(vec![i(MOV_K, 0, 0, 0, 2)]).reason,
        Reason::FallThrough
    );
    let e = refused(vec![
        i(class::JMP | jmp::JA, 0, 0, 5, 0),
        i(EXIT, 0, 0, 0, 0),
    ]);
    assert_eq!(e.reason, Reason::JumpOutOfRange(6));
    let e = refused(vec![
        i(MOV_K, 0, 0, 0, 2),
        i(EXIT, 0, 0, 0, 0),
        i(EXIT, 0, 0, 0, 0),
    ]);
    assert_eq!((e.insn, e.reason.clone()), (2, Reason::Unreachable));
    // Into the second half of an LDDW.
    let mut p = vec![i(class::JMP | jmp::JA, 0, 0, 1, 0)];
    p.extend(Insn::lddw(0, 0, 7));
    p.push(i(EXIT, 0, 0, 0, 0));
    assert_eq!(refused(p).reason, Reason::JumpOutOfRange(2));
    assert_eq!(refused(vec![i(EXIT, 0, 0, 0, 0)]).reason, Reason::BadReturn);
    assert_eq!(
        refused(vec![i(MOV_X, 0, 1, 0, 0), i(EXIT, 0, 0, 0, 0)]).reason,
        Reason::BadReturn
    );
    let e = refused(vec![i(MOV_X, 0, 7, 0, 0), i(EXIT, 0, 0, 0, 0)]);
    assert_eq!(e.reason, Reason::UninitRegister(7));
    assert_eq!(
        refused(vec![i(MOV_K, 10, 0, 0, 0), i(EXIT, 0, 0, 0, 0)]).reason,
        Reason::BadRegister(10)
    );
    assert_eq!(
        refused(vec![i(0xff, 0, 0, 0, 0), i(EXIT, 0, 0, 0, 0)]).reason,
        Reason::BadOpcode(0xff)
    );
    assert_eq!(
        refused(vec![i(0x20, 0, 0, 0, 0), i(EXIT, 0, 0, 0, 0)]).reason,
        Reason::LegacyPacketAccess
    );
    let long: Vec<Insn> = (0..5000).map(|_| i(MOV_K, 0, 0, 0, 2)).collect();
    assert_eq!(refused(long).reason, Reason::TooLong(5000));
}

#[test]
fn context_and_adjust_head() {
    let e = refused(vec![i(LDXW, 0, 1, 2, 0), i(EXIT, 0, 0, 0, 0)]);
    assert_eq!(
        e.to_string(),
        "insn 0: xdp_md access of 4 bytes at offset 2 is not a readable field"
    );
    let e = refused(vec![i(LDXDW, 0, 1, 0, 0), i(EXIT, 0, 0, 0, 0)]);
    assert_eq!(e.reason, Reason::BadContextAccess(0, 8));
    assert_eq!(
        refused(vec![i(STW, 1, 0, 0, 0), i(EXIT, 0, 0, 0, 0)]).reason,
        Reason::BadContextAccess(0, 4)
    );
    // After bpf_xdp_adjust_head an old packet pointer is unusable, and proofs are gone.
    let mut body = vec![
        i(MOV_X, 6, 2, 0, 0),
        i(MOV_X, 7, 1, 0, 0),
        i(MOV_K, 2, 0, 0, 4),
        i(CALL, 0, 0, 0, 44),
    ];
    body.push(i(LDXB, 0, 6, 0, 0));
    let e = refused(guarded(14, &body));
    assert_eq!(
        (e.insn, e.reason.clone()),
        (9, Reason::InvalidatedPacketPointer(6))
    );
    let e = refused(guarded(
        14,
        &[
            i(MOV_K, 2, 0, 0, 4),
            i(CALL, 0, 0, 0, 44),
            i(MOV_K, 2, 0, 0, 4),
            i(CALL, 0, 0, 0, 44),
        ],
    ));
    assert_eq!(
        e.reason,
        Reason::BadHelperArg("bpf_xdp_adjust_head", 1, "the context")
    );
}

#[test]
fn alu32_results_are_known_where_the_kernel_knows_them() {
    // w0 = 2; w2 = 4; w0 += w2; exit: R0 is exactly 6, so `if r0 > 6` never jumps.
    let p = vec![
        i(class::ALU | alu::MOV, 0, 0, 0, 2),
        i(class::ALU | alu::MOV, 2, 0, 0, 4),
        i(class::ALU | alu::ADD | SRC_X, 0, 2, 0, 0),
        i(class::JMP | jmp::JGT, 0, 0, 1, 6),
        i(EXIT, 0, 0, 0, 0),
        i(LDXDW, 0, 10, -8, 0),
        i(EXIT, 0, 0, 0, 0),
    ];
    // The uninitialized read after the jump is never reached, so the program is accepted.
    assert!(verify(p).is_ok());
}

/// r2 = data, r3 = data_end, r4 = data + 14 (no bound proven yet), then `body`, then return 2.
fn with_pointers(body: &[Insn]) -> Vec<Insn> {
    let mut p = vec![
        i(LDXW, 2, 1, 0, 0),
        i(LDXW, 3, 1, 4, 0),
        i(MOV_X, 4, 2, 0, 0),
        i(ADD_K, 4, 0, 0, 14),
    ];
    p.extend_from_slice(body);
    p.extend(ret(2));
    p
}

#[test]
fn pointer_comparisons_only_where_addresses_cannot_matter() {
    const JMP32: u8 = class::JMP32;
    let cmp = |e: VerifyError| (e.insn, e.reason);
    let prohibited = |w| Reason::PointerComparison(w);
    // The fuzz finding: `if w2 s>= 0` with r2 a packet pointer (its low 32 bits' sign).
    let e = refused(with_pointers(&[i(JMP32 | jmp::JSGE, 2, 0, 0, 0)]));
    assert_eq!(
        cmp(e.clone()),
        (4, prohibited("32-bit comparison of a pointer"))
    );
    assert_eq!(
        e.to_string(),
        "insn 4: pointer comparison prohibited: 32-bit comparison of a pointer"
    );
    // 32-bit packet against data_end: refused too, though the 64-bit one proves bounds.
    let e = refused(with_pointers(&[i(JMP32 | jmp::JGT | SRC_X, 4, 3, 0, 0)]));
    assert_eq!(cmp(e), (4, prohibited("32-bit comparison of a pointer")));
    assert!(verify(guarded(14, &[])).is_ok());
    // A pointer against a scalar that is not a null check: an immediate, an unknown scalar.
    let scalar = "a pointer against a scalar other than a null check against 0";
    let e = refused(with_pointers(&[i(class::JMP | jmp::JGT, 2, 0, 0, 100)]));
    assert_eq!(cmp(e), (4, prohibited(scalar)));
    let e = refused(with_pointers(&[
        i(LDXW, 5, 1, 12, 0),
        i(class::JMP | jmp::JEQ | SRC_X, 5, 2, 0, 0),
    ]));
    assert_eq!(cmp(e), (5, prohibited(scalar)));
    // A pointer against 0 with anything but JEQ/JNE: its sign or size.
    let e = refused(with_pointers(&[i(class::JMP | jmp::JSGT, 2, 0, 0, 0)]));
    assert_eq!(cmp(e), (4, prohibited(scalar)));
    // JSET tests a pointer's bits.
    let e = refused(with_pointers(&[i(
        class::JMP | jmp::JSET | SRC_X,
        2,
        4,
        0,
        0,
    )]));
    assert_eq!(cmp(e), (4, prohibited("JSET on a pointer's bits")));
    // Different regions: packet against stack, context against stack.
    let regions = "pointers into different regions, or not both into the packet or stack";
    let e = refused(with_pointers(&[i(
        class::JMP | jmp::JLT | SRC_X,
        2,
        10,
        0,
        0,
    )]));
    assert_eq!(cmp(e), (4, prohibited(regions)));
    let e = refused(vec![
        i(class::JMP | jmp::JEQ | SRC_X, 1, 10, 0, 0),
        i(MOV_K, 0, 0, 0, 2),
        i(EXIT, 0, 0, 0, 0),
    ]);
    assert_eq!(cmp(e), (0, prohibited(regions)));
    // Packet against packet (same base): both ways explored, accepted.
    assert!(verify(with_pointers(&[i(
        class::JMP | jmp::JGT | SRC_X,
        4,
        2,
        0,
        0
    )]))
    .is_ok());
    // Decided statically, so the branch that would return a pointer is never explored:
    // fp-8 < fp (unsigned and signed), fp != 0, data != 0 (immediate or a register known 0).
    let returns_pointer_unless = |jump: Insn, pre: &[Insn]| {
        let mut p = pre.to_vec();
        p.extend([jump, i(MOV_X, 0, 10, 0, 0), i(EXIT, 0, 0, 0, 0)]);
        p.extend(ret(2));
        verify(p)
    };
    let fp_minus_8 = [i(MOV_X, 2, 10, 0, 0), i(ADD_K, 2, 0, 0, -8)];
    for op in [jmp::JLT, jmp::JSLT, jmp::JLE, jmp::JSLE, jmp::JNE] {
        let jump = i(class::JMP | op | SRC_X, 2, 10, 2, 0);
        assert!(returns_pointer_unless(jump, &fp_minus_8).is_ok(), "{op:#x}");
    }
    for op in [jmp::JGT, jmp::JSGE, jmp::JEQ] {
        let jump = i(class::JMP | op | SRC_X, 2, 10, 2, 0);
        let e = returns_pointer_unless(jump, &fp_minus_8).unwrap_err();
        assert_eq!(e.reason, Reason::BadReturn, "{op:#x}");
    }
    assert!(returns_pointer_unless(i(class::JMP | jmp::JNE, 10, 0, 2, 0), &[]).is_ok());
    let e = returns_pointer_unless(i(class::JMP | jmp::JEQ, 10, 0, 2, 0), &[]).unwrap_err();
    assert_eq!(e.reason, Reason::BadReturn);
    let data_and_zero = [i(LDXW, 2, 1, 0, 0), i(MOV_K, 3, 0, 0, 0)];
    let jump = i(class::JMP | jmp::JNE | SRC_X, 3, 2, 2, 0);
    assert!(returns_pointer_unless(jump, &data_and_zero).is_ok());
    // The null check with the 0 first (`if 0 == r0`) refines the lookup result as well.
    let zero_first = lookup(&[
        i(MOV_K, 3, 0, 0, 0),
        i(class::JMP | jmp::JEQ | SRC_X, 3, 0, 1, 0),
        i(LDXDW, 0, 0, 0, 0),
        i(EXIT, 0, 0, 0, 0),
    ]);
    assert!(verify(zero_first).is_ok());
    // A lookup result against anything else than 0.
    let e = refused(lookup(&[
        i(class::JMP | jmp::JEQ, 0, 0, 1, 1),
        i(MOV_K, 0, 0, 0, 2),
        i(EXIT, 0, 0, 0, 0),
    ]));
    assert_eq!(cmp(e), (6, prohibited(scalar)));
}

#[test]
fn pointer_values_never_become_scalars() {
    const STB: u8 = class::ST | 0x60 | 0x10;
    const ATOMIC_DW: u8 = class::STX | 0xc0 | 0x18;
    let arith = |w| Reason::BadPointerArithmetic(w);
    let only = "only adding or subtracting a scalar";
    // ALU on a pointer other than adding or subtracting a scalar.
    for op in [
        alu::MUL,
        alu::OR,
        alu::AND,
        alu::XOR,
        alu::LSH,
        alu::RSH,
        alu::ARSH,
    ] {
        let e = refused(with_pointers(&[i(class::ALU64 | op, 2, 0, 0, 1)]));
        assert_eq!((e.insn, e.reason), (4, arith(only)), "{op:#x}");
    }
    let e = refused(with_pointers(&[i(class::ALU64 | alu::NEG, 2, 0, 0, 0)]));
    assert_eq!(e.reason, arith(only));
    let e = refused(with_pointers(&[i(
        class::ALU64 | alu::ADD | SRC_X,
        2,
        4,
        0,
        0,
    )]));
    assert_eq!(e.reason, arith(only));
    // Subtracting pointers into different regions; the same region gives a scalar.
    let e = refused(with_pointers(&[i(
        class::ALU64 | alu::SUB | SRC_X,
        2,
        10,
        0,
        0,
    )]));
    assert_eq!(
        e.reason,
        arith("subtracting pointers into different regions")
    );
    assert!(verify(with_pointers(&[
        i(class::ALU64 | alu::SUB | SRC_X, 3, 2, 0, 0),
        i(class::ALU64 | alu::MUL, 3, 0, 0, 3),
    ]))
    .is_ok());
    // 32-bit ALU on a pointer, moves included.
    let e = refused(with_pointers(&[i(class::ALU | alu::ADD, 2, 0, 0, 1)]));
    assert_eq!(e.reason, arith("32-bit arithmetic on a pointer"));
    let e = refused(with_pointers(&[i(
        class::ALU | alu::MOV | SRC_X,
        5,
        2,
        0,
        0,
    )]));
    assert_eq!(e.reason, arith("32-bit move of a pointer"));
    // Narrow and misaligned loads of a spilled pointer.
    let spill = |after: &[Insn]| {
        let mut p = vec![i(STXDW, 10, 1, -16, 0), i(STXDW, 10, 10, -8, 0)];
        p.extend_from_slice(after);
        p.extend(ret(2));
        p
    };
    let e = refused(spill(&[i(LDXW, 0, 10, -8, 0)]));
    assert_eq!(
        (e.insn, e.reason.clone()),
        (2, Reason::SpilledPointerRead(-8, 4))
    );
    assert_eq!(
        e.to_string(),
        "insn 2: stack read of 4 bytes at fp-8 would read a spilled pointer as a number"
    );
    let e = refused(spill(&[i(LDXB, 0, 10, -1, 0)]));
    assert_eq!(e.reason, Reason::SpilledPointerRead(-1, 1));
    let e = refused(spill(&[i(LDXDW, 0, 10, -12, 0)]));
    assert_eq!(e.reason, Reason::SpilledPointerRead(-12, 8));
    // One byte overwritten: the pointer's other bytes are no longer readable.
    let e = refused(spill(&[i(STB, 10, 0, -8, 0), i(LDXW, 0, 10, -4, 0)]));
    assert_eq!(e.reason, Reason::StackUninit(-4, 4));
    // The good twins: the whole slot comes back as the pointer; a slot overwritten whole
    // with a scalar reads as bytes.
    assert!(verify(spill(&[i(LDXDW, 3, 10, -8, 0)])).is_ok());
    assert!(verify(spill(&[i(STDW, 10, 0, -8, 7), i(LDXW, 0, 10, -4, 0)])).is_ok());
    // An atomic on a spilled pointer (adding to it, fetching it).
    for op in [atomic::ADD, atomic::XCHG] {
        let e = refused(spill(&[i(MOV_K, 3, 0, 0, 1), i(ATOMIC_DW, 10, 3, -8, op)]));
        assert_eq!((e.insn, e.reason), (3, Reason::SpilledPointerRead(-8, 8)));
    }
    // A helper reading a spilled pointer as key bytes (4-byte key at fp-8).
    let mut p = vec![
        i(STXDW, 10, 10, -8, 0),
        i(MOV_X, 2, 10, 0, 0),
        i(ADD_K, 2, 0, 0, -8),
    ];
    p.extend(Insn::lddw(1, PSEUDO_MAP_FD, 0));
    p.push(i(CALL, 0, 0, 0, 1));
    p.extend(ret(2));
    let e = refused(p);
    assert_eq!((e.insn, e.reason), (5, Reason::SpilledPointerRead(-8, 4)));
    // Storing a pointer into the packet (into a map value: bad_map_access).
    let e = refused(guarded(8, &[i(STXDW, 2, 2, 0, 0)]));
    assert_eq!((e.insn, e.reason), (5, Reason::PointerLeak));
    // A pointer as a helper's scalar argument (bpf_redirect's ifindex).
    let e = refused(vec![
        i(MOV_X, 1, 10, 0, 0),
        i(MOV_K, 2, 0, 0, 0),
        i(CALL, 0, 0, 0, 23),
        i(EXIT, 0, 0, 0, 0),
    ]);
    assert_eq!(
        (e.insn, e.reason),
        (2, Reason::BadHelperArg("bpf_redirect", 1, "a scalar"))
    );
    // Returning a pointer.
    let e = refused(vec![i(MOV_X, 0, 10, 0, 0), i(EXIT, 0, 0, 0, 0)]);
    assert_eq!((e.insn, e.reason), (1, Reason::BadReturn));
}
