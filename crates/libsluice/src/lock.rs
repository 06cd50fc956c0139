//! Locking that ignores poisoning, shared by every file that holds a mutex.

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, ignoring poisoning: the data behind our locks stays consistent at every
/// point a panic could happen, and a panic must not turn into more panics (C ABI callers).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
