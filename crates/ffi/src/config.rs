//! `sluice_config`: the core's configuration as a plain C struct of fixed-width integers
//! (flags are `uint8_t`, nonzero is on; enumerations are `uint32_t`), checked field by field
//! before the core's own `Config::validate`.

use std::ffi::c_char;
use std::net::Ipv4Addr;
use std::str::FromStr;
use std::time::Duration;

use sluice_tcp::{AckPolicy, Algorithm, Config, Recovery};
use sluice_wire::EthernetAddress;

use crate::boundary::{self, c_str, in_out, input, run, status, Out};
use crate::error::sluice_error;

/// Congestion control: DCTCP (RFC 8257), the default.
pub const SLUICE_CC_DCTCP: u32 = 0;
/// Congestion control: TIMELY.
pub const SLUICE_CC_TIMELY: u32 = 1;
/// Congestion control: NewReno (RFC 5681, RFC 6582).
pub const SLUICE_CC_NEWRENO: u32 = 2;
/// Congestion control: CUBIC (RFC 9438).
pub const SLUICE_CC_CUBIC: u32 = 3;
/// Congestion control: BBR v1.
pub const SLUICE_CC_BBR: u32 = 4;

/// Loss recovery: SACK-based (RFC 6675) where the peer agreed to SACK.
pub const SLUICE_RECOVERY_SACK: u32 = 0;
/// Loss recovery: go-back-N from snd_una (the papers' baseline).
pub const SLUICE_RECOVERY_GO_BACK_N: u32 = 1;

/// The configuration of one stack. Fill it with `sluice_config_default`, then change
/// fields. Times are in nanoseconds, sizes in bytes, addresses in host byte order.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct sluice_config {
    /// The interface's MAC address.
    pub mac: [u8; 6],
    /// Interface MTU (IPv4 packet size), 576..=9216.
    pub mtu: u16,
    /// The IPv4 address the stack owns, host byte order (10.0.0.1 is 0x0a000001).
    pub ip: u32,
    /// Seed for all randomness (ISNs, cookies, timestamps, ephemeral ports).
    pub seed: u64,
    /// Congestion control of new connections: a `SLUICE_CC_*` value.
    pub congestion_control: u32,
    /// Loss recovery: a `SLUICE_RECOVERY_*` value.
    pub recovery: u32,
    /// Offer and accept SACK-permitted (RFC 2018).
    pub sack: u8,
    /// Negotiate ECN (RFC 3168) when the algorithm wants it (DCTCP).
    pub ecn: u8,
    /// Offer and accept window scaling (RFC 7323).
    pub window_scaling: u8,
    /// Offer and accept timestamps (RFC 7323).
    pub timestamps: u8,
    /// RACK-TLP (RFC 8985): tail loss probes and time-based loss detection.
    pub rack_tlp: u8,
    /// Nagle's algorithm on new connections.
    pub nagle: u8,
    /// Verify IPv4 and TCP checksums of received frames.
    pub verify_checksums: u8,
    /// Delayed ACKs: acknowledge every this many segments (0: every segment, the default).
    pub delayed_ack_segments: u8,
    /// Delayed ACKs: longest an ACK is held, below 500 ms (used when `delayed_ack_segments` > 0).
    pub delayed_ack_timeout_ns: u64,
    /// Out-of-order intervals tracked per connection (0..=64; Laminar and TAS use 1).
    pub ooo_intervals: u32,
    /// SACKed ranges the sender's scoreboard tracks per connection (1..=64 with SACK recovery).
    pub sack_scoreboard: u32,
    /// Slots in the connection table (1..=16777216).
    pub max_connections: u32,
    /// Listening ports (1..=65536).
    pub max_listeners: u32,
    /// Upper bound on any listener's accept queue.
    pub max_accept_queue: u32,
    /// Half-open connections per listener before SYN cookies are used.
    pub syn_backlog: u32,
    /// Receive buffer per connection: the most it grows to.
    pub rx_buffer: u64,
    /// First size of a connection's receive buffer.
    pub rx_buffer_initial: u64,
    /// Receive-buffer memory all connections share.
    pub rx_memory: u64,
    /// Send buffer per connection: the most it grows to.
    pub tx_buffer: u64,
    /// First size of a connection's send buffer.
    pub tx_buffer_initial: u64,
    /// Send-buffer memory all connections share.
    pub tx_memory: u64,
    /// Initial retransmission timeout (RFC 6298 2.1).
    pub rto_initial_ns: u64,
    /// Lower bound on the retransmission timeout.
    pub rto_min_ns: u64,
    /// Upper bound on the retransmission timeout.
    pub rto_max_ns: u64,
    /// Give up on a connection whose data stays unacknowledged this long.
    pub user_timeout_ns: u64,
    /// How long a connection stays in TIME-WAIT (2 MSL).
    pub time_wait_ns: u64,
    /// SYN (or SYN-ACK) transmissions before an open fails.
    pub syn_retries: u8,
    /// Lowest ephemeral port for active opens.
    pub ephemeral_port_low: u16,
    /// Highest ephemeral port for active opens.
    pub ephemeral_port_high: u16,
    /// Entries in the neighbor (ARP) cache, static neighbors included: a host that talks
    /// to more peers than this through `sluice_stack_add_neighbor` needs it raised.
    pub neighbor_cache: u32,
}

impl sluice_config {
    /// The C struct for a core configuration.
    pub fn from_core(c: &Config) -> Self {
        let (delayed_ack_segments, delayed_ack_timeout_ns) = match c.ack_policy {
            AckPolicy::EverySegment => (0, 0),
            AckPolicy::Delayed { segments, timeout } => (segments, nanos(timeout)),
        };
        sluice_config {
            mac: c.mac.0,
            mtu: c.mtu,
            ip: u32::from(c.ip),
            seed: c.seed,
            congestion_control: cc_code(c.congestion_control),
            recovery: match c.recovery {
                Recovery::Sack => SLUICE_RECOVERY_SACK,
                Recovery::GoBackN => SLUICE_RECOVERY_GO_BACK_N,
            },
            sack: c.sack.into(),
            ecn: c.ecn.into(),
            window_scaling: c.window_scaling.into(),
            timestamps: c.timestamps.into(),
            rack_tlp: c.rack_tlp.into(),
            nagle: c.nagle.into(),
            verify_checksums: c.verify_checksums.into(),
            delayed_ack_segments,
            delayed_ack_timeout_ns,
            ooo_intervals: saturate(c.ooo_intervals),
            sack_scoreboard: saturate(c.sack_scoreboard),
            max_connections: saturate(c.max_connections),
            max_listeners: saturate(c.max_listeners),
            max_accept_queue: saturate(c.max_accept_queue),
            syn_backlog: saturate(c.syn_backlog),
            rx_buffer: c.rx_buffer as u64,
            rx_buffer_initial: c.rx_buffer_initial as u64,
            rx_memory: c.rx_memory as u64,
            tx_buffer: c.tx_buffer as u64,
            tx_buffer_initial: c.tx_buffer_initial as u64,
            tx_memory: c.tx_memory as u64,
            rto_initial_ns: nanos(c.rto_initial),
            rto_min_ns: nanos(c.rto_min),
            rto_max_ns: nanos(c.rto_max),
            user_timeout_ns: nanos(c.user_timeout),
            time_wait_ns: nanos(c.time_wait),
            syn_retries: c.syn_retries,
            ephemeral_port_low: c.ephemeral_ports.0,
            ephemeral_port_high: c.ephemeral_ports.1,
            neighbor_cache: saturate(c.neighbor_cache),
        }
    }

    /// The core configuration, or why not: an unknown enumeration value, a size this
    /// machine cannot address, or what `Config::validate` refuses.
    pub fn to_core(&self) -> Result<Config, String> {
        let mut c = Config::new(EthernetAddress(self.mac), Ipv4Addr::from(self.ip));
        c.mtu = self.mtu;
        c.seed = self.seed;
        c.congestion_control = algorithm(self.congestion_control).ok_or_else(|| {
            format!(
                "config: unknown congestion_control {}",
                self.congestion_control
            )
        })?;
        c.recovery = match self.recovery {
            SLUICE_RECOVERY_SACK => Recovery::Sack,
            SLUICE_RECOVERY_GO_BACK_N => Recovery::GoBackN,
            other => return Err(format!("config: unknown recovery {other}")),
        };
        c.sack = self.sack != 0;
        c.ecn = self.ecn != 0;
        c.window_scaling = self.window_scaling != 0;
        c.timestamps = self.timestamps != 0;
        c.rack_tlp = self.rack_tlp != 0;
        c.nagle = self.nagle != 0;
        c.verify_checksums = self.verify_checksums != 0;
        c.ack_policy = match self.delayed_ack_segments {
            0 => AckPolicy::EverySegment,
            segments => AckPolicy::Delayed {
                segments,
                timeout: Duration::from_nanos(self.delayed_ack_timeout_ns),
            },
        };
        c.ooo_intervals = self.ooo_intervals as usize;
        c.sack_scoreboard = self.sack_scoreboard as usize;
        c.max_connections = self.max_connections as usize;
        c.max_listeners = self.max_listeners as usize;
        c.max_accept_queue = self.max_accept_queue as usize;
        c.syn_backlog = self.syn_backlog as usize;
        c.rx_buffer = size("rx_buffer", self.rx_buffer)?;
        c.rx_buffer_initial = size("rx_buffer_initial", self.rx_buffer_initial)?;
        c.rx_memory = size("rx_memory", self.rx_memory)?;
        c.tx_buffer = size("tx_buffer", self.tx_buffer)?;
        c.tx_buffer_initial = size("tx_buffer_initial", self.tx_buffer_initial)?;
        c.tx_memory = size("tx_memory", self.tx_memory)?;
        c.rto_initial = Duration::from_nanos(self.rto_initial_ns);
        c.rto_min = Duration::from_nanos(self.rto_min_ns);
        c.rto_max = Duration::from_nanos(self.rto_max_ns);
        c.user_timeout = Duration::from_nanos(self.user_timeout_ns);
        c.time_wait = Duration::from_nanos(self.time_wait_ns);
        c.syn_retries = self.syn_retries;
        c.ephemeral_ports = (self.ephemeral_port_low, self.ephemeral_port_high);
        c.neighbor_cache = self.neighbor_cache as usize;
        c.validate().map_err(|e| e.to_string())?;
        Ok(c)
    }
}

/// The algorithm of a `SLUICE_CC_*` value, if it is one.
pub(crate) fn algorithm(code: u32) -> Option<Algorithm> {
    Algorithm::ALL.get(code as usize).copied()
}

/// The `SLUICE_CC_*` value of an algorithm (its index in `Algorithm::ALL`).
pub(crate) fn cc_code(a: Algorithm) -> u32 {
    Algorithm::ALL.iter().position(|x| *x == a).unwrap_or(0) as u32
}

/// A duration in nanoseconds, saturating.
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A count as u32, saturating (defaults are far below).
pub(crate) fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A byte size as usize, or an error naming the field.
fn size(field: &str, n: u64) -> Result<usize, String> {
    usize::try_from(n).map_err(|_| format!("config: {field} does not fit this machine's usize"))
}

/// Fills `*config` with the core's defaults (MAC 02:00:00:00:00:01, IP 10.0.0.1, MTU 1500,
/// DCTCP with ECN, SACK recovery, 4096 connections, 256 KiB buffers).
///
/// # Safety
/// `config` is NULL or valid for a write of a `sluice_config`.
#[no_mangle]
pub unsafe extern "C" fn sluice_config_default(config: *mut sluice_config) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    let out = unsafe { Out::new(config) };
    status(run(|| {
        let core = Config::new(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            Ipv4Addr::new(10, 0, 0, 1),
        );
        out?.write(sluice_config::from_core(&core));
        Ok(0)
    }))
}

/// Sets `config->congestion_control` by name, as Linux's TCP_CONGESTION names them
/// ("dctcp", "timely", "reno" or "newreno", "cubic", "bbr"; case-insensitive). An unknown
/// name is `SLUICE_ERROR_INVALID_ARGUMENT` and leaves the config unchanged.
///
/// # Safety
/// `config` is NULL or points to a `sluice_config`; `name` is NULL or a NUL-terminated
/// string.
#[no_mangle]
pub unsafe extern "C" fn sluice_config_set_congestion_control(
    config: *mut sluice_config,
    name: *const c_char,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    let (config, name) = unsafe { (in_out(config), c_str(name)) };
    status(run(|| {
        let config = config?;
        let algorithm = Algorithm::from_str(name?).map_err(|_| sluice_error::InvalidArgument)?;
        config.congestion_control = cc_code(algorithm);
        Ok(0)
    }))
}

/// Checks a configuration as `sluice_stack_new` would: `SLUICE_ERROR_OK`, or
/// `SLUICE_ERROR_INVALID_CONFIG` with the reason written to `message` (NUL-terminated,
/// cut to `message_len`; `message` may be NULL).
///
/// # Safety
/// `config` is NULL or points to a `sluice_config`; `message` is NULL or valid for writes
/// of `message_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn sluice_config_check(
    config: *const sluice_config,
    message: *mut c_char,
    message_len: usize,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    let config = unsafe { input(config) };
    // SAFETY: forwarded from this function's contract (NULL gives a NullPointer error,
    // which here means "no message wanted").
    let message = unsafe { boundary::bytes_mut(message.cast::<u8>(), message_len) };
    status(run(|| {
        let reason = match config?.to_core() {
            Ok(_) => String::new(),
            Err(reason) => reason,
        };
        if let Ok(buf) = message {
            boundary::write_c_string(buf, &reason);
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

    fn default() -> sluice_config {
        let mut c = std::mem::MaybeUninit::<sluice_config>::uninit();
        // SAFETY: valid for a write of a sluice_config.
        let r = unsafe { sluice_config_default(c.as_mut_ptr()) };
        assert_eq!(r, sluice_error::Ok);
        // SAFETY: sluice_config_default wrote all of it.
        unsafe { c.assume_init() }
    }

    #[test]
    fn the_default_is_the_cores_and_round_trips() {
        let c = default();
        let core = c.to_core().unwrap();
        assert_eq!(sluice_config::from_core(&core), c);
        assert_eq!(c.mtu, 1500);
        assert_eq!(c.ip, 0x0a00_0001);
        assert_eq!(c.congestion_control, SLUICE_CC_DCTCP);
        assert_eq!(core.ack_policy, AckPolicy::EverySegment);
        let mut d = c;
        d.delayed_ack_segments = 2;
        d.delayed_ack_timeout_ns = 40_000_000;
        d.recovery = SLUICE_RECOVERY_GO_BACK_N;
        d.congestion_control = SLUICE_CC_BBR;
        d.neighbor_cache = 1024;
        let core = d.to_core().unwrap();
        assert_eq!(sluice_config::from_core(&core), d);
        assert_eq!(core.neighbor_cache, 1024);
        assert_eq!(core.recovery, Recovery::GoBackN);
        assert_eq!(core.congestion_control, Algorithm::Bbr);
    }

    #[test]
    fn invalid_values_are_refused_with_the_field_named() {
        /// A change that breaks a config, and the field the reason must name.
        type Case = (fn(&mut sluice_config), &'static str);
        let cases: [Case; 5] = [
            (|c| c.congestion_control = 5, "congestion_control"),
            (|c| c.recovery = 2, "recovery"),
            (|c| c.mtu = 9217, "mtu"),
            (|c| c.ooo_intervals = 65, "ooo_intervals"),
            (
                |c| {
                    c.delayed_ack_segments = 1;
                    c.delayed_ack_timeout_ns = 500_000_000;
                },
                "ack_policy",
            ),
        ];
        for (break_it, field) in cases {
            let mut c = default();
            break_it(&mut c);
            let reason = c.to_core().unwrap_err();
            assert!(reason.contains(field), "{reason} should name {field}");
            let mut msg = [0x55 as c_char; 64];
            // SAFETY: both valid; the message buffer is 64 bytes.
            let r = unsafe { sluice_config_check(&c, msg.as_mut_ptr(), msg.len()) };
            assert_eq!(r, sluice_error::InvalidConfig);
            // SAFETY: sluice_config_check NUL-terminated it within the buffer.
            let msg = unsafe { std::ffi::CStr::from_ptr(msg.as_ptr()) };
            assert!(reason.starts_with(msg.to_str().unwrap()));
            // SAFETY: valid config pointer; NULL message is allowed.
            let r = unsafe { sluice_config_check(&c, std::ptr::null_mut(), 10) };
            assert_eq!(r, sluice_error::InvalidConfig);
        }
    }

    #[test]
    fn congestion_control_by_name() {
        let mut c = default();
        for (name, code) in [
            ("reno", SLUICE_CC_NEWRENO),
            ("CUBIC", SLUICE_CC_CUBIC),
            ("bbr", SLUICE_CC_BBR),
        ] {
            let name = std::ffi::CString::new(name).unwrap();
            // SAFETY: valid config and NUL-terminated name.
            let r = unsafe { sluice_config_set_congestion_control(&mut c, name.as_ptr()) };
            assert_eq!(r, sluice_error::Ok);
            assert_eq!(c.congestion_control, code);
        }
        // SAFETY: valid config and NUL-terminated name.
        let r = unsafe { sluice_config_set_congestion_control(&mut c, c"vegas".as_ptr()) };
        assert_eq!(r, sluice_error::InvalidArgument);
        assert_eq!(c.congestion_control, SLUICE_CC_BBR);
        // SAFETY: NULL is allowed.
        let r =
            unsafe { sluice_config_set_congestion_control(std::ptr::null_mut(), c"bbr".as_ptr()) };
        assert_eq!(r, sluice_error::NullPointer);
    }
}
