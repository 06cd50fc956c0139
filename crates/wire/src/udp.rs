//! UDP datagrams (RFC 768) over IPv4.
//!
//! No-panic contract: every function here takes arbitrary bytes; a short or inconsistent
//! datagram is a [`WireError`], never a panic, and nothing allocates.

use crate::checksum;
use crate::field;
use crate::WireError;
use std::net::Ipv4Addr;

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

/// Byte ranges of the header's fields.
mod offset {
    pub(super) const SRC_PORT: usize = 0;
    pub(super) const DST_PORT: usize = 2;
    pub(super) const LENGTH: usize = 4;
    pub(super) const CHECKSUM: usize = 6;
}

/// Whether [`UdpRepr::parse`] verifies a nonzero checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpChecksum {
    /// Verify it against the pseudo header (a zero checksum means "none" over IPv4).
    Verify,
    /// Do not look at it (RoCEv2 sends zero and protects the datagram with its ICRC).
    Ignore,
}

/// A parsed UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl UdpRepr {
    /// Parses a datagram (the IPv4 payload); returns the header and exactly `length - 8`
    /// payload bytes (bytes past the length field are link padding and are dropped).
    pub fn parse(
        datagram: &[u8],
        src: Ipv4Addr,
        dst: Ipv4Addr,
        check: UdpChecksum,
    ) -> Result<(UdpRepr, &[u8]), WireError> {
        let h = datagram
            .first_chunk::<HEADER_LEN>()
            .ok_or(WireError::Truncated)?;
        let length = usize::from(field::be16(h, offset::LENGTH));
        if length < HEADER_LEN {
            return Err(WireError::Malformed);
        }
        let whole = datagram.get(..length).ok_or(WireError::Truncated)?;
        if check == UdpChecksum::Verify && field::be16(h, offset::CHECKSUM) != 0 {
            // `length` came from a 16-bit field, so the cast is exact.
            let sum = checksum::pseudo_header_v4(src, dst, PROTOCOL_UDP, length as u16)
                + checksum::sum(whole);
            if checksum::fold(sum) != 0xFFFF {
                return Err(WireError::Checksum);
            }
        }
        let repr = UdpRepr {
            src_port: field::be16(h, offset::SRC_PORT),
            dst_port: field::be16(h, offset::DST_PORT),
        };
        Ok((repr, whole.get(HEADER_LEN..).unwrap_or(&[])))
    }

    /// Writes the 8-byte header for a payload of `payload_len` bytes with a zero checksum
    /// (call [`fill_checksum`] once the payload is in place to compute one).
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<usize, WireError> {
        let length = payload_len
            .checked_add(HEADER_LEN)
            .and_then(|l| u16::try_from(l).ok())
            .ok_or(WireError::Malformed)?;
        let h = buf
            .first_chunk_mut::<HEADER_LEN>()
            .ok_or(WireError::BufferTooSmall)?;
        field::put16(h, offset::SRC_PORT, self.src_port);
        field::put16(h, offset::DST_PORT, self.dst_port);
        field::put16(h, offset::LENGTH, length);
        field::put16(h, offset::CHECKSUM, 0);
        Ok(HEADER_LEN)
    }
}

/// IP protocol number of UDP.
pub const PROTOCOL_UDP: u8 = 17;

/// Computes and stores the checksum of a whole datagram (header and payload, as its length
/// field says); a computed zero is sent as 0xFFFF (RFC 768).
pub fn fill_checksum(datagram: &mut [u8], src: Ipv4Addr, dst: Ipv4Addr) -> Result<(), WireError> {
    let h = datagram
        .first_chunk::<HEADER_LEN>()
        .ok_or(WireError::Truncated)?;
    let length = field::be16(h, offset::LENGTH);
    let whole = datagram
        .get_mut(..usize::from(length))
        .ok_or(WireError::Truncated)?;
    field::put16(whole, offset::CHECKSUM, 0);
    let sum = checksum::pseudo_header_v4(src, dst, PROTOCOL_UDP, length) + checksum::sum(whole);
    let c = match !checksum::fold(sum) {
        0 => 0xFFFF,
        c => c,
    };
    field::put16(whole, offset::CHECKSUM, c);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

    fn datagram(repr: UdpRepr, payload: &[u8], with_checksum: bool) -> Vec<u8> {
        let mut d = vec![0u8; HEADER_LEN + payload.len()];
        repr.emit(&mut d, payload.len()).expect("room");
        d[HEADER_LEN..].copy_from_slice(payload);
        if with_checksum {
            fill_checksum(&mut d, A, B).expect("whole");
        }
        d
    }

    #[test]
    fn known_checksum() {
        // Checked with Python's reference sum: ports 4791 -> 4791, payload "ab".
        let d = datagram(
            UdpRepr {
                src_port: 4791,
                dst_port: 4791,
            },
            b"ab",
            true,
        );
        let mut sum = 0u32;
        for w in [
            0x0a00, 0x0001, 0x0a00, 0x0002, 17, 10, 4791, 4791, 10, 0x6162,
        ] {
            sum += w;
        }
        let expect = !((sum & 0xFFFF) + (sum >> 16)) as u16;
        assert_eq!(u16::from_be_bytes([d[6], d[7]]), expect);
    }

    #[test]
    fn short_and_inconsistent_lengths_are_errors() {
        let d = datagram(
            UdpRepr {
                src_port: 1,
                dst_port: 2,
            },
            b"hello",
            true,
        );
        assert_eq!(
            UdpRepr::parse(&d[..7], A, B, UdpChecksum::Verify),
            Err(WireError::Truncated)
        );
        assert_eq!(
            UdpRepr::parse(&d[..12], A, B, UdpChecksum::Verify),
            Err(WireError::Truncated)
        );
        let mut bad = d.clone();
        bad[5] = 7; // length 7 < 8
        bad[4] = 0;
        assert_eq!(
            UdpRepr::parse(&bad, A, B, UdpChecksum::Ignore),
            Err(WireError::Malformed)
        );
        let mut flipped = d.clone();
        flipped[9] ^= 1;
        assert_eq!(
            UdpRepr::parse(&flipped, A, B, UdpChecksum::Verify),
            Err(WireError::Checksum)
        );
        assert!(UdpRepr::parse(&flipped, A, B, UdpChecksum::Ignore).is_ok());
    }

    proptest! {
        #[test]
        fn round_trip(src_port: u16, dst_port: u16, payload in proptest::collection::vec(any::<u8>(), 0..64), sum: bool, pad in 0usize..4) {
            let repr = UdpRepr { src_port, dst_port };
            let mut d = datagram(repr, &payload, sum);
            d.extend(std::iter::repeat_n(0xEE, pad));
            let (got, p) = UdpRepr::parse(&d, A, B, UdpChecksum::Verify).expect("valid");
            prop_assert_eq!(got, repr);
            prop_assert_eq!(p, &payload[..]);
        }

        #[test]
        fn arbitrary_bytes_never_panic(d in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = UdpRepr::parse(&d, A, B, UdpChecksum::Verify);
            let mut m = d.clone();
            let _ = fill_checksum(&mut m, A, B);
        }
    }
}
