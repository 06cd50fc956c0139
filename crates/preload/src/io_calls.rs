//! Interposed data calls: read, write, readv, writev, send, recv, sendto, recvfrom, sendmsg,
//! recvmsg, sendmmsg, recvmmsg, sendfile, sendfile64, splice, and the _FORTIFY_SOURCE
//! variants (__read_chk, __recv_chk, __recvfrom_chk) that Debian's hardened builds call.
//!
//! On an engine socket these become libsluice calls (one copy into or out of the payload
//! ring; sendfile reads the file straight into the TX ring). A write that fails with EPIPE
//! raises SIGPIPE unless MSG_NOSIGNAL, as Linux does.
#![allow(clippy::missing_safety_doc)] // C ABI entry points: libc's contracts apply.

use std::io::{IoSlice, IoSliceMut};

use libc::{
    c_int, c_uint, c_void, iovec, mmsghdr, msghdr, off64_t, off_t, size_t, sockaddr, socklen_t,
    ssize_t,
};
use sluice::{Error, Op, Socket};

use crate::blocking::{nonblocking, Blocker, Side};
use crate::file::{lookup, Route};
use crate::{guard, real, ret_size};

/// Receive flags an engine socket honours.
const RECV_FLAGS: c_int = libc::MSG_PEEK
    | libc::MSG_DONTWAIT
    | libc::MSG_WAITALL
    | libc::MSG_CMSG_CLOEXEC
    | libc::MSG_NOSIGNAL;
/// Send flags an engine socket honours (MSG_MORE and the hints are accepted and ignored:
/// the engine's segmentation decides).
const SEND_FLAGS: c_int = libc::MSG_DONTWAIT
    | libc::MSG_NOSIGNAL
    | libc::MSG_MORE
    | libc::MSG_EOR
    | libc::MSG_CONFIRM
    | libc::MSG_ZEROCOPY;

/// Most iovecs in one call (Linux's UIO_MAXIOV).
const IOV_MAX: c_int = 1024;

fn read_errno(e: &Error) -> c_int {
    e.errno_for(Op::Read)
}

/// The errno of a failed write; EPIPE raises SIGPIPE unless the caller said MSG_NOSIGNAL.
fn write_errno(e: &Error, flags: c_int) -> c_int {
    let errno = e.errno_for(Op::Write);
    if errno == libc::EPIPE && flags & libc::MSG_NOSIGNAL == 0 {
        // SAFETY: raise(3) takes no pointers; the program's SIGPIPE disposition applies.
        unsafe { libc::raise(libc::SIGPIPE) };
    }
    errno
}

/// A byte slice of the caller's buffer (empty for n == 0, whatever the pointer).
///
/// # Safety
/// `buf` must be valid for `n` bytes when n > 0.
unsafe fn bytes<'a>(buf: *const c_void, n: size_t) -> Result<&'a [u8], c_int> {
    if n == 0 {
        return Ok(&[]);
    }
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's buffer, valid for n bytes.
    Ok(unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) })
}

/// A mutable byte slice of the caller's buffer.
///
/// # Safety
/// As [`bytes`].
unsafe fn bytes_mut<'a>(buf: *mut c_void, n: size_t) -> Result<&'a mut [u8], c_int> {
    if n == 0 {
        return Ok(&mut []);
    }
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's buffer, valid for n bytes.
    Ok(unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) })
}

/// The caller's iovec array as IoSlice (ABI-compatible with iovec on Unix).
///
/// # Safety
/// `iov` must be valid for `n` iovecs, each describing a valid buffer.
unsafe fn io_slices<'a>(iov: *const iovec, n: c_int) -> Result<&'a [IoSlice<'a>], c_int> {
    if !(0..=IOV_MAX).contains(&n) {
        return Err(libc::EINVAL);
    }
    if n == 0 {
        return Ok(&[]);
    }
    if iov.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: IoSlice is guaranteed ABI-compatible with iovec on Unix; the caller's array.
    Ok(unsafe { std::slice::from_raw_parts(iov.cast::<IoSlice<'a>>(), n as usize) })
}

/// The caller's iovec array as IoSliceMut.
///
/// # Safety
/// As [`io_slices`], buffers writable.
unsafe fn io_slices_mut<'a>(
    iov: *const iovec,
    n: c_int,
) -> Result<&'a mut [IoSliceMut<'a>], c_int> {
    if !(0..=IOV_MAX).contains(&n) {
        return Err(libc::EINVAL);
    }
    if n == 0 {
        return Ok(&mut []);
    }
    if iov.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: IoSliceMut is ABI-compatible with iovec; the caller owns the array and the
    // buffers for the duration of the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(iov as *mut IoSliceMut<'a>, n as usize) })
}

// ---- the engine side ----

fn engine_recv(s: &Socket, buf: &mut [u8], flags: c_int) -> Result<usize, c_int> {
    if buf.is_empty() && flags & libc::MSG_ERRQUEUE == 0 {
        // Linux returns 0 at once for an empty buffer.
        return Ok(0);
    }
    if flags & libc::MSG_OOB != 0 {
        crate::log_once!("recv MSG_OOB on an engine socket: no urgent data (EINVAL)");
        return Err(libc::EINVAL);
    }
    if flags & libc::MSG_ERRQUEUE != 0 {
        return Err(libc::EAGAIN);
    }
    if flags & !RECV_FLAGS != 0 {
        crate::log_once!(
            "recv flags {:#x} are not supported on engine sockets (EOPNOTSUPP)",
            flags & !RECV_FLAGS
        );
        return Err(libc::EOPNOTSUPP);
    }
    // A non-blocking socket's calls never wait either.
    let dontwait = flags & libc::MSG_DONTWAIT != 0 || s.is_nonblocking();
    let readable = || s.readiness().readable;
    if flags & libc::MSG_PEEK != 0 {
        let r = if dontwait {
            s.peek_nonblocking(buf)
        } else {
            Blocker::new(s, Side::Read).run(|| nonblocking(s.peek_nonblocking(buf)), readable)
        };
        return r.map_err(|e| read_errno(&e));
    }
    if flags & libc::MSG_WAITALL != 0 && !dontwait {
        // One call, one timeout and one mark: a signal or the timeout after some bytes
        // returns those bytes, as Linux does.
        let mut b = Blocker::new(s, Side::Read);
        let mut got = 0;
        while got < buf.len() {
            match s.recv_nonblocking(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(Error::WouldBlock) => match b.wait(&mut || readable()) {
                    Ok(()) => {}
                    Err(_) if got > 0 => break,
                    Err(e) => return Err(read_errno(&e)),
                },
                Err(_) if got > 0 => break,
                Err(e) => return Err(read_errno(&e)),
            }
        }
        return Ok(got);
    }
    let r = if dontwait {
        s.recv_nonblocking(buf)
    } else {
        Blocker::new(s, Side::Read).run(|| nonblocking(s.recv_nonblocking(buf)), readable)
    };
    r.map_err(|e| read_errno(&e))
}

fn engine_send(s: &Socket, data: &[u8], flags: c_int) -> Result<usize, c_int> {
    if data.is_empty() && flags & (libc::MSG_OOB | !SEND_FLAGS) == 0 {
        return Ok(0);
    }
    if flags & libc::MSG_OOB != 0 {
        crate::log_once!("send MSG_OOB on an engine socket is not supported (EOPNOTSUPP)");
        return Err(libc::EOPNOTSUPP);
    }
    if flags & !SEND_FLAGS != 0 {
        crate::log_once!(
            "send flags {:#x} are not supported on engine sockets (EOPNOTSUPP)",
            flags & !SEND_FLAGS
        );
        return Err(libc::EOPNOTSUPP);
    }
    let r = if flags & libc::MSG_DONTWAIT != 0 || s.is_nonblocking() {
        s.send_nonblocking(data)
    } else {
        send_blocking(s, &[IoSlice::new(data)])
    };
    r.map_err(|e| write_errno(&e, flags))
}

/// Sends what fits now of `bufs` after the first `skip` bytes, slice by slice, never
/// blocking: the bytes sent (Err(WouldBlock) if none fit; an error after some bytes is left
/// for the next call, as Linux does).
fn send_some(s: &Socket, bufs: &[IoSlice<'_>], mut skip: usize) -> Result<usize, Error> {
    let mut total = 0;
    for b in bufs {
        if skip >= b.len() {
            skip -= b.len();
            continue;
        }
        let part = &b[skip..];
        skip = 0;
        match s.send_nonblocking(part) {
            Ok(n) => {
                total += n;
                if n < part.len() {
                    break;
                }
            }
            Err(_) if total > 0 => break,
            Err(e) => return Err(e),
        }
    }
    Ok(total)
}

/// A blocking send of every byte of `bufs`: returns once all are in the TX ring, or with
/// the count so far when a signal, the timeout or an error stops it after some bytes.
fn send_blocking(s: &Socket, bufs: &[IoSlice<'_>]) -> Result<usize, Error> {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let mut sent = 0;
    let r = Blocker::new(s, Side::Write).run(
        || match send_some(s, bufs, sent) {
            Ok(n) => {
                sent += n;
                Ok((sent >= total).then_some(sent))
            }
            Err(Error::WouldBlock) => Ok(None),
            Err(_) if sent > 0 => Ok(Some(sent)),
            Err(e) => Err(e),
        },
        || s.readiness().writable,
    );
    match r {
        Err(_) if sent > 0 => Ok(sent),
        r => r,
    }
}

fn engine_recv_vectored(
    s: &Socket,
    bufs: &mut [IoSliceMut<'_>],
    flags: c_int,
) -> Result<usize, c_int> {
    if bufs.len() == 1 || flags & (libc::MSG_PEEK | libc::MSG_WAITALL) != 0 {
        // One buffer, or flags only the single-buffer path knows: use the first non-empty.
        let Some(first) = bufs.iter_mut().find(|b| !b.is_empty()) else {
            return Ok(0);
        };
        return engine_recv(s, first, flags);
    }
    if flags & !(libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC | libc::MSG_NOSIGNAL) != 0 {
        return engine_recv(s, &mut [], flags);
    }
    if flags & libc::MSG_DONTWAIT != 0 && !s.is_nonblocking() && !s.readiness().readable {
        return Err(libc::EAGAIN);
    }
    if s.is_nonblocking() || flags & libc::MSG_DONTWAIT != 0 {
        return s.recv_vectored(bufs).map_err(|e| read_errno(&e));
    }
    // Blocking: wait here until readable, then read (at once, unless another thread took
    // the bytes meanwhile: then libsluice's own wait, which a signal ends only in its sleep).
    let readable = || s.readiness().readable;
    Blocker::new(s, Side::Read)
        .run(
            || {
                if readable() {
                    s.recv_vectored(bufs).map(Some)
                } else {
                    Ok(None)
                }
            },
            readable,
        )
        .map_err(|e| read_errno(&e))
}

fn engine_send_vectored(s: &Socket, bufs: &[IoSlice<'_>], flags: c_int) -> Result<usize, c_int> {
    if flags & !SEND_FLAGS != 0 || flags & libc::MSG_OOB != 0 {
        return engine_send(s, &[], flags);
    }
    if flags & libc::MSG_DONTWAIT != 0 && !s.is_nonblocking() {
        // Never block: send what fits, slice by slice.
        return send_some(s, bufs, 0).map_err(|e| write_errno(&e, flags));
    }
    if s.is_nonblocking() {
        return s.send_vectored(bufs).map_err(|e| write_errno(&e, flags));
    }
    send_blocking(s, bufs).map_err(|e| write_errno(&e, flags))
}

// ---- read / write ----

/// read(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    let Some(obj) = lookup(fd) else {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::read(fd, buf, n) };
    };
    guard("read", -1, || match obj.route() {
        // SAFETY: as above.
        Route::Kernel => unsafe { real::read(fd, buf, n) },
        Route::Stale => ret_size(Err(libc::EBADF)),
        Route::Engine(_, s) => {
            // SAFETY: the caller's buffer, valid for n bytes by the call's contract.
            ret_size(unsafe { bytes_mut(buf, n) }.and_then(|b| engine_recv(s, b, 0)))
        }
    })
}

/// _FORTIFY_SOURCE's read.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    if !crate::file::TABLE.is_tracked(fd) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::__read_chk(fd, buf, n, buflen) };
    }
    if n > buflen {
        crate::chk_fail();
    }
    // SAFETY: forwarded.
    unsafe { read(fd, buf, n) }
}

/// write(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    let Some(obj) = lookup(fd) else {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::write(fd, buf, n) };
    };
    guard("write", -1, || match obj.route() {
        // SAFETY: as above.
        Route::Kernel => unsafe { real::write(fd, buf, n) },
        Route::Stale => ret_size(Err(libc::EBADF)),
        Route::Engine(_, s) => {
            // SAFETY: the caller's buffer, valid for n bytes by the call's contract.
            ret_size(unsafe { bytes(buf, n) }.and_then(|b| engine_send(s, b, 0)))
        }
    })
}

/// readv(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    let Some(obj) = lookup(fd) else {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::readv(fd, iov, n) };
    };
    guard("readv", -1, || match obj.route() {
        // SAFETY: as above.
        Route::Kernel => unsafe { real::readv(fd, iov, n) },
        Route::Stale => ret_size(Err(libc::EBADF)),
        Route::Engine(_, s) => {
            // SAFETY: the caller's iovecs.
            ret_size(unsafe { io_slices_mut(iov, n) }.and_then(|b| engine_recv_vectored(s, b, 0)))
        }
    })
}

/// writev(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    let Some(obj) = lookup(fd) else {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::writev(fd, iov, n) };
    };
    guard("writev", -1, || match obj.route() {
        // SAFETY: as above.
        Route::Kernel => unsafe { real::writev(fd, iov, n) },
        Route::Stale => ret_size(Err(libc::EBADF)),
        Route::Engine(_, s) => {
            // SAFETY: the caller's iovecs.
            ret_size(unsafe { io_slices(iov, n) }.and_then(|b| engine_send_vectored(s, b, 0)))
        }
    })
}

// ---- send / recv ----

/// send(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    let Some(obj) = lookup(fd) else {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::send(fd, buf, n, flags) };
    };
    guard("send", -1, || match obj.route() {
        // SAFETY: as above.
        Route::Kernel => unsafe { real::send(fd, buf, n, flags) },
        Route::Stale => ret_size(Err(libc::EBADF)),
        Route::Engine(_, s) => {
            // SAFETY: the caller's buffer, valid for n bytes by the call's contract.
            ret_size(unsafe { bytes(buf, n) }.and_then(|b| engine_send(s, b, flags)))
        }
    })
}

/// sendto(2): on a (connected) engine socket the address is ignored, as Linux TCP does.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const sockaddr,
    alen: socklen_t,
) -> ssize_t {
    let Some(obj) = lookup(fd) else {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::sendto(fd, buf, n, flags, addr, alen) };
    };
    guard("sendto", -1, || match obj.route() {
        // SAFETY: as above.
        Route::Kernel => unsafe { real::sendto(fd, buf, n, flags, addr, alen) },
        Route::Stale => ret_size(Err(libc::EBADF)),
        Route::Engine(..) if flags & libc::MSG_FASTOPEN != 0 => {
            crate::log_once!("MSG_FASTOPEN on an engine socket is not supported (EOPNOTSUPP)");
            ret_size(Err(libc::EOPNOTSUPP))
        }
        Route::Engine(_, s) => {
            // SAFETY: the caller's buffer, valid for n bytes by the call's contract.
            ret_size(unsafe { bytes(buf, n) }.and_then(|b| engine_send(s, b, flags)))
        }
    })
}

/// recv(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    let Some(obj) = lookup(fd) else {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::recv(fd, buf, n, flags) };
    };
    guard("recv", -1, || match obj.route() {
        // SAFETY: as above.
        Route::Kernel => unsafe { real::recv(fd, buf, n, flags) },
        Route::Stale => ret_size(Err(libc::EBADF)),
        Route::Engine(_, s) => {
            // SAFETY: the caller's buffer, valid for n bytes by the call's contract.
            ret_size(unsafe { bytes_mut(buf, n) }.and_then(|b| engine_recv(s, b, flags)))
        }
    })
}

/// _FORTIFY_SOURCE's recv.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
) -> ssize_t {
    if !crate::file::TABLE.is_tracked(fd) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::__recv_chk(fd, buf, n, buflen, flags) };
    }
    if n > buflen {
        crate::chk_fail();
    }
    // SAFETY: forwarded.
    unsafe { recv(fd, buf, n, flags) }
}

/// recvfrom(2): on an engine socket no source address is returned (*alen = 0), as for TCP.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    let Some(obj) = lookup(fd) else {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::recvfrom(fd, buf, n, flags, addr, alen) };
    };
    guard("recvfrom", -1, || match obj.route() {
        // SAFETY: as above.
        Route::Kernel => unsafe { real::recvfrom(fd, buf, n, flags, addr, alen) },
        Route::Stale => ret_size(Err(libc::EBADF)),
        Route::Engine(_, s) => {
            // SAFETY: the caller's buffer.
            let r = unsafe { bytes_mut(buf, n) }.and_then(|b| engine_recv(s, b, flags));
            if r.is_ok() && !addr.is_null() && !alen.is_null() {
                // SAFETY: the caller's length.
                unsafe { *alen = 0 };
            }
            ret_size(r)
        }
    })
}

/// _FORTIFY_SOURCE's recvfrom.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    if !crate::file::TABLE.is_tracked(fd) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::__recvfrom_chk(fd, buf, n, buflen, flags, addr, alen) };
    }
    if n > buflen {
        crate::chk_fail();
    }
    // SAFETY: forwarded.
    unsafe { recvfrom(fd, buf, n, flags, addr, alen) }
}

// ---- sendmsg / recvmsg ----

/// sendmsg on an engine socket: the iovecs are sent; an address is ignored (TCP);
/// ancillary data is ignored with a log line.
///
/// # Safety
/// `msg` must be a valid msghdr.
unsafe fn engine_sendmsg(s: &Socket, msg: *const msghdr, flags: c_int) -> Result<usize, c_int> {
    if msg.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's msghdr.
    let m = unsafe { &*msg };
    if m.msg_controllen > 0 {
        crate::log_once!("sendmsg ancillary data on an engine socket is ignored");
    }
    // SAFETY: the caller's iovecs.
    let bufs = unsafe { io_slices(m.msg_iov, m.msg_iovlen as c_int) }?;
    engine_send_vectored(s, bufs, flags)
}

/// recvmsg on an engine socket: no address, no ancillary data, no flags.
///
/// # Safety
/// `msg` must be a valid msghdr.
unsafe fn engine_recvmsg(s: &Socket, msg: *mut msghdr, flags: c_int) -> Result<usize, c_int> {
    if msg.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's msghdr.
    let m = unsafe { &mut *msg };
    // SAFETY: the caller's iovecs.
    let bufs = unsafe { io_slices_mut(m.msg_iov, m.msg_iovlen as c_int) }?;
    let n = engine_recv_vectored(s, bufs, flags)?;
    m.msg_namelen = 0;
    m.msg_controllen = 0;
    m.msg_flags = 0;
    Ok(n)
}

/// sendmsg(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    let Some(obj) = lookup(fd) else {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::sendmsg(fd, msg, flags) };
    };
    guard("sendmsg", -1, || match obj.route() {
        // SAFETY: as above.
        Route::Kernel => unsafe { real::sendmsg(fd, msg, flags) },
        Route::Stale => ret_size(Err(libc::EBADF)),
        // SAFETY: the caller's msghdr.
        Route::Engine(_, s) => ret_size(unsafe { engine_sendmsg(s, msg, flags) }),
    })
}

/// recvmsg(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    let Some(obj) = lookup(fd) else {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::recvmsg(fd, msg, flags) };
    };
    guard("recvmsg", -1, || match obj.route() {
        // SAFETY: as above.
        Route::Kernel => unsafe { real::recvmsg(fd, msg, flags) },
        Route::Stale => ret_size(Err(libc::EBADF)),
        // SAFETY: the caller's msghdr.
        Route::Engine(_, s) => ret_size(unsafe { engine_recvmsg(s, msg, flags) }),
    })
}

/// Runs `one` over the messages of a sendmmsg/recvmmsg call, stopping at the first error
/// (reported only if no message went through, as Linux does).
///
/// # Safety
/// `msgs` must be valid for `n` entries.
unsafe fn each_message(
    msgs: *mut mmsghdr,
    n: c_uint,
    mut one: impl FnMut(*mut msghdr) -> Result<usize, c_int>,
) -> c_int {
    if msgs.is_null() && n > 0 {
        return crate::ret_int(Err(libc::EFAULT));
    }
    let n = n.min(IOV_MAX as c_uint) as usize;
    for i in 0..n {
        // SAFETY: the caller's array holds n entries.
        let m = unsafe { &mut *msgs.add(i) };
        match one(&mut m.msg_hdr) {
            Ok(len) => m.msg_len = len.min(c_uint::MAX as usize) as c_uint,
            Err(_) if i > 0 => return i as c_int,
            Err(e) => return crate::ret_int(Err(e)),
        }
    }
    n as c_int
}

/// sendmmsg(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sendmmsg(fd: c_int, msgs: *mut mmsghdr, n: c_uint, flags: c_int) -> c_int {
    let Some(obj) = lookup(fd) else {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::sendmmsg(fd, msgs, n, flags) };
    };
    guard("sendmmsg", -1, || match obj.route() {
        // SAFETY: as above.
        Route::Kernel => unsafe { real::sendmmsg(fd, msgs, n, flags) },
        Route::Stale => crate::ret_int(Err(libc::EBADF)),
        // SAFETY: the caller's array and messages.
        Route::Engine(_, s) => unsafe { each_message(msgs, n, |m| engine_sendmsg(s, m, flags)) },
    })
}

/// recvmmsg(2) (the timeout is ignored on engine sockets: each message is one recvmsg).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn recvmmsg(
    fd: c_int,
    msgs: *mut mmsghdr,
    n: c_uint,
    flags: c_int,
    timeout: *mut libc::timespec,
) -> c_int {
    let Some(obj) = lookup(fd) else {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::recvmmsg(fd, msgs, n, flags, timeout) };
    };
    guard("recvmmsg", -1, || match obj.route() {
        // SAFETY: as above.
        Route::Kernel => unsafe { real::recvmmsg(fd, msgs, n, flags, timeout) },
        Route::Stale => crate::ret_int(Err(libc::EBADF)),
        Route::Engine(_, s) => {
            // MSG_WAITFORONE: block for the first message only.
            let mut first = true;
            // SAFETY: the caller's array and messages.
            unsafe {
                each_message(msgs, n, |m| {
                    let mut f = flags & !libc::MSG_WAITFORONE;
                    if !first && flags & libc::MSG_WAITFORONE != 0 {
                        f |= libc::MSG_DONTWAIT;
                    }
                    first = false;
                    engine_recvmsg(s, m, f)
                })
            }
        }
    })
}

// ---- sendfile / splice ----

/// sendfile to an engine socket: the file is read straight into the TX ring (zero copy on
/// our side: one copy from the page cache into the ring, as the kernel's own sendfile
/// makes one into its socket buffer).
fn engine_sendfile(
    s: &Socket,
    in_fd: c_int,
    off: Option<&mut i64>,
    count: usize,
) -> Result<usize, c_int> {
    let mut pos = off.as_ref().map(|o| **o);
    let mut total = 0usize;
    // SO_SNDTIMEO bounds the wait for room.
    let mut blocker = Blocker::new(s, Side::Write);
    while total < count {
        match s.tx_slice() {
            Ok(ring) => {
                let want = ring.len().min(count - total);
                let n = match pos {
                    // SAFETY: ring is a live, writable slice of want+ bytes.
                    Some(p) => unsafe {
                        libc::pread(in_fd, ring.as_mut_ptr().cast(), want, p as off_t)
                    },
                    // SAFETY: as above; in_fd is not an engine socket (checked by the caller).
                    None => unsafe { real::read(in_fd, ring.as_mut_ptr().cast(), want) },
                };
                if n < 0 {
                    let e = real::errno();
                    if e == libc::EINTR && total == 0 {
                        continue;
                    }
                    return if total > 0 { Ok(total) } else { Err(e) };
                }
                if n == 0 {
                    break;
                }
                let n = n as usize;
                s.tx_commit(n).map_err(|e| write_errno(&e, 0))?;
                total += n;
                if let Some(p) = pos.as_mut() {
                    *p += n as i64;
                }
            }
            Err(Error::WouldBlock) => {
                if total > 0 {
                    break;
                }
                if s.is_nonblocking() {
                    return Err(libc::EAGAIN);
                }
                let writable = || {
                    let r = s.readiness();
                    r.writable || r.error || r.hup
                };
                // EINTR, EAGAIN once the timeout passed, EPIPE if the engine is gone.
                blocker
                    .wait(&mut || writable())
                    .map_err(|e| write_errno(&e, 0))?;
            }
            Err(e) => {
                return if total > 0 {
                    Ok(total)
                } else {
                    Err(write_errno(&e, 0))
                };
            }
        }
    }
    if let (Some(o), Some(p)) = (off, pos) {
        *o = p;
    }
    Ok(total)
}

/// sendfile for both offset widths (they are the same type on 64-bit Linux).
///
/// # Safety
/// `off` null or valid.
unsafe fn sendfile_any(
    out_fd: c_int,
    in_fd: c_int,
    off: *mut i64,
    count: size_t,
    real_call: &dyn Fn() -> ssize_t,
) -> ssize_t {
    let out = lookup(out_fd);
    let inp = lookup(in_fd);
    if out.is_none() && inp.is_none() {
        return real_call();
    }
    guard("sendfile", -1, || {
        if let Some(i) = &inp {
            if !matches!(i.route(), Route::Kernel) {
                crate::log_once!("sendfile from an engine socket is not supported (EINVAL)");
                return ret_size(Err(libc::EINVAL));
            }
        }
        let Some(o) = out else {
            return real_call();
        };
        match o.route() {
            Route::Kernel => real_call(),
            Route::Stale => ret_size(Err(libc::EBADF)),
            Route::Engine(_, s) => {
                // SAFETY: a non-null offset is the caller's.
                let off = unsafe { off.as_mut() };
                if off.as_ref().is_some_and(|o| **o < 0) {
                    return ret_size(Err(libc::EINVAL));
                }
                ret_size(engine_sendfile(s, in_fd, off, count))
            }
        }
    })
}

/// sendfile(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sendfile(
    out_fd: c_int,
    in_fd: c_int,
    off: *mut off_t,
    count: size_t,
) -> ssize_t {
    // SAFETY: the caller's arguments, unchanged.
    let real_call = || unsafe { real::sendfile(out_fd, in_fd, off, count) };
    // SAFETY: off_t is i64 on 64-bit Linux; null or the caller's.
    unsafe { sendfile_any(out_fd, in_fd, off.cast::<i64>(), count, &real_call) }
}

/// sendfile64 (programs built with _FILE_OFFSET_BITS=64, such as nginx).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sendfile64(
    out_fd: c_int,
    in_fd: c_int,
    off: *mut off64_t,
    count: size_t,
) -> ssize_t {
    // SAFETY: the caller's arguments, unchanged.
    let real_call = || unsafe { real::sendfile64(out_fd, in_fd, off, count) };
    // SAFETY: off64_t is i64; null or the caller's.
    unsafe { sendfile_any(out_fd, in_fd, off.cast::<i64>(), count, &real_call) }
}

/// splice(2): not supported with engine sockets (EINVAL, as for a file that cannot splice).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn splice(
    fd_in: c_int,
    off_in: *mut off64_t,
    fd_out: c_int,
    off_out: *mut off64_t,
    n: size_t,
    flags: c_uint,
) -> ssize_t {
    let engine = |fd| lookup(fd).is_some_and(|o| !matches!(o.route(), Route::Kernel));
    if engine(fd_in) || engine(fd_out) {
        crate::log_once!("splice with an engine socket is not supported (EINVAL)");
        return ret_size(Err(libc::EINVAL));
    }
    // SAFETY: the caller's arguments, unchanged.
    unsafe { real::splice(fd_in, off_in, fd_out, off_out, n, flags) }
}
