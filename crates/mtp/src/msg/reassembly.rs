//! The receiver's reassembly: incomplete messages by (source address, source port,
//! message id), bounded in bytes and messages (the oldest incomplete one is evicted to
//! make room), and a bounded memory of completed ids so that retransmissions are
//! acknowledged but not delivered twice.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::Ipv4Addr;

/// A message's name at the receiver (mtp.txt 3.1.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MsgKey {
    /// The sender's address.
    pub src: Ipv4Addr,
    /// The sender's port.
    pub src_port: u16,
    /// The sender's message id.
    pub msg_id: u32,
}

/// What a data packet says of its message.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// The receiving port.
    pub dst_port: u16,
    /// Message bytes.
    pub msg_len: u32,
    /// Message packets.
    pub msg_pkts: u16,
    /// Priority.
    pub priority: u8,
    /// Traffic class.
    pub tc: u8,
}

/// A message being reassembled.
#[derive(Debug)]
pub struct InMessage {
    /// Its shape, from its first packet.
    pub shape: Shape,
    /// Its bytes (allocated once, at the first packet).
    pub data: Vec<u8>,
    got: Vec<bool>,
    got_count: usize,
    /// Every packet below is received (the cumulative SACK run).
    pub cum: u16,
    seq: u64,
}

impl InMessage {
    /// Whether packet `n` was received.
    pub fn has(&self, n: u16) -> bool {
        self.got.get(usize::from(n)).copied().unwrap_or(false)
    }

    /// Whether packet `n` would complete it.
    pub fn completes_with(&self, n: u16) -> bool {
        !self.has(n) && self.got_count + 1 == self.got.len()
    }

    /// Stores packet `n`'s payload at `offset`.
    pub fn store(&mut self, n: u16, offset: usize, payload: &[u8]) {
        let Some(slot) = self.got.get_mut(usize::from(n)) else {
            return;
        };
        if *slot {
            return;
        }
        if let Some(dst) = self.data.get_mut(offset..offset + payload.len()) {
            dst.copy_from_slice(payload);
        }
        *slot = true;
        self.got_count += 1;
        // Amortised: cum only moves forward.
        while self
            .got
            .get(usize::from(self.cum))
            .copied()
            .unwrap_or(false)
        {
            self.cum += 1;
        }
    }

    /// Whether every packet is in.
    pub fn complete(&self) -> bool {
        self.got_count == self.got.len()
    }
}

/// Why a packet was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Its message length or packet count disagrees with the message under its id.
    Conflict,
    /// Its message is longer than the bound.
    TooLong,
    /// More packets than bytes (each packet but a lone empty one carries a byte): refused
    /// so that the per-packet bitmap stays within the byte bound.
    Shape,
}

/// The receiver's reassembly table.
#[derive(Debug)]
pub struct Reassembly {
    table: HashMap<MsgKey, InMessage>,
    order: BTreeMap<u64, MsgKey>,
    bytes: usize,
    next_seq: u64,
    completed: HashMap<MsgKey, u16>,
    completed_order: VecDeque<MsgKey>,
    max_bytes: usize,
    max_messages: usize,
    max_completed: usize,
    max_message_len: u32,
}

impl Reassembly {
    /// Empty, with its bounds.
    pub fn new(
        max_bytes: usize,
        max_messages: usize,
        max_completed: usize,
        max_message_len: u32,
    ) -> Reassembly {
        Reassembly {
            table: HashMap::new(),
            order: BTreeMap::new(),
            bytes: 0,
            next_seq: 0,
            completed: HashMap::new(),
            completed_order: VecDeque::new(),
            max_bytes,
            max_messages,
            max_completed,
            max_message_len,
        }
    }

    /// The packet count of a completed message, if `key` is remembered as completed.
    pub fn completed(&self, key: &MsgKey) -> Option<u16> {
        self.completed.get(key).copied()
    }

    /// The message in reassembly under `key`, if any.
    pub fn get(&self, key: &MsgKey) -> Option<&InMessage> {
        self.table.get(key)
    }

    /// The message for a data packet of `shape`: the one in reassembly (if its shape
    /// agrees), or a new one, evicting the oldest incomplete messages to make room.
    /// Returns it and how many were evicted.
    pub fn admit(&mut self, key: MsgKey, shape: Shape) -> Result<(&mut InMessage, u64), Refusal> {
        if let Some(m) = self.table.get(&key) {
            if m.shape.msg_len != shape.msg_len
                || m.shape.msg_pkts != shape.msg_pkts
                || m.shape.dst_port != shape.dst_port
            {
                return Err(Refusal::Conflict);
            }
        } else {
            let len = shape.msg_len as usize;
            if shape.msg_len > self.max_message_len || len > self.max_bytes {
                return Err(Refusal::TooLong);
            }
            if u32::from(shape.msg_pkts) > shape.msg_len.max(1) {
                return Err(Refusal::Shape);
            }
            let mut evicted = 0;
            while self.bytes + len > self.max_bytes || self.table.len() >= self.max_messages {
                let Some((_, old)) = self.order.pop_first() else {
                    break;
                };
                if let Some(m) = self.table.remove(&old) {
                    self.bytes -= m.data.len();
                    evicted += 1;
                }
            }
            let seq = self.next_seq;
            self.next_seq += 1;
            self.order.insert(seq, key);
            self.bytes += len;
            self.table.insert(
                key,
                InMessage {
                    shape,
                    data: vec![0; len],
                    got: vec![false; usize::from(shape.msg_pkts)],
                    got_count: 0,
                    cum: 0,
                    seq,
                },
            );
            let m = self.table.get_mut(&key).ok_or(Refusal::Conflict)?;
            return Ok((m, evicted));
        }
        let m = self.table.get_mut(&key).ok_or(Refusal::Conflict)?;
        Ok((m, 0))
    }

    /// Takes a complete message out and remembers its id (forgetting the oldest beyond
    /// the bound).
    pub fn finish(&mut self, key: &MsgKey) -> Option<InMessage> {
        let m = self.table.remove(key)?;
        self.order.remove(&m.seq);
        self.bytes -= m.data.len();
        if self.completed.insert(*key, m.shape.msg_pkts).is_none() {
            self.completed_order.push_back(*key);
        }
        while self.completed_order.len() > self.max_completed {
            if let Some(old) = self.completed_order.pop_front() {
                self.completed.remove(&old);
            }
        }
        Some(m)
    }

    /// Incomplete messages held.
    pub fn messages(&self) -> usize {
        self.table.len()
    }

    /// Bytes held by incomplete messages.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Completed ids remembered.
    pub fn remembered(&self) -> usize {
        self.completed.len()
    }
}
