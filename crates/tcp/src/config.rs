//! Configuration of one TCP core. Every table and queue bound is set here.

use std::net::Ipv4Addr;
use std::time::Duration;

use sluice_wire::EthernetAddress;

use crate::cc::Algorithm;

/// When the receiver acknowledges data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckPolicy {
    /// One ACK per data segment (the default, as in TAS and Laminar).
    EverySegment,
    /// Delayed ACKs (RFC 9293 3.8.6.3): after `segments` full segments or when `timeout` expires.
    Delayed {
        /// Acknowledge at least every this many segments (RFC 9293 SHLD-19: at most 2 for full segments).
        segments: u8,
        /// Longest an ACK may be held (RFC 9293 MUST-40: under 0.5 s).
        timeout: Duration,
    },
}

/// How the sender recovers lost segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// SACK-based loss recovery (RFC 6675) with a bounded scoreboard, on connections whose
    /// peer agreed to SACK (RFC 2018); the others fall back to go-back-N.
    Sack,
    /// Go-back-N from snd_una after three duplicate ACKs or a timeout, as TAS, FlexTOE and
    /// Laminar do: the papers' baseline.
    GoBackN,
}

/// Configuration of a [`crate::Stack`].
#[derive(Clone, Debug)]
pub struct Config {
    /// The interface's MAC address.
    pub mac: EthernetAddress,
    /// The address this core owns.
    pub ip: Ipv4Addr,
    /// Seed for all randomness (ISN key, cookie secret, timestamp offsets, ephemeral ports).
    pub seed: u64,
    /// Largest number of connections in any state (slots in the connection table).
    pub max_connections: usize,
    /// Largest number of listening ports.
    pub max_listeners: usize,
    /// Half-open connections per listener before SYN cookies are used; 0 answers every
    /// SYN with a cookie, so no state exists until the handshake completes (acceltcp.txt
    /// 4.1's setup offload; Linux's tcp_syncookies=2).
    pub syn_backlog: usize,
    /// Upper bound on any listener's accept queue.
    pub max_accept_queue: usize,
    /// Receive buffer per connection in bytes (rounded up to a power of two): the most it
    /// grows to. The window scale offered in the SYN is chosen for this size.
    pub rx_buffer: usize,
    /// First size of a connection's receive buffer. It doubles, up to `rx_buffer`, when the
    /// application reads a window that the sender had nearly filled (the ring, not the
    /// application, was the limit), as Linux's receive-buffer autotuning does; a closed
    /// connection's grown buffer is released. At or above `rx_buffer`: a fixed `rx_buffer`.
    pub rx_buffer_initial: usize,
    /// Receive-buffer memory the connections share: growth stops at an equal share of it
    /// per open connection (never below `rx_buffer_initial`), as Linux's tcp_mem bounds it.
    pub rx_memory: usize,
    /// Send buffer per connection in bytes (rounded up to a power of two): the most it grows to.
    pub tx_buffer: usize,
    /// First size of a connection's send buffer. It doubles, up to `tx_buffer`, when the
    /// application fills it and twice the congestion window (bounded by the peer's window)
    /// needs more, as Linux's send-buffer autotuning does; many slow connections then hold
    /// (and fault in) little memory. At or above `tx_buffer`: a fixed `tx_buffer`.
    pub tx_buffer_initial: usize,
    /// Send-buffer memory the connections share: growth stops at an equal share of it per
    /// open connection (never below `tx_buffer_initial`), so many connections cannot take
    /// gigabytes (as Linux's tcp_mem bounds its buffers).
    pub tx_memory: usize,
    /// Global thresholds on bytes buffered by all connections (received and not read, out
    /// of order, sent and not acknowledged), as Linux's tcp_mem: above `pressure`, rings stop
    /// growing and windows reopen only a little; above `high`, SYNs and new out-of-order
    /// data are refused (control/memory.rs). None: derived from `rx_memory + tx_memory`
    /// ([`Config::memory_limits`]).
    pub tcp_mem: Option<MemoryLimits>,
    /// Memory groups (ids 0..max_memory_groups; 0 is the ungrouped): each counts the bytes
    /// its connections buffer against limits of its own (`Stack::set_group_limit`,
    /// control/memory_group.rs), as Linux's memory cgroups do under tcp_mem.
    pub max_memory_groups: usize,
    /// Interface MTU (IPv4 packet size).
    pub mtu: u16,
    /// Out-of-order intervals tracked per connection (Laminar and TAS use 1).
    pub ooo_intervals: usize,
    /// SACKed ranges the sender's scoreboard tracks per connection (RFC 6675); a SACK block
    /// that finds no room is dropped (or evicts the highest range) and counted.
    pub sack_scoreboard: usize,
    /// Rows of the cold pool: a connection holds one (its out-of-order intervals, SACK
    /// scoreboard and loss-recovery state, `ooo_intervals` and `sack_scoreboard` sized)
    /// only while it has out-of-order data, SACKed ranges, a recovery or a timeout to
    /// judge; an idle connection holds none. None: [`Config::cold_pool`]'s default, an
    /// eighth of `max_connections`, at least 256 (at most `max_connections` and 65535).
    /// A connection that finds the pool empty is counted (`Counters::cold_pool_empty`)
    /// and goes on without: its out-of-order data is dropped (the peer retransmits) and
    /// its recovery is go-back-N (RFC 6582) until nothing is outstanding.
    pub cold_pool_rows: Option<usize>,
    /// Loss recovery of the sender.
    pub recovery: Recovery,
    /// Acknowledgment policy for received data.
    pub ack_policy: AckPolicy,
    /// Nagle's algorithm on new connections (RFC 9293 SHLD-7).
    pub nagle: bool,
    /// Initial retransmission timeout (RFC 6298 2.1).
    pub rto_initial: Duration,
    /// Lower bound on the retransmission timeout. Default 5 ms, a data-center value:
    /// RFC 6298 2.4's one second is a SHOULD that RFC 8961 4 leaves room to lower where
    /// paths are known (and Linux's 200 ms is its own choice); on a path of tens of
    /// microseconds even 5 ms is a hundred RTTs, above the stalls of hosts whose cores are
    /// shared (RFC 4015 undoes a spurious timeout). Tail losses are repaired earlier, by
    /// RACK-TLP. Raise it for peers that delay ACKs longer (Linux holds one up to 40 ms).
    pub rto_min: Duration,
    /// Upper bound on the retransmission timeout and on the persist interval.
    pub rto_max: Duration,
    /// RACK-TLP (RFC 8985): tail loss probes, and time-based loss detection (off: losses
    /// are found by DupThresh and the retransmission timer alone).
    pub rack_tlp: bool,
    /// Lower bound on the tail loss probe timeout, PTO (RFC 8985 7.2): 2 SRTT of a path of
    /// tens of microseconds is near a host's scheduling noise.
    pub tlp_pto_min: Duration,
    /// The peer's worst-case delayed-ACK time, added to the PTO when one segment is in
    /// flight (RFC 8985 7.2 WCDelAckT). None: this host's own (`ack_policy`'s timeout, 0
    /// when every segment is acknowledged), taking the data center's hosts as alike.
    pub tlp_max_ack_delay: Option<Duration>,
    /// RACK's transmit marks per connection (RFC 8985 6, datapath/rack.rs): 8 bytes each;
    /// more marks time losses in a large window more finely. 0: no RACK loss detection.
    pub rack_marks: usize,
    /// Give up on a connection whose data has gone unacknowledged for this long (RFC 9293 3.8.3, R2).
    pub user_timeout: Duration,
    /// SYN (or SYN-ACK) transmissions before an open fails.
    pub syn_retries: u8,
    /// How long a connection stays in TIME-WAIT (2 MSL).
    pub time_wait: Duration,
    /// Challenge ACKs (RFC 5961) a connection may send per second.
    pub challenge_ack_limit: u32,
    /// Offer and accept window scaling (RFC 7323).
    pub window_scaling: bool,
    /// Offer and accept timestamps (RFC 7323).
    pub timestamps: bool,
    /// Offer and accept SACK-permitted (RFC 2018).
    pub sack: bool,
    /// Verify IPv4 and TCP checksums of received frames.
    pub verify_checksums: bool,
    /// Capacity of the queue of control frames (ACKs, RSTs, SYN-ACKs, ARP) awaiting transmission.
    pub control_frame_queue: usize,
    /// Entries in the ARP neighbor cache.
    pub neighbor_cache: usize,
    /// Lowest and highest ephemeral port for active opens.
    pub ephemeral_ports: (u16, u16),
    /// This stack is one flow group of a multi-core engine (docs/multicore.md): its active
    /// opens take only local ports whose flow hashes to its group, so that every frame of
    /// the connection is steered back to it. None: the only group.
    pub flow_group: Option<FlowGroupMember>,
    /// Largest TCP payload of one large segment handed to a device with segmentation offload
    /// (TSO/GSO) by [`crate::Stack::poll_transmit_offload`]; 0 turns large segments off.
    pub tso_max_payload: u32,
    /// Leave the TCP checksum of segments from [`crate::Stack::poll_transmit_offload`] partial
    /// (the pseudo-header sum only), for the device or the receiver's offload to complete.
    pub tx_checksum_offload: bool,
    /// Congestion-control algorithm of new connections (per connection:
    /// [`crate::Stack::set_congestion_control`]).
    pub congestion_control: Algorithm,
    /// Negotiate ECN (RFC 3168) when the connection's algorithm wants it (DCTCP).
    pub ecn: bool,
    /// Shortest interval between two congestion-control iterations of a connection (the
    /// interval is otherwise one smoothed RTT).
    pub cc_interval_min: Duration,
    /// Slots of the flow scheduler's timing wheel (Carousel, flextoe.txt 3.4): a power of
    /// two. With the granularity it sets the horizon; a rate-limited connection due later
    /// waits in the last slot and is re-placed from there.
    pub sched_wheel_slots: usize,
    /// Length of one timing-wheel slot: the precision of rate enforcement (a connection is
    /// released at the start of the slot its send time falls in).
    pub sched_granularity: Duration,
    /// Most connections the teardown stage holds at once (acceltcp.txt 4.2: closes over
    /// it take the normal path); 0 turns teardown offload off.
    pub teardown_flows: usize,
    /// Most unacknowledged bytes the teardown stage holds, over all its flows.
    pub teardown_tail_bytes: usize,
    /// Retransmissions of an offloaded close's data and FIN before it gives up (RST).
    pub teardown_retries: u8,
    /// Ticks of the teardown stage's timer bitmap wheel (a power of two, 64..=65536).
    pub teardown_wheel_slots: usize,
    /// Length of one tick of that wheel: the precision of the stage's timeouts.
    pub teardown_tick: Duration,
    /// Added to the core's clock for initial sequence numbers and timestamps only: a
    /// wall-clock reading when the engine starts, so that a restarted engine's ISNs and
    /// TSvals continue above the last run's (RFC 6528's M, RFC 7323 5.4) and a peer still
    /// in TIME-WAIT with an old incarnation takes the new SYN (RFC 6191). Zero in tests and
    /// the simulator.
    pub clock_epoch: Duration,
    /// Most connection pairs spliced at once (acceltcp.txt 4.3; pending ones included); 0
    /// turns splicing off.
    pub splice_max: usize,
    /// Frames the splice stage may hold rewritten and not yet transmitted (each a frame of
    /// the MTU); over it relayed frames are dropped and counted.
    pub splice_relay_frames: usize,
}

/// The most rows [`Config::cold_pool_rows`] may ask for: a row's handle is 2 bytes, one
/// value of which means none.
pub const COLD_POOL_MAX: usize = 65_535;

/// The largest TCP payload one IPv4 packet can carry with a full-size TCP header.
pub const TSO_MAX_PAYLOAD_LIMIT: u32 = 65_535 - 20 - 60;

impl Config {
    /// A configuration with defaults for the given addresses.
    pub fn new(mac: EthernetAddress, ip: Ipv4Addr) -> Self {
        Config {
            mac,
            ip,
            seed: 0x5eed_5eed,
            max_connections: 4096,
            max_listeners: 64,
            syn_backlog: 128,
            max_accept_queue: 1024,
            rx_buffer: 256 * 1024,
            rx_buffer_initial: 64 * 1024,
            rx_memory: 256 << 20,
            tx_buffer: 256 * 1024,
            tx_buffer_initial: 64 * 1024,
            tx_memory: 256 << 20,
            tcp_mem: None,
            max_memory_groups: 256,
            mtu: 1500,
            ooo_intervals: 1,
            sack_scoreboard: 8,
            cold_pool_rows: None,
            recovery: Recovery::Sack,
            ack_policy: AckPolicy::EverySegment,
            nagle: true,
            rto_initial: Duration::from_secs(1),
            rto_min: Duration::from_millis(5),
            rto_max: Duration::from_secs(60),
            rack_tlp: true,
            tlp_pto_min: Duration::from_micros(10),
            tlp_max_ack_delay: None,
            rack_marks: 8,
            user_timeout: Duration::from_secs(120),
            syn_retries: 6,
            time_wait: Duration::from_secs(60),
            challenge_ack_limit: 10,
            window_scaling: true,
            timestamps: true,
            sack: true,
            verify_checksums: true,
            control_frame_queue: 1024,
            neighbor_cache: 256,
            ephemeral_ports: (32768, 60999),
            flow_group: None,
            tso_max_payload: 0,
            tx_checksum_offload: false,
            congestion_control: Algorithm::Dctcp,
            ecn: true,
            cc_interval_min: Duration::from_micros(10),
            // 4096 x 1 us: a 4 ms horizon, past the gap between 1500-byte frames down to
            // 3 Mbit/s; a 1 us slot is 8 % of a frame's time at 10 Gbit/s.
            sched_wheel_slots: 4096,
            sched_granularity: Duration::from_micros(1),
            teardown_flows: 16384,
            teardown_tail_bytes: 16 << 20,
            // Linux's tcp_orphan_retries default (8 when the sysctl is 0).
            teardown_retries: 8,
            // 256 x 1 ms: a 256 ms horizon, longer timeouts wait their round; N bits per
            // flow is 32 bytes.
            teardown_wheel_slots: 256,
            teardown_tick: Duration::from_millis(1),
            clock_epoch: Duration::ZERO,
            splice_max: 65536,
            splice_relay_frames: 8192,
        }
    }

    /// Checks the configuration, returning what is wrong with it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_connections == 0 || self.max_connections > (1 << 24) {
            return Err(ConfigError::Range("max_connections", "1..=16777216"));
        }
        if self.max_listeners == 0 || self.max_listeners > 65536 {
            return Err(ConfigError::Range("max_listeners", "1..=65536"));
        }
        if !(576..=9216).contains(&self.mtu) {
            return Err(ConfigError::Range("mtu", "576..=9216"));
        }
        for (name, size) in [("rx_buffer", self.rx_buffer), ("tx_buffer", self.tx_buffer)] {
            if !(4096..=(1 << 30)).contains(&size) {
                return Err(ConfigError::Range(name, "4096..=1073741824"));
            }
        }
        if self.rx_memory < 4096 {
            return Err(ConfigError::Range("rx_memory", ">= 4096"));
        }
        if self.rx_buffer_initial < 4096 {
            return Err(ConfigError::Range("rx_buffer_initial", ">= 4096"));
        }
        if self.tx_memory < 4096 {
            return Err(ConfigError::Range("tx_memory", ">= 4096"));
        }
        if self.tx_buffer_initial < 4096 {
            return Err(ConfigError::Range("tx_buffer_initial", ">= 4096"));
        }
        if self.max_memory_groups == 0 || self.max_memory_groups > 65536 {
            return Err(ConfigError::Range("max_memory_groups", "1..=65536"));
        }
        if let Some(m) = self.tcp_mem {
            if m.low == 0 || m.low > m.pressure || m.pressure > m.high {
                return Err(ConfigError::Range("tcp_mem", "0 < low <= pressure <= high"));
            }
        }
        if self.ooo_intervals > 64 {
            return Err(ConfigError::Range("ooo_intervals", "0..=64"));
        }
        if self.cold_pool_rows.is_some_and(|n| n > COLD_POOL_MAX) {
            return Err(ConfigError::Range("cold_pool_rows", "0..=65535"));
        }
        if self.sack_scoreboard > 64
            || (self.recovery == Recovery::Sack && self.sack_scoreboard == 0)
        {
            return Err(ConfigError::Range(
                "sack_scoreboard",
                "1..=64 (0 only with Recovery::GoBackN)",
            ));
        }
        if let AckPolicy::Delayed { segments, timeout } = self.ack_policy {
            // RFC 9293 MUST-40: an ACK is not delayed by more than 0.5 s.
            if segments == 0 || timeout >= Duration::from_millis(500) || timeout.is_zero() {
                return Err(ConfigError::Range(
                    "ack_policy",
                    "segments >= 1, 0 < timeout < 500ms",
                ));
            }
        }
        if self.rto_min.is_zero() || self.rto_min > self.rto_max || self.rto_initial > self.rto_max
        {
            return Err(ConfigError::Range(
                "rto_min/rto_initial/rto_max",
                "0 < min <= initial <= max",
            ));
        }
        if self.rack_marks > 64 {
            return Err(ConfigError::Range("rack_marks", "0..=64"));
        }
        let max_ack_delay = self.tlp_max_ack_delay.unwrap_or_default();
        if self.tlp_pto_min > self.rto_max || max_ack_delay > self.rto_max {
            // A probe later than any RTO never goes.
            return Err(ConfigError::Range(
                "tlp_pto_min/tlp_max_ack_delay",
                "<= rto_max",
            ));
        }
        if self.cc_interval_min.is_zero() || self.cc_interval_min > Duration::from_secs(1) {
            // Zero would let an iteration re-arm itself at the same instant forever.
            return Err(ConfigError::Range("cc_interval_min", "0 < interval <= 1s"));
        }
        if !self.sched_wheel_slots.is_power_of_two()
            || !(2..=1 << 20).contains(&self.sched_wheel_slots)
        {
            return Err(ConfigError::Range(
                "sched_wheel_slots",
                "a power of two in 2..=1048576",
            ));
        }
        if self.sched_granularity.is_zero() || self.sched_granularity > Duration::from_secs(1) {
            return Err(ConfigError::Range(
                "sched_granularity",
                "0 < granularity <= 1s",
            ));
        }
        if self.teardown_flows > 1 << 24 || self.teardown_tail_bytes > 1 << 32 {
            return Err(ConfigError::Range(
                "teardown_flows/teardown_tail_bytes",
                "at most 16777216 flows and 4 GiB",
            ));
        }
        if !self.teardown_wheel_slots.is_power_of_two()
            || !(64..=1 << 16).contains(&self.teardown_wheel_slots)
        {
            return Err(ConfigError::Range(
                "teardown_wheel_slots",
                "a power of two in 64..=65536",
            ));
        }
        if self.splice_max > 1 << 24 || !(1..=1 << 16).contains(&self.splice_relay_frames) {
            return Err(ConfigError::Range(
                "splice_max/splice_relay_frames",
                "splice_max <= 16777216, 1 <= splice_relay_frames <= 65536",
            ));
        }
        if self.teardown_tick.is_zero() || self.teardown_tick > Duration::from_secs(1) {
            return Err(ConfigError::Range("teardown_tick", "0 < tick <= 1s"));
        }
        if self.challenge_ack_limit == 0 {
            // Zero-window probes are answered through this limit; 0 would deadlock a sender
            // whose window update was lost.
            return Err(ConfigError::Range("challenge_ack_limit", ">= 1"));
        }
        // Both are allocated up front (house rule 1: bounded, never a capacity overflow).
        let queue_range = 1..=(1 << 20);
        if !queue_range.contains(&self.control_frame_queue)
            || !queue_range.contains(&self.neighbor_cache)
        {
            return Err(ConfigError::Range(
                "control_frame_queue/neighbor_cache",
                "1..=1048576",
            ));
        }
        if self.ephemeral_ports.0 == 0 || self.ephemeral_ports.0 > self.ephemeral_ports.1 {
            return Err(ConfigError::Range("ephemeral_ports", "1 <= low <= high"));
        }
        if let Some(m) = self.flow_group {
            if m.groups.count == 0 || m.index >= m.groups.count {
                return Err(ConfigError::Range(
                    "flow_group",
                    "index < count, count >= 1",
                ));
            }
        }
        if self.tso_max_payload != 0
            && !(u32::from(self.local_mss())..=TSO_MAX_PAYLOAD_LIMIT)
                .contains(&self.tso_max_payload)
        {
            return Err(ConfigError::Range(
                "tso_max_payload",
                "0 (off) or from the MSS to 65455",
            ));
        }
        if self.max_accept_queue == 0 {
            return Err(ConfigError::Range("max_accept_queue", ">= 1"));
        }
        Ok(())
    }

    /// Rows of the cold pool: `cold_pool_rows`, or an eighth of `max_connections`, at
    /// least 256; never more than `max_connections` (one row per connection at most) nor
    /// 65535 (the handle is 2 bytes).
    pub fn cold_pool(&self) -> usize {
        self.cold_pool_rows
            .unwrap_or((self.max_connections / 8).max(256))
            .min(self.max_connections)
            .min(COLD_POOL_MAX)
    }

    /// Scoreboard ranges allocated per connection: none for go-back-N.
    pub fn scoreboard_ranges(&self) -> usize {
        match self.recovery {
            Recovery::Sack => self.sack_scoreboard,
            Recovery::GoBackN => 0,
        }
    }

    /// A new connection's receive-buffer size: `rx_buffer_initial`, at most `rx_buffer`.
    pub fn rx_initial(&self) -> usize {
        self.rx_buffer_initial.min(self.rx_buffer)
    }

    /// A new connection's send-buffer size: `tx_buffer_initial`, at most `tx_buffer`.
    pub fn tx_initial(&self) -> usize {
        self.tx_buffer_initial.min(self.tx_buffer)
    }

    /// The thresholds on buffered bytes: `tcp_mem`, or by default Linux's proportions
    /// (tcp_mem is 3/4, 1 and 3/2 of a base: low half of high, pressure two thirds) with
    /// high the memory the rings may grow into, `rx_memory + tx_memory`.
    pub fn memory_limits(&self) -> MemoryLimits {
        self.tcp_mem.unwrap_or_else(|| {
            let high = self.rx_memory.saturating_add(self.tx_memory);
            MemoryLimits {
                low: high / 2,
                pressure: high / 3 * 2,
                high,
            }
        })
    }

    /// RACK's transmit marks per connection: `rack_marks` with RACK-TLP and SACK recovery
    /// (RACK needs SACK blocks to see data delivered beyond a hole), else 0.
    pub fn rack_marks(&self) -> usize {
        if self.rack_tlp && self.recovery == Recovery::Sack {
            self.rack_marks
        } else {
            0
        }
    }

    /// The delayed-ACK time the tail loss probe allows for with one segment in flight
    /// (RFC 8985 7.2 WCDelAckT): `tlp_max_ack_delay`, or this host's own.
    pub fn tlp_ack_delay(&self) -> Duration {
        self.tlp_max_ack_delay.unwrap_or(match self.ack_policy {
            AckPolicy::EverySegment => Duration::ZERO,
            AckPolicy::Delayed { timeout, .. } => timeout,
        })
    }

    /// The MSS this host announces: MTU less IPv4 and TCP headers.
    pub fn local_mss(&self) -> u16 {
        self.mtu - 40
    }
}

/// Thresholds on the bytes all connections buffer, as Linux's tcp_mem (low, pressure,
/// high), in bytes rather than pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryLimits {
    /// Pressure ends when the buffered bytes fall below this.
    pub low: usize,
    /// Pressure begins when the buffered bytes rise above this.
    pub pressure: usize,
    /// Above this, new connections and new out-of-order data are refused.
    pub high: usize,
}

/// A configuration value out of range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// The named field must lie within the given range.
    Range(&'static str, &'static str),
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ConfigError::Range(field, range) => write!(f, "config: {field} must be in {range}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Which flow group of a multi-core engine a stack is (see [`Config::flow_group`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowGroupMember {
    /// How flows are spread over the groups (the engine's dispatcher uses the same).
    pub groups: sluice_wire::flow_group::FlowGroups,
    /// This stack's group, below `groups.count`.
    pub index: u16,
}
