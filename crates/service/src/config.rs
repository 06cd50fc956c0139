//! How the service runs: the socket, every application's region layout, what applications
//! are told about the engine, and the bounds of each loop iteration.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use sluice_shm::control::EngineInfo;
use sluice_shm::Layout;

use crate::access::AccessPolicy;
use crate::error::ServiceError;
use crate::port_ranges::{PortRange, PortRanges};
use crate::quota::Quotas;
use crate::verbs::VerbsLimits;

/// How the service runs.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    /// The control socket's path.
    pub socket: PathBuf,
    /// Every application's region layout.
    pub layout: Layout,
    /// What applications are told about the engine (its address is taken from the core).
    pub engine: EngineInfo,
    /// Most applications attached at once (each also costs mappings: the map budget
    /// refuses an attach that would cross `vm.max_map_count` before this does).
    pub max_apps: usize,
    /// Most commands taken from one context per loop iteration.
    pub command_batch: u32,
    /// How often a busy engine looks at the control plane (attaches, contexts, hang-ups).
    pub control_interval: Duration,
    /// Log attaches and detaches to stderr.
    pub log: bool,
    /// How long the connections an application closed before it went away may take to
    /// drain (their peers reading the rest); what remains after that is reset.
    pub orphan_linger: Duration,
    /// Serve verbs (docs/verbs.md): an RDMA transport beside the TCP core.
    pub verbs: bool,
    /// The RDMA device's limits.
    pub verbs_limits: VerbsLimits,
    /// Serve MTP messages (docs/mtp.md): an MTP transport beside the TCP core.
    pub mtp: bool,
    /// Who may attach (and the socket file's group and mode).
    pub access: AccessPolicy,
    /// Binding a local port below this needs uid 0 or CAP_NET_BIND_SERVICE (Linux's
    /// net.ipv4.ip_unprivileged_port_start).
    pub unprivileged_port_start: u16,
    /// Ports reserved for one uid each (`sluice engine --port-range UID:LO-HI`): only that
    /// uid and uid 0 may bind them (EACCES otherwise); ranges may not overlap.
    pub port_ranges: Vec<PortRange>,
    /// The engine's budget of memory mappings; None: `vm.max_map_count` read at start, less
    /// headroom (an attach that would cross it is refused for that application only).
    pub map_budget: Option<usize>,
    /// Quotas per application and per uid (README "Security model").
    pub quotas: Quotas,
    /// The most bytes the connections of one uid may buffer in the core (unread, out of
    /// order, unacknowledged) before its SYNs and new buffers are refused, its memory group's
    /// hard limit (src/memory_groups.rs); None: half the core's global hard limit, so no
    /// single uid reaches it; 0: no per-uid limit.
    pub buffered_bytes_per_uid: Option<u64>,
    /// Hand installed splices' common case to the eBPF splice module at ingress (`sluice
    /// engine --splice ebpf`; crates/ebpf/programs/splice.c) instead of the core's splice
    /// stage, which keeps the rest (SYN, FIN, RST, SACK blocks, the close).
    pub splice_ebpf: bool,
    /// Whether the engine hands the service its hook points (`App::control_hooks`): the
    /// single-core engine does; the multi-core one does not, so capture sessions and
    /// module requests are refused with a reason.
    pub hook_points: bool,
    /// How sockets' bytes reach their frames: header-only (the default: the socket's TX
    /// ring is the connection's send buffer, each segment's payload gathered from it into
    /// the frame) or staging (copied into the core's send ring first; kept for comparison).
    pub tx_path: sluice_tcp::TxPath,
    /// Flow-group parts the service runs as (`sluice engine --cores N --layout
    /// flow-groups`; `Service::flow_groups`): part k serves queue pair k of every context
    /// and the slots `s % N == k`. 1: one service, as on one core.
    pub flow_groups: u32,
}

impl ServiceConfig {
    /// Defaults for a socket at `socket` and an engine at `ip/prefix_len`.
    pub fn new(socket: impl Into<PathBuf>, ip: Ipv4Addr, prefix_len: u8) -> ServiceConfig {
        ServiceConfig {
            socket: socket.into(),
            layout: Layout::default(),
            engine: EngineInfo {
                ip,
                prefix_len,
                gateway: None,
                app_idle_us: 10_000,
            },
            max_apps: 1024,
            command_batch: 64,
            control_interval: Duration::from_millis(1),
            log: false,
            orphan_linger: Duration::from_secs(60),
            verbs: true,
            verbs_limits: VerbsLimits::default(),
            mtp: true,
            access: AccessPolicy::default(),
            unprivileged_port_start: 1024,
            map_budget: None,
            port_ranges: Vec::new(),
            quotas: Quotas::default(),
            buffered_bytes_per_uid: None,
            splice_ebpf: false,
            hook_points: true,
            tx_path: sluice_tcp::TxPath::HeaderOnly,
            flow_groups: 1,
        }
    }

    /// Checks every value against its bounds.
    pub fn validate(&self) -> Result<(), ServiceError> {
        self.layout
            .validate()
            .map_err(|e| ServiceError::Config(e.to_string()))?;
        if self.max_apps == 0 || self.max_apps > 4096 {
            return Err(ServiceError::Config(format!(
                "max_apps {} not in 1..=4096",
                self.max_apps
            )));
        }
        // Each part announces its sleep in its own bit of the regions' 32-bit word.
        if self.flow_groups > 32 {
            return Err(ServiceError::Config(format!(
                "flow_groups {} not in 1..=32",
                self.flow_groups
            )));
        }
        if self.command_batch == 0 {
            return Err(ServiceError::Config(
                "command_batch must be at least 1".into(),
            ));
        }
        for (name, value) in self.quotas.named() {
            if value == 0 {
                return Err(ServiceError::Config(format!(
                    "quota {name} is 0 (at least 1)"
                )));
            }
        }
        if self.engine.prefix_len > 32 {
            return Err(ServiceError::Config(format!(
                "prefix length {} is over 32",
                self.engine.prefix_len
            )));
        }
        PortRanges::new(&self.port_ranges).map_err(|e| ServiceError::Config(e.to_string()))?;
        Ok(())
    }
}
