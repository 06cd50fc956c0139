//! The opaque stack a C caller holds: one TCP core and the handles it gave out.

use sluice_tcp::Stack;

use crate::boundary::Guarded;
use crate::handle::{stack_tag, Handles};

/// One host's TCP core (opaque to C). Create with `sluice_stack_new`, destroy with
/// `sluice_stack_free`. Not thread-safe: one thread at a time per stack; distinct stacks
/// share nothing and may be used from distinct threads.
pub struct sluice_stack {
    /// The sans-IO core.
    pub(crate) core: Stack,
    /// Connection and listener handles given to the caller.
    pub(crate) handles: Handles,
    /// A call panicked: the core's state may be torn, so every later call is refused.
    pub(crate) poisoned: bool,
    /// Calls refused for the caller's bad input (house rule 1: refused with a clear error
    /// and counted): NULL or invalid arguments, invalid handles, short buffers.
    pub(crate) refused_calls: u64,
}

impl sluice_stack {
    /// Wraps a core.
    pub(crate) fn new(core: Stack) -> Self {
        let c = core.config();
        let tag = stack_tag(u32::from(c.ip), c.mac.0, c.seed);
        sluice_stack {
            core,
            handles: Handles::new(tag),
            poisoned: false,
            refused_calls: 0,
        }
    }
}

impl Guarded for sluice_stack {
    fn poisoned(&mut self) -> &mut bool {
        &mut self.poisoned
    }
    fn refused_calls(&mut self) -> &mut u64 {
        &mut self.refused_calls
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_stack_may_move_to_another_thread() {
        // docs/ffi.md: distinct stacks may run on distinct threads, one thread at a time each.
        fn send<T: Send>() {}
        send::<super::sluice_stack>();
    }
}
