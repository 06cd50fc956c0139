//! The shared-memory contract of Sluice's service mode (FlexTOE 3 libTOE and CTX-Qs,
//! Laminar 4.3 and 5, FlexiNS 3.4): what the engine and an application share, and how.
//!
//! - [`Region`]: one sealed memfd per application holding its contexts, socket blocks and
//!   payload rings; each ring mapped twice back to back ([`Ring`]).
//! - [`Producer`]/[`Consumer`]: context queues of cache-line entries with a phase bit, one
//!   pair per application thread; [`Command`] and [`Completion`] are what the entries say.
//! - [`PipeProducer`]/[`PipeConsumer`]: notification pipes, one work-request and one
//!   completion pipe per context and engine core, shared by the context's RDMA QPs.
//! - [`SocketBlock`]: per-socket positions in the rings, flags, error and addresses.
//! - [`MappedFile`]: a memory region's memfd, mapped by the engine.
//! - [`control`]: the attach protocol over a Unix socket, passing descriptors.
//! - [`capture`]: `sluice capture`'s request and the records of a capture session.
//! - [`verbs`]: RDMA send, receive and completion queue entries and the control-path verbs.
//! - [`mtp`]: MTP endpoints' send, receive and completion queue entries and requests.
//! - [`idle`]: poll, then sleep, adaptively: the waiting policy of both sides.
//! - [`preload_library`]: where `libsluice_preload.so` is, for `sluice run` and the tests.
//!
//! Trust: the engine treats everything an application can write (queue entries, its line of
//! each socket block, the published head of its completion queues, ring contents) as
//! untrusted input; this crate gives it the means (checked decoding, bounded indices, a
//! sealed file that cannot shrink under the engine) and the service checks every value it
//! reads. The application trusts the engine.

mod congestion;
mod error;
mod eventfd;
mod layout;
mod le;
pub mod map_budget;
mod mapped;
mod message;
mod pipe;
mod queue;
mod region;
mod ring;
mod socket;
mod splice;

pub mod admin;
pub mod capture;
pub mod control;
pub mod entry;
pub mod idle;
pub mod mtp;
pub mod preload_library;
pub mod trace;
pub mod verbs;

pub use congestion::{Congestion, CONGESTION_NAME_MAX};
pub use entry::{Command, Completion, EntryError, Opcode, Payload, Reuse, Shut};
pub use error::ShmError;
pub use eventfd::EventFd;
pub use layout::{
    Dir, Layout, ENTRY_BYTES, MAX_PIPE_CORES, MAX_PIPE_CQS, PAGE, SOCKET_BLOCK_BYTES,
    VERBS_ARM_OFFSET,
};
pub use map_budget::{MapBudget, OverBudget};
pub use mapped::MappedFile;
pub use pipe::{PipeConsumer, PipeKind, PipeProducer};
pub use queue::{Consumer, Producer, QueueKind, PAYLOAD_BYTES};
pub use region::Region;
pub use ring::Ring;
pub use socket::{flags, AcceptRecord, SocketBlock, ACCEPT_RECORD_BYTES};
pub use splice::{SpliceOutcome, SpliceReport};

/// `setsockopt(fd, IPPROTO_TCP, TCP_TEARDOWN_OFFLOAD, &int, 4)`: Sluice's private TCP
/// option asking for a socket's close to be offloaded to the engine's teardown stage
/// ([`Command::SetTeardownOffload`]). The number ('S', 'T') lies far above Linux's TCP
/// options, so a kernel socket answers it with ENOPROTOOPT.
pub const TCP_TEARDOWN_OFFLOAD: i32 = 0x5354;

/// The environment variable that turns teardown offload on for every engine socket of a
/// program run through the preload library (`sluice run --teardown-offload` sets it).
pub const TEARDOWN_OFFLOAD_ENV: &str = "SLUICE_TEARDOWN_OFFLOAD";
