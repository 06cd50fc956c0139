//! The error codes every function returns: 0 or a count for success, a negative
//! [`sluice_error`] for failure. Never an abort: a panic inside is caught and returned too.

use std::ffi::c_char;

use sluice_tcp::{ConnError, ConnectError, Error, ListenError};

/// A function's result: `SLUICE_ERROR_OK` (0) or a negative code. Functions that return a
/// count (`int64_t`) return one of these codes when negative.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum sluice_error {
    /// Success.
    Ok = 0,
    /// A pointer argument was NULL.
    NullPointer = -1,
    /// An argument was invalid: port 0, own or broadcast address, a misaligned pointer, a
    /// length over `PTRDIFF_MAX`, an unknown name.
    InvalidArgument = -2,
    /// The configuration was refused (`sluice_config_check` says why).
    InvalidConfig = -3,
    /// The connection or listener handle is closed, stale, was never issued, or is another
    /// stack's.
    InvalidHandle = -4,
    /// The caller's buffer is too small; nothing was taken (a frame stays queued).
    BufferTooSmall = -5,
    /// Nothing to do now; retry after an event.
    WouldBlock = -6,
    /// The port is already in use.
    AddrInUse = -7,
    /// The connection table, listener table or ephemeral ports are exhausted.
    NoResources = -8,
    /// The connection is not open for this operation (e.g. send after shutdown).
    NotConnected = -9,
    /// The peer reset the connection.
    ConnReset = -10,
    /// The peer refused the connection.
    ConnRefused = -11,
    /// The connection timed out.
    ConnTimedOut = -12,
    /// The application aborted the connection.
    ConnAborted = -13,
    /// The call panicked inside the core (a bug); the stack is now poisoned.
    Panic = -14,
    /// An earlier call on this stack panicked; only `sluice_stack_free` is allowed.
    Poisoned = -15,
}

/// Every code, for `sluice_error::from_code` (not exported to C).
const ALL_CODES: [sluice_error; 16] = [
    sluice_error::Ok,
    sluice_error::NullPointer,
    sluice_error::InvalidArgument,
    sluice_error::InvalidConfig,
    sluice_error::InvalidHandle,
    sluice_error::BufferTooSmall,
    sluice_error::WouldBlock,
    sluice_error::AddrInUse,
    sluice_error::NoResources,
    sluice_error::NotConnected,
    sluice_error::ConnReset,
    sluice_error::ConnRefused,
    sluice_error::ConnTimedOut,
    sluice_error::ConnAborted,
    sluice_error::Panic,
    sluice_error::Poisoned,
];

impl sluice_error {
    /// Every code.
    pub fn all() -> [sluice_error; 16] {
        ALL_CODES
    }

    /// The code for a number, if it is one.
    pub fn from_code(code: i64) -> Option<sluice_error> {
        ALL_CODES.into_iter().find(|e| *e as i64 == code)
    }

    /// The message, NUL-terminated for C.
    fn message(self) -> &'static std::ffi::CStr {
        match self {
            sluice_error::Ok => c"success",
            sluice_error::NullPointer => c"a pointer argument was NULL",
            sluice_error::InvalidArgument => c"invalid argument",
            sluice_error::InvalidConfig => c"invalid configuration",
            sluice_error::InvalidHandle => c"closed, stale or unknown handle",
            sluice_error::BufferTooSmall => c"buffer too small",
            sluice_error::WouldBlock => c"operation would block",
            sluice_error::AddrInUse => c"address in use",
            sluice_error::NoResources => c"no free connection slot, listener or port",
            sluice_error::NotConnected => c"not connected for this operation",
            sluice_error::ConnReset => c"connection reset by peer",
            sluice_error::ConnRefused => c"connection refused",
            sluice_error::ConnTimedOut => c"connection timed out",
            sluice_error::ConnAborted => c"connection aborted",
            sluice_error::Panic => c"internal error (panic caught); the stack is poisoned",
            sluice_error::Poisoned => c"the stack is poisoned by an earlier internal error",
        }
    }
}

impl core::fmt::Display for sluice_error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.message().to_string_lossy())
    }
}

impl std::error::Error for sluice_error {}

impl From<Error> for sluice_error {
    fn from(e: Error) -> Self {
        match e {
            Error::WouldBlock => sluice_error::WouldBlock,
            Error::InvalidHandle => sluice_error::InvalidHandle,
            Error::AddrInUse => sluice_error::AddrInUse,
            Error::NoResources => sluice_error::NoResources,
            Error::NotConnected => sluice_error::NotConnected,
            Error::InvalidArgument => sluice_error::InvalidArgument,
            Error::Connection(c) => c.into(),
        }
    }
}

impl From<ConnError> for sluice_error {
    fn from(e: ConnError) -> Self {
        match e {
            ConnError::Reset => sluice_error::ConnReset,
            ConnError::Refused => sluice_error::ConnRefused,
            ConnError::TimedOut => sluice_error::ConnTimedOut,
            ConnError::Aborted => sluice_error::ConnAborted,
        }
    }
}

impl From<ListenError> for sluice_error {
    fn from(e: ListenError) -> Self {
        Error::from(e).into()
    }
}

impl From<ConnectError> for sluice_error {
    fn from(e: ConnectError) -> Self {
        Error::from(e).into()
    }
}

/// A static, NUL-terminated message for a code (never NULL; "unknown error code" for a
/// number that is not one).
#[no_mangle]
pub extern "C" fn sluice_strerror(code: i64) -> *const c_char {
    sluice_error::from_code(code)
        .map_or(c"unknown error code", sluice_error::message)
        .as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_distinct_negative_and_has_its_own_message() {
        let all = sluice_error::all();
        for (i, e) in all.iter().enumerate() {
            assert_eq!(sluice_error::from_code(*e as i64), Some(*e));
            assert!(*e as i32 <= 0);
            assert_eq!((*e as i32 == 0), (*e == sluice_error::Ok));
            for other in &all[i + 1..] {
                assert_ne!(*e as i32, *other as i32);
                assert_ne!(e.to_string(), other.to_string());
            }
            // SAFETY: sluice_strerror returns a static NUL-terminated string.
            let m = unsafe { std::ffi::CStr::from_ptr(sluice_strerror(*e as i64)) };
            assert_eq!(m.to_str().unwrap(), e.to_string());
        }
        assert_eq!(sluice_error::from_code(1), None);
        assert_eq!(sluice_error::from_code(-16), None);
        // SAFETY: as above.
        let unknown = unsafe { std::ffi::CStr::from_ptr(sluice_strerror(i64::MIN)) };
        assert_eq!(unknown.to_str().unwrap(), "unknown error code");
    }

    #[test]
    fn core_errors_map_to_their_codes() {
        assert_eq!(
            sluice_error::from(Error::InvalidHandle),
            sluice_error::InvalidHandle
        );
        assert_eq!(
            sluice_error::from(Error::WouldBlock),
            sluice_error::WouldBlock
        );
        assert_eq!(
            sluice_error::from(Error::Connection(ConnError::Refused)),
            sluice_error::ConnRefused
        );
        assert_eq!(
            sluice_error::from(ListenError::AddrInUse),
            sluice_error::AddrInUse
        );
        assert_eq!(
            sluice_error::from(ConnectError::NoResources),
            sluice_error::NoResources
        );
    }
}
