//! `sluice_mtp_config`: the MTP core's `StackConfig` as a plain C struct of fixed-width
//! integers, checked by the core's own `StackConfig::validate`.

use std::ffi::c_char;
use std::net::Ipv4Addr;

use sluice_mtp::stack::{CcParams, Encapsulation, StackConfig};
use sluice_wire::EthernetAddress;

use crate::boundary::{bytes_mut, input, run, status, write_c_string, Out};
use crate::config::saturate;
use crate::error::sluice_error;

/// MTP directly in IPv4 (protocol 253), the default.
pub const SLUICE_MTP_ENCAP_IP: u32 = 0;
/// MTP in UDP to port 9919 (the source port is flow entropy for ECMP).
pub const SLUICE_MTP_ENCAP_UDP: u32 = 1;

/// The configuration of one MTP stack. Fill it with `sluice_mtp_config_default`, then change
/// fields. Times are in nanoseconds, sizes in bytes, addresses in host byte order.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct sluice_mtp_config {
    /// The interface's MAC address.
    pub mac: [u8; 6],
    /// Link MTU (IPv4 packet size).
    pub mtu: u16,
    /// The IPv4 address the stack owns, host byte order.
    pub ip: u32,
    /// `SLUICE_MTP_ENCAP_IP` or `SLUICE_MTP_ENCAP_UDP`.
    pub encapsulation: u32,
    /// Feedback slots reserved in every data packet for devices.
    pub feedback_slots: u8,
    /// Path-feedback entries accepted per list (1..=32); longer lists are truncated.
    pub max_feedback: u32,
    /// Path-exclude entries a message may carry (at most 32).
    pub max_exclude: u32,
    /// SACK and NACK runs processed per ACK.
    pub max_sack_runs: u32,
    /// Endpoints (bound ports) at most.
    pub max_endpoints: u32,
    /// Messages the sender keeps unacknowledged at most.
    pub max_outstanding: u32,
    /// The longest message, bytes (sender and receiver).
    pub max_message_len: u32,
    /// Incomplete messages the receiver holds at most.
    pub reassembly_messages: u32,
    /// Completed message ids remembered (retransmissions are not delivered twice).
    pub completed_ids: u32,
    /// Whole messages an endpoint's receive queue holds at most.
    pub endpoint_queue: u32,
    /// ACKs waiting to be sent at most.
    pub ack_queue: u32,
    /// Events waiting to be polled at most (more are dropped and counted).
    pub event_queue: u32,
    /// Destinations the sender keeps RTT and path state for at most.
    pub max_destinations: u32,
    /// Alternative paths remembered per destination.
    pub max_paths: u32,
    /// (pathlet, traffic class) windows kept at most.
    pub max_pathlets: u32,
    /// Timeouts a message survives; one more fails it.
    pub max_timeouts: u32,
    /// Messages the scheduler looks at per transmit decision.
    pub sched_scan: u32,
    /// Every this many data packets go to the oldest message (0: pure SRPT).
    pub srpt_aging: u32,
    /// DCTCP's gain as a shift (4: g = 1/16), at most 16.
    pub cc_g_shift: u32,
    /// Bytes the line spends per frame besides the frame (Ethernet: 20), at most 256.
    pub line_frame_overhead: u32,
    /// Bytes data may run ahead of the line when `link_bps` is set.
    pub line_backlog: u32,
    /// Bytes of incomplete messages the receiver holds at most.
    pub reassembly_bytes: u64,
    /// RTO before any RTT sample.
    pub rto_initial_ns: u64,
    /// The RTO's floor.
    pub rto_min_ns: u64,
    /// The RTO's ceiling.
    pub rto_max_ns: u64,
    /// Bytes in flight to a destination before any path feedback; a new pathlet's window.
    pub initial_window: u64,
    /// The largest window a pathlet may reach, bytes.
    pub cc_max_cwnd: u64,
    /// A pathlet whose DCTCP alpha is above this is congested (for path exclusion).
    pub cc_exclude_alpha: f64,
    /// The local link's rate in bit/s for pacing, 0 for unknown (no pacing).
    pub link_bps: u64,
    /// Message-length cutoffs, ascending, for the DSCP of data packets (all 0: off).
    pub dscp_cutoffs: [u64; 7],
}

impl sluice_mtp_config {
    /// The C struct for a core configuration.
    pub fn from_core(c: &StackConfig) -> Self {
        sluice_mtp_config {
            mac: c.mac.0,
            mtu: u16::try_from(c.mtu).unwrap_or(u16::MAX),
            ip: u32::from(c.ip),
            encapsulation: match c.encap {
                Encapsulation::Ip => SLUICE_MTP_ENCAP_IP,
                Encapsulation::Udp => SLUICE_MTP_ENCAP_UDP,
            },
            feedback_slots: c.feedback_slots,
            max_feedback: saturate(c.max_feedback),
            max_exclude: saturate(c.max_exclude),
            max_sack_runs: saturate(c.max_sack_runs),
            max_endpoints: saturate(c.max_endpoints),
            max_outstanding: saturate(c.max_outstanding),
            max_message_len: c.max_message_len,
            reassembly_messages: saturate(c.reassembly_messages),
            completed_ids: saturate(c.completed_ids),
            endpoint_queue: saturate(c.endpoint_queue),
            ack_queue: saturate(c.ack_queue),
            event_queue: saturate(c.event_queue),
            max_destinations: saturate(c.max_destinations),
            max_paths: saturate(c.max_paths),
            max_pathlets: saturate(c.max_pathlets),
            max_timeouts: c.max_timeouts,
            sched_scan: saturate(c.sched_scan),
            srpt_aging: c.srpt_aging,
            cc_g_shift: c.cc.g_shift,
            line_frame_overhead: saturate(c.line_frame_overhead),
            line_backlog: saturate(c.line_backlog),
            reassembly_bytes: c.reassembly_bytes as u64,
            rto_initial_ns: c.rto_initial,
            rto_min_ns: c.rto_min,
            rto_max_ns: c.rto_max,
            initial_window: c.initial_window,
            cc_max_cwnd: c.cc.max_cwnd,
            cc_exclude_alpha: c.cc.exclude_alpha,
            link_bps: c.link_bps,
            dscp_cutoffs: c.dscp_cutoffs,
        }
    }

    /// The core configuration, or why not: an unknown encapsulation, a NaN alpha, a size
    /// this machine cannot address, or what `StackConfig::validate` refuses.
    pub fn to_core(&self) -> Result<StackConfig, String> {
        let mut c = StackConfig::new(EthernetAddress(self.mac), Ipv4Addr::from(self.ip));
        c.mtu = usize::from(self.mtu);
        c.encap = match self.encapsulation {
            SLUICE_MTP_ENCAP_IP => Encapsulation::Ip,
            SLUICE_MTP_ENCAP_UDP => Encapsulation::Udp,
            other => return Err(format!("mtp config: unknown encapsulation {other}")),
        };
        if !self.cc_exclude_alpha.is_finite() {
            return Err("mtp config: cc_exclude_alpha must be a finite number".into());
        }
        let reassembly_bytes = usize::try_from(self.reassembly_bytes).map_err(|_| {
            "mtp config: reassembly_bytes does not fit this machine's usize".to_string()
        })?;
        c.feedback_slots = self.feedback_slots;
        c.max_feedback = self.max_feedback as usize;
        c.max_exclude = self.max_exclude as usize;
        c.max_sack_runs = self.max_sack_runs as usize;
        c.max_endpoints = self.max_endpoints as usize;
        c.max_outstanding = self.max_outstanding as usize;
        c.max_message_len = self.max_message_len;
        c.reassembly_bytes = reassembly_bytes;
        c.reassembly_messages = self.reassembly_messages as usize;
        c.completed_ids = self.completed_ids as usize;
        c.endpoint_queue = self.endpoint_queue as usize;
        c.ack_queue = self.ack_queue as usize;
        c.event_queue = self.event_queue as usize;
        c.max_destinations = self.max_destinations as usize;
        c.max_paths = self.max_paths as usize;
        c.max_pathlets = self.max_pathlets as usize;
        c.max_timeouts = self.max_timeouts;
        c.sched_scan = self.sched_scan as usize;
        c.srpt_aging = self.srpt_aging;
        c.line_frame_overhead = self.line_frame_overhead as usize;
        c.line_backlog = self.line_backlog as usize;
        c.rto_initial = self.rto_initial_ns;
        c.rto_min = self.rto_min_ns;
        c.rto_max = self.rto_max_ns;
        c.initial_window = self.initial_window;
        c.cc = CcParams {
            g_shift: self.cc_g_shift,
            exclude_alpha: self.cc_exclude_alpha,
            max_cwnd: self.cc_max_cwnd,
        };
        c.link_bps = self.link_bps;
        c.dscp_cutoffs = self.dscp_cutoffs;
        c.validate().map_err(|e| format!("mtp config: {e}"))?;
        Ok(c)
    }
}

/// Fills `*config` with the MTP core's defaults (MAC 02:00:00:00:00:01, IP 10.0.0.1, MTU
/// 1500 over IPv4 protocol 253, 64 endpoints, 1024 outstanding messages of at most 4 MiB,
/// RTO 200 us..50 ms).
///
/// # Safety
/// `config` is NULL or valid for a write of a `sluice_mtp_config`.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_config_default(config: *mut sluice_mtp_config) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    let out = unsafe { Out::new(config) };
    status(run(|| {
        let core = StackConfig::new(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            Ipv4Addr::new(10, 0, 0, 1),
        );
        out?.write(sluice_mtp_config::from_core(&core));
        Ok(0)
    }))
}

/// Checks a configuration as `sluice_mtp_stack_new` would: `SLUICE_ERROR_OK`, or
/// `SLUICE_ERROR_INVALID_CONFIG` with the reason written to `message` (NUL-terminated, cut
/// to `message_len`; `message` may be NULL).
///
/// # Safety
/// `config` is NULL or points to a `sluice_mtp_config`; `message` is NULL or valid for
/// writes of `message_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_config_check(
    config: *const sluice_mtp_config,
    message: *mut c_char,
    message_len: usize,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    let config = unsafe { input(config) };
    // SAFETY: forwarded from this function's contract (NULL means no message wanted).
    let message = unsafe { bytes_mut(message.cast::<u8>(), message_len) };
    status(run(|| {
        let reason = config?.to_core().err().unwrap_or_default();
        if let Ok(buf) = message {
            write_c_string(buf, &reason);
        }
        if reason.is_empty() {
            Ok(0)
        } else {
            Err(sluice_error::InvalidConfig)
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default() -> sluice_mtp_config {
        let mut c = std::mem::MaybeUninit::<sluice_mtp_config>::uninit();
        // SAFETY: valid for a write of a sluice_mtp_config.
        let r = unsafe { sluice_mtp_config_default(c.as_mut_ptr()) };
        assert_eq!(r, sluice_error::Ok);
        // SAFETY: sluice_mtp_config_default wrote all of it.
        unsafe { c.assume_init() }
    }

    #[test]
    fn the_default_is_the_cores_and_round_trips() {
        let c = default();
        let core = c.to_core().unwrap();
        assert_eq!(sluice_mtp_config::from_core(&core), c);
        assert_eq!(
            (c.mtu, c.ip, c.encapsulation),
            (1500, 0x0a00_0001, SLUICE_MTP_ENCAP_IP)
        );
        let mut d = c;
        d.encapsulation = SLUICE_MTP_ENCAP_UDP;
        d.dscp_cutoffs = [1000, 10_000, 0, 0, 0, 0, 0];
        d.srpt_aging = 8;
        let core = d.to_core().unwrap();
        assert_eq!(core.encap, Encapsulation::Udp);
        assert_eq!(sluice_mtp_config::from_core(&core), d);
    }

    #[test]
    fn invalid_values_are_refused_with_the_reason() {
        /// A change that breaks a config, and words the reason must contain.
        type Case = (fn(&mut sluice_mtp_config), &'static str);
        let cases: [Case; 6] = [
            (|c| c.encapsulation = 2, "encapsulation"),
            (|c| c.cc_exclude_alpha = f64::NAN, "cc_exclude_alpha"),
            (|c| c.mtu = 100, "MTU"),
            (|c| c.max_endpoints = 0, "max_endpoints"),
            (|c| c.rto_min_ns = 0, "RTO"),
            (|c| c.max_feedback = 33, "max_feedback"),
        ];
        for (breaks, words) in cases {
            let mut c = default();
            breaks(&mut c);
            let reason = c.to_core().unwrap_err();
            assert!(reason.contains(words), "{reason}");
            let mut msg = [0x55 as c_char; 16];
            // SAFETY: both valid; the message buffer is 16 bytes.
            let r = unsafe { sluice_mtp_config_check(&c, msg.as_mut_ptr(), msg.len()) };
            assert_eq!(r, sluice_error::InvalidConfig);
            // SAFETY: NUL-terminated within the buffer by sluice_mtp_config_check.
            let msg = unsafe { std::ffi::CStr::from_ptr(msg.as_ptr()) };
            assert_eq!(msg.to_bytes(), &reason.as_bytes()[..15]);
        }
        // SAFETY: NULL config is allowed (refused); a NULL message is allowed.
        let r = unsafe { sluice_mtp_config_check(std::ptr::null(), std::ptr::null_mut(), 0) };
        assert_eq!(r, sluice_error::NullPointer);
        let c = default();
        // SAFETY: a valid config; a NULL message is allowed.
        let r = unsafe { sluice_mtp_config_check(&c, std::ptr::null_mut(), 8) };
        assert_eq!(r, sluice_error::Ok);
        // SAFETY: NULL is allowed (refused).
        let r = unsafe { sluice_mtp_config_default(std::ptr::null_mut()) };
        assert_eq!(r, sluice_error::NullPointer);
    }
}
