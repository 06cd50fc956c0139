//! The error type shared by every parser and emitter in this crate.

use core::fmt;

/// Why a packet could not be parsed or emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// The input is shorter than its headers or length fields require.
    Truncated,
    /// A field holds a value that is invalid or unsupported.
    Malformed,
    /// A checksum did not verify.
    Checksum,
    /// The output buffer is too small for what is to be emitted.
    BufferTooSmall,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WireError::Truncated => "packet truncated",
            WireError::Malformed => "packet malformed",
            WireError::Checksum => "checksum mismatch",
            WireError::BufferTooSmall => "buffer too small",
        })
    }
}

impl std::error::Error for WireError {}
