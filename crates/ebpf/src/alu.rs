//! The concrete semantics of arithmetic and conditions, shared by the interpreter and the
//! verifier's constant folding, so both agree on every value. Division by zero follows the
//! kernel: `x / 0 == 0` and `x % 0 == x` (the verifier still refuses a divisor register that
//! can be zero, and an immediate zero).

use crate::insn::{alu, jmp};

/// dst OP src for a 64-bit (ALU64) or 32-bit (ALU, result zero-extended) operation; `None` for
/// an unknown operation. `imm` is the instruction's immediate (for END: 16, 32 or 64).
pub fn eval(code: u8, dst: u64, src: u64, is64: bool, to_be: bool, imm: i32) -> Option<u64> {
    if code == alu::END {
        let bits = imm as u32;
        let v = match (bits, to_be) {
            (16, false) => dst as u16 as u64,
            (32, false) => dst as u32 as u64,
            (64, false) => dst,
            (16, true) => (dst as u16).swap_bytes() as u64,
            (32, true) => (dst as u32).swap_bytes() as u64,
            (64, true) => dst.swap_bytes(),
            _ => return None,
        };
        return Some(v);
    }
    if is64 {
        Some(match code {
            alu::ADD => dst.wrapping_add(src),
            alu::SUB => dst.wrapping_sub(src),
            alu::MUL => dst.wrapping_mul(src),
            alu::DIV => dst.checked_div(src).unwrap_or(0),
            alu::OR => dst | src,
            alu::AND => dst & src,
            alu::LSH => dst.wrapping_shl(src as u32 & 63),
            alu::RSH => dst.wrapping_shr(src as u32 & 63),
            alu::NEG => (dst as i64).wrapping_neg() as u64,
            alu::MOD => dst.checked_rem(src).unwrap_or(dst),
            alu::XOR => dst ^ src,
            alu::MOV => src,
            alu::ARSH => ((dst as i64) >> (src as u32 & 63)) as u64,
            _ => return None,
        })
    } else {
        let (d, s) = (dst as u32, src as u32);
        Some(match code {
            alu::ADD => d.wrapping_add(s),
            alu::SUB => d.wrapping_sub(s),
            alu::MUL => d.wrapping_mul(s),
            alu::DIV => d.checked_div(s).unwrap_or(0),
            alu::OR => d | s,
            alu::AND => d & s,
            alu::LSH => d.wrapping_shl(s & 31),
            alu::RSH => d.wrapping_shr(s & 31),
            alu::NEG => (d as i32).wrapping_neg() as u32,
            alu::MOD => d.checked_rem(s).unwrap_or(d),
            alu::XOR => d ^ s,
            alu::MOV => s,
            alu::ARSH => ((d as i32) >> (s & 31)) as u32,
            _ => return None,
        } as u64)
    }
}

/// Whether a conditional jump is taken (`None` for a code that is not a condition).
pub fn cond(code: u8, dst: u64, src: u64, is64: bool) -> Option<bool> {
    let (a, b) = if is64 {
        (dst, src)
    } else {
        (dst as u32 as u64, src as u32 as u64)
    };
    let (sa, sb) = if is64 {
        (a as i64, b as i64)
    } else {
        (a as u32 as i32 as i64, b as u32 as i32 as i64)
    };
    Some(match code {
        jmp::JEQ => a == b,
        jmp::JNE => a != b,
        jmp::JGT => a > b,
        jmp::JGE => a >= b,
        jmp::JLT => a < b,
        jmp::JLE => a <= b,
        jmp::JSET => a & b != 0,
        jmp::JSGT => sa > sb,
        jmp::JSGE => sa >= sb,
        jmp::JSLT => sa < sb,
        jmp::JSLE => sa <= sb,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn division_by_zero_as_the_kernel_defines_it() {
        assert_eq!(eval(alu::DIV, 7, 0, true, false, 0), Some(0));
        assert_eq!(eval(alu::MOD, 7, 0, true, false, 0), Some(7));
        assert_eq!(eval(alu::DIV, 7, 0, false, false, 0), Some(0));
        assert_eq!(
            eval(alu::MOD, u64::MAX, 0, false, false, 0),
            Some(u32::MAX as u64)
        );
    }

    #[test]
    fn alu32_zero_extends_and_byte_swaps() {
        assert_eq!(eval(alu::ADD, u64::MAX, 1, false, false, 0), Some(0));
        assert_eq!(eval(alu::END, 0x1234, 0, false, true, 16), Some(0x3412));
        assert_eq!(
            eval(alu::END, 0xffff_1234, 0, false, false, 16),
            Some(0x1234)
        );
        assert_eq!(cond(jmp::JSGT, 0, u32::MAX as u64, false), Some(true));
        assert_eq!(cond(jmp::JSGT, 0, u32::MAX as u64, true), Some(false));
    }
}
