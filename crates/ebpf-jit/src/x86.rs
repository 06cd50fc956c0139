//! A small x86-64 encoder: exactly the instructions the translation emits, with labels and
//! rel32 fix-ups. Registers are hardware numbers (rax = 0 ... r15 = 15); memory operands are
//! always `[base + disp32]`.

/// rax
pub const RAX: u8 = 0;
/// rcx
pub const RCX: u8 = 1;
/// rdx
pub const RDX: u8 = 2;
/// rbx
pub const RBX: u8 = 3;
/// rsp
pub const RSP: u8 = 4;
/// rbp
pub const RBP: u8 = 5;
/// rsi
pub const RSI: u8 = 6;
/// rdi
pub const RDI: u8 = 7;
/// r8
pub const R8: u8 = 8;
/// r9
pub const R9: u8 = 9;
/// r10
pub const R10: u8 = 10;
/// r11
pub const R11: u8 = 11;
/// r12
pub const R12: u8 = 12;
/// r13
pub const R13: u8 = 13;
/// r14
pub const R14: u8 = 14;
/// r15
pub const R15: u8 = 15;

/// Condition codes (the low nibble of Jcc).
pub mod cc {
    /// below (unsigned <)
    pub const B: u8 = 0x2;
    /// above or equal (unsigned >=)
    pub const AE: u8 = 0x3;
    /// equal
    pub const E: u8 = 0x4;
    /// not equal
    pub const NE: u8 = 0x5;
    /// below or equal (unsigned <=)
    pub const BE: u8 = 0x6;
    /// above (unsigned >)
    pub const A: u8 = 0x7;
    /// less (signed <)
    pub const L: u8 = 0xc;
    /// greater or equal (signed >=)
    pub const GE: u8 = 0xd;
    /// less or equal (signed <=)
    pub const LE: u8 = 0xe;
    /// greater (signed >)
    pub const G: u8 = 0xf;
}

/// A position in the code, bound once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label(pub usize);

/// Machine code being assembled.
#[derive(Debug, Default)]
pub struct Asm {
    /// The bytes.
    pub code: Vec<u8>,
    labels: Vec<Option<usize>>,
    /// (position of a rel32, label it targets)
    fixups: Vec<(usize, Label)>,
}

/// An operand size for loads and stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// 1 byte
    B1,
    /// 2 bytes
    B2,
    /// 4 bytes
    B4,
    /// 8 bytes
    B8,
}

impl Size {
    /// From a byte count (1, 2, 4, else 8).
    pub fn of(n: usize) -> Size {
        match n {
            1 => Size::B1,
            2 => Size::B2,
            4 => Size::B4,
            _ => Size::B8,
        }
    }
}

impl Asm {
    /// A new label, not yet bound.
    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Binds `l` here.
    pub fn bind(&mut self, l: Label) {
        self.labels[l.0] = Some(self.code.len());
    }

    /// Resolves every jump; `None` if a label was never bound or a jump is out of rel32 reach.
    pub fn finish(mut self) -> Option<Vec<u8>> {
        for &(at, l) in &self.fixups {
            let target = self.labels[l.0]? as i64;
            let rel = i32::try_from(target - (at as i64 + 4)).ok()?;
            self.code[at..at + 4].copy_from_slice(&rel.to_le_bytes());
        }
        Some(self.code)
    }

    fn b(&mut self, bytes: &[u8]) {
        self.code.extend_from_slice(bytes);
    }

    fn rex(&mut self, w: bool, reg: u8, rm: u8, force: bool) {
        let r = 0x40 | (u8::from(w) << 3) | ((reg >> 3) << 2) | (rm >> 3);
        if r != 0x40 || force {
            self.code.push(r);
        }
    }

    /// `op reg, rm` with a register rm (ModRM mod=11).
    fn rr(&mut self, w: bool, op: &[u8], reg: u8, rm: u8) {
        self.rex(w, reg, rm, false);
        self.b(op);
        self.code.push(0xc0 | ((reg & 7) << 3) | (rm & 7));
    }

    /// `op reg, [base + disp]` (ModRM mod=10, SIB for rsp/r12 bases).
    fn rm(&mut self, w: bool, op: &[u8], reg: u8, base: u8, disp: i32, force_rex: bool) {
        self.rex(w, reg, base, force_rex);
        self.b(op);
        self.code.push(0x80 | ((reg & 7) << 3) | (base & 7));
        if base & 7 == 4 {
            self.code.push(0x24);
        }
        self.b(&disp.to_le_bytes());
    }

    /// mov dst, src (64-bit, or 32-bit zero-extending).
    pub fn mov_rr(&mut self, w: bool, dst: u8, src: u8) {
        self.rr(w, &[0x89], src, dst);
    }

    /// mov dst, imm64 (the shortest exact encoding).
    pub fn mov_imm64(&mut self, dst: u8, imm: u64) {
        if imm <= u32::MAX as u64 {
            self.mov_imm32(dst, imm as u32);
        } else if imm as i64 >= i32::MIN as i64 && imm as i64 <= i32::MAX as i64 {
            self.rr(true, &[0xc7], 0, dst);
            self.b(&(imm as i32).to_le_bytes());
        } else {
            self.rex(true, 0, dst, false);
            self.code.push(0xb8 | (dst & 7));
            self.b(&imm.to_le_bytes());
        }
    }

    /// mov dst32, imm32 (zero-extends).
    pub fn mov_imm32(&mut self, dst: u8, imm: u32) {
        self.rex(false, 0, dst, false);
        self.code.push(0xb8 | (dst & 7));
        self.b(&imm.to_le_bytes());
    }

    /// An ALU op (`0x01` add, `0x09` or, `0x21` and, `0x29` sub, `0x31` xor, `0x39` cmp,
    /// `0x85` test) of two registers: dst op= src.
    pub fn alu_rr(&mut self, w: bool, op: u8, dst: u8, src: u8) {
        self.rr(w, &[op], src, dst);
    }

    /// An ALU op with a sign-extended imm32 (`ext`: 0 add, 1 or, 4 and, 5 sub, 6 xor, 7 cmp).
    pub fn alu_ri(&mut self, w: bool, ext: u8, dst: u8, imm: i32) {
        self.rr(w, &[0x81], ext, dst);
        self.b(&imm.to_le_bytes());
    }

    /// test dst, imm32
    pub fn test_ri(&mut self, w: bool, dst: u8, imm: i32) {
        self.rr(w, &[0xf7], 0, dst);
        self.b(&imm.to_le_bytes());
    }

    /// imul dst, src
    pub fn imul_rr(&mut self, w: bool, dst: u8, src: u8) {
        self.rr(w, &[0x0f, 0xaf], dst, src);
    }

    /// imul dst, dst, imm32
    pub fn imul_ri(&mut self, w: bool, dst: u8, imm: i32) {
        self.rr(w, &[0x69], dst, dst);
        self.b(&imm.to_le_bytes());
    }

    /// A group-3 unary op on a register (`ext`: 3 neg, 6 div).
    pub fn unary(&mut self, w: bool, ext: u8, r: u8) {
        self.rr(w, &[0xf7], ext, r);
    }

    /// A shift by cl (`ext`: 4 shl, 5 shr, 7 sar).
    pub fn shift_cl(&mut self, w: bool, ext: u8, r: u8) {
        self.rr(w, &[0xd3], ext, r);
    }

    /// A shift or rotate by an immediate (`ext`: 1 ror, 4 shl, 5 shr, 7 sar).
    pub fn shift_ri(&mut self, w: bool, ext: u8, r: u8, n: u8) {
        self.rr(w, &[0xc1], ext, r);
        self.code.push(n);
    }

    /// ror r16, 8 (swaps the low two bytes).
    pub fn ror16_8(&mut self, r: u8) {
        self.code.push(0x66);
        self.shift_ri(false, 1, r, 8);
    }

    /// bswap r (32 or 64 bits).
    pub fn bswap(&mut self, w: bool, r: u8) {
        self.rex(w, 0, r, false);
        self.b(&[0x0f, 0xc8 | (r & 7)]);
    }

    /// movzx dst32, src16
    pub fn movzx16_rr(&mut self, dst: u8, src: u8) {
        self.rr(false, &[0x0f, 0xb7], dst, src);
    }

    /// lea dst, [base + disp]
    pub fn lea(&mut self, dst: u8, base: u8, disp: i32) {
        self.rm(true, &[0x8d], dst, base, disp, false);
    }

    /// A zero-extending load of `size` from [base + disp].
    pub fn load(&mut self, size: Size, dst: u8, base: u8, disp: i32) {
        match size {
            Size::B1 => self.rm(false, &[0x0f, 0xb6], dst, base, disp, false),
            Size::B2 => self.rm(false, &[0x0f, 0xb7], dst, base, disp, false),
            Size::B4 => self.rm(false, &[0x8b], dst, base, disp, false),
            Size::B8 => self.rm(true, &[0x8b], dst, base, disp, false),
        }
    }

    /// A store of the low `size` bytes of `src` to [base + disp].
    pub fn store(&mut self, size: Size, base: u8, disp: i32, src: u8) {
        match size {
            // REX always, so that sil/dil/bpl are the byte registers, not dh/bh/ch.
            Size::B1 => self.rm(false, &[0x88], src, base, disp, true),
            Size::B2 => {
                self.code.push(0x66);
                self.rm(false, &[0x89], src, base, disp, false)
            }
            Size::B4 => self.rm(false, &[0x89], src, base, disp, false),
            Size::B8 => self.rm(true, &[0x89], src, base, disp, false),
        }
    }

    /// A store of an immediate (sign-extended to 8 bytes for `B8`) to [base + disp].
    pub fn store_imm(&mut self, size: Size, base: u8, disp: i32, imm: i32) {
        match size {
            Size::B1 => {
                self.rm(false, &[0xc6], 0, base, disp, false);
                self.code.push(imm as u8);
            }
            Size::B2 => {
                self.code.push(0x66);
                self.rm(false, &[0xc7], 0, base, disp, false);
                self.b(&(imm as u16).to_le_bytes());
            }
            Size::B4 | Size::B8 => {
                self.rm(size == Size::B8, &[0xc7], 0, base, disp, false);
                self.b(&imm.to_le_bytes());
            }
        }
    }

    /// cmp r, [base + disp] (64-bit: r - mem)
    pub fn cmp_rm(&mut self, r: u8, base: u8, disp: i32) {
        self.rm(true, &[0x3b], r, base, disp, false);
    }

    /// cmp dword [base + disp], imm8
    pub fn cmp_m32_i8(&mut self, base: u8, disp: i32, imm: i8) {
        self.rm(false, &[0x83], 7, base, disp, false);
        self.code.push(imm as u8);
    }

    /// `op r, [base + disp]` for an ALU op of `alu_rr`'s table, reg-from-memory form.
    pub fn alu_rm(&mut self, w: bool, op: u8, r: u8, base: u8, disp: i32) {
        // The 0x01-style opcodes are `rm op= reg`; +2 is `reg op= rm`.
        self.rm(w, &[op + 2], r, base, disp, false);
    }

    /// lock `op` [base + disp], src for add (0x01), or (0x09), and (0x21), xor (0x31).
    pub fn lock_op(&mut self, w: bool, op: u8, base: u8, disp: i32, src: u8) {
        self.code.push(0xf0);
        self.rm(w, &[op], src, base, disp, false);
    }

    /// lock xadd [base + disp], src
    pub fn lock_xadd(&mut self, w: bool, base: u8, disp: i32, src: u8) {
        self.code.push(0xf0);
        self.rm(w, &[0x0f, 0xc1], src, base, disp, false);
    }

    /// xchg [base + disp], src (locked by definition)
    pub fn xchg(&mut self, w: bool, base: u8, disp: i32, src: u8) {
        self.rm(w, &[0x87], src, base, disp, false);
    }

    /// lock cmpxchg [base + disp], src (compares with rax)
    pub fn lock_cmpxchg(&mut self, w: bool, base: u8, disp: i32, src: u8) {
        self.code.push(0xf0);
        self.rm(w, &[0x0f, 0xb1], src, base, disp, false);
    }

    /// mov dword [base + disp], imm32
    pub fn mov_m32_imm(&mut self, base: u8, disp: i32, imm: u32) {
        self.store_imm(Size::B4, base, disp, imm as i32);
    }

    /// jmp label
    pub fn jmp(&mut self, l: Label) {
        self.code.push(0xe9);
        self.rel32(l);
    }

    /// jcc label
    pub fn jcc(&mut self, cond: u8, l: Label) {
        self.b(&[0x0f, 0x80 | cond]);
        self.rel32(l);
    }

    fn rel32(&mut self, l: Label) {
        self.fixups.push((self.code.len(), l));
        self.b(&[0; 4]);
    }

    /// call r
    pub fn call_r(&mut self, r: u8) {
        self.rex(false, 0, r, false);
        self.b(&[0xff, 0xd0 | (r & 7)]);
    }

    /// push r
    pub fn push(&mut self, r: u8) {
        self.rex(false, 0, r, false);
        self.code.push(0x50 | (r & 7));
    }

    /// pop r
    pub fn pop(&mut self, r: u8) {
        self.rex(false, 0, r, false);
        self.code.push(0x58 | (r & 7));
    }

    /// ret
    pub fn ret(&mut self) {
        self.code.push(0xc3);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Encodings checked against `objdump -d` of the same instructions (GNU as).
    #[test]
    fn encodings_match_the_assembler() {
        let mut a = Asm::default();
        a.mov_rr(true, RAX, R13); // mov rax, r13
        a.mov_rr(false, R9, RDI); // mov r9d, edi
        a.lea(R11, RBP, -8); // lea r11, [rbp-8]
        a.cmp_rm(R11, R12, 512); // cmp r11, [r12+512]
        a.store(Size::B1, R11, 0, RSI); // mov [r11], sil
        a.load(Size::B2, R15, R11, 0); // movzx r15d, word [r11]
        a.bswap(false, R8); // bswap r8d
        a.alu_ri(true, 5, R9, 3); // sub r9, 3
        assert_eq!(
            a.code,
            [
                0x4c, 0x89, 0xe8, // mov rax, r13
                0x41, 0x89, 0xf9, // mov r9d, edi
                0x4c, 0x8d, 0x9d, 0xf8, 0xff, 0xff, 0xff, // lea
                0x4d, 0x3b, 0x9c, 0x24, 0x00, 0x02, 0x00, 0x00, // cmp
                0x41, 0x88, 0xb3, 0, 0, 0, 0, // mov [r11+0], sil
                0x45, 0x0f, 0xb7, 0xbb, 0, 0, 0, 0, // movzx
                0x41, 0x0f, 0xc8, // bswap r8d
                0x49, 0x81, 0xe9, 3, 0, 0, 0, // sub r9, 3
            ]
        );
    }
}
