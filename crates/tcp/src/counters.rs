//! Counters: every dropped or refused input is counted here.

/// Event and drop counters of one core.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Frames handed to the core.
    pub frames_rx: u64,
    /// Frames the core emitted.
    pub frames_tx: u64,
    /// Frames that failed to parse (truncated or malformed headers).
    pub malformed: u64,
    /// Frames with a bad IPv4 or TCP checksum.
    pub bad_checksum: u64,
    /// Frames not addressed to this host, or of a protocol it does not speak.
    pub not_for_us: u64,
    /// IPv4 fragments (not reassembled; dropped by the control plane).
    pub fragments: u64,
    /// TCP segments handled on the data-path fast path.
    pub fast_path: u64,
    /// TCP segments handed to the control plane.
    pub exceptions: u64,
    /// RSTs sent for segments to closed ports or unknown connections.
    pub rst_sent: u64,
    /// Valid RSTs that aborted a connection.
    pub rst_received: u64,
    /// RFC 5961 challenge ACKs sent.
    pub challenge_acks: u64,
    /// Challenge ACKs suppressed by the per-connection rate limit.
    pub challenge_acks_suppressed: u64,
    /// Segments dropped by PAWS (RFC 7323 5).
    pub paws_drops: u64,
    /// Segments outside the receive window.
    pub out_of_window: u64,
    /// ACKs outside the RFC 5961 acceptable range, or of unsent data.
    pub bad_acks: u64,
    /// Out-of-order segments stored in an interval.
    pub ooo_stored: u64,
    /// Out-of-order segments dropped because every interval was in use.
    pub ooo_dropped: u64,
    /// Segments entirely duplicate of received data.
    pub duplicate_segments: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Retransmission timeouts found spurious (RFC 3522) and undone (RFC 4015).
    pub spurious_timeouts: u64,
    /// Fast retransmits after three duplicate ACKs.
    pub fast_retransmits: u64,
    /// Bytes sent again (go-back-N or SACK recovery) after a timeout or fast retransmit.
    pub retransmitted_bytes: u64,
    /// SACK blocks received on connections that use SACK recovery (RFC 2018).
    pub sack_blocks_rx: u64,
    /// SACK blocks ignored as invalid: empty, reversed, or outside (snd_una, snd_max].
    pub sack_blocks_invalid: u64,
    /// SACK blocks at or below snd_una (D-SACK, RFC 2883, or an old ACK), ignored.
    pub sack_blocks_old: u64,
    /// SACKed ranges dropped because the scoreboard was full (`Config::sack_scoreboard`).
    pub sack_scoreboard_full: u64,
    /// A connection needed a row of the cold pool (`Config::cold_pool`) and found none:
    /// its out-of-order data or FIN was dropped (the peer retransmits), its SACK blocks
    /// found no scoreboard (also counted in `sack_scoreboard_full`), or its recovery or
    /// timeout went on without the scoreboard (go-back-N, RFC 6582).
    pub cold_pool_empty: u64,
    /// SACK-based loss recoveries begun (RFC 6675 5); also counted in `fast_retransmits`.
    pub sack_recoveries: u64,
    /// Segments retransmitted by NextSeg() during SACK recovery (RFC 6675).
    pub sack_retransmits: u64,
    /// Times SACK blocks for data sent after a retransmission showed it lost again, so the
    /// holes went once more without waiting for the timer.
    pub sack_lost_retransmissions: u64,
    /// Times the retransmission timer found recovery stuck on a lost retransmission at
    /// snd_una while later data was SACKed, and resent it without a timeout (RFC 8985 6.2).
    pub rxt_lost_by_timer: u64,
    /// Tail loss probes sent (RFC 8985 7.3).
    pub tlp_probes: u64,
    /// Tail loss probes that repaired a loss (RFC 8985 7.4: the ACK went past the probe
    /// with no D-SACK of it); congestion control answered each as a loss.
    pub tlp_recoveries: u64,
    /// Segments RACK found lost by time (RFC 8985 6.2): sent more than RTT + reo_wnd
    /// before the most recently delivered one.
    pub rack_losses: u64,
    /// RACK reordering-timer expiries (RFC 8985 6.3).
    pub rack_reo_timeouts: u64,
    /// Large segments handed to a device's segmentation offload (TSO/GSO).
    pub large_segments_tx: u64,
    /// Zero-window probes sent.
    pub window_probes: u64,
    /// Times a send buffer doubled because the congestion window needed more room.
    pub tx_buffer_grown: u64,
    /// Fast recoveries undone because D-SACKs showed every retransmission needless
    /// (reordering, not loss; RFC 3708).
    pub spurious_recoveries: u64,
    /// Times a receive buffer doubled because the sender had nearly filled its window.
    pub rx_buffer_grown: u64,
    /// SYN cookies sent because the SYN backlog was full.
    pub syn_cookies_sent: u64,
    /// Connections completed from a valid SYN cookie.
    pub syn_cookies_accepted: u64,
    /// ACKs carrying an invalid or stale SYN cookie (checked while cookies are outstanding).
    pub syn_cookies_rejected: u64,
    /// ACKs in LISTEN when no SYN cookie is outstanding (segments of connections already
    /// gone, or forgeries): answered with a RST (RFC 9293 3.10.7.2), not checked as cookies.
    pub listen_stray_acks: u64,
    /// Half-open connections replaced by the cookie connection of the same SYN (the SYN was
    /// answered by a cookie first, and by the half-open entry when retransmitted).
    pub half_open_replaced_by_cookie: u64,
    /// SYNs with a new ISN that met a half-open (SYN-RECEIVED) connection of the same
    /// 4-tuple, a stale entry: answered with an ACK, so that the peer's RST frees it and its
    /// next SYN is accepted (RFC 9293 3.10.7.4).
    pub syn_in_syn_received: u64,
    /// Half-open connections whose next hop's MAC a retransmitted SYN changed: the first
    /// SYN's Ethernet source (which no checksum covers) differed, so the SYN-ACKs had
    /// gone to another address.
    pub handshake_mac_relearned: u64,
    /// TIME-WAIT connections reopened by a new SYN (RFC 6191, RFC 9293 MAY-2).
    pub time_wait_reopened: u64,
    /// SYNs that met a TIME-WAIT connection and did not reopen it (RFC 6191 could not tell
    /// them from old duplicates, or the application still holds the connection); answered
    /// with an ACK.
    pub time_wait_syn_refused: u64,
    /// SYNs dropped (broadcast or multicast source).
    pub syn_dropped: u64,
    /// Connection requests refused with a RST because the connection table was full: a SYN,
    /// or a SYN cookie's ACK that found no slot (the client learns at once, instead of
    /// holding a connection the engine never accepted).
    pub conn_table_full: u64,
    /// Connections dropped because the accept queue was full.
    pub accept_queue_overflow: u64,
    /// Connections aborted because the user timeout expired.
    pub user_timeouts: u64,
    /// Control frames dropped because their queue was full.
    pub control_queue_full: u64,
    /// ARP requests sent.
    pub arp_requests: u64,
    /// ARP replies sent.
    pub arp_replies: u64,
    /// Segments received with ECN CE marks.
    pub ecn_ce: u64,
    /// Connections established with ECN negotiated (RFC 3168 6.1.1).
    pub ecn_connections: u64,
    /// Segments sent with CWR after an ECN reaction (RFC 3168 6.1.2).
    pub ecn_cwr_sent: u64,
    /// Congestion-control iterations run by the control plane.
    pub cc_iterations: u64,
    /// Sum of the smoothed RTTs (usec) those iterations ran with: over `cc_iterations`, the
    /// mean SRTT a sender saw (a window-limited sender's goodput follows it).
    pub cc_srtt_us_sum: u64,
    /// Times the flow scheduler held a rate-limited connection in its timing wheel until
    /// its send time.
    pub sched_paced: u64,
    /// Times the bytes buffered by all connections rose above `tcp_mem`'s pressure
    /// threshold (rings stop growing, windows reopen only a little; control/memory.rs).
    pub memory_pressure_entered: u64,
    /// Times the bytes buffered rose above `tcp_mem`'s high threshold.
    pub memory_over_limit_entered: u64,
    /// Window updates after a read held to a few segments by memory pressure.
    pub memory_window_clamped: u64,
    /// Ring doublings (receive or send) refused under memory pressure.
    pub memory_growth_refused: u64,
    /// Grown rings of idle connections returned to the initial size under pressure.
    pub memory_rings_released: u64,
    /// SYNs not answered because the bytes buffered were over the high threshold.
    pub memory_syn_refused: u64,
    /// ACKs of valid SYN cookies answered with a RST because the bytes buffered were over
    /// the high threshold: the cookie went out before the total crossed it, and the peer,
    /// established on it, learns at once that the engine did not take the connection.
    pub memory_cookie_refused: u64,
    /// Out-of-order segments dropped because the bytes buffered were over the high
    /// threshold (in-order data within the window is always taken).
    pub memory_ooo_dropped: u64,
    /// SYNs not answered because their listener's memory group was over its own limit
    /// (control/memory_group.rs); other groups' SYNs were answered.
    pub memory_group_syn_refused: u64,
    /// ACKs of valid SYN cookies answered with a RST because their listener's memory group
    /// was over its own limit.
    pub memory_group_cookie_refused: u64,
    /// Times a memory group's buffered bytes rose above its own high threshold.
    pub memory_group_over_limit_entered: u64,
    /// Closes handed to the teardown stage (acceltcp.txt 4.2): the connection left the
    /// table and the stage finishes its close.
    pub teardown_offloaded: u64,
    /// Closes that asked for teardown offload and took the normal path: the stage was at
    /// its flow limit or tail budget.
    pub teardown_refused_full: u64,
    /// Closes that asked for teardown offload and took the normal path: the unacknowledged
    /// tail did not fit the send window, or the connection was not open both ways or
    /// half-closed by the peer.
    pub teardown_refused_state: u64,
    /// Offloaded closes that ended cleanly (LAST-ACK acknowledged, TIME-WAIT or FIN-WAIT-2
    /// over).
    pub teardown_completed: u64,
    /// Offloaded closes given up after the stage's retransmissions (RST sent).
    pub teardown_timed_out: u64,
    /// Offloaded closes ended by a RST from the peer.
    pub teardown_reset: u64,
    /// Offloaded closes that received new data, which nobody can read (RST sent).
    pub teardown_data_after_close: u64,
    /// Segments the teardown stage sent (data, FIN and retransmissions; not ACKs).
    pub teardown_segments_sent: u64,
    /// Retransmission timeouts in the teardown stage.
    pub teardown_retransmits: u64,
    /// Splices asked for (`Stack::splice` accepted).
    pub splices_requested: u64,
    /// Splices handed to the splice stage.
    pub splices_installed: u64,
    /// Installed splices handed to a fast path outside the core (the eBPF splice module).
    pub splices_fast_path: u64,
    /// Splices whose connections failed before the handover.
    pub splices_failed: u64,
    /// Splices that ended with both sides closed.
    pub splices_closed: u64,
    /// Splices that ended with a RST.
    pub splices_reset: u64,
    /// Frames the splice stage rewrote and relayed.
    pub splice_frames_relayed: u64,
    /// Their bytes (whole frames).
    pub splice_bytes_relayed: u64,
    /// Spliced frames dropped because the relay queue was full.
    pub splice_relay_full: u64,
    /// RSTs for a spliced pair outside the receiver's window, dropped (RFC 5961 3.2).
    pub splice_rst_out_of_window: u64,
    /// Spliced segments beyond the receiver's window, and SYNs, dropped.
    pub splice_out_of_window: u64,
    /// SYNs that ended a lingering splice because its peer opened a new connection on the
    /// tuple (as a TIME-WAIT is reopened, RFC 9293 3.10.7.4); the SYN went to the listener.
    pub splice_reopened: u64,
    /// Spliced frames larger than the MTU (a sender's GSO across a veth).
    pub splice_large_frames: u64,
    /// Of those, the ones cut into MTU-sized segments in software (no device segmentation,
    /// or no large relay slot free); the rest were relayed whole for the device to cut.
    pub splice_large_segmented: u64,
    /// Splice events dropped, oldest first, because the application did not read them.
    pub splice_events_dropped: u64,
    /// Payload appended to a shared log at its tail (one per segment; each carries whole records, laminar.txt 5 footnote 2).
    pub log_appends: u64,
    /// Bytes appended to shared logs.
    pub log_appended_bytes: u64,
    /// Gaps reserved in shared logs for bytes missing before an out-of-order segment.
    pub log_gaps_reserved: u64,
    /// Segments whose bytes filled shared-log gaps, redirected to the application.
    pub log_segments_redirected: u64,
    /// Bytes redirected to the application for shared-log gaps.
    pub log_redirected_bytes: u64,
    /// Appends that used up an attached connection's share of its log (window 0 until a trim).
    pub log_window_zero: u64,
    /// Out-of-order segments of attached connections refused: bytes of a gap, or no free gap entry.
    pub log_ooo_refused: u64,
    /// Gaps whose connection ended before their bytes arrived (redirected as zeros).
    pub log_gaps_abandoned: u64,
}

impl Counters {
    /// Every counter as (name, value), in declaration order: for control tools
    /// (`sluice ctl counters`) and logs.
    pub fn rows(&self) -> [(&'static str, u64); 105] {
        [
            ("frames_rx", self.frames_rx),
            ("frames_tx", self.frames_tx),
            ("malformed", self.malformed),
            ("bad_checksum", self.bad_checksum),
            ("not_for_us", self.not_for_us),
            ("fragments", self.fragments),
            ("fast_path", self.fast_path),
            ("exceptions", self.exceptions),
            ("rst_sent", self.rst_sent),
            ("rst_received", self.rst_received),
            ("challenge_acks", self.challenge_acks),
            ("challenge_acks_suppressed", self.challenge_acks_suppressed),
            ("paws_drops", self.paws_drops),
            ("out_of_window", self.out_of_window),
            ("bad_acks", self.bad_acks),
            ("ooo_stored", self.ooo_stored),
            ("ooo_dropped", self.ooo_dropped),
            ("duplicate_segments", self.duplicate_segments),
            ("timeouts", self.timeouts),
            ("spurious_timeouts", self.spurious_timeouts),
            ("fast_retransmits", self.fast_retransmits),
            ("retransmitted_bytes", self.retransmitted_bytes),
            ("sack_blocks_rx", self.sack_blocks_rx),
            ("sack_blocks_invalid", self.sack_blocks_invalid),
            ("sack_blocks_old", self.sack_blocks_old),
            ("sack_scoreboard_full", self.sack_scoreboard_full),
            ("cold_pool_empty", self.cold_pool_empty),
            ("sack_recoveries", self.sack_recoveries),
            ("sack_retransmits", self.sack_retransmits),
            ("sack_lost_retransmissions", self.sack_lost_retransmissions),
            ("rxt_lost_by_timer", self.rxt_lost_by_timer),
            ("tlp_probes", self.tlp_probes),
            ("tlp_recoveries", self.tlp_recoveries),
            ("rack_losses", self.rack_losses),
            ("rack_reo_timeouts", self.rack_reo_timeouts),
            ("large_segments_tx", self.large_segments_tx),
            ("window_probes", self.window_probes),
            ("tx_buffer_grown", self.tx_buffer_grown),
            ("spurious_recoveries", self.spurious_recoveries),
            ("rx_buffer_grown", self.rx_buffer_grown),
            ("syn_cookies_sent", self.syn_cookies_sent),
            ("syn_cookies_accepted", self.syn_cookies_accepted),
            ("syn_cookies_rejected", self.syn_cookies_rejected),
            ("listen_stray_acks", self.listen_stray_acks),
            (
                "half_open_replaced_by_cookie",
                self.half_open_replaced_by_cookie,
            ),
            ("syn_in_syn_received", self.syn_in_syn_received),
            ("handshake_mac_relearned", self.handshake_mac_relearned),
            ("time_wait_reopened", self.time_wait_reopened),
            ("time_wait_syn_refused", self.time_wait_syn_refused),
            ("syn_dropped", self.syn_dropped),
            ("conn_table_full", self.conn_table_full),
            ("accept_queue_overflow", self.accept_queue_overflow),
            ("user_timeouts", self.user_timeouts),
            ("control_queue_full", self.control_queue_full),
            ("arp_requests", self.arp_requests),
            ("arp_replies", self.arp_replies),
            ("ecn_ce", self.ecn_ce),
            ("ecn_connections", self.ecn_connections),
            ("ecn_cwr_sent", self.ecn_cwr_sent),
            ("cc_iterations", self.cc_iterations),
            ("cc_srtt_us_sum", self.cc_srtt_us_sum),
            ("sched_paced", self.sched_paced),
            ("memory_pressure_entered", self.memory_pressure_entered),
            ("memory_over_limit_entered", self.memory_over_limit_entered),
            ("memory_window_clamped", self.memory_window_clamped),
            ("memory_growth_refused", self.memory_growth_refused),
            ("memory_rings_released", self.memory_rings_released),
            ("memory_syn_refused", self.memory_syn_refused),
            ("memory_cookie_refused", self.memory_cookie_refused),
            ("memory_ooo_dropped", self.memory_ooo_dropped),
            ("memory_group_syn_refused", self.memory_group_syn_refused),
            (
                "memory_group_cookie_refused",
                self.memory_group_cookie_refused,
            ),
            (
                "memory_group_over_limit_entered",
                self.memory_group_over_limit_entered,
            ),
            ("teardown_offloaded", self.teardown_offloaded),
            ("teardown_refused_full", self.teardown_refused_full),
            ("teardown_refused_state", self.teardown_refused_state),
            ("teardown_completed", self.teardown_completed),
            ("teardown_timed_out", self.teardown_timed_out),
            ("teardown_reset", self.teardown_reset),
            ("teardown_data_after_close", self.teardown_data_after_close),
            ("teardown_segments_sent", self.teardown_segments_sent),
            ("teardown_retransmits", self.teardown_retransmits),
            ("splices_requested", self.splices_requested),
            ("splices_installed", self.splices_installed),
            ("splices_fast_path", self.splices_fast_path),
            ("splices_failed", self.splices_failed),
            ("splices_closed", self.splices_closed),
            ("splices_reset", self.splices_reset),
            ("splice_frames_relayed", self.splice_frames_relayed),
            ("splice_bytes_relayed", self.splice_bytes_relayed),
            ("splice_relay_full", self.splice_relay_full),
            ("splice_rst_out_of_window", self.splice_rst_out_of_window),
            ("splice_out_of_window", self.splice_out_of_window),
            ("splice_reopened", self.splice_reopened),
            ("splice_large_frames", self.splice_large_frames),
            ("splice_large_segmented", self.splice_large_segmented),
            ("splice_events_dropped", self.splice_events_dropped),
            ("log_appends", self.log_appends),
            ("log_appended_bytes", self.log_appended_bytes),
            ("log_gaps_reserved", self.log_gaps_reserved),
            ("log_segments_redirected", self.log_segments_redirected),
            ("log_redirected_bytes", self.log_redirected_bytes),
            ("log_window_zero", self.log_window_zero),
            ("log_ooo_refused", self.log_ooo_refused),
            ("log_gaps_abandoned", self.log_gaps_abandoned),
        ]
    }
}
