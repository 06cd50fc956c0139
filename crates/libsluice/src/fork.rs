//! What a forked child inherits: attachments it must not use.
//!
//! After fork the child shares the parent's region mapping (MAP_SHARED) and control socket,
//! but the engine knows only the parent. Were the child to post commands or move ring
//! positions it would corrupt the parent's queues, so every attachment made before the fork
//! becomes "inherited": its sockets fail with EBADF (close only forgets them) and nothing of
//! it is touched again in the child. The child attaches afresh if it wants the engine.
//!
//! The child also lets go of its copy of each inherited control socket at once: the engine
//! learns that an application died from its control socket hanging up, which cannot happen
//! while a forked child (a worker, a daemonized process) still holds a copy of it.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

/// Bumped in every forked child; an attachment remembers the value it was made under.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

/// Most attachments whose control sockets are tracked (a process normally has one).
const TRACKED: usize = 16;

/// The control sockets of this process's live attachments (-1: an empty entry).
static CONTROL_FDS: [AtomicI32; TRACKED] = [const { AtomicI32::new(-1) }; TRACKED];

/// Marks every existing attachment of this process as inherited from the parent, and drops
/// the child's references to their control sockets (each descriptor is pointed at
/// /dev/null, so the attachment's own close later stays correct). Call it in the child right
/// after fork (the preload does so from a pthread_atfork child handler).
///
/// Async-signal-safe: atomics and open/dup3/close, no lock and no allocation, because
/// between fork and exec the child may only do that much.
pub fn after_fork_child() {
    FORK_GENERATION.fetch_add(1, Ordering::SeqCst);
    let mut null = -1;
    for entry in &CONTROL_FDS {
        let fd = entry.swap(-1, Ordering::SeqCst);
        if fd < 0 {
            continue;
        }
        // Raw system calls: under the preload, libc's dup3/close names resolve to the
        // interposer's own wrappers, which this handler must not re-enter.
        if null < 0 {
            // SAFETY: openat(2) with a NUL-terminated path literal; async-signal-safe.
            null = unsafe {
                libc::syscall(
                    libc::SYS_openat,
                    libc::AT_FDCWD,
                    c"/dev/null".as_ptr(),
                    libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOCTTY,
                )
            } as i32;
            if null < 0 {
                return;
            }
        }
        // SAFETY: dup3(2) on two descriptors of this process: `fd` (still open: entries are
        // removed before their descriptor is closed) now names /dev/null instead of the
        // parent's control socket. Async-signal-safe.
        unsafe { libc::syscall(libc::SYS_dup3, null, fd, libc::O_CLOEXEC) };
    }
    if null >= 0 {
        // SAFETY: closing the descriptor opened above.
        unsafe { libc::syscall(libc::SYS_close, null) };
    }
}

/// The current fork generation.
pub(crate) fn generation() -> u64 {
    FORK_GENERATION.load(Ordering::Relaxed)
}

/// Tracks an attachment's control socket (see [`after_fork_child`]); beyond [`TRACKED`]
/// attachments the rest are not tracked.
pub(crate) fn track_control(fd: i32) {
    for entry in &CONTROL_FDS {
        if entry
            .compare_exchange(-1, fd, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            return;
        }
    }
}

/// Stops tracking `fd`; call before closing it.
pub(crate) fn untrack_control(fd: i32) {
    for entry in &CONTROL_FDS {
        if entry
            .compare_exchange(fd, -1, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            return;
        }
    }
}
