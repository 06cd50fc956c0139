//! Where a packet's payload goes when the transport reads it from registered memory: a
//! staging buffer, or the device's frame right after the headers (header-only TX,
//! flexins.txt 3.2).

use crate::wire::RoceRepr;

/// Where a packet's payload is read to from registered memory.
pub enum PayloadDst<'a> {
    /// A staging buffer: the payload goes to its front, and is copied into a frame later.
    Staging(&'a mut [u8]),
    /// The frame itself (header-only TX): the payload goes `headers_at + the RoCE headers'
    /// length` into `frame`, where the frame's headers will be written around it.
    Frame {
        /// The device's frame buffer.
        frame: &'a mut [u8],
        /// Where the RoCE headers (the BTH) start in it: the Ethernet, IPv4 and UDP headers'
        /// length.
        headers_at: usize,
    },
}

impl PayloadDst<'_> {
    /// The `len` bytes a packet with headers `repr` carries its payload in; None if the
    /// buffer is too short.
    pub fn slot(&mut self, repr: &RoceRepr, len: usize) -> Option<&mut [u8]> {
        match self {
            PayloadDst::Staging(b) => b.get_mut(..len),
            PayloadDst::Frame { frame, headers_at } => {
                let at = headers_at.checked_add(repr.header_len())?;
                frame.get_mut(at..at.checked_add(len)?)
            }
        }
    }
}
