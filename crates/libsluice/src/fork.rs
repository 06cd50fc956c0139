//! What a forked child inherits: attachments it must not use.
//!
//! After fork the child shares the parent's region mapping (MAP_SHARED) and control socket,
//! but the engine knows only the parent. Were the child to post commands or move ring
//! positions it would corrupt the parent's queues, so every attachment made before the fork
//! becomes "inherited": its sockets fail with EBADF (close only forgets them) and nothing of
//! it is touched again in the child. The child attaches afresh if it wants the engine.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bumped in every forked child; an attachment remembers the value it was made under.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

/// Marks every existing attachment of this process as inherited from the parent. Call it in
/// the child right after fork (the preload does so from a pthread_atfork child handler).
///
/// Async-signal-safe: one atomic increment, no lock and no allocation, because between fork
/// and exec the child may only do that much.
pub fn after_fork_child() {
    FORK_GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// The current fork generation.
pub(crate) fn generation() -> u64 {
    FORK_GENERATION.load(Ordering::Relaxed)
}
