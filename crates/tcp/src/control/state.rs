//! RFC 9293 connection states and the control plane's per-connection record.

use std::time::Duration;

use sluice_wire::tcp::SeqNumber;

use crate::cc::Algorithm;
use crate::control::rcv_space::RcvSpace;
use crate::table::FourTuple;
use crate::time::Instant;
use crate::timer::TimerTable;

/// RFC 9293 3.3.2 connection states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpState {
    /// No connection.
    Closed,
    /// SYN sent, awaiting SYN-ACK.
    SynSent,
    /// SYN received and SYN-ACK sent, awaiting ACK.
    SynReceived,
    /// Open; data flows both ways.
    Established,
    /// We sent FIN; awaiting its ACK or the peer's FIN.
    FinWait1,
    /// Our FIN is acknowledged; awaiting the peer's FIN.
    FinWait2,
    /// The peer sent FIN; we may still send.
    CloseWait,
    /// Both sent FIN simultaneously; awaiting the ACK of ours.
    Closing,
    /// Peer closed first, then we sent FIN; awaiting its ACK.
    LastAck,
    /// Both FINs acknowledged; waiting out 2 MSL.
    TimeWait,
}

impl TcpState {
    /// Whether the connection is synchronized (RFC 9293: ESTABLISHED and later).
    pub fn is_synchronized(self) -> bool {
        !matches!(
            self,
            TcpState::Closed | TcpState::SynSent | TcpState::SynReceived
        )
    }
}

/// Why a connection ended abnormally, as reported to the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnError {
    /// The peer reset the connection.
    Reset,
    /// The peer refused the connection (RST in reply to our SYN).
    Refused,
    /// Retransmissions went unacknowledged past the user timeout (or SYN retries ran out).
    TimedOut,
    /// The application aborted the connection.
    Aborted,
}

impl core::fmt::Display for ConnError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            ConnError::Reset => "connection reset by peer",
            ConnError::Refused => "connection refused",
            ConnError::TimedOut => "connection timed out",
            ConnError::Aborted => "connection aborted",
        })
    }
}

/// Options agreed in the handshake.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Negotiated {
    /// Peer's MSS (RFC 9293 MUST-15: 536 when absent).
    pub peer_mss: u16,
    /// Shift for the peer's windows, if scaling was agreed (ours is then
    /// `Stack::our_wscale`, derived from the configuration).
    pub snd_wscale: Option<u8>,
    /// SACK agreed.
    pub sack: bool,
    /// Timestamps agreed; the peer's latest TSval.
    pub ts_recent: Option<u32>,
    /// ECN agreed (RFC 3168 6.1.1).
    pub ecn: bool,
}

/// The control plane's record of one connection.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnControl {
    /// RFC 9293 state.
    pub state: TcpState,
    /// Identity.
    pub tuple: FourTuple,
    /// Listener this passive open belongs to, until accepted.
    pub listener: Option<u16>,
    /// Our initial sequence number.
    pub iss: SeqNumber,
    /// Peer's initial sequence number.
    pub irs: SeqNumber,
    /// Agreed options.
    pub negotiated: Negotiated,
    /// Deadlines: retransmission, delayed ACK, persist, TIME-WAIT, congestion control.
    pub timers: TimerTable,
    /// Current retransmission timeout (with backoff).
    pub rto: Duration,
    /// Consecutive retransmissions of the same data.
    pub retries: u8,
    /// When the oldest unacknowledged data was first retransmitted (user timeout clock).
    pub stalled_since: Instant,
    /// When the peer last sent an acceptable segment (liveness while its window is zero).
    pub last_heard: Instant,
    /// Current probe interval.
    pub persist_interval: Duration,
    /// Start of the current one-second challenge-ACK window (RFC 5961 7).
    pub challenge_window: Instant,
    /// Challenge ACKs sent in the current window.
    pub challenge_count: u32,
    /// The application closed the connection (no handle refers to it any more).
    pub app_closed: bool,
    /// The application holds a handle (connected or accepted).
    pub app_owned: bool,
    /// The application closed its sending side before the handshake completed (a
    /// simultaneous open in SYN-RECEIVED): the FIN is queued once ESTABLISHED
    /// (RFC 9293 3.10.4, CLOSE in SYN-RECEIVED).
    pub fin_deferred: bool,
    /// The error to report, once the connection failed.
    pub error: Option<ConnError>,
    /// The congestion-control algorithm chosen for the connection.
    pub cc_algorithm: Algorithm,
    /// What our SYNs asked (RFC 3168 6.1.1): None before the first, Some(true) while every
    /// one was ECN-setup. A SYN-ACK's ECN is accepted only then.
    pub syn_ecn: Option<bool>,
    /// A rate fixed through the API (`Stack::set_rate`), bits per second; 0: the policy's.
    pub fixed_rate_bps: u64,
    /// Receive-buffer autotuning: how fast whole rings of data arrive.
    pub rcv_space: RcvSpace,
    /// When our SYN (or SYN-ACK) was first sent: the handshake's round trip is the first
    /// RTT measurement if it was not retransmitted (RFC 6298 2.2 and Karn's rule, 3).
    pub syn_sent_at: Instant,
    /// The application asked for its close to be offloaded to the teardown stage.
    pub teardown_offload: bool,
    /// Given up by the application to a splice that waits for it to drain.
    pub splicing: bool,
    /// The tail loss probe outstanding, if any (RFC 8985 7).
    pub tlp: Option<TlpProbe>,
}

/// A tail loss probe sent and not yet judged (RFC 8985 7.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TlpProbe {
    /// RFC 8985 TLP.end_seq: snd_max when the probe left.
    pub end_seq: SeqNumber,
    /// RFC 8985 TLP.is_retrans: the probe resent the last segment (no new data could go).
    pub is_retrans: bool,
}

impl ConnControl {
    /// A fresh record.
    pub(crate) fn new(tuple: FourTuple, rto: Duration) -> Self {
        ConnControl {
            state: TcpState::Closed,
            tuple,
            listener: None,
            iss: SeqNumber(0),
            irs: SeqNumber(0),
            negotiated: Negotiated::default(),
            timers: TimerTable::default(),
            rto,
            retries: 0,
            stalled_since: Instant::MAX,
            last_heard: Instant::ZERO,
            persist_interval: rto,
            challenge_window: Instant::ZERO,
            challenge_count: 0,
            app_closed: false,
            app_owned: false,
            fin_deferred: false,
            error: None,
            cc_algorithm: Algorithm::default(),
            syn_ecn: None,
            fixed_rate_bps: 0,
            rcv_space: RcvSpace::default(),
            syn_sent_at: Instant::MAX,
            teardown_offload: false,
            splicing: false,
            tlp: None,
        }
    }

    /// The earliest of this connection's deadlines.
    pub(crate) fn next_deadline(&self) -> Instant {
        self.timers.next_deadline()
    }

    /// RFC 5961 7: whether another challenge ACK fits this second's per-connection budget.
    pub(crate) fn allow_challenge_ack(&mut self, now: Instant, limit: u32) -> bool {
        if now.saturating_since(self.challenge_window) >= Duration::from_secs(1) {
            self.challenge_window = now;
            self.challenge_count = 0;
        }
        if self.challenge_count < limit {
            self.challenge_count += 1;
            true
        } else {
            false
        }
    }
}
