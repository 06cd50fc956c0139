//! Entries of the notification pipes (docs/verbs.md "Notification pipes"): every entry names
//! its QP (work requests) or its completion queue (completions), since one pipe carries
//! many. A send is one [`PipeSend`] line followed by its inline continuation lines; up to
//! four receives of one QP and one key share a [`PipeRecv`] line, and the library keeps
//! their `wr_id`s (the line carries a tag the completion returns). Decoding never panics.

use super::wqe::{Cqe, SendWqe};
use crate::entry::{EntryError, Payload};
use crate::le::{put, u32_at, u64_at};
use crate::queue::PAYLOAD_BYTES;

/// Most inline bytes one pipe-mode send carries: one IBV MTU (1024, the active MTU over
/// 1500-byte Ethernet), for the low-latency inline QP (flexins.txt 3.4).
pub const PIPE_MAX_INLINE: usize = 1024;

/// The inline QP's flag trailer (docs/verbs.md "The inline QP"): the last bytes of a
/// flagged message, right after its payload, ending at the end of the receiver's slot.
/// Bytes 0..4 the payload's length (little-endian), 4..7 zero, 7 the valid byte, written
/// last since a WRITE's bytes are placed in order.
pub mod flag {
    /// Bytes of the trailer.
    pub const TRAILER_BYTES: usize = 8;
    /// The valid byte's value once a message arrived (the receiver clears it to reuse
    /// the slot).
    pub const VALID: u8 = 1;

    /// The trailer of a `len`-byte payload.
    pub fn trailer(len: u32) -> [u8; TRAILER_BYTES] {
        let mut t = [0u8; TRAILER_BYTES];
        t[..4].copy_from_slice(&len.to_le_bytes());
        t[TRAILER_BYTES - 1] = VALID;
        t
    }

    /// The payload length a trailer announces, if its valid byte is set.
    pub fn arrived(t: &[u8; TRAILER_BYTES]) -> Option<u32> {
        (t[TRAILER_BYTES - 1] == VALID).then(|| u32::from_le_bytes([t[0], t[1], t[2], t[3]]))
    }
}

/// Receives one [`PipeRecv`] line carries at most.
pub const RECVS_PER_LINE: usize = 4;

/// Kinds beside the verbs queues' (`wqe.rs` uses 0x51..=0x54).
mod kind {
    pub const SEND: u8 = 0x51;
    pub const PIPE_SEND: u8 = 0x61;
    pub const PIPE_RECV: u8 = 0x62;
    pub const CQE: u8 = 0x54;
    pub const PIPE_CQE: u8 = 0x63;
}

/// Where the QP number or the CQ handle lies: past the fields of the verbs-queue entry.
const QPN_AT: usize = 48;
const CQ_AT: usize = 32;

/// A send work request for QP `qpn` (its inline bytes follow in continuation lines, as in
/// a send queue: [`SendWqe::encode_inline`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipeSend {
    /// The QP.
    pub qpn: u32,
    /// The request.
    pub wqe: SendWqe,
}

impl PipeSend {
    /// The line's bytes.
    pub fn encode(&self) -> Payload {
        let mut e = self.wqe.encode();
        e[0] = kind::PIPE_SEND;
        put(&mut e, QPN_AT, &self.qpn.to_le_bytes());
        e
    }

    /// Decodes a send line.
    pub fn decode(e: &Payload) -> Result<PipeSend, EntryError> {
        if e[0] != kind::PIPE_SEND {
            return Err(EntryError::BadField("pipe send kind"));
        }
        let mut plain = *e;
        plain[0] = kind::SEND;
        Ok(PipeSend {
            qpn: u32_at(e, QPN_AT),
            wqe: SendWqe::decode_up_to(&plain, PIPE_MAX_INLINE)?,
        })
    }
}

/// One receive of a [`PipeRecv`] line: its buffer (length 0: none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PackedRecv {
    /// Address in the application's address space.
    pub addr: u64,
    /// Length.
    pub length: u32,
}

/// Up to four receive work requests of QP `qpn` whose buffers share key `lkey`; the
/// `k`-th completes with `wr_id = tag + k` (wrapping in 32 bits), which the library maps
/// back to the `wr_id` it was posted with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipeRecv {
    /// The QP.
    pub qpn: u32,
    /// The buffers' key.
    pub lkey: u32,
    /// The first receive's tag.
    pub tag: u32,
    /// How many of `recvs` count (1..=4).
    pub count: u8,
    /// The receives.
    pub recvs: [PackedRecv; RECVS_PER_LINE],
}

mod recv_at {
    pub const COUNT: usize = 1;
    pub const QPN: usize = 2;
    pub const LKEY: usize = 6;
    pub const TAG: usize = 10;
    pub const ADDRS: usize = 14;
    pub const LENS: usize = 46;
}

impl PipeRecv {
    /// The line's bytes.
    pub fn encode(&self) -> Payload {
        let mut e = [0u8; PAYLOAD_BYTES];
        e[0] = kind::PIPE_RECV;
        e[recv_at::COUNT] = self.count;
        put(&mut e, recv_at::QPN, &self.qpn.to_le_bytes());
        put(&mut e, recv_at::LKEY, &self.lkey.to_le_bytes());
        put(&mut e, recv_at::TAG, &self.tag.to_le_bytes());
        for (k, r) in self.recvs.iter().enumerate() {
            put(&mut e, recv_at::ADDRS + 8 * k, &r.addr.to_le_bytes());
            put(&mut e, recv_at::LENS + 4 * k, &r.length.to_le_bytes());
        }
        e
    }

    /// Decodes a receive line (a count of 0 or more than four is refused).
    pub fn decode(e: &Payload) -> Result<PipeRecv, EntryError> {
        if e[0] != kind::PIPE_RECV {
            return Err(EntryError::BadField("pipe receive kind"));
        }
        let count = e[recv_at::COUNT];
        if count == 0 || usize::from(count) > RECVS_PER_LINE {
            return Err(EntryError::BadField("pipe receive count"));
        }
        let mut recvs = [PackedRecv::default(); RECVS_PER_LINE];
        for (k, r) in recvs.iter_mut().enumerate() {
            r.addr = u64_at(e, recv_at::ADDRS + 8 * k);
            r.length = u32_at(e, recv_at::LENS + 4 * k);
        }
        Ok(PipeRecv {
            qpn: u32_at(e, recv_at::QPN),
            lkey: u32_at(e, recv_at::LKEY),
            tag: u32_at(e, recv_at::TAG),
            count,
            recvs,
        })
    }

    /// The QP a line names, read from any line that has a QP field at all (an entry that
    /// does not decode still names where its error completion goes, if it can).
    pub fn qpn_of(e: &Payload) -> Option<u32> {
        match e[0] {
            kind::PIPE_RECV => Some(u32_at(e, recv_at::QPN)),
            kind::PIPE_SEND => Some(u32_at(e, QPN_AT)),
            _ => None,
        }
    }
}

/// A completion for completion queue `cq` (its handle, as CreateCq answered).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipeCqe {
    /// The completion queue.
    pub cq: u32,
    /// The completion.
    pub cqe: Cqe,
}

impl PipeCqe {
    /// The line's bytes.
    pub fn encode(&self) -> Payload {
        let mut e = self.cqe.encode();
        e[0] = kind::PIPE_CQE;
        put(&mut e, CQ_AT, &self.cq.to_le_bytes());
        e
    }

    /// Decodes a completion line.
    pub fn decode(e: &Payload) -> Result<PipeCqe, EntryError> {
        if e[0] != kind::PIPE_CQE {
            return Err(EntryError::BadField("pipe completion kind"));
        }
        let mut plain = *e;
        plain[0] = kind::CQE;
        Ok(PipeCqe {
            cq: u32_at(e, CQ_AT),
            cqe: Cqe::decode(&plain)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::wqe::{send_flags, RecvWqe, WrOpcode};
    use proptest::prelude::*;

    #[test]
    fn pipe_lines_round_trip_and_do_not_cross_with_queue_entries() {
        let s = PipeSend {
            qpn: 0x00ab_cdef,
            wqe: SendWqe {
                wr_id: 9,
                opcode: WrOpcode::SendWithImm,
                flags: send_flags::SIGNALED,
                sge: None,
                inline_len: 0,
                remote_addr: 0x55,
                rkey: 3,
                imm: 0x0102_0304,
                resp_len: 0,
            },
        };
        assert_eq!(PipeSend::decode(&s.encode()), Ok(s));
        assert!(
            SendWqe::decode(&s.encode()).is_err(),
            "a pipe line is no queue entry"
        );
        assert!(PipeSend::decode(&s.wqe.encode()).is_err());
        let r = PipeRecv {
            qpn: 7,
            lkey: 0x1234,
            tag: u32::MAX - 1,
            count: 4,
            recvs: [
                PackedRecv { addr: 1, length: 2 },
                PackedRecv {
                    addr: u64::MAX,
                    length: u32::MAX,
                },
                PackedRecv::default(),
                PackedRecv {
                    addr: 0x7f00_0000_1000,
                    length: 4096,
                },
            ],
        };
        assert_eq!(
            PipeRecv::decode(&r.encode()),
            Ok(r),
            "four receives in one line"
        );
        assert!(RecvWqe::decode(&r.encode()).is_err());
        assert_eq!(PipeRecv::qpn_of(&r.encode()), Some(7));
        assert_eq!(PipeRecv::qpn_of(&s.encode()), Some(0x00ab_cdef));
        let c = PipeCqe {
            cq: 0xffff_0001,
            cqe: Cqe {
                wr_id: 1,
                status: 0,
                opcode: 128,
                flags: 2,
                byte_len: 64,
                imm: 5,
                qp_num: 8,
                src_qp: 9,
            },
        };
        assert_eq!(PipeCqe::decode(&c.encode()), Ok(c));
        assert!(Cqe::decode(&c.encode()).is_err());
    }

    #[test]
    fn a_pipe_send_carries_up_to_one_mtu_inline_and_the_trailer_round_trips() {
        let mut w = SendWqe {
            wr_id: 1,
            opcode: WrOpcode::RdmaWrite,
            flags: send_flags::INLINE,
            sge: None,
            inline_len: PIPE_MAX_INLINE as u16,
            remote_addr: 0,
            rkey: 0,
            imm: 0,
            resp_len: 0,
        };
        let line = PipeSend { qpn: 1, wqe: w }.encode();
        assert!(PipeSend::decode(&line).is_ok());
        assert!(
            SendWqe::decode(&w.encode()).is_err(),
            "a send queue takes 256"
        );
        w.inline_len += 1;
        assert!(PipeSend::decode(&PipeSend { qpn: 1, wqe: w }.encode()).is_err());
        let t = flag::trailer(1000);
        assert_eq!(flag::arrived(&t), Some(1000));
        assert_eq!(flag::arrived(&[0; flag::TRAILER_BYTES]), None);
    }

    #[test]
    fn a_receive_line_counts_one_to_four() {
        let mut r = PipeRecv {
            qpn: 1,
            lkey: 1,
            tag: 0,
            count: 0,
            recvs: [PackedRecv::default(); RECVS_PER_LINE],
        };
        assert!(PipeRecv::decode(&r.encode()).is_err());
        r.count = 5;
        assert!(PipeRecv::decode(&r.encode()).is_err());
        r.count = 1;
        assert!(PipeRecv::decode(&r.encode()).is_ok());
    }

    proptest! {
        /// Any 63 bytes decode to a line or an error, never a panic, and what decodes
        /// re-encodes the same.
        #[test]
        fn arbitrary_lines_never_panic(bytes in proptest::collection::vec(any::<u8>(), PAYLOAD_BYTES)) {
            let mut e = [0u8; PAYLOAD_BYTES];
            e.copy_from_slice(&bytes);
            if let Ok(s) = PipeSend::decode(&e) {
                prop_assert_eq!(PipeSend::decode(&s.encode()), Ok(s));
            }
            if let Ok(r) = PipeRecv::decode(&e) {
                prop_assert_eq!(PipeRecv::decode(&r.encode()), Ok(r));
            }
            if let Ok(c) = PipeCqe::decode(&e) {
                prop_assert_eq!(PipeCqe::decode(&c.encode()), Ok(c));
            }
            let _ = PipeRecv::qpn_of(&e);
        }
    }
}
