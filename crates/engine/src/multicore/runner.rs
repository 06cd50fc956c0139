//! The multi-core engine: builds the roles and their links for a layout, then either runs
//! them on threads (one per layout thread, `std::thread::scope`) or steps them all on the
//! calling thread in a seeded random order, for deterministic tests in virtual time.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use sluice_device::Device;
use sluice_tcp::{Config, ConfigError, Counters, FlowGroupMember, Instant, Stack};
use sluice_wire::flow_group::FlowGroups;

use super::batch::{BATCH_FRAMES, FRAME_BYTES};
use super::control::{control_links, Control};
use super::layout::{Layout, LayoutError, Plan, RoleId};
use super::link::link;
use super::nic::Nic;
use super::placement::{check, Placement, PlacementError};
use super::post::Post;
use super::pre::Pre;
use super::progress::{Progress, RoleCounters};
use super::protocol::Protocol;
use crate::hook_point::HookPoint;
use crate::modules::{Chain, Module};
use crate::{App, Clock, EngineError, DEFAULT_LINGER};
use sluice_ebpf::{Maps, Program};

/// Batches in each producer's pool per link.
const POOL: usize = 8;
/// Batches a role moves per link in one step on the threads.
const BUDGET: usize = 4;
/// Idle rounds a thread spins before it yields its core.
const SPIN_ROUNDS: u32 = 256;
/// Idle rounds a thread yields before it parks.
const YIELD_ROUNDS: u32 = 64;
/// How long an idle thread parks (the NIC role's thread waits on its device instead).
const PARK: Duration = Duration::from_micros(50);
/// Ethernet, IPv4 and the largest TCP header, ahead of a large segment's payload.
const HEADERS_MAX: u32 = 14 + 20 + 60;
/// Longest stretch of virtual time the stepped model lets pass at once.
const MODEL_MAX_WAIT: Duration = Duration::from_millis(1);
/// Longest stretch (us) the stepped model lets pass while work is pending.
const MODEL_SLOW_US: u64 = 20;

/// Why the multi-core engine could not be built or stopped with an error.
#[derive(Debug)]
pub enum MultiError {
    /// The layout is invalid or needs more cores than there are.
    Layout(LayoutError),
    /// A group's core refused its configuration.
    Core(ConfigError),
    /// The device, a core call or an application failed.
    Engine(EngineError),
    /// The stepped model's budget of virtual time ran out before its condition held.
    Budget(Duration),
    /// A group other than 0 was given an application with transports beside TCP (RDMA,
    /// MTP): they run in group 0 only.
    Transports {
        /// The group.
        group: u16,
    },
}

impl std::fmt::Display for MultiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MultiError::Layout(e) => write!(f, "{e}"),
            MultiError::Core(e) => write!(f, "{e}"),
            MultiError::Engine(e) => write!(f, "{e}"),
            MultiError::Budget(d) => write!(
                f,
                "the stepped model did not finish in {:.3} s of virtual time",
                d.as_secs_f64()
            ),
            MultiError::Transports { group } => write!(
                f,
                "flow group {group}'s application owns RDMA or MTP transports, which run in \
                 group 0 only (docs/multicore.md)"
            ),
        }
    }
}

impl std::error::Error for MultiError {}

impl From<LayoutError> for MultiError {
    fn from(e: LayoutError) -> Self {
        MultiError::Layout(e)
    }
}

impl From<EngineError> for MultiError {
    fn from(e: EngineError) -> Self {
        MultiError::Engine(e)
    }
}

/// Counters of every role and core after a run.
#[derive(Clone, Debug)]
pub struct MultiReport {
    /// The NIC role's receive side.
    pub nic_rx: RoleCounters,
    /// The NIC role's transmit side.
    pub nic_tx: RoleCounters,
    /// Each pre replica.
    pub pre: Vec<RoleCounters>,
    /// Each group's protocol role, receive side.
    pub protocol_rx: Vec<RoleCounters>,
    /// Each group's protocol role, transmit side.
    pub protocol_tx: Vec<RoleCounters>,
    /// Each post replica.
    pub post: Vec<RoleCounters>,
    /// Each group's core.
    pub stacks: Vec<Counters>,
    /// Whether every group's application finished.
    pub apps_done: bool,
}

/// A role to step, whichever it is.
enum RoleMut<'a, D, A> {
    Nic(&'a mut Nic<D>),
    Pre(&'a mut Pre),
    Protocol(&'a mut Protocol<A>),
    Post(&'a mut Post),
}

impl<D: Device, A: App> RoleMut<'_, D, A> {
    fn step(&mut self, now: Instant, budget: usize) -> Result<Progress, EngineError> {
        match self {
            RoleMut::Nic(n) => n.step(budget),
            RoleMut::Pre(p) => {
                p.now_ns = now.as_nanos();
                Ok(p.step(budget))
            }
            RoleMut::Protocol(p) => p.step(now, budget),
            RoleMut::Post(p) => {
                p.now_ns = now.as_nanos();
                Ok(p.step(budget))
            }
        }
    }
}

/// The data-path on several roles (docs/multicore.md).
pub struct MultiEngine<D, A> {
    nic: Nic<D>,
    pres: Vec<Pre>,
    protocols: Vec<Protocol<A>>,
    posts: Vec<Post>,
    layout: Layout,
    plan: Plan,
    clock: Clock,
    control: Option<Control>,
    /// After every application is done, run at most this long for closes to finish.
    pub linger: Duration,
}

impl<D: Device, A: App> MultiEngine<D, A> {
    /// Builds the roles on the real clock (see [`MultiEngine::with_clock`]).
    pub fn new(
        device: D,
        config: Config,
        layout: Layout,
        factory: impl FnMut(u16) -> A,
    ) -> Result<Self, MultiError> {
        Self::with_clock(device, config, layout, Clock::start(), factory)
    }

    /// Builds the roles for `layout` over `device`: each group's core is `config` made that
    /// group (`Config::flow_group`, keyed by `config.seed`), leaving checksums to the post
    /// role, or to the device and with large segments when the device segments;
    /// `factory(g)` makes group `g`'s application.
    pub fn with_clock(
        device: D,
        config: Config,
        layout: Layout,
        clock: Clock,
        mut factory: impl FnMut(u16) -> A,
    ) -> Result<Self, MultiError> {
        let plan = layout.plan()?;
        let (n, r) = (usize::from(plan.groups), usize::from(plan.replicas));
        let groups = FlowGroups {
            count: plan.groups,
            key: config.seed,
        };
        // Receive: NIC -> pre r (POOL batches each) -> protocol g. Transmit: protocol g ->
        // post r (POOL each) -> NIC. A ring holds every batch that can reach it.
        let mut nic_to_pre = Vec::new();
        let mut pre_from_nic = Vec::new();
        for _ in 0..r {
            let (tx, rx) = link(POOL, POOL);
            nic_to_pre.push(tx);
            pre_from_nic.push(rx);
        }
        let mut pre_to_group: Vec<Vec<_>> = (0..r).map(|_| Vec::new()).collect();
        let mut group_from_pre: Vec<Vec<_>> = (0..n).map(|_| Vec::new()).collect();
        let mut group_to_post: Vec<Vec<_>> = (0..n).map(|_| Vec::new()).collect();
        let mut post_from_group: Vec<Vec<_>> = (0..r).map(|_| Vec::new()).collect();
        for (ri, to_group) in pre_to_group.iter_mut().enumerate() {
            for g in 0..n {
                let (tx, rx) = link(POOL, 0);
                to_group.push(tx);
                group_from_pre[g].push(rx);
                let (tx, rx) = link(POOL, POOL);
                group_to_post[g].push(tx);
                post_from_group[ri].push(rx);
            }
        }
        let mut post_to_nic = Vec::new();
        let mut nic_from_post = Vec::new();
        for _ in 0..r {
            let (tx, rx) = link(n * POOL, 0);
            post_to_nic.push(tx);
            nic_from_post.push(rx);
        }
        let window = r * POOL + 1;
        // A device that offloads segmentation completes partial checksums too (the signal
        // setup::offload_config reads): the post roles then leave them to it.
        let device_completes = device.max_tso_frame() > device.max_frame();
        let tso_max = (device.max_tso_frame().min(FRAME_BYTES * BATCH_FRAMES) as u32)
            .saturating_sub(HEADERS_MAX)
            .min(sluice_tcp::config::TSO_MAX_PAYLOAD_LIMIT);
        let (control, control_rxs) = control_links(plan.groups);
        let mut control_rxs = control_rxs.into_iter();
        let mut protocols = Vec::with_capacity(n);
        for (g, (from_pre, to_post)) in group_from_pre.into_iter().zip(group_to_post).enumerate() {
            let mut cfg = config.clone();
            cfg.flow_group = Some(FlowGroupMember {
                groups,
                index: g as u16,
            });
            cfg.tx_checksum_offload = true;
            // Large segments when the device cuts them, as big as a batch holds.
            cfg.tso_max_payload = if device_completes && tso_max > u32::from(cfg.mtu) {
                tso_max
            } else {
                0
            };
            let stack = Stack::new(cfg).map_err(MultiError::Core)?;
            let mut app = factory(g as u16);
            let transports = app.transports().each().next().is_some();
            if transports && g != 0 {
                return Err(MultiError::Transports { group: g as u16 });
            }
            let mut role = Protocol::new(g as u16, groups, stack, app, from_pre, to_post, window);
            role.control = control_rxs.next();
            if transports {
                role.serve_transports();
            }
            protocols.push(role);
        }
        Ok(MultiEngine {
            nic: Nic::new(device, groups, nic_to_pre, nic_from_post, window),
            pres: pre_from_nic
                .into_iter()
                .zip(pre_to_group)
                .map(|(from, to)| Pre::new(from, to))
                .collect(),
            protocols,
            posts: post_from_group
                .into_iter()
                .zip(post_to_nic)
                .map(|(from, to)| {
                    let mut post = Post::new(from, to);
                    post.device_completes = device_completes;
                    post
                })
                .collect(),
            layout,
            plan,
            clock,
            control: Some(control),
            linger: DEFAULT_LINGER,
        })
    }

    /// Which roles run on which thread, and the flow groups (for the CLI to print).
    pub fn describe(&self) -> String {
        self.plan.describe()
    }

    /// The engine's clock.
    pub fn clock(&self) -> Clock {
        self.clock.clone()
    }

    /// The control plane's ends of the groups' control links (docs/multicore.md, "Control
    /// messages"), once: whoever holds them is the one control plane.
    pub fn take_control(&mut self) -> Option<Control> {
        self.control.take()
    }

    /// Attaches `program` at `at` where `placement` says (placement.rs): one copy per pre
    /// or post replica, or per flow group, each with maps from `maps()` (so no map is shared
    /// between cores). Attach before running. Returns how many copies were attached.
    pub fn attach_module(
        &mut self,
        at: HookPoint,
        name: &str,
        section: &str,
        program: &Program,
        placement: Placement,
        mut maps: impl FnMut() -> Maps,
    ) -> Result<usize, PlacementError> {
        check(at, placement)?;
        let mut one = |chain: &mut Chain| -> Result<(), PlacementError> {
            let m = maps();
            if !program.matches(&m) {
                return Err(PlacementError::MapsDoNotMatch);
            }
            chain
                .attach(at, name, section, program.clone(), m)
                .map(|_| ())
                .map_err(PlacementError::Attach)
        };
        let mut copies = 0;
        match (placement, at) {
            (Placement::Stateless, HookPoint::Ingress) => {
                for p in self.pres.iter_mut() {
                    one(&mut p.modules)?;
                    copies += 1;
                }
            }
            (Placement::Stateless, _) => {
                for p in self.posts.iter_mut() {
                    one(&mut p.modules)?;
                    copies += 1;
                }
            }
            (Placement::PerGroup, _) => {
                for p in self.protocols.iter_mut() {
                    one(&mut p.modules)?;
                    copies += 1;
                }
            }
        }
        Ok(copies)
    }

    /// Every copy of every module, in role order (pre replicas, post replicas, groups): its
    /// counters and maps, to be summed by whoever reads them as per-CPU maps are.
    pub fn modules(&self) -> Vec<&Module> {
        self.pres
            .iter()
            .map(|p| &p.modules)
            .chain(self.posts.iter().map(|p| &p.modules))
            .chain(self.protocols.iter().map(|p| &p.modules))
            .flat_map(|c| c.modules())
            .collect()
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.nic.device
    }

    /// The protocol roles, one per flow group (their cores and applications).
    pub fn protocols(&self) -> &[Protocol<A>] {
        &self.protocols
    }

    /// The applications, in group order.
    pub fn into_apps(self) -> Vec<A> {
        self.protocols.into_iter().map(|p| p.app).collect()
    }

    /// Every role's and core's counters.
    pub fn report(&self) -> MultiReport {
        MultiReport {
            nic_rx: self.nic.rx(),
            nic_tx: self.nic.tx,
            pre: self.pres.iter().map(|p| p.counters).collect(),
            protocol_rx: self.protocols.iter().map(|p| p.rx).collect(),
            protocol_tx: self.protocols.iter().map(|p| p.tx).collect(),
            post: self.posts.iter().map(|p| p.counters).collect(),
            stacks: self
                .protocols
                .iter()
                .map(|p| p.stack.counters().clone())
                .collect(),
            apps_done: self.protocols.iter().all(Protocol::app_done),
        }
    }

    /// The roles, grouped by the plan's threads.
    fn roles_by_thread(&mut self) -> Vec<Vec<RoleMut<'_, D, A>>> {
        let mut nic = Some(&mut self.nic);
        let mut pres: Vec<_> = self.pres.iter_mut().map(Some).collect();
        let mut protocols: Vec<_> = self.protocols.iter_mut().map(Some).collect();
        let mut posts: Vec<_> = self.posts.iter_mut().map(Some).collect();
        self.plan
            .threads
            .iter()
            .map(|roles| {
                roles
                    .iter()
                    .filter_map(|id| match *id {
                        RoleId::Nic => nic.take().map(RoleMut::Nic),
                        RoleId::Pre(i) => pres[usize::from(i)].take().map(RoleMut::Pre),
                        RoleId::Protocol(i) => {
                            protocols[usize::from(i)].take().map(RoleMut::Protocol)
                        }
                        RoleId::Post(i) => posts[usize::from(i)].take().map(RoleMut::Post),
                    })
                    .collect()
            })
            .collect()
    }
}

/// What the threads share to know when to stop.
struct Shared {
    stop: AtomicBool,
    apps_done: AtomicUsize,
    finished: AtomicUsize,
    groups: usize,
    stop_at: Option<Instant>,
    linger: Duration,
    clock: Clock,
}

/// One data-path thread: steps its roles until told to stop, backing off when idle.
fn worker<D: Device, A: App>(
    roles: &mut [RoleMut<'_, D, A>],
    shared: &Shared,
) -> Result<(), EngineError> {
    let mut app_done = vec![false; roles.len()];
    let mut finished = vec![false; roles.len()];
    let mut linger_from: Option<Instant> = None;
    let mut idle: u32 = 0;
    loop {
        if shared.stop.load(Ordering::Acquire) {
            return Ok(());
        }
        let now = shared.clock.now();
        let mut work = 0;
        for (i, role) in roles.iter_mut().enumerate() {
            match role.step(now, BUDGET) {
                Ok(p) => work += p.work,
                Err(e) => {
                    shared.stop.store(true, Ordering::Release);
                    return Err(e);
                }
            }
            if let RoleMut::Protocol(p) = role {
                if p.app_done() && !app_done[i] {
                    app_done[i] = true;
                    shared.apps_done.fetch_add(1, Ordering::AcqRel);
                }
                if p.finished() && !finished[i] {
                    finished[i] = true;
                    shared.finished.fetch_add(1, Ordering::AcqRel);
                }
            }
        }
        if shared.stop_at.is_some_and(|s| now >= s) {
            shared.stop.store(true, Ordering::Release);
            return Ok(());
        }
        if shared.apps_done.load(Ordering::Acquire) == shared.groups {
            let from = *linger_from.get_or_insert(now);
            if shared.finished.load(Ordering::Acquire) == shared.groups
                || now.saturating_since(from) >= shared.linger
            {
                shared.stop.store(true, Ordering::Release);
                return Ok(());
            }
        }
        if work > 0 {
            idle = 0;
            continue;
        }
        // Spin, then yield, then park: threads beyond the cores must let the others run.
        idle = idle.saturating_add(1);
        if idle < SPIN_ROUNDS {
            std::hint::spin_loop();
        } else if idle < SPIN_ROUNDS + YIELD_ROUNDS {
            std::thread::yield_now();
        } else {
            let nic = roles.iter_mut().find_map(|r| match r {
                RoleMut::Nic(n) => Some(n),
                _ => None,
            });
            match nic {
                // Sleeping on the device wakes at the next frame (and lets virtual time pass).
                Some(n) => n.device.wait(Some(PARK))?,
                None => std::thread::sleep(PARK),
            }
        }
    }
}

impl<D: Device + Send, A: App + Send> MultiEngine<D, A> {
    /// Runs the roles on the layout's threads until every group's application is done and
    /// its closes have finished (at most [`MultiEngine::linger`] after the last is done), or
    /// `deadline` passes. Refuses a layout with more threads than the machine has cores.
    pub fn run(&mut self, deadline: Option<Duration>) -> Result<MultiReport, MultiError> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        self.layout.plan_on(cores)?;
        let shared = Shared {
            stop: AtomicBool::new(false),
            apps_done: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
            groups: self.protocols.len(),
            stop_at: deadline.map(|d| self.clock.now() + d),
            linger: self.linger,
            clock: self.clock.clone(),
        };
        let threads = self.roles_by_thread();
        let results: Vec<Result<(), EngineError>> = std::thread::scope(|s| {
            let handles: Vec<_> = threads
                .into_iter()
                .map(|mut roles| {
                    let shared = &shared;
                    s.spawn(move || worker(&mut roles, shared))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        for p in self.protocols.iter_mut() {
            p.release_owner();
        }
        for r in results {
            r?;
        }
        Ok(self.report())
    }
}

impl<D: Device, A: App> MultiEngine<D, A> {
    /// Steps every role on the calling thread in an order drawn from `seed` with random
    /// budgets (0 leaves a role's input for the round), letting virtual time pass (the
    /// device's wait) when no role can move and, now and then, while work is pending (a slow
    /// core), until `until(device, protocols)` holds or `limit` of clock time passes.
    pub fn step_model(
        &mut self,
        seed: u64,
        limit: Duration,
        mut until: impl FnMut(&D, &[Protocol<A>]) -> bool,
    ) -> Result<MultiReport, MultiError> {
        let mut rng = SplitMix(seed);
        let stop = self.clock.now() + limit;
        loop {
            if until(&self.nic.device, &self.protocols) {
                return Ok(self.report());
            }
            let now = self.clock.now();
            if now >= stop {
                return Err(MultiError::Budget(limit));
            }
            let mut work = 0;
            {
                let mut roles: Vec<_> = self.roles_by_thread().into_iter().flatten().collect();
                // A random permutation (Fisher-Yates), each role with a budget of 0..=3: a
                // role left out of a round lets the others overtake it.
                let mut order: Vec<usize> = (0..roles.len()).collect();
                for i in (1..order.len()).rev() {
                    order.swap(i, (rng.next() % (i as u64 + 1)) as usize);
                }
                for i in order {
                    let budget = (rng.next() % 4) as usize;
                    work += roles[i].step(now, budget)?.work;
                }
                if work == 0 {
                    // Idle only if every role, given a budget, finds nothing to do.
                    for role in roles.iter_mut() {
                        work += role.step(now, 1)?.work;
                    }
                }
            }
            if work > 0 {
                // Now and then let time pass with work still pending, as on a slow core:
                // more frames arrive while batches are in flight, so they overtake.
                if rng.next().is_multiple_of(4) {
                    let wait = Duration::from_micros(rng.next() % MODEL_SLOW_US);
                    self.nic
                        .device
                        .wait(Some(wait.min(self.clock.until(stop))))
                        .map_err(EngineError::Device)?;
                }
                continue;
            }
            // Nothing can move at this instant: let time pass to the next deadline.
            let mut wait = MODEL_MAX_WAIT.min(self.clock.until(stop));
            for p in self.protocols.iter_mut() {
                if let Some(t) = p.poll_timeout() {
                    wait = wait.min(self.clock.until(t));
                }
            }
            self.nic
                .device
                .wait(Some(wait))
                .map_err(EngineError::Device)?;
        }
    }
}

/// SplitMix64: a tiny seeded generator for the model's stepping order.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
