//! Immediate data (IBA vol. 1, chapter 9), 4 bytes: a value the requester hands to the responder's
//! completion with SEND or RDMA WRITE "with immediate".
//!
//! No-panic contract: [`ImmDt::parse`] takes any bytes; a short header is `Truncated`.

use super::error::{chunk, chunk_mut, RoceError};

/// Length of the ImmDt header.
pub const HEADER_LEN: usize = 4;

/// Immediate data, as the four bytes on the wire read big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct ImmDt(pub u32);

impl ImmDt {
    /// Parses the first 4 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<ImmDt, RoceError> {
        Ok(ImmDt(u32::from_be_bytes(*chunk::<HEADER_LEN>(b)?)))
    }

    /// Writes the 4 bytes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, RoceError> {
        *chunk_mut::<HEADER_LEN>(buf)? = self.0.to_be_bytes();
        Ok(HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_endian_and_truncation() {
        let mut b = [0u8; 4];
        ImmDt(0xDEAD_BEEF).emit(&mut b).expect("room");
        assert_eq!(b, [0xDE, 0xAD, 0xBE, 0xEF]);
        assert_eq!(ImmDt::parse(&b), Ok(ImmDt(0xDEAD_BEEF)));
        assert_eq!(
            ImmDt::parse(&b[..3]),
            Err(RoceError::Truncated { need: 4, have: 3 })
        );
        assert_eq!(
            ImmDt(1).emit(&mut [0u8; 2]),
            Err(RoceError::BufferTooSmall { need: 4, have: 2 })
        );
    }
}
