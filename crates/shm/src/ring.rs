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
