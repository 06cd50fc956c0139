//! The header summary: what one segment carries from stage to stage (Laminar 4, FlexTOE 3.1).
//! Stages never share per-connection state; they hand each other this metadata instead.

use sluice_wire::tcp::{SeqNumber, TcpFlags, MAX_SACK_BLOCKS};

/// Actions a stage asks later stages (or the control plane) to take for a segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Actions(pub u16);

impl Actions {
    /// Acknowledge immediately (out-of-order, duplicate, FIN, window update).
    pub(crate) const ACK_NOW: Actions = Actions(1 << 0);
    /// The segment carried new data: count it toward the ACK policy.
    pub(crate) const ACK_DATA: Actions = Actions(1 << 1);
    /// Three duplicate ACKs: start a fast retransmit.
    pub(crate) const FAST_RETRANSMIT: Actions = Actions(1 << 2);
    /// The peer's FIN was received in order (a state change for the control plane).
    pub(crate) const FIN_RECEIVED: Actions = Actions(1 << 3);
    /// Our FIN was acknowledged (a state change for the control plane).
    pub(crate) const FIN_ACKED: Actions = Actions(1 << 4);
    /// The send window opened or data was acknowledged: the scheduler may send more.
    pub(crate) const WAKE_TX: Actions = Actions(1 << 5);
    /// Drop the segment and let the control plane answer it (out-of-window, PAWS, bad ACK).
    pub(crate) const EXCEPTION: Actions = Actions(1 << 6);
    /// The ACK field was beyond anything sent (RFC 5961 5.2 / RFC 9293 "ACK of unsent data").
    pub(crate) const ACK_UNSENT: Actions = Actions(1 << 7);
    /// The ACK field was below snd_una - max window (RFC 5961 5.2).
    pub(crate) const ACK_TOO_OLD: Actions = Actions(1 << 8);
    /// The segment failed PAWS (RFC 7323 5.3).
    pub(crate) const PAWS: Actions = Actions(1 << 9);
    /// A duplicate ACK (RFC 5681 2), counted for congestion control.
    pub(crate) const DUPACK: Actions = Actions(1 << 10);
    /// The ACK echoes a timestamp older than the timeout's retransmission: the original
    /// arrived, and the timeout was spurious (RFC 3522).
    pub(crate) const SPURIOUS_RTO: Actions = Actions(1 << 11);
    /// D-SACKs showed every retransmission of the latest fast recovery needless (RFC 3708):
    /// its window cut is undone.
    pub(crate) const SPURIOUS_RECOVERY: Actions = Actions(1 << 12);
    /// Out-of-order data dropped because the bytes all connections buffer are over
    /// `tcp_mem`'s high threshold (control/memory.rs).
    pub(crate) const OOO_OVER_LIMIT: Actions = Actions(1 << 13);
    /// The segment stored, merged or discarded out-of-order intervals: the bytes its
    /// connection holds are recounted, not updated by the in-order and ACKed amounts.
    pub(crate) const OOO_CHANGED: Actions = Actions(1 << 14);
    /// Out-of-order data landed outside the interval the latest out-of-order data touched:
    /// news for the SACK blocks of the next ACK (RFC 2018 4), which bounds how long ACKs
    /// may be held.
    pub(crate) const NEW_SACK_BLOCK: Actions = Actions(1 << 15);

    /// Whether every bit of `other` is set.
    #[inline]
    pub(crate) fn contains(self, other: Actions) -> bool {
        self.0 & other.0 == other.0
    }

    /// Sets the bits of `other`.
    #[inline]
    pub(crate) fn insert(&mut self, other: Actions) {
        self.0 |= other.0;
    }
}

/// One received segment on its way through the pipeline.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HeaderSummary {
    /// Connection slot (from the pre-processor's lookup).
    pub slot: u32,
    /// Index of the frame in the batch.
    pub frame: u16,
    /// Offset of the payload in the frame.
    pub payload_offset: u16,
    /// Payload length as received.
    pub payload_len: u16,
    /// TCP flags.
    pub flags: TcpFlags,
    /// Whether the IP header carried ECN CE.
    pub ecn_ce: bool,
    /// Sequence number.
    pub seq: SeqNumber,
    /// Acknowledgment number.
    pub ack: SeqNumber,
    /// Window field, unscaled.
    pub window: u16,
    /// Whether the segment had a timestamp option.
    pub has_timestamp: bool,
    /// TSval.
    pub ts_val: u32,
    /// TSecr.
    pub ts_ecr: u32,
    /// SACK blocks (left, right) of the segment's SACK option; the first `sack_count`.
    pub sack_blocks: [(SeqNumber, SeqNumber); MAX_SACK_BLOCKS],
    /// Number of SACK blocks.
    pub sack_count: u8,
    /// The connection is attached to a shared log (the pre-processor's flag): its
    /// payload goes there, not to its receive ring.
    pub log: bool,

    // Set by the protocol stage.
    /// Where to write the accepted payload, and how much of it (after trimming).
    pub place_seq: SeqNumber,
    /// Offset of the accepted part in the frame.
    pub place_offset: u16,
    /// Length of the accepted part.
    pub place_len: u16,
    /// Bytes that became readable in order.
    pub rx_advance: u32,
    /// Data bytes newly acknowledged (SYN and FIN excluded).
    pub tx_freed: u32,
    /// An RTT sample in microseconds, or 0.
    pub rtt_sample_us: u32,
    /// rcv_nxt as this segment left it: what an ACK for this segment acknowledges. Later
    /// segments of the same batch move the connection's rcv_nxt on before the ACK is built.
    pub ack_rcv_nxt: SeqNumber,
    /// The receive window (bytes, unscaled) as this segment left it, for the same ACK.
    pub ack_rx_avail: u32,
    /// What the protocol stage made of the SACK blocks, for the counters.
    pub sack: SackReport,
    /// RACK's reordering timer (RFC 8985 6.3): arm it this many microseconds ahead (0: no).
    pub rack_timer_us: u32,
    /// Segments RACK found lost on this ACK (RFC 8985 6.2).
    pub rack_lost: u32,
    /// What later stages must do.
    pub actions: Actions,
}

/// The protocol stage's verdict on one ACK's SACK blocks (RFC 2018, RFC 6675 Update()).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SackReport {
    /// Blocks looked at.
    pub received: u8,
    /// Blocks refused: empty, reversed, or outside (snd_una, snd_max].
    pub invalid: u8,
    /// Blocks at or below snd_una (a D-SACK, RFC 2883, or an old ACK), ignored.
    pub old: u8,
    /// Ranges dropped because the scoreboard was full.
    pub overflow: u8,
    /// The blocks showed that retransmissions were lost again.
    pub rxt_lost: bool,
    /// A D-SACK accounted for the last needless retransmission of the latest recovery.
    pub spurious_recovery: bool,
}
