//! Work requests an application posts (`struct ibv_send_wr`, `struct ibv_recv_wr`), one
//! scatter/gather element each for now.

use std::fmt;

use crate::verbs::Key;

/// A local buffer: `len` bytes at `addr` under memory key `lkey`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// First byte, as the application addresses it.
    pub addr: u64,
    /// Length.
    pub len: u32,
    /// The region's key.
    pub lkey: Key,
}

/// The peer's buffer of an RDMA WRITE or READ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remote {
    /// Its address, as the peer registered it.
    pub addr: u64,
    /// Its region's key.
    pub rkey: Key,
}

/// What a send work request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// SEND, optionally with immediate data.
    Send {
        /// Immediate data.
        imm: Option<u32>,
    },
    /// RDMA WRITE, optionally with immediate data (which consumes a receive).
    Write {
        /// Where.
        remote: Remote,
        /// Immediate data.
        imm: Option<u32>,
    },
    /// RDMA READ into the local buffer.
    Read {
        /// From where.
        remote: Remote,
    },
    /// OFFLOAD (`IBV_WR_SLUICE_OFFLOAD`, docs/offload.md): the local buffer's bytes (at most
    /// one MTU) go to the handler the peer registered for `opcode`; its response (at most
    /// `resp.len` bytes and one MTU) lands in `resp`, and the completion's `imm` is the
    /// handler's status (0: success).
    Offload {
        /// The offload opcode the peer's handler registered.
        opcode: u32,
        /// Where the response goes.
        resp: Sge,
    },
}

/// A send work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWr {
    /// Returned in its completion.
    pub wr_id: u64,
    /// What it does.
    pub op: SendOp,
    /// The local buffer (source, or destination of a READ).
    pub sge: Sge,
    /// Generate a completion when it succeeds (errors always complete).
    pub signaled: bool,
    /// Ask the receiver for a solicited event.
    pub solicited: bool,
}

/// A receive work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvWr {
    /// Returned in its completion.
    pub wr_id: u64,
    /// Where a SEND's bytes go.
    pub sge: Sge,
}

/// Why a post was refused (nothing was queued; ibv_post_send's bad_wr).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostError {
    /// The queue holds its capacity.
    QueueFull,
    /// The QP's state does not take this queue's requests (send: RTS; receive: not RESET).
    WrongState,
    /// A message longer than 2^31 bytes.
    TooLong,
    /// An OFFLOAD request longer than one MTU.
    OffloadTooLong,
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PostError::QueueFull => "work queue full",
            PostError::WrongState => "queue pair state does not take this work request",
            PostError::TooLong => "message longer than 2^31 bytes",
            PostError::OffloadTooLong => "offload request longer than one MTU",
        })
    }
}

impl std::error::Error for PostError {}
