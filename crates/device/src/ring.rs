//! A TPACKET_V2 ring mapped from a packet socket: what the receive and transmit rings share.
//! Each frame starts with a `tpacket2_hdr` whose first word, `tp_status`, passes the frame
//! between the kernel and us.

use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;

/// TPACKET_V2 in `enum tpacket_versions`.
const TPACKET_V2: libc::c_int = 1;

/// `frames` frames of `frame_size` bytes (one frame per block) shared with the kernel.
pub(crate) struct MappedRing {
    base: NonNull<u8>,
    frames: usize,
    frame_size: usize,
}

impl MappedRing {
    /// Sets up the ring named by `option` (PACKET_RX_RING or PACKET_TX_RING) on the packet
    /// socket `fd`, which must have no other ring, and maps it. `frame_size` must be a
    /// multiple of the page size.
    pub(crate) fn new(
        fd: RawFd,
        option: libc::c_int,
        frames: usize,
        frame_size: usize,
    ) -> std::io::Result<MappedRing> {
        let invalid = || std::io::Error::from_raw_os_error(libc::EINVAL);
        let frames_u32 = u32::try_from(frames).map_err(|_| invalid())?;
        let size_u32 = u32::try_from(frame_size).map_err(|_| invalid())?;
        let len = frames.checked_mul(frame_size).ok_or_else(invalid)?;
        crate::sys::set_int_option(fd, libc::SOL_PACKET, libc::PACKET_VERSION, TPACKET_V2)?;
        let req = libc::tpacket_req {
            tp_block_size: size_u32,
            tp_block_nr: frames_u32,
            tp_frame_size: size_u32,
            tp_frame_nr: frames_u32,
        };
        // SAFETY: the option value is one tpacket_req that lives for the call, and the
        // length passed is its size.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_PACKET,
                option,
                (&req as *const libc::tpacket_req).cast(),
                std::mem::size_of::<libc::tpacket_req>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: maps the ring the kernel just allocated for this socket (its only ring,
        // at offset 0), shared and read-write as packet(7) prescribes; checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(MappedRing {
            base,
            frames,
            frame_size,
        })
    }

    /// Number of frames.
    pub(crate) fn frames(&self) -> usize {
        self.frames
    }

    /// The status word of frame `i % frames`.
    pub(crate) fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: the frame lies inside the mapping, which lives as long as self;
        // `tp_status` is a 4-byte-aligned u32 at the frame's page-aligned start that the
        // kernel also accesses atomically.
        unsafe { &*self.frame_ptr(i).cast::<AtomicU32>() }
    }

    /// The start of frame `i % frames`.
    pub(crate) fn frame_ptr(&self, i: usize) -> *mut u8 {
        // SAFETY: (i % frames) * frame_size is below the mapping's length.
        unsafe { self.base.as_ptr().add((i % self.frames) * self.frame_size) }
    }
}

impl Drop for MappedRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; no slice into it outlives self
        // (the rings hand out slices borrowed from themselves).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.frames * self.frame_size) };
    }
}
