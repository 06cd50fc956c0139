//! Interposed socket life-cycle calls: socket, bind, listen, connect, accept, accept4,
//! shutdown, close, close_range, getsockname, getpeername, dup, dup2, dup3, and the Rust
//! sides of fcntl and ioctl (their C entry points are in csrc/variadic.c).
//!
//! Each entry point first looks its fd up ([`lookup`]): an fd this library does not manage
//! goes to the real call at once.
#![allow(clippy::missing_safety_doc)] // C ABI entry points: libc's contracts apply.

use std::net::{Ipv4Addr, Shutdown, SocketAddrV4};
use std::sync::Arc;

use libc::{c_int, c_uint, c_ulong, sockaddr, socklen_t};
use sluice::{Error, Op, Sluice, Socket};

use crate::blocking::{Blocker, Side};
use crate::decide::{self, Decision, Engine};
use crate::file::{lookup, FdObject, Route, SockFile, Undecided, TABLE};
use crate::{epoll, guard, real, ret_int, sockaddr_in_of, write_sockaddr_in};

/// The errno of a libsluice error for a call of kind `op`.
pub fn errno_of(e: &Error, op: Op) -> c_int {
    e.errno_for(op)
}

fn pass(r: c_int) -> Result<c_int, c_int> {
    if r < 0 {
        Err(real::errno())
    } else {
        Ok(r)
    }
}

// ---- socket ----

/// socket(2): IPv4 TCP sockets are recorded as undecided (when an engine may be in use).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    // SAFETY: socket(2) takes no pointers.
    let fd = unsafe { real::socket(domain, ty, protocol) };
    if fd >= 0 && decide::tracks_socket(domain, ty, protocol) && decide::engine_possible() {
        guard("socket", (), || {
            let nonblocking = ty & libc::SOCK_NONBLOCK != 0;
            let obj = Arc::new(FdObject::Sock(SockFile::undecided(nonblocking)));
            if TABLE.insert(fd, obj).is_err() {
                crate::log_once!(
                    "socket fd {fd} is beyond the managed range: it stays with the kernel"
                );
            }
        });
    }
    fd
}

// ---- deciding ----

/// Turns an undecided socket into an engine socket: opens the libsluice socket and carries
/// over what was set on the kernel socket. Returns the socket and the epoll registrations
/// to move (done by the caller once the undecided lock is released).
fn make_engine<'a>(
    fd: c_int,
    sf: &'a SockFile,
    und: &mut Undecided,
    sluice: &Arc<Sluice>,
) -> Result<(&'a Socket, Vec<crate::file::PendingEpoll>), c_int> {
    let sock = Socket::open(sluice).map_err(|e| errno_of(&e, Op::Open))?;
    let (opts, applied) = sf.carried_options(fd);
    opts.apply(&applied, &sock);
    if let Some(algorithm) = und.congestion {
        if let Err(e) = sock.set_congestion(algorithm) {
            crate::log_debug!("TCP_CONGESTION {algorithm} on a new engine socket: {e}");
        }
    }
    if und
        .teardown_offload
        .unwrap_or_else(decide::teardown_offload_env)
    {
        if let Err(e) = sock.set_teardown_offload(true) {
            crate::log_debug!("teardown offload on a new engine socket: {e}");
        }
    }
    let pending = std::mem::take(&mut und.epolls);
    Ok((sf.set_engine(sock, opts), pending))
}

/// Hands an undecided socket to the kernel for good: it leaves the table (fast path from
/// now on; dups still pointing at it route to the kernel too).
fn make_kernel(obj: &Arc<FdObject>, fd: c_int, sf: &SockFile, und: &mut Undecided) {
    sf.set_kernel();
    und.epolls.clear();
    drop(TABLE.remove_if(fd, obj));
}

/// The attachment, for a decision that needs one.
fn engine_for(needed: bool) -> Engine<Arc<Sluice>> {
    if needed {
        decide::attachment()
    } else {
        Engine::NotConfigured
    }
}

fn attached(e: &Engine<Arc<Sluice>>) -> &Arc<Sluice> {
    match e {
        Engine::Attached(s) => s,
        _ => unreachable!("an engine decision implies an attachment"),
    }
}

// ---- bind / listen / connect ----

/// bind(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let Some(obj) = lookup(fd) else {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::bind(fd, addr, len) };
    };
    guard("bind", -1, || {
        // SAFETY: addr is the caller's, valid for len bytes.
        ret_int(unsafe { bind_managed(&obj, fd, addr, len) })
    })
}

unsafe fn bind_managed(
    obj: &Arc<FdObject>,
    fd: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> Result<c_int, c_int> {
    // SAFETY: forwarded.
    let real_bind = || pass(unsafe { real::bind(fd, addr, len) });
    match obj.route() {
        Route::Stale => Err(libc::EBADF),
        Route::Engine(_, s) => {
            // SAFETY: forwarded.
            let a = unsafe { sockaddr_in_of(addr, len) }?;
            s.bind(a).map_err(|e| errno_of(&e, Op::Open))?;
            Ok(0)
        }
        Route::Kernel => {
            let Some(sf) = obj.as_sock().filter(|s| s.is_undecided()) else {
                return real_bind();
            };
            // SAFETY: forwarded.
            let Ok(a) = (unsafe { sockaddr_in_of(addr, len) }) else {
                // Not an IPv4 address: the kernel gives the right error.
                return real_bind();
            };
            let mut und = sf.undecided_state();
            if let Some(s) = sf.socket() {
                drop(und);
                s.bind(a).map_err(|e| errno_of(&e, Op::Open))?;
                return Ok(0);
            }
            if sf.is_kernel() {
                drop(und);
                return real_bind();
            }
            if und.bound_any {
                return Err(libc::EINVAL);
            }
            let engine = engine_for(decide::bind_may_use_engine(*a.ip()));
            match decide::on_bind(*a.ip(), a.port(), &engine) {
                Decision::Kernel => {
                    make_kernel(obj, fd, sf, &mut und);
                    drop(und);
                    crate::log_debug!("fd {fd}: bind {a} stays with the kernel");
                    real_bind()
                }
                Decision::Refuse(e) => Err(e),
                Decision::Defer => {
                    und.bound_any = true;
                    Ok(0)
                }
                Decision::Engine => {
                    let (s, pending) = make_engine(fd, sf, &mut und, attached(&engine))?;
                    drop(und);
                    epoll::migrate(obj, pending);
                    crate::log_debug!("fd {fd}: engine socket (bind {a})");
                    s.bind(a).map_err(|e| errno_of(&e, Op::Open))?;
                    Ok(0)
                }
            }
        }
    }
}

/// listen(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    let Some(obj) = lookup(fd) else {
        // SAFETY: no pointers.
        return unsafe { real::listen(fd, backlog) };
    };
    guard("listen", -1, || ret_int(listen_managed(&obj, fd, backlog)))
}

fn listen_managed(obj: &Arc<FdObject>, fd: c_int, backlog: c_int) -> Result<c_int, c_int> {
    // SAFETY: no pointers.
    let real_listen = || pass(unsafe { real::listen(fd, backlog) });
    let backlog_u = backlog.clamp(1, 65535) as u32;
    match obj.route() {
        Route::Stale => Err(libc::EBADF),
        Route::Engine(_, s) => s
            .listen(backlog_u)
            .map(|()| 0)
            .map_err(|e| errno_of(&e, Op::Open)),
        Route::Kernel => {
            let Some(sf) = obj.as_sock().filter(|s| s.is_undecided()) else {
                return real_listen();
            };
            let mut und = sf.undecided_state();
            if let Some(s) = sf.socket() {
                drop(und);
                return s
                    .listen(backlog_u)
                    .map(|()| 0)
                    .map_err(|e| errno_of(&e, Op::Open));
            }
            if sf.is_kernel() {
                drop(und);
                return real_listen();
            }
            let engine = engine_for(true);
            match decide::on_listen(&engine) {
                Decision::Engine => {
                    let (s, pending) = make_engine(fd, sf, &mut und, attached(&engine))?;
                    drop(und);
                    epoll::migrate(obj, pending);
                    crate::log_debug!("fd {fd}: engine socket (listen without an address)");
                    s.listen(backlog_u)
                        .map(|()| 0)
                        .map_err(|e| errno_of(&e, Op::Open))
                }
                Decision::Refuse(e) => Err(e),
                Decision::Kernel | Decision::Defer => {
                    make_kernel(obj, fd, sf, &mut und);
                    drop(und);
                    real_listen()
                }
            }
        }
    }
}

/// connect(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let Some(obj) = lookup(fd) else {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::connect(fd, addr, len) };
    };
    guard("connect", -1, || {
        // SAFETY: addr is the caller's, valid for len bytes.
        ret_int(unsafe { connect_managed(&obj, fd, addr, len) })
    })
}

unsafe fn connect_managed(
    obj: &Arc<FdObject>,
    fd: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> Result<c_int, c_int> {
    // SAFETY: forwarded.
    let real_connect = || pass(unsafe { real::connect(fd, addr, len) });
    let engine_connect = |s: &Socket, a: SocketAddrV4| {
        connect_engine(s, a)
            .map(|()| 0)
            .map_err(|e| errno_of(&e, Op::Open))
    };
    match obj.route() {
        Route::Stale => Err(libc::EBADF),
        Route::Engine(_, s) => {
            // SAFETY: forwarded.
            let a = unsafe { sockaddr_in_of(addr, len) }?;
            engine_connect(s, a)
        }
        Route::Kernel => {
            let Some(sf) = obj.as_sock().filter(|s| s.is_undecided()) else {
                return real_connect();
            };
            // SAFETY: forwarded.
            let Ok(a) = (unsafe { sockaddr_in_of(addr, len) }) else {
                // AF_UNSPEC (dissolve) or a foreign family: the kernel's business.
                return real_connect();
            };
            let mut und = sf.undecided_state();
            if let Some(s) = sf.socket() {
                drop(und);
                return engine_connect(s, a);
            }
            if sf.is_kernel() {
                drop(und);
                return real_connect();
            }
            let engine = engine_for(decide::connect_may_use_engine(*a.ip()));
            match decide::on_connect(*a.ip(), &engine) {
                Decision::Engine => {
                    let (s, pending) = make_engine(fd, sf, &mut und, attached(&engine))?;
                    drop(und);
                    epoll::migrate(obj, pending);
                    crate::log_debug!("fd {fd}: engine socket (connect {a})");
                    engine_connect(s, a)
                }
                Decision::Refuse(e) => Err(e),
                Decision::Kernel | Decision::Defer => {
                    make_kernel(obj, fd, sf, &mut und);
                    drop(und);
                    crate::log_debug!("fd {fd}: connect {a} stays with the kernel");
                    real_connect()
                }
            }
        }
    }
}

/// connect on an engine socket. A blocking one starts the handshake without blocking,
/// then waits here, where a signal ends the wait ([`Blocker`]): EINTR (the handshake goes
/// on; a later connect waits for it again), EINPROGRESS when SO_SNDTIMEO passes.
fn connect_engine(s: &Socket, a: SocketAddrV4) -> Result<(), Error> {
    if s.is_nonblocking() {
        return s.connect(a);
    }
    s.set_nonblocking(true);
    let started = s.connect(a);
    s.set_nonblocking(false);
    match started {
        // Started now, or by an earlier connect that a signal interrupted.
        Err(Error::InProgress) | Err(Error::Os(libc::EALREADY)) => {}
        r => return r,
    }
    let settled = || {
        let r = s.readiness();
        r.writable || r.error || r.hup || s.is_connected()
    };
    Blocker::new(s, Side::Write)
        .run(
            || {
                if !settled() {
                    return Ok(None);
                }
                // The outcome: connected (EISCONN from the second call) or the error.
                match s.connect(a) {
                    Ok(()) | Err(Error::Os(libc::EISCONN)) => Ok(Some(())),
                    Err(e) => Err(e),
                }
            },
            settled,
        )
        .map_err(|e| match e {
            Error::WouldBlock => Error::InProgress,
            e => e,
        })
}

// ---- accept ----

/// accept(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    let Some(obj) = lookup(fd) else {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::accept(fd, addr, len) };
    };
    guard("accept", -1, || {
        // SAFETY: addr/len are the caller's.
        ret_int(unsafe { accept_managed(&obj, fd, addr, len, 0, false) })
    })
}

/// accept4(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    let Some(obj) = lookup(fd) else {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::accept4(fd, addr, len, flags) };
    };
    guard("accept4", -1, || {
        // SAFETY: addr/len are the caller's.
        ret_int(unsafe { accept_managed(&obj, fd, addr, len, flags, true) })
    })
}

unsafe fn accept_managed(
    obj: &Arc<FdObject>,
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
    is4: bool,
) -> Result<c_int, c_int> {
    let (sf, s) = match obj.route() {
        Route::Stale => return Err(libc::EBADF),
        Route::Kernel => {
            // SAFETY: the caller's arguments, unchanged.
            return pass(unsafe {
                if is4 {
                    real::accept4(fd, addr, len, flags)
                } else {
                    real::accept(fd, addr, len)
                }
            });
        }
        Route::Engine(sf, s) => (sf, s),
    };
    if flags & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) != 0 {
        return Err(libc::EINVAL);
    }
    if !s.is_listener() {
        return Err(libc::EINVAL);
    }
    let (conn, peer) = if s.is_nonblocking() {
        s.accept()
    } else {
        // Wait here, where a signal ends the wait; then the record is there (unless another
        // thread took it meanwhile: then libsluice's own wait).
        let readable = || s.readiness().readable;
        Blocker::new(s, Side::Read).run(
            || {
                if readable() {
                    s.accept().map(Some)
                } else {
                    Ok(None)
                }
            },
            readable,
        )
    }
    .map_err(|e| errno_of(&e, Op::Read))?;
    // The placeholder: a real, never-used TCP socket, so the fd number is reserved and
    // fstat/S_ISSOCK/F_GETFD look right; it carries the close-on-exec flag asked for.
    let placeholder = real::new_socket(
        libc::AF_INET,
        libc::SOCK_STREAM | (flags & (libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK)),
        0,
    );
    if placeholder < 0 {
        let e = real::errno();
        // The connection cannot be given a descriptor: reset it rather than leave it open.
        conn.set_linger(Some(std::time::Duration::ZERO));
        drop(conn);
        return Err(e);
    }
    conn.set_nonblocking(flags & libc::SOCK_NONBLOCK != 0);
    let opts = *sf.options();
    opts.inherit(s, &conn);
    if TABLE
        .insert(
            placeholder,
            Arc::new(FdObject::Sock(SockFile::engine(conn, opts))),
        )
        .is_err()
    {
        real::close_fd(placeholder);
        crate::log_once!("accepted connection's fd is beyond the managed range: EMFILE");
        return Err(libc::EMFILE);
    }
    // SAFETY: addr/len are the caller's (null allowed).
    unsafe { write_sockaddr_in(addr, len, peer) }?;
    crate::log_debug!("fd {fd}: accepted {peer} as fd {placeholder}");
    Ok(placeholder)
}

// ---- shutdown / close ----

/// shutdown(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    let Some(obj) = lookup(fd) else {
        // SAFETY: no pointers.
        return unsafe { real::shutdown(fd, how) };
    };
    guard("shutdown", -1, || {
        ret_int(match obj.route() {
            Route::Stale => Err(libc::EBADF),
            // SAFETY: no pointers.
            Route::Kernel => pass(unsafe { real::shutdown(fd, how) }),
            Route::Engine(_, s) => {
                let how = match how {
                    libc::SHUT_RD => Shutdown::Read,
                    libc::SHUT_WR => Shutdown::Write,
                    libc::SHUT_RDWR => Shutdown::Both,
                    _ => return ret_int(Err(libc::EINVAL)),
                };
                s.shutdown(how)
                    .map(|()| 0)
                    .map_err(|e| errno_of(&e, Op::Write))
            }
        })
    })
}

/// close(2): the engine socket is released when its last descriptor is closed.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if TABLE.is_tracked(fd) {
        // Forget first, then close: once the kernel frees the number another thread may
        // get it, and its new object must not be the one we remove.
        guard("close", (), || drop(TABLE.remove(fd)));
    }
    // SAFETY: no pointers.
    unsafe { real::close(fd) }
}

/// close_range(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        guard("close_range", (), || {
            let end = last.min(crate::fdtable::MAX_FDS as c_uint - 1);
            for fd in first..=end {
                if TABLE.is_tracked(fd as c_int) {
                    drop(TABLE.remove(fd as c_int));
                }
            }
        });
    }
    // SAFETY: no pointers.
    unsafe { real::close_range(first, last, flags) }
}

// ---- names ----

unsafe fn name_call(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, peer: bool) -> c_int {
    // SAFETY: the caller's arguments, unchanged.
    let real_call = || unsafe {
        if peer {
            real::getpeername(fd, addr, len)
        } else {
            real::getsockname(fd, addr, len)
        }
    };
    let Some(obj) = lookup(fd) else {
        return real_call();
    };
    guard(if peer { "getpeername" } else { "getsockname" }, -1, || {
        ret_int(match obj.route() {
            Route::Stale => Err(libc::EBADF),
            Route::Kernel => pass(real_call()),
            Route::Engine(_, s) => {
                if addr.is_null() || len.is_null() {
                    return ret_int(Err(libc::EFAULT));
                }
                let a = if peer {
                    s.peer_addr().map_err(|e| errno_of(&e, Op::Read))
                } else {
                    Ok(s.local_addr()
                        .unwrap_or(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)))
                };
                // SAFETY: addr/len are the caller's, non-null.
                a.and_then(|a| unsafe { write_sockaddr_in(addr, len, a) })
                    .map(|()| 0)
            }
        })
    })
}

/// getsockname(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: forwarded.
    unsafe { name_call(fd, addr, len, false) }
}

/// getpeername(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: forwarded.
    unsafe { name_call(fd, addr, len, true) }
}

// ---- dup ----

/// Makes `new` (just created by the kernel as a copy of `old`'s placeholder) refer to
/// `old`'s object too.
fn share(obj: Arc<FdObject>, new: c_int) -> Result<c_int, c_int> {
    match TABLE.insert(new, obj) {
        Ok(prev) => {
            drop(prev);
            Ok(new)
        }
        Err(_) => {
            real::close_fd(new);
            crate::log_once!("dup'd fd {new} is beyond the managed range: EMFILE");
            Err(libc::EMFILE)
        }
    }
}

/// dup(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    let Some(obj) = lookup(fd) else {
        // SAFETY: no pointers.
        return unsafe { real::dup(fd) };
    };
    guard("dup", -1, || {
        // SAFETY: no pointers.
        let new = unsafe { real::dup(fd) };
        if new < 0 {
            return -1;
        }
        ret_int(share(obj, new))
    })
}

fn dup_onto(old: c_int, new: c_int, r: c_int, obj: Option<Arc<FdObject>>) -> Result<c_int, c_int> {
    if r < 0 {
        return Err(real::errno());
    }
    if old == new {
        return Ok(r);
    }
    match obj {
        Some(o) => share(o, new),
        None => {
            // `new` was silently closed by dup2: forget what it was.
            drop(TABLE.remove(new));
            Ok(r)
        }
    }
}

/// dup2(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    let obj = lookup(old);
    if obj.is_none() && !TABLE.is_tracked(new) {
        // SAFETY: no pointers.
        return unsafe { real::dup2(old, new) };
    }
    guard("dup2", -1, || {
        // SAFETY: no pointers.
        let r = unsafe { real::dup2(old, new) };
        ret_int(dup_onto(old, new, r, obj))
    })
}

/// dup3(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    let obj = lookup(old);
    if obj.is_none() && !TABLE.is_tracked(new) {
        // SAFETY: no pointers.
        return unsafe { real::dup3(old, new, flags) };
    }
    guard("dup3", -1, || {
        // SAFETY: no pointers.
        let r = unsafe { real::dup3(old, new, flags) };
        ret_int(dup_onto(old, new, r, obj))
    })
}

// ---- fcntl / ioctl (called from csrc/variadic.c) ----

/// The Rust side of fcntl/fcntl64.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sluice_preload_fcntl(
    fd: c_int,
    cmd: c_int,
    arg: c_ulong,
    is64: c_int,
) -> c_int {
    // SAFETY: the caller's arguments, unchanged.
    let real_call = || unsafe { real::fcntl(fd, cmd, arg, is64 != 0) };
    let Some(obj) = lookup(fd) else {
        return real_call();
    };
    guard("fcntl", -1, || match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            let new = real_call();
            if new < 0 {
                return -1;
            }
            ret_int(share(obj.clone(), new))
        }
        libc::F_GETFL | libc::F_SETFL => match obj.route() {
            Route::Stale => ret_int(Err(libc::EBADF)),
            Route::Kernel => {
                if cmd == libc::F_SETFL {
                    obj.touch();
                }
                real_call()
            }
            Route::Engine(_, s) => {
                if cmd == libc::F_SETFL {
                    s.set_nonblocking(arg as c_int & libc::O_NONBLOCK != 0);
                    // Other status flags (O_ASYNC, ...) live on the placeholder.
                    return real_call();
                }
                let flags = real_call();
                if flags < 0 {
                    return flags;
                }
                let nb = if s.is_nonblocking() {
                    libc::O_NONBLOCK
                } else {
                    0
                };
                (flags & !libc::O_NONBLOCK) | nb
            }
        },
        // Descriptor flags (FD_CLOEXEC), locks, owners...: the placeholder's.
        _ => real_call(),
    })
}

/// The Rust side of ioctl.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sluice_preload_ioctl(fd: c_int, request: c_ulong, arg: c_ulong) -> c_int {
    // SAFETY: the caller's arguments, unchanged.
    let real_call = || unsafe { real::ioctl(fd, request, arg) };
    let Some(obj) = lookup(fd) else {
        return real_call();
    };
    guard("ioctl", -1, || {
        let Route::Engine(_, s) = obj.route() else {
            if request == libc::FIONBIO {
                obj.touch();
            }
            return if matches!(obj.route(), Route::Stale)
                && matches!(request, libc::FIONBIO | libc::FIONREAD)
            {
                ret_int(Err(libc::EBADF))
            } else {
                real_call()
            };
        };
        let p = arg as *mut c_int;
        match request {
            libc::FIONBIO => {
                if p.is_null() {
                    return ret_int(Err(libc::EFAULT));
                }
                // SAFETY: FIONBIO's argument is a pointer to int.
                s.set_nonblocking(unsafe { p.read_unaligned() } != 0);
                0
            }
            libc::FIONREAD => {
                if p.is_null() {
                    return ret_int(Err(libc::EFAULT));
                }
                let n = s.available().min(c_int::MAX as usize) as c_int;
                // SAFETY: FIONREAD's argument is a pointer to int.
                unsafe { p.write_unaligned(n) };
                0
            }
            libc::TIOCOUTQ => {
                if p.is_null() {
                    return ret_int(Err(libc::EFAULT));
                }
                crate::log_once!("SIOCOUTQ on an engine socket reports 0 (the engine does not export its send queue)");
                // SAFETY: SIOCOUTQ's argument is a pointer to int.
                unsafe { p.write_unaligned(0) };
                0
            }
            _ => real_call(),
        }
    })
}
