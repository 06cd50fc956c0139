//! The AF_PACKET transmit ring (PACKET_TX_RING, TPACKET_V2): frames written into memory
//! shared with the kernel and sent with one empty send(2) per burst.
//!
//! Unlike sendmmsg, which copies every frame into a new skb, the kernel builds each skb
//! around the ring's own pages (`tpacket_fill_skb`: the headers are copied, the payload is
//! attached as page fragments), so a 64 KB segment costs no copy on the way out. The price
//! is that a frame stays owned by the kernel until its skb is freed, which over veth means
//! until the receiving socket's reader has consumed it: the ring must hold a window's worth
//! of frames.
//!
//! Frame life: AVAILABLE (ours) → we write it and set SEND_REQUEST → the kernel sets
//! SENDING while the skb lives → AVAILABLE again. Frames are used strictly in ring order,
//! as the kernel scans them. With PACKET_LOSS set the kernel skips a malformed frame
//! instead of stopping the ring at it.

use std::os::fd::RawFd;
use std::sync::atomic::Ordering;

use crate::ring::MappedRing;

/// Bytes per ring frame (and per block: one frame per block, 16 pages).
pub(crate) const FRAME_SIZE: usize = 1 << 16;
/// Where a frame's data starts: the TPACKET_V2 header, aligned, without the sockaddr_ll
/// that TPACKET2_HDRLEN counts (the kernel's `tp_hdrlen - sizeof(struct sockaddr_ll)`).
const DATA_OFFSET: usize = (std::mem::size_of::<libc::tpacket2_hdr>() + libc::TPACKET_ALIGNMENT
    - 1)
    & !(libc::TPACKET_ALIGNMENT - 1);
/// Offset of `tp_len` (u32) in a `tpacket2_hdr`.
const LEN_AT: usize = 4;

/// A mapped transmit ring.
pub(crate) struct TxRing {
    ring: MappedRing,
    /// The next frame to write (ring order).
    next: usize,
}

impl std::fmt::Debug for TxRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxRing")
            .field("frames", &self.ring.frames())
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl TxRing {
    /// Largest data (virtio-net header plus frame) one ring frame holds.
    pub(crate) const MAX_DATA: usize = FRAME_SIZE - DATA_OFFSET;

    /// Sets up a TPACKET_V2 transmit ring of `frames` frames on the packet socket `fd`.
    pub(crate) fn new(fd: RawFd, frames: usize) -> std::io::Result<TxRing> {
        // A malformed frame is skipped rather than stopping the ring at it.
        crate::sys::set_int_option(fd, libc::SOL_PACKET, libc::PACKET_LOSS, 1)?;
        let ring = MappedRing::new(fd, libc::PACKET_TX_RING, frames, FRAME_SIZE)?;
        Ok(TxRing { ring, next: 0 })
    }

    /// The data area of the next frame if the kernel has given it back, else None (the
    /// ring is full of frames in flight).
    pub(crate) fn next_free(&mut self) -> Option<&mut [u8]> {
        let status = self.ring.status(self.next).load(Ordering::Acquire);
        if status != libc::TP_STATUS_AVAILABLE && status & libc::TP_STATUS_WRONG_FORMAT == 0 {
            return None;
        }
        // SAFETY: the frame is AVAILABLE (or was refused), so the kernel neither reads nor
        // writes it until we set SEND_REQUEST; the slice stays inside this frame and is
        // borrowed from `&mut self`, so no other slice into it exists.
        Some(unsafe {
            std::slice::from_raw_parts_mut(
                self.ring.frame_ptr(self.next).add(DATA_OFFSET),
                Self::MAX_DATA,
            )
        })
    }

    /// Hands the next frame, holding `len` bytes of data, to the kernel.
    pub(crate) fn commit(&mut self, len: usize) {
        // SAFETY: `tp_len` is an aligned u32 inside frame `next`, which is still ours
        // (AVAILABLE).
        unsafe {
            self.ring
                .frame_ptr(self.next)
                .add(LEN_AT)
                .cast::<u32>()
                .write(len.min(Self::MAX_DATA) as u32)
        };
        // Release: the frame's bytes are visible before the kernel sees SEND_REQUEST.
        self.ring
            .status(self.next)
            .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.next = (self.next + 1) % self.ring.frames();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_starts_after_the_aligned_v2_header() {
        // tpacket2_hdr is 32 bytes: the kernel places data at TPACKET2_HDRLEN minus the
        // sockaddr_ll (52 - 20).
        assert_eq!(DATA_OFFSET, 32);
        assert_eq!(
            libc::TPACKET2_HDRLEN - std::mem::size_of::<libc::sockaddr_ll>(),
            32
        );
        const { assert!(TxRing::MAX_DATA >= 10 + 14 + 65_400) };
    }
}
