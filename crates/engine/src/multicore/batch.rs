//! A batch: up to [`BATCH_FRAMES`] frames in fixed buffers with their metadata, the unit
//! that moves between roles (DESIGN.md: stages move vectors of descriptors, not packets).
//! Its buffers are allocated once, when the runtime is built; afterwards batches only
//! circulate, so nothing is allocated per frame.

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
}

/// A batch of frames of one flow group, numbered in that group's batch sequence.
pub struct Batch {
    bytes: Box<[u8]>,
    meta: [FrameMeta; BATCH_FRAMES],
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

    /// Whether the batch holds [`BATCH_FRAMES`] frames.
    pub fn is_full(&self) -> bool {
        self.count == BATCH_FRAMES
    }

    /// Forgets the frames (the buffers stay).
    pub fn clear(&mut self) {
        self.count = 0;
    }

    /// Appends a frame that `write` writes into the next buffer (returning its length, or
    /// None to write nothing). Returns false, writing nothing, when the batch is full or
    /// the length does not fit a buffer.
    pub fn push_with(
        &mut self,
        mut meta: FrameMeta,
        write: impl FnOnce(&mut [u8]) -> Option<usize>,
    ) -> bool {
        if self.is_full() {
            return false;
        }
        let at = self.count * FRAME_BYTES;
        let Some(len) = write(&mut self.bytes[at..at + FRAME_BYTES]) else {
            return false;
        };
        let Ok(len16) = u16::try_from(len) else {
            return false;
        };
        if len > FRAME_BYTES {
            return false;
        }
        meta.len = len16;
        self.meta[self.count] = meta;
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
        let at = i * FRAME_BYTES;
        &self.bytes[at..at + usize::from(self.meta[i].len)]
    }

    /// Frame `i`'s bytes, writable, with its metadata (None past the end).
    pub fn frame_mut(&mut self, i: usize) -> Option<(&mut [u8], &mut FrameMeta)> {
        if i >= self.count {
            return None;
        }
        let at = i * FRAME_BYTES;
        let meta = &mut self.meta[i];
        Some((&mut self.bytes[at..at + usize::from(meta.len)], meta))
    }

    /// Replaces frame `i`'s bytes with `frame` (a module changed it); false, leaving it as
    /// it was, past the end or when `frame` is longer than [`FRAME_BYTES`].
    pub fn replace(&mut self, i: usize, frame: &[u8]) -> bool {
        let Ok(len) = u16::try_from(frame.len()) else {
            return false;
        };
        if i >= self.count || frame.len() > FRAME_BYTES {
            return false;
        }
        let at = i * FRAME_BYTES;
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
