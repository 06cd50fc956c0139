//! The control socket's bound on one message, a leaf that the control protocol and the
//! requests it carries (admin.rs) both size themselves by.

/// Largest control message (a capture request carries up to 4096 filter instructions).
pub const MAX_MESSAGE: usize = 128 << 10;
