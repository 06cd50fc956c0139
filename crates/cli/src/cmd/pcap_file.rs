//! The classic pcap file format (what tcpdump -w writes and tshark reads): a 24-byte file
//! header, then a 16-byte record header before each frame. Nanosecond timestamps (magic
//! 0xa1b23c4d), little-endian, link type Ethernet.

use std::io::{self, Write};

/// The nanosecond-resolution magic number.
pub const MAGIC_NS: u32 = 0xa1b2_3c4d;
/// LINKTYPE_ETHERNET.
pub const LINKTYPE_ETHERNET: u32 = 1;

/// Writes frames as pcap into `out`.
pub struct PcapWriter<W: Write> {
    out: W,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header for frames cut at `snaplen`.
    pub fn new(mut out: W, snaplen: u32) -> io::Result<PcapWriter<W>> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&MAGIC_NS.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&snaplen.to_le_bytes());
        h.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out })
    }

    /// One frame seen at `ts_ns` (since the epoch), `orig_len` long on the wire, of which
    /// `data` was kept.
    pub fn write(&mut self, ts_ns: u64, orig_len: u32, data: &[u8]) -> io::Result<()> {
        let caplen = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let mut h = [0u8; 16];
        // pcap's seconds field is 32 bits: good until 2106.
        h[0..4].copy_from_slice(&((ts_ns / 1_000_000_000) as u32).to_le_bytes());
        h[4..8].copy_from_slice(&((ts_ns % 1_000_000_000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&caplen.to_le_bytes());
        h[12..16].copy_from_slice(&orig_len.max(caplen).to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(data)
    }

    /// Flushes what is buffered.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_records_have_pcaps_layout() {
        let mut w = PcapWriter::new(Vec::new(), 96).unwrap();
        w.write(1_700_000_000_000_000_123, 1514, &[0xaa; 96])
            .unwrap();
        let b = w.out;
        assert_eq!(b.len(), 24 + 16 + 96);
        assert_eq!(&b[0..4], &[0x4d, 0x3c, 0xb2, 0xa1]);
        assert_eq!(u32::from_le_bytes(b[16..20].try_into().unwrap()), 96);
        assert_eq!(u32::from_le_bytes(b[20..24].try_into().unwrap()), 1);
        assert_eq!(
            u32::from_le_bytes(b[24..28].try_into().unwrap()),
            1_700_000_000
        );
        assert_eq!(u32::from_le_bytes(b[28..32].try_into().unwrap()), 123);
        assert_eq!(u32::from_le_bytes(b[32..36].try_into().unwrap()), 96);
        assert_eq!(u32::from_le_bytes(b[36..40].try_into().unwrap()), 1514);
    }
}
