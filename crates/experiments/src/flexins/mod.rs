//! flexins.txt 5.3-5.4's data-path experiments for the verbs transport: header-only TX
//! against a staging copy (`flexins-tx`, Figure 12's shape) and direct RX placement against
//! a staging copy (`flexins-rx`, Figure 14's shape). Two RDMA stacks, each on its own
//! thread with its own in-memory device, joined back to back (no lab): the requester posts
//! RDMA WRITEs, the responder places them; the engine's bytes touched per payload byte come
//! from the stacks' counters (`StackCounters::tx_touch` / `rx_touch`). And 3.4's
//! notification pipes and inline QP (`flexins-pipe`, Figure 15's shape) between two
//! engines running the service, with applications on libsluice. flexins-tx's notes
//! add TCP's half: header-only TCP sends against `Stack::send`, from the TCP core's
//! `tx_touch` (tcp.rs).

pub mod engines;
pub mod pipe;
pub mod rig;
pub mod rtt;
pub mod rx;
pub mod submit;
pub mod table;
pub mod tcp;
pub mod tx;
pub mod verbs_side;
