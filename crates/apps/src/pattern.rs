//! The deterministic pseudo-random byte stream that sources send and sinks check.

/// Fills `buf` with the deterministic pseudo-random stream `seed` at byte `offset`.
pub fn pattern_fill(seed: u64, offset: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        let x = (offset + i as u64) ^ seed.rotate_left(17);
        let mut z = x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z ^= z >> 29;
        *b = (z >> 24) as u8;
    }
}
