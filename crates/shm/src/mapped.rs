//! A memory region's file (docs/verbs.md "Memory regions"): the engine maps `len` bytes of
//! an application's memfd, sealed against shrinking so that the mapping can never fault
//! (SIGBUS) under the engine, and copies into and out of it with bounds checks.

use std::num::NonZeroUsize;
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use nix::sys::stat::fstat;

use crate::error::{sys, ShmError};
use crate::layout::PAGE;

/// `len` bytes of an application's memfd from `offset`, mapped shared into the engine.
pub struct MappedFile {
    /// The mapping's start (page-aligned, at or before the first byte).
    base: NonNull<u8>,
    /// Bytes mapped from `base`.
    map_len: usize,
    /// Where the region's first byte lies in the mapping.
    skew: usize,
    /// The region's length.
    len: usize,
    _fd: OwnedFd,
}

// SAFETY: the mapping is plain shared memory owned by this value; copies in and out are
// plain byte copies, as for Region.
unsafe impl Send for MappedFile {}
// SAFETY: as above; &self methods only copy bytes.
unsafe impl Sync for MappedFile {}

impl MappedFile {
    /// Maps `len` bytes at `offset` of `fd`. Refuses (`EINVAL`) a file not sealed with
    /// F_SEAL_SHRINK, one shorter than `offset + len`, and a zero length.
    pub fn map(fd: OwnedFd, offset: u64, len: u64) -> Result<MappedFile, ShmError> {
        let einval = |what| ShmError::Sys {
            what,
            err: nix::errno::Errno::EINVAL,
        };
        let seals = fcntl(&fd, FcntlArg::F_GET_SEALS).map_err(sys("reading the file's seals"))?;
        if !SealFlag::from_bits_truncate(seals).contains(SealFlag::F_SEAL_SHRINK) {
            return Err(einval(
                "the memory region's file is not sealed against shrinking",
            ));
        }
        let size = fstat(fd.as_fd()).map_err(sys("fstat"))?.st_size as u64;
        let end = offset
            .checked_add(len)
            .ok_or(einval("offset + length overflows"))?;
        if len == 0 || end > size {
            return Err(einval("the memory region passes the end of its file"));
        }
        let page = PAGE as u64;
        let start = offset / page * page;
        let skew = (offset - start) as usize;
        let map_len = usize::try_from(end - start).map_err(|_| einval("length"))?;
        let nz = NonZeroUsize::new(map_len).ok_or(einval("length"))?;
        // SAFETY: a new shared mapping chosen by the kernel, replacing nothing; the file
        // cannot shrink (sealed), so every page of it stays backed while mapped.
        let base = unsafe {
            mmap(
                None,
                nz,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                &fd,
                start as i64,
            )
        }
        .map_err(sys("mapping a memory region"))?
        .cast::<u8>();
        Ok(MappedFile {
            base,
            map_len,
            skew,
            len: len as usize,
            _fd: fd,
        })
    }

    /// The region's length.
    pub fn len(&self) -> u64 {
        self.len as u64
    }

    /// Whether it is empty (never: a zero length is refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The byte range `offset .. offset + n` inside the region, if it is.
    fn range(&self, offset: u64, n: usize) -> Option<usize> {
        let off = usize::try_from(offset).ok()?;
        (off.checked_add(n)? <= self.len).then_some(self.skew + off)
    }

    /// Copies `out.len()` bytes from `offset`; false (nothing copied) if out of range.
    pub fn read_at(&self, offset: u64, out: &mut [u8]) -> bool {
        let Some(at) = self.range(offset, out.len()) else {
            return false;
        };
        // SAFETY: `at + out.len() <= skew + len <= map_len`, inside our mapping. The
        // application may write these bytes concurrently; for plain bytes that makes the
        // copy's contents stale, never unsound (as Ring and Region copies).
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.as_ptr().add(at), out.as_mut_ptr(), out.len())
        };
        true
    }

    /// Copies `data` to `offset`; false (nothing copied) if out of range.
    pub fn write_at(&self, offset: u64, data: &[u8]) -> bool {
        let Some(at) = self.range(offset, data.len()) else {
            return false;
        };
        let Some((&last, body)) = data.split_last() else {
            return true;
        };
        // The last byte is published with release order after the rest, so a reader that
        // polls it with acquire (the inline QP's valid byte, docs/verbs.md) sees the whole
        // write on any memory model, not only on x86-64's ordered stores.
        // SAFETY: `at..at + data.len()` is inside our mapping (checked by `range`, as in
        // read_at); the last byte is a valid, aligned u8 location that other processes only
        // access through atomics or plain reads.
        unsafe {
            let dst = self.base.as_ptr().add(at);
            std::ptr::copy_nonoverlapping(body.as_ptr(), dst, body.len());
            std::sync::atomic::AtomicU8::from_ptr(dst.add(body.len()))
                .store(last, std::sync::atomic::Ordering::Release);
        };
        true
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // SAFETY: base/map_len are exactly our mapping; nothing borrows into it past &self.
        let _ = unsafe { munmap(self.base.cast(), self.map_len) };
    }
}

impl std::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedFile")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::memfd::{memfd_create, MFdFlags};
    use nix::unistd::ftruncate;

    fn memfd(size: i64, seals: SealFlag) -> OwnedFd {
        let fd = memfd_create(
            c"mr-test",
            MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
        )
        .unwrap();
        ftruncate(&fd, size).unwrap();
        if !seals.is_empty() {
            fcntl(&fd, FcntlArg::F_ADD_SEALS(seals)).unwrap();
        }
        fd
    }

    fn errno(r: Result<MappedFile, ShmError>) -> Option<nix::errno::Errno> {
        match r {
            Err(ShmError::Sys { err, .. }) => Some(err),
            _ => None,
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "maps a memfd, which Miri cannot")]
    fn an_unsealed_or_short_file_is_refused() {
        let fd = memfd(8192, SealFlag::empty());
        assert_eq!(
            errno(MappedFile::map(fd, 0, 4096)),
            Some(nix::errno::Errno::EINVAL)
        );
        let fd = memfd(8192, SealFlag::F_SEAL_GROW);
        assert_eq!(
            errno(MappedFile::map(fd, 0, 4096)),
            Some(nix::errno::Errno::EINVAL)
        );
        let fd = memfd(8192, SealFlag::F_SEAL_SHRINK);
        assert_eq!(
            errno(MappedFile::map(fd, 4096, 4097)),
            Some(nix::errno::Errno::EINVAL)
        );
        let fd = memfd(8192, SealFlag::F_SEAL_SHRINK);
        assert_eq!(
            errno(MappedFile::map(fd, 0, 0)),
            Some(nix::errno::Errno::EINVAL)
        );
        let fd = memfd(8192, SealFlag::F_SEAL_SHRINK);
        assert_eq!(
            errno(MappedFile::map(fd, u64::MAX, 2)),
            Some(nix::errno::Errno::EINVAL)
        );
        let fd = memfd(8192, SealFlag::F_SEAL_SHRINK);
        assert_eq!(MappedFile::map(fd, 4096, 4096).unwrap().len(), 4096);
    }

    #[test]
    #[cfg_attr(miri, ignore = "maps a memfd, which Miri cannot")]
    fn reads_and_writes_are_bounded_by_the_region() {
        let fd = memfd(3 * 4096, SealFlag::F_SEAL_SHRINK);
        // An offset inside a page: the region starts 100 bytes into the second page.
        let m = MappedFile::map(fd, 4096 + 100, 1000).unwrap();
        assert!(m.write_at(0, b"first"));
        assert!(m.write_at(995, b"last!"));
        assert!(!m.write_at(996, b"last!"), "one past the end");
        assert!(!m.write_at(u64::MAX, b"x"));
        let mut b = [0u8; 5];
        assert!(m.read_at(995, &mut b));
        assert_eq!(&b, b"last!");
        assert!(!m.read_at(1000, &mut [0u8; 1]));
        assert!(
            m.read_at(1000, &mut []),
            "an empty copy at the end is in range"
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "maps a memfd, which Miri cannot")]
    fn a_write_is_seen_through_another_mapping_of_the_same_file() {
        let fd = memfd(2 * 4096, SealFlag::F_SEAL_SHRINK);
        let other = fd.try_clone().unwrap();
        let a = MappedFile::map(fd, 4096 + 8, 64).unwrap();
        let b = MappedFile::map(other, 4096, 4096).unwrap();
        assert!(a.write_at(3, b"through"));
        let mut got = [0u8; 7];
        assert!(b.read_at(8 + 3, &mut got));
        assert_eq!(&got, b"through");
        // And the other way.
        assert!(b.write_at(8, b"back"));
        let mut got = [0u8; 4];
        assert!(a.read_at(0, &mut got));
        assert_eq!(&got, b"back");
    }
}
