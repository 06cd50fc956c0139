//! The verifier's abstract values: what a register (or spilled stack slot) can hold.

use crate::alu;
use crate::insn::alu as op;

/// The largest offset a packet pointer may carry (the kernel's MAX_PACKET_OFF).
pub const MAX_PACKET_OFF: i64 = 0xffff;

/// An abstract register value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Val {
    /// Never written (or clobbered by a call).
    Uninit,
    /// A number in an unsigned range.
    Scalar(Range),
    /// The xdp_md context.
    Ctx,
    /// data + var + off, var in vmin..=vmax; pointers that share `id` share `var`, so a
    /// data_end comparison of one proves bytes for all (id 0: no variable part).
    Pkt {
        /// Identity of the variable part.
        id: u32,
        /// Constant offset.
        off: i64,
        /// Smallest variable part.
        vmin: i64,
        /// Largest variable part.
        vmax: i64,
    },
    /// data_end.
    PktEnd,
    /// A packet pointer bpf_xdp_adjust_head invalidated.
    Invalid,
    /// fp + off (off exact, negative inside the frame).
    Stack(i64),
    /// A map (from a relocated LDDW).
    MapPtr(u32),
    /// A value of `map`, at an offset in lo..=hi.
    MapValue {
        /// Map index.
        map: u32,
        /// Lowest offset.
        lo: i64,
        /// Highest offset.
        hi: i64,
    },
    /// A lookup's result before its null check; `id` ties the copies together.
    MapValueOrNull {
        /// Map index.
        map: u32,
        /// Identity shared by copies of one lookup result.
        id: u32,
    },
}

/// An unsigned range of a scalar, min..=max.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Range {
    /// Smallest value.
    pub min: u64,
    /// Largest value.
    pub max: u64,
}

impl Range {
    /// Any 64-bit value.
    pub const ANY: Range = Range {
        min: 0,
        max: u64::MAX,
    };
    /// Any 32-bit value.
    pub const U32: Range = Range {
        min: 0,
        max: u32::MAX as u64,
    };

    /// Exactly `v`.
    pub fn exact(v: u64) -> Range {
        Range { min: v, max: v }
    }

    /// Any value of `bytes` bytes.
    pub fn bytes(bytes: usize) -> Range {
        Range {
            min: 0,
            max: if bytes >= 8 {
                u64::MAX
            } else {
                (1u64 << (bytes * 8)) - 1
            },
        }
    }

    /// The value, if known exactly.
    pub fn known(&self) -> Option<u64> {
        (self.min == self.max).then_some(self.min)
    }

    /// Whether zero is possible.
    pub fn may_be_zero(&self) -> bool {
        self.min == 0
    }
}

/// All bits up to the highest bit of `v` set.
fn fill(v: u64) -> u64 {
    if v == 0 {
        0
    } else {
        u64::MAX >> v.leading_zeros()
    }
}

/// The range of dst OP src. `imm` is for END.
pub fn scalar_op(code: u8, a: Range, b: Range, is64: bool, to_be: bool, imm: i32) -> Range {
    if let (Some(x), Some(y)) = (a.known(), b.known()) {
        if let Some(v) = alu::eval(code, x, y, is64, to_be, imm) {
            return Range::exact(v);
        }
    }
    let r = match code {
        op::ADD => match (a.max.checked_add(b.max), a.min.checked_add(b.min)) {
            (Some(max), Some(min)) => Range { min, max },
            _ => Range::ANY,
        },
        op::SUB if a.min >= b.max => Range {
            min: a.min - b.max,
            max: a.max - b.min,
        },
        op::MUL => match a.max.checked_mul(b.max) {
            Some(max) => Range {
                min: a.min.saturating_mul(b.min),
                max,
            },
            None => Range::ANY,
        },
        op::DIV if b.min > 0 => Range {
            min: a.min / b.max,
            max: a.max / b.min,
        },
        op::DIV => Range { min: 0, max: a.max },
        op::MOD if b.min > 0 => Range {
            min: 0,
            max: a.max.min(b.max - 1),
        },
        op::MOD => Range { min: 0, max: a.max },
        op::AND => Range {
            min: 0,
            max: a.max.min(b.max),
        },
        op::OR | op::XOR => Range {
            min: 0,
            max: fill(a.max | b.max),
        },
        op::MOV => b,
        op::LSH => match b.known() {
            Some(k) if k < 64 && a.max.leading_zeros() as u64 >= k => Range {
                min: a.min << k,
                max: a.max << k,
            },
            _ => Range::ANY,
        },
        op::RSH => match b.known() {
            Some(k) if k < 64 => Range {
                min: a.min >> k,
                max: a.max >> k,
            },
            _ => Range { min: 0, max: a.max },
        },
        op::ARSH => match b.known() {
            Some(k) if k < 64 && a.max <= i64::MAX as u64 => Range {
                min: a.min >> k,
                max: a.max >> k,
            },
            _ => Range::ANY,
        },
        op::END if !to_be && imm == 16 => Range {
            min: 0,
            max: a.max.min(0xffff),
        },
        op::END if !to_be && imm == 32 => Range {
            min: 0,
            max: a.max.min(u32::MAX as u64),
        },
        op::END if !to_be && imm == 64 => a,
        op::END => Range::bytes(imm as usize / 8),
        _ => Range::ANY,
    };
    if is64 {
        r
    } else if a.max <= u32::MAX as u64 && b.max <= u32::MAX as u64 && r.max <= u32::MAX as u64 {
        // No 32-bit wrap-around happened, so the 64-bit range is the 32-bit one.
        r
    } else {
        Range::U32
    }
}

/// What a conditional jump between two ranges can be: `Some(taken)` if decided.
pub fn decide(code: u8, a: Range, b: Range, is64: bool) -> Option<bool> {
    use crate::insn::jmp::*;
    if let (Some(x), Some(y)) = (a.known(), b.known()) {
        return alu::cond(code, x, y, is64);
    }
    if !is64 && (a.max > u32::MAX as u64 || b.max > u32::MAX as u64) {
        return None;
    }
    let code = unsigned_equivalent(code, a, b, is64)?;
    match code {
        JEQ | JNE => {
            let disjoint = a.max < b.min || b.max < a.min;
            disjoint.then_some(code == JNE)
        }
        JGT if a.min > b.max => Some(true),
        JGT if a.max <= b.min => Some(false),
        JGE if a.min >= b.max => Some(true),
        JGE if a.max < b.min => Some(false),
        JLT if a.max < b.min => Some(true),
        JLT if a.min >= b.max => Some(false),
        JLE if a.max <= b.min => Some(true),
        JLE if a.min > b.max => Some(false),
        _ => None,
    }
}

/// Signed comparisons of two ranges non-negative at the comparison's width are the unsigned ones.
fn unsigned_equivalent(code: u8, a: Range, b: Range, is64: bool) -> Option<u8> {
    use crate::insn::jmp::*;
    let top = if is64 {
        i64::MAX as u64
    } else {
        i32::MAX as u64
    };
    let nonneg = a.max <= top && b.max <= top;
    match code {
        JSGT | JSGE | JSLT | JSLE if !nonneg => None,
        JSGT => Some(JGT),
        JSGE => Some(JGE),
        JSLT => Some(JLT),
        JSLE => Some(JLE),
        JSET => None,
        c => Some(c),
    }
}

/// The ranges of (dst, src) on the branch where `dst code src` is `taken`; `None` if that
/// branch cannot happen. Only 64-bit comparisons (or 32-bit ones of 32-bit ranges) refine.
pub fn refine(code: u8, a: Range, b: Range, taken: bool, is64: bool) -> Option<(Range, Range)> {
    use crate::insn::jmp::*;
    if !is64 && (a.max > u32::MAX as u64 || b.max > u32::MAX as u64) {
        return Some((a, b));
    }
    let Some(code) = unsigned_equivalent(code, a, b, is64) else {
        return Some((a, b));
    };
    // Normalise to the condition that holds on this branch.
    let code = match (code, taken) {
        (c, true) => c,
        (JEQ, false) => JNE,
        (JNE, false) => JEQ,
        (JGT, false) => JLE,
        (JGE, false) => JLT,
        (JLT, false) => JGE,
        (JLE, false) => JGT,
        _ => return Some((a, b)),
    };
    let (mut a, mut b) = (a, b);
    match code {
        JEQ => {
            let r = Range {
                min: a.min.max(b.min),
                max: a.max.min(b.max),
            };
            a = r;
            b = r;
        }
        JNE => {
            if let Some(c) = b.known() {
                if a.min == c {
                    a.min = a.min.checked_add(1)?;
                }
                if a.max == c {
                    a.max = a.max.checked_sub(1)?;
                }
            }
            if let Some(c) = a.known() {
                if b.min == c {
                    b.min = b.min.checked_add(1)?;
                }
                if b.max == c {
                    b.max = b.max.checked_sub(1)?;
                }
            }
        }
        JGT => {
            a.min = a.min.max(b.min.checked_add(1)?);
            b.max = b.max.min(a.max.checked_sub(1)?);
        }
        JGE => {
            a.min = a.min.max(b.min);
            b.max = b.max.min(a.max);
        }
        JLT => {
            a.max = a.max.min(b.max.checked_sub(1)?);
            b.min = b.min.max(a.min.checked_add(1)?);
        }
        JLE => {
            a.max = a.max.min(b.max);
            b.min = b.min.max(a.min);
        }
        _ => {}
    }
    (a.min <= a.max && b.min <= b.max).then_some((a, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::insn::jmp::*;

    #[test]
    fn ranges_follow_masks_and_shifts() {
        let byte = Range::bytes(1);
        let r = scalar_op(op::LSH, byte, Range::exact(2), true, false, 0);
        assert_eq!(r, Range { min: 0, max: 1020 });
        let r = scalar_op(op::AND, r, Range::exact(60), true, false, 0);
        assert_eq!(r, Range { min: 0, max: 60 });
        assert_eq!(
            scalar_op(op::ADD, Range::ANY, Range::exact(1), true, false, 0),
            Range::ANY
        );
    }

    #[test]
    fn branches_refine_and_decide() {
        let i = Range { min: 0, max: 100 };
        let (t, _) = refine(JLT, i, Range::exact(10), true, true).unwrap();
        assert_eq!(t, Range { min: 0, max: 9 });
        let (f, _) = refine(JLT, i, Range::exact(10), false, true).unwrap();
        assert_eq!(f, Range { min: 10, max: 100 });
        assert_eq!(
            decide(JGT, Range { min: 5, max: 9 }, Range::exact(4), true),
            Some(true)
        );
        assert_eq!(decide(JGT, i, Range::exact(4), true), None);
        assert!(refine(JEQ, Range::exact(3), Range::exact(4), true, true).is_none());
        // 0x8000_0000 is negative as a 32-bit signed number: not decided as unsigned.
        let big = Range {
            min: 0x8000_0000,
            max: 0x8000_0001,
        };
        assert_eq!(decide(JSGT, big, Range::exact(1), false), None);
        assert_eq!(decide(JSGT, big, Range::exact(1), true), Some(true));
    }
}
