//! Blobs larger than one message (issue 17 item 2): split into messages that each begin
//! with a small blob header, and reassembled in order above the transport (messages are
//! independent, so they may arrive in any order). Sans-IO and bounded.
//!
//! Blob header (big-endian, 16 bytes): blob id u32, sequence u32, total length u64.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::net::SocketAddrV4;

/// Bytes of the blob header at the front of each message.
pub const BLOB_HEADER_LEN: usize = 16;

/// Why a blob could not be split or a message not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlobError {
    /// The message size leaves no room for data after the blob header.
    MessageTooSmall(usize),
    /// The message is shorter than the blob header, or its piece lies outside the blob.
    Malformed,
    /// The blob is longer than the reassembler accepts.
    TooLong(u64),
    /// A piece disagrees with earlier pieces of the same blob (total length).
    Inconsistent,
}

impl fmt::Display for BlobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlobError::MessageTooSmall(n) => {
                write!(f, "message size {n} cannot carry a blob piece")
            }
            BlobError::Malformed => f.write_str("malformed blob piece"),
            BlobError::TooLong(n) => write!(f, "blob of {n} bytes is too long"),
            BlobError::Inconsistent => f.write_str("blob piece disagrees with its blob"),
        }
    }
}

impl std::error::Error for BlobError {}

/// The messages of one blob, one at a time (each allocated as it is taken).
#[derive(Debug)]
pub struct Splitter<'a> {
    id: u32,
    data: &'a [u8],
    piece: usize,
    seq: u32,
    done: bool,
}

/// Splits `data` into messages of at most `max_message_len` bytes (header included).
pub fn split(id: u32, data: &[u8], max_message_len: usize) -> Result<Splitter<'_>, BlobError> {
    let piece = max_message_len.saturating_sub(BLOB_HEADER_LEN);
    if piece == 0 {
        return Err(BlobError::MessageTooSmall(max_message_len));
    }
    Ok(Splitter {
        id,
        data,
        piece,
        seq: 0,
        done: false,
    })
}

impl Iterator for Splitter<'_> {
    type Item = Vec<u8>;

    fn next(&mut self) -> Option<Vec<u8>> {
        if self.done {
            return None;
        }
        let off = self.seq as usize * self.piece;
        let end = (off + self.piece).min(self.data.len());
        let mut m = Vec::with_capacity(BLOB_HEADER_LEN + end - off);
        m.extend_from_slice(&self.id.to_be_bytes());
        m.extend_from_slice(&self.seq.to_be_bytes());
        m.extend_from_slice(&(self.data.len() as u64).to_be_bytes());
        m.extend_from_slice(&self.data[off..end]);
        self.seq += 1;
        self.done = end >= self.data.len();
        Some(m)
    }
}

#[derive(Debug)]
struct Partial {
    total: u64,
    next_seq: u32,
    data: Vec<u8>,
    early: BTreeMap<u32, Vec<u8>>,
    held: usize,
}

/// Reassembles blobs by (sender, blob id), in order, within a byte bound (the oldest
/// incomplete blob is dropped to make room, and counted).
#[derive(Debug)]
pub struct Reassembler {
    blobs: HashMap<(SocketAddrV4, u32), Partial>,
    order: VecDeque<(SocketAddrV4, u32)>,
    held: usize,
    max_blob_len: u64,
    max_bytes: usize,
    /// Incomplete blobs dropped to make room.
    pub evictions: u64,
}

impl Reassembler {
    /// Accepts blobs up to `max_blob_len` bytes, holding at most `max_bytes` in total.
    pub fn new(max_blob_len: u64, max_bytes: usize) -> Reassembler {
        Reassembler {
            blobs: HashMap::new(),
            order: VecDeque::new(),
            held: 0,
            max_blob_len: max_blob_len.min(max_bytes as u64),
            max_bytes,
            evictions: 0,
        }
    }

    /// Bytes held.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Takes a message from `src`; returns a whole blob (id, bytes) when it completes.
    pub fn push(
        &mut self,
        src: SocketAddrV4,
        msg: &[u8],
    ) -> Result<Option<(u32, Vec<u8>)>, BlobError> {
        let h = msg.get(..BLOB_HEADER_LEN).ok_or(BlobError::Malformed)?;
        let id = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let seq = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        let mut t = [0u8; 8];
        t.copy_from_slice(&h[8..16]);
        let total = u64::from_be_bytes(t);
        let piece = &msg[BLOB_HEADER_LEN..];
        if total > self.max_blob_len {
            return Err(BlobError::TooLong(total));
        }
        let key = (src, id);
        if !self.blobs.contains_key(&key) {
            while self.held + piece.len() > self.max_bytes {
                let Some(old) = self.order.pop_front() else {
                    break;
                };
                if let Some(p) = self.blobs.remove(&old) {
                    self.held -= p.held;
                    self.evictions += 1;
                }
            }
            self.blobs.insert(
                key,
                Partial {
                    total,
                    next_seq: 0,
                    data: Vec::new(),
                    early: BTreeMap::new(),
                    held: 0,
                },
            );
            self.order.push_back(key);
        }
        let p = self.blobs.get_mut(&key).ok_or(BlobError::Inconsistent)?;
        if p.total != total {
            return Err(BlobError::Inconsistent);
        }
        if seq < p.next_seq || p.early.contains_key(&seq) {
            return Ok(None);
        }
        if p.data.len() as u64
            + p.early.values().map(|v| v.len() as u64).sum::<u64>()
            + piece.len() as u64
            > total
        {
            return Err(BlobError::Malformed);
        }
        if self.held + piece.len() > self.max_bytes {
            // No room even after eviction: refuse this piece; the blob cannot complete.
            return Err(BlobError::TooLong(total));
        }
        self.held += piece.len();
        p.held += piece.len();
        if seq == p.next_seq {
            p.data.extend_from_slice(piece);
            p.next_seq += 1;
            while let Some(next) = p.early.remove(&p.next_seq) {
                p.data.extend_from_slice(&next);
                p.next_seq += 1;
            }
        } else {
            p.early.insert(seq, piece.to_vec());
        }
        if p.data.len() as u64 == total && p.early.is_empty() {
            let done = self.blobs.remove(&key).ok_or(BlobError::Inconsistent)?;
            self.held -= done.held;
            if let Some(i) = self.order.iter().position(|k| *k == key) {
                self.order.remove(i);
            }
            return Ok(Some((id, done.data)));
        }
        Ok(None)
    }
}
