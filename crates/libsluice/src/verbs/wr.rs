//! Work requests (`ibv_send_wr`, `ibv_recv_wr` with at most one SGE) and their entries in
//! the send and receive queues (docs/verbs.md "Verbs queues").

use sluice_shm::verbs::wqe::{inline_entries, send_flags};
use sluice_shm::verbs::{RecvWqe, SendWqe, WqeSge, WrOpcode, INLINE_CHUNK, MAX_INLINE};
use sluice_shm::Payload;

use crate::verbs::error::VerbsError;

pub use sluice_shm::verbs::wqe::send_flags as flags;

/// One scatter/gather element: `length` bytes at `addr` of the region with key `lkey`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// Address in this process.
    pub addr: u64,
    /// Length.
    pub length: u32,
    /// The region's key.
    pub lkey: u32,
}

impl From<Sge> for WqeSge {
    fn from(s: Sge) -> WqeSge {
        WqeSge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        }
    }
}

/// What a send work request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// RDMA WRITE to the peer's `remote_addr` in its region `rkey`.
    Write {
        /// The peer's address.
        remote_addr: u64,
        /// The peer's key.
        rkey: u32,
    },
    /// RDMA WRITE with immediate data (consumes a receive at the peer).
    WriteWithImm {
        /// The peer's address.
        remote_addr: u64,
        /// The peer's key.
        rkey: u32,
        /// Immediate data, network order.
        imm: u32,
    },
    /// SEND into the peer's next receive.
    Send,
    /// SEND with immediate data.
    SendWithImm {
        /// Immediate data, network order.
        imm: u32,
    },
    /// RDMA READ from the peer's `remote_addr` into the local SGE.
    Read {
        /// The peer's address.
        remote_addr: u64,
        /// The peer's key.
        rkey: u32,
    },
    /// OFFLOAD (`IBV_WR_SLUICE_OFFLOAD`, docs/offload.md): the work request's bytes (at
    /// most one MTU) are a request for the handler the peer registered for `opcode` on its
    /// QP; the handler's response lands in `resp` (a buffer of a local region). The
    /// completion's `byte_len` is the response's length; a handler's failure completes
    /// with `REM_OP_ERR` and its status in [`crate::verbs::WorkCompletion::offload_status`],
    /// and the QP stays up.
    Offload {
        /// The offload opcode the peer's handler registered.
        opcode: u32,
        /// Where the response goes.
        resp: Sge,
    },
}

/// Where a send work request's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendData<'a> {
    /// No bytes (a zero-length message).
    Empty,
    /// One SGE of a registered region.
    Sge(Sge),
    /// Inline: the bytes of these slices, gathered, copied at post time (any memory).
    Inline(&'a [&'a [u8]]),
}

/// A send work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What it does.
    pub op: SendOp,
    /// [`flags`] (FENCE, SIGNALED, SOLICITED; INLINE goes with [`SendData::Inline`], which
    /// implies it).
    pub flags: u8,
    /// Its bytes.
    pub data: SendData<'a>,
}

/// A receive work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where a message goes (None: only zero-length messages fit).
    pub sge: Option<Sge>,
}

/// Entries one send work request takes at most.
pub(crate) const MAX_ENTRIES: usize = 1 + MAX_INLINE.div_ceil(INLINE_CHUNK);

/// A send work request's entries: the request, then its inline continuation entries.
#[derive(Debug)]
pub(crate) struct Entries {
    pub(crate) entries: [Payload; MAX_ENTRIES],
    pub(crate) count: usize,
}

impl Entries {
    /// The entries, in order.
    pub(crate) fn as_slice(&self) -> &[Payload] {
        &self.entries[..self.count]
    }
}

/// Encodes `wr` for a QP taking at most `max_inline` inline bytes.
pub(crate) fn encode_send(wr: &SendWr<'_>, max_inline: u32) -> Result<Entries, VerbsError> {
    if wr.flags & !send_flags::ALL != 0 {
        return Err(VerbsError::Invalid("send_flags"));
    }
    if wr.flags & send_flags::INLINE != 0 && !matches!(wr.data, SendData::Inline(_)) {
        return Err(VerbsError::Invalid("INLINE without inline data"));
    }
    let mut resp_len = 0;
    let (opcode, remote_addr, rkey, imm) = match wr.op {
        SendOp::Write { remote_addr, rkey } => (WrOpcode::RdmaWrite, remote_addr, rkey, 0),
        SendOp::WriteWithImm {
            remote_addr,
            rkey,
            imm,
        } => (WrOpcode::RdmaWriteWithImm, remote_addr, rkey, imm),
        SendOp::Send => (WrOpcode::Send, 0, 0, 0),
        SendOp::SendWithImm { imm } => (WrOpcode::SendWithImm, 0, 0, imm),
        SendOp::Read { remote_addr, rkey } => (WrOpcode::RdmaRead, remote_addr, rkey, 0),
        // The response buffer rides in the remote fields; the offload opcode in imm.
        SendOp::Offload { opcode, resp } => {
            resp_len = resp.length;
            (WrOpcode::SluiceOffload, resp.addr, resp.lkey, opcode)
        }
    };
    let mut out = Entries {
        entries: [[0u8; sluice_shm::PAYLOAD_BYTES]; MAX_ENTRIES],
        count: 1,
    };
    let mut wqe = SendWqe {
        wr_id: wr.wr_id,
        opcode,
        flags: wr.flags,
        sge: None,
        inline_len: 0,
        remote_addr,
        rkey,
        imm,
        resp_len,
    };
    match wr.data {
        SendData::Empty => {}
        SendData::Sge(s) => wqe.sge = Some(s.into()),
        SendData::Inline(parts) => {
            if opcode == WrOpcode::RdmaRead {
                return Err(VerbsError::Invalid("inline RDMA READ"));
            }
            let total: usize = parts.iter().map(|p| p.len()).sum();
            if total > MAX_INLINE || total > max_inline as usize {
                return Err(VerbsError::Invalid("inline length past max_inline"));
            }
            wqe.flags |= send_flags::INLINE;
            wqe.inline_len = total as u16;
            // Gather the parts into continuation entries of INLINE_CHUNK bytes.
            let mut chunk = [0u8; INLINE_CHUNK];
            let mut filled = 0;
            for part in parts.iter() {
                let mut rest = *part;
                while !rest.is_empty() {
                    let n = rest.len().min(INLINE_CHUNK - filled);
                    chunk[filled..filled + n].copy_from_slice(&rest[..n]);
                    filled += n;
                    rest = &rest[n..];
                    if filled == INLINE_CHUNK {
                        out.entries[out.count] = SendWqe::encode_inline(&chunk);
                        out.count += 1;
                        filled = 0;
                    }
                }
            }
            if filled > 0 {
                out.entries[out.count] = SendWqe::encode_inline(&chunk[..filled]);
                out.count += 1;
            }
            debug_assert_eq!(out.count, 1 + inline_entries(total));
        }
    }
    out.entries[0] = wqe.encode();
    Ok(out)
}

/// Encodes a receive work request.
pub(crate) fn encode_recv(wr: &RecvWr) -> Payload {
    RecvWqe {
        wr_id: wr.wr_id,
        sge: wr.sge.map(Into::into),
    }
    .encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_carries_its_sge_and_the_peer() {
        let wr = SendWr {
            wr_id: 42,
            op: SendOp::WriteWithImm {
                remote_addr: 0x7000,
                rkey: 5,
                imm: 0x0102_0304,
            },
            flags: flags::SIGNALED,
            data: SendData::Sge(Sge {
                addr: 0x1000,
                length: 300,
                lkey: 6,
            }),
        };
        let e = encode_send(&wr, 0).unwrap();
        assert_eq!(e.count, 1);
        let d = SendWqe::decode(&e.entries[0]).unwrap();
        assert_eq!(d.opcode, WrOpcode::RdmaWriteWithImm);
        assert_eq!(
            (d.wr_id, d.remote_addr, d.rkey, d.imm),
            (42, 0x7000, 5, 0x0102_0304)
        );
        assert_eq!(d.flags, flags::SIGNALED);
        assert_eq!(
            d.sge,
            Some(WqeSge {
                addr: 0x1000,
                length: 300,
                lkey: 6
            })
        );
    }

    #[test]
    fn inline_data_is_gathered_into_continuation_entries() {
        let a: Vec<u8> = (0..100u8).collect();
        let b: Vec<u8> = (100..150u8).collect();
        let c: Vec<u8> = (150..200u8).collect();
        let parts: [&[u8]; 3] = [&a, &b, &c];
        let wr = SendWr {
            wr_id: 1,
            op: SendOp::SendWithImm { imm: 7 },
            flags: 0,
            data: SendData::Inline(&parts),
        };
        let e = encode_send(&wr, 256).unwrap();
        // 200 bytes: 62 + 62 + 62 + 14.
        assert_eq!(e.count, 1 + 4);
        let d = SendWqe::decode(&e.entries[0]).unwrap();
        assert_eq!(d.inline_len, 200);
        assert!(d.flags & flags::INLINE != 0);
        assert_eq!(d.sge, None);
        let mut got = Vec::new();
        for entry in &e.as_slice()[1..] {
            got.extend_from_slice(SendWqe::inline_chunk(entry).unwrap());
        }
        got.truncate(200);
        let want: Vec<u8> = (0..200u8).collect();
        assert_eq!(got, want);
        // Exactly one chunk: one continuation entry.
        let one = [0xeeu8; INLINE_CHUNK];
        let parts: [&[u8]; 1] = [&one];
        let e = encode_send(
            &SendWr {
                data: SendData::Inline(&parts),
                ..wr
            },
            256,
        )
        .unwrap();
        assert_eq!(e.count, 2);
    }

    #[test]
    fn bad_requests_are_refused() {
        let big = [0u8; MAX_INLINE + 1];
        let parts: [&[u8]; 1] = [&big];
        let wr = SendWr {
            wr_id: 1,
            op: SendOp::Send,
            flags: 0,
            data: SendData::Inline(&parts),
        };
        assert!(matches!(
            encode_send(&wr, 1024),
            Err(VerbsError::Invalid(_))
        ));
        let small = [0u8; 65];
        let parts: [&[u8]; 1] = [&small];
        let wr = SendWr {
            data: SendData::Inline(&parts),
            ..wr
        };
        assert!(encode_send(&wr, 64).is_err(), "past the QP's max_inline");
        assert!(encode_send(&wr, 65).is_ok());
        let read = SendWr {
            op: SendOp::Read {
                remote_addr: 0,
                rkey: 1,
            },
            ..wr
        };
        assert!(encode_send(&read, 256).is_err(), "an inline READ");
        let flagged = SendWr {
            flags: 0x40,
            data: SendData::Empty,
            ..wr
        };
        assert!(encode_send(&flagged, 0).is_err());
    }

    #[test]
    fn a_receive_carries_its_sge() {
        let wr = RecvWr {
            wr_id: 3,
            sge: Some(Sge {
                addr: 0x2000,
                length: 64,
                lkey: 2,
            }),
        };
        let d = RecvWqe::decode(&encode_recv(&wr)).unwrap();
        assert_eq!(d.wr_id, 3);
        assert_eq!(d.sge.unwrap().length, 64);
    }
}
