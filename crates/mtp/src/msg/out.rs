//! A message being sent: its bytes (allocated once), its packets' state, what to
//! retransmit, and its route.

use std::collections::VecDeque;
use std::net::SocketAddrV4;

use crate::cc::{PathId, Route};
use crate::endpoint::EndpointId;
use crate::time::Nanos;

/// A packet's state at the sender.
#[derive(Clone, Copy, Debug, Default)]
pub struct PktState {
    /// When it was last sent.
    pub sent_at: Nanos,
    /// When it was first sent: an ACK of a packet sent twice may be for either copy, so this
    /// is all it proves was delivered (RACK's time of the latest delivery).
    pub first_sent_at: Nanos,
    /// Sent at least once.
    pub sent: bool,
    /// In flight (sent, charged, neither acknowledged nor declared lost).
    pub inflight: bool,
    /// Acknowledged.
    pub acked: bool,
    /// Retransmitted at least once (its RTT samples are ambiguous: Karn).
    pub retransmitted: bool,
    /// Waiting in the retransmission queue.
    pub queued: bool,
    /// Resent by the timer: its original, a retransmission timeout old, is taken as lost,
    /// so its ACK is for the copy sent last.
    pub resent_by_timer: bool,
}

/// A message being sent.
#[derive(Debug)]
pub struct OutMessage {
    /// The sending endpoint.
    pub ep: EndpointId,
    /// Its port.
    pub src_port: u16,
    /// Where to.
    pub dst: SocketAddrV4,
    /// The message id.
    pub id: u32,
    /// Priority (higher first).
    pub priority: u8,
    /// Traffic class.
    pub tc: u8,
    /// The bytes.
    pub data: Vec<u8>,
    /// Payload bytes per packet.
    pub mss: usize,
    /// Packets' state.
    pub pkt: Vec<PktState>,
    /// Packets acknowledged.
    pub acked: usize,
    /// Every packet below is acknowledged (SACK processing starts here).
    pub acked_prefix: u16,
    /// The next packet never sent.
    pub next_new: u16,
    /// First transmissions below this were checked for a SACK gap.
    pub lost_scan: u16,
    /// Packets to retransmit, in order.
    pub retx: VecDeque<u16>,
    /// Its route (exclude list and pinned path), chosen at the first send.
    pub route: Option<Route>,
    /// The path its bytes in flight are charged to (None: only the destination's).
    pub charge: Option<PathId>,
    /// Bytes in flight, charged to `charge`.
    pub charged_bytes: u64,
    /// The path its ACKs' feedback revealed (devices pin a message to one path).
    pub learned: Option<PathId>,
    /// Timeouts so far.
    pub timeouts: u32,
}

impl OutMessage {
    /// Packets of a message of `len` bytes (a 0-byte message is one empty packet).
    pub fn packets_for(len: usize, mss: usize) -> usize {
        len.div_ceil(mss.max(1)).max(1)
    }

    /// The message's packet count.
    pub fn pkts(&self) -> u16 {
        self.pkt.len() as u16
    }

    /// Packet `n`'s offset and length.
    pub fn span(&self, n: u16) -> (usize, usize) {
        let off = usize::from(n) * self.mss;
        (off, self.data.len().saturating_sub(off).min(self.mss))
    }

    /// Whether it has a packet to send now.
    pub fn wants_to_send(&self) -> bool {
        !self.retx.is_empty() || self.next_new < self.pkts()
    }

    /// Bytes still to send (the SRPT key).
    pub fn remaining(&self) -> u64 {
        let (off, _) = self.span(self.next_new);
        let new = self.data.len().saturating_sub(off.min(self.data.len()));
        (new + self.retx.len() * self.mss) as u64
    }

    /// The next packet to send: a retransmission first.
    pub fn peek(&self) -> Option<u16> {
        self.retx
            .front()
            .copied()
            .or((self.next_new < self.pkts()).then_some(self.next_new))
    }

    /// Queues packet `n` for retransmission unless it is acknowledged or queued.
    pub fn queue_retx(&mut self, n: u16) -> bool {
        match self.pkt.get_mut(usize::from(n)) {
            Some(p) if p.sent && !p.acked && !p.queued => {
                p.queued = true;
                self.retx.push_back(n);
                true
            }
            _ => false,
        }
    }

    /// Whether every packet is acknowledged.
    pub fn done(&self) -> bool {
        self.acked == self.pkt.len()
    }
}
