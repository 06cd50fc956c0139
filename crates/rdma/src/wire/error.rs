//! The one error type of the RoCEv2 parsers and emitters.

use super::opcode::Opcode;
use core::fmt;
use sluice_wire::WireError;

/// Why a RoCEv2 packet could not be parsed or emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoceError {
    /// The input is shorter than its headers require.
    Truncated {
        /// Bytes the headers need.
        need: usize,
        /// Bytes there are.
        have: usize,
    },
    /// The BTH opcode is not one of the RC opcodes this transport knows.
    UnknownOpcode(u8),
    /// The BTH transport header version is not 0.
    TransportVersion(u8),
    /// The AETH syndrome is a reserved encoding.
    ReservedSyndrome(u8),
    /// The pad count is larger than the payload it pads.
    PadCount {
        /// The BTH pad count.
        pad: u8,
        /// Payload bytes present, pad included.
        payload: usize,
    },
    /// A payload on an opcode that carries none (READ request, ACKNOWLEDGE).
    UnexpectedPayload(Opcode),
    /// On emit, the extension headers given do not match the opcode's.
    HeaderMismatch(Opcode),
    /// On emit, a field exceeds its width (name of the field).
    FieldRange(&'static str),
    /// The frame is not RoCEv2 (not IPv4, not UDP, or not to port 4791).
    NotRoce,
    /// The ICRC did not verify.
    Icrc {
        /// The CRC computed over the invariant fields.
        computed: u32,
        /// The CRC the packet carries.
        carried: u32,
    },
    /// The Ethernet, IPv4 or UDP encapsulation is bad.
    Encapsulation(WireError),
    /// The output buffer is too small.
    BufferTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes given.
        have: usize,
    },
}

impl fmt::Display for RoceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RoceError::Truncated { need, have } => {
                write!(f, "RoCE packet truncated: need {need} bytes, have {have}")
            }
            RoceError::UnknownOpcode(op) => {
                write!(f, "unknown or unsupported BTH opcode {op:#04x}")
            }
            RoceError::TransportVersion(v) => {
                write!(f, "BTH transport version {v} (only 0 exists)")
            }
            RoceError::ReservedSyndrome(s) => write!(f, "reserved AETH syndrome {s:#04x}"),
            RoceError::PadCount { pad, payload } => {
                write!(f, "BTH pad count {pad} exceeds the {payload}-byte payload")
            }
            RoceError::UnexpectedPayload(op) => write!(f, "{op:?} carries no payload"),
            RoceError::HeaderMismatch(op) => {
                write!(f, "extension headers do not match opcode {op:?}")
            }
            RoceError::FieldRange(name) => write!(f, "{name} does not fit its field"),
            RoceError::NotRoce => f.write_str("not a RoCEv2 frame (IPv4/UDP port 4791)"),
            RoceError::Icrc { computed, carried } => {
                write!(
                    f,
                    "ICRC mismatch: computed {computed:#010x}, carried {carried:#010x}"
                )
            }
            RoceError::Encapsulation(e) => write!(f, "RoCE encapsulation: {e}"),
            RoceError::BufferTooSmall { need, have } => {
                write!(f, "buffer too small: need {need} bytes, have {have}")
            }
        }
    }
}

impl std::error::Error for RoceError {}

impl From<WireError> for RoceError {
    fn from(e: WireError) -> Self {
        RoceError::Encapsulation(e)
    }
}

/// The first `N` bytes of `b`, or a `Truncated` error.
pub(crate) fn chunk<const N: usize>(b: &[u8]) -> Result<&[u8; N], RoceError> {
    b.first_chunk::<N>().ok_or(RoceError::Truncated {
        need: N,
        have: b.len(),
    })
}

/// The first `N` bytes of `b` to write, or a `BufferTooSmall` error.
pub(crate) fn chunk_mut<const N: usize>(b: &mut [u8]) -> Result<&mut [u8; N], RoceError> {
    let have = b.len();
    b.first_chunk_mut::<N>()
        .ok_or(RoceError::BufferTooSmall { need: N, have })
}
