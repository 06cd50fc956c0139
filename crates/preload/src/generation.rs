//! The fork generation: bumped in every forked child (fork.rs's `pthread_atfork` handler).
//! Objects remember the generation they were made in; an older one was inherited across
//! fork and is stale. A leaf, so that the descriptor objects and the fork handler that
//! resets them need not import each other.

use std::sync::atomic::{AtomicU32, Ordering};

static GENERATION: AtomicU32 = AtomicU32::new(0);

/// The current fork generation (0 in the process that loaded the library).
#[inline]
pub fn generation() -> u32 {
    GENERATION.load(Ordering::Acquire)
}

/// Starts a new generation: called in a forked child, first thing (an atomic add only, so
/// it is safe between fork and exec).
pub(crate) fn advance() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
}
