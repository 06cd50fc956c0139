//! The one error type of the MTP parsers and emitters.

use core::fmt;
use sluice_wire::WireError;

/// Why an MTP packet could not be parsed or emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MtpError {
    /// The input is shorter than the header or a length field requires.
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes there are.
        have: usize,
    },
    /// The version nibble is not [`super::VERSION`].
    Version(u8),
    /// The header length field disagrees with the list counts (it says, the counts say).
    HeaderLength {
        /// Bytes the header length field gives.
        field: usize,
        /// Bytes the fixed part and the lists need.
        lists: usize,
    },
    /// More path-feedback entries filled than slots reserved.
    FeedbackCount {
        /// Entries filled.
        count: u8,
        /// Slots reserved.
        slots: u8,
    },
    /// The payload present disagrees with the packet length field.
    PayloadLength {
        /// The packet length field.
        field: usize,
        /// Payload bytes present.
        present: usize,
    },
    /// The packet lies outside its message (offset + length past the message length, or
    /// the packet number not below the message's packet count).
    OutsideMessage,
    /// The checksum did not verify.
    Checksum,
    /// On emit, a list is longer than its count field or the header length allows.
    ListTooLong(&'static str),
    /// The Ethernet, IPv4 or UDP encapsulation is bad, or the frame is not MTP.
    Encapsulation(WireError),
    /// The frame is IPv4 but neither protocol 253 nor UDP to the MTP port.
    NotMtp,
    /// The output buffer is too small.
    BufferTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes there are.
        have: usize,
    },
}

impl fmt::Display for MtpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MtpError::Truncated { need, have } => {
                write!(f, "MTP packet truncated: need {need} bytes, have {have}")
            }
            MtpError::Version(v) => write!(f, "MTP version {v} is not supported"),
            MtpError::HeaderLength { field, lists } => write!(
                f,
                "MTP header length {field} disagrees with its lists ({lists} bytes)"
            ),
            MtpError::FeedbackCount { count, slots } => write!(
                f,
                "MTP path feedback fills {count} entries of {slots} slots"
            ),
            MtpError::PayloadLength { field, present } => write!(
                f,
                "MTP packet length {field} but {present} payload bytes present"
            ),
            MtpError::OutsideMessage => f.write_str("MTP packet lies outside its message"),
            MtpError::Checksum => f.write_str("MTP checksum mismatch"),
            MtpError::ListTooLong(list) => write!(f, "MTP {list} list too long to emit"),
            MtpError::Encapsulation(e) => write!(f, "MTP encapsulation: {e}"),
            MtpError::NotMtp => f.write_str("not an MTP packet"),
            MtpError::BufferTooSmall { need, have } => {
                write!(
                    f,
                    "buffer too small for MTP: need {need} bytes, have {have}"
                )
            }
        }
    }
}

impl std::error::Error for MtpError {}

impl From<WireError> for MtpError {
    fn from(e: WireError) -> MtpError {
        MtpError::Encapsulation(e)
    }
}
