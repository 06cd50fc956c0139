//! A TCP core behind a simulated NIC with segmentation and checksum offload (TSO).
//!
//! The core hands the NIC large segments with a GSO size and partial checksums
//! ([`Stack::poll_transmit_offload`]); the NIC cuts them into MSS-sized frames on the wire
//! exactly as Linux's GSO does ([`sluice_wire::gso`]), so the simulator exercises the core's
//! TSO path under loss and reordering. Buffers are allocated once.

use std::ops::{Deref, DerefMut};

use sluice_tcp::{Instant, Stack};
use sluice_wire::gso::segment_tcp4;

use crate::host::{Host, MAX_FRAME_LEN};

/// A [`Stack`] whose transmissions pass through a segmentation-offload NIC.
pub struct OffloadNic {
    stack: Stack,
    /// The large frame the core last wrote.
    large: Box<[u8]>,
    /// Wire frames cut from it, back to back.
    frames: Vec<u8>,
    /// (start, len) of each wire frame in `frames`.
    spans: Vec<(usize, usize)>,
    /// Next span to hand to the wire.
    next: usize,
    /// One wire frame being built.
    scratch: Box<[u8]>,
    /// Large frames segmented so far.
    pub large_frames: u64,
    /// Large frames the NIC could not parse (dropped; counted, never a panic).
    pub malformed: u64,
}

impl OffloadNic {
    /// Puts `stack` behind the NIC; the stack's config chooses the TSO size and checksum offload.
    pub fn new(stack: Stack) -> Self {
        OffloadNic {
            stack,
            large: vec![0; MAX_FRAME_LEN].into_boxed_slice(),
            frames: Vec::with_capacity(2 * MAX_FRAME_LEN),
            spans: Vec::with_capacity(64),
            next: 0,
            scratch: vec![0; 16 * 1024].into_boxed_slice(),
            large_frames: 0,
            malformed: 0,
        }
    }
}

impl Deref for OffloadNic {
    type Target = Stack;
    fn deref(&self) -> &Stack {
        &self.stack
    }
}

impl DerefMut for OffloadNic {
    fn deref_mut(&mut self) -> &mut Stack {
        &mut self.stack
    }
}

impl Host for OffloadNic {
    fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        self.stack.handle_frame(now, frame)
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        loop {
            if let Some(&(start, len)) = self.spans.get(self.next) {
                self.next += 1;
                let out = buf.get_mut(..len)?;
                out.copy_from_slice(&self.frames[start..start + len]);
                return Some(len);
            }
            let t = self.stack.poll_transmit_offload(now, &mut self.large)?;
            let frame = &self.large[..t.len];
            if t.gso_size == 0 && !t.csum_partial {
                let out = buf.get_mut(..t.len)?;
                out.copy_from_slice(frame);
                return Some(t.len);
            }
            // Cut (or, for a single segment, just finish the checksum of) the frame.
            self.frames.clear();
            self.spans.clear();
            self.next = 0;
            let gso = if t.gso_size == 0 {
                t.len
            } else {
                usize::from(t.gso_size)
            };
            let (frames, spans) = (&mut self.frames, &mut self.spans);
            let cut = segment_tcp4(frame, gso, &mut self.scratch, |seg| {
                spans.push((frames.len(), seg.len()));
                frames.extend_from_slice(seg);
            });
            match cut {
                Ok(_) if t.gso_size != 0 => self.large_frames += 1,
                Ok(_) => {}
                Err(_) => self.malformed += 1,
            }
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.stack.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.stack.handle_timeout(now)
    }
}
