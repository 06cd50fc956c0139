//! What an MTP device counts, and what it tells the caller to do with a frame.

/// Counters of one MTP device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MtpStats {
    /// MTP frames admitted to an egress (data and ACKs).
    pub mtp_frames: u64,
    /// Other frames admitted (untouched).
    pub other_frames: u64,
    /// Feedback TLVs appended.
    pub feedback_appended: u64,
    /// Feedback not appended because the packet had no free slot (its flag is set).
    pub feedback_full: u64,
    /// `Ecn` feedback appended with value 1.
    pub ecn_congested: u64,
    /// MTP data packets trimmed to their header because the egress queue was full.
    pub trimmed: u64,
    /// Packets dropped as over their class's fair share.
    pub fair_share_drops: u64,
    /// Packets trimmed (instead of dropped) as over their class's fair share.
    pub fair_share_trims: u64,
    /// Packets of a class not tracked because the port's class table was full.
    pub tc_table_full: u64,
    /// Messages pinned by the message balancer.
    pub pins: u64,
    /// Packets that found their message pinned.
    pub pin_hits: u64,
    /// Pins evicted (least recently used) to make room.
    pub pin_evictions: u64,
    /// Choices that skipped a group member the packet's path-exclude list names.
    pub exclusions_honoured: u64,
    /// Choices where every member was excluded (the exclusion was then ignored).
    pub exclusions_unsatisfiable: u64,
    /// MTP frames sent into a TCP island as TCP.
    pub bridged_out: u64,
    /// Bridged segments from a TCP island turned back into MTP.
    pub bridged_in: u64,
    /// Frames the bridge refused (damaged in the island, or not translatable): dropped.
    pub bridge_refused: u64,
}

/// What to do with a frame [`MtpDevice::admit`] saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Offer it to the egress with this much headroom beyond the queue's capacity (non-zero
    /// for a trimmed header: [`crate::Channel::offer_with_headroom`]).
    Forward {
        /// Bytes beyond the capacity it may use.
        headroom: usize,
    },
    /// Drop it (counted by the device).
    Drop,
}
