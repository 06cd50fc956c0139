//! The RDMA Extended Transport Header (IBA vol. 1, chapter 9), 16 bytes: where an RDMA WRITE or READ
//! goes in the responder's memory.
//!
//! ```text
//! bytes 0-7    virtual address
//! bytes 8-11   R_Key
//! bytes 12-15  DMA length
//! ```
//!
//! No-panic contract: [`RethRepr::parse`] takes any bytes; a short header is `Truncated`.

use super::error::{chunk, chunk_mut, RoceError};

/// Length of the RETH.
pub const HEADER_LEN: usize = 16;

/// A parsed RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RethRepr {
    /// Virtual address of the first byte in the remote region.
    pub va: u64,
    /// The remote key that grants access to it.
    pub rkey: u32,
    /// Length of the whole operation (not of this packet) in bytes.
    pub dma_len: u32,
}

impl RethRepr {
    /// Parses the first 16 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<RethRepr, RoceError> {
        let h = chunk::<HEADER_LEN>(b)?;
        let (va, rest) = h.split_at(8);
        let (rkey, len) = rest.split_at(4);
        Ok(RethRepr {
            va: u64::from_be_bytes(va.try_into().unwrap_or_default()),
            rkey: u32::from_be_bytes(rkey.try_into().unwrap_or_default()),
            dma_len: u32::from_be_bytes(len.try_into().unwrap_or_default()),
        })
    }

    /// Writes the 16-byte header.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, RoceError> {
        let h = chunk_mut::<HEADER_LEN>(buf)?;
        h[..8].copy_from_slice(&self.va.to_be_bytes());
        h[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        h[12..].copy_from_slice(&self.dma_len.to_be_bytes());
        Ok(HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_and_truncation() {
        let r = RethRepr {
            va: 0x0102_0304_0506_0708,
            rkey: 0xAABB_CCDD,
            dma_len: 0x1000,
        };
        let mut b = [0u8; HEADER_LEN];
        r.emit(&mut b).expect("room");
        assert_eq!(b[..8], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(b[8..], [0xAA, 0xBB, 0xCC, 0xDD, 0, 0, 0x10, 0]);
        assert_eq!(RethRepr::parse(&b), Ok(r));
        assert_eq!(
            RethRepr::parse(&b[..15]),
            Err(RoceError::Truncated { need: 16, have: 15 })
        );
    }
}
