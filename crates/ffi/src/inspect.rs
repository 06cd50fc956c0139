//! Looking inside: a connection's variables and the stack's counters.

use std::ffi::c_char;

use sluice_tcp::TcpState;

use crate::boundary::{c_str, status, with_stack, Out};
use crate::config::{cc_code, nanos};
use crate::error::sluice_error;
use crate::handle::sluice_conn;
use crate::host::sluice_stack;

/// A connection's state (RFC 9293 3.3.2).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum sluice_tcp_state {
    /// No connection.
    Closed = 0,
    /// SYN sent, awaiting SYN-ACK.
    SynSent = 1,
    /// SYN received and SYN-ACK sent, awaiting ACK.
    SynReceived = 2,
    /// Open; data flows both ways.
    Established = 3,
    /// We sent FIN; awaiting its ACK or the peer's FIN.
    FinWait1 = 4,
    /// Our FIN is acknowledged; awaiting the peer's FIN.
    FinWait2 = 5,
    /// The peer sent FIN; we may still send.
    CloseWait = 6,
    /// Both sent FIN simultaneously; awaiting the ACK of ours.
    Closing = 7,
    /// Peer closed first, then we sent FIN; awaiting its ACK.
    LastAck = 8,
    /// Both FINs acknowledged; waiting out 2 MSL.
    TimeWait = 9,
}

impl From<TcpState> for sluice_tcp_state {
    fn from(s: TcpState) -> Self {
        match s {
            TcpState::Closed => sluice_tcp_state::Closed,
            TcpState::SynSent => sluice_tcp_state::SynSent,
            TcpState::SynReceived => sluice_tcp_state::SynReceived,
            TcpState::Established => sluice_tcp_state::Established,
            TcpState::FinWait1 => sluice_tcp_state::FinWait1,
            TcpState::FinWait2 => sluice_tcp_state::FinWait2,
            TcpState::CloseWait => sluice_tcp_state::CloseWait,
            TcpState::Closing => sluice_tcp_state::Closing,
            TcpState::LastAck => sluice_tcp_state::LastAck,
            TcpState::TimeWait => sluice_tcp_state::TimeWait,
        }
    }
}

/// A snapshot of one connection, from `sluice_conn_get_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct sluice_conn_info {
    /// The connection's state.
    pub state: sluice_tcp_state,
    /// Its failure (`SLUICE_ERROR_CONN_*`), or 0 while it has none.
    pub error: i32,
    /// Congestion window, bytes.
    pub cwnd: u32,
    /// Slow-start threshold, bytes (`UINT32_MAX`: none yet).
    pub ssthresh: u32,
    /// The peer's window, bytes.
    pub snd_wnd: u32,
    /// Effective MSS.
    pub mss: u32,
    /// The congestion-control algorithm (`SLUICE_CC_*`).
    pub congestion_control: u32,
    /// Out-of-order intervals held.
    pub ooo_intervals: u32,
    /// Fast retransmits on this connection.
    pub fast_retransmits: u32,
    /// ECN was negotiated (RFC 3168): 1, else 0.
    pub ecn: u32,
    /// Smoothed RTT, nanoseconds.
    pub srtt_ns: u64,
    /// Current retransmission timeout, nanoseconds.
    pub rto_ns: u64,
    /// Bytes readable now.
    pub readable: u64,
    /// Bytes the send buffer can take now.
    pub writable: u64,
    /// Bytes queued and not yet acknowledged.
    pub unacked: u64,
    /// Bytes `sluice_send` handed to the connection.
    pub bytes_sent: u64,
    /// Bytes `sluice_recv` returned.
    pub bytes_received: u64,
    /// Local address, host byte order.
    pub local_ip: u32,
    /// Remote address, host byte order.
    pub remote_ip: u32,
    /// Local port.
    pub local_port: u16,
    /// Remote port.
    pub remote_port: u16,
}

/// The stack's main counters (every one by name: `sluice_stack_counter`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sluice_counters {
    /// Connections in the table now (any state, TIME-WAIT included).
    pub connections: u64,
    /// Frames handed to the stack.
    pub frames_rx: u64,
    /// Frames the stack emitted.
    pub frames_tx: u64,
    /// Frames that failed to parse.
    pub malformed: u64,
    /// Frames with a bad IPv4 or TCP checksum.
    pub bad_checksum: u64,
    /// Frames for another address or an unknown protocol.
    pub not_for_us: u64,
    /// RSTs sent.
    pub rst_sent: u64,
    /// RSTs received and accepted.
    pub rst_received: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Fast retransmits.
    pub fast_retransmits: u64,
    /// Bytes retransmitted.
    pub retransmitted_bytes: u64,
    /// Out-of-order segments stored.
    pub ooo_stored: u64,
    /// Out-of-order segments dropped (no interval free).
    pub ooo_dropped: u64,
    /// Duplicate segments received.
    pub duplicate_segments: u64,
    /// SYNs refused because the connection table was full.
    pub conn_table_full: u64,
    /// Control frames dropped because their queue was full.
    pub control_queue_full: u64,
    /// Segments received with ECN CE marks.
    pub ecn_ce: u64,
    /// Calls on this stack refused for the caller's input: a NULL or invalid argument, an
    /// invalid handle, a short buffer (also by name: "abi_refused").
    pub abi_refused: u64,
}

/// A snapshot of the connection into `*info`.
///
/// # Safety
/// `stack` is NULL or a live stack that no other thread uses during the call; `info` is
/// NULL or valid for a write of a `sluice_conn_info`.
#[no_mangle]
pub unsafe extern "C" fn sluice_conn_get_info(
    stack: *mut sluice_stack,
    conn: sluice_conn,
    info: *mut sluice_conn_info,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    let out = unsafe { Out::new(info) };
    // SAFETY: forwarded from this function's contract.
    status(unsafe {
        with_stack(stack, |s| {
            let out = out?;
            let entry = *s.handles.conn(conn)?;
            let i = s.core.info(entry.id)?;
            let (local, remote) = s.core.endpoints(entry.id)?;
            let error = s
                .core
                .error(entry.id)?
                .map_or(0, |e| sluice_error::from(e) as i32);
            out.write(sluice_conn_info {
                state: i.state.into(),
                error,
                cwnd: i.cwnd,
                ssthresh: i.ssthresh,
                snd_wnd: i.snd_wnd,
                mss: u32::from(i.mss),
                congestion_control: cc_code(i.congestion_control),
                ooo_intervals: u32::from(i.ooo_intervals),
                fast_retransmits: u32::from(i.fast_retransmits),
                ecn: u32::from(i.ecn),
                srtt_ns: nanos(i.srtt),
                rto_ns: nanos(i.rto),
                readable: i.readable as u64,
                writable: i.writable as u64,
                unacked: i.unacked as u64,
                bytes_sent: entry.bytes_sent,
                bytes_received: entry.bytes_received,
                local_ip: u32::from(*local.ip()),
                remote_ip: u32::from(*remote.ip()),
                local_port: local.port(),
                remote_port: remote.port(),
            });
            Ok(0)
        })
    })
}

/// The stack's main counters into `*counters`.
///
/// # Safety
/// `stack` is NULL or a live stack that no other thread uses during the call; `counters`
/// is NULL or valid for a write of a `sluice_counters`.
#[no_mangle]
pub unsafe extern "C" fn sluice_stack_counters(
    stack: *mut sluice_stack,
    counters: *mut sluice_counters,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    let out = unsafe { Out::new(counters) };
    // SAFETY: forwarded from this function's contract.
    status(unsafe {
        with_stack(stack, |s| {
            let out = out?;
            let c = s.core.counters();
            out.write(sluice_counters {
                connections: s.core.connection_count() as u64,
                frames_rx: c.frames_rx,
                frames_tx: c.frames_tx,
                malformed: c.malformed,
                bad_checksum: c.bad_checksum,
                not_for_us: c.not_for_us,
                rst_sent: c.rst_sent,
                rst_received: c.rst_received,
                timeouts: c.timeouts,
                fast_retransmits: c.fast_retransmits,
                retransmitted_bytes: c.retransmitted_bytes,
                ooo_stored: c.ooo_stored,
                ooo_dropped: c.ooo_dropped,
                duplicate_segments: c.duplicate_segments,
                conn_table_full: c.conn_table_full,
                control_queue_full: c.control_queue_full,
                ecn_ce: c.ecn_ce,
                abi_refused: s.refused_calls,
            });
            Ok(0)
        })
    })
}

/// One counter by its name in the core (`sluice ctl counters` lists them, e.g.
/// "sack_recoveries", "syn_cookies_sent"), or "abi_refused", into `*value`; an unknown name
/// is `SLUICE_ERROR_INVALID_ARGUMENT` (and counted in "abi_refused").
///
/// # Safety
/// `stack` is NULL or a live stack that no other thread uses during the call; `name` is
/// NULL or a NUL-terminated string; `value` is NULL or valid for a write of a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn sluice_stack_counter(
    stack: *mut sluice_stack,
    name: *const c_char,
    value: *mut u64,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    let (name, out) = unsafe { (c_str(name), Out::new(value)) };
    // SAFETY: forwarded from this function's contract.
    status(unsafe {
        with_stack(stack, |s| {
            let (name, out) = (name?, out?);
            let v = if name == "abi_refused" {
                s.refused_calls
            } else {
                let rows = s.core.counters().rows();
                let (_, v) = rows
                    .iter()
                    .find(|(n, _)| *n == name)
                    .ok_or(sluice_error::InvalidArgument)?;
                *v
            };
            out.write(v);
            Ok(0)
        })
    })
}
