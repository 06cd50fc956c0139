//! The opaque MTP stack a C caller holds: one MTP core, its tag, and the messages a short
//! receive buffer left waiting.

use std::collections::HashMap;

use sluice_mtp::stack::{EndpointId, Message, MtpStack};

use crate::boundary::Guarded;
use crate::handle::stack_tag;

/// One host's MTP transport (opaque to C). Create with `sluice_mtp_stack_new`, destroy with
/// `sluice_mtp_stack_free`. One thread at a time per stack; distinct stacks share nothing.
pub struct sluice_mtp_stack {
    /// The sans-IO core.
    pub(crate) core: MtpStack,
    /// This stack's tag (1..=255), in every endpoint handle it issues.
    pub(crate) tag: u8,
    /// A message taken from an endpoint's queue that did not fit the caller's buffer: it is
    /// the next one `sluice_mtp_recv` returns (the core has no peek). At most one per bound
    /// endpoint, so bounded by `max_endpoints`.
    pub(crate) held: HashMap<EndpointId, Message>,
    /// A call panicked: the core's state may be torn, so every later call is refused.
    pub(crate) poisoned: bool,
    /// Calls refused for the caller's bad input (house rule 1: counted).
    pub(crate) refused_calls: u64,
}

impl sluice_mtp_stack {
    /// Wraps a core.
    pub(crate) fn new(core: MtpStack) -> Self {
        let c = core.config();
        // The seed slot keeps MTP tags apart from a TCP stack's on the same host.
        let tag = stack_tag(
            u32::from(c.ip),
            c.mac.0,
            u64::from(u32::from_be_bytes(*b"MTP\0")),
        );
        sluice_mtp_stack {
            core,
            tag,
            held: HashMap::new(),
            poisoned: false,
            refused_calls: 0,
        }
    }
}

impl Guarded for sluice_mtp_stack {
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
        fn send<T: Send>() {}
        send::<super::sluice_mtp_stack>();
    }
}
