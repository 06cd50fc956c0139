//! Per-connection data-path state, partitioned by the stage that owns it (FlexTOE Table 5).
//! Each stage keeps its slice in its own table indexed by connection slot.

use std::net::Ipv4Addr;

use sluice_wire::tcp::SeqNumber;
use sluice_wire::EthernetAddress;

/// `has(flag)` and `set(flag, on)` over a state's `flags: u8` bit set, the one way every
/// stage's state reads and writes its flags.
macro_rules! flag_bits {
    ($($state:ty),+) => {$(
        impl $state {
            /// Whether `flag` is set.
            #[inline]
            pub(crate) fn has(&self, flag: u8) -> bool {
                self.flags & flag != 0
            }

            /// Sets or clears `flag`.
            #[inline]
            pub(crate) fn set(&mut self, flag: u8, on: bool) {
                if on {
                    self.flags |= flag;
                } else {
                    self.flags &= !flag;
                }
            }
        }
    )+};
}

flag_bits!(ProtoState, SackSender, PostState);

/// Pre-processor state: connection identification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PreState {
    /// Next hop's MAC address.
    pub peer_mac: EthernetAddress,
    /// Peer's IP address.
    pub peer_ip: Ipv4Addr,
    /// Our port.
    pub local_port: u16,
    /// Peer's port.
    pub remote_port: u16,
    /// Whether the data-path owns this slot (the connection is synchronized).
    pub active: bool,
    /// Its payload goes to a shared log (shared_log/), not its receive ring.
    pub log: bool,
}

/// Flow-scheduler state: what the control plane programmed for the scheduler to enforce,
/// and the scheduler's own timestamp (Carousel).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SchedState {
    /// The rate to pace the connection to, bits per second of Ethernet frames handed to the
    /// device; 0: unlimited, the window alone limits the flow and the scheduler serves it
    /// round-robin without the wheel (flextoe.txt 3.4). Programmed by the control plane
    /// from the policy (TIMELY) or a fixed rate (`Stack::set_rate`).
    pub rate_bps: u64,
    /// When the connection may next send, nanoseconds (Carousel's timestamp): the previous
    /// one plus the last frame's bytes at `rate_bps`.
    pub next_tx_ns: u64,
}

impl Default for PreState {
    fn default() -> Self {
        PreState {
            peer_mac: EthernetAddress::default(),
            peer_ip: Ipv4Addr::UNSPECIFIED,
            local_port: 0,
            remote_port: 0,
            active: false,
            log: false,
        }
    }
}

/// Flags of the protocol stage.
pub(crate) mod flags {
    /// Timestamps negotiated.
    pub(crate) const TIMESTAMPS: u8 = 1 << 0;
    /// SACK negotiated.
    pub(crate) const SACK: u8 = 1 << 1;
    /// The application closed its sending side: a FIN follows the data.
    pub(crate) const FIN_QUEUED: u8 = 1 << 2;
    /// The peer's FIN was consumed (rcv_nxt is past it).
    pub(crate) const FIN_RECEIVED: u8 = 1 << 3;
    /// The peer's FIN arrived out of order and waits at `rx_fin_seq`.
    pub(crate) const FIN_PENDING: u8 = 1 << 4;
    /// Nagle's algorithm is on.
    pub(crate) const NAGLE: u8 = 1 << 5;
    /// An RTT measurement is running (`rtt_seq`, `rtt_sent_us`).
    pub(crate) const RTT_TIMING: u8 = 1 << 6;
    /// The sender's silly-window override timer fired: send what the window allows, once.
    pub(crate) const FORCE_SEND: u8 = 1 << 7;
}

/// Protocol-stage state: sequence space, windows, out-of-order bookkeeping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ProtoState {
    /// Next sequence number expected from the peer.
    pub rcv_nxt: SeqNumber,
    /// The window we accept beyond rcv_nxt: the receive buffer's free bytes, or fewer while
    /// memory pressure holds a window back (control/memory.rs).
    pub rx_avail: u32,
    /// The peer's most recent TSval, echoed in our TSecr (RFC 7323 TS.Recent).
    pub ts_recent: u32,
    /// Oldest unacknowledged sequence number.
    pub snd_una: SeqNumber,
    /// Next sequence number to send (rewound to snd_una by go-back-N).
    pub snd_nxt: SeqNumber,
    /// Highest sequence number sent.
    pub snd_max: SeqNumber,
    /// End of the data the application has handed us (tx_avail = tx_end - snd_nxt).
    pub tx_end: SeqNumber,
    /// Peer's receive window in bytes (scaled).
    pub snd_wnd: u32,
    /// Largest window the peer has offered (RFC 5961 5.2 MAX.SND.WND).
    pub max_snd_wnd: u32,
    /// Segment sequence number of the last window update (RFC 9293 SND.WL1).
    pub snd_wl1: SeqNumber,
    /// Segment acknowledgment number of the last window update (RFC 9293 SND.WL2).
    pub snd_wl2: SeqNumber,
    /// Congestion window programmed by the congestion-control policy.
    pub cwnd: u32,
    /// Added to our millisecond clock to form TSval (RFC 7323 5.4, per connection).
    pub ts_offset: u32,
    /// Sequence number whose acknowledgment ends the running RTT measurement.
    pub rtt_seq: SeqNumber,
    /// When that sequence number was sent (microseconds, truncated).
    pub rtt_sent_us: u32,
    /// Effective send MSS.
    pub mss: u16,
    /// Shift applied to the peer's window field.
    pub snd_wscale: u8,
    /// Shift applied to our window field.
    pub rcv_wscale: u8,
    /// Duplicate ACKs in a row.
    pub dupacks: u8,
    /// Out-of-order intervals in use.
    pub ooo_count: u8,
    /// See [`flags`].
    pub flags: u8,
    /// ECN state (RFC 3168): see [`super::ecn::bits`].
    pub ecn: u8,
    /// The sender's SACK-based loss recovery (RFC 6675); its SACKed ranges live in the
    /// connection's pooled row, with the handle of that row.
    pub sack: SackSender,
}

/// Protocol-stage state that only out-of-order data and FIN handling touch: part of the
/// connection's pooled row (`DataPath::pool`), held only while it is needed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct OooState {
    /// Where the peer's out-of-order FIN sits (valid with `flags::FIN_PENDING`).
    pub rx_fin_seq: SeqNumber,
    /// Counts receptions of out-of-order data; stamps the interval each one touched, so SACK
    /// blocks go out most recent first (RFC 2018 4).
    pub ooo_seen: u32,
}

/// Protocol-stage state that only loss recovery and timeouts touch: part of the
/// connection's pooled row (`DataPath::pool`), held only while it is needed; `reordering`
/// outlives the row in `DataPath::reordering`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RecoveryState {
    /// Set by a timeout until the first ACK that advances snd_una tells whether it was
    /// spurious (valid with `sack_flags::RTO_PROBE`, which the hot path tests).
    pub rto_probe: RtoProbe,
    /// RFC 6675 RecoveryPoint: snd_max when recovery (or the last timeout) began (read
    /// with `sack_flags::IN_RECOVERY` or `AFTER_RTO`).
    pub recovery_point: SeqNumber,
    /// Every unSACKed sequence number below this is taken as lost, besides what IsLost()
    /// says: the first segment at recovery entry, and, once every retransmission so far is
    /// cumulatively acknowledged, all that was outstanding at entry (it was sent before
    /// those retransmissions, so it would have arrived before them; RFC 6582's partial-ACK
    /// rule in SACK terms, and the idea of RFC 8985); and RACK's verdict, in or out of
    /// recovery (RFC 8985 6.2: sent too long before a segment since delivered). At or
    /// below snd_una it says nothing.
    pub lost_below: SeqNumber,
    /// [forgotten_from, forgotten_to): where SACKed ranges were lost to the scoreboard's
    /// bound (`Config::sack_scoreboard`), so an unSACKed-looking byte there may well have
    /// arrived. Nothing in it is taken as lost on marks or by NextSeg()'s rule 3 until the
    /// cumulative ACK reaches it, and then only the segment at snd_una (RFC 6582's partial
    /// ACK). Says nothing once `forgotten_to` is at or below snd_una.
    pub forgotten_from: SeqNumber,
    /// The end of the region the scoreboard forgot (see `forgotten_from`).
    pub forgotten_to: SeqNumber,
    /// snd_max when the latest retransmission left: once data sent after it is SACKed, an
    /// unSACKed hole below HighRxt means a retransmission was lost too.
    pub rxt_snd_max: SeqNumber,
    /// snd_max when the segment at snd_una was last retransmitted (at the latest, when
    /// snd_una moved onto a hole retransmitted earlier): the same test for that one hole,
    /// which holds the window's left edge, while later retransmissions keep moving
    /// `rxt_snd_max` on.
    pub una_rxt_snd_max: SeqNumber,
    /// Segments the latest fast recovery retransmitted that no D-SACK has reported yet
    /// (Linux's undo_retrans): with UNDO_ARMED, reaching 0 means every one was needless.
    pub undo_rxt: u16,
    /// DupThresh for this connection, in segments: 3 (RFC 6675 2) until reordering is seen,
    /// then the reordering degree measured (see `scoreboard::dup_thresh`).
    pub reordering: u8,
    /// One more than the segments SACKed beyond the hole that began the latest recovery
    /// when the cumulative ACK filled it (0: not yet): the reordering degree, if D-SACKs
    /// later show that recovery needless.
    pub reorder_seen: u8,
}

/// What a timeout leaves for the first ACK after it to judge it by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RtoProbe {
    /// The TSval the retransmission carries (RFC 3522 Eifel detection; with timestamps).
    pub tsval: u32,
    /// RFC 5682 F-RTO's test, where it is sound: an ACK beyond both snd_nxt and this
    /// (the highest end SACKed before the timeout) covers data sent only before the
    /// timeout and never reported missing. None: no test (no SACK, or the timeout hit a
    /// recovery, where a lost retransmission looks the same).
    pub frto_above: Option<SeqNumber>,
}

impl ProtoState {
    /// Bytes sent and not yet acknowledged.
    #[inline]
    pub(crate) fn in_flight(&self) -> u32 {
        self.snd_nxt.diff(self.snd_una).max(0) as u32
    }

    /// Sequence number of our FIN, if queued: it follows the last data byte.
    #[inline]
    pub(crate) fn fin_seq(&self) -> Option<SeqNumber> {
        self.has(flags::FIN_QUEUED).then_some(self.tx_end)
    }

    /// The window field for `rx_avail` free bytes, scaled down (RFC 7323 2.3).
    #[inline]
    pub(crate) fn window_field(&self, rx_avail: u32) -> u16 {
        (rx_avail >> self.rcv_wscale).min(u16::MAX as u32) as u16
    }
}

/// An out-of-order interval [start, end) of received data beyond rcv_nxt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Interval {
    /// First sequence number.
    pub start: SeqNumber,
    /// One past the last.
    pub end: SeqNumber,
    /// `OooState::ooo_seen` when data last landed in it (orders SACK blocks, RFC 2018 4).
    pub seen: u32,
}

/// A range [start, end) of sent data the peer has selectively acknowledged (RFC 2018), an
/// entry of the sender's scoreboard (RFC 6675). Ranges are sorted, disjoint, and lie within
/// (snd_una, snd_max].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SackedRange {
    /// First SACKed sequence number.
    pub start: SeqNumber,
    /// One past the last.
    pub end: SeqNumber,
}

/// Flags of [`SackSender`].
pub(crate) mod sack_flags {
    /// SACK was negotiated and `Recovery::Sack` configured: the scoreboard is kept and loss
    /// recovery follows RFC 6675; otherwise go-back-N.
    pub(crate) const ENABLED: u8 = 1 << 0;
    /// In loss recovery (RFC 6675 5) until snd_una reaches the RecoveryPoint.
    pub(crate) const IN_RECOVERY: u8 = 1 << 1;
    /// The first segment of this recovery is yet to be retransmitted (RFC 6675 5 step 4.3:
    /// it goes regardless of pipe).
    pub(crate) const RXT_FIRST: u8 = 1 << 2;
    /// A retransmission timeout happened: no new recovery until snd_una reaches the
    /// RecoveryPoint (RFC 6675 5.1).
    pub(crate) const AFTER_RTO: u8 = 1 << 3;
    /// The latest fast recovery's window cut may still be undone: every retransmission it
    /// made so far may yet be shown needless by a D-SACK (RFC 3708 2, RFC 2883).
    pub(crate) const UNDO_ARMED: u8 = 1 << 4;
    /// The control plane's probe timer fired: the TX workflow sends one tail loss probe
    /// next, outside cwnd (RFC 8985 7.3).
    pub(crate) const TLP_PROBE: u8 = 1 << 5;
    /// A timeout left `RecoveryState::rto_probe` for the first ACK after it (kept with the
    /// SACK flags, whether or not SACK is on, so an ACK tests one hot byte).
    pub(crate) const RTO_PROBE: u8 = 1 << 6;
    /// SACK recovery is configured and negotiated but was suspended (`ENABLED` cleared)
    /// because the pool had no row for the scoreboard: go-back-N with RFC 6582 recovery
    /// until nothing is outstanding, then SACK recovery again.
    pub(crate) const SUSPENDED: u8 = 1 << 7;
}

/// The sender's RFC 6675 state the in-order path reads, owned by the protocol stage with
/// the rest of the sequence space (the TX workflow reads it to choose what to send, as it
/// reads snd_nxt). What only recovery touches is in [`RecoveryState`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SackSender {
    /// RFC 6675 HighRxt, held as one past the highest sequence number retransmitted (every
    /// cumulative ACK compares it, and RACK skips what lies below it).
    pub high_rxt: SeqNumber,
    /// SACKed ranges in use in this connection's pooled row (0 without one).
    pub count: u8,
    /// See [`sack_flags`].
    pub flags: u8,
    /// The connection's row in `DataPath::pool` (out-of-order intervals, scoreboard,
    /// [`OooState`], [`RecoveryState`]), or [`NO_ROW`]. Here because it fits in this
    /// struct's padding: the hot row stays 76 B.
    pub cold_row: u16,
}

/// The handle of no pooled row (`SackSender::cold_row`).
pub(crate) const NO_ROW: u16 = u16::MAX;

impl Default for SackSender {
    fn default() -> Self {
        SackSender {
            high_rxt: SeqNumber::default(),
            count: 0,
            flags: 0,
            cold_row: NO_ROW,
        }
    }
}

/// Post-processor state: RTT estimate, counters for congestion control, ACK policy.
///
/// The `cnt_*` and `rtt_*` counters are the congestion-control input: the control plane
/// takes and resets them once per iteration ([`super::post::take_cc_counters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PostState {
    /// Smoothed RTT in microseconds (0 before the first sample).
    pub srtt_us: u32,
    /// RTT variation in microseconds.
    pub rttvar_us: u32,
    /// Acknowledged bytes since the last control iteration.
    pub cnt_ackb: u32,
    /// The latest RTT sample since the last iteration (0: none).
    pub rtt_last_us: u32,
    /// The smallest RTT sample since the last iteration (0: none).
    pub rtt_min_us: u32,
    /// The largest flight an ACK found since the last iteration (RFC 7661).
    pub max_flight: u32,
    /// RTT samples since the last iteration, saturating: one is taken per round trip (one
    /// timed segment at a time) and an iteration lasts one SRTT (at least
    /// `Config::cc_interval_min`), so a u8 holds what one interval takes.
    pub cnt_rtt: u8,
    /// See [`post_flags`].
    pub flags: u8,
    /// Segments owed an ACK since we last sent one: delayed, or waiting for the end of
    /// their receive burst.
    pub unacked_segments: u8,
    /// The receive state the ACK owed for those segments acknowledges: rcv_nxt and free
    /// bytes as the last of them left them (valid while `unacked_segments > 0`).
    pub delack_rcv_nxt: SeqNumber,
    /// See `delack_rcv_nxt`.
    pub delack_rx_avail: u32,
    /// Intervals out-of-order data touched since the last ACK left, besides the one the
    /// latest ACK reported first: SACK blocks still to report.
    pub sack_news: u8,
}

/// Flags of [`PostState`].
pub(crate) mod post_flags {
    /// A fast-retransmit recovery is under way until `PostCold::recover` is acknowledged
    /// (RFC 6582).
    pub(crate) const IN_RECOVERY: u8 = 1 << 0;
    /// An ACK is owed and will go out with the next segment or as a pure ACK.
    pub(crate) const ACK_PENDING: u8 = 1 << 1;
}

impl PostState {
    /// The retransmission timeout in microseconds (RFC 6298 2.2-2.5) within `bounds`
    /// (min, max), 0 before the first sample. Derived from SRTT and RTTVAR, which every
    /// writer of the estimate sets together, rather than stored: 4 B less per connection.
    #[inline]
    pub(crate) fn rto_us(&self, bounds: (u32, u32)) -> u32 {
        if self.srtt_us == 0 {
            return 0;
        }
        // RTO = SRTT + max(G, 4 RTTVAR) with clock granularity G = 1 us. Saturating: a
        // sample of over ~36 minutes (an ACK after a long outage) would overflow 4 * RTTVAR
        // in 32 bits; the RFC 6298 2.5 maximum bounds the result anyway.
        let rto = self
            .srtt_us
            .saturating_add(self.rttvar_us.saturating_mul(4).max(1));
        rto.clamp(bounds.0, bounds.1)
    }
}

/// Post-processor state that only duplicate ACKs, ECE-marked ACKs and loss recovery touch,
/// in its own per-slot table (`DataPath::post_cold`). The counters are congestion-control
/// input, taken with [`PostState`]'s once per control iteration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PostCold {
    /// snd_max when the recovery began (RFC 6582 `recover`; valid with
    /// `post_flags::IN_RECOVERY`).
    pub recover: SeqNumber,
    /// Bytes acknowledged by ACKs carrying ECE since the last iteration (the sender's ECN
    /// signal).
    pub cnt_ecnb: u32,
    /// Duplicate ACKs since the last iteration.
    pub cnt_dupack: u16,
    /// Fast retransmits since the last iteration.
    pub cnt_fretx: u16,
    /// Fast retransmits over the connection's life (for `ConnInfo`).
    pub total_fretx: u16,
}
