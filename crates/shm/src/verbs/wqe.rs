//! Work-queue and completion entries in a verbs queue (63 payload bytes each, little-endian,
//! fixed offsets; docs/verbs.md "Queues").
//!
//! A send work request is one [`SendWqe`] entry followed, when it carries inline data, by
//! `ceil(inline_len / INLINE_CHUNK)` continuation entries of raw bytes. Decoding never
//! panics: the engine decodes entries an application it does not trust wrote.

use crate::entry::{EntryError, Payload};
use crate::le::{put, u16_at, u32_at, u64_at};
use crate::queue::PAYLOAD_BYTES;

/// Most inline bytes one send work request may carry (`max_inline_data`).
pub const MAX_INLINE: usize = 256;
/// Inline bytes per continuation entry.
pub const INLINE_CHUNK: usize = PAYLOAD_BYTES - 1;

/// Entry kinds: the first byte, so that a zeroed or stray entry never decodes as a request.
mod kind {
    pub const SEND: u8 = 0x51;
    pub const INLINE: u8 = 0x52;
    pub const RECV: u8 = 0x53;
    pub const CQE: u8 = 0x54;
}

/// `ibv_send_flags` this transport takes.
pub mod send_flags {
    /// IBV_SEND_FENCE.
    pub const FENCE: u8 = 1;
    /// IBV_SEND_SIGNALED.
    pub const SIGNALED: u8 = 2;
    /// IBV_SEND_SOLICITED.
    pub const SOLICITED: u8 = 4;
    /// IBV_SEND_INLINE.
    pub const INLINE: u8 = 8;
    /// Every flag above.
    pub const ALL: u8 = FENCE | SIGNALED | SOLICITED | INLINE;
}

/// `ibv_wc_flags` a completion may carry.
pub mod wc_flags {
    /// IBV_WC_WITH_IMM: `imm` is valid.
    pub const WITH_IMM: u8 = 2;
}

/// A send work request's opcode (`enum ibv_wr_opcode`, libibverbs' numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrOpcode {
    /// IBV_WR_RDMA_WRITE.
    RdmaWrite = 0,
    /// IBV_WR_RDMA_WRITE_WITH_IMM.
    RdmaWriteWithImm = 1,
    /// IBV_WR_SEND.
    Send = 2,
    /// IBV_WR_SEND_WITH_IMM.
    SendWithImm = 3,
    /// IBV_WR_RDMA_READ.
    RdmaRead = 4,
    /// IBV_WR_SLUICE_OFFLOAD (docs/offload.md): the local bytes are a request for the
    /// handler the peer registered for the offload opcode in `imm` (host order); its
    /// response goes to `remote_addr`/`rkey` as a local buffer of `resp_len` bytes. Far
    /// above libibverbs' opcodes; the same number as its completion's opcode.
    SluiceOffload = 64,
}

impl WrOpcode {
    /// The opcode a number stands for; None for one this transport does not carry (atomics,
    /// LOCAL_INV, SEND_WITH_INV, TSO, ...).
    pub fn from_code(code: u8) -> Option<WrOpcode> {
        Some(match code {
            0 => WrOpcode::RdmaWrite,
            1 => WrOpcode::RdmaWriteWithImm,
            2 => WrOpcode::Send,
            3 => WrOpcode::SendWithImm,
            4 => WrOpcode::RdmaRead,
            64 => WrOpcode::SluiceOffload,
            _ => return None,
        })
    }
}

/// One scatter/gather element (`struct ibv_sge`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WqeSge {
    /// Address in the application's address space.
    pub addr: u64,
    /// Length.
    pub length: u32,
    /// The region's local key.
    pub lkey: u32,
}

/// A send work request (`struct ibv_send_wr` with at most one SGE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWqe {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What it does.
    pub opcode: WrOpcode,
    /// `send_flags` ([`send_flags`]).
    pub flags: u8,
    /// The local buffer (None: zero length, or the data is inline).
    pub sge: Option<WqeSge>,
    /// Inline bytes in the continuation entries that follow (0 unless `flags` has INLINE).
    pub inline_len: u16,
    /// The peer's address (WRITE, READ).
    pub remote_addr: u64,
    /// The peer's key (WRITE, READ).
    pub rkey: u32,
    /// Immediate data as the application gave it (`imm_data`, network order); OFFLOAD: the
    /// offload opcode, host order.
    pub imm: u32,
    /// OFFLOAD: bytes the response buffer (`remote_addr`, local key `rkey`) holds; 0
    /// otherwise.
    pub resp_len: u32,
}

/// A receive work request (`struct ibv_recv_wr` with at most one SGE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvWqe {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where a SEND's bytes go (None: only zero-length messages fit).
    pub sge: Option<WqeSge>,
}

/// A work completion (`struct ibv_wc`, the fields this transport fills).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cqe {
    /// The work request's id.
    pub wr_id: u64,
    /// `enum ibv_wc_status`.
    pub status: u8,
    /// `enum ibv_wc_opcode` (receive opcodes are 128 and up).
    pub opcode: u8,
    /// `ibv_wc_flags` ([`wc_flags`]).
    pub flags: u8,
    /// Bytes transferred or received.
    pub byte_len: u32,
    /// Immediate data (network order, as posted) when `flags` has WITH_IMM.
    pub imm: u32,
    /// The local QP.
    pub qp_num: u32,
    /// The remote QP (receives).
    pub src_qp: u32,
}

/// Field offsets.
mod at {
    pub const KIND: usize = 0;
    pub const OPCODE: usize = 1;
    pub const FLAGS: usize = 2;
    pub const NUM_SGE: usize = 3;
    pub const INLINE_LEN: usize = 4;
    pub const WR_ID: usize = 8;
    pub const ADDR: usize = 16;
    pub const LENGTH: usize = 24;
    pub const LKEY: usize = 28;
    pub const REMOTE_ADDR: usize = 32;
    pub const RKEY: usize = 40;
    pub const IMM: usize = 44;
    // 48..52 is a pipe line's QP number (pipe.rs).
    pub const RESP_LEN: usize = 52;
    // Completions.
    pub const STATUS: usize = 1;
    pub const WC_OPCODE: usize = 2;
    pub const WC_FLAGS: usize = 3;
    pub const BYTE_LEN: usize = 16;
    pub const WC_IMM: usize = 20;
    pub const QP_NUM: usize = 24;
    pub const SRC_QP: usize = 28;
}

fn put_sge(e: &mut Payload, sge: Option<WqeSge>) {
    if let Some(s) = sge {
        e[at::NUM_SGE] = 1;
        put(e, at::ADDR, &s.addr.to_le_bytes());
        put(e, at::LENGTH, &s.length.to_le_bytes());
        put(e, at::LKEY, &s.lkey.to_le_bytes());
    }
}

fn sge_of(e: &Payload) -> Result<Option<WqeSge>, EntryError> {
    match e[at::NUM_SGE] {
        0 => Ok(None),
        1 => Ok(Some(WqeSge {
            addr: u64_at(e, at::ADDR),
            length: u32_at(e, at::LENGTH),
            lkey: u32_at(e, at::LKEY),
        })),
        _ => Err(EntryError::BadField("num_sge")),
    }
}

/// Continuation entries that `inline_len` bytes take.
pub fn inline_entries(inline_len: usize) -> usize {
    inline_len.div_ceil(INLINE_CHUNK)
}

impl SendWqe {
    /// The entry's bytes (the inline data goes in [`SendWqe::encode_inline`] entries).
    pub fn encode(&self) -> Payload {
        let mut e = [0u8; PAYLOAD_BYTES];
        e[at::KIND] = kind::SEND;
        e[at::OPCODE] = self.opcode as u8;
        e[at::FLAGS] = self.flags;
        put_sge(&mut e, self.sge);
        put(&mut e, at::INLINE_LEN, &self.inline_len.to_le_bytes());
        put(&mut e, at::WR_ID, &self.wr_id.to_le_bytes());
        put(&mut e, at::REMOTE_ADDR, &self.remote_addr.to_le_bytes());
        put(&mut e, at::RKEY, &self.rkey.to_le_bytes());
        put(&mut e, at::IMM, &self.imm.to_le_bytes());
        put(&mut e, at::RESP_LEN, &self.resp_len.to_le_bytes());
        e
    }

    /// A continuation entry carrying `chunk` (at most [`INLINE_CHUNK`] bytes; longer is cut).
    pub fn encode_inline(chunk: &[u8]) -> Payload {
        let mut e = [0u8; PAYLOAD_BYTES];
        e[at::KIND] = kind::INLINE;
        let n = chunk.len().min(INLINE_CHUNK);
        e[1..1 + n].copy_from_slice(&chunk[..n]);
        e
    }

    /// The inline bytes of a continuation entry (all [`INLINE_CHUNK`] of them; the request's
    /// `inline_len` says how many count), or an error if it is not one.
    pub fn inline_chunk(e: &Payload) -> Result<&[u8], EntryError> {
        if e[at::KIND] != kind::INLINE {
            return Err(EntryError::BadField("inline continuation"));
        }
        Ok(&e[1..1 + INLINE_CHUNK])
    }

    /// Decodes a send work request entry.
    pub fn decode(e: &Payload) -> Result<SendWqe, EntryError> {
        SendWqe::decode_up_to(e, MAX_INLINE)
    }

    /// Decodes a send work request entry carrying at most `max_inline` inline bytes (a
    /// notification pipe's inline QP takes up to one MTU).
    pub fn decode_up_to(e: &Payload, max_inline: usize) -> Result<SendWqe, EntryError> {
        if e[at::KIND] != kind::SEND {
            return Err(EntryError::BadField("send work request kind"));
        }
        let opcode =
            WrOpcode::from_code(e[at::OPCODE]).ok_or(EntryError::UnknownOpcode(e[at::OPCODE]))?;
        let flags = e[at::FLAGS];
        if flags & !send_flags::ALL != 0 {
            return Err(EntryError::BadField("send_flags"));
        }
        let inline_len = u16_at(e, at::INLINE_LEN);
        let inline = flags & send_flags::INLINE != 0;
        if usize::from(inline_len) > max_inline || (!inline && inline_len != 0) {
            return Err(EntryError::BadField("inline_len"));
        }
        Ok(SendWqe {
            wr_id: u64_at(e, at::WR_ID),
            opcode,
            flags,
            sge: sge_of(e)?,
            inline_len,
            remote_addr: u64_at(e, at::REMOTE_ADDR),
            rkey: u32_at(e, at::RKEY),
            imm: u32_at(e, at::IMM),
            resp_len: u32_at(e, at::RESP_LEN),
        })
    }
}

impl RecvWqe {
    /// The entry's bytes.
    pub fn encode(&self) -> Payload {
        let mut e = [0u8; PAYLOAD_BYTES];
        e[at::KIND] = kind::RECV;
        put_sge(&mut e, self.sge);
        put(&mut e, at::WR_ID, &self.wr_id.to_le_bytes());
        e
    }

    /// Decodes a receive work request entry.
    pub fn decode(e: &Payload) -> Result<RecvWqe, EntryError> {
        if e[at::KIND] != kind::RECV {
            return Err(EntryError::BadField("receive work request kind"));
        }
        Ok(RecvWqe {
            wr_id: u64_at(e, at::WR_ID),
            sge: sge_of(e)?,
        })
    }
}

impl Cqe {
    /// The entry's bytes.
    pub fn encode(&self) -> Payload {
        let mut e = [0u8; PAYLOAD_BYTES];
        e[at::KIND] = kind::CQE;
        e[at::STATUS] = self.status;
        e[at::WC_OPCODE] = self.opcode;
        e[at::WC_FLAGS] = self.flags;
        put(&mut e, at::WR_ID, &self.wr_id.to_le_bytes());
        put(&mut e, at::BYTE_LEN, &self.byte_len.to_le_bytes());
        put(&mut e, at::WC_IMM, &self.imm.to_le_bytes());
        put(&mut e, at::QP_NUM, &self.qp_num.to_le_bytes());
        put(&mut e, at::SRC_QP, &self.src_qp.to_le_bytes());
        e
    }

    /// Decodes a completion entry (the application trusts the engine, but a stray entry is
    /// still an error rather than a completion).
    pub fn decode(e: &Payload) -> Result<Cqe, EntryError> {
        if e[at::KIND] != kind::CQE {
            return Err(EntryError::BadField("completion kind"));
        }
        Ok(Cqe {
            wr_id: u64_at(e, at::WR_ID),
            status: e[at::STATUS],
            opcode: e[at::WC_OPCODE],
            flags: e[at::WC_FLAGS],
            byte_len: u32_at(e, at::BYTE_LEN),
            imm: u32_at(e, at::WC_IMM),
            qp_num: u32_at(e, at::QP_NUM),
            src_qp: u32_at(e, at::SRC_QP),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn requests_and_completions_round_trip() {
        let s = SendWqe {
            wr_id: 0xdead_beef_0000_0001,
            opcode: WrOpcode::RdmaWriteWithImm,
            flags: send_flags::SIGNALED | send_flags::INLINE,
            sge: None,
            inline_len: 200,
            remote_addr: 0x7f00_1234_5678,
            rkey: 0x1234,
            imm: 0x0102_0304,
            resp_len: 0,
        };
        assert_eq!(SendWqe::decode(&s.encode()), Ok(s));
        let s = SendWqe {
            opcode: WrOpcode::SluiceOffload,
            flags: send_flags::SIGNALED,
            sge: Some(WqeSge {
                addr: 0x1000,
                length: 20,
                lkey: 3,
            }),
            inline_len: 0,
            imm: 0x1234,
            resp_len: 4096,
            ..s
        };
        assert_eq!(SendWqe::decode(&s.encode()), Ok(s));
        let r = RecvWqe {
            wr_id: 7,
            sge: Some(WqeSge {
                addr: 0x1000,
                length: 4096,
                lkey: 9,
            }),
        };
        assert_eq!(RecvWqe::decode(&r.encode()), Ok(r));
        let c = Cqe {
            wr_id: 3,
            status: 5,
            opcode: 129,
            flags: wc_flags::WITH_IMM,
            byte_len: 65536,
            imm: 42,
            qp_num: 0x11,
            src_qp: 0x12,
        };
        assert_eq!(Cqe::decode(&c.encode()), Ok(c));
        let chunk: Vec<u8> = (0..INLINE_CHUNK as u8).collect();
        assert_eq!(
            SendWqe::inline_chunk(&SendWqe::encode_inline(&chunk)).unwrap(),
            &chunk[..]
        );
        assert_eq!(inline_entries(0), 0);
        assert_eq!(inline_entries(INLINE_CHUNK + 1), 2);
    }

    #[test]
    fn kinds_do_not_cross() {
        let r = RecvWqe {
            wr_id: 1,
            sge: None,
        }
        .encode();
        assert!(SendWqe::decode(&r).is_err());
        assert!(Cqe::decode(&r).is_err());
        assert!(SendWqe::inline_chunk(&r).is_err());
        assert!(RecvWqe::decode(&[0u8; PAYLOAD_BYTES]).is_err());
    }

    #[test]
    fn bad_fields_are_refused() {
        let ok = SendWqe {
            wr_id: 1,
            opcode: WrOpcode::Send,
            flags: 0,
            sge: None,
            inline_len: 0,
            remote_addr: 0,
            rkey: 0,
            imm: 0,
            resp_len: 0,
        }
        .encode();
        let mut e = ok;
        e[at::OPCODE] = 6; // IBV_WR_ATOMIC_FETCH_AND_ADD
        assert_eq!(SendWqe::decode(&e), Err(EntryError::UnknownOpcode(6)));
        let mut e = ok;
        e[at::FLAGS] = 0x10;
        assert!(SendWqe::decode(&e).is_err());
        let mut e = ok;
        e[at::NUM_SGE] = 2;
        assert!(SendWqe::decode(&e).is_err());
        let mut e = ok;
        e[at::INLINE_LEN] = 1; // inline bytes without the INLINE flag
        assert!(SendWqe::decode(&e).is_err());
        let mut e = ok;
        e[at::FLAGS] = send_flags::INLINE;
        e[at::INLINE_LEN..at::INLINE_LEN + 2]
            .copy_from_slice(&(MAX_INLINE as u16 + 1).to_le_bytes());
        assert!(SendWqe::decode(&e).is_err());
    }

    proptest! {
        /// Any 63 bytes decode to a value or an error, never a panic; what decodes
        /// re-encodes to an entry that decodes the same.
        #[test]
        fn arbitrary_entries_never_panic(bytes in proptest::collection::vec(any::<u8>(), PAYLOAD_BYTES)) {
            let mut e = [0u8; PAYLOAD_BYTES];
            e.copy_from_slice(&bytes);
            if let Ok(s) = SendWqe::decode(&e) {
                prop_assert_eq!(SendWqe::decode(&s.encode()), Ok(s));
            }
            if let Ok(r) = RecvWqe::decode(&e) {
                prop_assert_eq!(RecvWqe::decode(&r.encode()), Ok(r));
            }
            if let Ok(c) = Cqe::decode(&e) {
                prop_assert_eq!(Cqe::decode(&c.encode()), Ok(c));
            }
            let _ = SendWqe::inline_chunk(&e);
        }
    }
}
