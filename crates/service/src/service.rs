//! The service as an engine [`App`]: each loop iteration it looks at the control plane (now
//! and then), runs a batch of commands per context, applies the core's events to socket
//! blocks, retries what was pending, and wakes sleeping application threads.

use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use sluice_engine::{
    App, AppStatus, DeviceStats, EngineError, Hooks, RunStats, Transport, Transports,
};
use sluice_shm::control::{send_message, Reply};
use sluice_tcp::{Instant, Stack};

use crate::app::Apps;
use crate::capture::{self, CaptureCounters};
use crate::config::ServiceConfig;
use crate::control::Control;
use crate::cores::Cores;
use crate::counters::Counters;
use crate::error::ServiceError;
use crate::links::{Links, PartMsg};
use crate::mtp::{self, Mtp};
use crate::owners::{ConnMap, Owner, Ports};
use crate::port_ranges::PortRanges;
use crate::shared::Shared;
use crate::slots::SlotState;
use crate::teardown::{self, Release};
use crate::verbs::{self, Verbs};
use crate::wake_set::WakeSet;
use crate::{commands, data, events, handover, modules, parts, splice, wake};

/// The engine side of service mode (docs/service.md), run by the engine as its [`App`].
pub struct Service {
    config: ServiceConfig,
    /// The control socket: part 0's (the service in flow groups: src/parts.rs).
    control: Option<Control>,
    apps: Apps,
    sh: Shared,
    /// The verbs (docs/verbs.md) and MTP (docs/mtp.md), once started, if configured.
    cores: Cores,
    /// The pending list being retried (swapped with the live one: no allocation).
    retry: Vec<Owner>,
    stop: Arc<AtomicBool>,
    published: Arc<Mutex<Counters>>,
    started: bool,
    asleep: bool,
    stopped: bool,
    next_control: Instant,
    /// The control plane ran this iteration: capture sessions start and end with it.
    hooks_due: bool,
    capture: CaptureCounters,
    /// Splices for the eBPF splice module (`--splice ebpf`).
    fast_path: splice::FastPath,
    /// $SLUICE_VERBS_TRACE: print the RDMA and MTP transports' state every 2 s.
    trace_verbs: bool,
    next_trace: Instant,
}

impl Service {
    /// Listens on the configured socket (replacing a stale socket file).
    pub fn new(config: ServiceConfig) -> Result<Service, ServiceError> {
        let mut parts = Self::flow_groups(ServiceConfig {
            flow_groups: 1,
            ..config
        })?;
        parts
            .pop()
            .ok_or_else(|| ServiceError::Config("no part".into()))
    }

    /// The service as `config.flow_groups` parts, part k the application of flow group k
    /// of the multi-core engine (docs/service.md, "Flow groups"): part 0 listens on the
    /// socket and serves the control plane, verbs and MTP; every part serves queue pair k
    /// of each context, the slots `s % N == k` and its own core's connections. The
    /// applications' regions get `queue_cores = N`.
    pub fn flow_groups(mut config: ServiceConfig) -> Result<Vec<Service>, ServiceError> {
        config.layout.queue_cores = config.flow_groups;
        config.validate()?;
        // Read once at start: the kernel's limit is per process and shared by every app.
        config
            .map_budget
            .get_or_insert_with(|| sluice_shm::MapBudget::from_system().budget);
        let mut control = Some(Control::new(&config.socket, &config.access)?);
        let stop = Arc::new(AtomicBool::new(false));
        let ports = Ports::new((49152, 65535));
        let books = crate::quota::Books::default();
        let setup = Arc::new(Mutex::new(()));
        let links = Links::mesh(config.flow_groups)?;
        links
            .into_iter()
            .map(|links| {
                // Each part sleeps on its link doorbell too: part 0 in its control epoll,
                // the others in a wake set of their own (src/wake_set.rs).
                let wake_set = match (links.bell(), control.as_ref()) {
                    (Some(bell), Some(c)) => {
                        c.watch_links(bell)?;
                        None
                    }
                    (Some(bell), None) => Some(WakeSet::new(bell)?),
                    (None, _) => None,
                };
                let mut part = Self::part(config.clone(), control.take(), links);
                part.stop = stop.clone();
                part.sh.ports = ports.clone();
                part.sh.books = books.clone();
                part.sh.setup = setup.clone();
                part.sh.wake_set = wake_set;
                Ok(part)
            })
            .collect()
    }

    /// One part, with its links.
    fn part(config: ServiceConfig, control: Option<Control>, links: Links) -> Service {
        Service {
            control,
            apps: Apps {
                table: Vec::new(),
                next_id: 1,
                orphans: 0,
                held: Vec::new(),
            },
            sh: Shared {
                conns: ConnMap::new(0),
                splices: Default::default(),
                ports: Ports::new((49152, 65535)),
                counters: Counters::default(),
                rx_pending: Vec::new(),
                tx_pending: Vec::new(),
                ip: config.engine.ip,
                unprivileged_port_start: config.unprivileged_port_start,
                quotas: config.quotas,
                books: Default::default(),
                memory_groups: crate::memory_groups::UidGroups::new(config.buffered_bytes_per_uid),
                now: Instant::ZERO,
                busy: false,
                doorbells: Vec::new(),
                mtp_doorbells: Vec::new(),
                engine_stats: None,
                classes: Default::default(),
                tx_path: config.tx_path,
                links,
                replicas: Default::default(),
                setup: Default::default(),
                may_defer: false,
                deferred: false,
                wake_set: None,
            },
            cores: Cores::default(),
            retry: Vec::new(),
            stop: Arc::new(AtomicBool::new(false)),
            published: Arc::new(Mutex::new(Counters::default())),
            started: false,
            asleep: false,
            stopped: false,
            next_control: Instant::ZERO,
            hooks_due: false,
            capture: CaptureCounters::default(),
            fast_path: Default::default(),
            trace_verbs: std::env::var_os("SLUICE_VERBS_TRACE").is_some(),
            next_trace: Instant::ZERO,
            config,
        }
    }

    /// Set it to stop: the service resets what remains, removes its socket and reports
    /// [`AppStatus::Done`] (register it for SIGTERM/SIGINT).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// The counters so far (of this part: the service in flow groups sums its parts').
    pub fn counters(&self) -> Counters {
        self.sh.counters
    }

    /// The capture sessions' counters so far (docs/capture.md).
    pub fn capture_counters(&self) -> CaptureCounters {
        CaptureCounters {
            refused: self.capture.refused + self.control.as_ref().map_or(0, |c| c.captures_denied),
            ..self.capture
        }
    }

    /// The RDMA transport's counters, one `name value` per line (empty without verbs).
    pub fn rdma_counters(&self) -> String {
        let Some(v) = self.cores.verbs.as_ref() else {
            return String::new();
        };
        let s = &v.rdma.stack;
        let (c, q) = (s.counters, s.qp_counters());
        let rows = [
            ("frames_rx", c.frames_rx),
            ("frames_tx", c.frames_tx),
            ("malformed", c.malformed),
            ("no_qp", c.no_qp),
            ("wrong_peer", c.wrong_peer),
            ("ce_rx", c.ce_rx),
            ("cnp_tx", c.cnp_tx),
            ("cnp_rx", c.cnp_rx),
            ("packets_tx", q.packets_tx),
            ("retransmits", q.retransmits),
            ("timeouts", q.timeouts),
            ("naks_tx", q.naks_tx),
            ("duplicates", q.duplicates),
            ("refused", q.refused),
        ];
        rows.iter().map(|(n, v)| format!("{n:<25} {v}\n")).collect()
    }

    /// A copy of the counters another thread can read, refreshed about every
    /// `control_interval` while the engine runs and when it stops.
    pub fn published_counters(&self) -> Arc<Mutex<Counters>> {
        self.published.clone()
    }

    /// Applications attached now (not counting departed ones whose closed connections
    /// are still draining).
    pub fn apps_attached(&self) -> usize {
        self.apps
            .table
            .iter()
            .flatten()
            .filter(|a| a.departed.is_none())
            .count()
    }

    /// The control socket's path.
    pub fn socket_path(&self) -> &Path {
        &self.config.socket
    }

    /// Stops: resets every remaining connection (RST), stops every listener, releases every
    /// application (each sees its control socket hang up) and removes the socket file.
    pub fn shutdown(&mut self, stack: &mut Stack) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        for slot in self.apps.table.iter_mut() {
            if let Some(mut app) = slot.take() {
                if let Some(w) = self.sh.wake_set.as_ref() {
                    w.unwatch(&app.doorbell);
                }
                teardown::release_app(&mut app, Release::Stop, stack, &mut self.sh);
                // Counted once, by part 0 (the parts' counters are summed).
                if app.departed.is_none() && self.sh.links.index == 0 {
                    self.sh.counters.apps_detached += 1;
                }
            }
        }
        self.apps.orphans = 0;
        for i in 0..self.apps.table.len() {
            self.cores.detach(i as u32);
        }
        if let Some(c) = self.control.as_mut() {
            c.close();
        }
        self.publish_counters();
    }

    /// Publishes this part's counters, and on part 0 every part's summed.
    fn publish_counters(&self) {
        self.sh.links.publish(self.sh.counters);
        if let Ok(mut c) = self.published.lock() {
            *c = self.sh.links.summed(self.sh.counters);
        }
    }

    /// Learns what it needs from the core the first time it runs.
    fn start(&mut self, stack: &Stack, now: Instant) {
        self.started = true;
        self.sh.ip = stack.config().ip;
        self.config.engine.ip = self.sh.ip;
        self.sh.conns = ConnMap::new(stack.config().max_connections);
        self.sh.ports.set_range(stack.config().ephemeral_ports);
        // Checked by ServiceConfig::validate in Service::new.
        if let Ok(reserved) = PortRanges::new(&self.config.port_ranges) {
            self.sh.ports.set_reserved(reserved);
        }
        self.next_control = now;
        // Verbs and MTP run in flow group 0, where the engine steers their frames.
        let part0 = self.sh.links.index == 0;
        if self.config.verbs && part0 {
            self.cores.verbs = Some(Verbs::new(stack, self.config.verbs_limits));
        }
        if self.config.mtp && part0 {
            match Mtp::new(stack) {
                Ok(m) => self.cores.mtp = Some(m),
                Err(e) => eprintln!("sluice engine: no MTP: {e}"),
            }
        }
    }

    /// Memory backings the verbs hold (mapped regions and inline buffers), for tests.
    pub fn verbs_backings(&self) -> usize {
        self.cores.verbs.as_ref().map_or(0, Verbs::backings)
    }

    /// Runs the QP doorbells rung this iteration and the QPs with work left, then places
    /// what the transport completed, waking the applications that got completions.
    fn run_verbs(&mut self) {
        let Some(v) = self.cores.verbs.as_mut() else {
            self.sh.doorbells.clear();
            return;
        };
        let counters = &mut self.sh.counters;
        if !self.sh.doorbells.is_empty() {
            self.sh.busy = true;
        }
        for (app, qpn) in self.sh.doorbells.drain(..) {
            verbs::doorbell(v, app, qpn, counters);
        }
        // Notification pipes: no doorbell, every pipe is looked at every iteration.
        if verbs::poll_pipes(v, counters) {
            self.sh.busy = true;
        }
        verbs::retry(v, counters);
        // OFFLOAD requests to their handlers' threads and answers back (docs/offload.md).
        if verbs::run_offload(v, counters) {
            self.sh.busy = true;
        }
        let table = &mut self.apps.table;
        let mut busy = false;
        verbs::deliver(v, counters, |app| {
            if let Some(Some(a)) = table.get_mut(app as usize) {
                a.dirty = true;
            }
            busy = true;
        });
        self.sh.busy |= busy;
    }

    /// Runs the MTP doorbells rung this iteration and the endpoints with work left, hands
    /// the transport the MACs ARP found, then places what it completed and received,
    /// waking the applications that got completions.
    fn run_mtp(&mut self, stack: &mut Stack, now: Instant) {
        let Some(m) = self.cores.mtp.as_mut() else {
            self.sh.mtp_doorbells.clear();
            return;
        };
        let counters = &mut self.sh.counters;
        if !self.sh.mtp_doorbells.is_empty() {
            self.sh.busy = true;
        }
        for (app, ep) in self.sh.mtp_doorbells.drain(..) {
            mtp::doorbell(m, app, ep, stack, now, counters);
        }
        mtp::retry(m, stack, now, counters);
        counters.mtp_arp_waits += m.learn_neighbors(stack, now);
        let table = &mut self.apps.table;
        let mut busy = false;
        mtp::deliver(m, counters, |app| {
            if let Some(Some(a)) = table.get_mut(app as usize) {
                a.dirty = true;
            }
            busy = true;
        });
        self.sh.busy |= busy;
    }

    /// The MTP transport's counters, one `name value` per line (empty without MTP).
    pub fn mtp_counters(&self) -> String {
        self.cores
            .mtp
            .as_ref()
            .map_or_else(String::new, Mtp::describe_counters)
    }

    /// MTP endpoints bound now, over every application (for tests).
    pub fn mtp_endpoints(&self) -> usize {
        self.cores.mtp.as_ref().map_or(0, Mtp::endpoints)
    }

    /// Frees departed applications once the connections they closed are done, or resets
    /// what is left of them after the orphan linger.
    fn reap_orphans(&mut self, stack: &mut Stack) {
        for (i, entry) in self.apps.table.iter_mut().enumerate() {
            let Some(app) = entry.as_mut() else {
                continue;
            };
            let Some(since) = app.departed else {
                continue;
            };
            let expired = self.sh.now >= since + self.config.orphan_linger;
            if !expired && !app.slots.all_free() {
                continue;
            }
            if expired {
                teardown::release_app(app, Release::Orphan, stack, &mut self.sh);
            }
            *entry = None;
            self.apps.orphans -= 1;
            self.sh.counters.orphans_freed += 1;
            if self.sh.links.index != 0 {
                // Part 0 may reuse the index once every part let it go (src/parts.rs).
                self.sh.links.send(0, PartMsg::Freed { app: i as u32 });
            }
        }
    }

    /// Retries the pending lists: RX rings that were full, listeners that stalled, TX
    /// bytes the core could not take.
    fn retry_pending(&mut self, stack: &mut Stack) {
        std::mem::swap(&mut self.retry, &mut self.sh.rx_pending);
        for i in 0..self.retry.len() {
            let owner = self.retry[i];
            let Some(Some(app)) = self.apps.table.get_mut(owner.app as usize) else {
                continue;
            };
            if !app.slots.unlist_rx(owner.slot) {
                continue;
            }
            let Some(state) = app.slots.get(owner.slot).map(|slot| slot.state) else {
                continue;
            };
            match state {
                SlotState::Conn { .. } => data::rx_move(app, owner.slot, stack, &mut self.sh),
                SlotState::Listening { .. } => {
                    data::accept_into(app, owner.slot, stack, &mut self.sh)
                }
                _ => {}
            }
        }
        self.retry.clear();
        std::mem::swap(&mut self.retry, &mut self.sh.tx_pending);
        for i in 0..self.retry.len() {
            let owner = self.retry[i];
            let Some(Some(app)) = self.apps.table.get_mut(owner.app as usize) else {
                continue;
            };
            if app.slots.unlist_tx(owner.slot) && app.slots.get(owner.slot).is_some() {
                data::tx_move(app, owner.slot, stack, &mut self.sh);
            }
        }
        self.retry.clear();
    }
}

impl App for Service {
    fn poll(&mut self, stack: &mut Stack, now: Instant) -> Result<AppStatus, EngineError> {
        if !self.started {
            self.start(stack, now);
        }
        if self.stop.load(Ordering::Relaxed) {
            self.shutdown(stack);
            return Ok(AppStatus::Done);
        }
        self.sh.now = now;
        self.sh.busy = false;
        if self.asleep {
            // Awake again: applications stop ringing, and whatever woke us is looked at.
            self.asleep = false;
            wake::announce_awake(&self.apps.table);
            self.sh.links.announce_awake();
            self.next_control = now;
        }
        // Rates of connections classified in the last hook turn, before their data moves.
        let sh = &mut self.sh;
        sh.classes.apply(stack, &mut sh.counters);
        if self.sh.links.count > 1 {
            // What the other parts told this one: applications, listeners, accepts.
            parts::serve(&mut self.apps, stack, &mut self.sh);
        }
        if now >= self.next_control {
            self.next_control = now + self.config.control_interval;
            if let Some(control) = self.control.as_mut() {
                control.poll(
                    &mut self.apps,
                    &self.config,
                    &mut self.sh,
                    &mut self.cores,
                    stack,
                );
                self.hooks_due = true;
            }
            self.publish_counters();
        }
        let batch = self.config.command_batch as u64;
        for app in self.apps.table.iter_mut().flatten() {
            commands::run_contexts(app, batch, stack, &mut self.sh);
        }
        // Bounded: the core keeps one pending entry per connection and listener.
        while let Some(event) = stack.poll_event() {
            events::dispatch(&mut self.apps.table, event, stack, &mut self.sh);
        }
        if self.sh.classes.waiting() {
            self.hooks_due = true;
        }
        // Bounded by the core (two events per splice it may hold).
        while let Some(e) = stack.poll_splice_event() {
            if self.config.splice_ebpf && self.fast_path.on_event(e, stack) {
                self.hooks_due = true;
            }
            splice::dispatch(&mut self.apps.table, e, &mut self.sh);
        }
        for app in self.apps.table.iter_mut().flatten() {
            if !app.held_reports.is_empty() {
                splice::flush(app, &mut self.sh);
            }
        }
        self.run_verbs();
        self.run_mtp(stack, now);
        if self.trace_verbs && now >= self.next_trace {
            self.next_trace = now + std::time::Duration::from_secs(2);
            if let Some(v) = self.cores.verbs.as_ref() {
                eprintln!(
                    "sluice engine: verbs trace\n{}{}",
                    v.rdma.stack.describe(),
                    v.describe()
                );
            }
            if let Some(m) = self.cores.mtp.as_ref() {
                let service = self.sh.counters.to_string();
                let ours = service.lines().filter(|l| l.starts_with("mtp_"));
                let ours: Vec<&str> = ours.collect();
                eprintln!(
                    "sluice engine: mtp trace\n{}{}",
                    m.describe_counters(),
                    ours.join("\n")
                );
            }
        }
        self.retry_pending(stack);
        if !self.sh.replicas.pending.is_empty() {
            handover::retry(&mut self.apps.table, stack, &mut self.sh);
        }
        if self.apps.orphans > 0 {
            self.reap_orphans(stack);
        }
        wake::wake_dirty(&mut self.apps.table, &mut self.sh.counters);
        self.sh.links.flush();
        Ok(if self.sh.busy {
            AppStatus::Busy
        } else {
            AppStatus::Running
        })
    }

    fn transports(&mut self) -> Transports<'_> {
        let Cores { verbs, mtp } = &mut self.cores;
        Transports {
            rdma: verbs.as_mut().map(|v| &mut v.rdma as &mut dyn Transport),
            mtp: mtp.as_mut().map(|m| &mut m.core as &mut dyn Transport),
        }
    }

    fn engine_stats(&mut self, run: &RunStats, device: &DeviceStats) {
        self.sh.engine_stats = Some((*run, *device));
    }

    fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        match (self.control.as_ref(), self.sh.wake_set.as_ref()) {
            (Some(c), _) => Some(c.epoll.0.as_fd()),
            (None, Some(w)) => Some(w.fd()),
            (None, None) => None,
        }
    }

    fn control_hooks(&mut self, hooks: &mut Hooks) {
        if !std::mem::take(&mut self.hooks_due) {
            return;
        }
        if hooks.taps() > 0 {
            self.capture.ended += hooks.reap_closed() as u64;
        }
        self.fast_path.apply(hooks, &mut self.sh.counters);
        let Some(control) = self.control.as_mut() else {
            return;
        };
        for (sock, req) in control.captures.drain(..) {
            capture::start(sock, &req, hooks, &mut self.capture, self.config.log);
        }
        for (i, id, req) in std::mem::take(&mut control.module_requests) {
            let reply = match modules::answer(req, hooks, &mut self.sh.counters) {
                Ok(r) => Reply::Admin(r),
                Err(reason) => Reply::Refused { reason },
            };
            // The application is still the one that asked (it cannot detach in between);
            // a failed send shows as its hang-up at the next look.
            if let Some(Some(app)) = self
                .apps
                .table
                .get(i)
                .filter(|a| a.as_ref().is_some_and(|a| a.id == id))
            {
                let _ = send_message(app.sock.as_fd(), &reply, &[]);
            }
        }
        // After the module requests, so a classifier loaded now counts.
        self.sh.classes.classify(hooks, &mut self.sh.counters);
        // No consumer for redirected frames yet: counted and dropped (docs/ebpf.md).
        let mut chain = hooks.modules_mut();
        while let Some(f) = chain.pop_redirected() {
            self.sh.counters.module_redirects += 1;
            chain.recycle(f);
        }
    }

    fn prepare_sleep(&mut self) -> bool {
        // A part that could not watch an application's doorbell would not hear it.
        if self.apps.table.iter().flatten().any(|a| a.unwatched) {
            return false;
        }
        // Splice reports held for a completion queue that has room now go out first.
        let deliverable = |app: &crate::app::AttachedApp| {
            app.held_reports.iter().any(|&(ci, _)| {
                app.contexts
                    .get(ci as usize)
                    .is_some_and(|c| !c.dead && c.completions.free().is_ok_and(|room| room > 1))
            })
        };
        if self.apps.table.iter().flatten().any(deliverable) || self.sh.classes.has_rates() {
            return false;
        }
        // Connections accepted for another part's listener that wait for room in the link
        // or for a slot: retried every iteration (nothing rings this part when the room
        // comes; never pending with one part).
        if !self.sh.replicas.pending.is_empty() {
            return false;
        }
        // In flow groups, before the announcement: only a ring or a message after it
        // may wake this part (src/wake_set.rs, src/links.rs PartBell).
        if let Some(w) = self.sh.wake_set.as_ref() {
            w.consume();
        }
        let links = &self.sh.links;
        links.announce_sleep();
        let verbs = self.cores.verbs.as_ref();
        if !wake::announce_sleep(&self.apps.table, &mut self.sh.counters, || {
            verbs.is_some_and(|v| v.pipes_pending()) || links.pending()
        }) {
            links.announce_awake();
            return false;
        }
        self.asleep = true;
        true
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(c) = self.control.as_mut() {
            c.close();
        }
    }
}
