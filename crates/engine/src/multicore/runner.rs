//! The multi-core engine: builds the roles and their links for a layout, then either runs
//! them on threads (one per layout thread, `std::thread::scope`) or steps them all on the
//! calling thread in a seeded random order, for deterministic tests in virtual time.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice_device::Device;
use sluice_tcp::{Config, ConfigError, Counters, FlowGroupMember, Instant, Stack};
use sluice_wire::flow_group::FlowGroups;

use super::batch::{BATCH_FRAMES, FRAME_BYTES};
use super::control::{control_links, Control};
use super::doorbell::{DeviceSleep, Doorbell, DoorbellError, SleepCounters};
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
/// Idle rounds a thread yields before it sleeps.
const YIELD_ROUNDS: u32 = 64;
/// Longest sleep of an idle thread by default ([`MultiEngine::max_sleep`]): its doorbell,
/// device, applications and timers wake it sooner; this only bounds a wake-up source the
/// engine does not know of.
pub const DEFAULT_MAX_SLEEP: Duration = Duration::from_millis(100);
/// On a virtual clock (only the device's wait moves time) idle threads nap this long
/// instead of sleeping until a deadline that their own sleep would not bring closer.
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
    /// A data-path thread's doorbell could not be made or slept on.
    Doorbell(DoorbellError),
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
            MultiError::Doorbell(e) => write!(f, "{e}"),
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

impl From<DoorbellError> for MultiError {
    fn from(e: DoorbellError) -> Self {
        match e {
            // The device's wait failing is the device's error, as it was before sleeping.
            DoorbellError::Device(d) => MultiError::Engine(EngineError::Device(d)),
            e => MultiError::Doorbell(e),
        }
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
    /// Each data-path thread's sleeps and wake-ups, in the plan's thread order.
    pub threads: Vec<SleepCounters>,
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
    /// Each plan thread's doorbell.
    bells: Vec<Arc<Doorbell>>,
    /// After every application is done, run at most this long for closes to finish.
    pub linger: Duration,
    /// Longest an idle thread sleeps ([`DEFAULT_MAX_SLEEP`]).
    pub max_sleep: Duration,
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
        let bells = (0..plan.threads.len())
            .map(|_| Doorbell::new().map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        let thread_of = |id: RoleId| plan.threads.iter().position(|t| t.contains(&id));
        // A link between two threads rings the consumer's thread when it sends and the
        // producer's when it gives a batch back.
        let joined = |from: RoleId, to: RoleId, capacity: usize, pool: usize| {
            let (mut tx, mut rx) = link(capacity, pool);
            if let (Some(f), Some(t)) = (thread_of(from), thread_of(to)) {
                if f != t {
                    tx.wake(bells[t].clone());
                    rx.wake(bells[f].clone());
                }
            }
            (tx, rx)
        };
        // Receive: NIC -> pre r (POOL batches each) -> protocol g. Transmit: protocol g ->
        // post r (POOL each) -> NIC. A ring holds every batch that can reach it.
        let mut nic_to_pre = Vec::new();
        let mut pre_from_nic = Vec::new();
        for ri in 0..r {
            let (tx, rx) = joined(RoleId::Nic, RoleId::Pre(ri as u16), POOL, POOL);
            nic_to_pre.push(tx);
            pre_from_nic.push(rx);
        }
        let mut pre_to_group: Vec<Vec<_>> = (0..r).map(|_| Vec::new()).collect();
        let mut group_from_pre: Vec<Vec<_>> = (0..n).map(|_| Vec::new()).collect();
        let mut group_to_post: Vec<Vec<_>> = (0..n).map(|_| Vec::new()).collect();
        let mut post_from_group: Vec<Vec<_>> = (0..r).map(|_| Vec::new()).collect();
        for (ri, to_group) in pre_to_group.iter_mut().enumerate() {
            let (pre, post) = (RoleId::Pre(ri as u16), RoleId::Post(ri as u16));
            for g in 0..n {
                let protocol = RoleId::Protocol(g as u16);
                let (tx, rx) = joined(pre, protocol, POOL, 0);
                to_group.push(tx);
                group_from_pre[g].push(rx);
                let (tx, rx) = joined(protocol, post, POOL, POOL);
                group_to_post[g].push(tx);
                post_from_group[ri].push(rx);
            }
        }
        let mut post_to_nic = Vec::new();
        let mut nic_from_post = Vec::new();
        for ri in 0..r {
            let (tx, rx) = joined(RoleId::Post(ri as u16), RoleId::Nic, n * POOL, 0);
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
        let (mut control, control_rxs) = control_links(plan.groups);
        for g in 0..plan.groups {
            if let Some(t) = thread_of(RoleId::Protocol(g)) {
                control.wake(g, bells[t].clone());
            }
        }
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
            bells,
            linger: DEFAULT_LINGER,
            max_sleep: DEFAULT_MAX_SLEEP,
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

    /// Each data-path thread's doorbell, in the plan's thread order (its counters: how
    /// often the thread slept and what woke it).
    pub fn doorbells(&self) -> &[Arc<Doorbell>] {
        &self.bells
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
            threads: self.bells.iter().map(|b| b.counters()).collect(),
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
    /// Every thread's doorbell: a thread that stops the run wakes the others.
    bells: Vec<Arc<Doorbell>>,
    max_sleep: Duration,
}

impl Shared {
    /// Stops every thread, waking those that sleep.
    fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        for b in &self.bells {
            b.ring();
        }
    }
}

/// Where an idle thread is in its spell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Idle {
    /// Polling: spinning, then yielding, for this many idle rounds so far.
    Polling(u32),
    /// The sleep is announced: the pass under way is the re-check.
    Announced,
    /// Woken from a sleep: a pass that finds nothing sleeps again at once.
    Slept,
}

/// One data-path thread: steps its roles until told to stop; when idle spins, yields, then
/// sleeps on its doorbell (and device, applications' descriptors, next timer) until woken.
fn worker<D: Device, A: App>(
    roles: &mut [RoleMut<'_, D, A>],
    shared: &Shared,
    bell: &Doorbell,
) -> Result<(), MultiError> {
    let mut app_done = vec![false; roles.len()];
    let mut finished = vec![false; roles.len()];
    let mut linger_from: Option<Instant> = None;
    let mut idle = Idle::Polling(0);
    let mut device_sleep = DeviceSleep::default();
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
                    shared.stop();
                    return Err(e.into());
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
            shared.stop();
            return Ok(());
        }
        if shared.apps_done.load(Ordering::Acquire) == shared.groups {
            let from = *linger_from.get_or_insert(now);
            if shared.finished.load(Ordering::Acquire) == shared.groups
                || now.saturating_since(from) >= shared.linger
            {
                shared.stop();
                return Ok(());
            }
        }
        if work > 0 {
            if idle == Idle::Announced {
                bell.cancel();
            }
            idle = Idle::Polling(0);
            continue;
        }
        if shared.clock.is_virtual() {
            // Virtual time moves only when the device waits: nap, as the stepped model.
            nap(roles)?;
            continue;
        }
        idle = match idle {
            // Spin, then yield: a batch that comes back within a round trip is met at once,
            // and threads beyond the cores let the others run.
            Idle::Polling(n) if n < SPIN_ROUNDS => {
                std::hint::spin_loop();
                Idle::Polling(n + 1)
            }
            Idle::Polling(n) if n < SPIN_ROUNDS + YIELD_ROUNDS => {
                std::thread::yield_now();
                Idle::Polling(n + 1)
            }
            // Then announce the sleep: the next pass is the re-check (doorbell.rs).
            Idle::Polling(_) | Idle::Slept => {
                bell.announce();
                Idle::Announced
            }
            // The re-check found nothing: sleep, if the applications agree.
            Idle::Announced => {
                if !applications_agree(roles) {
                    bell.cancel();
                    Idle::Polling(0)
                } else {
                    let until = linger_from.map(|f| f + shared.linger);
                    let timeout = sleep_length(roles, shared, until);
                    sleep(roles, bell, &mut device_sleep, timeout)?;
                    Idle::Slept
                }
            }
        };
    }
}

/// Asks every application of the thread whether it may sleep (`App::prepare_sleep`: the
/// service announces it, so its applications ring its doorbell); false at the first no.
fn applications_agree<D: Device, A: App>(roles: &mut [RoleMut<'_, D, A>]) -> bool {
    roles.iter_mut().all(|r| match r {
        RoleMut::Protocol(p) => p.app.prepare_sleep(),
        _ => true,
    })
}

/// How long the thread may sleep: until its groups' next timer, the run's deadline, the end
/// of the linger, and at most [`MultiEngine::max_sleep`].
fn sleep_length<D: Device, A: App>(
    roles: &mut [RoleMut<'_, D, A>],
    shared: &Shared,
    linger_until: Option<Instant>,
) -> Duration {
    let mut wait = shared.max_sleep;
    let deadlines = roles.iter_mut().filter_map(|r| match r {
        RoleMut::Protocol(p) => p.poll_timeout(),
        _ => None,
    });
    for t in deadlines.chain(shared.stop_at).chain(linger_until) {
        wait = wait.min(shared.clock.until(t));
    }
    wait
}

/// Sleeps on the thread's doorbell and its applications' descriptors, and on the device if
/// the thread holds the NIC role, for at most `timeout`.
fn sleep<D: Device, A: App>(
    roles: &mut [RoleMut<'_, D, A>],
    bell: &Doorbell,
    device_sleep: &mut DeviceSleep,
    timeout: Duration,
) -> Result<(), MultiError> {
    let mut device = None;
    let mut fds: Vec<BorrowedFd<'_>> = Vec::new();
    for r in roles.iter_mut() {
        match r {
            RoleMut::Nic(n) => device = Some(&mut n.device),
            RoleMut::Protocol(p) => fds.extend(p.app.wake_fd()),
            _ => {}
        }
    }
    match device {
        Some(d) => device_sleep.sleep(bell, d, &fds, timeout)?,
        None => bell.sleep(&fds, timeout)?,
    };
    Ok(())
}

/// On a virtual clock: the NIC role's thread waits on its device (which lets virtual time
/// pass), the others nap.
fn nap<D: Device, A: App>(roles: &mut [RoleMut<'_, D, A>]) -> Result<(), MultiError> {
    let nic = roles.iter_mut().find_map(|r| match r {
        RoleMut::Nic(n) => Some(n),
        _ => None,
    });
    match nic {
        Some(n) => n.device.wait(Some(PARK)).map_err(EngineError::Device)?,
        None => std::thread::sleep(PARK),
    }
    Ok(())
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
            bells: self.bells.clone(),
            max_sleep: self.max_sleep,
        };
        let threads = self.roles_by_thread();
        let results: Vec<Result<(), MultiError>> = std::thread::scope(|s| {
            let handles: Vec<_> = threads
                .into_iter()
                .zip(shared.bells.iter())
                .map(|(mut roles, bell)| {
                    let shared = &shared;
                    s.spawn(move || worker(&mut roles, shared, bell))
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
