//! Making an application's pages shared with the engine (docs/verbs.md "Memory regions"):
//! a page-aligned span is copied into a new sealed memfd that is then mapped over the same
//! addresses (`MAP_FIXED | MAP_SHARED`), so the program's pointers stay valid and now name
//! pages the engine can map too.
//!
//! A process-wide registry remembers the spans made shared: a span inside one reuses its
//! memfd; one overlapping a registered span only in part is refused. Spans stay shared after
//! their regions are deregistered; a span whose addresses no longer map its memfd (the
//! program unmapped or freed it) is forgotten when met.
//!
//! Stores by other threads into a span while it is being made shared may be lost (the copy
//! is taken before the new mapping replaces the old pages), as with fork-based schemes:
//! register memory before handing it to other threads.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use crate::lock::lock;
use crate::verbs::error::VerbsError;

/// A span of the address space backed by a memfd from its offset 0.
#[derive(Debug)]
struct Span {
    start: usize,
    end: usize,
    memfd: Arc<OwnedFd>,
    ino: u64,
}

/// Every span made shared (by [`share`] or [`alloc`]) that is still mapped.
static SPANS: Mutex<Vec<Span>> = Mutex::new(Vec::new());

/// Where a shared address lies: the memfd and the offset of the address in it.
#[derive(Clone, Debug)]
pub(crate) struct Shared {
    /// The memfd backing the span.
    pub(crate) memfd: Arc<OwnedFd>,
    /// The registered address's offset in the memfd.
    pub(crate) file_offset: u64,
}

/// The page size.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// A memfd of `len` bytes sealed against shrinking and growing (the engine maps it: a file
/// that shrank under its mapping would fault it).
pub(crate) fn sealed_memfd(len: usize) -> Result<(OwnedFd, u64), VerbsError> {
    let name: &CStr = c"sluice-mr";
    // SAFETY: name is a NUL-terminated string that outlives the call.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(VerbsError::Os(errno()));
    }
    // SAFETY: memfd_create returned a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain system calls on a descriptor we own.
    let ok = unsafe {
        libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) == 0
            && libc::fcntl(
                fd.as_raw_fd(),
                libc::F_ADD_SEALS,
                libc::F_SEAL_SHRINK | libc::F_SEAL_GROW,
            ) == 0
    };
    if !ok {
        return Err(VerbsError::Os(errno()));
    }
    let ino = inode(&fd)?;
    Ok((fd, ino))
}

fn inode(fd: &OwnedFd) -> Result<u64, VerbsError> {
    // SAFETY: fstat writes one struct stat into st, which lives across the call.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; fd is open.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(VerbsError::Os(errno()));
    }
    Ok(st.st_ino)
}

/// The page-aligned span around `addr .. addr + len`.
fn pages(addr: usize, len: usize) -> Result<(usize, usize), VerbsError> {
    if len == 0 {
        return Err(VerbsError::Invalid("length 0"));
    }
    let p = page_size();
    let end = addr
        .checked_add(len)
        .and_then(|e| e.checked_add(p - 1))
        .ok_or(VerbsError::Invalid("address range"))?;
    Ok((addr & !(p - 1), end & !(p - 1)))
}

/// Whether `start .. end` is still mapped from `span`'s memfd at the matching offsets
/// (/proc/self/maps: the program may have unmapped it and reused the addresses).
fn still_mapped(span: &Span) -> bool {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return true;
    };
    let mut covered = span.start;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(_perms), Some(off), Some(_dev), Some(ino)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(a), Ok(b), Ok(off), Ok(ino)) = (
            usize::from_str_radix(a, 16),
            usize::from_str_radix(b, 16),
            u64::from_str_radix(off, 16),
            ino.parse::<u64>(),
        ) else {
            continue;
        };
        if a <= covered && covered < b {
            let expect = (covered - span.start) as u64;
            if ino != span.ino || off + (covered - a) as u64 != expect {
                return false;
            }
            covered = b.min(span.end);
            if covered == span.end {
                return true;
            }
        }
    }
    false
}

/// Makes `addr .. addr + len` shared: reuses the span that holds it, or remaps its pages
/// onto a new memfd.
///
/// # Safety
/// `addr .. addr + len` is memory of this process that the caller may read and write, and
/// whose pages may be replaced by a shared mapping of the same content (read-write).
pub(crate) unsafe fn share(addr: usize, len: usize) -> Result<Shared, VerbsError> {
    let (start, end) = pages(addr, len)?;
    let mut spans = lock(&SPANS);
    spans.retain(|s| !(s.start < end && start < s.end) || still_mapped(s));
    if let Some(s) = spans.iter().find(|s| s.start <= start && end <= s.end) {
        return Ok(Shared {
            memfd: s.memfd.clone(),
            file_offset: (addr - s.start) as u64,
        });
    }
    if spans.iter().any(|s| s.start < end && start < s.end) {
        return Err(VerbsError::PartialOverlap);
    }
    let n = end - start;
    let (fd, ino) = sealed_memfd(n)?;
    let mut done = 0;
    while done < n {
        // SAFETY: the caller vouches that start..end (the pages around its memory) may be
        // read; pwrite reads n - done bytes from there.
        let w = unsafe {
            libc::pwrite(
                fd.as_raw_fd(),
                (start + done) as *const libc::c_void,
                n - done,
                done as libc::off_t,
            )
        };
        if w < 0 {
            let e = errno();
            if e == libc::EINTR {
                continue;
            }
            return Err(VerbsError::Os(e));
        }
        done += w as usize;
    }
    // SAFETY: replaces the caller's pages start..end (which it vouched for) with the memfd
    // holding the same bytes; MAP_FIXED at a page-aligned address of a mapped span.
    let p = unsafe {
        libc::mmap(
            start as *mut libc::c_void,
            n,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(VerbsError::Os(errno()));
    }
    let memfd = Arc::new(fd);
    spans.push(Span {
        start,
        end,
        memfd: memfd.clone(),
        ino,
    });
    Ok(Shared {
        memfd,
        file_offset: (addr - start) as u64,
    })
}

/// New shared memory of at least `len` bytes: `(address, mapped length, memfd)`. Registered
/// so that spans inside it reuse its memfd; [`free`] unmaps it.
pub(crate) fn alloc(len: usize) -> Result<(usize, usize, Arc<OwnedFd>), VerbsError> {
    let (_, n) = pages(0, len)?;
    let (fd, ino) = sealed_memfd(n)?;
    // SAFETY: a new shared mapping of the whole memfd where the kernel chooses.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            n,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(VerbsError::Os(errno()));
    }
    let memfd = Arc::new(fd);
    lock(&SPANS).push(Span {
        start: p as usize,
        end: p as usize + n,
        memfd: memfd.clone(),
        ino,
    });
    Ok((p as usize, n, memfd))
}

/// Unmaps memory from [`alloc`] and forgets its span.
pub(crate) fn free(addr: usize, len: usize) {
    let mut spans = lock(&SPANS);
    spans.retain(|s| s.start != addr);
    // SAFETY: addr..addr+len is a mapping alloc made, unmapped once (its region owns it).
    unsafe { libc::munmap(addr as *mut libc::c_void, len) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A private anonymous mapping, as malloc gives for large blocks.
    fn anonymous(len: usize) -> usize {
        // SAFETY: a new private mapping where the kernel chooses.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p as usize
    }

    /// A second mapping of the memfd, as the engine makes.
    fn engine_view(memfd: &OwnedFd, len: usize) -> *mut u8 {
        // SAFETY: a new shared mapping of the memfd where the kernel chooses.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                memfd.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p.cast()
    }

    #[test]
    fn remapping_keeps_the_bytes_and_shares_the_pages() {
        let ps = page_size();
        let base = anonymous(4 * ps);
        let buf = base + 100;
        let len = 2 * ps;
        let before: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        // SAFETY: buf..buf+len lies in the mapping made above.
        unsafe { std::ptr::copy_nonoverlapping(before.as_ptr(), buf as *mut u8, len) };
        // SAFETY: the mapping is ours and nothing else uses it.
        let s = unsafe { share(buf, len) }.unwrap();
        assert_eq!(s.file_offset, 100);
        // SAFETY: still our mapping, now shared.
        let now = unsafe { std::slice::from_raw_parts(buf as *const u8, len) };
        assert!(now == &before[..], "the content changed");
        let view = engine_view(&s.memfd, 3 * ps);
        // SAFETY: offset 100 + 5 is inside the 3-page view.
        unsafe { *view.add(100 + 5) = 0xab };
        // SAFETY: buf + 5 is in our mapping.
        assert_eq!(unsafe { *((buf + 5) as *const u8) }, 0xab);
        // The other way too.
        // SAFETY: as above.
        unsafe { *((buf + 6) as *mut u8) = 0xcd };
        // SAFETY: inside the view.
        assert_eq!(unsafe { *view.add(106) }, 0xcd);
        // SAFETY: unmapping what this test mapped.
        unsafe { libc::munmap(view.cast(), 3 * ps) };
        // SAFETY: as above.
        unsafe { libc::munmap(base as *mut libc::c_void, 4 * ps) };
    }

    #[test]
    fn a_span_inside_reuses_the_memfd_and_a_partial_overlap_is_refused() {
        let ps = page_size();
        let base = anonymous(6 * ps);
        // SAFETY: our mapping (pages 1..4).
        let outer = unsafe { share(base + ps, 3 * ps) }.unwrap();
        // SAFETY: inside it.
        let inner = unsafe { share(base + 2 * ps + 10, 100) }.unwrap();
        assert!(Arc::ptr_eq(&outer.memfd, &inner.memfd));
        assert_eq!(inner.file_offset, (ps + 10) as u64);
        // SAFETY: our mapping; pages 3..5 overlap 1..4 in part.
        let partial = unsafe { share(base + 3 * ps, 2 * ps) };
        assert!(matches!(partial, Err(VerbsError::PartialOverlap)));
        // SAFETY: our mapping; page 5 is apart.
        let apart = unsafe { share(base + 5 * ps, 1) }.unwrap();
        assert!(!Arc::ptr_eq(&apart.memfd, &outer.memfd));
        // Unmapped and mapped again: the old span is forgotten, not reused.
        // SAFETY: unmapping what this test mapped.
        unsafe { libc::munmap(base as *mut libc::c_void, 6 * ps) };
        let again = anonymous(6 * ps);
        if again == base {
            // SAFETY: our new mapping at the same addresses.
            let fresh = unsafe { share(base + 2 * ps, 10) }.unwrap();
            assert!(!Arc::ptr_eq(&fresh.memfd, &outer.memfd));
        }
        // SAFETY: as above.
        unsafe { libc::munmap(again as *mut libc::c_void, 6 * ps) };
    }

    #[test]
    fn allocated_memory_is_a_span_and_zero_length_is_refused() {
        let (addr, n, memfd) = alloc(10).unwrap();
        assert_eq!(n, page_size());
        // SAFETY: inside the allocation.
        let s = unsafe { share(addr + 8, 2) }.unwrap();
        assert!(Arc::ptr_eq(&s.memfd, &memfd));
        assert_eq!(s.file_offset, 8);
        free(addr, n);
        assert!(matches!(
            // SAFETY: never dereferenced: refused first.
            unsafe { share(addr, 0) },
            Err(VerbsError::Invalid(_))
        ));
    }
}
