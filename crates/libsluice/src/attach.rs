//! Attaching to the engine: the control socket, the region, the doorbell, and the
//! per-thread contexts (docs/service.md "Attach").

use std::cell::RefCell;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use sluice_shm::control::{
    self, EngineInfo, Reply, Request, DEFAULT_SOCKET, PROTOCOL_VERSION, SOCKET_ENV,
};
use sluice_shm::{EventFd, Layout, Region, ShmError};

use crate::context::ContextSlot;
use crate::error::Error;
use crate::fork;
use crate::lock::lock;

/// How long a control request (Hello, NewContext) may wait for the engine's reply: a hung
/// engine must not hang the application forever.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);

/// Tells each attachment apart (thread caches are keyed by it).
static NEXT_ATTACHMENT: AtomicU64 = AtomicU64::new(1);

/// A process's attachment to the engine. Send + Sync; shared through an `Arc`.
pub struct Sluice {
    id: u64,
    /// The fork generation this attachment was made under (see [`crate::after_fork_child`]).
    generation: u64,
    control: OwnedFd,
    /// Serializes request/reply pairs on the control socket (NewContext from many threads).
    control_lock: Mutex<()>,
    pub(crate) region: Arc<Region>,
    pub(crate) layout: Layout,
    doorbell: EventFd,
    engine: EngineInfo,
    app: u32,
    alive: AtomicBool,
    contexts: Arc<ContextPool>,
    /// The round robin that picks the engine core of each `Open` (flow_group.rs).
    pub(crate) next_open_core: AtomicU32,
    /// The verbs' notification pipes (opened by the first pipe-mode QP).
    pub(crate) verbs_pipes: std::sync::OnceLock<crate::verbs::pipes::Pipes>,
}

impl std::fmt::Debug for Sluice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sluice")
            .field("app", &self.app)
            .field("engine", &self.engine)
            .field("layout", &self.layout)
            .field("alive", &self.is_alive())
            .finish_non_exhaustive()
    }
}

impl Sluice {
    /// The verbs' notification pipes of this attachment, opened on first use.
    pub(crate) fn pipes(&self) -> &crate::verbs::pipes::Pipes {
        self.verbs_pipes
            .get_or_init(|| crate::verbs::pipes::Pipes::new(self.region.clone()))
    }

    /// Attaches to the engine listening at `path`.
    pub fn attach(path: &Path) -> Result<Arc<Sluice>, Error> {
        let control = control::connect_to(path).map_err(|e| match e {
            // The socket file's mode (0660 in the engine's group) keeps other users out before
            // the engine sees them: the same refusal as the engine's own, so EACCES too.
            ShmError::Sys { err, .. } if matches!(err as i32, libc::EACCES | libc::EPERM) => {
                Error::Denied(format!(
                    "{}: cannot connect to {} (not in the engine's group?)",
                    control::ACCESS_DENIED,
                    path.display()
                ))
            }
            e => Error::Shm(e),
        })?;
        set_receive_timeout(&control, CONTROL_TIMEOUT);
        let hello = Request::Hello {
            version: PROTOCOL_VERSION,
            pid: std::process::id(),
            name: program_name(),
        };
        control::send_message(control.as_fd(), &hello, &[]).map_err(Error::Shm)?;
        let (reply, mut fds) = control::recv_message::<Reply>(control.as_fd())
            .map_err(Error::Shm)?
            .ok_or_else(|| Error::Shm(ShmError::Protocol("no reply to Hello".into())))?;
        let (app, layout, engine) = match reply {
            Reply::Welcome {
                app,
                layout,
                engine,
            } => (app, layout, engine),
            Reply::Refused { reason } if reason.starts_with(control::ACCESS_DENIED) => {
                return Err(Error::Denied(reason))
            }
            Reply::Refused { reason } if reason.starts_with(control::QUOTA_EXCEEDED) => {
                return Err(Error::Quota(reason))
            }
            Reply::Refused { reason } => {
                return Err(Error::Shm(ShmError::Protocol(format!(
                    "the engine refused: {reason}"
                ))))
            }
            other => {
                return Err(Error::Shm(ShmError::Protocol(format!(
                    "expected Welcome, got {other:?}"
                ))))
            }
        };
        if fds.len() != 2 {
            return Err(Error::Shm(ShmError::Protocol(format!(
                "Welcome carried {} descriptors, expected 2",
                fds.len()
            ))));
        }
        let doorbell = EventFd::from_owned(fds.pop().expect("two descriptors"));
        let region = Arc::new(Region::open(fds.pop().expect("two descriptors"), layout)?);
        let generation = fork::generation();
        fork::track_control(control.as_raw_fd());
        Ok(Arc::new(Sluice {
            id: NEXT_ATTACHMENT.fetch_add(1, Ordering::Relaxed),
            generation,
            control,
            control_lock: Mutex::new(()),
            region,
            layout,
            doorbell,
            engine,
            app,
            alive: AtomicBool::new(true),
            contexts: Arc::new(ContextPool {
                generation,
                free: Mutex::new(Vec::new()),
                all: Mutex::new(Vec::new()),
                next_shared: AtomicUsize::new(0),
            }),
            next_open_core: AtomicU32::new(0),
            verbs_pipes: std::sync::OnceLock::new(),
        }))
    }

    /// Attaches to the engine named by `$SLUICE_SOCKET`, or at `/run/sluice/engine.sock`.
    pub fn attach_from_env() -> Result<Arc<Sluice>, Error> {
        Sluice::attach(&socket_path_from_env())
    }

    /// What the engine told about itself.
    pub fn engine(&self) -> &EngineInfo {
        &self.engine
    }

    /// The application's id in the engine (as the engine logs it).
    pub fn app_id(&self) -> u32 {
        self.app
    }

    /// The shared region's layout (ring size, socket and context limits).
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Whether a connection to `ip` goes through the engine: the engine's own subnet, or any
    /// non-loopback address when the engine has a gateway. Loopback never does.
    pub fn routes(&self, ip: Ipv4Addr) -> bool {
        routes(&self.engine, ip)
    }

    /// Whether `ip` is an address a socket may bind through the engine (its address or 0.0.0.0).
    pub fn owns(&self, ip: Ipv4Addr) -> bool {
        ip == self.engine.ip || ip.is_unspecified()
    }

    /// False once the engine hung up (noticed by a thread that slept, or by a failed request).
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire) && !self.inherited()
    }

    /// Whether this attachment was inherited across fork (then nothing of it may be used).
    pub fn is_inherited(&self) -> bool {
        self.inherited()
    }

    pub(crate) fn inherited(&self) -> bool {
        self.generation != fork::generation()
    }

    /// Fails with EBADF in a forked child (see [`crate::after_fork_child`]).
    pub(crate) fn usable(&self) -> Result<(), Error> {
        if self.inherited() {
            Err(Error::Os(libc::EBADF))
        } else {
            Ok(())
        }
    }

    /// Records that the engine is gone; every later call fails cleanly.
    pub(crate) fn mark_dead(&self) {
        self.alive.store(false, Ordering::Release);
    }

    /// Checks the control socket for a hang-up (a system call: slow paths only).
    pub(crate) fn check_alive(&self) -> bool {
        if self.alive.load(Ordering::Acquire) && control::peer_gone(self.control.as_fd()) {
            self.mark_dead();
        }
        self.is_alive()
    }

    /// The control socket, for poll(2) while sleeping.
    pub(crate) fn control_fd(&self) -> i32 {
        self.control.as_raw_fd()
    }

    /// Wakes the engine if it sleeps, after commands were posted (docs/service.md
    /// "Sleeping and waking"): the fence orders our queue writes before the flag's read, and
    /// pairs with the engine's fence between setting the flag and re-checking the queues.
    pub(crate) fn ring_doorbell(&self) {
        fence(Ordering::SeqCst);
        if self.region.engine_sleeping().load(Ordering::Relaxed) != 0 {
            self.doorbell.signal();
        }
    }

    /// Wakes the engine unconditionally (a full command queue: it must drain it).
    pub(crate) fn ring_doorbell_always(&self) {
        self.doorbell.signal();
    }

    /// Runs `f` with the calling thread's context, creating one on first use.
    ///
    /// Contexts are cached per thread (keyed by attachment) and go back to a pool when the
    /// thread exits. Where the thread cache cannot be used (re-entered, or being destroyed
    /// at thread exit) a pooled context serves the one call.
    pub(crate) fn with_context<R>(
        &self,
        f: impl FnOnce(&ContextSlot) -> Result<R, Error>,
    ) -> Result<R, Error> {
        self.usable()?;
        let mut f = Some(f);
        let cached = CACHE.try_with(|cache| {
            if let Ok(c) = cache.try_borrow() {
                if let Some(e) = c.iter().find(|e| e.attachment == self.id) {
                    let f = f.take().expect("called once");
                    return Some(f(&e.ctx));
                }
            }
            let ctx = match self.acquire_context() {
                Ok(ctx) => ctx,
                Err(e) => return Some(Err(e)),
            };
            let f = f.take().expect("called once");
            match cache.try_borrow_mut() {
                Ok(mut c) => {
                    // Forget contexts of attachments that are gone.
                    c.retain(|e| e.pool.strong_count() > 0);
                    c.push(Cached {
                        attachment: self.id,
                        ctx: ctx.clone(),
                        pool: Arc::downgrade(&self.contexts),
                    });
                    drop(c);
                    Some(f(&ctx))
                }
                Err(_) => {
                    let r = f(&ctx);
                    self.contexts.release(ctx);
                    Some(r)
                }
            }
        });
        match (cached, f) {
            (Ok(Some(r)), _) => r,
            (_, Some(f)) => {
                // The thread's cache is being torn down (a socket closed by another
                // thread-local's destructor): borrow a context for this call only.
                let ctx = self.acquire_context()?;
                let r = f(&ctx);
                self.contexts.release(ctx);
                r
            }
            (_, None) => Err(Error::Os(libc::EIO)),
        }
    }

    /// The context with region index `index` (every context the attachment got is kept).
    pub(crate) fn context_arc(&self, index: u32) -> Option<Arc<ContextSlot>> {
        lock(&self.contexts.all)
            .iter()
            .find(|c| c.index == index)
            .cloned()
    }

    /// A context for the calling thread: a pooled one, a new one from the engine, or (when
    /// the engine has no more) one shared with other threads.
    fn acquire_context(&self) -> Result<Arc<ContextSlot>, Error> {
        if let Some(ctx) = lock(&self.contexts.free).pop() {
            ctx.users.store(1, Ordering::Relaxed);
            return Ok(ctx);
        }
        match self.new_context() {
            Ok(ctx) => {
                lock(&self.contexts.all).push(ctx.clone());
                Ok(ctx)
            }
            Err(Error::Os(libc::EMFILE)) => {
                // The engine's max_contexts are in use: share one (its queues are behind a
                // lock; sleepers on a shared context sleep in bounded slices, see wait.rs).
                let all = lock(&self.contexts.all);
                if all.is_empty() {
                    return Err(Error::Os(libc::EMFILE));
                }
                let i = self.contexts.next_shared.fetch_add(1, Ordering::Relaxed) % all.len();
                let ctx = all[i].clone();
                ctx.users.fetch_add(1, Ordering::Relaxed);
                Ok(ctx)
            }
            Err(e) => Err(e),
        }
    }

    /// Sends `req` with descriptors `fds` on the control socket and reads the reply, under the
    /// process-wide control lock (request/reply pairs never interleave between threads).
    pub(crate) fn control_call(
        &self,
        req: &Request,
        fds: &[std::os::fd::BorrowedFd<'_>],
    ) -> Result<(Reply, Vec<OwnedFd>), Error> {
        self.usable()?;
        if !self.is_alive() {
            return Err(Error::EngineGone);
        }
        let _serial = lock(&self.control_lock);
        let sent = control::send_message(self.control.as_fd(), req, fds);
        match sent.and_then(|()| control::recv_message::<Reply>(self.control.as_fd())) {
            Ok(Some(r)) => Ok(r),
            Ok(None) => Err(Error::Os(libc::EIO)),
            Err(ShmError::Disconnected) => {
                self.mark_dead();
                Err(Error::EngineGone)
            }
            Err(e) => Err(Error::Shm(e)),
        }
    }

    /// Asks the engine for a new context (NewContext on the control socket).
    fn new_context(&self) -> Result<Arc<ContextSlot>, Error> {
        if !self.is_alive() {
            return Err(Error::EngineGone);
        }
        let _serial = lock(&self.control_lock);
        let sent = control::send_message(self.control.as_fd(), &Request::NewContext, &[]);
        let reply = sent.and_then(|()| control::recv_message::<Reply>(self.control.as_fd()));
        let (reply, mut fds) = match reply {
            Ok(Some(r)) => r,
            Ok(None) => return Err(Error::Os(libc::EIO)),
            Err(ShmError::Disconnected) => {
                self.mark_dead();
                return Err(Error::EngineGone);
            }
            Err(e) => return Err(Error::Shm(e)),
        };
        match reply {
            Reply::Context { index } if fds.len() == 1 => {
                let eventfd = EventFd::from_owned(fds.pop().expect("one descriptor"));
                ContextSlot::new(self.region.clone(), index, eventfd)
                    .ok_or(Error::Shm(ShmError::Protocol(format!(
                        "context index {index} out of range"
                    ))))
                    .map(Arc::new)
            }
            Reply::Refused { .. } => Err(Error::Os(libc::EMFILE)),
            other => Err(Error::Shm(ShmError::Protocol(format!(
                "expected Context, got {other:?} with {} descriptors",
                fds.len()
            )))),
        }
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        // Before the descriptor closes (its number may then be reused).
        fork::untrack_control(self.control.as_raw_fd());
    }
}

/// The socket path from `$SLUICE_SOCKET`, or the default.
pub fn socket_path_from_env() -> PathBuf {
    std::env::var_os(SOCKET_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
}

/// See [`Sluice::routes`].
pub(crate) fn routes(engine: &EngineInfo, ip: Ipv4Addr) -> bool {
    if ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() || ip.is_broadcast() {
        return false;
    }
    let prefix = u32::from(engine.prefix_len.min(32));
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    (u32::from(ip) & mask) == (u32::from(engine.ip) & mask) || engine.gateway.is_some()
}

fn program_name() -> String {
    std::env::args_os()
        .next()
        .and_then(|a| {
            Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "app".into())
}

fn set_receive_timeout(fd: &OwnedFd, t: Duration) {
    let tv = libc::timeval {
        tv_sec: t.as_secs() as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: setsockopt reads size_of::<timeval>() bytes from &tv, which lives across the
    // call; fd is an open socket we own. Failure only leaves the socket without a timeout.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
    }
}

/// The contexts of one attachment that no thread holds, and all it ever got.
pub(crate) struct ContextPool {
    generation: u64,
    free: Mutex<Vec<Arc<ContextSlot>>>,
    all: Mutex<Vec<Arc<ContextSlot>>>,
    next_shared: AtomicUsize,
}

impl ContextPool {
    /// A thread is done with `ctx`: the last user returns it to the pool.
    fn release(&self, ctx: Arc<ContextSlot>) {
        // In a forked child the pool's lock may have been held by a parent thread that does
        // not exist here: never take it (the inherited attachment is dead anyway).
        if self.generation != fork::generation() {
            return;
        }
        if ctx.users.fetch_sub(1, Ordering::AcqRel) == 1 {
            lock(&self.free).push(ctx);
        }
    }
}

/// A thread's context for one attachment.
struct Cached {
    attachment: u64,
    ctx: Arc<ContextSlot>,
    pool: Weak<ContextPool>,
}

impl Drop for Cached {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.release(self.ctx.clone());
        }
    }
}

thread_local! {
    /// The calling thread's contexts, one per attachment (usually one).
    static CACHE: RefCell<Vec<Cached>> = const { RefCell::new(Vec::new()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(gateway: Option<Ipv4Addr>) -> EngineInfo {
        EngineInfo {
            ip: Ipv4Addr::new(10, 77, 0, 1),
            prefix_len: 24,
            gateway,
            app_idle_us: 10,
        }
    }

    #[test]
    fn the_engine_routes_its_subnet_and_with_a_gateway_everything_but_loopback() {
        let e = engine(None);
        assert!(routes(&e, Ipv4Addr::new(10, 77, 0, 2)));
        assert!(routes(&e, Ipv4Addr::new(10, 77, 0, 1)));
        assert!(!routes(&e, Ipv4Addr::new(10, 78, 0, 2)));
        assert!(!routes(&e, Ipv4Addr::LOCALHOST));
        let g = engine(Some(Ipv4Addr::new(10, 77, 0, 254)));
        assert!(routes(&g, Ipv4Addr::new(192, 0, 2, 1)));
        assert!(!routes(&g, Ipv4Addr::new(127, 1, 2, 3)));
        assert!(!routes(&g, Ipv4Addr::UNSPECIFIED));
        assert!(!routes(&g, Ipv4Addr::new(224, 0, 0, 1)));
        let all = EngineInfo {
            prefix_len: 0,
            ..engine(None)
        };
        assert!(routes(&all, Ipv4Addr::new(8, 8, 8, 8)));
    }

    #[test]
    fn the_env_names_the_socket() {
        // Only the default can be checked without racing other tests on the environment.
        if std::env::var_os(SOCKET_ENV).is_none() {
            assert_eq!(socket_path_from_env(), PathBuf::from(DEFAULT_SOCKET));
        }
    }
}
