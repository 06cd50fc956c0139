//! In-memory pcap (nanosecond-resolution, Ethernet link type) capture.

use crate::Instant;

/// Magic number of a nanosecond-resolution pcap file.
const PCAP_MAGIC_NANOS: u32 = 0xa1b2_3c4d;
/// LINKTYPE_ETHERNET.
const LINKTYPE_ETHERNET: u32 = 1;
/// Snapshot length recorded in the file header.
const SNAPLEN: u32 = 65536;

/// A pcap file being written to memory.
#[derive(Debug)]
pub(crate) struct PcapWriter {
    buf: Vec<u8>,
}

impl PcapWriter {
    /// Starts a new file with its global header.
    pub(crate) fn new() -> Self {
        let mut buf = Vec::with_capacity(1 << 16);
        buf.extend_from_slice(&PCAP_MAGIC_NANOS.to_le_bytes());
        buf.extend_from_slice(&2u16.to_le_bytes());
        buf.extend_from_slice(&4u16.to_le_bytes());
        buf.extend_from_slice(&0i32.to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        buf.extend_from_slice(&SNAPLEN.to_le_bytes());
        buf.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        PcapWriter { buf }
    }

    /// Appends one frame seen at `time`.
    pub(crate) fn record(&mut self, time: Instant, frame: &[u8]) {
        let nanos = time.as_nanos();
        let secs = u32::try_from(nanos / 1_000_000_000).unwrap_or(u32::MAX);
        let sub = (nanos % 1_000_000_000) as u32;
        let orig = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let incl = orig.min(SNAPLEN);
        self.buf.extend_from_slice(&secs.to_le_bytes());
        self.buf.extend_from_slice(&sub.to_le_bytes());
        self.buf.extend_from_slice(&incl.to_le_bytes());
        self.buf.extend_from_slice(&orig.to_le_bytes());
        self.buf
            .extend_from_slice(frame.get(..incl as usize).unwrap_or(frame));
    }

    /// The file written so far.
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.buf
    }
}
