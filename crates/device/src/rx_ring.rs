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
use std::sync::atomic::Ordering;

use crate::ring::MappedRing;

/// Bytes per ring frame and per block: room for the TPACKET_V2 header, the sockaddr_ll, a
/// virtio-net header and a 64 KB frame (17 pages).
pub(crate) const FRAME_SIZE: usize = 17 << 12;

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

/// A mapped receive ring.
pub(crate) struct RxRing {
    ring: MappedRing,
    /// The next frame to read (ring order).
    next: usize,
}

impl std::fmt::Debug for RxRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxRing")
            .field("frames", &self.ring.frames())
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl RxRing {
    /// Sets up a TPACKET_V2 receive ring of `frames` frames on the packet socket `fd`.
    pub(crate) fn new(fd: RawFd, frames: usize) -> std::io::Result<RxRing> {
        let ring = MappedRing::new(fd, libc::PACKET_RX_RING, frames, FRAME_SIZE)?;
        Ok(RxRing { ring, next: 0 })
    }

    /// The next frame the kernel has filled, if any: its metadata and its whole ring frame
    /// (header included; the frame's bytes are at `mac..mac + snaplen`, bounds checked).
    pub(crate) fn next_filled(&mut self) -> Option<(RxSlot, &mut [u8])> {
        let status = self.ring.status(self.next).load(Ordering::Acquire);
        if status & libc::TP_STATUS_USER == 0 {
            return None;
        }
        // SAFETY: the frame is USER, so the kernel does not touch it until we set KERNEL;
        // the slice covers exactly this frame and is borrowed from `&mut self`.
        let frame =
            unsafe { std::slice::from_raw_parts_mut(self.ring.frame_ptr(self.next), FRAME_SIZE) };
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
        self.ring
            .status(self.next)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.next = (self.next + 1) % self.ring.frames();
    }
}
