//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! [`sum`] returns an *unfolded* partial sum that can be added to other
//! partial sums (for example [`pseudo_header_v4`]) before [`fold`]ing. Partial
//! sums returned by this module are below 2^20, so tens of thousands of them can
//! be added in a `u32` without overflow.

use std::net::Ipv4Addr;

/// Bytes summed per inner block before the 64-bit accumulator is reduced.
const BLOCK: usize = 1 << 20;

/// One's-complement sum of the 16-bit big-endian words of `data` (an odd
/// trailing byte is padded with zero), reduced to at most 16 bits but not inverted.
#[inline]
pub fn sum(data: &[u8]) -> u32 {
    if data.len() <= BLOCK {
        return swap16(reduce(sum_block(data)));
    }
    let mut total: u64 = 0;
    for block in data.chunks(BLOCK) {
        total += u64::from(swap16(reduce(sum_block(block))));
    }
    reduce(total)
}

/// Sums `data` (at most [`BLOCK`] bytes) as little-endian words into a u64 that
/// [`reduce`] folds to the 16-bit sum.
///
/// The one's-complement sum is byte-order independent (RFC 1071 2.(B)): summing
/// the words byte-swapped gives the byte-swapped sum, so the caller swaps the
/// reduced result once ([`swap16`]) instead of swapping every word. The main loop
/// adds 64-bit words into two u128 accumulators (an add and an add-with-carry per
/// word; at most 2^17 words per block, so neither can overflow); summing wider
/// words is equivalent modulo 0xFFFF, which divides 2^64 - 1. The tail is summed
/// as 32-, 16- and 8-bit pieces keeping each byte's position within its 16-bit word.
#[inline]
fn sum_block(data: &[u8]) -> u64 {
    let (mut a, mut b) = (0u128, 0u128);
    let mut chunks = data.chunks_exact(16);
    for c in &mut chunks {
        if let Some((lo, hi)) = c.split_first_chunk::<8>() {
            if let Some(hi) = hi.first_chunk::<8>() {
                a += u128::from(u64::from_le_bytes(*lo));
                b += u128::from(u64::from_le_bytes(*hi));
            }
        }
    }
    let mut rest = chunks.remainder();
    let mut tail: u64 = 0;
    if let Some((w, r)) = rest.split_first_chunk::<8>() {
        tail += u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
        tail += u64::from(u32::from_le_bytes([w[4], w[5], w[6], w[7]]));
        rest = r;
    }
    if let Some((w, r)) = rest.split_first_chunk::<4>() {
        tail += u64::from(u32::from_le_bytes(*w));
        rest = r;
    }
    if let Some((w, r)) = rest.split_first_chunk::<2>() {
        tail += u64::from(u16::from_le_bytes(*w));
        rest = r;
    }
    if let Some(&x) = rest.first() {
        // The odd trailing byte is the high byte of a big-endian word, so the low
        // byte of a little-endian one.
        tail += u64::from(x);
    }
    // a + b < 2^82: fold the high part in with end-around carry, then 64 -> 32 bits.
    let t = a + b;
    let (s, carry) = (t as u64).overflowing_add((t >> 64) as u64);
    let s = s + u64::from(carry);
    (s & 0xFFFF_FFFF) + (s >> 32) + tail
}

/// Swaps the bytes of a 16-bit one's-complement sum (held in a u32 below 2^16).
#[inline(always)]
fn swap16(x: u32) -> u32 {
    u32::from((x as u16).swap_bytes())
}

/// Reduces a 64-bit accumulator to a 16-bit one's-complement sum (as u32).
#[inline(always)]
fn reduce(mut acc: u64) -> u32 {
    // Fold 64 -> 33 -> 32 bits, then 32 -> 17 -> 16 bits (end-around carry).
    acc = (acc & 0xFFFF_FFFF) + (acc >> 32);
    acc = (acc & 0xFFFF_FFFF) + (acc >> 32);
    acc = (acc & 0xFFFF) + (acc >> 16);
    acc = (acc & 0xFFFF) + (acc >> 16);
    acc = (acc & 0xFFFF) + (acc >> 16);
    acc as u32
}

/// Folds the carries of a partial sum into a 16-bit one's-complement sum (not inverted).
#[inline(always)]
pub fn fold(sum: u32) -> u16 {
    let s = (sum & 0xFFFF) + (sum >> 16);
    let s = (s & 0xFFFF) + (s >> 16);
    s as u16
}

/// The Internet checksum of `data`: the value to store in a checksum field.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(data))
}

/// Unfolded sum of the IPv4 pseudo header (source, destination, protocol, length).
#[inline(always)]
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, length: u16) -> u32 {
    pseudo_header_v4_u32(src, dst, protocol, u32::from(length))
}

/// Like [`pseudo_header_v4`] but with a 32-bit length, summed as two words.
#[inline(always)]
pub(crate) fn pseudo_header_v4_u32(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, length: u32) -> u32 {
    let s = src.to_bits();
    let d = dst.to_bits();
    (s >> 16)
        + (s & 0xFFFF)
        + (d >> 16)
        + (d & 0xFFFF)
        + u32::from(protocol)
        + (length >> 16)
        + (length & 0xFFFF)
}

/// Incrementally updates a checksum after a 16-bit word changed (RFC 1624 eqn. 3).
#[inline]
pub fn update(old_checksum: u16, old_word: u16, new_word: u16) -> u16 {
    let s = u32::from(!old_checksum) + u32::from(!old_word) + u32::from(new_word);
    !fold(s)
}

/// Incrementally updates a checksum after a 32-bit field (two words) changed.
#[inline]
pub fn update_u32(old_checksum: u16, old: u32, new: u32) -> u16 {
    let s =
        u32::from(!old_checksum) + (!old >> 16) + (!old & 0xFFFF) + (new >> 16) + (new & 0xFFFF);
    !fold(s)
}

/// Incrementally updates a checksum after the bytes `old` were replaced by `new` (RFC 1624
/// eqn. 3 over every 16-bit word: HC' = ~(~HC + sum ~m + sum m')): a header rewritten in
/// place (an L4 splice's ports, sequence numbers and options) without reading its payload.
/// Both slices are the same length and start at an even offset of the checksummed data;
/// an odd trailing byte is the high byte of its word. Unequal lengths leave `old_checksum`.
#[inline]
pub fn update_bytes(old_checksum: u16, old: &[u8], new: &[u8]) -> u16 {
    if old.len() != new.len() {
        return old_checksum;
    }
    // One's-complement sums of the old words' complements and the new words; the
    // complement of a sum is the sum of complements in one's-complement arithmetic.
    let s = u32::from(!old_checksum) + u32::from(!fold(sum(old))) + u32::from(fold(sum(new)));
    !fold(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Straightforward reference implementation of RFC 1071.
    fn naive(data: &[u8]) -> u16 {
        let mut s: u64 = 0;
        for (i, b) in data.iter().enumerate() {
            s += if i % 2 == 0 {
                u64::from(*b) << 8
            } else {
                u64::from(*b)
            };
        }
        while s >> 16 != 0 {
            s = (s & 0xFFFF) + (s >> 16);
        }
        s as u16
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&data)), 0xddf2);
        assert_eq!(checksum(&data), 0x220d);
        // Odd length: trailing byte padded with zero.
        assert_eq!(fold(sum(&[0x01])), 0x0100);
        assert_eq!(fold(sum(&[])), 0);
        assert_eq!(checksum(&[]), 0xFFFF);
    }

    #[test]
    fn known_ipv4_header() {
        // Classic example header; stored checksum is b861.
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0xb861);
        h[10] = 0xb8;
        h[11] = 0x61;
        assert_eq!(checksum(&h), 0);
        assert_eq!(fold(sum(&h)), 0xFFFF);
    }

    #[test]
    fn fold_and_pseudo() {
        assert_eq!(fold(0x0001_FFFF), 0x0001);
        assert_eq!(fold(0xFFFF_FFFF), 0xFFFF);
        assert_eq!(fold(0x0002_FFFE), 0x0001);
        // Pseudo header of a loopback TCP SYN: Linux leaves this folded sum in
        // the checksum field under CHECKSUM_PARTIAL offload.
        let lo = Ipv4Addr::new(127, 0, 0, 1);
        assert_eq!(fold(pseudo_header_v4(lo, lo, 6, 40)), 0xfe30);
    }

    #[test]
    fn every_length_and_carry_matches_naive() {
        // All-ones data makes every 64-bit addition carry; the lengths cover every tail.
        for len in 0..=600 {
            let ones = vec![0xFFu8; len];
            assert_eq!(fold(sum(&ones)), naive(&ones), "ones, len {len}");
            let mixed: Vec<u8> = (0..len).map(|i| (i * 197 + 89) as u8 | 0x80).collect();
            assert_eq!(fold(sum(&mixed)), naive(&mixed), "mixed, len {len}");
        }
    }

    #[test]
    fn large_input_matches_naive() {
        let data: Vec<u8> = (0..(3 * BLOCK + 13)).map(|i| (i * 131 + 7) as u8).collect();
        assert_eq!(fold(sum(&data)), naive(&data));
    }

    proptest! {
        #[test]
        fn sum_matches_naive(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            prop_assert_eq!(fold(sum(&data)), naive(&data));
            prop_assert!(sum(&data) <= 0xFFFF);
        }

        #[test]
        fn sums_concatenate(a in proptest::collection::vec(any::<u16>(), 0..40),
                            b in proptest::collection::vec(any::<u8>(), 0..80)) {
            // Partial sums of word-aligned pieces add up to the sum of the whole.
            let mut all: Vec<u8> = a.iter().flat_map(|w| w.to_be_bytes()).collect();
            let first = sum(&all);
            all.extend_from_slice(&b);
            prop_assert_eq!(fold(first + sum(&b)), fold(sum(&all)));
        }

        #[test]
        fn incremental_update_matches_recompute(
            words in proptest::collection::vec(any::<u16>(), 3..40),
            nonzero in 1u16..,
            idx in any::<prop::sample::Index>(),
            new_word in any::<u16>(),
        ) {
            // Word 0 is the checksum field, word 1 is forced nonzero (as in any
            // real header), and a word at index >= 2 changes.
            let mut w = words;
            w[0] = 0;
            w[1] = nonzero;
            let bytes = |w: &[u16]| -> Vec<u8> { w.iter().flat_map(|x| x.to_be_bytes()).collect() };
            let hc = checksum(&bytes(&w));
            let i = 2 + idx.index(w.len() - 2);
            let old = w[i];
            w[i] = new_word;
            prop_assert_eq!(update(hc, old, new_word), checksum(&bytes(&w)));
        }

        #[test]
        fn incremental_update_of_a_byte_range_matches_recompute(
            data in proptest::collection::vec(any::<u8>(), 24..200),
            start_word in 1usize..10,
            new in proptest::collection::vec(any::<u8>(), 1..12),
        ) {
            // Bytes 0..2 are the checksum field, zero while summing; a range at an even
            // offset is rewritten (as a splice rewrites ports, sequence numbers, options),
            // including values that make the sum wrap to 0x0000 or 0xFFFF.
            let mut d = data;
            d[0] = 0;
            d[1] = 0;
            let at = (2 * start_word).min(d.len() - 1) & !1;
            let end = (at + new.len()).min(d.len());
            let hc = checksum(&d);
            let old = d[at..end].to_vec();
            d[at..end].copy_from_slice(&new[..end - at]);
            let want = checksum(&d);
            let got = update_bytes(hc, &old, &d[at..end]);
            // 0x0000 and 0xFFFF are the same one's-complement value; a receiver's check
            // (the sum over everything folding to 0xFFFF) accepts both.
            d[0..2].copy_from_slice(&got.to_be_bytes());
            prop_assert_eq!(fold(sum(&d)), 0xFFFF, "want {:04x} got {:04x}", want, got);
        }

        #[test]
        fn incremental_update_u32_matches_recompute(
            words in proptest::collection::vec(any::<u16>(), 4..40),
            nonzero in 1u16..,
            idx in any::<prop::sample::Index>(),
            new in any::<u32>(),
        ) {
            let mut w = words;
            w[0] = 0;
            w[1] = nonzero;
            let bytes = |w: &[u16]| -> Vec<u8> { w.iter().flat_map(|x| x.to_be_bytes()).collect() };
            let hc = checksum(&bytes(&w));
            let i = 2 + idx.index(w.len() - 3);
            let old = (u32::from(w[i]) << 16) | u32::from(w[i + 1]);
            w[i] = (new >> 16) as u16;
            w[i + 1] = new as u16;
            prop_assert_eq!(update_u32(hc, old, new), checksum(&bytes(&w)));
        }
    }
}
