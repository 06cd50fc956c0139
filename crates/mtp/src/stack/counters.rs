//! What the stack did: one counter per drop, refusal and retransmission cause.

/// The stack's counters (every drop or refusal has one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackCounters {
    /// Frames handed to `handle_frame`.
    pub frames_in: u64,
    /// Frames `poll_transmit` produced.
    pub frames_out: u64,
    /// Data packets sent (first transmissions and retransmissions).
    pub data_sent: u64,
    /// ACK packets sent.
    pub acks_sent: u64,
    /// ACK packets received.
    pub acks_received: u64,
    /// Data packets received (trimmed ones included).
    pub data_received: u64,
    /// Frames dropped: the MTP checksum (or IPv4's) did not verify.
    pub bad_checksum: u64,
    /// Frames dropped: not well-formed MTP (bad structure, wrong version, lengths).
    pub malformed: u64,
    /// Frames dropped: not addressed to our IPv4 address.
    pub not_for_us: u64,
    /// Data packets dropped: no endpoint on the destination port.
    pub unknown_port: u64,
    /// Data packets refused: message longer than `max_message_len`.
    pub too_long: u64,
    /// Incomplete messages evicted from reassembly to make room.
    pub reassembly_evictions: u64,
    /// Data packets refused: the message length/packets disagree with the message in
    /// reassembly under the same id, or the packet's length with its number.
    pub msg_id_conflicts: u64,
    /// Received lists longer than the configured bounds, truncated.
    pub feedback_truncated: u64,
    /// Data packets already received (acknowledged again, not stored twice).
    pub duplicates: u64,
    /// Messages delivered into endpoint queues.
    pub messages_delivered: u64,
    /// Data packets dropped un-acknowledged: the endpoint's receive queue was full.
    pub endpoint_queue_full: u64,
    /// ACKs dropped: the ACK queue was full (the sender will retransmit).
    pub ack_queue_full: u64,
    /// Events dropped: the event queue was full.
    pub event_queue_full: u64,
    /// Retransmissions after a timeout.
    pub retx_timeout: u64,
    /// Retransmissions after a NACK.
    pub retx_nack: u64,
    /// Retransmissions after a SACK gap (three later packets acknowledged).
    pub retx_sack_gap: u64,
    /// Retransmissions after RACK-style detection (a later transmission was acknowledged).
    pub retx_rack: u64,
    /// Transmissions not logged for RACK: the destination's log was full.
    pub rack_log_full: u64,
    /// Retransmission timeouts that fired.
    pub timeouts: u64,
    /// NACKs sent (for trimmed packets).
    pub nacks_sent: u64,
    /// NACKs received.
    pub nacks_received: u64,
    /// Trimmed data packets received.
    pub trimmed_received: u64,
    /// ACK runs for unknown or finished messages, or packets not sent (ignored).
    pub stale_acks: u64,
    /// Messages acknowledged completely.
    pub messages_acked: u64,
    /// Messages failed.
    pub messages_failed: u64,
    /// Messages sent with a path-exclude list.
    pub excluded_messages: u64,
    /// Frames not sent: no neighbour MAC for the destination (kept, retried later).
    pub no_neighbor: u64,
    /// Feedback ignored: the pathlet table is full.
    pub pathlets_full: u64,
}
