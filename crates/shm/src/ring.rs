//! A payload ring mapped twice back to back: bytes at stream position `pos` live at
//! `pos & (size - 1)`, and any run of up to `size` bytes is contiguous in memory.

use std::marker::PhantomData;
use std::ptr::NonNull;

/// A view of one payload ring in a mapped region.
#[derive(Clone, Copy)]
pub struct Ring<'a> {
    ptr: NonNull<u8>,
    size: u32,
    _region: PhantomData<&'a crate::Region>,
}

impl<'a> Ring<'a> {
    pub(crate) fn new(ptr: NonNull<u8>, size: u32) -> Self {
        Ring {
            ptr,
            size,
            _region: PhantomData,
        }
    }

    /// The ring's size in bytes.
    pub fn size(&self) -> u32 {
        self.size
    }

    fn at(&self, pos: u64, len: usize) -> *mut u8 {
        assert!(len <= self.size as usize, "a run longer than the ring");
        let off = (pos & (self.size as u64 - 1)) as usize;
        // SAFETY: off + len <= 2 * size, and both copies of the ring are mapped.
        unsafe { self.ptr.as_ptr().add(off) }
    }

    /// Copies `data` into the ring at stream position `pos` (at most the ring's size).
    pub fn write(&self, pos: u64, data: &[u8]) {
        let dst = self.at(pos, data.len());
        // SAFETY: dst..dst+len is mapped (see `at`) and cannot overlap `data`, which is
        // private memory of this process.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) }
    }

    /// Copies `out.len()` bytes from stream position `pos` (at most the ring's size).
    pub fn read(&self, pos: u64, out: &mut [u8]) {
        let src = self.at(pos, out.len());
        // SAFETY: as in write.
        unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) }
    }

    /// Lends the `len` bytes at `pos` as one slice for the duration of `f`.
    ///
    /// The other process may write those bytes meanwhile; the slice then shows whatever is
    /// there. Nothing that reads it may rely on the bytes being stable (copying them, as the
    /// engine does into its send buffer, is fine).
    pub fn with_slice<R>(&self, pos: u64, len: usize, f: impl FnOnce(&[u8]) -> R) -> R {
        let p = self.at(pos, len);
        // SAFETY: mapped for 'a (see `at`); the slice does not escape `f`. Concurrent writes
        // by the peer process can change the bytes, which for plain bytes only yields stale
        // contents; no Rust code writes through this view while the slice lives.
        f(unsafe { std::slice::from_raw_parts(p, len) })
    }

    /// The `len` bytes at `pos` as a slice that lives as long as the region.
    ///
    /// # Safety
    /// The caller must ensure no other Rust reference writes these bytes while the slice
    /// lives, and must accept that the peer process may (see [`Ring::with_slice`]).
    pub unsafe fn slice(&self, pos: u64, len: usize) -> &'a [u8] {
        // SAFETY: the caller's contract; mapped for 'a.
        unsafe { std::slice::from_raw_parts(self.at(pos, len), len) }
    }

    /// The `len` bytes at `pos` as a writable slice that lives as long as the region.
    ///
    /// # Safety
    /// The caller must ensure it holds the only Rust reference to these bytes while the
    /// slice lives (the zero-copy TX API hands out the free space of the caller's own ring).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, pos: u64, len: usize) -> &'a mut [u8] {
        // SAFETY: the caller's contract; mapped for 'a.
        unsafe { std::slice::from_raw_parts_mut(self.at(pos, len), len) }
    }
}

/// The ring's arithmetic over heap memory, which Miri can check (it cannot map a memfd): a
/// buffer of twice the ring's size stands for the two mappings. It is not mirrored, so each
/// run is read back with the chunking it was written with, which is all these tests need:
/// that every access stays inside the 2 * size bytes and lands where the position says.
#[cfg(test)]
mod heap_tests {
    use super::*;

    const SIZE: u32 = 64;

    fn heap_ring(buf: &mut [u8]) -> Ring<'_> {
        assert_eq!(buf.len(), 2 * SIZE as usize);
        Ring::new(
            NonNull::new(buf.as_mut_ptr()).expect("a Vec is not null"),
            SIZE,
        )
    }

    #[test]
    fn runs_up_to_the_ring_size_stay_inside_both_copies() {
        let mut buf = vec![0u8; 2 * SIZE as usize];
        let ring = heap_ring(&mut buf);
        // Positions around every lap boundary and far beyond u32, runs of 0 to SIZE bytes.
        let mut pos = u64::from(u32::MAX) - 3 * u64::from(SIZE);
        for len in (0..=SIZE as usize).chain([SIZE as usize; 3]) {
            let data: Vec<u8> = (0..len).map(|i| (pos as usize + i) as u8 ^ 0x5a).collect();
            ring.write(pos, &data);
            let mut out = vec![0u8; len];
            ring.read(pos, &mut out);
            assert_eq!(out, data, "run of {len} at {pos}");
            assert_eq!(ring.with_slice(pos, len, |s| s.to_vec()), data);
            pos += len as u64 + 1;
        }
        assert_eq!(ring.size(), SIZE);
    }

    #[test]
    fn the_lent_slices_alias_the_bytes_written() {
        let mut buf = vec![0u8; 2 * SIZE as usize];
        let ring = heap_ring(&mut buf);
        let pos = 3 * u64::from(SIZE) - 5;
        // SAFETY: the only reference to these bytes while it lives.
        let w = unsafe { ring.slice_mut(pos, 10) };
        w.copy_from_slice(b"0123456789");
        // SAFETY: nothing writes the bytes while the slice lives.
        let r = unsafe { ring.slice(pos, 10) };
        assert_eq!(r, b"0123456789");
        let mut out = [0u8; 10];
        ring.read(pos, &mut out);
        assert_eq!(&out, b"0123456789");
    }

    #[test]
    #[should_panic(expected = "a run longer than the ring")]
    fn a_run_longer_than_the_ring_is_refused() {
        let mut buf = vec![0u8; 2 * SIZE as usize];
        heap_ring(&mut buf).write(1, &[0u8; SIZE as usize + 1]);
    }
}
