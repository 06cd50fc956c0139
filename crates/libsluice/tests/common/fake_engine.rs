//! A fake engine: the engine side of docs/service.md over sluice-shm, with no TCP. Sockets
//! of its applications connect to each other through it ("loopback" on the engine's own
//! address): bytes move from one slot's TX ring into its peer's RX ring. It runs in a
//! thread of the test process and serves applications in this process or in child processes
//! (the C test), so libsluice is tested deterministically, without root and without the
//! real engine.
//!
//! It keeps the contract's hard parts honest: RX_STALLED is set when a peer's ring is full
//! and nothing more moves until the application sends `Consumed`; the engine sleeps after a
//! short idle spell (setting `engine_sleeping`) and wakes only on a doorbell, a control
//! message or a fallback timeout, which it counts as a lost wakeup if it then finds work;
//! sleeping contexts are woken through their eventfds.
//!
//! With `layout.queue_cores` = N > 1 it plays an engine on N flow-group cores
//! (docs/service.md "Several data-path cores"): each context has N queue pairs, core k's
//! `Open` takes a slot `s` with `s % N == k`, a command naming a slot of another core is
//! refused (EBADF) and counted in `misrouted`, as is a verbs/MTP doorbell off core 0, a
//! splice across cores is EOPNOTSUPP, and splice reports come on the next core's queue
//! after the one the splice was asked on (they may come on any).

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use sluice_shm::control::{self, EngineInfo, Reply, Request};
use sluice_shm::{
    flags, AcceptRecord, Command, Completion, Consumer, Dir, EventFd, Layout, Producer, QueueKind,
    Region, Shut, SocketBlock, SpliceOutcome, ACCEPT_RECORD_BYTES,
};

/// The fake engine's address.
pub const ENGINE_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// Connecting here never completes (a peer that does not answer).
pub const BLACKHOLE_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 99);

/// How the fake engine is set up.
#[derive(Clone, Debug)]
pub struct Options {
    pub layout: Layout,
    pub app_idle_us: u64,
    /// Idle loop iterations before the engine sleeps.
    pub engine_idle_iterations: u32,
    /// Contexts handed out per application (NewContext is refused beyond).
    pub max_contexts: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            layout: Layout {
                max_sockets: 64,
                max_contexts: 16,
                queue_entries: 64,
                ring_size: 8192,
                ..Layout::default()
            },
            app_idle_us: 200,
            engine_idle_iterations: 200,
            max_contexts: 16,
        }
    }
}

/// What the fake engine saw (read by tests).
#[derive(Debug, Default)]
pub struct Stats {
    pub commands: AtomicU64,
    pub consumed: AtomicU64,
    pub sends: AtomicU64,
    pub bytes_moved: AtomicU64,
    pub stalls: AtomicU64,
    pub sleeps: AtomicU64,
    pub doorbell_wakeups: AtomicU64,
    /// Woke by the fallback timeout and found a command waiting: a doorbell was missed.
    pub lost_wakeups: AtomicU64,
    pub context_wakeups: AtomicU64,
    pub contexts_created: AtomicU64,
    pub contexts_refused: AtomicU64,
    pub apps_attached: AtomicU64,
    pub apps_gone: AtomicU64,
    pub bad_commands: AtomicU64,
    /// Commands that came on the queue of a core that does not serve them.
    pub misrouted: AtomicU64,
}

/// A running fake engine; dropping it (or `stop`) is the engine dying.
pub struct FakeEngine {
    pub path: PathBuf,
    pub stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    wake: Arc<EventFd>,
    thread: Option<JoinHandle<()>>,
}

impl FakeEngine {
    pub fn start(opts: Options) -> FakeEngine {
        static N: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "sluice-fake-{}-{}/engine.sock",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let listener = control::listen_at(&path).expect("listen on the fake engine socket");
        let stats = Arc::new(Stats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let wake = Arc::new(EventFd::new().unwrap());
        let mut engine = Engine {
            opts,
            listener,
            pending: Vec::new(),
            apps: Vec::new(),
            ports: HashMap::new(),
            next_ephemeral: 40000,
            stats: stats.clone(),
            stop: stop.clone(),
            wake: wake.clone(),
            splices: HashMap::new(),
            next_splice: 0,
        };
        let thread = std::thread::Builder::new()
            .name("fake-engine".into())
            .spawn(move || engine.run())
            .unwrap();
        FakeEngine {
            path,
            stats,
            stop,
            wake,
            thread: Some(thread),
        }
    }

    /// The engine dies: every application's control socket closes.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.wake.signal();
        if let Some(t) = self.thread.take() {
            t.join().expect("the fake engine panicked");
        }
        let _ = std::fs::remove_file(&self.path);
        if let Some(d) = self.path.parent() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

impl Drop for FakeEngine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

type Endpoint = (usize, u32);

#[derive(Clone, Debug, Default, PartialEq)]
enum Kind {
    #[default]
    Free,
    Open,
    Listening {
        port: u16,
    },
    Connected {
        peer: Option<Endpoint>,
    },
    /// The handshake never completes (BLACKHOLE_IP).
    Hanging,
    /// Given to a splice: only Close is left.
    Spliced,
}

#[derive(Debug, Default)]
struct Slot {
    kind: Kind,
    bound: Option<u16>,
    last_rx_head: u64,
    /// Waiting for `Consumed` before touching the RX ring again.
    stalled: bool,
    /// FIN to send once the TX ring is drained.
    fin_pending: bool,
    fin_sent: bool,
    /// Closed by the application: drain, FIN, then free.
    closing: bool,
    /// Connections not yet in a listener's RX ring.
    backlog: VecDeque<Endpoint>,
}

struct Ctx {
    index: u32,
    /// Per engine core: commands in, completions out.
    commands: Vec<Consumer>,
    completions: Vec<Producer>,
    eventfd: EventFd,
}

/// A context and the engine core whose queue pair a command came on.
type Lane = (usize, u32);

struct App {
    control: OwnedFd,
    region: Arc<Region>,
    doorbell: EventFd,
    contexts: Vec<Ctx>,
    slots: Vec<Slot>,
    changed: bool,
    /// Hung up, with connections it closed gracefully still draining (as the real
    /// engine's Close, docs/service.md): kept until they are done, its control socket and
    /// contexts no longer read.
    departed: bool,
}

struct Engine {
    opts: Options,
    listener: OwnedFd,
    /// Connected control sockets that have not said Hello yet.
    pending: Vec<OwnedFd>,
    apps: Vec<Option<App>>,
    /// Bound ports (any socket of any application).
    ports: HashMap<u16, Endpoint>,
    next_ephemeral: u16,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    wake: Arc<EventFd>,
    splices: HashMap<u32, FakeSplice>,
    next_splice: u32,
}

mod splice;
use splice::FakeSplice;

fn bump(b: &SocketBlock<'_>) {
    b.event_seq().fetch_add(1, Ordering::Release);
}

fn set_flags(b: &SocketBlock<'_>, add: u32, remove: u32) {
    let f = b.flags().load(Ordering::Relaxed);
    b.flags().store((f | add) & !remove, Ordering::Release);
    bump(b);
}

impl Engine {
    fn run(&mut self) {
        let mut idle = 0u32;
        while !self.stop.load(Ordering::SeqCst) {
            let worked = self.iteration();
            if worked {
                idle = 0;
                continue;
            }
            idle += 1;
            if idle < self.opts.engine_idle_iterations {
                std::thread::yield_now();
                continue;
            }
            idle = 0;
            self.sleep();
        }
        // Dying: the control sockets close with the apps.
        self.apps.clear();
        self.pending.clear();
    }

    /// One loop iteration; whether anything happened.
    fn iteration(&mut self) -> bool {
        let mut worked = self.accept_apps();
        worked |= self.control_messages();
        for a in 0..self.apps.len() {
            worked |= self.commands(a);
        }
        worked |= self.pump();
        self.wake_contexts();
        worked
    }

    fn sleep(&mut self) {
        for app in self.apps.iter().flatten() {
            app.region.engine_sleeping().store(1, Ordering::Relaxed);
        }
        fence(Ordering::SeqCst);
        let waiting = self
            .apps
            .iter()
            .flatten()
            .any(|app| app.contexts.iter().any(Ctx::has_command));
        if !waiting {
            self.stats.sleeps.fetch_add(1, Ordering::Relaxed);
            let mut fds = vec![
                pollfd(self.listener.as_raw_fd()),
                pollfd(self.wake.as_raw_fd()),
            ];
            for fd in &self.pending {
                fds.push(pollfd(fd.as_raw_fd()));
            }
            for app in self.apps.iter().flatten().filter(|app| !app.departed) {
                fds.push(pollfd(app.control.as_raw_fd()));
                fds.push(pollfd(app.doorbell.as_raw_fd()));
            }
            // A departed application's connections drain by polling, not by wake-ups.
            let timeout = if self.apps.iter().flatten().any(|app| app.departed) {
                1
            } else {
                500
            };
            // SAFETY: fds is a valid array of pollfd.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
            if n == 0 {
                let missed = self
                    .apps
                    .iter()
                    .flatten()
                    .any(|app| app.contexts.iter().any(Ctx::has_command));
                if missed {
                    self.stats.lost_wakeups.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        for app in self.apps.iter().flatten() {
            app.region.engine_sleeping().store(0, Ordering::Relaxed);
            if app.doorbell.drain() {
                self.stats.doorbell_wakeups.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.wake.drain();
    }

    fn accept_apps(&mut self) -> bool {
        let mut any = false;
        while let Ok(Some(fd)) = control::accept_app(self.listener.as_fd()) {
            self.pending.push(fd);
            any = true;
        }
        any
    }

    fn control_messages(&mut self) -> bool {
        let mut any = false;
        // Hellos.
        let mut still = Vec::new();
        for fd in std::mem::take(&mut self.pending) {
            match control::recv_message::<Request>(fd.as_fd()) {
                Ok(None) => still.push(fd),
                Ok(Some((Request::Hello { .. }, _))) => {
                    any = true;
                    self.welcome(fd);
                }
                _ => any = true, // dropped: a bad first message or a hang-up
            }
        }
        self.pending = still;
        // NewContext and hang-ups.
        for a in 0..self.apps.len() {
            let Some(app) = self.apps[a].as_mut().filter(|app| !app.departed) else {
                continue;
            };
            match control::recv_message::<Request>(app.control.as_fd()) {
                Ok(None) => {}
                Ok(Some((Request::NewContext, _))) => {
                    any = true;
                    let index = app.contexts.len() as u32;
                    if index >= self.opts.max_contexts.min(self.opts.layout.max_contexts) {
                        self.stats.contexts_refused.fetch_add(1, Ordering::Relaxed);
                        let _ = control::send_message(
                            app.control.as_fd(),
                            &Reply::Refused {
                                reason: "no more contexts".into(),
                            },
                            &[],
                        );
                        continue;
                    }
                    let eventfd = EventFd::new().unwrap();
                    let cores = 0..self.opts.layout.queue_cores;
                    let r = &app.region;
                    let ctx = Ctx {
                        index,
                        commands: cores
                            .clone()
                            .map(|k| {
                                Consumer::on_core(r.clone(), index, k, QueueKind::Command).unwrap()
                            })
                            .collect(),
                        completions: cores
                            .map(|k| {
                                Producer::on_core(r.clone(), index, k, QueueKind::Completion)
                                    .unwrap()
                            })
                            .collect(),
                        eventfd,
                    };
                    let _ = control::send_message(
                        app.control.as_fd(),
                        &Reply::Context { index },
                        &[ctx.eventfd.as_fd()],
                    );
                    app.contexts.push(ctx);
                    self.stats.contexts_created.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Some(_)) | Err(_) => {
                    any = true;
                    self.app_gone(a);
                }
            }
        }
        any
    }

    fn welcome(&mut self, fd: OwnedFd) {
        let layout = self.opts.layout;
        let region = Arc::new(Region::create("sluice-fake", layout).unwrap());
        let doorbell = EventFd::new().unwrap();
        let reply = Reply::Welcome {
            app: self.apps.len() as u32,
            layout,
            engine: EngineInfo {
                ip: ENGINE_IP,
                prefix_len: 24,
                gateway: None,
                app_idle_us: self.opts.app_idle_us,
            },
        };
        // Counted first: the application may look at the stats as soon as it is welcome.
        self.stats.apps_attached.fetch_add(1, Ordering::Relaxed);
        if control::send_message(fd.as_fd(), &reply, &[region.fd(), doorbell.as_fd()]).is_err() {
            return;
        }
        let slots = (0..layout.max_sockets).map(|_| Slot::default()).collect();
        self.apps.push(Some(App {
            control: fd,
            region,
            doorbell,
            contexts: Vec::new(),
            slots,
            changed: false,
            departed: false,
        }));
    }

    /// The application died: reset its open connections, free its ports; connections it
    /// closed gracefully still deliver what they hold, then its region is dropped.
    fn app_gone(&mut self, a: usize) {
        self.stats.apps_gone.fetch_add(1, Ordering::Relaxed);
        // What it asked before it went (its last Close commands) is carried out first, as
        // the real engine reads a context queue before the hang-up.
        while self.commands(a) {}
        let Some(app) = self.apps[a].as_mut() else {
            return;
        };
        app.departed = true;
        // What each slot was, before any is freed.
        struct Was {
            kind: Kind,
            closing: bool,
            backlog: Vec<Endpoint>,
            bound: Option<u16>,
        }
        let slots: Vec<Was> = app
            .slots
            .iter()
            .map(|slot| Was {
                kind: slot.kind.clone(),
                closing: slot.closing,
                backlog: slot.backlog.iter().copied().collect(),
                bound: slot.bound,
            })
            .collect();
        for (s, was) in slots.into_iter().enumerate() {
            let s = s as u32;
            let Was {
                kind,
                closing,
                backlog,
                bound,
            } = was;
            if let Kind::Connected { peer } = kind {
                if !closing {
                    if let Some(p) = peer {
                        self.reset_peer(p);
                    }
                    self.free((a, s));
                }
            }
            for p in backlog {
                self.reset_peer(p);
            }
            if let Some(port) = bound {
                if self.ports.get(&port) == Some(&(a, s)) {
                    self.ports.remove(&port);
                }
            }
        }
        self.drop_departed(a);
    }

    /// Drops a departed application once none of its connections is left draining.
    fn drop_departed(&mut self, a: usize) {
        let done = self.apps[a].as_ref().is_some_and(|app| {
            app.departed
                && app
                    .slots
                    .iter()
                    .all(|slot| !matches!(slot.kind, Kind::Connected { .. }))
        });
        if done {
            self.apps[a] = None;
        }
    }

    fn region(&self, a: usize) -> Arc<Region> {
        self.apps[a].as_ref().unwrap().region.clone()
    }

    fn block(&self, (a, s): Endpoint) -> Option<SocketBlock<'_>> {
        SocketBlock::new(&self.apps[a].as_ref()?.region, s)
    }

    fn slot_mut(&mut self, (a, s): Endpoint) -> Option<&mut Slot> {
        self.apps[a].as_mut()?.slots.get_mut(s as usize)
    }

    fn mark_changed(&mut self, a: usize) {
        if let Some(app) = self.apps[a].as_mut() {
            app.changed = true;
        }
    }

    /// The peer of a connection that went away is reset.
    fn reset_peer(&mut self, p: Endpoint) {
        if let Some(b) = self.block(p) {
            b.error().store(libc::ECONNRESET as u32, Ordering::Relaxed);
            set_flags(&b, flags::ERROR, flags::CONNECTED);
        }
        if let Some(slot) = self.slot_mut(p) {
            if let Kind::Connected { peer } = &mut slot.kind {
                *peer = None;
            }
        }
        self.mark_changed(p.0);
    }

    fn complete(&mut self, a: usize, (ctx, core): Lane, c: Completion) {
        let app = self.apps[a].as_mut().unwrap();
        let q = &mut app.contexts[ctx].completions[core as usize];
        assert!(q.push(&c.encode()).unwrap());
        app.changed = true;
    }

    fn commands(&mut self, a: usize) -> bool {
        let mut any = false;
        if self.apps[a].as_ref().is_some_and(|app| app.departed) {
            return false;
        }
        let n = self.apps[a].as_ref().map_or(0, |app| app.contexts.len());
        let cores = self.opts.layout.queue_cores;
        let lanes = (0..n).flat_map(|ctx| (0..cores).map(move |k| (ctx, k)));
        for (ctx, k) in lanes {
            // A bounded batch per context per iteration, as the real engine does.
            for _ in 0..32 {
                let Some(app) = self.apps[a].as_mut() else {
                    return any;
                };
                let c = &mut app.contexts[ctx];
                // Leave room to answer: never take a command whose completion cannot be posted.
                if c.completions[k as usize].free().unwrap() == 0 {
                    break;
                }
                let Some(entry) = c.commands[k as usize].pop() else {
                    break;
                };
                c.commands[k as usize].publish();
                any = true;
                self.stats.commands.fetch_add(1, Ordering::Relaxed);
                match Command::decode(&entry) {
                    Ok(cmd) if self.misrouted(&cmd, k) => {
                        self.stats.misrouted.fetch_add(1, Ordering::Relaxed);
                        if let Some(req) = cmd.req() {
                            let fail = Completion::Failed {
                                req,
                                errno: libc::EBADF,
                            };
                            self.complete(a, (ctx, k), fail);
                        }
                    }
                    Ok(cmd) => self.command(a, (ctx, k), cmd),
                    Err(_) => {
                        self.stats.bad_commands.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        any
    }

    fn ephemeral(&mut self) -> u16 {
        loop {
            let p = self.next_ephemeral;
            self.next_ephemeral = if p == u16::MAX { 40000 } else { p + 1 };
            if !self.ports.contains_key(&p) {
                return p;
            }
        }
    }

    fn kind(&self, (a, s): Endpoint) -> Option<Kind> {
        Some(self.apps[a].as_ref()?.slots.get(s as usize)?.kind.clone())
    }

    /// Whether `cmd` came on core `core`'s queue but names a slot of another core, or is a
    /// verbs/MTP doorbell off core 0.
    fn misrouted(&self, cmd: &Command, core: u32) -> bool {
        let cores = self.opts.layout.queue_cores.max(1);
        match cmd.slot() {
            Some(slot) => slot % cores != core,
            None => {
                matches!(
                    cmd,
                    Command::QpDoorbell { .. } | Command::MtpDoorbell { .. }
                ) && core != 0
            }
        }
    }

    fn command(&mut self, a: usize, ctx: Lane, cmd: Command) {
        let fail = |req, errno| Completion::Failed { req, errno };
        match cmd {
            Command::Open { req } => {
                let cores = self.opts.layout.queue_cores.max(1) as usize;
                let app = self.apps[a].as_mut().unwrap();
                // Core k allocates its own slots.
                let free = app
                    .slots
                    .iter()
                    .enumerate()
                    .position(|(i, s)| s.kind == Kind::Free && i % cores == ctx.1 as usize);
                let c = match free {
                    Some(s) => {
                        app.slots[s] = Slot {
                            kind: Kind::Open,
                            ..Slot::default()
                        };
                        SocketBlock::new(&app.region, s as u32)
                            .unwrap()
                            .reset(flags::ALLOCATED);
                        Completion::Done {
                            req,
                            slot: s as u32,
                            value: s as u32,
                        }
                    }
                    None => fail(req, libc::EMFILE),
                };
                self.complete(a, ctx, c);
            }
            Command::Bind {
                req,
                slot,
                ip,
                port,
                ..
            } => {
                let c = if self.kind((a, slot)) != Some(Kind::Open) {
                    fail(req, libc::EBADF)
                } else if ip != ENGINE_IP && !ip.is_unspecified() {
                    fail(req, libc::EADDRNOTAVAIL)
                } else if port != 0 && self.ports.contains_key(&port) {
                    fail(req, libc::EADDRINUSE)
                } else {
                    if port != 0 {
                        self.ports.insert(port, (a, slot));
                    }
                    self.slot_mut((a, slot)).unwrap().bound = Some(port);
                    Completion::Done {
                        req,
                        slot,
                        value: port as u32,
                    }
                };
                self.complete(a, ctx, c);
            }
            Command::Listen { req, slot, .. } => {
                let c = match (
                    self.kind((a, slot)),
                    self.apps[a]
                        .as_ref()
                        .unwrap()
                        .slots
                        .get(slot as usize)
                        .and_then(|s| s.bound),
                ) {
                    (Some(Kind::Open), bound) => {
                        let port = match bound {
                            Some(p) if p != 0 => p,
                            _ => {
                                let p = self.ephemeral();
                                self.ports.insert(p, (a, slot));
                                p
                            }
                        };
                        let s = self.slot_mut((a, slot)).unwrap();
                        s.bound = Some(port);
                        s.kind = Kind::Listening { port };
                        let b = self.block((a, slot)).unwrap();
                        b.set_addresses(
                            SocketAddrV4::new(ENGINE_IP, port),
                            SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
                        );
                        set_flags(&b, flags::LISTENING, 0);
                        Completion::Done {
                            req,
                            slot,
                            value: 0,
                        }
                    }
                    (Some(Kind::Listening { .. }), _) => Completion::Done {
                        req,
                        slot,
                        value: 0,
                    },
                    (None, _) | (Some(Kind::Free), _) => fail(req, libc::EBADF),
                    _ => fail(req, libc::EINVAL),
                };
                self.complete(a, ctx, c);
            }
            Command::Connect {
                req,
                slot,
                ip,
                port,
            } => {
                if self.kind((a, slot)) != Some(Kind::Open) {
                    let errno = if self.kind((a, slot)).is_none_or(|k| k == Kind::Free) {
                        libc::EBADF
                    } else {
                        libc::EISCONN
                    };
                    self.complete(a, ctx, fail(req, errno));
                    return;
                }
                let lport = match self.slot_mut((a, slot)).unwrap().bound {
                    Some(p) if p != 0 => p,
                    _ => {
                        let p = self.ephemeral();
                        self.ports.insert(p, (a, slot));
                        self.slot_mut((a, slot)).unwrap().bound = Some(p);
                        p
                    }
                };
                let local = SocketAddrV4::new(ENGINE_IP, lport);
                let remote = SocketAddrV4::new(ip, port);
                let b = self.block((a, slot)).unwrap();
                b.set_addresses(local, remote);
                set_flags(&b, flags::CONNECTING, 0);
                self.complete(
                    a,
                    ctx,
                    Completion::Done {
                        req,
                        slot,
                        value: lport as u32,
                    },
                );
                self.handshake((a, slot), local, remote);
            }
            Command::Send { slot } => {
                self.stats.sends.fetch_add(1, Ordering::Relaxed);
                if self.kind((a, slot)).is_none() {
                    self.stats.bad_commands.fetch_add(1, Ordering::Relaxed);
                }
            }
            Command::Consumed { slot } => {
                self.stats.consumed.fetch_add(1, Ordering::Relaxed);
                if let Some(s) = self.slot_mut((a, slot)) {
                    s.stalled = false;
                    let b = self.block((a, slot)).unwrap();
                    set_flags(&b, 0, flags::RX_STALLED);
                    self.mark_changed(a);
                }
            }
            Command::Shutdown { req, slot, how } => {
                let c = match self.kind((a, slot)) {
                    Some(Kind::Connected { .. }) => {
                        if how != Shut::Read {
                            self.slot_mut((a, slot)).unwrap().fin_pending = true;
                            set_flags(&self.block((a, slot)).unwrap(), flags::TX_SHUT, 0);
                        }
                        Completion::Done {
                            req,
                            slot,
                            value: 0,
                        }
                    }
                    Some(Kind::Free) | None => fail(req, libc::EBADF),
                    _ => fail(req, libc::ENOTCONN),
                };
                self.complete(a, ctx, c);
            }
            Command::Close { slot, abort } => self.close((a, slot), abort),
            Command::SetCongestion {
                req,
                slot,
                algorithm,
            } => {
                let c = match self.kind((a, slot)) {
                    Some(Kind::Free) | None => fail(req, libc::EBADF),
                    _ => {
                        self.block((a, slot)).unwrap().set_congestion(algorithm);
                        Completion::Done {
                            req,
                            slot,
                            value: 0,
                        }
                    }
                };
                self.complete(a, ctx, c);
            }
            Command::Splice {
                req,
                slot_a,
                slot_b,
            } => {
                let c = match self.splice(a, ctx, slot_a, slot_b) {
                    Ok(handle) => Completion::Done {
                        req,
                        slot: slot_a,
                        value: handle,
                    },
                    Err(errno) => fail(req, errno),
                };
                self.complete(a, ctx, c);
            }
            Command::SetNoDelay { req, slot, .. }
            | Command::SetTeardownOffload { req, slot, .. } => {
                let c = match self.kind((a, slot)) {
                    Some(Kind::Free) | None => fail(req, libc::EBADF),
                    _ => Completion::Done {
                        req,
                        slot,
                        value: 0,
                    },
                };
                self.complete(a, ctx, c);
            }
            // The fake engine has no RDMA device (no QP is ever created): a doorbell has
            // nothing to ring and no completion, as the real engine ignores one for a QP the
            // application does not own.
            Command::QpDoorbell { .. } | Command::MtpDoorbell { .. } => {}
        }
    }

    /// Connects `client` to a listener of any application, or fails it.
    fn handshake(&mut self, client: Endpoint, local: SocketAddrV4, remote: SocketAddrV4) {
        if *remote.ip() == BLACKHOLE_IP {
            self.slot_mut(client).unwrap().kind = Kind::Hanging;
            return;
        }
        let listener = self
            .ports
            .get(&remote.port())
            .copied()
            .filter(|&l| matches!(self.kind(l), Some(Kind::Listening { .. })))
            .filter(|_| *remote.ip() == ENGINE_IP);
        let server_slot = listener.and_then(|(la, _)| {
            let app = self.apps[la].as_mut()?;
            let s = app.slots.iter().position(|s| s.kind == Kind::Free)?;
            Some((la, s as u32))
        });
        let (Some(l), Some(server)) = (listener, server_slot) else {
            let b = self.block(client).unwrap();
            b.error()
                .store(libc::ECONNREFUSED as u32, Ordering::Relaxed);
            set_flags(&b, flags::ERROR | flags::CLOSED, flags::CONNECTING);
            self.slot_mut(client).unwrap().kind = Kind::Open;
            self.mark_changed(client.0);
            return;
        };
        *self.slot_mut(server).unwrap() = Slot {
            kind: Kind::Connected { peer: Some(client) },
            ..Slot::default()
        };
        let sb = self.block(server).unwrap();
        sb.reset(flags::ALLOCATED | flags::CONNECTED);
        sb.set_addresses(remote, local);
        bump(&sb);
        self.slot_mut(client).unwrap().kind = Kind::Connected { peer: Some(server) };
        set_flags(
            &self.block(client).unwrap(),
            flags::CONNECTED,
            flags::CONNECTING,
        );
        self.slot_mut(l).unwrap().backlog.push_back(server);
        self.mark_changed(client.0);
        self.mark_changed(l.0);
    }

    fn close(&mut self, e: Endpoint, abort: bool) {
        let Some(kind) = self.kind(e) else {
            self.stats.bad_commands.fetch_add(1, Ordering::Relaxed);
            return;
        };
        match kind {
            Kind::Listening { port } => {
                self.ports.remove(&port);
                let backlog = std::mem::take(&mut self.slot_mut(e).unwrap().backlog);
                for p in backlog {
                    self.reset_peer(p);
                    self.free(p);
                }
                // Accepted but not taken: their records are in the ring; reset them too.
                let b = self.block(e).unwrap();
                let (mut head, tail) = (
                    b.rx_head().load(Ordering::Acquire),
                    b.rx_tail().load(Ordering::Acquire),
                );
                let ring = self.apps[e.0]
                    .as_ref()
                    .unwrap()
                    .region
                    .ring(e.1, Dir::Rx)
                    .unwrap();
                let mut taken = Vec::new();
                while tail - head >= ACCEPT_RECORD_BYTES as u64 {
                    let mut r = [0u8; ACCEPT_RECORD_BYTES];
                    ring.read(head, &mut r);
                    taken.push(AcceptRecord::decode(&r).slot);
                    head += ACCEPT_RECORD_BYTES as u64;
                }
                for s in taken {
                    if let Some(Kind::Connected { peer: Some(p) }) = self.kind((e.0, s)) {
                        self.reset_peer(p);
                    }
                    self.free((e.0, s));
                }
                self.free(e);
            }
            Kind::Connected { peer } => {
                let b = self.block(e).unwrap();
                let unread =
                    b.rx_tail().load(Ordering::Acquire) > b.rx_head().load(Ordering::Acquire);
                if abort || unread || peer.is_none() {
                    if let Some(p) = peer {
                        self.reset_peer(p);
                    }
                    self.free(e);
                } else {
                    let s = self.slot_mut(e).unwrap();
                    s.closing = true;
                    s.fin_pending = true;
                }
            }
            _ => self.free(e),
        }
    }

    fn free(&mut self, e: Endpoint) {
        if let Some((h, _)) = self.splice_of(e) {
            self.report(h, SpliceOutcome::Closed);
        }
        let Some(slot) = self.slot_mut(e) else {
            return;
        };
        let bound = slot.bound;
        *slot = Slot::default();
        if let Some(port) = bound {
            if self.ports.get(&port) == Some(&e) {
                self.ports.remove(&port);
            }
        }
        if let Some(b) = self.block(e) {
            b.reset(0);
        }
    }

    /// Moves bytes and accept records; whether anything moved.
    fn pump(&mut self) -> bool {
        let mut any = false;
        for a in 0..self.apps.len() {
            let n = self.apps[a].as_ref().map_or(0, |app| app.slots.len());
            for s in 0..n as u32 {
                match self.kind((a, s)) {
                    Some(Kind::Connected { peer }) => any |= self.pump_connection((a, s), peer),
                    Some(Kind::Listening { .. }) => any |= self.pump_listener((a, s)),
                    _ => {}
                }
            }
            self.drop_departed(a);
        }
        any
    }

    /// Room in `e`'s RX ring, validating the application's rx_head; None if stalled.
    fn rx_room(&mut self, e: Endpoint) -> Option<u64> {
        let size = u64::from(self.opts.layout.ring_size);
        let b = self.block(e)?;
        let (head, tail) = (
            b.rx_head().load(Ordering::Acquire),
            b.rx_tail().load(Ordering::Relaxed),
        );
        let slot = self.slot_mut(e)?;
        if slot.stalled {
            return None;
        }
        assert!(
            slot.last_rx_head <= head && head <= tail,
            "libsluice moved rx_head out of bounds: {} <= {head} <= {tail}",
            slot.last_rx_head
        );
        slot.last_rx_head = head;
        Some(size - (tail - head))
    }

    /// The ring is full and more waits: RX_STALLED, then re-check (the application may have
    /// read meanwhile without seeing the flag).
    fn stall(&mut self, e: Endpoint, need: u64) -> bool {
        let b = self.block(e).unwrap();
        set_flags(&b, flags::RX_STALLED, 0);
        fence(Ordering::SeqCst);
        let size = u64::from(self.opts.layout.ring_size);
        let room =
            size - (b.rx_tail().load(Ordering::Relaxed) - b.rx_head().load(Ordering::Acquire));
        if room >= need {
            set_flags(&b, 0, flags::RX_STALLED);
            return false;
        }
        self.stats.stalls.fetch_add(1, Ordering::Relaxed);
        self.slot_mut(e).unwrap().stalled = true;
        self.mark_changed(e.0);
        true
    }

    fn pump_connection(&mut self, e: Endpoint, peer: Option<Endpoint>) -> bool {
        let size = u64::from(self.opts.layout.ring_size);
        let region = self.region(e.0);
        let b = SocketBlock::new(&region, e.1).unwrap();
        let tx_head = b.tx_head().load(Ordering::Relaxed);
        let tx_tail = b.tx_tail().load(Ordering::Acquire);
        assert!(
            tx_head <= tx_tail && tx_tail - tx_head <= size,
            "libsluice moved tx_tail out of bounds: {tx_head} <= {tx_tail} <= {tx_head} + {size}"
        );
        let avail = tx_tail - tx_head;
        let mut moved = 0;
        match peer {
            Some(p) if avail > 0 => {
                let Some(room) = self.rx_room(p) else {
                    return false;
                };
                let n = avail.min(room);
                if n > 0 {
                    let peer_region = self.region(p.0);
                    let pb = SocketBlock::new(&peer_region, p.1).unwrap();
                    let rx_tail = pb.rx_tail().load(Ordering::Relaxed);
                    let src = self.apps[e.0].as_ref().unwrap().region.clone();
                    let dst = self.apps[p.0].as_ref().unwrap().region.clone();
                    let (src, dst) = (
                        src.ring(e.1, Dir::Tx).unwrap(),
                        dst.ring(p.1, Dir::Rx).unwrap(),
                    );
                    src.with_slice(tx_head, n as usize, |bytes| dst.write(rx_tail, bytes));
                    pb.rx_tail().store(rx_tail + n, Ordering::Release);
                    bump(&pb);
                    b.tx_head().store(tx_head + n, Ordering::Release);
                    bump(&b);
                    moved = n;
                    self.stats.bytes_moved.fetch_add(n, Ordering::Relaxed);
                    if let Some((h, i)) = self.splice_of(e) {
                        self.splices.get_mut(&h).unwrap().bytes[i] += n;
                    }
                    self.mark_changed(e.0);
                    self.mark_changed(p.0);
                }
                if n < avail {
                    self.stall(p, 1);
                }
            }
            None if avail > 0 => {
                // The peer is gone: the bytes go nowhere.
                b.tx_head().store(tx_tail, Ordering::Release);
                bump(&b);
                moved = avail;
            }
            _ => {}
        }
        let drained = tx_head + moved == tx_tail;
        let slot = self.slot_mut(e).unwrap();
        if drained && slot.fin_pending && !slot.fin_sent {
            slot.fin_sent = true;
            let closing = slot.closing;
            if let Some(p) = peer {
                let peer_fin = self.slot_mut(p).is_some_and(|s| s.fin_sent);
                let pb = self.block(p).unwrap();
                set_flags(
                    &pb,
                    flags::RX_FIN | if peer_fin { flags::CLOSED } else { 0 },
                    0,
                );
                self.mark_changed(p.0);
                if let Some(Kind::Connected { peer }) = self.slot_mut(p).map(|s| &mut s.kind) {
                    if closing {
                        *peer = None;
                    }
                }
            }
            if closing {
                self.free(e);
            } else {
                self.mark_changed(e.0);
            }
            return true;
        }
        moved > 0
    }

    fn pump_listener(&mut self, l: Endpoint) -> bool {
        let mut any = false;
        loop {
            if self.slot_mut(l).unwrap().backlog.is_empty() {
                return any;
            }
            let Some(room) = self.rx_room(l) else {
                return any;
            };
            if room < ACCEPT_RECORD_BYTES as u64 {
                if self.stall(l, ACCEPT_RECORD_BYTES as u64) {
                    return any;
                }
                continue;
            }
            let server = self.slot_mut(l).unwrap().backlog.pop_front().unwrap();
            let sb = self.block(server).unwrap();
            let rec = AcceptRecord {
                slot: server.1,
                peer: sb.peer_addr(),
                local_port: sb.local_addr().port(),
            };
            let b = self.block(l).unwrap();
            let tail = b.rx_tail().load(Ordering::Relaxed);
            self.apps[l.0]
                .as_ref()
                .unwrap()
                .region
                .ring(l.1, Dir::Rx)
                .unwrap()
                .write(tail, &rec.encode());
            b.rx_tail()
                .store(tail + ACCEPT_RECORD_BYTES as u64, Ordering::Release);
            bump(&b);
            self.mark_changed(l.0);
            any = true;
        }
    }

    /// Signals the sleeping contexts of every application that something changed for.
    fn wake_contexts(&mut self) {
        for app in self.apps.iter_mut().flatten() {
            if !std::mem::take(&mut app.changed) {
                continue;
            }
            fence(Ordering::SeqCst);
            for c in &app.contexts {
                if app
                    .region
                    .context_sleeping(c.index)
                    .is_some_and(|f| f.load(Ordering::Relaxed) != 0)
                {
                    c.eventfd.signal();
                    self.stats.context_wakeups.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

impl Ctx {
    fn has_command(&self) -> bool {
        self.commands.iter().any(Consumer::has_entry)
    }
}

fn pollfd(fd: i32) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}
