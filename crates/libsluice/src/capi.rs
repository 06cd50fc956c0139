//! The C API of libsluice.so (declared in `include/sluice.h`).
//!
//! POSIX conventions: -1 (or NULL) with errno set on failure. Nothing unwinds across the
//! boundary: every entry point runs under `catch_unwind` (a panic becomes EIO), and null
//! pointers are EINVAL.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::attach::Sluice;
use crate::error::{Error, Op};
use crate::lock::lock;
use crate::socket::{Readiness, Socket};

/// `SLUICE_POLLIN` and friends: the values of poll(2)'s bits.
const POLLIN: c_int = libc::POLLIN as c_int;
const POLLOUT: c_int = libc::POLLOUT as c_int;
const POLLERR: c_int = libc::POLLERR as c_int;
const POLLHUP: c_int = libc::POLLHUP as c_int;
const POLLRDHUP: c_int = libc::POLLRDHUP as c_int;

/// The process's attachment for the C API (made by `sluice_attach`, or on first use).
static ATTACHMENT: Mutex<Option<Arc<Sluice>>> = Mutex::new(None);

/// An engine socket as C sees it (opaque `sluice_socket`).
pub struct SluiceSocket {
    pub(crate) sock: Socket,
}

pub(crate) fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot, always valid to write.
    unsafe { *libc::__errno_location() = e }
}

/// Runs `f`, turning an error into errno (for a call of kind `op`) and `fail`, and a panic
/// into EIO and `fail`.
pub(crate) fn ffi<T>(fail: T, op: Op, f: impl FnOnce() -> Result<T, Error>) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_errno(e.errno_for(op));
            fail
        }
        Err(_) => {
            set_errno(libc::EIO);
            fail
        }
    }
}

/// The C API's attachment, attaching from the environment on first use.
pub(crate) fn attachment() -> Result<Arc<Sluice>, Error> {
    let mut a = lock(&ATTACHMENT);
    if let Some(s) = a.as_ref() {
        if !s.is_inherited() {
            return Ok(s.clone());
        }
    }
    let s = Sluice::attach_from_env()?;
    *a = Some(s.clone());
    Ok(s)
}

/// # Safety
/// `s` is null or a pointer from `sluice_socket_open`/`sluice_accept` not yet closed.
pub(crate) unsafe fn socket<'a>(s: *mut SluiceSocket) -> Result<&'a SluiceSocket, Error> {
    // SAFETY: the caller's contract; null is checked.
    unsafe { s.as_ref() }.ok_or(Error::Os(libc::EINVAL))
}

/// # Safety
/// `a` is null or points to a readable `struct sockaddr_in`.
unsafe fn addr_from_c(a: *const libc::sockaddr_in) -> Result<SocketAddrV4, Error> {
    // SAFETY: the caller's contract; null is checked.
    let a = unsafe { a.as_ref() }.ok_or(Error::Os(libc::EINVAL))?;
    if c_int::from(a.sin_family) != libc::AF_INET {
        return Err(Error::Os(libc::EAFNOSUPPORT));
    }
    Ok(SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
        u16::from_be(a.sin_port),
    ))
}

/// # Safety
/// `out` is null or points to a writable `struct sockaddr_in`.
unsafe fn addr_to_c(addr: SocketAddrV4, out: *mut libc::sockaddr_in) {
    // SAFETY: the caller's contract; null means "not wanted".
    if let Some(o) = unsafe { out.as_mut() } {
        // SAFETY: sockaddr_in is plain old data; all-zero is a valid value.
        *o = unsafe { std::mem::zeroed() };
        o.sin_family = libc::AF_INET as libc::sa_family_t;
        o.sin_port = addr.port().to_be();
        o.sin_addr.s_addr = u32::from(*addr.ip()).to_be();
    }
}

fn poll_bits(r: Readiness) -> c_int {
    let mut m = 0;
    if r.readable {
        m |= POLLIN;
    }
    if r.writable {
        m |= POLLOUT;
    }
    if r.error {
        m |= POLLERR;
    }
    if r.hup {
        m |= POLLHUP;
    }
    if r.rdhup {
        m |= POLLRDHUP;
    }
    m
}

/// Attaches the process to the engine at `path` (NULL: `$SLUICE_SOCKET` or the default).
/// Returns 0, or -1 with errno (ECONNREFUSED when no engine answers).
///
/// # Safety
/// `path` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn sluice_attach(path: *const c_char) -> c_int {
    ffi(-1, Op::Open, || {
        let s = if path.is_null() {
            Sluice::attach_from_env()?
        } else {
            // SAFETY: the caller's contract: a NUL-terminated string.
            let p = unsafe { CStr::from_ptr(path) };
            let p = p.to_str().map_err(|_| Error::Os(libc::EINVAL))?;
            Sluice::attach(Path::new(p))?
        };
        *lock(&ATTACHMENT) = Some(s);
        Ok(0)
    })
}

/// Opens an engine socket (attaching from the environment first if needed).
#[no_mangle]
pub extern "C" fn sluice_socket_open() -> *mut SluiceSocket {
    ffi(std::ptr::null_mut(), Op::Open, || {
        let sock = Socket::open(&attachment()?)?;
        Ok(Box::into_raw(Box::new(SluiceSocket { sock })))
    })
}

/// Binds to `addr` (the engine's address or INADDR_ANY; port 0 picks one).
///
/// # Safety
/// `s` is a live socket or null; `addr` is null or points to a `struct sockaddr_in`.
#[no_mangle]
pub unsafe extern "C" fn sluice_bind(
    s: *mut SluiceSocket,
    addr: *const libc::sockaddr_in,
) -> c_int {
    ffi(-1, Op::Open, || {
        // SAFETY: the caller's contract.
        let (s, a) = unsafe { (socket(s)?, addr_from_c(addr)?) };
        s.sock.bind(a).map(|()| 0)
    })
}

/// Listens with the given backlog.
///
/// # Safety
/// `s` is a live socket or null.
#[no_mangle]
pub unsafe extern "C" fn sluice_listen(s: *mut SluiceSocket, backlog: c_int) -> c_int {
    ffi(-1, Op::Open, || {
        // SAFETY: the caller's contract.
        let s = unsafe { socket(s)? };
        s.sock.listen(backlog.max(1) as u32).map(|()| 0)
    })
}

/// Connects; a non-blocking socket returns -1 with EINPROGRESS (then poll for
/// SLUICE_POLLOUT and read the outcome with `sluice_socket_error`).
///
/// # Safety
/// `s` is a live socket or null; `addr` is null or points to a `struct sockaddr_in`.
#[no_mangle]
pub unsafe extern "C" fn sluice_connect(
    s: *mut SluiceSocket,
    addr: *const libc::sockaddr_in,
) -> c_int {
    ffi(-1, Op::Open, || {
        // SAFETY: the caller's contract.
        let (s, a) = unsafe { (socket(s)?, addr_from_c(addr)?) };
        s.sock.connect(a).map(|()| 0)
    })
}

/// Accepts a connection; fills `*peer` if `peer` is not null.
///
/// # Safety
/// `s` is a live socket or null; `peer` is null or points to a writable `struct sockaddr_in`.
#[no_mangle]
pub unsafe extern "C" fn sluice_accept(
    s: *mut SluiceSocket,
    peer: *mut libc::sockaddr_in,
) -> *mut SluiceSocket {
    ffi(std::ptr::null_mut(), Op::Read, || {
        // SAFETY: the caller's contract.
        let s = unsafe { socket(s)? };
        let (sock, addr) = s.sock.accept()?;
        // SAFETY: the caller's contract.
        unsafe { addr_to_c(addr, peer) };
        Ok(Box::into_raw(Box::new(SluiceSocket { sock })))
    })
}

/// Sends up to `len` bytes; returns the count, or -1 with errno (EAGAIN, EPIPE, ...).
///
/// # Safety
/// `s` is a live socket or null; `buf` points to `len` readable bytes (or `len` is 0).
#[no_mangle]
pub unsafe extern "C" fn sluice_send(
    s: *mut SluiceSocket,
    buf: *const c_void,
    len: usize,
) -> isize {
    ffi(-1, Op::Write, || {
        // SAFETY: the caller's contract.
        let s = unsafe { socket(s)? };
        if len == 0 {
            return s.sock.send(&[]).map(|n| n as isize);
        }
        if buf.is_null() {
            return Err(Error::Os(libc::EINVAL));
        }
        // SAFETY: the caller's contract: len readable bytes at buf.
        let data = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
        s.sock.send(data).map(|n| n as isize)
    })
}

/// Receives up to `len` bytes; returns the count (0 at end of stream), or -1 with errno.
///
/// # Safety
/// `s` is a live socket or null; `buf` points to `len` writable bytes (or `len` is 0).
#[no_mangle]
pub unsafe extern "C" fn sluice_recv(s: *mut SluiceSocket, buf: *mut c_void, len: usize) -> isize {
    ffi(-1, Op::Read, || {
        // SAFETY: the caller's contract.
        let s = unsafe { socket(s)? };
        if len == 0 {
            return s.sock.recv(&mut []).map(|n| n as isize);
        }
        if buf.is_null() {
            return Err(Error::Os(libc::EINVAL));
        }
        // SAFETY: the caller's contract: len writable bytes at buf.
        let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
        s.sock.recv(out).map(|n| n as isize)
    })
}

/// Shuts down a direction: `how` is SHUT_RD, SHUT_WR or SHUT_RDWR.
///
/// # Safety
/// `s` is a live socket or null.
#[no_mangle]
pub unsafe extern "C" fn sluice_shutdown(s: *mut SluiceSocket, how: c_int) -> c_int {
    ffi(-1, Op::Write, || {
        // SAFETY: the caller's contract.
        let s = unsafe { socket(s)? };
        let how = match how {
            libc::SHUT_RD => Shutdown::Read,
            libc::SHUT_WR => Shutdown::Write,
            libc::SHUT_RDWR => Shutdown::Both,
            _ => return Err(Error::Os(libc::EINVAL)),
        };
        s.sock.shutdown(how).map(|()| 0)
    })
}

/// Closes the socket and frees it (the engine finishes sending in the background).
///
/// # Safety
/// `s` is a live socket or null; it must not be used after this call.
#[no_mangle]
pub unsafe extern "C" fn sluice_close(s: *mut SluiceSocket) -> c_int {
    ffi(-1, Op::Write, || {
        if s.is_null() {
            return Err(Error::Os(libc::EINVAL));
        }
        // SAFETY: the caller's contract: s came from Box::into_raw and is not used again.
        drop(unsafe { Box::from_raw(s) });
        Ok(0)
    })
}

/// Sets (on != 0) or clears O_NONBLOCK.
///
/// # Safety
/// `s` is a live socket or null.
#[no_mangle]
pub unsafe extern "C" fn sluice_set_nonblocking(s: *mut SluiceSocket, on: c_int) -> c_int {
    ffi(-1, Op::Open, || {
        // SAFETY: the caller's contract.
        let s = unsafe { socket(s)? };
        s.sock.set_nonblocking(on != 0);
        Ok(0)
    })
}

/// Sets (on != 0) or clears TCP_NODELAY.
///
/// # Safety
/// `s` is a live socket or null.
#[no_mangle]
pub unsafe extern "C" fn sluice_set_nodelay(s: *mut SluiceSocket, on: c_int) -> c_int {
    ffi(-1, Op::Open, || {
        // SAFETY: the caller's contract.
        let s = unsafe { socket(s)? };
        s.sock.set_nodelay(on != 0).map(|()| 0)
    })
}

/// Sets SO_REUSEADDR (`addr != 0`) and SO_REUSEPORT (`port != 0`) for the next bind:
/// sockets of the same uid share a port as Linux lets them (docs/service.md, Bind).
///
/// # Safety
/// `s` is a live socket or null.
#[no_mangle]
pub unsafe extern "C" fn sluice_set_reuse(s: *mut SluiceSocket, addr: c_int, port: c_int) -> c_int {
    ffi(-1, Op::Open, || {
        // SAFETY: the caller's contract.
        let s = unsafe { socket(s)? };
        s.sock.set_reuse(crate::Reuse {
            addr: addr != 0,
            port: port != 0,
        });
        Ok(0)
    })
}

/// Asks (on != 0) or stops asking for the socket's close to be offloaded to the engine's
/// teardown stage (advisory; accepted sockets inherit their listener's).
///
/// # Safety
/// `s` is a live socket or null.
#[no_mangle]
pub unsafe extern "C" fn sluice_set_teardown_offload(s: *mut SluiceSocket, on: c_int) -> c_int {
    ffi(-1, Op::Open, || {
        // SAFETY: the caller's contract.
        let s = unsafe { socket(s)? };
        s.sock.set_teardown_offload(on != 0).map(|()| 0)
    })
}

/// Chooses the socket's congestion control by name (TCP_CONGESTION); ENOENT for a name the
/// engine does not run. At most `SLUICE_CONGESTION_NAME_MAX` bytes of `name` are read.
///
/// # Safety
/// `s` is a live socket or null; `name` is null or readable up to its NUL or
/// `SLUICE_CONGESTION_NAME_MAX` bytes, whichever comes first.
#[no_mangle]
pub unsafe extern "C" fn sluice_set_congestion(s: *mut SluiceSocket, name: *const c_char) -> c_int {
    ffi(-1, Op::Open, || {
        // SAFETY: the caller's contract.
        let s = unsafe { socket(s)? };
        if name.is_null() {
            return Err(Error::Os(libc::EINVAL));
        }
        // SAFETY: name is readable up to its NUL or the bound (the caller's contract);
        // strnlen reads no further.
        let len = unsafe { libc::strnlen(name, sluice_shm::CONGESTION_NAME_MAX) };
        // SAFETY: the len bytes just measured are readable.
        let bytes = unsafe { std::slice::from_raw_parts(name.cast::<u8>(), len) };
        // No known name fills the whole bound: such a string is unknown (ENOENT).
        let algorithm = (len < sluice_shm::CONGESTION_NAME_MAX)
            .then(|| crate::Congestion::from_name(bytes))
            .flatten()
            .ok_or(Error::Os(libc::ENOENT))?;
        s.sock.set_congestion(algorithm).map(|()| 0)
    })
}

/// Writes the socket's congestion-control name, NUL-terminated and truncated to `len`
/// bytes as snprintf does; returns the name's length (without the NUL).
///
/// # Safety
/// `s` is a live socket or null; `buf` is null (only with `len` 0) or writable for `len`
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn sluice_get_congestion(
    s: *mut SluiceSocket,
    buf: *mut c_char,
    len: usize,
) -> c_int {
    ffi(-1, Op::Read, || {
        // SAFETY: the caller's contract.
        let s = unsafe { socket(s)? };
        if buf.is_null() && len > 0 {
            return Err(Error::Os(libc::EINVAL));
        }
        let name = s.sock.congestion_control()?.as_bytes();
        if len > 0 {
            let n = name.len().min(len - 1);
            // SAFETY: buf is writable for len > n bytes (the caller's contract); name is a
            // distinct 'static string.
            unsafe {
                std::ptr::copy_nonoverlapping(name.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
        }
        Ok(name.len() as c_int)
    })
}

/// Waits until the socket is ready for one of `events` (SLUICE_POLLIN, SLUICE_POLLOUT;
/// SLUICE_POLLERR and SLUICE_POLLHUP are always reported) or `timeout_ms` passes (negative:
/// forever, 0: just check). Returns the ready events, 0 on timeout, or -1 with errno.
///
/// # Safety
/// `s` is a live socket or null.
#[no_mangle]
pub unsafe extern "C" fn sluice_poll(
    s: *mut SluiceSocket,
    events: c_int,
    timeout_ms: c_int,
) -> c_int {
    ffi(-1, Op::Read, || {
        // SAFETY: the caller's contract.
        let s = unsafe { socket(s)? };
        let wanted = events | POLLERR | POLLHUP;
        let ready = || poll_bits(s.sock.readiness()) & wanted;
        let now = ready();
        if now != 0 || timeout_ms == 0 {
            return Ok(now);
        }
        let timeout = (timeout_ms > 0).then(|| Duration::from_millis(timeout_ms as u64));
        match s.sock.sluice().wait(timeout, &mut [], &mut || ready() != 0) {
            Ok(_) | Err(Error::EngineGone) => Ok(ready()),
            Err(e) => Err(e),
        }
    })
}

/// One entry of `sluice_poll_many` (`struct sluice_pollfd`).
#[repr(C)]
pub struct SluicePollFd {
    /// The socket (NULL entries are skipped).
    pub socket: *mut SluiceSocket,
    /// Events wanted (SLUICE_POLLIN, SLUICE_POLLOUT).
    pub events: libc::c_short,
    /// Events found.
    pub revents: libc::c_short,
}

/// `sluice_poll` over several sockets: fills each `revents`, returns how many entries have
/// events (0 on timeout), or -1 with errno.
///
/// # Safety
/// `fds` points to `n` entries (or `n` is 0), each socket live or null.
#[no_mangle]
pub unsafe extern "C" fn sluice_poll_many(
    fds: *mut SluicePollFd,
    n: usize,
    timeout_ms: c_int,
) -> c_int {
    ffi(-1, Op::Read, || {
        if fds.is_null() && n > 0 {
            return Err(Error::Os(libc::EINVAL));
        }
        let fds: &mut [SluicePollFd] = if n == 0 {
            &mut []
        } else {
            // SAFETY: the caller's contract: n entries at fds.
            unsafe { std::slice::from_raw_parts_mut(fds, n) }
        };
        let scan = |fds: &mut [SluicePollFd]| -> c_int {
            let mut ready = 0;
            for f in fds.iter_mut() {
                // SAFETY: the caller's contract: each socket live or null.
                f.revents = match unsafe { f.socket.as_ref() } {
                    Some(s) => {
                        let wanted = c_int::from(f.events) | POLLERR | POLLHUP;
                        (poll_bits(s.sock.readiness()) & wanted) as libc::c_short
                    }
                    None => 0,
                };
                ready += c_int::from(f.revents != 0);
            }
            ready
        };
        let now = scan(fds);
        if now != 0 || timeout_ms == 0 {
            return Ok(now);
        }
        // SAFETY: as above.
        let Some(first) = fds.iter().find_map(|f| unsafe { f.socket.as_ref() }) else {
            return Ok(0);
        };
        let sluice = first.sock.sluice().clone();
        let timeout = (timeout_ms > 0).then(|| Duration::from_millis(timeout_ms as u64));
        match sluice.wait(timeout, &mut [], &mut || scan(fds) != 0) {
            Ok(_) | Err(Error::EngineGone) => Ok(scan(fds)),
            Err(e) => Err(e),
        }
    })
}

/// Points `*data` at the readable bytes in the RX ring and returns how many (0 at end of
/// stream), or -1 with EAGAIN when none are there yet. The bytes stay valid until
/// `sluice_rx_consume` releases them or the socket is closed.
///
/// # Safety
/// `s` is a live socket or null; `data` is null or points to a writable pointer.
#[no_mangle]
pub unsafe extern "C" fn sluice_rx_peek(s: *mut SluiceSocket, data: *mut *const c_void) -> isize {
    ffi(-1, Op::Read, || {
        // SAFETY: the caller's contract.
        let s = unsafe { socket(s)? };
        if data.is_null() {
            return Err(Error::Os(libc::EINVAL));
        }
        let (ptr, len) = s.sock.rx_peek_raw()?;
        // SAFETY: data is non-null and writable by the caller's contract.
        unsafe { *data = ptr.cast() };
        Ok(len as isize)
    })
}

/// Releases the first `n` bytes returned by `sluice_rx_peek` (clamped to what is readable).
///
/// # Safety
/// `s` is a live socket or null.
#[no_mangle]
pub unsafe extern "C" fn sluice_rx_consume(s: *mut SluiceSocket, n: usize) -> c_int {
    ffi(-1, Op::Read, || {
        // SAFETY: the caller's contract.
        let s = unsafe { socket(s)? };
        s.sock.rx_consume(n).map(|()| 0)
    })
}

/// Points `*buf` at the free space of the TX ring and returns its size, or -1 with EAGAIN
/// when the ring is full (EPIPE after shutdown, ...). Write there, then `sluice_tx_commit`.
///
/// # Safety
/// `s` is a live socket or null; `buf` is null or points to a writable pointer.
#[no_mangle]
pub unsafe extern "C" fn sluice_tx_reserve(s: *mut SluiceSocket, buf: *mut *mut c_void) -> isize {
    ffi(-1, Op::Write, || {
        // SAFETY: the caller's contract.
        let s = unsafe { socket(s)? };
        if buf.is_null() {
            return Err(Error::Os(libc::EINVAL));
        }
        let (ptr, len) = s.sock.tx_reserve_raw()?;
        // SAFETY: buf is non-null and writable by the caller's contract.
        unsafe { *buf = ptr.cast() };
        Ok(len as isize)
    })
}

/// Sends the first `n` bytes of the last reservation (clamped to its size).
///
/// # Safety
/// `s` is a live socket or null.
#[no_mangle]
pub unsafe extern "C" fn sluice_tx_commit(s: *mut SluiceSocket, n: usize) -> c_int {
    ffi(-1, Op::Write, || {
        // SAFETY: the caller's contract.
        let s = unsafe { socket(s)? };
        s.sock.tx_commit(n).map(|()| 0)
    })
}

/// Fills `*addr` with the local address.
///
/// # Safety
/// `s` is a live socket or null; `addr` is null or points to a writable `struct sockaddr_in`.
#[no_mangle]
pub unsafe extern "C" fn sluice_getsockname(
    s: *mut SluiceSocket,
    addr: *mut libc::sockaddr_in,
) -> c_int {
    ffi(-1, Op::Open, || {
        // SAFETY: the caller's contract.
        let s = unsafe { socket(s)? };
        if addr.is_null() {
            return Err(Error::Os(libc::EINVAL));
        }
        let a = s.sock.local_addr()?;
        // SAFETY: the caller's contract.
        unsafe { addr_to_c(a, addr) };
        Ok(0)
    })
}

/// Fills `*addr` with the peer's address (ENOTCONN if not connected).
///
/// # Safety
/// `s` is a live socket or null; `addr` is null or points to a writable `struct sockaddr_in`.
#[no_mangle]
pub unsafe extern "C" fn sluice_getpeername(
    s: *mut SluiceSocket,
    addr: *mut libc::sockaddr_in,
) -> c_int {
    ffi(-1, Op::Open, || {
        // SAFETY: the caller's contract.
        let s = unsafe { socket(s)? };
        if addr.is_null() {
            return Err(Error::Os(libc::EINVAL));
        }
        let a = s.sock.peer_addr()?;
        // SAFETY: the caller's contract.
        unsafe { addr_to_c(a, addr) };
        Ok(0)
    })
}

/// SO_ERROR: the pending error (0 if none), cleared by reading it; -1 with EINVAL for NULL.
///
/// # Safety
/// `s` is a live socket or null.
#[no_mangle]
pub unsafe extern "C" fn sluice_socket_error(s: *mut SluiceSocket) -> c_int {
    ffi(-1, Op::Read, || {
        // SAFETY: the caller's contract.
        let s = unsafe { socket(s)? };
        Ok(s.sock.take_error().map_or(0, |e| e.errno()))
    })
}

/// Readable bytes (FIONREAD).
///
/// # Safety
/// `s` is a live socket or null.
#[no_mangle]
pub unsafe extern "C" fn sluice_available(s: *mut SluiceSocket) -> isize {
    ffi(-1, Op::Read, || {
        // SAFETY: the caller's contract.
        let s = unsafe { socket(s)? };
        Ok(s.sock.available() as isize)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_pointers_are_einval_not_crashes() {
        // SAFETY: null is allowed by every entry point's contract.
        unsafe {
            set_errno(0);
            assert_eq!(sluice_send(std::ptr::null_mut(), std::ptr::null(), 3), -1);
            assert_eq!(*libc::__errno_location(), libc::EINVAL);
            assert_eq!(sluice_close(std::ptr::null_mut()), -1);
            assert_eq!(sluice_poll(std::ptr::null_mut(), POLLIN, 0), -1);
            assert!(sluice_accept(std::ptr::null_mut(), std::ptr::null_mut()).is_null());
            assert_eq!(*libc::__errno_location(), libc::EINVAL);
            let mut p = std::ptr::null();
            assert_eq!(sluice_rx_peek(std::ptr::null_mut(), &mut p), -1);
        }
    }

    #[test]
    fn addresses_convert_in_network_order() {
        let a: SocketAddrV4 = "10.77.0.1:6379".parse().unwrap();
        // SAFETY: sockaddr_in is plain old data.
        let mut c: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        // SAFETY: &mut c is a valid sockaddr_in.
        unsafe { addr_to_c(a, &mut c) };
        assert_eq!(c.sin_port, 6379u16.to_be());
        assert_eq!(c.sin_addr.s_addr.to_ne_bytes(), [10, 77, 0, 1]);
        // SAFETY: &c is a valid sockaddr_in.
        assert_eq!(unsafe { addr_from_c(&c) }.unwrap(), a);
        c.sin_family = libc::AF_INET6 as libc::sa_family_t;
        // SAFETY: as above.
        let e = unsafe { addr_from_c(&c) }.unwrap_err();
        assert_eq!(e.errno(), libc::EAFNOSUPPORT);
    }

    #[test]
    fn poll_bits_are_the_posix_values() {
        let r = Readiness {
            readable: true,
            writable: true,
            rdhup: false,
            hup: true,
            error: false,
        };
        assert_eq!(poll_bits(r), 0x1 | 0x4 | 0x10);
    }
}
