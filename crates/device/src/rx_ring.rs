//! The AF_PACKET receive ring (PACKET_RX_RING, TPACKET_V2): the kernel writes each frame
//! into memory shared with us, so receiving costs no system call while frames are waiting.
//!
//! recvmmsg pays a system call, and the kernel's per-message bookkeeping, on every poll of
//! a busy-polling engine, even when it returns one frame or none. With the ring a poll is a
//! look at the next frame's status word. The copy from the skb into user memory is the
//! same either way.
//!
//! Frame life: KERNEL (the kernel's to fill) → the kernel writes a frame and sets USER →
//! we hand it up and set KERNEL again. Frames are taken strictly in ring order, as the
//! kernel fills them. A frame is 64 KB plus headers, so GRO aggregates fit whole; one that
//! does not fit arrives truncated (`tp_snaplen < tp_len`) and is dropped.

use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// Bytes per ring frame and per block: room for the TPACKET_V2 header, the sockaddr_ll, a
/// virtio-net header and a 64 KB frame (17 pages).
pub(crate) const FRAME_SIZE: usize = 17 << 12;
/// TPACKET_V2 in `enum tpacket_versions`.
const TPACKET_V2: libc::c_int = 1;

/// One received frame's place and metadata in the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RxSlot {
    /// `tp_status` (checksum flags among others).
    pub status: u32,
    /// The frame's offset in the ring frame (`tp_mac`).
    pub mac: usize,
    /// Bytes captured.
    pub snaplen: usize,
    /// The frame's length on the wire.
    pub len: usize,
    /// The packet type from the sockaddr_ll after the header (PACKET_OUTGOING, ...).
    pub pkttype: u8,
}

/// A mapped receive ring of `frames` frames.
pub(crate) struct RxRing {
    base: NonNull<u8>,
    frames: usize,
    /// The next frame to read (ring order).
    next: usize,
}

impl std::fmt::Debug for RxRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxRing")
            .field("frames", &self.frames)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl RxRing {
    /// Sets up a TPACKET_V2 receive ring of `frames` frames on the (not yet bound) packet
    /// socket `fd` and maps it.
    pub(crate) fn new(fd: RawFd, frames: usize) -> std::io::Result<RxRing> {
        let frames_u32 =
            u32::try_from(frames).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        crate::sys::set_int_option(fd, libc::SOL_PACKET, libc::PACKET_VERSION, TPACKET_V2)?;
        let req = libc::tpacket_req {
            tp_block_size: FRAME_SIZE as u32,
            tp_block_nr: frames_u32,
            tp_frame_size: FRAME_SIZE as u32,
            tp_frame_nr: frames_u32,
        };
        // SAFETY: the option value is one tpacket_req that lives for the call, and the
        // length passed is its size.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_PACKET,
                libc::PACKET_RX_RING,
                (&req as *const libc::tpacket_req).cast(),
                std::mem::size_of::<libc::tpacket_req>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let len = frames * FRAME_SIZE;
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
        Ok(RxRing {
            base,
            frames,
            next: 0,
        })
    }

    /// The status word of frame `i`.
    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: frame `i < frames` lies inside the mapping, which lives as long as self;
        // `tp_status` is a 4-byte-aligned u32 at the frame's page-aligned start that the
        // kernel also accesses atomically.
        unsafe { &*self.base.as_ptr().add(i * FRAME_SIZE).cast::<AtomicU32>() }
    }

    /// The next frame the kernel has filled, if any: its metadata and its whole ring frame
    /// (header included; the frame's bytes are at `mac..mac + snaplen`, bounds checked).
    pub(crate) fn next_filled(&mut self) -> Option<(RxSlot, &mut [u8])> {
        let status = self.status(self.next).load(Ordering::Acquire);
        if status & libc::TP_STATUS_USER == 0 {
            return None;
        }
        // SAFETY: the frame is USER, so the kernel does not touch it until we set KERNEL;
        // the slice covers exactly this frame and is borrowed from `&mut self`.
        let frame = unsafe {
            std::slice::from_raw_parts_mut(
                self.base.as_ptr().add(self.next * FRAME_SIZE),
                FRAME_SIZE,
            )
        };
        let u32_at = |b: &[u8], i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u16_at = |b: &[u8], i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        // tpacket2_hdr: status, len, snaplen, mac (u16), net (u16), ...; the sockaddr_ll
        // follows at the aligned header size, its sll_pkttype at offset 10.
        let sll_at = (std::mem::size_of::<libc::tpacket2_hdr>() + libc::TPACKET_ALIGNMENT - 1)
            & !(libc::TPACKET_ALIGNMENT - 1);
        let slot = RxSlot {
            status,
            len: u32_at(frame, 4) as usize,
            snaplen: u32_at(frame, 8) as usize,
            mac: usize::from(u16_at(frame, 12)),
            pkttype: frame[sll_at + 10],
        };
        Some((slot, frame))
    }

    /// Gives the frame last returned by [`RxRing::next_filled`] back to the kernel.
    pub(crate) fn release(&mut self) {
        // Release: we are done reading before the kernel may write it again.
        self.status(self.next)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.next = (self.next + 1) % self.frames;
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; no slice into it outlives self.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.frames * FRAME_SIZE) };
    }
}
