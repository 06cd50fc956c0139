//! When a socket becomes an engine socket, and the process's one attachment to the engine.
//!
//! `socket(AF_INET, SOCK_STREAM, 0|IPPROTO_TCP)` makes a real kernel socket that is
//! *undecided*: everything set on it goes to the kernel. The first bind, listen or connect
//! decides:
//!
//! - bind to loopback, or connect to loopback or 0.0.0.0 (which Linux treats as loopback):
//!   kernel, without ever contacting the engine;
//! - otherwise the engine is attached (lazily, once): bind to an address the engine owns
//!   (its own, or 0.0.0.0) and connect to an address it routes go through the engine; other
//!   addresses stay with the kernel;
//! - bind to 0.0.0.0 port 0 says nothing yet (a client picking a source port): the decision
//!   waits for listen (engine) or connect (by destination);
//! - no engine configured (`SLUICE_SOCKET` unset and nothing at the default socket): kernel;
//!   `SLUICE_SOCKET` set but the engine unreachable: the call fails with ECONNREFUSED,
//!   because a user who asked for the engine must not silently get Linux; refused by the
//!   engine (a uid outside its group): EACCES, with one log line saying so.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, Ordering};
use std::sync::Arc;

use sluice::Sluice;

/// Whether `socket(domain, ty, protocol)` makes a socket the engine may take over: IPv4
/// TCP (`ty` may carry SOCK_NONBLOCK/SOCK_CLOEXEC).
pub fn tracks_socket(domain: i32, ty: i32, protocol: i32) -> bool {
    domain == libc::AF_INET
        && ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) == libc::SOCK_STREAM
        && (protocol == 0 || protocol == libc::IPPROTO_TCP)
}

/// What the engine says about addresses (implemented by [`Sluice`]; faked in tests).
pub trait Routing {
    /// Whether a socket may bind `ip` through the engine.
    fn owns(&self, ip: Ipv4Addr) -> bool;
    /// Whether a connection to `ip` goes through the engine.
    fn routes(&self, ip: Ipv4Addr) -> bool;
}

impl Routing for Sluice {
    fn owns(&self, ip: Ipv4Addr) -> bool {
        Sluice::owns(self, ip)
    }
    fn routes(&self, ip: Ipv4Addr) -> bool {
        Sluice::routes(self, ip)
    }
}

impl<R: Routing + ?Sized> Routing for Arc<R> {
    fn owns(&self, ip: Ipv4Addr) -> bool {
        (**self).owns(ip)
    }
    fn routes(&self, ip: Ipv4Addr) -> bool {
        (**self).routes(ip)
    }
}

/// The state of the process's attachment, as a decision sees it.
pub enum Engine<R> {
    /// No engine configured: sockets stay with the kernel.
    NotConfigured,
    /// `SLUICE_SOCKET` names an engine that cannot be reached.
    Unreachable,
    /// `SLUICE_SOCKET` names an engine that refuses this process: permission denied
    /// (EACCES) or its uid's quota of applications (EAGAIN); engine sockets fail with it.
    Refused(i32),
    /// Attached.
    Attached(R),
}

/// Where a socket goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The kernel (the socket leaves the table).
    Kernel,
    /// The engine.
    Engine,
    /// Not yet (bind to 0.0.0.0:0): listen or connect decides.
    Defer,
    /// Fail the call with this errno.
    Refuse(i32),
}

/// Whether a bind to `ip` could go through the engine (if not, no need to attach).
pub fn bind_may_use_engine(ip: Ipv4Addr) -> bool {
    !ip.is_loopback() && !ip.is_multicast() && !ip.is_broadcast()
}

/// Whether a connect to `ip` could go through the engine (if not, no need to attach).
pub fn connect_may_use_engine(ip: Ipv4Addr) -> bool {
    !ip.is_loopback() && !ip.is_unspecified() && !ip.is_multicast() && !ip.is_broadcast()
}

/// The decision for `bind(ip, port)` on an undecided socket.
pub fn on_bind<R: Routing>(ip: Ipv4Addr, port: u16, engine: &Engine<R>) -> Decision {
    if !bind_may_use_engine(ip) {
        return Decision::Kernel;
    }
    match engine {
        Engine::NotConfigured => Decision::Kernel,
        Engine::Unreachable => Decision::Refuse(libc::ECONNREFUSED),
        Engine::Refused(errno) => Decision::Refuse(*errno),
        Engine::Attached(_) if ip.is_unspecified() && port == 0 => Decision::Defer,
        Engine::Attached(r) if r.owns(ip) => Decision::Engine,
        Engine::Attached(_) => Decision::Kernel,
    }
}

/// The decision for `connect(ip)` on an undecided socket (bound to 0.0.0.0:0 at most).
pub fn on_connect<R: Routing>(ip: Ipv4Addr, engine: &Engine<R>) -> Decision {
    if !connect_may_use_engine(ip) {
        return Decision::Kernel;
    }
    match engine {
        Engine::NotConfigured => Decision::Kernel,
        Engine::Unreachable => Decision::Refuse(libc::ECONNREFUSED),
        Engine::Refused(errno) => Decision::Refuse(*errno),
        Engine::Attached(r) if r.routes(ip) => Decision::Engine,
        Engine::Attached(_) => Decision::Kernel,
    }
}

/// The decision for `listen` on an undecided socket (never bound, or bound to 0.0.0.0:0):
/// Linux would listen on 0.0.0.0 with an ephemeral port, which the engine owns.
pub fn on_listen<R: Routing>(engine: &Engine<R>) -> Decision {
    match engine {
        Engine::NotConfigured => Decision::Kernel,
        Engine::Unreachable => Decision::Refuse(libc::ECONNREFUSED),
        Engine::Refused(errno) => Decision::Refuse(*errno),
        Engine::Attached(r) if r.owns(Ipv4Addr::UNSPECIFIED) => Decision::Engine,
        Engine::Attached(_) => Decision::Kernel,
    }
}

// ---- the process's attachment ----

/// The attachment (an `Arc::into_raw`), or null. Never freed while the process runs: a
/// dead attachment (the engine restarted) is replaced and leaked, so a concurrent reader
/// cloning it can never see it freed. One per engine restart is a bounded leak.
static ATTACHED: AtomicPtr<Sluice> = AtomicPtr::new(std::ptr::null_mut());
/// Cached knowledge: 0 = ask, 1 = nothing configured (no `SLUICE_SOCKET`, and no engine
/// at the default socket the one time we looked).
static NOT_CONFIGURED: AtomicU8 = AtomicU8::new(0);
/// Serialises attach attempts (an attempt takes a round trip to the engine).
static ATTACHING: AtomicBool = AtomicBool::new(false);

/// Whether the user asked for the engine explicitly (`SLUICE_SOCKET` set and non-empty).
fn required() -> bool {
    // SAFETY: getenv with a NUL-terminated name; only the first byte is looked at, at once.
    let v = unsafe { libc::getenv(c"SLUICE_SOCKET".as_ptr()) };
    // SAFETY: a non-null result points to a NUL-terminated string.
    !v.is_null() && unsafe { *v } != 0
}

/// Whether `SLUICE_TEARDOWN_OFFLOAD` asks for teardown offload on every engine socket
/// (set and neither empty nor "0"); read once.
pub fn teardown_offload_env() -> bool {
    static CACHED: AtomicU8 = AtomicU8::new(0);
    match CACHED.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            // SAFETY: getenv with a NUL-terminated name; the first two bytes of the
            // NUL-terminated value are looked at, at once.
            let v = unsafe { libc::getenv(c"SLUICE_TEARDOWN_OFFLOAD".as_ptr()) };
            // SAFETY: a non-null result points to a NUL-terminated string.
            let on = !v.is_null()
                && unsafe { *v != 0 && !(*v == b'0' as libc::c_char && *v.add(1) == 0) };
            CACHED.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
    }
}

/// Whether an engine may be in use at all: false once it is known that none is configured
/// (no `SLUICE_SOCKET` and nothing at the default socket), so that pass-through programs
/// do not even record their sockets.
pub fn engine_possible() -> bool {
    if NOT_CONFIGURED.load(Ordering::Relaxed) == 1 {
        return false;
    }
    if required() || std::path::Path::new(sluice_shm::control::DEFAULT_SOCKET).exists() {
        return true;
    }
    NOT_CONFIGURED.store(1, Ordering::Relaxed);
    false
}

fn current() -> Option<Arc<Sluice>> {
    let p = ATTACHED.load(Ordering::Acquire);
    if p.is_null() {
        return None;
    }
    // SAFETY: p came from Arc::into_raw and its count is never given back (see ATTACHED).
    unsafe {
        Arc::increment_strong_count(p);
        Some(Arc::from_raw(p))
    }
}

/// The process's attachment, attaching on first use (and again if the engine went away).
pub fn attachment() -> Engine<Arc<Sluice>> {
    if let Some(s) = current() {
        if s.is_alive() {
            return Engine::Attached(s);
        }
    }
    if NOT_CONFIGURED.load(Ordering::Relaxed) == 1 {
        return Engine::NotConfigured;
    }
    let required = required();
    if !required && !std::path::Path::new(sluice_shm::control::DEFAULT_SOCKET).exists() {
        NOT_CONFIGURED.store(1, Ordering::Relaxed);
        crate::log_debug!(
            "no SLUICE_SOCKET and no engine socket: every socket stays with the kernel"
        );
        return Engine::NotConfigured;
    }
    let mut spins = 0u32;
    while ATTACHING
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spins += 1;
        if spins < 100 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
    let result = attach_locked(required);
    ATTACHING.store(false, Ordering::Release);
    result
}

fn attach_locked(required: bool) -> Engine<Arc<Sluice>> {
    // Another thread may have attached while we waited.
    if let Some(s) = current() {
        if s.is_alive() {
            return Engine::Attached(s);
        }
    }
    match Sluice::attach_from_env() {
        Ok(s) => {
            let info = s.engine();
            crate::log_debug!(
                "attached to the engine at {}/{} (pid {})",
                info.ip,
                info.prefix_len,
                std::process::id()
            );
            // The previous (dead) attachment, if any, is leaked on purpose (see ATTACHED).
            ATTACHED.store(Arc::into_raw(s.clone()) as *mut Sluice, Ordering::Release);
            Engine::Attached(s)
        }
        Err(e @ (sluice::Error::Denied(_) | sluice::Error::Quota(_))) if required => {
            let errno = e.errno();
            crate::log_once!(
                "{e}; engine sockets fail with {}",
                std::io::Error::from_raw_os_error(errno)
            );
            Engine::Refused(errno)
        }
        Err(e) if required => {
            crate::log_once!(
                "cannot attach to the Sluice engine ($SLUICE_SOCKET): {e}; engine sockets fail with ECONNREFUSED"
            );
            Engine::Unreachable
        }
        Err(e) => {
            crate::log_debug!(
                "no engine at the default socket ({e}): sockets stay with the kernel"
            );
            NOT_CONFIGURED.store(1, Ordering::Relaxed);
            Engine::NotConfigured
        }
    }
}

/// In a fork child: forget the parent's attachment (the child attaches afresh when it
/// needs to) and release the attach lock, whose holder may not exist in the child.
pub fn after_fork_child() {
    ATTACHED.store(std::ptr::null_mut(), Ordering::Release);
    ATTACHING.store(false, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An engine at 10.77.0.1/24 without a gateway.
    struct Lab;
    impl Routing for Lab {
        fn owns(&self, ip: Ipv4Addr) -> bool {
            ip == Ipv4Addr::new(10, 77, 0, 1) || ip.is_unspecified()
        }
        fn routes(&self, ip: Ipv4Addr) -> bool {
            ip.octets()[..3] == [10, 77, 0] && !ip.is_loopback()
        }
    }

    const ENGINE: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
    const PEER: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
    const ELSEWHERE: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 7);

    #[test]
    fn only_ipv4_tcp_is_tracked() {
        assert!(tracks_socket(libc::AF_INET, libc::SOCK_STREAM, 0));
        assert!(tracks_socket(
            libc::AF_INET,
            libc::SOCK_STREAM,
            libc::IPPROTO_TCP
        ));
        assert!(tracks_socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0
        ));
        assert!(!tracks_socket(libc::AF_INET6, libc::SOCK_STREAM, 0));
        assert!(!tracks_socket(libc::AF_UNIX, libc::SOCK_STREAM, 0));
        assert!(!tracks_socket(libc::AF_INET, libc::SOCK_DGRAM, 0));
        assert!(!tracks_socket(
            libc::AF_INET,
            libc::SOCK_STREAM,
            libc::IPPROTO_SCTP
        ));
        assert!(!tracks_socket(
            libc::AF_INET,
            libc::SOCK_RAW,
            libc::IPPROTO_TCP
        ));
    }

    #[test]
    fn bind_decisions() {
        let e = Engine::Attached(Lab);
        assert_eq!(on_bind(ENGINE, 80, &e), Decision::Engine);
        assert_eq!(on_bind(Ipv4Addr::UNSPECIFIED, 80, &e), Decision::Engine);
        assert_eq!(on_bind(Ipv4Addr::UNSPECIFIED, 0, &e), Decision::Defer);
        assert_eq!(on_bind(Ipv4Addr::LOCALHOST, 80, &e), Decision::Kernel);
        assert_eq!(on_bind(ELSEWHERE, 80, &e), Decision::Kernel);
    }

    #[test]
    fn connect_decisions() {
        let e = Engine::Attached(Lab);
        assert_eq!(on_connect(PEER, &e), Decision::Engine);
        assert_eq!(on_connect(Ipv4Addr::LOCALHOST, &e), Decision::Kernel);
        assert_eq!(
            on_connect(Ipv4Addr::new(127, 1, 2, 3), &e),
            Decision::Kernel
        );
        assert_eq!(on_connect(Ipv4Addr::UNSPECIFIED, &e), Decision::Kernel);
        assert_eq!(on_connect(ELSEWHERE, &e), Decision::Kernel);
        assert_eq!(on_listen(&e), Decision::Engine);
    }

    #[test]
    fn without_an_engine_everything_is_kernel() {
        let e: Engine<Lab> = Engine::NotConfigured;
        assert_eq!(on_bind(ENGINE, 80, &e), Decision::Kernel);
        assert_eq!(on_bind(Ipv4Addr::UNSPECIFIED, 0, &e), Decision::Kernel);
        assert_eq!(on_connect(PEER, &e), Decision::Kernel);
        assert_eq!(on_listen(&e), Decision::Kernel);
    }

    #[test]
    fn an_unreachable_engine_refuses_but_loopback_still_works() {
        let e: Engine<Lab> = Engine::Unreachable;
        assert_eq!(
            on_bind(ENGINE, 80, &e),
            Decision::Refuse(libc::ECONNREFUSED)
        );
        assert_eq!(on_connect(PEER, &e), Decision::Refuse(libc::ECONNREFUSED));
        assert_eq!(on_listen(&e), Decision::Refuse(libc::ECONNREFUSED));
        assert_eq!(on_bind(Ipv4Addr::LOCALHOST, 80, &e), Decision::Kernel);
        assert_eq!(on_connect(Ipv4Addr::LOCALHOST, &e), Decision::Kernel);
    }

    #[test]
    fn a_refusing_engine_is_eacces_but_loopback_still_works() {
        let e: Engine<Lab> = Engine::Refused(libc::EACCES);
        assert_eq!(on_bind(ENGINE, 8080, &e), Decision::Refuse(libc::EACCES));
        assert_eq!(on_connect(PEER, &e), Decision::Refuse(libc::EACCES));
        assert_eq!(on_listen(&e), Decision::Refuse(libc::EACCES));
        assert_eq!(on_bind(Ipv4Addr::LOCALHOST, 80, &e), Decision::Kernel);
        assert_eq!(on_connect(Ipv4Addr::LOCALHOST, &e), Decision::Kernel);
    }

    #[test]
    fn an_engine_at_its_quota_is_eagain() {
        let e: Engine<Lab> = Engine::Refused(libc::EAGAIN);
        assert_eq!(on_bind(ENGINE, 8080, &e), Decision::Refuse(libc::EAGAIN));
        assert_eq!(on_connect(PEER, &e), Decision::Refuse(libc::EAGAIN));
        assert_eq!(on_listen(&e), Decision::Refuse(libc::EAGAIN));
    }
}
