//! Opening a device backend for the engine: by name, with a clear error when it cannot
//! start, optionally inside a namespace whose [`Site`] (the lab's, in `sluice-lab`) prepares
//! the wire around the device.

use std::net::Ipv4Addr;
use std::time::Duration;

use sluice_device::{
    AfPacket, AfPacketConfig, Device, DeviceError, ImpairConfig, Impaired, Tap, TapConfig, XdpMode,
};
#[cfg(feature = "af_xdp")]
use sluice_device::{AfXdp, AfXdpConfig};
use sluice_tcp::{AckPolicy, Algorithm, Config, ConfigError, MemoryLimits, Recovery, Stack};
use sluice_wire::EthernetAddress;

use crate::runtime::{Engine, EngineError};

/// Which device backend to run over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// AF_PACKET socket bound to the interface (recvmmsg/sendmmsg batches).
    AfPacket,
    /// A TAP device with a virtio-net header (bridged to the interface in the lab).
    Tap,
    /// AF_XDP socket on queue 0 of the interface, libxdp's default XDP program attached
    /// (copy mode on veth; [`EngineOptions::xdp_mode`] picks DRV or SKB).
    AfXdp,
    /// The simulator's wire: simulated peers in virtual time, no root needed; built by
    /// `sluice_sim::sim_wire::SimWire` together with its peers rather than by [`open`].
    Sim,
}

impl std::str::FromStr for Backend {
    type Err = ParseBackendError;
    fn from_str(s: &str) -> Result<Self, ParseBackendError> {
        match s {
            "af_packet" => Ok(Backend::AfPacket),
            "tap" => Ok(Backend::Tap),
            "af_xdp" => Ok(Backend::AfXdp),
            "sim" => Ok(Backend::Sim),
            other => Err(ParseBackendError {
                given: other.to_owned(),
            }),
        }
    }
}

/// A backend name that names no [`Backend`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseBackendError {
    /// The name given.
    pub given: String,
}

impl std::fmt::Display for ParseBackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unknown backend {:?} (af_xdp, af_packet, tap, sim)",
            self.given
        )
    }
}

impl std::error::Error for ParseBackendError {}

/// Where and how the engine runs.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// Interface to attach to.
    pub iface: String,
    /// The engine's address (the interface has no kernel address).
    pub ip: Ipv4Addr,
    /// Prefix length of the engine's subnet.
    pub prefix: u8,
    /// Device backend.
    pub backend: Backend,
    /// Enter this network namespace first (the lab's engine namespace).
    pub netns: Option<String>,
    /// Wrap the device in seeded fault injection (loss, reordering) on the engine's side.
    pub impair: Option<ImpairConfig>,
    /// Where the AF_XDP backend's XDP program runs (DRV by default; ignored by others).
    pub xdp_mode: XdpMode,
    /// Congestion control, ECN and loss recovery of the engine's core.
    pub transport: Transport,
    /// The TAP device's name and MAC, and what the site does around the device inside
    /// `netns` (the lab's: `sluice_lab::presets`).
    pub site: Site,
}

/// What the site around the engine gives and does while the device opens: the TAP backend's
/// device name and MAC, and, when the engine runs inside the site's namespace (`netns` set),
/// bridging the TAP once it exists and preparing the wire for generic XDP. The engine names
/// no site itself; the lab's is `sluice_lab::presets::SITE`.
#[derive(Clone, Copy, Debug)]
pub struct Site {
    /// Name of the TAP device the TAP backend opens.
    pub tap_iface: &'static str,
    /// The engine's MAC behind the TAP.
    pub tap_mac: EthernetAddress,
    /// Joins the open TAP (by name) to the site's wire.
    pub attach_tap: Option<AttachTap>,
    /// Readies the wire for AF_XDP in generic (SKB) mode before the socket binds.
    pub prepare_generic_xdp: Option<fn() -> Result<(), SiteError>>,
}

/// Why a site's step failed, as the site reports it (the lab: a `LabError`).
pub type SiteError = Box<dyn std::error::Error + Send + Sync>;

/// A site's step that joins the TAP device, by name, to its wire.
pub type AttachTap = fn(&str) -> Result<(), SiteError>;

/// The transport choices an operator makes for the engine's core: the default congestion
/// control of new connections (each may choose its own through the API), ECN, loss
/// recovery, out-of-order intervals and the global limit on buffered bytes. Defaults are
/// the core's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transport {
    /// Congestion-control algorithm of new connections.
    pub congestion_control: Algorithm,
    /// Negotiate ECN when the algorithm wants it.
    pub ecn: bool,
    /// SACK recovery (RFC 6675) or the papers' go-back-N baseline.
    pub recovery: Recovery,
    /// Out-of-order intervals tracked per connection (None: the core's default).
    pub ooo_intervals: Option<usize>,
    /// Thresholds on the bytes all connections buffer, as Linux's tcp_mem (None: the
    /// core's, derived from its ring memory; `Config::memory_limits`).
    pub tcp_mem: Option<MemoryLimits>,
    /// Half-open connections per listener before SYNs are answered with cookies (None: the
    /// core's; 0: every SYN gets a cookie and no state until the handshake completes, the
    /// setup offload of acceltcp.txt 4.1).
    pub syn_backlog: Option<usize>,
}

impl Default for Transport {
    fn default() -> Self {
        let c = Config::new(EthernetAddress::default(), Ipv4Addr::UNSPECIFIED);
        Transport {
            congestion_control: c.congestion_control,
            ecn: c.ecn,
            recovery: c.recovery,
            ooo_intervals: None,
            tcp_mem: None,
            syn_backlog: None,
        }
    }
}

impl Transport {
    /// Writes these choices into a core configuration.
    pub fn apply(&self, config: &mut Config) {
        config.congestion_control = self.congestion_control;
        config.ecn = self.ecn;
        config.recovery = self.recovery;
        if let Some(n) = self.ooo_intervals {
            config.ooo_intervals = n;
        }
        if let Some(limits) = self.tcp_mem {
            config.tcp_mem = Some(limits);
        }
        if let Some(n) = self.syn_backlog {
            config.syn_backlog = n;
        }
    }

    /// Checks the choices against the core's rules (as the engine's configuration would
    /// have them), so a bad flag is refused before any device is opened.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut c = core_config(EthernetAddress::default(), Ipv4Addr::new(10, 0, 0, 1), 1500);
        self.apply(&mut c);
        c.validate()
    }
}

impl EngineOptions {
    /// The same options with engine-side fault injection: each direction drops with
    /// probability `loss` and reorders with probability `reorder`, seeded.
    pub fn impaired(mut self, seed: u64, loss: f64, reorder: f64) -> Self {
        self.impair = Some(ImpairConfig::symmetric(seed, loss, reorder));
        self
    }
}

/// A seed fixed for this boot (from the kernel's boot id, else the time) and the time
/// since boot (from /proc/uptime, else zero).
fn boot_identity() -> (u64, Duration) {
    use std::hash::{Hash, Hasher};
    let seed = match std::fs::read_to_string("/proc/sys/kernel/random/boot_id") {
        Ok(id) => {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            id.trim().hash(&mut h);
            h.finish()
        }
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x5eed, |d| d.as_nanos() as u64),
    };
    let since_boot = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(Duration::ZERO, Duration::from_secs_f64);
    (seed, since_boot)
}

/// The core's configuration for a real network: data-center timers, roomy buffers, and
/// checksums verified (devices complete partial ones first).
pub fn core_config(mac: EthernetAddress, ip: Ipv4Addr, mtu: u16) -> Config {
    let mut c = Config::new(mac, ip);
    c.mtu = mtu;
    // As the kernel's: secrets fixed for the boot, and ISN and timestamp clocks that count
    // from it, so that an engine started again continues above what the last one sent (a
    // peer still in TIME-WAIT with its connection takes the new SYN, RFC 6191), while the
    // next boot's are new.
    let (seed, since_boot) = boot_identity();
    c.seed = seed;
    c.clock_epoch = since_boot;
    c.rto_min = Duration::from_millis(5);
    // Room for the connections of a busy host; the tables are reserved, and filled only
    // as far as connections are open at once.
    c.max_connections = 1 << 16;
    // Listeners are shared by every application of a service (issue 23): a host's worth,
    // not the core's default 64 that one application could take.
    c.max_listeners = 4096;
    // What buffers may grow to. They start at 64 KiB (Config::rx_buffer_initial and
    // tx_buffer_initial) and grow with need within rx_memory/tx_memory.
    c.rx_buffer = 4 << 20;
    c.tx_buffer = 4 << 20;
    c.time_wait = Duration::from_secs(5);
    // Peers on a real network include Linux senders with windows of megabytes: with one
    // tracked interval, a second loss in a window throws away everything after it (the
    // lab's linux->engine goodput at 2 % loss: 6 Mbit/s with 1, 261 with 8). At 5 % loss
    // 8 were full too (75.8 out-of-order segments dropped per MB, so the Linux sender
    // retransmitted three times what it does to Linux): the core's most, 64 (512 B a
    // connection), as Linux's out-of-order queue is bounded only by the buffer.
    c.ooo_intervals = 64;
    // The sender's side of the same: a window of a few hundred segments at 5 % loss has a
    // dozen holes, and a scoreboard of 8 ranges forgets SACKed data and resends it (BBR in
    // the lab at 5 % loss: 15.7 scoreboard overflows and 6 D-SACKs per MB with 8).
    c.sack_scoreboard = 64;
    // Delayed ACKs (every second segment, or after 100 µs) let a reply carry the ACK of its
    // request: one frame per RPC instead of two, as Linux does with its delayed ACK.
    c.ack_policy = AckPolicy::Delayed {
        segments: 2,
        timeout: Duration::from_micros(100),
    };
    c
}

/// Turns on large segments and partial checksums in the core when the device offloads them.
pub fn offload_config(config: &mut Config, device: &dyn Device) {
    let headers = 14 + 20 + 60;
    if device.max_tso_frame() > device.max_frame() {
        let room = device.max_tso_frame().saturating_sub(headers) as u32;
        config.tso_max_payload = room.min(sluice_tcp::config::TSO_MAX_PAYLOAD_LIMIT);
        config.tx_checksum_offload = true;
    }
}

/// Opens the backend (entering the namespace on this thread first) and builds the engine.
pub fn open(opts: &EngineOptions) -> Result<Engine<Box<dyn Device>>, EngineError> {
    let device: Box<dyn Device> = open_device(opts, false)?;
    let mtu = (device.max_frame().saturating_sub(14)).clamp(576, 9000) as u16;
    let mut config = core_config(device.mac(), opts.ip, mtu.min(1500));
    opts.transport.apply(&mut config);
    offload_config(&mut config, device.as_ref());
    let stack = Stack::new(config).map_err(|e| EngineError::App(e.to_string()))?;
    Ok(Engine::new(stack, device))
}

/// Opens the backend for the multi-core engine (`crate::multicore::MultiEngine`), whose
/// batches take wire-sized received frames only: in a site's namespace the peer told to
/// segment as for generic XDP; AF_PACKET with checksum and segmentation offload for what
/// the engine sends (docs/multicore.md, "Offloads"). Returns the device (it
/// moves to the NIC role's thread) and the core configuration each flow group starts from.
pub fn open_multi(opts: &EngineOptions) -> Result<(Box<dyn Device + Send>, Config), EngineError> {
    let device = open_device(opts, true)?;
    let mtu = (device.max_frame().saturating_sub(14)).clamp(576, 1500) as u16;
    let mut config = core_config(device.mac(), opts.ip, mtu);
    opts.transport.apply(&mut config);
    Ok((device, config))
}

/// Opens the device `opts` names; `wire_sized` asks for frames of at most the MTU both ways.
fn open_device(
    opts: &EngineOptions,
    wire_sized: bool,
) -> Result<Box<dyn Device + Send>, EngineError> {
    if let Some(ns) = &opts.netns {
        sluice_device::netns::enter(ns)?;
    }
    if wire_sized && opts.backend == Backend::AfPacket && opts.netns.is_some() {
        // A Linux peer's 64 KB GSO frames would not fit the multi-core engine's batches.
        if let Some(prepare) = opts.site.prepare_generic_xdp {
            prepare().map_err(|e| {
                EngineError::App(format!(
                    "cannot turn segmentation off towards the engine: {e}"
                ))
            })?;
        }
    }
    let device: Box<dyn Device + Send> = match opts.backend {
        Backend::AfPacket if wire_sized => {
            let config = AfPacketConfig {
                syn_lane: Some(AfPacketConfig::SYN_LANE_BUFFER),
                // Checksum offload both ways, no pass over the payload in software: the
                // NIC role trusts partial checksums on receive (RxChecksum::Partial, as
                // the single engine does), and the post roles leave transmitted ones for
                // the kernel (MultiEngine's device_completes).
                vnet_hdr: true,
                complete_partial: false,
                ..AfPacketConfig::default()
            };
            Box::new(AfPacket::open(&opts.iface, config)?)
        }
        Backend::AfPacket => {
            let config = AfPacketConfig {
                // The core trusts partial checksums (RxChecksum::Partial).
                complete_partial: false,
                // A SYN flood delays and drops only SYNs (sluice_device's syn_lane).
                syn_lane: Some(AfPacketConfig::SYN_LANE_BUFFER),
                ..AfPacketConfig::offload()
            };
            Box::new(AfPacket::open(&opts.iface, config)?)
        },
        Backend::Tap => {
            let tap = Tap::open(
                opts.site.tap_iface,
                TapConfig {
                    mac: opts.site.tap_mac,
                    // The core trusts partial checksums (RxChecksum::Partial).
                    complete_partial: false,
                    tso: TapConfig::default().tso && !wire_sized,
                    ..TapConfig::default()
                },
            )?;
            if let (Some(_), Some(attach)) = (&opts.netns, opts.site.attach_tap) {
                attach(opts.site.tap_iface).map_err(|e| {
                    EngineError::App(format!("cannot bridge the tap to {}: {e}", opts.iface))
                })?;
            }
            Box::new(tap)
        }
        #[cfg(feature = "af_xdp")]
        Backend::AfXdp => {
            if let (Some(_), Some(prepare), XdpMode::Skb) =
                (&opts.netns, opts.site.prepare_generic_xdp, opts.xdp_mode)
            {
                prepare().map_err(|e| {
                    EngineError::App(format!("cannot prepare the lab for generic XDP: {e}"))
                })?;
            }
            let config = AfXdpConfig {
                mode: opts.xdp_mode,
                ..AfXdpConfig::default()
            };
            let xdp = AfXdp::open(&opts.iface, config)?;
            // Which of copy and zero-copy the bind got is only known now: say so once.
            eprintln!(
                "sluice: AF_XDP on {} queue {}, XDP in {} mode, {}",
                opts.iface,
                config.queue_id,
                xdp.mode(),
                if xdp.zero_copy() { "zero-copy" } else { "copy mode" }
            );
            Box::new(xdp)
        }
        #[cfg(not(feature = "af_xdp"))]
        Backend::AfXdp => {
            return Err(EngineError::Device(DeviceError::InvalidConfig(
                "this engine was built without AF_XDP (sluice-engine's af_xdp feature)",
            )))
        }
        Backend::Sim => {
            return Err(EngineError::Device(DeviceError::InvalidConfig(
                "the sim backend has no interface to open: build it with sim_wire::SimWire and its peers",
            )))
        }
    };
    Ok(match opts.impair {
        Some(config) if !(config.rx.is_none() && config.tx.is_none()) => {
            Box::new(Impaired::new(device, config)?)
        }
        _ => device,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CLI prints the refusal as clap's "invalid value" reason: the wording is kept.
    #[test]
    fn backend_names_parse_and_an_unknown_one_is_refused_by_name() {
        for (name, b) in [
            ("af_packet", Backend::AfPacket),
            ("tap", Backend::Tap),
            ("af_xdp", Backend::AfXdp),
            ("sim", Backend::Sim),
        ] {
            assert_eq!(name.parse(), Ok(b));
        }
        let e = "nope".parse::<Backend>().unwrap_err();
        assert_eq!(
            e,
            ParseBackendError {
                given: "nope".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "unknown backend \"nope\" (af_xdp, af_packet, tap, sim)"
        );
    }

    #[test]
    fn transport_choices_reach_the_core_config_and_are_validated() {
        let t = Transport::default();
        let mut c = core_config(EthernetAddress::default(), Ipv4Addr::new(10, 0, 0, 1), 1500);
        let before = (
            c.congestion_control,
            c.ecn,
            c.recovery,
            c.ooo_intervals,
            c.tcp_mem,
        );
        t.apply(&mut c);
        assert_eq!(
            (
                c.congestion_control,
                c.ecn,
                c.recovery,
                c.ooo_intervals,
                c.tcp_mem
            ),
            before,
            "the defaults are the core's"
        );
        let t = Transport {
            congestion_control: Algorithm::Cubic,
            ecn: false,
            recovery: Recovery::GoBackN,
            ooo_intervals: Some(4),
            tcp_mem: Some(MemoryLimits {
                low: 1 << 20,
                pressure: 2 << 20,
                high: 3 << 20,
            }),
            syn_backlog: Some(0),
        };
        t.apply(&mut c);
        assert_eq!(c.syn_backlog, 0);
        assert_eq!(c.congestion_control, Algorithm::Cubic);
        assert!(!c.ecn);
        assert_eq!(c.recovery, Recovery::GoBackN);
        assert_eq!(c.ooo_intervals, 4);
        assert_eq!(c.memory_limits().high, 3 << 20);
        assert_eq!(t.validate(), Ok(()));
        let too_many = Transport {
            ooo_intervals: Some(65),
            ..t
        };
        assert!(matches!(
            too_many.validate(),
            Err(ConfigError::Range("ooo_intervals", _))
        ));
        let upside_down = Transport {
            tcp_mem: Some(MemoryLimits {
                low: 3 << 20,
                pressure: 2 << 20,
                high: 1 << 20,
            }),
            ..t
        };
        assert!(matches!(
            upside_down.validate(),
            Err(ConfigError::Range("tcp_mem", _))
        ));
    }
}
