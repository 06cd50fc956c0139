//! Diagnostics on stderr, prefixed `sluice-preload:`.
//!
//! Each distinct message is printed once (unsupported calls can come in a hot loop), and
//! `SLUICE_PRELOAD_LOG=debug` adds a line per decision. Lines are formatted on the stack
//! and written with the real write(2) in one call: the logger may run before `main`, in a
//! fork child, or inside another interposed call, so it neither allocates nor locks.

use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// Longest line; longer messages are cut.
const LINE: usize = 512;
/// Distinct messages remembered; once full, further new messages are dropped (bounded).
const SEEN_SLOTS: usize = 512;

static SEEN: [AtomicU64; SEEN_SLOTS] = [const { AtomicU64::new(0) }; SEEN_SLOTS];
/// 0: not read yet, 1: normal, 2: debug.
static LEVEL: AtomicU8 = AtomicU8::new(0);

/// A line being formatted on the stack; text past its capacity is dropped.
pub struct LineBuf {
    buf: [u8; LINE],
    len: usize,
}

impl LineBuf {
    /// An empty line.
    pub const fn new() -> LineBuf {
        LineBuf {
            buf: [0; LINE],
            len: 0,
        }
    }

    /// The bytes written so far.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Default for LineBuf {
    fn default() -> Self {
        LineBuf::new()
    }
}

impl fmt::Write for LineBuf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = LINE - self.len;
        let n = s.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// FNV-1a over formatted text, so a message can be keyed without building a String.
struct Hasher(u64);

impl fmt::Write for Hasher {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        Ok(())
    }
}

/// Whether `SLUICE_PRELOAD_LOG=debug` is set (read once).
pub fn debug_enabled() -> bool {
    let mut level = LEVEL.load(Ordering::Relaxed);
    if level == 0 {
        // SAFETY: getenv with a NUL-terminated name; the result is only read before any
        // further environment change could free it, and getenv neither allocates nor locks.
        let value = unsafe { libc::getenv(c"SLUICE_PRELOAD_LOG".as_ptr()) };
        level = if value.is_null() {
            1
        } else {
            // SAFETY: getenv returned a NUL-terminated string owned by the environment.
            let v = unsafe { std::ffi::CStr::from_ptr(value) };
            if v.to_bytes().eq_ignore_ascii_case(b"debug") {
                2
            } else {
                1
            }
        };
        LEVEL.store(level, Ordering::Relaxed);
    }
    level == 2
}

/// True the first time this exact message is seen (then false; also false once the table
/// of remembered messages is full, so a flood of distinct messages stays bounded).
pub fn first_time(args: fmt::Arguments<'_>) -> bool {
    let mut h = Hasher(0xcbf2_9ce4_8422_2325);
    let _ = h.write_fmt(args);
    let key = h.0.max(1);
    let start = (key as usize) % SEEN_SLOTS;
    for i in 0..SEEN_SLOTS {
        let slot = &SEEN[(start + i) % SEEN_SLOTS];
        match slot.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(existing) if existing == key => return false,
            Err(_) => continue,
        }
    }
    false
}

/// Writes one line `sluice-preload: MESSAGE` to stderr.
pub fn emit(args: fmt::Arguments<'_>) {
    let mut line = LineBuf::new();
    let _ = line.write_str("sluice-preload: ");
    let _ = line.write_fmt(args);
    if line.len == LINE {
        line.len -= 1;
    }
    let _ = line.write_str("\n");
    crate::real::write_all_stderr(line.as_bytes());
}

/// Logs a message the first time it occurs.
#[macro_export]
macro_rules! log_once {
    ($($arg:tt)*) => {
        if $crate::log::first_time(format_args!($($arg)*)) {
            $crate::log::emit(format_args!($($arg)*));
        }
    };
}

/// Logs a message when `SLUICE_PRELOAD_LOG=debug`.
#[macro_export]
macro_rules! log_debug {
    ($($arg:tt)*) => {
        if $crate::log::debug_enabled() {
            $crate::log::emit(format_args!($($arg)*));
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_new_once() {
        assert!(first_time(format_args!("test message {}", 41)));
        assert!(!first_time(format_args!("test message {}", 41)));
        assert!(first_time(format_args!("test message {}", 42)));
    }

    #[test]
    fn long_lines_are_cut_not_overflowed() {
        let mut l = LineBuf::new();
        for _ in 0..100 {
            let _ = l.write_str("0123456789");
        }
        assert_eq!(l.as_bytes().len(), LINE);
    }
}
