//! The eBPF instruction set (Documentation/bpf/standardization/instruction-set.rst): 8-byte
//! instructions, the 16-byte LDDW, and the opcode fields the verifier and interpreter share.

/// Instruction class (low 3 bits of the opcode).
pub mod class {
    /// Non-standard loads (LDDW and the legacy packet loads).
    pub const LD: u8 = 0x00;
    /// Register loads from memory.
    pub const LDX: u8 = 0x01;
    /// Stores of an immediate.
    pub const ST: u8 = 0x02;
    /// Stores of a register (and atomics).
    pub const STX: u8 = 0x03;
    /// 32-bit arithmetic.
    pub const ALU: u8 = 0x04;
    /// 64-bit jumps, calls and exit.
    pub const JMP: u8 = 0x05;
    /// 32-bit jumps.
    pub const JMP32: u8 = 0x06;
    /// 64-bit arithmetic.
    pub const ALU64: u8 = 0x07;
}

/// Arithmetic operation codes (high 4 bits of an ALU opcode).
pub mod alu {
    /// dst += src
    pub const ADD: u8 = 0x00;
    /// dst -= src
    pub const SUB: u8 = 0x10;
    /// dst *= src
    pub const MUL: u8 = 0x20;
    /// dst /= src (unsigned; 0 when src is 0, as the kernel defines it)
    pub const DIV: u8 = 0x30;
    /// dst |= src
    pub const OR: u8 = 0x40;
    /// dst &= src
    pub const AND: u8 = 0x50;
    /// dst <<= src
    pub const LSH: u8 = 0x60;
    /// dst >>= src (logical)
    pub const RSH: u8 = 0x70;
    /// dst = -dst
    pub const NEG: u8 = 0x80;
    /// dst %= src (unsigned; dst unchanged when src is 0, as the kernel defines it)
    pub const MOD: u8 = 0x90;
    /// dst ^= src
    pub const XOR: u8 = 0xa0;
    /// dst = src
    pub const MOV: u8 = 0xb0;
    /// dst >>= src (arithmetic)
    pub const ARSH: u8 = 0xc0;
    /// Byte swap (to little- or big-endian, by the source bit).
    pub const END: u8 = 0xd0;
}

/// Jump operation codes (high 4 bits of a JMP opcode).
pub mod jmp {
    /// Unconditional jump.
    pub const JA: u8 = 0x00;
    /// ==
    pub const JEQ: u8 = 0x10;
    /// > unsigned
    pub const JGT: u8 = 0x20;
    /// >= unsigned
    pub const JGE: u8 = 0x30;
    /// dst & src != 0
    pub const JSET: u8 = 0x40;
    /// !=
    pub const JNE: u8 = 0x50;
    /// > signed
    pub const JSGT: u8 = 0x60;
    /// >= signed
    pub const JSGE: u8 = 0x70;
    /// Helper call.
    pub const CALL: u8 = 0x80;
    /// Return R0.
    pub const EXIT: u8 = 0x90;
    /// < unsigned
    pub const JLT: u8 = 0xa0;
    /// <= unsigned
    pub const JLE: u8 = 0xb0;
    /// < signed
    pub const JSLT: u8 = 0xc0;
    /// <= signed
    pub const JSLE: u8 = 0xd0;
}

/// Memory access modes (high 3 bits of a load/store opcode).
pub mod mode {
    /// 64-bit immediate (LDDW).
    pub const IMM: u8 = 0x00;
    /// Legacy packet access, absolute (refused).
    pub const ABS: u8 = 0x20;
    /// Legacy packet access, indirect (refused).
    pub const IND: u8 = 0x40;
    /// Regular memory access.
    pub const MEM: u8 = 0x60;
    /// Atomic read-modify-write (STX only).
    pub const ATOMIC: u8 = 0xc0;
}

/// Source operand flag: 0 = immediate, 1 = register.
pub const SRC_X: u8 = 0x08;

/// LDDW's source field for a map reference after relocation (imm = map index).
pub const PSEUDO_MAP_FD: u8 = 1;
/// CALL's source field for a bpf-to-bpf call (not supported in this slice).
pub const PSEUDO_CALL: u8 = 1;

/// Atomic operations (the immediate of an ATOMIC store).
pub mod atomic {
    /// *ptr += src
    pub const ADD: i32 = 0x00;
    /// *ptr |= src
    pub const OR: i32 = 0x40;
    /// *ptr &= src
    pub const AND: i32 = 0x50;
    /// *ptr ^= src
    pub const XOR: i32 = 0xa0;
    /// Flag: src receives the old value.
    pub const FETCH: i32 = 0x01;
    /// src = xchg(*ptr, src)
    pub const XCHG: i32 = 0xe0 | FETCH;
    /// r0 = cmpxchg(*ptr, r0, src)
    pub const CMPXCHG: i32 = 0xf0 | FETCH;
}

/// The most instructions a program may have (the kernel's limit for unprivileged programs).
pub const MAX_INSNS: usize = 4096;

/// Number of registers: R0..R9 general, R10 the read-only frame pointer.
pub const REGS: usize = 11;
/// The frame pointer's register number.
pub const FP: u8 = 10;

/// One decoded instruction; LDDW occupies two slots and carries its full 64-bit value in `imm64`
/// (its second slot decodes as a placeholder the CFG never enters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Insn {
    /// The opcode byte.
    pub op: u8,
    /// Destination register (low nibble of byte 1).
    pub dst: u8,
    /// Source register (high nibble of byte 1).
    pub src: u8,
    /// Signed 16-bit offset.
    pub off: i16,
    /// Signed 32-bit immediate.
    pub imm: i32,
    /// LDDW's 64-bit immediate (imm of both slots); 0 for other instructions.
    pub imm64: u64,
}

impl Insn {
    /// The instruction class.
    pub fn class(&self) -> u8 {
        self.op & 0x07
    }
    /// The operation (high 4 bits) of an ALU or JMP instruction.
    pub fn code(&self) -> u8 {
        self.op & 0xf0
    }
    /// Whether the second operand is the source register.
    pub fn src_is_reg(&self) -> bool {
        self.op & SRC_X != 0
    }
    /// Access size in bytes of a load/store (1, 2, 4, 8).
    pub fn size(&self) -> usize {
        match self.op & 0x18 {
            0x00 => 4,
            0x08 => 2,
            0x10 => 1,
            _ => 8,
        }
    }
    /// Memory mode of a load/store.
    pub fn mode(&self) -> u8 {
        self.op & 0xe0
    }
    /// Whether this is the two-slot 64-bit immediate load.
    pub fn is_lddw(&self) -> bool {
        self.op == (class::LD | mode::IMM | 0x18)
    }
    /// Encodes back to 8 bytes (the first slot of an LDDW).
    pub fn encode(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.op;
        b[1] = (self.dst & 0x0f) | (self.src << 4);
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }
}

/// Why bytes do not decode into instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The length is not a multiple of 8.
    Length(usize),
    /// An LDDW at this index has no second slot.
    TruncatedLddw(usize),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Length(n) => {
                write!(f, "{n} bytes is not a whole number of 8-byte instructions")
            }
            DecodeError::TruncatedLddw(i) => {
                write!(f, "insn {i}: 64-bit immediate load without its second slot")
            }
        }
    }
}

fn slot(b: &[u8]) -> Insn {
    Insn {
        op: b[0],
        dst: b[1] & 0x0f,
        src: b[1] >> 4,
        off: i16::from_le_bytes([b[2], b[3]]),
        imm: i32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        imm64: 0,
    }
}

/// Decodes bytes into one `Insn` per 8-byte slot (an LDDW's second slot keeps its raw fields).
pub fn decode(bytes: &[u8]) -> Result<Vec<Insn>, DecodeError> {
    if !bytes.len().is_multiple_of(8) {
        return Err(DecodeError::Length(bytes.len()));
    }
    let mut out: Vec<Insn> = bytes.chunks_exact(8).map(slot).collect();
    let mut i = 0;
    while i < out.len() {
        if out[i].is_lddw() {
            let hi = out.get(i + 1).ok_or(DecodeError::TruncatedLddw(i))?.imm;
            out[i].imm64 = (out[i].imm as u32 as u64) | ((hi as u32 as u64) << 32);
            i += 2;
        } else {
            i += 1;
        }
    }
    Ok(out)
}

/// Encodes instructions back to bytes (LDDW's second slot from `imm64`).
pub fn encode(insns: &[Insn]) -> Vec<u8> {
    let mut out = Vec::with_capacity(insns.len() * 8);
    let mut i = 0;
    while i < insns.len() {
        out.extend_from_slice(&insns[i].encode());
        if insns[i].is_lddw() && i + 1 < insns.len() {
            let mut hi = insns[i + 1];
            hi.imm = (insns[i].imm64 >> 32) as i32;
            out.extend_from_slice(&hi.encode());
            i += 2;
        } else {
            i += 1;
        }
    }
    out
}

impl Insn {
    /// An instruction from its fields (an assembler for tests and hand-written programs).
    pub fn new(op: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            op,
            dst,
            src,
            off,
            imm,
            imm64: 0,
        }
    }

    /// The two slots of `dst = imm64` (with `src` = PSEUDO_MAP_FD, `imm64` is a map index).
    pub fn lddw(dst: u8, src: u8, imm64: u64) -> [Insn; 2] {
        let lo = Insn {
            op: class::LD | mode::IMM | 0x18,
            dst,
            src,
            off: 0,
            imm: imm64 as u32 as i32,
            imm64,
        };
        let hi = Insn {
            op: 0,
            dst: 0,
            src: 0,
            off: 0,
            imm: (imm64 >> 32) as i32,
            imm64: 0,
        };
        [lo, hi]
    }
}
