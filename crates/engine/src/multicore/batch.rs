//! A batch: up to [`BATCH_FRAMES`] frames in one buffer with their metadata, the unit
//! that moves between roles (DESIGN.md: stages move vectors of descriptors, not packets).
//! Its buffer is allocated once, when the runtime is built; afterwards batches only
//! circulate, so nothing is allocated per frame.
//!
//! Each frame takes at least [`FRAME_BYTES`] of the buffer, so 32 wire-sized frames fit as
//! before; a large segment for a device with segmentation offload
//! ([`Batch::push_large_with`]) takes as much of the rest as it needs: one frame through
//! the kernel instead of one per MSS (the kernel's per-frame path is most of the engine's
//! CPU over AF_PACKET, docs/notes/issue-20/prof.md).

/// Frames one batch holds.
pub const BATCH_FRAMES: usize = 32;

/// Bytes of one frame buffer: a 1514-byte Ethernet frame plus one 802.1Q tag.
pub const FRAME_BYTES: usize = 1514 + 4;

/// What is known of a frame's transport checksum as it moves between roles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Checksum {
    /// Nothing: a pre role verifies it (receive), or it is complete (transmit).
    #[default]
    Unverified,
    /// Verified (by the device or a pre role): the protocol role skips the TCP check.
    Verified,
    /// Transmit: the TCP checksum holds only the pseudo-header sum; a post role completes it.
    Partial,
    /// Failed verification: the frame keeps its place in the sequence but is not delivered.
    Bad,
    /// Dropped by an eBPF module in a replicated role (or redirected, reflected): like
    /// [`Checksum::Bad`] it keeps its place but goes no further.
    Dropped,
}

impl Checksum {
    /// Whether the frame goes on (neither bad nor dropped).
    pub fn live(self) -> bool {
        !matches!(self, Checksum::Bad | Checksum::Dropped)
    }
}

/// Per-frame metadata carried beside the bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameMeta {
    /// Frame length in bytes.
    pub len: u16,
    /// The flow group the frame belongs to.
    pub group: u16,
    /// The frame's number in its group's sequence.
    pub seq: u64,
    /// Checksum state.
    pub checksum: Checksum,
    /// The device splits the TCP payload into segments of this many bytes (TSO); 0: a
    /// frame as it is.
    pub gso_size: u16,
}

/// A batch of frames of one flow group, numbered in that group's batch sequence.
pub struct Batch {
    bytes: Box<[u8]>,
    meta: [FrameMeta; BATCH_FRAMES],
    /// Where each frame starts in `bytes`.
    starts: [u32; BATCH_FRAMES],
    /// Bytes of `bytes` taken by the frames so far (each at least [`FRAME_BYTES`]).
    used: usize,
    count: usize,
    /// The flow group every frame of the batch belongs to.
    pub group: u16,
    /// The batch's number in its group's sequence (the reorder buffers' key).
    pub seq: u64,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("group", &self.group)
            .field("seq", &self.seq)
            .field("count", &self.count)
            .finish()
    }
}

impl Default for Batch {
    fn default() -> Self {
        Batch::new()
    }
}

impl Batch {
    /// An empty batch with its buffers (the one allocation a batch ever makes).
    pub fn new() -> Self {
        Batch {
            bytes: vec![0u8; FRAME_BYTES * BATCH_FRAMES].into_boxed_slice(),
            meta: [FrameMeta::default(); BATCH_FRAMES],
            starts: [0; BATCH_FRAMES],
            used: 0,
            count: 0,
            group: 0,
            seq: 0,
        }
    }

    /// Frames in the batch.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the batch holds no frame.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether the batch has no room for another wire-sized frame ([`BATCH_FRAMES`]
    /// frames, or large ones took the buffer).
    pub fn is_full(&self) -> bool {
        self.count == BATCH_FRAMES || self.bytes.len() - self.used < FRAME_BYTES
    }

    /// Forgets the frames (the buffers stay).
    pub fn clear(&mut self) {
        self.count = 0;
        self.used = 0;
    }

    /// Appends a frame that `write` writes into the next buffer of [`FRAME_BYTES`]
    /// (returning its length, or None to write nothing). Returns false, writing nothing,
    /// when the batch is full or the length does not fit a buffer.
    pub fn push_with(
        &mut self,
        meta: FrameMeta,
        write: impl FnOnce(&mut [u8]) -> Option<usize>,
    ) -> bool {
        self.push_within(FRAME_BYTES, meta, write)
    }

    /// Like [`Batch::push_with`], but `write` may use all the room left (at least
    /// [`FRAME_BYTES`]): for a large segment the device will cut ([`FrameMeta::gso_size`]).
    pub fn push_large_with(
        &mut self,
        meta: FrameMeta,
        write: impl FnOnce(&mut [u8]) -> Option<usize>,
    ) -> bool {
        self.push_within(usize::MAX, meta, write)
    }

    /// Appends a frame of at most `most` bytes that `write` writes at the next free byte.
    fn push_within(
        &mut self,
        most: usize,
        mut meta: FrameMeta,
        write: impl FnOnce(&mut [u8]) -> Option<usize>,
    ) -> bool {
        if self.is_full() {
            return false;
        }
        let at = self.used;
        let room = (self.bytes.len() - at).min(most);
        let Some(len) = write(&mut self.bytes[at..at + room]) else {
            return false;
        };
        let (Ok(len16), Ok(at32)) = (u16::try_from(len), u32::try_from(at)) else {
            return false;
        };
        if len > room {
            return false;
        }
        meta.len = len16;
        self.meta[self.count] = meta;
        self.starts[self.count] = at32;
        // A frame takes at least a wire-sized buffer, so a module may grow it to one.
        self.used = at + len.max(FRAME_BYTES);
        self.count += 1;
        true
    }

    /// Appends a copy of `frame`; false when the batch is full or the frame is longer than
    /// [`FRAME_BYTES`].
    pub fn push_copy(&mut self, frame: &[u8], meta: FrameMeta) -> bool {
        if frame.len() > FRAME_BYTES {
            return false;
        }
        self.push_with(meta, |buf| {
            buf[..frame.len()].copy_from_slice(frame);
            Some(frame.len())
        })
    }

    /// Frame `i`'s bytes (empty past the end).
    pub fn frame(&self, i: usize) -> &[u8] {
        if i >= self.count {
            return &[];
        }
        let at = self.starts[i] as usize;
        &self.bytes[at..at + usize::from(self.meta[i].len)]
    }

    /// Frame `i`'s bytes, writable, with its metadata (None past the end).
    pub fn frame_mut(&mut self, i: usize) -> Option<(&mut [u8], &mut FrameMeta)> {
        if i >= self.count {
            return None;
        }
        let at = self.starts[i] as usize;
        let meta = &mut self.meta[i];
        Some((&mut self.bytes[at..at + usize::from(meta.len)], meta))
    }

    /// Replaces frame `i`'s bytes with `frame` (a module changed it); false, leaving it as
    /// it was, past the end or when `frame` is longer than the room frame `i` took (at
    /// least [`FRAME_BYTES`]).
    pub fn replace(&mut self, i: usize, frame: &[u8]) -> bool {
        let Ok(len) = u16::try_from(frame.len()) else {
            return false;
        };
        if i >= self.count {
            return false;
        }
        let at = self.starts[i] as usize;
        let end = match self.starts.get(i + 1) {
            Some(&next) if i + 1 < self.count => next as usize,
            _ => self.used,
        };
        if frame.len() > end - at {
            return false;
        }
        self.bytes[at..at + frame.len()].copy_from_slice(frame);
        self.meta[i].len = len;
        true
    }

    /// Frame `i`'s metadata (a default past the end).
    pub fn meta(&self, i: usize) -> FrameMeta {
        self.meta
            .get(i)
            .filter(|_| i < self.count)
            .copied()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Against the simple model (a list of frames, each taking at least a wire-sized
        /// buffer of one fixed-size region): pushes of wire-sized and large frames in any
        /// order keep every frame's bytes and metadata, refuse exactly what the model has
        /// no room for, and a full batch has no room for a wire-sized frame.
        #[test]
        fn packed_frames_match_the_simple_model(
            pushes in proptest::collection::vec((any::<bool>(), 1usize..20_000, any::<u8>()), 0..60),
        ) {
            let cap = FRAME_BYTES * BATCH_FRAMES;
            let mut b = Batch::new();
            let mut model: Vec<Vec<u8>> = Vec::new();
            let mut used = 0usize;
            for (k, (large, len, fill)) in pushes.into_iter().enumerate() {
                let meta = FrameMeta { seq: k as u64, gso_size: fill.into(), ..FrameMeta::default() };
                let frame = vec![fill; len];
                let room_left = cap - used;
                let fits = model.len() < BATCH_FRAMES
                    && room_left >= FRAME_BYTES
                    && len <= if large { room_left } else { FRAME_BYTES };
                let pushed = if large {
                    b.push_large_with(meta, |buf| {
                        let n = frame.len();
                        buf.get_mut(..n)?.copy_from_slice(&frame);
                        Some(n)
                    })
                } else {
                    b.push_copy(&frame, meta)
                };
                prop_assert_eq!(pushed, fits);
                if fits {
                    model.push(frame);
                    used += len.max(FRAME_BYTES);
                }
                prop_assert_eq!(b.is_full(), model.len() == BATCH_FRAMES || cap - used < FRAME_BYTES);
            }
            prop_assert_eq!(b.len(), model.len());
            for (i, f) in model.iter().enumerate() {
                prop_assert_eq!(b.frame(i), f.as_slice());
                prop_assert_eq!(b.meta(i).gso_size, u16::from(f[0]));
            }
            // Any frame may be replaced by one as long as a wire-sized buffer.
            if !model.is_empty() {
                prop_assert!(b.replace(0, &[7u8; FRAME_BYTES]));
                prop_assert_eq!(b.frame(0), &[7u8; FRAME_BYTES][..]);
                for (i, f) in model.iter().enumerate().skip(1) {
                    prop_assert_eq!(b.frame(i), f.as_slice());
                }
            }
            b.clear();
            prop_assert!(b.is_empty() && !b.is_full());
        }
    }

    #[test]
    fn a_large_frame_takes_the_room_it_needs_and_no_more() {
        let mut b = Batch::new();
        let big = 3 * FRAME_BYTES + 10;
        assert!(b.push_large_with(FrameMeta::default(), |buf| {
            assert_eq!(buf.len(), FRAME_BYTES * BATCH_FRAMES, "all the room");
            Some(big)
        }));
        assert!(!b.push_with(FrameMeta::default(), |buf| {
            assert_eq!(buf.len(), FRAME_BYTES, "a wire-sized buffer");
            Some(FRAME_BYTES + 1)
        }));
        // The rest holds a wire-sized frame per whole buffer left after it, then is full.
        let mut n = 1;
        while b.push_copy(&[1u8; 60], FrameMeta::default()) {
            n += 1;
        }
        assert_eq!(n, 1 + (FRAME_BYTES * BATCH_FRAMES - big) / FRAME_BYTES);
        assert!(b.is_full());
        assert_eq!(b.frame(0).len(), big);
        assert!(!b.replace(0, &vec![0u8; big + 1]), "no room past its own");
    }

    #[test]
    fn frames_keep_their_bytes_and_metadata_until_full() {
        let mut b = Batch::new();
        for i in 0..BATCH_FRAMES {
            let f = vec![i as u8; 60 + i];
            let meta = FrameMeta {
                group: 3,
                seq: i as u64,
                ..FrameMeta::default()
            };
            assert!(b.push_copy(&f, meta));
        }
        assert!(b.is_full());
        assert!(!b.push_copy(&[1, 2, 3], FrameMeta::default()), "full");
        for i in 0..BATCH_FRAMES {
            assert_eq!(b.frame(i), vec![i as u8; 60 + i].as_slice());
            assert_eq!(b.meta(i).seq, i as u64);
            assert_eq!(usize::from(b.meta(i).len), 60 + i);
        }
        b.clear();
        assert!(b.is_empty());
        assert_eq!(b.frame(0), &[] as &[u8]);
    }

    #[test]
    fn a_frame_longer_than_a_buffer_is_refused() {
        let mut b = Batch::new();
        assert!(b.push_copy(&[0u8; FRAME_BYTES], FrameMeta::default()));
        assert!(!b.push_copy(&[0u8; FRAME_BYTES + 1], FrameMeta::default()));
        assert!(!b.push_with(FrameMeta::default(), |_| Some(FRAME_BYTES + 1)));
        assert_eq!(b.len(), 1);
    }

    #[test]
    fn a_replaced_frame_keeps_its_place_and_metadata() {
        let mut b = Batch::new();
        let meta = FrameMeta {
            seq: 7,
            ..FrameMeta::default()
        };
        assert!(b.push_copy(&[1; 60], meta));
        assert!(b.push_copy(&[2; 60], meta));
        assert!(b.replace(0, &[9; 64]));
        assert_eq!((b.frame(0), b.meta(0).seq), (&[9u8; 64][..], 7));
        assert_eq!(b.frame(1), &[2u8; 60][..]);
        assert!(
            !b.replace(0, &[0; FRAME_BYTES + 1]),
            "too long: left as it was"
        );
        assert!(!b.replace(2, &[0; 60]), "past the end");
        assert_eq!(b.frame(0), &[9u8; 64][..]);
        assert!(!Checksum::Dropped.live() && !Checksum::Bad.live() && Checksum::Verified.live());
    }
}
