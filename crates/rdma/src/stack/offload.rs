//! The stack's side of the programmable offloading engine (docs/offload.md): registering
//! offload opcodes on a QP, handing received OFFLOAD requests to the engine, taking its
//! responses back. The engine runs outside the sans-IO core (crates/offload).

use std::fmt;

use super::RdmaStack;
use crate::qp::{OffloadCounters, OffloadRegisterError, OffloadRequest};
use crate::verbs::{Key, Region};
use crate::wire::Psn;

/// Why an offload call on the stack was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffloadStackError {
    /// No such QP, or it is still in RESET (a QP exists from INIT on).
    NoSuchQp,
    /// The QP refused the opcode.
    Register(OffloadRegisterError),
}

impl fmt::Display for OffloadStackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OffloadStackError::NoSuchQp => f.write_str("no such queue pair (or still in RESET)"),
            OffloadStackError::Register(e) => write!(f, "offload opcode not registered: {e}"),
        }
    }
}

impl std::error::Error for OffloadStackError {}

impl RdmaStack {
    /// Registers offload opcode `opcode` on QP `qpn` (Table 2's register_opcode): its
    /// OFFLOAD requests come out of [`RdmaStack::poll_offload`] instead of taking a receive.
    pub fn register_offload(&mut self, qpn: u32, opcode: u32) -> Result<(), OffloadStackError> {
        let qp = self
            .qps
            .get_mut(&qpn)
            .and_then(|s| s.qp.as_mut())
            .ok_or(OffloadStackError::NoSuchQp)?;
        qp.register_offload(opcode)
            .map_err(OffloadStackError::Register)
    }

    /// Unregisters offload opcode `opcode` on QP `qpn`: later requests for it are NAKed.
    /// False if it was not registered there.
    pub fn unregister_offload(&mut self, qpn: u32, opcode: u32) -> bool {
        self.qps
            .get_mut(&qpn)
            .and_then(|s| s.qp.as_mut())
            .is_some_and(|qp| qp.unregister_offload(opcode))
    }

    /// The memory region of `key` (what an offload handler's region is registered from).
    pub fn offload_region(&self, key: Key) -> Option<Region> {
        self.mrs.get(key).copied()
    }

    /// The next OFFLOAD request any QP received, for the offload engine (walks the QPs that
    /// have registered nothing too: call it after frames arrive, as `poll_transmit`).
    pub fn poll_offload(&mut self) -> Option<OffloadRequest> {
        self.order
            .iter()
            .find_map(|qpn| self.qps.get_mut(qpn)?.qp.as_mut()?.poll_offload())
    }

    /// The engine's response to the request at `psn` on `qpn` (status 0: success); it goes
    /// out on the next `poll_transmit`. False (and counted on the QP) if no such request
    /// waits or the body is over its capacity.
    pub fn complete_offload(&mut self, qpn: u32, psn: Psn, status: u32, body: &[u8]) -> bool {
        let done = self
            .qps
            .get_mut(&qpn)
            .and_then(|s| s.qp.as_mut())
            .is_some_and(|qp| qp.complete_offload(psn, status, body));
        // The response waits for `poll_transmit`.
        self.activate(qpn);
        done
    }

    /// The offload counters of every QP, summed.
    pub fn offload_counters(&self) -> OffloadCounters {
        let mut t = OffloadCounters::default();
        for c in self
            .qps
            .values()
            .filter_map(|s| s.qp.as_ref())
            .map(|q| q.offload_counters())
        {
            t.requests += c.requests;
            t.unknown_opcode += c.unknown_opcode;
            t.malformed += c.malformed;
            t.busy += c.busy;
            t.responses += c.responses;
            t.error_responses += c.error_responses;
            t.replayed += c.replayed;
            t.bad_completions += c.bad_completions;
        }
        t
    }
}
