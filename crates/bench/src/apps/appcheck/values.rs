//! The deterministic values a check stores and expects back.

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// `count` values of random length 1..=`max_len` and random (binary) bytes, from `seed`.
pub fn values(seed: u64, count: usize, max_len: usize) -> Vec<Vec<u8>> {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            let mut v = vec![0u8; rng.gen_range(1..=max_len.max(1))];
            rng.fill_bytes(&mut v);
            v
        })
        .collect()
}

/// Describes how `got` differs from `want`.
pub fn difference(want: &[u8], got: &[u8]) -> String {
    match want.iter().zip(got).position(|(a, b)| a != b) {
        Some(at) => format!(
            "{} bytes expected, {} came back, first difference at byte {at}",
            want.len(),
            got.len()
        ),
        None => format!("{} bytes expected, {} came back", want.len(), got.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_seeded_and_within_bounds() {
        let a = values(7, 500, 4096);
        assert_eq!(a, values(7, 500, 4096));
        assert_ne!(a, values(8, 500, 4096));
        assert!(a.iter().all(|v| (1..=4096).contains(&v.len())));
    }

    #[test]
    fn difference_names_the_first_differing_byte() {
        assert!(difference(b"abcd", b"abxd").contains("byte 2"));
        assert!(difference(b"abcd", b"ab").contains("2 came back"));
    }
}
