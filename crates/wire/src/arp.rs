//! ARP for Ethernet/IPv4 (RFC 826). Other hardware/protocol types are rejected.

use crate::field;
use crate::{EthernetAddress, WireError};
use std::net::Ipv4Addr;

/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = 28;

/// The ARP operation code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArpOperation {
    /// Request (1).
    Request,
    /// Reply (2).
    Reply,
    /// Any other operation code.
    Unknown(u16),
}

impl From<u16> for ArpOperation {
    #[inline]
    fn from(v: u16) -> Self {
        match v {
            1 => ArpOperation::Request,
            2 => ArpOperation::Reply,
            other => ArpOperation::Unknown(other),
        }
    }
}

impl From<ArpOperation> for u16 {
    #[inline]
    fn from(op: ArpOperation) -> u16 {
        match op {
            ArpOperation::Request => 1,
            ArpOperation::Reply => 2,
            ArpOperation::Unknown(v) => v,
        }
    }
}

/// A parsed Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpRepr {
    /// Operation code.
    pub operation: ArpOperation,
    /// Sender hardware address.
    pub source_mac: EthernetAddress,
    /// Sender protocol address.
    pub source_ip: Ipv4Addr,
    /// Target hardware address.
    pub target_mac: EthernetAddress,
    /// Target protocol address.
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    /// Parses an ARP packet; trailing bytes (Ethernet padding) are ignored.
    #[inline]
    pub fn parse(packet: &[u8]) -> Result<ArpRepr, WireError> {
        let p = packet
            .first_chunk::<PACKET_LEN>()
            .ok_or(WireError::Truncated)?;
        // htype 1 (Ethernet), ptype 0x0800 (IPv4), hlen 6, plen 4.
        if field::be16(p, 0) != 1 || field::be16(p, 2) != 0x0800 || field::be16(p, 4) != 0x0604 {
            return Err(WireError::Malformed);
        }
        Ok(ArpRepr {
            operation: ArpOperation::from(field::be16(p, 6)),
            source_mac: field::mac(p, 8),
            source_ip: field::ipv4(p, 14),
            target_mac: field::mac(p, 18),
            target_ip: field::ipv4(p, 24),
        })
    }

    /// Writes the 28-byte packet and returns its length.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let p = buf
            .first_chunk_mut::<PACKET_LEN>()
            .ok_or(WireError::BufferTooSmall)?;
        field::put(p, 0, [0x00, 0x01, 0x08, 0x00, 0x06, 0x04]);
        field::put16(p, 6, self.operation.into());
        field::put(p, 8, self.source_mac.0);
        field::put(p, 14, self.source_ip.octets());
        field::put(p, 18, self.target_mac.0);
        field::put(p, 24, self.target_ip.octets());
        Ok(PACKET_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // Who has 192.168.1.1? Tell 192.168.1.100 (from 02:00:00:00:00:64).
    const REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, // Ethernet/IPv4, request
        0x02, 0x00, 0x00, 0x00, 0x00, 0x64, 192, 168, 1, 100, // sender
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 192, 168, 1, 1, // target
    ];

    #[test]
    fn parse_request() {
        let r = ArpRepr::parse(&REQUEST).unwrap();
        assert_eq!(r.operation, ArpOperation::Request);
        assert_eq!(r.source_mac, EthernetAddress([2, 0, 0, 0, 0, 0x64]));
        assert_eq!(r.source_ip, Ipv4Addr::new(192, 168, 1, 100));
        assert_eq!(r.target_mac, EthernetAddress::default());
        assert_eq!(r.target_ip, Ipv4Addr::new(192, 168, 1, 1));
        let mut out = [0xEEu8; 30];
        assert_eq!(r.emit(&mut out), Ok(28));
        assert_eq!(out[..28], REQUEST);
        // Trailing Ethernet padding is ignored.
        let mut padded = REQUEST.to_vec();
        padded.extend_from_slice(&[0; 18]);
        assert_eq!(ArpRepr::parse(&padded), Ok(r));
    }

    #[test]
    fn errors() {
        assert_eq!(ArpRepr::parse(&REQUEST[..27]), Err(WireError::Truncated));
        for (i, v) in [(1, 6u8), (2, 0x86), (4, 8), (5, 16)] {
            let mut p = REQUEST;
            p[i] = v;
            assert_eq!(ArpRepr::parse(&p), Err(WireError::Malformed), "byte {i}");
        }
        let mut p = REQUEST;
        p[7] = 9;
        assert_eq!(
            ArpRepr::parse(&p).unwrap().operation,
            ArpOperation::Unknown(9)
        );
        let r = ArpRepr::parse(&REQUEST).unwrap();
        assert_eq!(r.emit(&mut [0u8; 27]), Err(WireError::BufferTooSmall));
    }

    proptest! {
        #[test]
        fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = ArpRepr::parse(&data);
        }

        #[test]
        fn round_trip(op in any::<u16>(), sm in any::<[u8; 6]>(), si in any::<u32>(),
                      tm in any::<[u8; 6]>(), ti in any::<u32>()) {
            let r = ArpRepr {
                operation: ArpOperation::from(op),
                source_mac: EthernetAddress(sm),
                source_ip: Ipv4Addr::from(si),
                target_mac: EthernetAddress(tm),
                target_ip: Ipv4Addr::from(ti),
            };
            let mut buf = [0u8; PACKET_LEN];
            prop_assert_eq!(r.emit(&mut buf), Ok(PACKET_LEN));
            prop_assert_eq!(ArpRepr::parse(&buf), Ok(r));
        }
    }
}
