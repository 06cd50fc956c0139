//! The ACK Extended Transport Header (IBA vol. 1, chapter 9), 4 bytes: the responder's syndrome and
//! message sequence number, in ACKNOWLEDGE and READ response packets.
//!
//! ```text
//! byte 0      syndrome: reserved (bit 7) | type (bits 6-5) | value (bits 4-0)
//!             type 00 ACK (value: credit count), 01 RNR NAK (value: RNR timer),
//!             10 reserved, 11 NAK (value: NAK code)
//! bytes 1-3   MSN
//! ```
//!
//! No-panic contract: [`AethRepr::parse`] takes any bytes; a short header is `Truncated`, a
//! reserved type or NAK code is `ReservedSyndrome`.

use super::error::{chunk, chunk_mut, RoceError};

/// Length of the AETH.
pub const HEADER_LEN: usize = 4;
/// The credit count that means "no end-to-end flow control" (IBA: "invalid" credit count).
pub const CREDITS_INVALID: u8 = 0x1F;
/// The largest 24-bit message sequence number.
pub const MAX_MSN: u32 = (1 << 24) - 1;

/// The NAK codes (IBA's NAK code table) this transport sends and understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// PSN sequence error: the requester must retransmit from the expected PSN.
    PsnSequenceError = 0,
    /// Invalid request (unsupported opcode, length error, ...).
    InvalidRequest = 1,
    /// Remote access error (bad R_Key, bounds, access flags).
    RemoteAccessError = 2,
    /// Remote operational error.
    RemoteOperationalError = 3,
}

impl NakCode {
    /// Every NAK code, by value.
    pub const ALL: [NakCode; 4] = [
        NakCode::PsnSequenceError,
        NakCode::InvalidRequest,
        NakCode::RemoteAccessError,
        NakCode::RemoteOperationalError,
    ];
}

/// What an AETH says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledgement with an end-to-end credit count (5 bits).
    Ack {
        /// The credit count code, 0-31 ([`CREDITS_INVALID`] for none).
        credits: u8,
    },
    /// Receiver not ready: retry after the encoded timer (5 bits, IBA's RNR timer table).
    RnrNak {
        /// The RNR NAK timer code, 0-31.
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
}

impl Syndrome {
    /// Decodes the syndrome byte; the reserved bit 7 is ignored.
    pub fn from_u8(s: u8) -> Result<Syndrome, RoceError> {
        let value = s & 0x1F;
        match (s >> 5) & 0b11 {
            0b00 => Ok(Syndrome::Ack { credits: value }),
            0b01 => Ok(Syndrome::RnrNak { timer: value }),
            0b11 => NakCode::ALL
                .get(usize::from(value))
                .map(|c| Syndrome::Nak(*c))
                .ok_or(RoceError::ReservedSyndrome(s)),
            _ => Err(RoceError::ReservedSyndrome(s)),
        }
    }

    /// The syndrome byte; `FieldRange` if a credit count or timer exceeds 5 bits.
    pub fn to_u8(self) -> Result<u8, RoceError> {
        match self {
            Syndrome::Ack { credits } if credits <= 0x1F => Ok(credits),
            Syndrome::Ack { .. } => Err(RoceError::FieldRange("AETH credit count")),
            Syndrome::RnrNak { timer } if timer <= 0x1F => Ok(0x20 | timer),
            Syndrome::RnrNak { .. } => Err(RoceError::FieldRange("RNR NAK timer")),
            Syndrome::Nak(code) => Ok(0x60 | code as u8),
        }
    }
}

/// A parsed AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AethRepr {
    /// ACK, RNR NAK or NAK.
    pub syndrome: Syndrome,
    /// Message sequence number: messages the responder has completed (24 bits).
    pub msn: u32,
}

impl AethRepr {
    /// Parses the first 4 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<AethRepr, RoceError> {
        let h = chunk::<HEADER_LEN>(b)?;
        Ok(AethRepr {
            syndrome: Syndrome::from_u8(h[0])?,
            msn: u32::from_be_bytes([0, h[1], h[2], h[3]]),
        })
    }

    /// Writes the 4-byte header; `FieldRange` if the MSN exceeds 24 bits.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, RoceError> {
        if self.msn > MAX_MSN {
            return Err(RoceError::FieldRange("MSN"));
        }
        let syndrome = self.syndrome.to_u8()?;
        let h = chunk_mut::<HEADER_LEN>(buf)?;
        *h = self.msn.to_be_bytes();
        h[0] = syndrome;
        Ok(HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syndromes_encode_as_the_spec_says() {
        let cases = [
            (Syndrome::Ack { credits: 0x1F }, 0x1F),
            (Syndrome::RnrNak { timer: 14 }, 0x2E),
            (Syndrome::Nak(NakCode::PsnSequenceError), 0x60),
            (Syndrome::Nak(NakCode::InvalidRequest), 0x61),
            (Syndrome::Nak(NakCode::RemoteAccessError), 0x62),
            (Syndrome::Nak(NakCode::RemoteOperationalError), 0x63),
        ];
        for (s, byte) in cases {
            assert_eq!(s.to_u8(), Ok(byte));
            assert_eq!(Syndrome::from_u8(byte), Ok(s));
        }
    }

    #[test]
    fn reserved_and_out_of_range_values_are_errors() {
        assert_eq!(
            Syndrome::from_u8(0x40),
            Err(RoceError::ReservedSyndrome(0x40))
        );
        assert_eq!(
            Syndrome::from_u8(0x64),
            Err(RoceError::ReservedSyndrome(0x64))
        );
        assert_eq!(
            Syndrome::Ack { credits: 32 }.to_u8(),
            Err(RoceError::FieldRange("AETH credit count"))
        );
        let a = AethRepr {
            syndrome: Syndrome::Ack { credits: 0 },
            msn: 1 << 24,
        };
        assert_eq!(a.emit(&mut [0u8; 4]), Err(RoceError::FieldRange("MSN")));
        assert_eq!(
            AethRepr::parse(&[0, 0]),
            Err(RoceError::Truncated { need: 4, have: 2 })
        );
    }

    #[test]
    fn layout() {
        let a = AethRepr {
            syndrome: Syndrome::Nak(NakCode::RemoteAccessError),
            msn: 0x01_0203,
        };
        let mut b = [0u8; 4];
        a.emit(&mut b).expect("room");
        assert_eq!(b, [0x62, 1, 2, 3]);
        assert_eq!(AethRepr::parse(&b), Ok(a));
    }
}
