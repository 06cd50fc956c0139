//! What a managed descriptor refers to: an IPv4 TCP socket (undecided, or an engine socket),
//! or an epoll instance that may hold engine sockets.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use libc::c_int;
use sluice::Socket;

use crate::epoll_set::EpollSet;
use crate::fdtable::{FdTable, MAX_FDS};
use crate::generation::generation;
use crate::sockopt::{Applied, Options};

/// Every managed descriptor of the process.
pub static TABLE: FdTable<FdObject, MAX_FDS> = FdTable::new();

/// A managed descriptor's object (shared by its dups).
// Each object is one Arc allocation already; boxing the socket would add a pointer chase
// to every call on an engine socket.
#[allow(clippy::large_enum_variant)]
pub enum FdObject {
    /// An IPv4 TCP socket.
    Sock(SockFile),
    /// An epoll instance.
    Epoll(EpollFile),
}

/// An epoll registration made while the socket was undecided (kept in the kernel's epoll
/// set on the placeholder); moved to the userspace set if the socket becomes an engine one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingEpoll {
    /// The epoll descriptor.
    pub epfd: i32,
    /// The fd it was registered under.
    pub fd: i32,
    /// Its events.
    pub events: u32,
    /// Its data.
    pub data: u64,
}

/// What an undecided socket remembers until it is decided.
#[derive(Default)]
pub struct Undecided {
    /// bind(0.0.0.0, 0) was called and deferred (listen or connect decides).
    pub bound_any: bool,
    /// Registrations in kernel epoll sets.
    pub epolls: Vec<PendingEpoll>,
    /// TCP_CONGESTION set while undecided, for the engine socket it may become (the kernel
    /// socket got it too, if the kernel has that algorithm).
    pub congestion: Option<sluice::Congestion>,
    /// Teardown offload asked for while undecided (the kernel has no such option).
    pub teardown_offload: Option<bool>,
}

/// An IPv4 TCP socket: its kernel placeholder is the fd; its engine side, once decided.
pub struct SockFile {
    /// Fork generation it was created in (a child's inherited sockets are stale).
    generation: u32,
    engine: OnceLock<Socket>,
    kernel: AtomicBool,
    /// Made with SOCK_NONBLOCK.
    created_nonblocking: bool,
    /// An option, status flag or FIONBIO was set on the undecided kernel socket: its state
    /// must be read back when it becomes an engine socket (otherwise Linux's defaults hold,
    /// and the twenty getsockopt calls of a snapshot are saved on every new connection).
    touched: AtomicBool,
    undecided: Mutex<Undecided>,
    opts: Mutex<Options>,
}

/// Where a call on a managed socket goes.
pub enum Route<'a> {
    /// The kernel (undecided or kernel-decided socket, or not a socket).
    Kernel,
    /// The engine socket.
    Engine(&'a SockFile, &'a Socket),
    /// Inherited from the parent across fork: EBADF for everything but close.
    Stale,
}

impl SockFile {
    /// A new undecided socket (`nonblocking`: made with SOCK_NONBLOCK).
    pub fn undecided(nonblocking: bool) -> SockFile {
        SockFile {
            generation: generation(),
            engine: OnceLock::new(),
            kernel: AtomicBool::new(false),
            created_nonblocking: nonblocking,
            touched: AtomicBool::new(false),
            undecided: Mutex::new(Undecided::default()),
            opts: Mutex::new(Options::default()),
        }
    }

    /// An engine socket from birth (an accepted connection).
    pub fn engine(sock: Socket, opts: Options) -> SockFile {
        let f = SockFile {
            generation: generation(),
            engine: OnceLock::new(),
            kernel: AtomicBool::new(false),
            created_nonblocking: false,
            touched: AtomicBool::new(false),
            undecided: Mutex::new(Undecided::default()),
            opts: Mutex::new(opts),
        };
        let _ = f.engine.set(sock);
        f
    }

    /// Whether it was created in this process (not inherited across fork).
    pub fn is_current(&self) -> bool {
        self.generation == generation()
    }

    /// The engine socket, if decided so.
    pub fn socket(&self) -> Option<&Socket> {
        self.engine.get()
    }

    /// Whether it was decided for the kernel.
    pub fn is_kernel(&self) -> bool {
        self.kernel.load(Ordering::Acquire)
    }

    /// The undecided state (locked while a decision is made).
    pub fn undecided_state(&self) -> MutexGuard<'_, Undecided> {
        self.undecided.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that the program changed the undecided kernel socket's options or flags.
    pub fn touch(&self) {
        self.touched.store(true, Ordering::Relaxed);
    }

    /// The options to carry over to its engine socket: read back from kernel socket `fd`
    /// if the program changed any, else Linux's defaults (and SOCK_NONBLOCK).
    pub fn carried_options(&self, fd: i32) -> (Options, Applied) {
        if self.touched.load(Ordering::Relaxed) {
            Options::snapshot(fd)
        } else {
            let applied = Applied {
                nonblocking: self.created_nonblocking,
                ..Default::default()
            };
            (Options::default(), applied)
        }
    }

    /// Whether it is still undecided in this process (an undecided socket inherited across
    /// fork stays the kernel's in the child: its lock may be held by a vanished thread).
    pub fn is_undecided(&self) -> bool {
        self.is_current() && !self.is_kernel() && self.socket().is_none()
    }

    /// Marks it decided for the kernel.
    pub fn set_kernel(&self) {
        self.kernel.store(true, Ordering::Release);
    }

    /// Makes it an engine socket (called once, under the undecided lock).
    pub fn set_engine(&self, sock: Socket, opts: Options) -> &Socket {
        *self.options() = opts;
        // Under the undecided lock a second set cannot happen; if it did, keep the first.
        let _ = self.engine.set(sock);
        self.engine.get().expect("just set")
    }

    /// The remembered options.
    pub fn options(&self) -> MutexGuard<'_, Options> {
        self.opts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// An epoll instance: its kernel descriptor is the fd; engine registrations live here
/// (the calls that use them are in epoll.rs).
pub struct EpollFile {
    generation: u32,
    set: Mutex<EpollSet<FdObject>>,
    /// How many engine registrations (a hint kept after each change: 0 means the real
    /// epoll_wait alone is enough).
    engine_regs: AtomicUsize,
    /// At least how many kernel descriptors are registered in the real instance (closing a
    /// descriptor removes it without our knowing, so this may be too high, never too low;
    /// [`UNKNOWN`] for an instance inherited across fork). While 0, the wait loop skips its
    /// `epoll_wait(real, 0)` system call.
    kernel_regs: AtomicUsize,
}

/// The kernel registrations of an instance inherited across fork are not known.
const UNKNOWN: usize = usize::MAX / 2;

impl EpollFile {
    /// A new, empty instance.
    pub fn new() -> EpollFile {
        EpollFile {
            generation: generation(),
            set: Mutex::new(EpollSet::default()),
            engine_regs: AtomicUsize::new(0),
            kernel_regs: AtomicUsize::new(0),
        }
    }

    /// A new, empty instance standing in for one inherited across fork: the parent's
    /// engine registrations are not the child's, and its kernel ones are not known.
    pub(crate) fn inherited() -> EpollFile {
        let fresh = EpollFile::new();
        fresh.kernel_regs.store(UNKNOWN, Ordering::Release);
        fresh
    }

    /// Counts a successful EPOLL_CTL_ADD/DEL of a kernel descriptor.
    pub(crate) fn count_kernel(&self, op: c_int) {
        match op {
            libc::EPOLL_CTL_ADD => {
                self.kernel_regs.fetch_add(1, Ordering::AcqRel);
            }
            libc::EPOLL_CTL_DEL => {
                let _ = self
                    .kernel_regs
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                        Some(n.saturating_sub(1))
                    });
            }
            _ => {}
        }
    }

    /// Whether kernel descriptors may be registered in the real instance.
    pub(crate) fn may_have_kernel_regs(&self) -> bool {
        self.kernel_regs.load(Ordering::Acquire) > 0
    }

    /// Whether it was created in this process (not inherited across fork).
    pub(crate) fn is_current(&self) -> bool {
        self.generation == generation()
    }

    /// The engine registrations, locked.
    pub(crate) fn lock(&self) -> MutexGuard<'_, EpollSet<FdObject>> {
        self.set.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether it holds engine registrations in this process.
    pub(crate) fn has_engine_regs(&self) -> bool {
        self.is_current() && self.engine_regs.load(Ordering::Acquire) > 0
    }

    /// Refreshes the engine-registration hint after a change to `set`.
    pub(crate) fn update_hint(&self, set: &mut EpollSet<FdObject>) {
        self.engine_regs.store(set.len(), Ordering::Release);
    }
}

impl Default for EpollFile {
    fn default() -> Self {
        EpollFile::new()
    }
}

impl FdObject {
    /// Where calls on this object go.
    pub fn route(&self) -> Route<'_> {
        match self {
            // An inherited engine socket belongs to the parent; an inherited undecided or
            // kernel socket is a plain kernel socket the child may use.
            FdObject::Sock(s) if !s.is_current() && s.socket().is_some() => Route::Stale,
            FdObject::Sock(s) if !s.is_current() => Route::Kernel,
            FdObject::Sock(s) => match s.socket() {
                Some(sock) => Route::Engine(s, sock),
                None => Route::Kernel,
            },
            FdObject::Epoll(_) => Route::Kernel,
        }
    }

    /// Notes a change the program made through the kernel to an undecided socket.
    pub fn touch(&self) {
        if let FdObject::Sock(s) = self {
            if s.socket().is_none() {
                s.touch();
            }
        }
    }

    /// The socket, if this is one.
    pub fn as_sock(&self) -> Option<&SockFile> {
        match self {
            FdObject::Sock(s) => Some(s),
            FdObject::Epoll(_) => None,
        }
    }
}

/// Looks `fd` up: None for every descriptor this library does not manage (lock-free).
#[inline]
pub fn lookup(fd: i32) -> Option<Arc<FdObject>> {
    TABLE.get(fd)
}
