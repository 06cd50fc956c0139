//! Little-endian fields of queue entries, read and written in one place (the socket, MTP
//! and verbs entries share it). Callers index within an entry of fixed size, so a field
//! past its end is a bug in the layout, caught by the entries' tests.

/// Writes `bytes` at `at`.
pub(crate) fn put(e: &mut [u8], at: usize, bytes: &[u8]) {
    e[at..at + bytes.len()].copy_from_slice(bytes);
}

/// The little-endian u16 at `at`.
pub(crate) fn u16_at(e: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([e[at], e[at + 1]])
}

/// The little-endian u32 at `at`.
pub(crate) fn u32_at(e: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([e[at], e[at + 1], e[at + 2], e[at + 3]])
}

/// The little-endian u64 at `at`.
pub(crate) fn u64_at(e: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&e[at..at + 8]);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_back_as_written() {
        let mut e = [0u8; 16];
        put(&mut e, 1, &0x1234u16.to_le_bytes());
        put(&mut e, 3, &0xdead_beefu32.to_le_bytes());
        put(&mut e, 7, &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(u16_at(&e, 1), 0x1234);
        assert_eq!(u32_at(&e, 3), 0xdead_beef);
        assert_eq!(u64_at(&e, 7), 0x0102_0304_0506_0708);
        assert_eq!(e[1], 0x34, "little-endian");
    }
}
