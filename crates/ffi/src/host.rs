//! The opaque stack a C caller holds: one TCP core and the handles it gave out.

use sluice_tcp::Stack;

use crate::handle::Handles;

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
}

impl sluice_stack {
    /// Wraps a core.
    pub(crate) fn new(core: Stack) -> Self {
        sluice_stack {
            core,
            handles: Handles::default(),
            poisoned: false,
        }
    }
}
