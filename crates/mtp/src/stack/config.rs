//! The stack's configuration and its validation.

use std::fmt;
use std::net::Ipv4Addr;

use sluice_wire::EthernetAddress;

use crate::wire::{Feedback, PathletTc, FIXED_LEN, MAX_HEADER_LEN};

pub use crate::cc::CcParams;
pub use crate::time::Nanos;

/// The most ACK-path-feedback entries a stack may be configured to keep (a pending ACK
/// holds them inline, so none is allocated per packet).
pub const MAX_FEEDBACK_CAP: usize = 32;

/// How the stack carries its packets in IPv4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encapsulation {
    /// IPv4 protocol 253.
    Ip,
    /// UDP to port 9919 (the source port is flow entropy: derived from the message id).
    Udp,
}

/// The stack's limits and addresses.
#[derive(Clone, Copy, Debug)]
pub struct StackConfig {
    /// Our MAC.
    pub mac: EthernetAddress,
    /// Our IPv4 address.
    pub ip: Ipv4Addr,
    /// The link MTU (IPv4 packet size), bytes.
    pub mtu: usize,
    /// Directly in IPv4 or in UDP.
    pub encap: Encapsulation,
    /// Feedback slots reserved in every data packet for devices.
    pub feedback_slots: u8,
    /// ACK path feedback / path feedback entries accepted; longer lists are truncated.
    pub max_feedback: usize,
    /// Path-exclude entries a message may carry.
    pub max_exclude: usize,
    /// SACK and NACK runs processed per ACK; more are ignored with a counter.
    pub max_sack_runs: usize,
    /// Endpoints (bound ports) at most.
    pub max_endpoints: usize,
    /// Messages the sender keeps unacknowledged at most.
    pub max_outstanding: usize,
    /// The longest message, bytes (sender and receiver).
    pub max_message_len: u32,
    /// Bytes of incomplete messages the receiver holds at most.
    pub reassembly_bytes: usize,
    /// Incomplete messages the receiver holds at most.
    pub reassembly_messages: usize,
    /// Completed message ids remembered (so retransmissions are not delivered twice).
    pub completed_ids: usize,
    /// Whole messages an endpoint's receive queue holds at most.
    pub endpoint_queue: usize,
    /// ACKs waiting to be sent at most (more are dropped with a counter).
    pub ack_queue: usize,
    /// Events waiting to be polled at most (more are dropped with a counter).
    pub event_queue: usize,
    /// Destinations the sender keeps RTT and path state for at most.
    pub max_destinations: usize,
    /// Alternative paths remembered per destination.
    pub max_paths: usize,
    /// (pathlet, TC) windows kept at most.
    pub max_pathlets: usize,
    /// RTO before any RTT sample (RFC 6298 2.1 says 1 s; a data center wants less).
    pub rto_initial: u64,
    /// The RTO's floor.
    pub rto_min: u64,
    /// The RTO's ceiling (backoff stops here).
    pub rto_max: u64,
    /// Timeouts a message survives; one more fails it.
    pub max_timeouts: u32,
    /// Bytes in flight to a destination before any path feedback, and a new pathlet's window.
    pub initial_window: u64,
    /// The congestion-control laws' parameters.
    pub cc: CcParams,
    /// Messages the scheduler looks at per transmit decision (bounds the work when the
    /// first ones are blocked by their windows).
    pub sched_scan: usize,
    /// Every `srpt_aging`-th data packet goes to the oldest message with something to send
    /// rather than the one with the fewest bytes left (bounded starvation: a long message
    /// gets at least that share of the line however many short ones arrive); 0: pure SRPT.
    pub srpt_aging: u32,
    /// The local link's rate in bit/s, 0 for unknown. When known, data leaves at most
    /// `line_backlog` bytes ahead of the line (the NIC queue is a resource no device reports
    /// on, and a FIFO there would undo the sender's priority and SRPT order).
    pub link_bps: u64,
    /// Bytes data may run ahead of the line when `link_bps` is set.
    pub line_backlog: usize,
    /// Bytes the line spends per frame besides the frame (Ethernet's preamble, start
    /// delimiter and inter-frame gap: 20; a link model that counts frame bytes only: 0).
    pub line_frame_overhead: usize,
    /// Message-length cutoffs, ascending, for the IPv4 DSCP of data packets (the switch
    /// priority queue they join, as Homa's unscheduled priorities): a message of at most
    /// `dscp_cutoffs[i]` bytes goes at DSCP 7 - i, a longer one at 0. All 0: off (DSCP 0
    /// for every packet). When on, ACKs go at DSCP 7 so they do not wait behind data.
    pub dscp_cutoffs: [u64; 7],
}

impl StackConfig {
    /// The defaults for `mac` and `ip`: MTU 1500 over IPv4 protocol 253, 4 feedback slots,
    /// 8 feedback entries and SACK runs accepted, 4 exclude entries, 1024 outstanding
    /// messages of at most 4 MiB, 64 MiB / 1024 messages in reassembly, RTO 200 us..50 ms.
    pub fn new(mac: EthernetAddress, ip: Ipv4Addr) -> StackConfig {
        StackConfig {
            mac,
            ip,
            mtu: 1500,
            encap: Encapsulation::Ip,
            feedback_slots: 4,
            max_feedback: 8,
            max_exclude: 4,
            max_sack_runs: 8,
            max_endpoints: 64,
            max_outstanding: 1024,
            max_message_len: 4 << 20,
            reassembly_bytes: 64 << 20,
            reassembly_messages: 1024,
            completed_ids: 8192,
            endpoint_queue: 1024,
            ack_queue: 4096,
            event_queue: 8192,
            max_destinations: 1024,
            max_paths: 4,
            max_pathlets: 4096,
            rto_initial: 1_000_000,
            rto_min: 200_000,
            rto_max: 50_000_000,
            max_timeouts: 8,
            initial_window: 64 * 1024,
            cc: CcParams::default(),
            sched_scan: 64,
            srpt_aging: 0,
            link_bps: 0,
            line_backlog: 3000,
            line_frame_overhead: 20,
            dscp_cutoffs: [0; 7],
        }
    }

    /// The IPv4 DSCP of a data packet of a message of `len` bytes ([`Self::dscp_cutoffs`]).
    pub fn data_dscp(&self, len: u64) -> u8 {
        if self.dscp_cutoffs == [0; 7] {
            return 0;
        }
        match self.dscp_cutoffs.iter().position(|&c| c > 0 && len <= c) {
            Some(i) => 7 - i as u8,
            None => 0,
        }
    }

    /// The IPv4 DSCP of an ACK: the highest when priorities are on.
    pub fn ack_dscp(&self) -> u8 {
        if self.dscp_cutoffs == [0; 7] {
            0
        } else {
            7
        }
    }

    /// Bytes of IPv4 (and UDP) header before the MTP header.
    pub fn l3_overhead(&self) -> usize {
        match self.encap {
            Encapsulation::Ip => 20,
            Encapsulation::Udp => 28,
        }
    }

    /// The MTP header of a data packet with the most exclude entries.
    pub fn data_header_len(&self) -> usize {
        FIXED_LEN
            + self.max_exclude * PathletTc::LEN
            + usize::from(self.feedback_slots) * Feedback::LEN
    }

    /// Payload bytes per data packet (the MSS): the MTU less IPv4, UDP and the MTP header.
    pub fn payload_per_packet(&self) -> usize {
        self.mtu
            .saturating_sub(self.l3_overhead() + self.data_header_len())
    }

    /// Checks that the limits make sense together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_feedback > MAX_FEEDBACK_CAP || self.max_feedback == 0 {
            return Err(ConfigError::MaxFeedback(self.max_feedback));
        }
        if self.max_exclude > 32 {
            return Err(ConfigError::MaxExclude(self.max_exclude));
        }
        if self.data_header_len() > MAX_HEADER_LEN || self.payload_per_packet() < 64 {
            return Err(ConfigError::Mtu(self.mtu));
        }
        // An ACK carries up to max_feedback echoed entries, 2 SACK runs and 1 NACK run.
        if self.l3_overhead() + FIXED_LEN + self.max_feedback * Feedback::LEN + 24 > self.mtu {
            return Err(ConfigError::Mtu(self.mtu));
        }
        let pkts = (self.max_message_len as usize).div_ceil(self.payload_per_packet());
        if pkts > usize::from(u16::MAX) {
            return Err(ConfigError::MessageTooLong(self.max_message_len));
        }
        let zero = [
            ("max_sack_runs", self.max_sack_runs),
            ("max_endpoints", self.max_endpoints),
            ("max_outstanding", self.max_outstanding),
            ("reassembly_messages", self.reassembly_messages),
            ("completed_ids", self.completed_ids),
            ("endpoint_queue", self.endpoint_queue),
            ("ack_queue", self.ack_queue),
            ("event_queue", self.event_queue),
            ("max_destinations", self.max_destinations),
            ("max_paths", self.max_paths),
            ("max_pathlets", self.max_pathlets),
            ("sched_scan", self.sched_scan),
        ];
        if let Some((name, _)) = zero.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::Zero(name));
        }
        if self.reassembly_bytes < self.max_message_len as usize {
            return Err(ConfigError::Reassembly(self.reassembly_bytes));
        }
        if self.rto_min == 0 || self.rto_min > self.rto_max || self.rto_initial == 0 {
            return Err(ConfigError::Rto);
        }
        if self
            .dscp_cutoffs
            .windows(2)
            .any(|w| w[1] != 0 && w[1] < w[0])
        {
            return Err(ConfigError::DscpCutoffs);
        }
        // Pacing adds these to the line's clock per frame: bounded, it cannot overflow it.
        if self.line_frame_overhead > MAX_LINE_FRAME_OVERHEAD
            || self.line_backlog > MAX_LINE_BACKLOG
        {
            return Err(ConfigError::Pacing);
        }
        if self.initial_window == 0
            || self.cc.max_cwnd < self.initial_window
            || self.cc.g_shift > 16
        {
            return Err(ConfigError::Window);
        }
        Ok(())
    }
}

/// The largest per-frame line overhead pacing accepts, bytes (Ethernet's is 20; 802.1Q
/// tags, FEC or a tunnel add some).
pub const MAX_LINE_FRAME_OVERHEAD: usize = 256;

/// The largest `line_backlog` pacing accepts, bytes.
pub const MAX_LINE_BACKLOG: usize = 1 << 30;

/// Why a configuration was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// The MTU leaves too little payload (or an ACK does not fit).
    Mtu(usize),
    /// max_feedback is 0 or above [`MAX_FEEDBACK_CAP`].
    MaxFeedback(usize),
    /// max_exclude is above 32.
    MaxExclude(usize),
    /// max_message_len needs more than 65535 packets.
    MessageTooLong(u32),
    /// A bound that must be positive is 0.
    Zero(&'static str),
    /// reassembly_bytes cannot hold one message of max_message_len.
    Reassembly(usize),
    /// rto_min is 0 or above rto_max, or rto_initial is 0.
    Rto,
    /// The initial window is 0 or above max_cwnd, or g_shift is above 16.
    Window,
    /// The DSCP cutoffs are not ascending.
    DscpCutoffs,
    /// line_frame_overhead or line_backlog is above what a link's pacing can mean.
    Pacing,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Mtu(m) => write!(f, "MTU {m} leaves too little room for MTP packets"),
            ConfigError::MaxFeedback(n) => {
                write!(f, "max_feedback {n} must be 1..={MAX_FEEDBACK_CAP}")
            }
            ConfigError::MaxExclude(n) => write!(f, "max_exclude {n} must be at most 32"),
            ConfigError::MessageTooLong(n) => {
                write!(f, "max_message_len {n} needs more than 65535 packets")
            }
            ConfigError::Zero(name) => write!(f, "{name} must be positive"),
            ConfigError::Reassembly(n) => {
                write!(f, "reassembly_bytes {n} cannot hold one maximal message")
            }
            ConfigError::Rto => f.write_str("RTO bounds must satisfy 0 < rto_min <= rto_max"),
            ConfigError::DscpCutoffs => f.write_str("dscp_cutoffs must be ascending"),
            ConfigError::Pacing => write!(
                f,
                "line_frame_overhead must be at most {MAX_LINE_FRAME_OVERHEAD} and line_backlog at most {MAX_LINE_BACKLOG}"
            ),
            ConfigError::Window => {
                f.write_str("initial window must be in 1..=max_cwnd and g_shift at most 16")
            }
        }
    }
}

impl std::error::Error for ConfigError {}
