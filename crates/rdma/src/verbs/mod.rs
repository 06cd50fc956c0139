//! The verbs objects an application holds (IB spec vol. 1 ch. 10-11; ibv_*(3)): memory
//! regions and their keys, completion queues, and the queue pair state machine. Numbers
//! (access flags, attribute masks, completion status and opcode) are libibverbs' own, so a
//! provider passes them through unchanged.

pub mod access;
pub mod cq;
pub mod mr;
pub mod qp_state;

pub use access::Access;
pub use cq::{CompletionQueue, CqError, WcOpcode, WcStatus, WorkCompletion};
pub use mr::{AccessError, Key, MrTable, PdId, Placement, Region, RegisterError, MAX_REGIONS};
pub use qp_state::{check_modify, required_attributes, AttrMask, ModifyError, QpState};
