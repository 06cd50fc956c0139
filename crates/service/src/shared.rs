//! The state every part of the service reaches: who owns which port and connection, the
//! counters, the pending lists, and the iteration's time. It sits below every module that
//! acts on applications, and imports none of them.

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, MutexGuard};

use sluice_tcp::Instant;

use crate::counters::Counters;
use crate::links::Links;
use crate::memory_groups::UidGroups;
use crate::owners::{ConnMap, Owner, Ports, Splices};
use crate::quota::{Books, Quotas};
use crate::replicas::Replicas;
use crate::traffic_classes::TrafficClasses;
use crate::wake_set::WakeSet;

/// State every part of the service reaches: who owns which port and connection, the
/// counters, the pending lists.
pub(crate) struct Shared {
    /// Core connections to (application, slot).
    pub conns: ConnMap,
    /// Splices asked for by applications, to their owners.
    pub splices: Splices,
    /// Bound ports across applications.
    pub ports: Ports,
    /// Counters.
    pub counters: Counters,
    /// Slots whose RX ring could not take everything (data or connections) the core holds.
    pub rx_pending: Vec<Owner>,
    /// Slots whose TX ring holds bytes the core could not take yet.
    pub tx_pending: Vec<Owner>,
    /// The engine's address.
    pub ip: Ipv4Addr,
    /// Binding a port below this needs uid 0 or CAP_NET_BIND_SERVICE.
    pub unprivileged_port_start: u16,
    /// The quotas per application and per uid.
    pub quotas: Quotas,
    /// What every uid holds, against the quotas.
    pub books: Books,
    /// Each uid's memory group in the core (its limit on buffered bytes).
    pub memory_groups: UidGroups,
    /// The current iteration's time.
    pub now: Instant,
    /// Whether this iteration did anything for an application.
    pub busy: bool,
    /// QP doorbells rung this iteration: (application, qpn), run after the commands.
    pub doorbells: Vec<(u32, u32)>,
    /// MTP doorbells rung this iteration: (application, endpoint), run after the commands.
    pub mtp_doorbells: Vec<(u32, u32)>,
    /// The engine loop's and the device's counters as the engine last handed them over
    /// (`sluice ctl counters`).
    pub engine_stats: Option<(sluice_engine::RunStats, sluice_engine::DeviceStats)>,
    /// New connections on their way to their traffic class's rate.
    pub classes: TrafficClasses,
    /// Header-only or staging TX for sockets (ServiceConfig::tx_path; data.rs).
    pub tx_path: sluice_tcp::TxPath,
    /// This part's links to the service's other flow-group parts (one part: none).
    pub links: Links,
    /// This part's replicas of other parts' listeners.
    pub replicas: Replicas,
    /// Held from a quota check to the charge it admits (Open, Listen, Connect, accept),
    /// so that parts checking at once cannot both take the last unit. Set-up only.
    pub setup: Arc<Mutex<()>>,
    /// A Bind or Listen refused for a port the same application holds on another part may
    /// wait for that part (src/commands.rs `DEFER_LIMIT`): set while it may.
    pub may_defer: bool,
    /// Set by a command that waits: it stays in its queue and runs again next iteration.
    pub deferred: bool,
    /// What part k > 0 of the service in flow groups sleeps on (part 0: its control epoll).
    pub wake_set: Option<WakeSet>,
}

/// Holds `setup` (whoever held it last left nothing half done: it guards no data).
pub(crate) fn hold(setup: &Mutex<()>) -> MutexGuard<'_, ()> {
    setup.lock().unwrap_or_else(|e| e.into_inner())
}
