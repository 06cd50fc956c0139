//! The caller's memory as a connection's send buffer (flexins.txt 3.2, Figure 6, for TCP):
//! the [`PayloadSource`] a segment's payload is gathered from, the bookkeeping the core keeps
//! for such a connection ([`ExternalTx`]), the two transmit paths ([`TxPath`]) and the bytes
//! the core touches on them ([`Touched`]). A leaf: the buffers and the API import it.

/// Where a connection's unacknowledged payload lives, for header-only transmission: the core
/// calls it once per segment it builds (first transmission or retransmission) with the
/// segment's stream position and the frame's payload slice, never per byte.
///
/// The caller promises nothing about stability: if the bytes at a position change before
/// they are acknowledged, each segment carries what was there when it was built (its
/// checksum is computed over the frame, so it is a valid segment of wrong data).
pub trait PayloadSource: Send {
    /// The most bytes the source holds at once: what the connection may have
    /// unacknowledged (its send buffer's size).
    fn capacity(&self) -> u64;

    /// Copies the bytes at stream positions `pos .. pos + dst.len()` into `dst` (never more
    /// than [`PayloadSource::capacity`]). False if it cannot: the core then sends nothing
    /// from it and resets the connection (`Touched::gather_failed`).
    fn gather(&self, pos: u64, dst: &mut [u8]) -> bool;
}

/// A connection whose send buffer is a [`PayloadSource`]: the core keeps only positions.
pub(crate) struct ExternalTx {
    /// The source; None once its bytes were copied into the core's own ring
    /// (`Stack::internalize_tx`: at close, splice or a staged `send`).
    pub source: Option<Box<dyn PayloadSource>>,
    /// The caller's stream position of the connection's first unacknowledged byte
    /// (`ConnBuffers::tx_head`): everything before it is released to the caller.
    pub head_pos: u64,
}

/// How a connection's payload reaches its frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TxPath {
    /// `Stack::send` copies the bytes into the core's send ring, and each segment copies
    /// them again into the frame: two copies (kept for the comparison).
    Staging,
    /// Header-only: the core keeps sequence bookkeeping only, and each segment gathers its
    /// payload from the caller's [`PayloadSource`] straight into the frame: one copy.
    #[default]
    HeaderOnly,
}

/// Transmit-side bytes the core touched, counted where it touches them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Touched {
    /// Payload bytes copied into frames (from the core's ring or a source), retransmissions
    /// included: one per payload byte on either path.
    pub payload: u64,
    /// Bytes copied into the core's send ring (`send`, and a source's bytes taken in by
    /// `internalize_tx`): 0 on the header-only path.
    pub staging: u64,
    /// Payload bytes summed for a TCP checksum computed in software (0 with checksum
    /// offload).
    pub checksum: u64,
    /// Segments whose source could not gather their payload (the connection was reset).
    pub gather_failed: u64,
}

impl Touched {
    /// Every byte the core touched: copies into frames, staging copies, checksum passes.
    pub fn total(&self) -> u64 {
        self.payload + self.staging + self.checksum
    }

    /// Engine bytes touched per payload byte sent (0 if nothing was sent).
    pub fn per_payload_byte(&self) -> f64 {
        if self.payload == 0 {
            0.0
        } else {
            self.total() as f64 / self.payload as f64
        }
    }
}
