//! Classic BPF (the BSD packet filter that tcpdump's filter language compiles to): a program
//! checked once when loaded, then run on frames by a small interpreter. The checks are the
//! kernel's (`bpf_check_classic`) and libpcap's (`bpf_validate`): known opcodes only, jumps
//! forward and inside the program, scratch memory indexes in range, no division by a zero
//! constant, a return at the end, at most [`MAX_INSNS`] instructions. At run time a load
//! outside the frame and a division by a zero X return 0 (reject), as the kernel does, so
//! no program and no frame can panic, loop or read out of bounds.

use std::fmt;

/// Most instructions in a program (the kernel's BPF_MAXINSNS).
pub const MAX_INSNS: usize = 4096;
/// Words of scratch memory (BPF_MEMWORDS).
pub const MEM_WORDS: usize = 16;

/// One instruction as libpcap and the kernel lay it out (`struct sock_filter`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Insn {
    /// Opcode: class, size, mode, operation and source bits.
    pub code: u16,
    /// Jump offset if the condition holds.
    pub jt: u8,
    /// Jump offset if it does not.
    pub jf: u8,
    /// The constant operand.
    pub k: u32,
}

impl Insn {
    /// An instruction from its four fields.
    pub const fn new(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
        Insn { code, jt, jf, k }
    }
}

/// Why a program was refused at load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CbpfError {
    /// No instruction at all.
    Empty,
    /// More than [`MAX_INSNS`] instructions.
    TooLong(usize),
    /// An opcode this interpreter does not know (nor the kernel).
    BadOpcode {
        /// The instruction's index.
        pc: usize,
        /// Its opcode.
        code: u16,
    },
    /// A jump that leaves the program (jumps only go forward, so there are no loops).
    JumpOutOfRange {
        /// The instruction's index.
        pc: usize,
    },
    /// A scratch memory index of [`MEM_WORDS`] or more.
    BadMemIndex {
        /// The instruction's index.
        pc: usize,
    },
    /// A division or modulo by the constant 0.
    DivideByZero {
        /// The instruction's index.
        pc: usize,
    },
    /// The last instruction is not a return, so the program could run off its end.
    NoReturn,
}

impl fmt::Display for CbpfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CbpfError::Empty => f.write_str("the filter program is empty"),
            CbpfError::TooLong(n) => write!(
                f,
                "the filter program has {n} instructions, more than {MAX_INSNS}"
            ),
            CbpfError::BadOpcode { pc, code } => {
                write!(f, "instruction {pc}: unknown opcode {code:#06x}")
            }
            CbpfError::JumpOutOfRange { pc } => {
                write!(f, "instruction {pc}: jump out of the program")
            }
            CbpfError::BadMemIndex { pc } => {
                write!(f, "instruction {pc}: scratch memory index out of range")
            }
            CbpfError::DivideByZero { pc } => {
                write!(f, "instruction {pc}: division by the constant 0")
            }
            CbpfError::NoReturn => f.write_str("the filter program does not end with a return"),
        }
    }
}

impl std::error::Error for CbpfError {}

// Opcode fields (linux/filter.h, pcap/bpf.h).
const LD: u16 = 0x00;
const LDX: u16 = 0x01;
const ST: u16 = 0x02;
const STX: u16 = 0x03;
const ALU: u16 = 0x04;
const JMP: u16 = 0x05;
const RET: u16 = 0x06;
const MISC: u16 = 0x07;
const W: u16 = 0x00;
const H: u16 = 0x08;
const B: u16 = 0x10;
const IMM: u16 = 0x00;
const ABS: u16 = 0x20;
const IND: u16 = 0x40;
const MEM: u16 = 0x60;
const LEN: u16 = 0x80;
const MSH: u16 = 0xa0;
const X: u16 = 0x08;
const RET_A: u16 = 0x10;

/// A load's width.
#[derive(Clone, Copy, Debug)]
enum Width {
    Word,
    Half,
    Byte,
}

/// A decoded ALU operation.
#[derive(Clone, Copy, Debug)]
enum AluOp {
    Add,
    Sub,
    Mul,
    Div,
    Or,
    And,
    Lsh,
    Rsh,
    Neg,
    Mod,
    Xor,
}

/// A decoded jump condition.
#[derive(Clone, Copy, Debug)]
enum Cond {
    Eq,
    Gt,
    Ge,
    Set,
}

/// An instruction decoded at load, so that running it needs no further check of its form.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// A = packet[k..] (ABS) or packet[X + k..] (IND).
    LoadPkt {
        width: Width,
        indexed: bool,
        k: u32,
    },
    LoadImm(u32),
    LoadLen,
    LoadMem(usize),
    LoadXImm(u32),
    LoadXLen,
    LoadXMem(usize),
    /// X = 4 * (packet[k] & 0xf): an IPv4 header's length.
    LoadXMsh(u32),
    Store(usize),
    StoreX(usize),
    Alu {
        op: AluOp,
        src_x: bool,
        k: u32,
    },
    Ja(usize),
    Jump {
        cond: Cond,
        src_x: bool,
        k: u32,
        jt: usize,
        jf: usize,
    },
    RetK(u32),
    RetA,
    Tax,
    Txa,
}

/// A checked classic BPF program.
#[derive(Clone, Debug)]
pub struct Program {
    ops: Vec<Op>,
}

impl Program {
    /// Checks and decodes `insns`; refuses what could misbehave.
    pub fn new(insns: &[Insn]) -> Result<Program, CbpfError> {
        if insns.is_empty() {
            return Err(CbpfError::Empty);
        }
        if insns.len() > MAX_INSNS {
            return Err(CbpfError::TooLong(insns.len()));
        }
        let ops = insns
            .iter()
            .enumerate()
            .map(|(pc, i)| decode(pc, insns.len(), i))
            .collect::<Result<Vec<_>, _>>()?;
        if !matches!(ops.last(), Some(Op::RetK(_) | Op::RetA)) {
            return Err(CbpfError::NoReturn);
        }
        Ok(Program { ops })
    }

    /// Instructions in the program.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Always false: an empty program is refused at load.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Runs the program on `pkt` (the bytes at hand) whose length on the wire is `wire_len`;
    /// returns how many bytes to keep, 0 meaning reject.
    pub fn run(&self, pkt: &[u8], wire_len: u32) -> u32 {
        let (mut a, mut x) = (0u32, 0u32);
        let mut mem = [0u32; MEM_WORDS];
        let mut pc = 0;
        // Every jump goes forward (checked at load), so this ends within len() steps.
        while let Some(op) = self.ops.get(pc) {
            pc += 1;
            match *op {
                Op::LoadPkt { width, indexed, k } => {
                    let off = if indexed { x.checked_add(k) } else { Some(k) };
                    match off.and_then(|o| load(pkt, width, o)) {
                        Some(v) => a = v,
                        None => return 0,
                    }
                }
                Op::LoadImm(k) => a = k,
                Op::LoadLen => a = wire_len,
                Op::LoadMem(i) => a = mem[i],
                Op::LoadXImm(k) => x = k,
                Op::LoadXLen => x = wire_len,
                Op::LoadXMem(i) => x = mem[i],
                Op::LoadXMsh(k) => match load(pkt, Width::Byte, k) {
                    Some(v) => x = 4 * (v & 0xf),
                    None => return 0,
                },
                Op::Store(i) => mem[i] = a,
                Op::StoreX(i) => mem[i] = x,
                Op::Alu { op, src_x, k } => {
                    let v = if src_x { x } else { k };
                    a = match op {
                        AluOp::Add => a.wrapping_add(v),
                        AluOp::Sub => a.wrapping_sub(v),
                        AluOp::Mul => a.wrapping_mul(v),
                        AluOp::Div => match a.checked_div(v) {
                            Some(q) => q,
                            None => return 0,
                        },
                        AluOp::Mod => match a.checked_rem(v) {
                            Some(r) => r,
                            None => return 0,
                        },
                        AluOp::Or => a | v,
                        AluOp::And => a & v,
                        AluOp::Xor => a ^ v,
                        // Shifts of 32 or more give 0, as the kernel's interpreter does.
                        AluOp::Lsh => a.checked_shl(v).unwrap_or(0),
                        AluOp::Rsh => a.checked_shr(v).unwrap_or(0),
                        AluOp::Neg => a.wrapping_neg(),
                    };
                }
                Op::Ja(off) => pc += off,
                Op::Jump {
                    cond,
                    src_x,
                    k,
                    jt,
                    jf,
                } => {
                    let v = if src_x { x } else { k };
                    let taken = match cond {
                        Cond::Eq => a == v,
                        Cond::Gt => a > v,
                        Cond::Ge => a >= v,
                        Cond::Set => a & v != 0,
                    };
                    pc += if taken { jt } else { jf };
                }
                Op::RetK(k) => return k,
                Op::RetA => return a,
                Op::Tax => x = a,
                Op::Txa => a = x,
            }
        }
        // Unreachable for a checked program (it ends with a return); reject anyway.
        0
    }
}

/// A big-endian load of `width` at `off`; None outside the frame.
fn load(pkt: &[u8], width: Width, off: u32) -> Option<u32> {
    let off = usize::try_from(off).ok()?;
    let n = match width {
        Width::Word => 4,
        Width::Half => 2,
        Width::Byte => 1,
    };
    let bytes = pkt.get(off..off.checked_add(n)?)?;
    Some(bytes.iter().fold(0u32, |v, &b| (v << 8) | u32::from(b)))
}

/// Decodes instruction `pc` of a program of `len`, checking its form.
fn decode(pc: usize, len: usize, i: &Insn) -> Result<Op, CbpfError> {
    let bad = || CbpfError::BadOpcode { pc, code: i.code };
    let mem = |k: u32| {
        usize::try_from(k)
            .ok()
            .filter(|&m| m < MEM_WORDS)
            .ok_or(CbpfError::BadMemIndex { pc })
    };
    // The instructions after this one; a jump of `off` lands at pc + 1 + off.
    let after = len - pc - 1;
    let target = |off: usize| {
        if off < after {
            Ok(off)
        } else {
            Err(CbpfError::JumpOutOfRange { pc })
        }
    };
    let (k, code) = (i.k, i.code);
    // Every opcode fits in 8 bits; anything above is not an instruction.
    if code > 0xff {
        return Err(bad());
    }
    let width = |code: u16| match code & 0x18 {
        W => Some(Width::Word),
        H => Some(Width::Half),
        B => Some(Width::Byte),
        _ => None,
    };
    Ok(match code & 0x07 {
        LD => match (code & 0xe0, width(code)) {
            (ABS, Some(width)) => Op::LoadPkt {
                width,
                indexed: false,
                k,
            },
            (IND, Some(width)) => Op::LoadPkt {
                width,
                indexed: true,
                k,
            },
            _ if code == LD | W | IMM => Op::LoadImm(k),
            _ if code == LD | W | LEN => Op::LoadLen,
            _ if code == LD | W | MEM => Op::LoadMem(mem(k)?),
            _ => return Err(bad()),
        },
        LDX => match code {
            c if c == LDX | W | IMM => Op::LoadXImm(k),
            c if c == LDX | W | LEN => Op::LoadXLen,
            c if c == LDX | W | MEM => Op::LoadXMem(mem(k)?),
            c if c == LDX | B | MSH => Op::LoadXMsh(k),
            _ => return Err(bad()),
        },
        ST if code == ST => Op::Store(mem(k)?),
        STX if code == STX => Op::StoreX(mem(k)?),
        ALU => {
            let src_x = code & X != 0;
            let op = match code & 0xf0 {
                0x00 => AluOp::Add,
                0x10 => AluOp::Sub,
                0x20 => AluOp::Mul,
                0x30 => AluOp::Div,
                0x40 => AluOp::Or,
                0x50 => AluOp::And,
                0x60 => AluOp::Lsh,
                0x70 => AluOp::Rsh,
                0x80 if !src_x => AluOp::Neg,
                0x90 => AluOp::Mod,
                0xa0 => AluOp::Xor,
                _ => return Err(bad()),
            };
            if matches!(op, AluOp::Div | AluOp::Mod) && !src_x && k == 0 {
                return Err(CbpfError::DivideByZero { pc });
            }
            Op::Alu { op, src_x, k }
        }
        JMP => {
            let src_x = code & X != 0;
            let cond = match code & 0xf0 {
                0x00 if !src_x => {
                    let off = usize::try_from(k).map_err(|_| CbpfError::JumpOutOfRange { pc })?;
                    return Ok(Op::Ja(target(off)?));
                }
                0x10 => Cond::Eq,
                0x20 => Cond::Gt,
                0x30 => Cond::Ge,
                0x40 => Cond::Set,
                _ => return Err(bad()),
            };
            Op::Jump {
                cond,
                src_x,
                k,
                jt: target(usize::from(i.jt))?,
                jf: target(usize::from(i.jf))?,
            }
        }
        RET => match code & !0x07 {
            0x00 => Op::RetK(k),
            RET_A => Op::RetA,
            _ => return Err(bad()),
        },
        MISC => match code {
            0x07 => Op::Tax,
            0x87 => Op::Txa,
            _ => return Err(bad()),
        },
        _ => return Err(bad()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Opcodes the tests assemble (the names of pcap/bpf.h).
    const LD_H_ABS: u16 = LD | H | ABS;
    const LD_B_ABS: u16 = LD | B | ABS;
    const LD_W_ABS: u16 = LD | W | ABS;
    const LD_B_IND: u16 = LD | B | IND;
    const LDX_MSH: u16 = LDX | B | MSH;
    const JEQ_K: u16 = JMP | 0x10;
    const JA: u16 = JMP;
    const RET_K: u16 = RET;
    const ALU_DIV_X: u16 = ALU | 0x30 | X;
    const ALU_DIV_K: u16 = ALU | 0x30;

    /// `ip and tcp dst port 80`, hand-assembled as libpcap would (fragments not checked).
    fn tcp_dport_80() -> Vec<Insn> {
        vec![
            Insn::new(LD_H_ABS, 0, 0, 12),
            Insn::new(JEQ_K, 0, 6, 0x0800),
            Insn::new(LD_B_ABS, 0, 0, 23),
            Insn::new(JEQ_K, 0, 4, 6),
            Insn::new(LDX_MSH, 0, 0, 14),
            Insn::new(LD_H_IND, 0, 0, 16),
            Insn::new(JEQ_K, 0, 1, 80),
            Insn::new(RET_K, 0, 0, 262144),
            Insn::new(RET_K, 0, 0, 0),
        ]
    }
    const LD_H_IND: u16 = LD | H | IND;

    /// Ethernet + IPv4 (IHL 5) + TCP with the given ports, 54 bytes.
    fn tcp_frame(sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 54];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[23] = 6;
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    #[test]
    fn a_port_filter_matches_its_port_only() {
        let p = Program::new(&tcp_dport_80()).unwrap();
        assert_eq!(p.run(&tcp_frame(1234, 80), 54), 262144);
        assert_eq!(p.run(&tcp_frame(80, 1234), 54), 0);
        let mut udp = tcp_frame(1234, 80);
        udp[23] = 17;
        assert_eq!(p.run(&udp, 54), 0);
        let mut arp = tcp_frame(1234, 80);
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(p.run(&arp, 54), 0);
        // An IPv4 header with options moves the ports: X follows the IHL.
        let mut opts = tcp_frame(1, 2);
        opts[14] = 0x46;
        opts.splice(34..34, [0u8; 4]);
        opts[40..42].copy_from_slice(&80u16.to_be_bytes());
        assert_eq!(p.run(&opts, 58), 262144);
    }

    #[test]
    fn a_load_past_the_frame_rejects() {
        let p = Program::new(&tcp_dport_80()).unwrap();
        // Cut inside the TCP header: the port load is out of range, so 0 (the kernel's).
        assert_eq!(p.run(&tcp_frame(1234, 80)[..36], 54), 0);
        assert_eq!(p.run(&[], 0), 0);
        let far = Program::new(&[
            Insn::new(LD_W_ABS, 0, 0, u32::MAX),
            Insn::new(RET_K, 0, 0, 1),
        ])
        .unwrap();
        assert_eq!(far.run(&[0; 64], 64), 0);
        // X + k overflowing 32 bits rejects too, rather than wrapping to a small offset.
        let wrap = Program::new(&[
            Insn::new(LDX | W | IMM, 0, 0, u32::MAX),
            Insn::new(LD_B_IND, 0, 0, 2),
            Insn::new(RET_K, 0, 0, 1),
        ])
        .unwrap();
        assert_eq!(wrap.run(&[0; 64], 64), 0);
    }

    #[test]
    fn division_by_zero_rejects_or_is_refused() {
        assert_eq!(
            Program::new(&[Insn::new(ALU_DIV_K, 0, 0, 0), Insn::new(RET_K, 0, 0, 1)]).unwrap_err(),
            CbpfError::DivideByZero { pc: 0 }
        );
        let by_x = Program::new(&[
            Insn::new(LD | W | IMM, 0, 0, 10),
            Insn::new(ALU_DIV_X, 0, 0, 0),
            Insn::new(RET | RET_A, 0, 0, 0),
        ])
        .unwrap();
        assert_eq!(by_x.run(&[], 0), 0, "X is 0: reject");
        let by_two = Program::new(&[
            Insn::new(LD | W | IMM, 0, 0, 10),
            Insn::new(LDX | W | IMM, 0, 0, 2),
            Insn::new(ALU_DIV_X, 0, 0, 0),
            Insn::new(RET | RET_A, 0, 0, 0),
        ])
        .unwrap();
        assert_eq!(by_two.run(&[], 0), 5);
    }

    #[test]
    fn bad_programs_are_refused_at_load() {
        assert_eq!(Program::new(&[]).unwrap_err(), CbpfError::Empty);
        let long = vec![Insn::new(RET_K, 0, 0, 0); MAX_INSNS + 1];
        assert_eq!(
            Program::new(&long).unwrap_err(),
            CbpfError::TooLong(MAX_INSNS + 1)
        );
        assert!(Program::new(&vec![Insn::new(RET_K, 0, 0, 0); MAX_INSNS]).is_ok());
        // A jump past the end, and one that would land on the end itself.
        assert_eq!(
            Program::new(&[Insn::new(JA, 0, 0, 1), Insn::new(RET_K, 0, 0, 0)]).unwrap_err(),
            CbpfError::JumpOutOfRange { pc: 0 }
        );
        assert_eq!(
            Program::new(&[Insn::new(JEQ_K, 0, 1, 0), Insn::new(RET_K, 0, 0, 0)]).unwrap_err(),
            CbpfError::JumpOutOfRange { pc: 0 }
        );
        assert_eq!(
            Program::new(&[Insn::new(ST, 0, 0, 16), Insn::new(RET_K, 0, 0, 0)]).unwrap_err(),
            CbpfError::BadMemIndex { pc: 0 }
        );
        assert_eq!(
            Program::new(&[Insn::new(0xffff, 0, 0, 0), Insn::new(RET_K, 0, 0, 0)]).unwrap_err(),
            CbpfError::BadOpcode {
                pc: 0,
                code: 0xffff
            }
        );
        assert_eq!(
            Program::new(&[Insn::new(LD | W | IMM, 0, 0, 0)]).unwrap_err(),
            CbpfError::NoReturn
        );
    }

    #[test]
    fn scratch_memory_and_registers_round_trip() {
        let p = Program::new(&[
            Insn::new(LD | W | IMM, 0, 0, 7),
            Insn::new(ST, 0, 0, 15),
            Insn::new(LD | W | LEN, 0, 0, 0),
            Insn::new(0x07, 0, 0, 0), // TAX
            Insn::new(LD | W | MEM, 0, 0, 15),
            Insn::new(ALU | X, 0, 0, 0), // A += X
            Insn::new(RET | RET_A, 0, 0, 0),
        ])
        .unwrap();
        assert_eq!(p.run(&[], 100), 107);
    }

    #[test]
    fn arbitrary_programs_never_panic() {
        // A cheap deterministic sweep: every accepted program ends on every frame.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        // Mostly valid opcodes (so programs get past the checks), sometimes any byte.
        const CODES: [u16; 39] = [
            0x20, 0x28, 0x30, 0x40, 0x48, 0x50, 0x00, 0x80, 0x60, 0x01, 0x81, 0x61, 0xb1, 0x02,
            0x03, 0x04, 0x0c, 0x14, 0x24, 0x34, 0x3c, 0x44, 0x54, 0x64, 0x74, 0x84, 0x94, 0x9c,
            0xa4, 0x05, 0x15, 0x1d, 0x25, 0x35, 0x45, 0x06, 0x16, 0x07, 0x87,
        ];
        let mut accepted = 0;
        for _ in 0..20_000 {
            let n = (next() % 12 + 1) as usize;
            let mut insns: Vec<Insn> = (0..n)
                .map(|_| {
                    let r = next();
                    let code = if r % 16 == 0 {
                        (r >> 8) as u16 & 0xff
                    } else {
                        CODES[(r >> 8) as usize % CODES.len()]
                    };
                    let k = (r >> 32) as u32 % 80;
                    Insn::new(code, (r >> 16) as u8 % 4, (r >> 24) as u8 % 4, k)
                })
                .collect();
            insns.push(Insn::new(RET | RET_A, 0, 0, 0));
            if let Ok(p) = Program::new(&insns) {
                accepted += 1;
                let frame: Vec<u8> = (0..(next() % 70) as usize).map(|i| i as u8).collect();
                p.run(&frame, frame.len() as u32);
            }
        }
        assert!(accepted > 100, "the sweep reached the interpreter");
    }
}
