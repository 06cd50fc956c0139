//! An application's shared region: a sealed memfd, its control area mapped at once and each
//! socket's payload rings mapped twice back to back when the socket is first used.
//!
//! The engine creates the region and passes its descriptor to the application, which maps
//! it the same way. The whole range is reserved (PROT_NONE) up front, so a ring's place is
//! fixed; its file pages are mapped into it by [`Region::map_rings`], which makes the
//! region cost mappings in proportion to the sockets used, not to `max_sockets` (issue 23). The file is sealed against shrinking and growing, so neither side can
//! make the other's accesses fault; everything else in it is treated as untrusted by the
//! engine (see the crate docs).

use std::ffi::CString;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};
use nix::sys::mman::{mmap, mmap_anonymous, munmap, MapFlags, ProtFlags};
use nix::sys::stat::fstat;
use nix::unistd::ftruncate;

use crate::error::sys;
use crate::layout::{Dir, Layout};
use crate::ring::Ring;
use crate::ShmError;

/// The region header's first eight bytes.
pub const MAGIC: u64 = u64::from_le_bytes(*b"SLUICESH");
/// Version of this layout and of the entries in it.
pub const VERSION: u32 = 1;

/// Offsets in the header page.
mod header {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    /// The engine's line: whether it is asleep (applications ring its doorbell then).
    pub const ENGINE_SLEEPING: usize = 64;
}

/// A mapped application region.
pub struct Region {
    base: NonNull<u8>,
    layout: Layout,
    fd: OwnedFd,
    /// Whether socket `s`'s rings are mapped (set once, after the mapping is in place).
    rings_mapped: Box<[AtomicBool]>,
    /// Serialises ring mapping, so a socket's rings are placed once.
    map_lock: Mutex<()>,
}

// SAFETY: the mapping is shared memory reached only through atomics and raw copies into
// and out of it; it stays mapped until drop, so the pointer may move between threads.
unsafe impl Send for Region {}
// SAFETY: as above; no method hands out a `&mut` to the mapping.
unsafe impl Sync for Region {}

impl Region {
    /// Creates a region (engine side): a sealed memfd of the layout's size, mapped.
    pub fn create(name: &str, layout: Layout) -> Result<Region, ShmError> {
        layout.validate()?;
        let name = CString::new(name).map_err(|_| ShmError::Layout("name has a NUL".into()))?;
        let fd = memfd_create(
            name.as_c_str(),
            MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
        )
        .map_err(sys("memfd_create"))?;
        ftruncate(&fd, layout.file_len() as i64).map_err(sys("ftruncate"))?;
        // The application must not shrink the file under the engine's mapping (SIGBUS).
        let seals = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL;
        fcntl(&fd, FcntlArg::F_ADD_SEALS(seals)).map_err(sys("sealing the region"))?;
        let region = Region::map(fd, layout)?;
        region
            .atomic_u64(header::MAGIC)
            .store(MAGIC, std::sync::atomic::Ordering::Relaxed);
        region
            .atomic_u32(header::VERSION)
            .store(VERSION, std::sync::atomic::Ordering::Release);
        Ok(region)
    }

    /// Maps a region received from the engine (application side), checking its size and header.
    pub fn open(fd: OwnedFd, layout: Layout) -> Result<Region, ShmError> {
        layout.validate()?;
        let st = fstat(&fd).map_err(sys("fstat on the region"))?;
        let need = layout.file_len() as u64;
        if (st.st_size as u64) < need {
            return Err(ShmError::RegionTooSmall {
                need,
                have: st.st_size as u64,
            });
        }
        let region = Region::map(fd, layout)?;
        let ok = region
            .atomic_u64(header::MAGIC)
            .load(std::sync::atomic::Ordering::Relaxed)
            == MAGIC
            && region
                .atomic_u32(header::VERSION)
                .load(std::sync::atomic::Ordering::Acquire)
                == VERSION;
        if !ok {
            return Err(ShmError::BadHeader);
        }
        Ok(region)
    }

    fn map(fd: OwnedFd, layout: Layout) -> Result<Region, ShmError> {
        let map_len = NonZeroUsize::new(layout.map_len()).expect("a valid layout is not empty");
        // Reserve the whole address range first, then place the file's pieces in it.
        // SAFETY: an anonymous PROT_NONE reservation touches no existing mapping.
        let base = unsafe {
            mmap_anonymous(
                None,
                map_len,
                ProtFlags::PROT_NONE,
                MapFlags::MAP_PRIVATE | MapFlags::MAP_NORESERVE,
            )
        }
        .map_err(sys("reserving address space for the region"))?
        .cast::<u8>();
        let rings_mapped = (0..layout.max_sockets)
            .map(|_| AtomicBool::new(false))
            .collect();
        let region = Region {
            base,
            layout,
            fd,
            rings_mapped,
            map_lock: Mutex::new(()),
        };
        region.place(0, layout.control_len(), 0)?;
        Ok(region)
    }

    /// Maps `len` bytes of the file at `file_off` over our reservation at `map_off`.
    fn place(&self, map_off: usize, len: usize, file_off: usize) -> Result<(), ShmError> {
        let len = NonZeroUsize::new(len).expect("pieces are not empty");
        let rw = ProtFlags::PROT_READ | ProtFlags::PROT_WRITE;
        // SAFETY: the target range lies inside our own reservation (map_off + len <=
        // map_len by the layout's arithmetic), so MAP_FIXED replaces only our own pages,
        // and only pages nothing refers to yet (the reservation, or the control area once).
        unsafe {
            mmap(
                NonZeroUsize::new(self.base.as_ptr() as usize + map_off),
                len,
                rw,
                MapFlags::MAP_SHARED | MapFlags::MAP_FIXED,
                &self.fd,
                file_off as i64,
            )
        }
        .map(|_| ())
        .map_err(sys("mapping the region"))
    }

    /// Maps socket `s`'s two rings, each twice back to back, if they are not yet mapped
    /// (both sides call it before a socket's first use; the mapping then stays until the
    /// region is dropped, so a reused slot costs nothing more). Fails for `s` out of range
    /// (EINVAL) or when the system refuses the mapping (ENOMEM at `vm.max_map_count`).
    pub fn map_rings(&self, s: u32) -> Result<(), ShmError> {
        let Some(flag) = self.rings_mapped.get(s as usize) else {
            return Err(ShmError::Sys {
                what: "a socket slot out of range",
                err: nix::errno::Errno::EINVAL,
            });
        };
        if flag.load(Ordering::Acquire) {
            return Ok(());
        }
        let _guard = self.map_lock.lock().unwrap_or_else(|e| e.into_inner());
        if flag.load(Ordering::Acquire) {
            return Ok(());
        }
        let ring = self.layout.ring_size as usize;
        for dir in [Dir::Rx, Dir::Tx] {
            let m = self.layout.ring_map_offset(s, dir);
            let f = self.layout.ring_file_offset(s, dir);
            self.place(m, ring, f)?;
            self.place(m + ring, ring, f)?;
        }
        flag.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether socket `s`'s rings are mapped.
    pub fn rings_mapped(&self, s: u32) -> bool {
        self.rings_mapped
            .get(s as usize)
            .is_some_and(|f| f.load(Ordering::Acquire))
    }

    /// The region's file, to pass to the application.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The region's layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The engine's sleeping flag (engine-written; applications read it to decide whether
    /// to ring the doorbell).
    pub fn engine_sleeping(&self) -> &AtomicU32 {
        self.atomic_u32(header::ENGINE_SLEEPING)
    }

    /// Context `i`'s sleeping flag (application-written; the engine reads it to decide
    /// whether to signal the context's eventfd).
    pub fn context_sleeping(&self, i: u32) -> Option<&AtomicU32> {
        (i < self.layout.max_contexts).then(|| self.atomic_u32(self.layout.context_line_offset(i)))
    }

    /// Zeroes verbs queue `q` (header and entries) so that a new producer and consumer start
    /// on a clean lap: the engine does it before handing the queue to a new object. False if
    /// `q` is out of range.
    pub fn clear_verbs_queue(&self, q: u32) -> bool {
        if q >= self.layout.verbs_queues {
            return false;
        }
        let off = self.layout.verbs_queue_offset(q);
        let zeros = [0u8; 4096];
        let mut done = 0;
        let len = self.layout.verbs_queue_bytes();
        while done < len {
            let n = (len - done).min(zeros.len());
            self.write_bytes(off + done, &zeros[..n]);
            done += n;
        }
        true
    }

    /// The arm word of verbs queue `q` used as a completion queue (application-written: 0
    /// idle, 1 armed for any completion, 2 armed for solicited ones; the engine swaps it back
    /// to 0 when it signals), or None if `q` is out of range.
    pub fn verbs_arm(&self, q: u32) -> Option<&AtomicU32> {
        (q < self.layout.verbs_queues).then(|| {
            self.atomic_u32(self.layout.verbs_queue_offset(q) + crate::layout::VERBS_ARM_OFFSET)
        })
    }

    /// The arm word of pipe-mode completion queue slot `slot` (the same values as
    /// [`Region::verbs_arm`]), or None if `slot` is out of range.
    pub fn pipe_arm(&self, slot: u32) -> Option<&AtomicU32> {
        (slot < self.layout.verbs_pipe_cqs)
            .then(|| self.atomic_u32(self.layout.pipe_arm_offset(slot)))
    }

    /// A ring of socket `s`, mapping the socket's rings first if they are not (see
    /// [`Region::map_rings`]); None if `s` is out of range or the mapping is refused.
    pub fn ring(&self, s: u32, dir: Dir) -> Option<Ring<'_>> {
        self.map_rings(s).ok()?;
        let off = self.layout.ring_map_offset(s, dir);
        // SAFETY: off is inside the mapping; the ring's 2 * ring_size bytes are mapped
        // (rings_mapped is set only after map_rings placed them, and they stay until drop).
        let ptr = unsafe { NonNull::new_unchecked(self.base.as_ptr().add(off)) };
        Some(Ring::new(ptr, self.layout.ring_size))
    }

    /// Gives a socket's ring pages back to the system (engine side, when a slot is freed).
    pub fn release_rings(&self, s: u32) {
        if s >= self.layout.max_sockets {
            return;
        }
        let off = self.layout.ring_file_offset(s, Dir::Rx) as i64;
        let len = 2 * self.layout.ring_size as i64;
        // Best effort: a kernel without hole punching on memfd keeps the pages.
        let _ = nix::fcntl::fallocate(
            &self.fd,
            nix::fcntl::FallocateFlags::FALLOC_FL_PUNCH_HOLE
                | nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE,
            off,
            len,
        );
    }

    /// The atomic u64 at byte offset `off` of the control area.
    pub(crate) fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        assert!(off & 7 == 0 && off + 8 <= self.layout.control_len());
        // SAFETY: aligned, inside the mapped control area, which lives as long as &self;
        // the other process reaches it only atomically as well.
        unsafe { &*(self.base.as_ptr().add(off) as *const AtomicU64) }
    }

    /// The atomic u32 at byte offset `off` of the control area.
    pub(crate) fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        assert!(off & 3 == 0 && off + 4 <= self.layout.control_len());
        // SAFETY: as for atomic_u64.
        unsafe { &*(self.base.as_ptr().add(off) as *const AtomicU32) }
    }

    /// The atomic byte at offset `off` of the control area.
    pub(crate) fn atomic_u8(&self, off: usize) -> &AtomicU8 {
        assert!(off < self.layout.control_len());
        // SAFETY: as for atomic_u64 (bytes need no alignment).
        unsafe { &*(self.base.as_ptr().add(off) as *const AtomicU8) }
    }

    /// Copies `out.len()` bytes from control-area offset `off`.
    pub(crate) fn read_bytes(&self, off: usize, out: &mut [u8]) {
        assert!(off + out.len() <= self.layout.control_len());
        // SAFETY: inside the mapped control area; the bytes may change under us (the other
        // process writes them), which only makes the copy's contents stale, never unsound
        // for plain bytes; callers validate what they decode.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.as_ptr().add(off), out.as_mut_ptr(), out.len())
        }
    }

    /// Copies `data` to control-area offset `off`.
    pub(crate) fn write_bytes(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.layout.control_len());
        // SAFETY: inside the mapped control area; see read_bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.as_ptr().add(off), data.len())
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: base/map_len are exactly our reservation; no reference into it outlives
        // &self (rings and queues borrow or hold an Arc of the region).
        let _ = unsafe { munmap(self.base.cast(), self.layout.map_len()) };
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("layout", &self.layout)
            .finish_non_exhaustive()
    }
}
