//! The stack's configuration, counters, the attributes of a modify and its errors.

use std::fmt;
use std::net::Ipv4Addr;

use sluice_wire::EthernetAddress;

use crate::cc::DcqcnParams;
use crate::qp::{Nanos, PostError};
use crate::verbs::{ModifyError, QpState, RegisterError};

/// The stack's limits and addresses.
#[derive(Clone, Copy, Debug)]
pub struct StackConfig {
    /// Our MAC.
    pub mac: EthernetAddress,
    /// Our IPv4 address (the GID is its IPv4-mapped form).
    pub ip: Ipv4Addr,
    /// Queue pairs at most.
    pub max_qps: usize,
    /// Completion queues at most.
    pub max_cqs: usize,
    /// Memory regions at most.
    pub max_mrs: usize,
    /// Entries a completion queue may have at most.
    pub max_cqe: usize,
    /// Work requests a queue may hold at most.
    pub max_wr: usize,
    /// Packets a QP keeps unacknowledged.
    pub max_inflight: u32,
    /// The rate a QP starts at and never exceeds, bit/s (DCQCN's line rate); 0 turns the
    /// reaction point off: QPs are unpaced and CNPs are only counted.
    pub line_rate_bps: u64,
    /// At most one CNP per QP per this many nanoseconds (DCQCN's N, 50 us).
    pub cnp_interval: Nanos,
    /// The reaction point's parameters.
    pub dcqcn: DcqcnParams,
    /// How a payload gets into the frame (header-only by default).
    pub tx_path: TxPath,
    /// How a received payload gets to its buffer (direct by default).
    pub rx_path: RxPath,
}

/// How the transmit path moves a payload into the frame (flexins.txt 3.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TxPath {
    /// Read from registered memory into an engine staging buffer, then copied into the
    /// frame: two copies (kept for the comparison, `sluice experiment flexins-tx`).
    Staging,
    /// Header-only: the headers are written into the device's frame and the payload is read
    /// from registered memory straight into the frame after them: one copy.
    #[default]
    HeaderOnly,
}

/// How the receive path moves a payload to its buffer (flexins.txt 3.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RxPath {
    /// The frame is first copied into an engine buffer and the payload placed from there:
    /// two copies (kept for the comparison, `sluice experiment flexins-rx`).
    Staging,
    /// Direct placement: the payload goes from the device's frame into the target buffer,
    /// one copy, and the frame is the device's again as soon as the call returns.
    #[default]
    Direct,
}

impl StackConfig {
    /// The defaults for `mac` and `ip`: 64 QPs, CQs and MRs, 4096 CQ entries and work
    /// requests, 64 packets in flight, a 10 Gbit/s line rate, CNPs at most every 50 us.
    pub fn new(mac: EthernetAddress, ip: Ipv4Addr) -> StackConfig {
        StackConfig {
            mac,
            ip,
            max_qps: 64,
            max_cqs: 64,
            max_mrs: 64,
            max_cqe: 4096,
            max_wr: 4096,
            max_inflight: 64,
            line_rate_bps: 10_000_000_000,
            cnp_interval: 50_000,
            dcqcn: DcqcnParams::default(),
            tx_path: TxPath::HeaderOnly,
            rx_path: RxPath::Direct,
        }
    }
}

/// A peer's address (`ibv_ah_attr` for RoCEv2: the GID as an IPv4 address, and the next
/// hop's MAC, which the engine's ARP provides).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr {
    /// The peer's IPv4 address.
    pub ip: Ipv4Addr,
    /// Its next hop's MAC.
    pub mac: EthernetAddress,
}

/// The attributes of a modify (`struct ibv_qp_attr`, the fields RC uses); which are given is
/// the mask's business.
#[derive(Clone, Copy, Debug, Default)]
pub struct QpAttr {
    /// cur_qp_state (with AttrMask::CUR_STATE).
    pub cur_state: Option<QpState>,
    /// qp_access_flags.
    pub access: u32,
    /// path_mtu as IBV_MTU_* (1: 256 .. 5: 4096).
    pub path_mtu: u8,
    /// dest_qp_num.
    pub dest_qpn: u32,
    /// rq_psn.
    pub rq_psn: u32,
    /// sq_psn.
    pub sq_psn: u32,
    /// timeout (4.096 us x 2^timeout; 0: infinite, taken as the largest).
    pub timeout: u8,
    /// retry_cnt.
    pub retry_cnt: u8,
    /// rnr_retry.
    pub rnr_retry: u8,
    /// min_rnr_timer.
    pub min_rnr_timer: u8,
    /// max_rd_atomic: RDMA READs outstanding as requester (with AttrMask::MAX_QP_RD_ATOMIC).
    pub max_rd_atomic: u8,
    /// The peer (ah_attr).
    pub peer: Option<PeerAddr>,
}

/// Why a verbs call was refused (nothing changed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerbsError {
    /// No such completion queue.
    NoSuchCq,
    /// No such queue pair.
    NoSuchQp,
    /// A configured limit was reached.
    Limit,
    /// A value out of range (CQ or queue size, MTU, timeout, PSN, QP number).
    InvalidValue(&'static str),
    /// The transition or its attributes (ibv_modify_qp: EINVAL).
    Modify(ModifyError),
    /// The completion queue is still used by a queue pair.
    Busy,
    /// A memory region was refused.
    Register(RegisterError),
    /// A work request was refused.
    Post(PostError),
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerbsError::NoSuchCq => f.write_str("no such completion queue"),
            VerbsError::NoSuchQp => f.write_str("no such queue pair"),
            VerbsError::Limit => f.write_str("verbs object limit reached"),
            VerbsError::InvalidValue(what) => write!(f, "invalid {what}"),
            VerbsError::Modify(e) => write!(f, "modify QP: {e}"),
            VerbsError::Busy => f.write_str("completion queue in use"),
            VerbsError::Register(e) => write!(f, "register memory: {e}"),
            VerbsError::Post(e) => write!(f, "post: {e}"),
        }
    }
}

impl std::error::Error for VerbsError {}

/// The stack's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackCounters {
    /// RoCEv2 frames received and handed to a QP.
    pub frames_rx: u64,
    /// Frames sent.
    pub frames_tx: u64,
    /// Frames refused as malformed or with a bad ICRC.
    pub malformed: u64,
    /// Frames for a QP that does not exist or is not ready to receive.
    pub no_qp: u64,
    /// Frames whose source is not the QP's peer.
    pub wrong_peer: u64,
    /// Frames that arrived marked ECN congestion experienced (a notification point's input).
    pub ce_rx: u64,
    /// Congestion notification packets sent.
    pub cnp_tx: u64,
    /// Congestion notification packets received (each one a rate cut, if pacing is on).
    pub cnp_rx: u64,
    /// The engine's memory traffic on the transmit path.
    pub tx_touch: Touched,
    /// The engine's memory traffic on the receive path.
    pub rx_touch: Touched,
    /// Packets that took the staging path on a header-only stack because the device's
    /// buffer was shorter than a full packet of the QP's path MTU.
    pub tx_buffer_short: u64,
    /// QPs whose timers `handle_timeout` ran (only the QPs due: flat in idle QPs).
    pub timer_visits: u64,
    /// QPs `poll_transmit` looked at (only the active ones: flat in idle QPs).
    pub tx_visits: u64,
}

/// Bytes the engine moves for payloads, per path (flexins.txt 5.3-5.4 measure the Arm
/// cores' memory bandwidth; this counts what the engine itself copies and reads).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Touched {
    /// Payload bytes moved between registered memory and a frame or staging buffer (TX:
    /// read from memory; RX: placed into it): one per payload byte on either path.
    pub payload: u64,
    /// Bytes copied through an engine staging buffer (0 on the header-only and direct paths).
    pub staging: u64,
    /// Bytes the ICRC pass reads (the whole IP packet: headers and payload).
    pub icrc: u64,
}

impl Touched {
    /// Every byte the engine touched: payload copies, staging copies and ICRC passes.
    pub fn total(&self) -> u64 {
        self.payload + self.staging + self.icrc
    }

    /// Engine bytes touched per payload byte (0 if no payload moved).
    pub fn per_payload_byte(&self) -> f64 {
        if self.payload == 0 {
            0.0
        } else {
            self.total() as f64 / self.payload as f64
        }
    }
}
