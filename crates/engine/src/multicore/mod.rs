//! The multi-core data-path (flextoe.txt 3.1-3.2; docs/multicore.md): roles joined by
//! bounded single-producer/single-consumer links of batches — the NIC role (device, flow-group
//! steering, sequencing), pre replicas (checksum verification), one protocol role per flow
//! group (its core, application and timers) and post replicas (checksum completion) — laid
//! out on threads by a [`Layout`]. The single-threaded [`crate::Engine`] stays the
//! single-core engine.

pub mod batch;
pub mod control;
pub mod doorbell;
pub mod layout;
pub mod link;
pub mod nic;
pub mod placement;
pub mod post;
pub mod pre;
pub mod progress;
pub mod protocol;
pub mod runner;
pub mod sequence;

pub use control::{Control, ControlError, ControlMsg, ControlReply, CONTROL_SLOTS};
pub use doorbell::{Doorbell, DoorbellError, SleepCounters};
pub use layout::{Layout, LayoutError, Plan, RoleId};
pub use placement::{Placement, PlacementError};
pub use progress::{Progress, RoleCounters};
pub use protocol::Protocol;
pub use runner::{MultiEngine, MultiError, MultiReport, DEFAULT_MAX_SLEEP};
pub use sequence::{Reorder, ReorderError, Sequencer};
