//! fork: what a child inherits.
//!
//! The engine knows the parent's attachment only, so a child must not touch the parent's
//! engine sockets: after fork, every engine socket the child inherited fails with EBADF,
//! except close, which only forgets it (the parent keeps the connection). Epoll sets the
//! child inherited keep their kernel descriptors and lose their engine registrations. A
//! socket the child opens afterwards attaches afresh.
//!
//! This is done with a generation number ([`crate::generation`]) bumped in a
//! `pthread_atfork` child handler (registered from the library's constructor): objects
//! remember the generation they were made in, and an old one is stale. The handler also resets the library's own locks (the
//! fd table's, the signal table's: a thread that held one at fork time does not exist in
//! the child) and calls `sluice::after_fork_child()`, which does the same for libsluice.

extern "C" fn child() {
    crate::generation::advance();
    crate::file::TABLE.after_fork_child();
    crate::decide::after_fork_child();
    crate::signals::after_fork_child();
    // Called from C: a panic must not unwind out of the handler.
    crate::guard("fork child handler", (), sluice::after_fork_child);
}

/// Registers the fork handler; run once from the library's constructor.
pub fn install() {
    // SAFETY: pthread_atfork with no prepare/parent handler and a child handler that only
    // touches atomics and libsluice's own fork hook; it is not an interposed function.
    let r = unsafe { libc::pthread_atfork(None, None, Some(child)) };
    if r != 0 {
        crate::log_once!(
            "pthread_atfork failed ({r}): engine sockets in fork children are not protected"
        );
    }
}

/// The library's constructor (an `.init_array` entry), run when the loader maps it.
#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

#[cfg(not(test))]
extern "C" fn init() {
    install();
    crate::signals::init();
}
