//! Entries of an MTP endpoint's queues (63 payload bytes each, little-endian, fixed offsets;
//! docs/mtp.md "Messages in service mode"): a message to send ([`SendEntry`]), a buffer
//! posted for a message to arrive in ([`RecvEntry`]), and what became of either
//! ([`MtpCqe`]). The first byte is a kind that a zeroed entry never has, and every entry
//! keeps its cookie at the same offset, so that an entry which does not decode still
//! completes under its cookie. Decoding never panics.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};

use crate::entry::{EntryError, Payload};
use crate::le::{put, u16_at, u32_at, u64_at};
use crate::queue::PAYLOAD_BYTES;

/// Entry kinds (the opcode byte).
mod kind {
    pub const SEND: u8 = 0x71;
    pub const RECV: u8 = 0x72;
    pub const CQE: u8 = 0x73;
}

/// Field offsets.
mod at {
    pub const KIND: usize = 0;
    pub const PRIORITY: usize = 1;
    pub const TC: usize = 2;
    pub const STATUS: usize = 3;
    pub const PORT: usize = 4;
    pub const CQE_KIND: usize = 6;
    pub const COOKIE: usize = 8;
    pub const IP: usize = 16;
    pub const KEY: usize = 20;
    pub const MSG_ID: usize = 20;
    pub const ADDR: usize = 24;
    pub const LEN: usize = 32;
}

/// A message to send: `len` bytes at `addr` of registered memory `key`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendEntry {
    /// Returned in the completion.
    pub cookie: u64,
    /// The destination endpoint.
    pub dst: SocketAddrV4,
    /// Higher goes first.
    pub priority: u8,
    /// The traffic class.
    pub tc: u8,
    /// The registered memory's key.
    pub key: u32,
    /// First byte, as the application addresses it.
    pub addr: u64,
    /// Length (0 is a message too).
    pub len: u32,
}

/// A buffer for one received message: `len` bytes at `addr` of registered memory `key`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvEntry {
    /// Returned in the completion.
    pub cookie: u64,
    /// The registered memory's key.
    pub key: u32,
    /// First byte, as the application addresses it.
    pub addr: u64,
    /// Length.
    pub len: u32,
}

/// What a completion is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqeKind {
    /// A send entry: every packet acknowledged (or refused, see the status).
    Sent = 1,
    /// A posted buffer: a message arrived in it (or not, see the status).
    Received = 2,
}

/// How an entry completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MtpStatus {
    /// Done.
    Success = 0,
    /// The entry did not decode (an unknown opcode or a bad field).
    BadEntry = 1,
    /// Its range lies outside the application's registered memory (or names a key that is
    /// not its own).
    BadMemory = 2,
    /// The message is longer than the engine's `max_message`.
    TooLong = 3,
    /// The destination is unusable (port 0, unspecified or broadcast address), or the
    /// sender holds state for too many destinations.
    BadDestination = 4,
    /// The message was given up after its retransmission timeouts.
    Timeout = 5,
    /// The endpoint was unbound first (unacknowledged sends, posted buffers).
    Flushed = 6,
    /// The buffer is shorter than the message waiting (`len` says how long it is; the
    /// message stays for the next buffer).
    BufferTooSmall = 7,
}

impl MtpStatus {
    /// The status a byte stands for.
    pub fn from_code(code: u8) -> Option<MtpStatus> {
        use MtpStatus::*;
        [
            Success,
            BadEntry,
            BadMemory,
            TooLong,
            BadDestination,
            Timeout,
            Flushed,
            BufferTooSmall,
        ]
        .into_iter()
        .find(|s| *s as u8 == code)
    }
}

impl fmt::Display for MtpStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MtpStatus::Success => "success",
            MtpStatus::BadEntry => "the entry does not decode",
            MtpStatus::BadMemory => "outside registered memory",
            MtpStatus::TooLong => "message too long",
            MtpStatus::BadDestination => "bad destination",
            MtpStatus::Timeout => "retransmission timeouts exhausted",
            MtpStatus::Flushed => "endpoint unbound",
            MtpStatus::BufferTooSmall => "buffer too small for the message",
        })
    }
}

/// A completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MtpCqe {
    /// Sent or received.
    pub kind: CqeKind,
    /// How it went.
    pub status: MtpStatus,
    /// The entry's cookie.
    pub cookie: u64,
    /// The message id (the sender's: ours for Sent, the peer's for Received).
    pub msg_id: u32,
    /// Bytes received (Received), or the message's length (Sent; BufferTooSmall: needed).
    pub len: u32,
    /// The peer: destination of a send, source of a received message.
    pub peer: SocketAddrV4,
    /// A received message's priority.
    pub priority: u8,
    /// A received message's traffic class.
    pub tc: u8,
}

fn put_peer(e: &mut Payload, peer: SocketAddrV4) {
    put(e, at::IP, &peer.ip().octets());
    put(e, at::PORT, &peer.port().to_le_bytes());
}

fn peer_of(e: &Payload) -> SocketAddrV4 {
    let ip = Ipv4Addr::new(e[at::IP], e[at::IP + 1], e[at::IP + 2], e[at::IP + 3]);
    SocketAddrV4::new(ip, u16_at(e, at::PORT))
}

fn expect_kind(e: &Payload, k: u8) -> Result<(), EntryError> {
    if e[at::KIND] != k {
        return Err(EntryError::UnknownOpcode(e[at::KIND]));
    }
    Ok(())
}

/// The cookie of any entry, even one that does not decode (to complete it with an error).
pub fn cookie_of(e: &Payload) -> u64 {
    u64_at(e, at::COOKIE)
}

impl SendEntry {
    /// The entry's bytes.
    pub fn encode(&self) -> Payload {
        let mut e = [0u8; PAYLOAD_BYTES];
        e[at::KIND] = kind::SEND;
        e[at::PRIORITY] = self.priority;
        e[at::TC] = self.tc;
        put_peer(&mut e, self.dst);
        put(&mut e, at::COOKIE, &self.cookie.to_le_bytes());
        put(&mut e, at::KEY, &self.key.to_le_bytes());
        put(&mut e, at::ADDR, &self.addr.to_le_bytes());
        put(&mut e, at::LEN, &self.len.to_le_bytes());
        e
    }

    /// Decodes a send entry; anything else is an unknown opcode.
    pub fn decode(e: &Payload) -> Result<SendEntry, EntryError> {
        expect_kind(e, kind::SEND)?;
        Ok(SendEntry {
            cookie: cookie_of(e),
            dst: peer_of(e),
            priority: e[at::PRIORITY],
            tc: e[at::TC],
            key: u32_at(e, at::KEY),
            addr: u64_at(e, at::ADDR),
            len: u32_at(e, at::LEN),
        })
    }
}

impl RecvEntry {
    /// The entry's bytes.
    pub fn encode(&self) -> Payload {
        let mut e = [0u8; PAYLOAD_BYTES];
        e[at::KIND] = kind::RECV;
        put(&mut e, at::COOKIE, &self.cookie.to_le_bytes());
        put(&mut e, at::KEY, &self.key.to_le_bytes());
        put(&mut e, at::ADDR, &self.addr.to_le_bytes());
        put(&mut e, at::LEN, &self.len.to_le_bytes());
        e
    }

    /// Decodes a receive entry; anything else is an unknown opcode.
    pub fn decode(e: &Payload) -> Result<RecvEntry, EntryError> {
        expect_kind(e, kind::RECV)?;
        Ok(RecvEntry {
            cookie: cookie_of(e),
            key: u32_at(e, at::KEY),
            addr: u64_at(e, at::ADDR),
            len: u32_at(e, at::LEN),
        })
    }
}

impl MtpCqe {
    /// The entry's bytes.
    pub fn encode(&self) -> Payload {
        let mut e = [0u8; PAYLOAD_BYTES];
        e[at::KIND] = kind::CQE;
        e[at::CQE_KIND] = self.kind as u8;
        e[at::STATUS] = self.status as u8;
        e[at::PRIORITY] = self.priority;
        e[at::TC] = self.tc;
        put_peer(&mut e, self.peer);
        put(&mut e, at::COOKIE, &self.cookie.to_le_bytes());
        put(&mut e, at::MSG_ID, &self.msg_id.to_le_bytes());
        put(&mut e, at::LEN, &self.len.to_le_bytes());
        e
    }

    /// Decodes a completion.
    pub fn decode(e: &Payload) -> Result<MtpCqe, EntryError> {
        expect_kind(e, kind::CQE)?;
        let kind = match e[at::CQE_KIND] {
            1 => CqeKind::Sent,
            2 => CqeKind::Received,
            _ => return Err(EntryError::BadField("completion kind")),
        };
        Ok(MtpCqe {
            kind,
            status: MtpStatus::from_code(e[at::STATUS]).ok_or(EntryError::BadField("status"))?,
            cookie: cookie_of(e),
            msg_id: u32_at(e, at::MSG_ID),
            len: u32_at(e, at::LEN),
            peer: peer_of(e),
            priority: e[at::PRIORITY],
            tc: e[at::TC],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn addr(ip: [u8; 4], port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::from(ip), port)
    }

    #[test]
    fn entries_round_trip_and_keep_their_cookie_at_one_place() {
        let s = SendEntry {
            cookie: 0x1122_3344_5566_7788,
            dst: addr([10, 0, 0, 2], 9000),
            priority: 3,
            tc: 1,
            key: 7,
            addr: 0x7f12_3456_0000,
            len: 1 << 20,
        };
        assert_eq!(SendEntry::decode(&s.encode()), Ok(s));
        assert_eq!(cookie_of(&s.encode()), s.cookie);
        let r = RecvEntry {
            cookie: 9,
            key: 7,
            addr: 0x1000,
            len: 4096,
        };
        assert_eq!(RecvEntry::decode(&r.encode()), Ok(r));
        assert_eq!(cookie_of(&r.encode()), 9);
        let c = MtpCqe {
            kind: CqeKind::Received,
            status: MtpStatus::BufferTooSmall,
            cookie: 9,
            msg_id: 0xdead_beef,
            len: 5000,
            peer: addr([10, 0, 0, 1], 49152),
            priority: 2,
            tc: 4,
        };
        assert_eq!(MtpCqe::decode(&c.encode()), Ok(c));
    }

    #[test]
    fn an_entry_of_another_kind_is_an_unknown_opcode() {
        let r = RecvEntry {
            cookie: 1,
            key: 1,
            addr: 0,
            len: 1,
        }
        .encode();
        assert_eq!(
            SendEntry::decode(&r),
            Err(EntryError::UnknownOpcode(kind::RECV))
        );
        let zero = [0u8; PAYLOAD_BYTES];
        assert_eq!(SendEntry::decode(&zero), Err(EntryError::UnknownOpcode(0)));
        assert_eq!(RecvEntry::decode(&zero), Err(EntryError::UnknownOpcode(0)));
        assert!(MtpCqe::decode(&zero).is_err());
        let mut bad = MtpCqe {
            kind: CqeKind::Sent,
            status: MtpStatus::Success,
            cookie: 0,
            msg_id: 0,
            len: 0,
            peer: addr([0; 4], 0),
            priority: 0,
            tc: 0,
        }
        .encode();
        bad[at::STATUS] = 200;
        assert_eq!(MtpCqe::decode(&bad), Err(EntryError::BadField("status")));
    }

    #[test]
    fn every_status_has_its_code_and_a_message() {
        for code in 0..=255u8 {
            if let Some(s) = MtpStatus::from_code(code) {
                assert_eq!(s as u8, code);
                assert!(!s.to_string().is_empty());
            } else {
                assert!(code > 7, "{code} is a status");
            }
        }
    }

    proptest! {
        /// Any bytes decode to an error or to an entry that encodes back to the same
        /// meaning: no panic on what an application wrote.
        #[test]
        fn any_bytes_decode_without_panic(bytes in proptest::collection::vec(any::<u8>(), PAYLOAD_BYTES)) {
            let mut e = [0u8; PAYLOAD_BYTES];
            e.copy_from_slice(&bytes);
            if let Ok(s) = SendEntry::decode(&e) {
                prop_assert_eq!(SendEntry::decode(&s.encode()), Ok(s));
            }
            if let Ok(r) = RecvEntry::decode(&e) {
                prop_assert_eq!(RecvEntry::decode(&r.encode()), Ok(r));
            }
            if let Ok(c) = MtpCqe::decode(&e) {
                prop_assert_eq!(MtpCqe::decode(&c.encode()), Ok(c));
            }
        }
    }
}
