//! 24-bit packet sequence numbers with the InfiniBand spec's wrap-around comparison: a PSN is
//! "ahead" of another when it is less than 2^23 after it, modulo 2^24 (IBA vol. 1, chapter 9, PSN validation).

use core::fmt;
use core::ops::Add;

/// A packet sequence number: always below 2^24.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// The PSN space is 24 bits.
    pub const MODULUS: u32 = 1 << 24;
    /// Half the space: the comparison window.
    pub const HALF: u32 = 1 << 23;
    const MASK: u32 = Self::MODULUS - 1;

    /// The PSN `v` modulo 2^24.
    #[inline]
    pub const fn new(v: u32) -> Psn {
        Psn(v & Self::MASK)
    }

    /// The 24-bit value.
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }

    /// Signed distance `self - other` in [-2^23, 2^23): positive when `self` is ahead.
    #[inline]
    pub const fn diff(self, other: Psn) -> i32 {
        // Sign-extend the 24-bit difference.
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// Whether `self` is before `other`.
    #[inline]
    pub const fn lt(self, other: Psn) -> bool {
        self.diff(other) < 0
    }

    /// Whether `self` is before or equal to `other`.
    #[inline]
    pub const fn le(self, other: Psn) -> bool {
        self.diff(other) <= 0
    }

    /// Whether `self` is after `other`.
    #[inline]
    pub const fn gt(self, other: Psn) -> bool {
        self.diff(other) > 0
    }

    /// Whether `self` is after or equal to `other`.
    #[inline]
    pub const fn ge(self, other: Psn) -> bool {
        self.diff(other) >= 0
    }
}

impl Add<u32> for Psn {
    type Output = Psn;
    /// `self + n` modulo 2^24.
    #[inline]
    fn add(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_add(n))
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wraps_at_2_pow_24() {
        let last = Psn::new(Psn::MODULUS - 1);
        assert_eq!(last + 1, Psn::new(0));
        assert!(last.lt(Psn::new(0)));
        assert!(Psn::new(0).gt(last));
        assert_eq!(Psn::new(0).diff(last), 1);
        assert_eq!(Psn::new(Psn::MODULUS + 5).value(), 5);
        // Exactly half the space apart: the later one is behind (the window is [0, 2^23)).
        assert_eq!(Psn::new(Psn::HALF).diff(Psn::new(0)), -(Psn::HALF as i32));
    }

    proptest! {
        #[test]
        fn add_then_diff_gives_back_the_distance(a in 0u32..Psn::MODULUS, n in 0u32..Psn::HALF) {
            let p = Psn::new(a);
            let q = p + n;
            prop_assert_eq!(q.diff(p), n as i32);
            prop_assert_eq!(p.diff(q), -(n as i32));
            prop_assert!(q.ge(p) && p.le(q));
            prop_assert_eq!(q.gt(p), n > 0);
            prop_assert!(q.value() < Psn::MODULUS);
        }

        #[test]
        fn comparison_is_antisymmetric(a in 0u32..Psn::MODULUS, b in 0u32..Psn::MODULUS) {
            let (p, q) = (Psn::new(a), Psn::new(b));
            let d = p.diff(q);
            prop_assert!((-(Psn::HALF as i32)..Psn::HALF as i32).contains(&d));
            if d != -(Psn::HALF as i32) {
                prop_assert_eq!(q.diff(p), -d);
                prop_assert_eq!(p.lt(q), q.gt(p));
            }
            prop_assert_eq!(q + d as u32, p);
        }
    }
}
