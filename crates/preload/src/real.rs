//! The real libc functions behind the ones this library interposes.
//!
//! Each is looked up once with `dlsym(RTLD_NEXT, name)` (the next definition after this
//! library in the search order: libc's) and cached in an atomic, so the cost per call after
//! the first is one relaxed load and an indirect call. Nothing here allocates or locks after
//! the lookup, which matters because these run inside every interposed call, including the
//! ones Rust's std and libsluice make themselves. A symbol the C library lacks (an old glibc
//! without epoll_pwait2 or close_range) makes the call fail with ENOSYS, as the kernel would.
//!
//! Functions this library does not interpose (pread, pthread_sigmask, ...) are called
//! through the `libc` crate directly.

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{
    c_int, c_uint, c_ulong, c_void, epoll_event, fd_set, iovec, mmsghdr, msghdr, nfds_t, off64_t,
    off_t, pollfd, sigset_t, size_t, sockaddr, socklen_t, ssize_t, timespec, timeval,
};

/// A cached symbol address; 0 = not looked up yet, 1 = looked up and missing.
const MISSING: usize = 1;

/// Looks `name` up with dlsym(RTLD_NEXT) unless cached; None if the C library lacks it.
fn resolve(slot: &AtomicUsize, name: &CStr) -> Option<usize> {
    let cached = slot.load(Ordering::Relaxed);
    if cached > MISSING {
        return Some(cached);
    }
    if cached == MISSING {
        return None;
    }
    // SAFETY: dlsym with the RTLD_NEXT pseudo-handle and a NUL-terminated name only reads
    // the loader's tables. Races are benign: every thread stores the same address.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    let value = if p > MISSING { p } else { MISSING };
    slot.store(value, Ordering::Relaxed);
    (value > MISSING).then_some(value)
}

/// Sets errno for the calling thread.
pub fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns the calling thread's errno, always valid.
    unsafe { *libc::__errno_location() = e }
}

/// The calling thread's errno.
pub fn errno() -> c_int {
    // SAFETY: as in set_errno.
    unsafe { *libc::__errno_location() }
}

macro_rules! real_fns {
    ($( $(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty; )*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// The same contract as the libc function of this name.
        pub unsafe fn $name($($arg: $ty),*) -> $ret {
            static SLOT: AtomicUsize = AtomicUsize::new(0);
            let name = concat!(stringify!($name), "\0");
            // SAFETY: the literal above ends with exactly one NUL.
            let cname = unsafe { CStr::from_bytes_with_nul_unchecked(name.as_bytes()) };
            match resolve(&SLOT, cname) {
                Some(addr) => {
                    type Real = unsafe extern "C" fn($($ty),*) -> $ret;
                    // SAFETY: addr is libc's definition of this symbol, whose C prototype
                    // is the signature written here (taken from the libc crate).
                    let f = unsafe { std::mem::transmute::<usize, Real>(addr) };
                    // SAFETY: the caller upholds the function's contract.
                    unsafe { f($($arg),*) }
                }
                None => {
                    set_errno(libc::ENOSYS);
                    <$ret>::from(-1i8)
                }
            }
        }
    )*};
}

real_fns! {
    /// socket(2).
    fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int;
    /// bind(2).
    fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int;
    /// listen(2).
    fn listen(fd: c_int, backlog: c_int) -> c_int;
    /// accept(2).
    fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
    /// accept4(2).
    fn accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int;
    /// connect(2).
    fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int;
    /// read(2).
    fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t;
    /// write(2).
    fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t;
    /// readv(2).
    fn readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t;
    /// writev(2).
    fn writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t;
    /// send(2).
    fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t;
    /// recv(2).
    fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t;
    /// sendto(2).
    fn sendto(fd: c_int, buf: *const c_void, n: size_t, flags: c_int,
              addr: *const sockaddr, len: socklen_t) -> ssize_t;
    /// recvfrom(2).
    fn recvfrom(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int,
                addr: *mut sockaddr, len: *mut socklen_t) -> ssize_t;
    /// sendmsg(2).
    fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t;
    /// recvmsg(2).
    fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t;
    /// sendmmsg(2).
    fn sendmmsg(fd: c_int, msgs: *mut mmsghdr, n: c_uint, flags: c_int) -> c_int;
    /// recvmmsg(2).
    fn recvmmsg(fd: c_int, msgs: *mut mmsghdr, n: c_uint, flags: c_int,
                timeout: *mut timespec) -> c_int;
    /// shutdown(2).
    fn shutdown(fd: c_int, how: c_int) -> c_int;
    /// close(2).
    fn close(fd: c_int) -> c_int;
    /// close_range(2) (glibc 2.34+).
    fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int;
    /// getsockname(2).
    fn getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
    /// getpeername(2).
    fn getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
    /// getsockopt(2).
    fn getsockopt(fd: c_int, level: c_int, name: c_int, val: *mut c_void,
                  len: *mut socklen_t) -> c_int;
    /// setsockopt(2).
    fn setsockopt(fd: c_int, level: c_int, name: c_int, val: *const c_void,
                  len: socklen_t) -> c_int;
    /// poll(2).
    fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int;
    /// ppoll(2).
    fn ppoll(fds: *mut pollfd, n: nfds_t, timeout: *const timespec,
             mask: *const sigset_t) -> c_int;
    /// select(2).
    fn select(n: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set,
              timeout: *mut timeval) -> c_int;
    /// pselect(2).
    fn pselect(n: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set,
               timeout: *const timespec, mask: *const sigset_t) -> c_int;
    /// epoll_create(2).
    fn epoll_create(size: c_int) -> c_int;
    /// epoll_create1(2).
    fn epoll_create1(flags: c_int) -> c_int;
    /// epoll_ctl(2).
    fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, ev: *mut epoll_event) -> c_int;
    /// epoll_wait(2).
    fn epoll_wait(epfd: c_int, evs: *mut epoll_event, max: c_int, timeout: c_int) -> c_int;
    /// epoll_pwait(2).
    fn epoll_pwait(epfd: c_int, evs: *mut epoll_event, max: c_int, timeout: c_int,
                   mask: *const sigset_t) -> c_int;
    /// epoll_pwait2(2) (glibc 2.35+).
    fn epoll_pwait2(epfd: c_int, evs: *mut epoll_event, max: c_int, timeout: *const timespec,
                    mask: *const sigset_t) -> c_int;
    /// dup(2).
    fn dup(fd: c_int) -> c_int;
    /// dup2(2).
    fn dup2(old: c_int, new: c_int) -> c_int;
    /// dup3(2).
    fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int;
    /// sendfile(2).
    fn sendfile(out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t;
    /// sendfile64 (sendfile with a 64-bit offset: the same call on 64-bit Linux).
    fn sendfile64(out: c_int, inp: c_int, off: *mut off64_t, n: size_t) -> ssize_t;
    /// splice(2).
    fn splice(fd_in: c_int, off_in: *mut off64_t, fd_out: c_int, off_out: *mut off64_t,
              n: size_t, flags: c_uint) -> ssize_t;
    /// _FORTIFY_SOURCE's checked read.
    fn __read_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t) -> ssize_t;
    /// _FORTIFY_SOURCE's checked recv.
    fn __recv_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t,
                  flags: c_int) -> ssize_t;
    /// _FORTIFY_SOURCE's checked recvfrom.
    fn __recvfrom_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int,
                      addr: *mut sockaddr, len: *mut socklen_t) -> ssize_t;
    /// _FORTIFY_SOURCE's checked poll.
    fn __poll_chk(fds: *mut pollfd, n: nfds_t, timeout: c_int, fdslen: size_t) -> c_int;
    /// _FORTIFY_SOURCE's checked ppoll.
    fn __ppoll_chk(fds: *mut pollfd, n: nfds_t, timeout: *const timespec,
                   mask: *const sigset_t, fdslen: size_t) -> c_int;
    /// sigaction(2).
    fn sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int;
}

/// The C-variadic fcntl (called with its one optional argument as a machine word).
///
/// # Safety
/// `arg` must be what `cmd` expects (an int, or a pointer valid for the command).
pub unsafe fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong, is64: bool) -> c_int {
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    static SLOT64: AtomicUsize = AtomicUsize::new(0);
    // fcntl64 is the same function on 64-bit Linux; prefer the name the caller used.
    let addr = if is64 {
        resolve(&SLOT64, c"fcntl64").or_else(|| resolve(&SLOT, c"fcntl"))
    } else {
        resolve(&SLOT, c"fcntl")
    };
    let Some(addr) = addr else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: addr is libc's fcntl, `int fcntl(int, int, ...)`; calling a C-variadic
    // function from Rust is stable, and an int or pointer argument travels as one word.
    let f: unsafe extern "C" fn(c_int, c_int, ...) -> c_int =
        unsafe { std::mem::transmute::<usize, _>(addr) };
    // SAFETY: the caller passes the argument the command expects.
    unsafe { f(fd, cmd, arg) }
}

/// The C-variadic ioctl (called with its one optional argument as a machine word).
///
/// # Safety
/// `arg` must be what `request` expects.
pub unsafe fn ioctl(fd: c_int, request: c_ulong, arg: c_ulong) -> c_int {
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let Some(addr) = resolve(&SLOT, c"ioctl") else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: addr is libc's `int ioctl(int, unsigned long, ...)`.
    let f: unsafe extern "C" fn(c_int, c_ulong, ...) -> c_int =
        unsafe { std::mem::transmute::<usize, _>(addr) };
    // SAFETY: the caller passes the argument the request expects.
    unsafe { f(fd, request, arg) }
}

/// Closes a descriptor this library owns (a placeholder), ignoring the result.
pub fn close_fd(fd: c_int) {
    // SAFETY: closing an fd number has no memory-safety precondition.
    unsafe {
        close(fd);
    }
}

/// fcntl with an integer argument (F_GETFL, F_SETFL, F_GETFD, F_SETFD, F_DUPFD...).
pub fn fcntl_int(fd: c_int, cmd: c_int, arg: c_int) -> c_int {
    // SAFETY: the integer commands take no pointer.
    unsafe { fcntl(fd, cmd, arg as c_ulong, false) }
}

/// Creates a kernel socket.
pub fn new_socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    // SAFETY: socket(2) takes no pointers.
    unsafe { socket(domain, ty, protocol) }
}

/// Writes all of `bytes` to fd 2 (short writes retried, errors ignored: it is a log).
pub fn write_all_stderr(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: the pointer and length describe the live slice `bytes`.
        let n = unsafe { write(2, bytes.as_ptr().cast(), bytes.len()) };
        if n > 0 {
            bytes = &bytes[n as usize..];
        } else if n < 0 && errno() == libc::EINTR {
            continue;
        } else {
            return;
        }
    }
}

/// An integer socket option of a kernel socket, or None if the kernel refuses it.
pub fn getsockopt_int(fd: c_int, level: c_int, name: c_int) -> Option<c_int> {
    let mut v: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: v and len are live locals of the sizes given.
    let r = unsafe { getsockopt(fd, level, name, (&mut v as *mut c_int).cast(), &mut len) };
    (r == 0).then_some(v)
}

/// A fixed-size socket option of a kernel socket (struct linger, struct timeval).
pub fn getsockopt_struct<T: Copy>(fd: c_int, level: c_int, name: c_int, init: T) -> Option<T> {
    let mut v = init;
    let mut len = std::mem::size_of::<T>() as socklen_t;
    // SAFETY: v is a live, plain-data local of the size given.
    let r = unsafe { getsockopt(fd, level, name, (&mut v as *mut T).cast(), &mut len) };
    (r == 0).then_some(v)
}
