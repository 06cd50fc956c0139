//! Looking inside an MTP stack: its counters and the smoothed RTT to a destination.

use std::net::Ipv4Addr;

use crate::boundary::{status, with_stack, Out};
use crate::error::sluice_error;
use crate::mtp::host::sluice_mtp_stack;

/// The MTP stack's counters (the core's `StackCounters`, every drop or refusal has one),
/// and the calls the ABI refused.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sluice_mtp_counters {
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
    /// Calls on this stack refused for the caller's input: a NULL or invalid argument, an
    /// invalid handle, a short buffer.
    pub abi_refused: u64,
}

/// The stack's counters into `*counters`.
///
/// # Safety
/// `stack` is NULL or a live MTP stack that no other thread uses during the call;
/// `counters` is NULL or valid for a write of a `sluice_mtp_counters`.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_stack_counters(
    stack: *mut sluice_mtp_stack,
    counters: *mut sluice_mtp_counters,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    let out = unsafe { Out::new(counters) };
    // SAFETY: forwarded from this function's contract.
    status(unsafe {
        with_stack(stack, |s| {
            let out = out?;
            let c = s.core.counters();
            out.write(sluice_mtp_counters {
                frames_in: c.frames_in,
                frames_out: c.frames_out,
                data_sent: c.data_sent,
                acks_sent: c.acks_sent,
                acks_received: c.acks_received,
                data_received: c.data_received,
                bad_checksum: c.bad_checksum,
                malformed: c.malformed,
                not_for_us: c.not_for_us,
                unknown_port: c.unknown_port,
                too_long: c.too_long,
                reassembly_evictions: c.reassembly_evictions,
                msg_id_conflicts: c.msg_id_conflicts,
                feedback_truncated: c.feedback_truncated,
                duplicates: c.duplicates,
                messages_delivered: c.messages_delivered,
                endpoint_queue_full: c.endpoint_queue_full,
                ack_queue_full: c.ack_queue_full,
                event_queue_full: c.event_queue_full,
                retx_timeout: c.retx_timeout,
                retx_nack: c.retx_nack,
                retx_sack_gap: c.retx_sack_gap,
                retx_rack: c.retx_rack,
                rack_log_full: c.rack_log_full,
                timeouts: c.timeouts,
                nacks_sent: c.nacks_sent,
                nacks_received: c.nacks_received,
                trimmed_received: c.trimmed_received,
                stale_acks: c.stale_acks,
                messages_acked: c.messages_acked,
                messages_failed: c.messages_failed,
                excluded_messages: c.excluded_messages,
                no_neighbor: c.no_neighbor,
                pathlets_full: c.pathlets_full,
                abi_refused: s.refused_calls,
            });
            Ok(0)
        })
    })
}

/// The smoothed RTT to `ip` (host byte order): returns 1 and writes it to `*srtt_ns`, or
/// 0 (and writes 0) when no sample was taken yet.
///
/// # Safety
/// `stack` is NULL or a live MTP stack that no other thread uses during the call; `srtt_ns`
/// is NULL or valid for a write of a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_srtt(
    stack: *mut sluice_mtp_stack,
    ip: u32,
    srtt_ns: *mut u64,
) -> i32 {
    // SAFETY: forwarded from this function's contract.
    let out = unsafe { Out::new(srtt_ns) };
    // SAFETY: forwarded from this function's contract.
    let r = unsafe {
        with_stack(stack, |s| {
            let out = out?;
            let srtt = s.core.srtt(Ipv4Addr::from(ip));
            out.write(srtt.unwrap_or(0));
            Ok(i64::from(srtt.is_some()))
        })
    };
    r as i32
}
