//! The InfiniBand Base Transport Header (IBA vol. 1, chapter 9), 12 bytes, first in every RoCEv2 packet.
//!
//! ```text
//! byte 0      opcode
//! byte 1      SE (bit 7) | M (bit 6) | pad count (bits 5-4) | TVer (bits 3-0)
//! bytes 2-3   P_Key
//! byte 4      FECN (bit 7) | BECN (bit 6) | reserved (RoCEv2 annex A17.4.2; resv8a in IBA)
//! bytes 5-7   destination QP
//! byte 8      AckReq (bit 7) | reserved
//! bytes 9-11  PSN
//! ```
//!
//! No-panic contract: [`BthRepr::parse`] takes any bytes and returns a [`RoceError`] for a
//! short header, an unknown opcode or a transport version other than 0.

use super::error::{chunk, chunk_mut, RoceError};
use super::opcode::Opcode;
use super::psn::Psn;

/// Length of the BTH.
pub const HEADER_LEN: usize = 12;

/// Byte offsets of the BTH's fields.
pub(crate) mod offset {
    pub(crate) const OPCODE: usize = 0;
    pub(crate) const FLAGS: usize = 1;
    pub(crate) const PKEY: usize = 2;
    /// FECN, BECN and reserved bits: variant, so masked out of the ICRC.
    pub(crate) const FECN_BECN: usize = 4;
    pub(crate) const DEST_QP: usize = 5;
    pub(crate) const ACK_REQ: usize = 8;
    pub(crate) const PSN: usize = 9;
}

const SE: u8 = 0x80;
const MIG: u8 = 0x40;
const FECN: u8 = 0x80;
const BECN: u8 = 0x40;
const ACK_REQ: u8 = 0x80;

/// The default partition key (full membership).
pub const DEFAULT_PKEY: u16 = 0xFFFF;
/// The largest 24-bit queue pair number.
pub const MAX_QP: u32 = (1 << 24) - 1;

/// A parsed BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BthRepr {
    /// The operation.
    pub opcode: Opcode,
    /// Solicited event: the responder should raise a completion event.
    pub solicited: bool,
    /// Migration state (M bit): 1 once path migration has happened; RoCE sends 1.
    pub migreq: bool,
    /// Bytes of padding that bring the payload to a multiple of 4 (0-3).
    pub pad_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Forward explicit congestion notification (RoCEv2 leaves it to IP ECN; carried as is).
    pub fecn: bool,
    /// Backward explicit congestion notification.
    pub becn: bool,
    /// Destination queue pair (24 bits).
    pub dest_qp: u32,
    /// The requester asks for an acknowledgement of this packet.
    pub ack_req: bool,
    /// Packet sequence number.
    pub psn: Psn,
}

impl BthRepr {
    /// Parses the first 12 bytes of `b`; the reserved bits are ignored.
    pub fn parse(b: &[u8]) -> Result<BthRepr, RoceError> {
        let h = chunk::<HEADER_LEN>(b)?;
        let opcode = Opcode::from_u8(h[offset::OPCODE])
            .ok_or(RoceError::UnknownOpcode(h[offset::OPCODE]))?;
        let flags = h[offset::FLAGS];
        let tver = flags & 0x0F;
        // IBA: a packet whose TVer the receiver does not support is dropped.
        if tver != 0 {
            return Err(RoceError::TransportVersion(tver));
        }
        let be24 = |o: usize| u32::from_be_bytes([0, h[o], h[o + 1], h[o + 2]]);
        Ok(BthRepr {
            opcode,
            solicited: flags & SE != 0,
            migreq: flags & MIG != 0,
            pad_count: (flags >> 4) & 0b11,
            pkey: u16::from_be_bytes([h[offset::PKEY], h[offset::PKEY + 1]]),
            fecn: h[offset::FECN_BECN] & FECN != 0,
            becn: h[offset::FECN_BECN] & BECN != 0,
            dest_qp: be24(offset::DEST_QP),
            ack_req: h[offset::ACK_REQ] & ACK_REQ != 0,
            psn: Psn::new(be24(offset::PSN)),
        })
    }

    /// Writes the 12-byte header; `FieldRange` if the QP exceeds 24 bits or the pad count 3.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, RoceError> {
        if self.dest_qp > MAX_QP {
            return Err(RoceError::FieldRange("destination QP"));
        }
        if self.pad_count > 3 {
            return Err(RoceError::FieldRange("pad count"));
        }
        let h = chunk_mut::<HEADER_LEN>(buf)?;
        h[offset::OPCODE] = self.opcode.to_u8();
        h[offset::FLAGS] =
            (SE * self.solicited as u8) | (MIG * self.migreq as u8) | (self.pad_count << 4);
        h[offset::PKEY..offset::PKEY + 2].copy_from_slice(&self.pkey.to_be_bytes());
        h[offset::FECN_BECN] = (FECN * self.fecn as u8) | (BECN * self.becn as u8);
        h[offset::DEST_QP..offset::DEST_QP + 3].copy_from_slice(&self.dest_qp.to_be_bytes()[1..]);
        h[offset::ACK_REQ] = ACK_REQ * self.ack_req as u8;
        h[offset::PSN..offset::PSN + 3].copy_from_slice(&self.psn.value().to_be_bytes()[1..]);
        Ok(HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> BthRepr {
        BthRepr {
            opcode: Opcode::WriteOnly,
            solicited: true,
            migreq: true,
            pad_count: 2,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: true,
            dest_qp: 0x00AB_CDEF,
            ack_req: true,
            psn: Psn::new(0x12_3456),
        }
    }

    #[test]
    fn layout_is_the_spec_s() {
        let mut b = [0u8; HEADER_LEN];
        assert_eq!(sample().emit(&mut b), Ok(HEADER_LEN));
        assert_eq!(
            b,
            [0x0A, 0xE0, 0xFF, 0xFF, 0x40, 0xAB, 0xCD, 0xEF, 0x80, 0x12, 0x34, 0x56]
        );
        assert_eq!(BthRepr::parse(&b), Ok(sample()));
    }

    #[test]
    fn bad_headers_are_typed_errors() {
        let mut b = [0u8; HEADER_LEN];
        sample().emit(&mut b).expect("room");
        assert_eq!(
            BthRepr::parse(&b[..11]),
            Err(RoceError::Truncated { need: 12, have: 11 })
        );
        let mut unknown = b;
        unknown[0] = 0x64; // UD SEND Only: not RC
        assert_eq!(
            BthRepr::parse(&unknown),
            Err(RoceError::UnknownOpcode(0x64))
        );
        let mut tver = b;
        tver[1] |= 1;
        assert_eq!(BthRepr::parse(&tver), Err(RoceError::TransportVersion(1)));
        let wide = BthRepr {
            dest_qp: 1 << 24,
            ..sample()
        };
        assert_eq!(
            wide.emit(&mut b),
            Err(RoceError::FieldRange("destination QP"))
        );
        assert_eq!(
            sample().emit(&mut [0u8; 4]),
            Err(RoceError::BufferTooSmall { need: 12, have: 4 })
        );
    }
}
