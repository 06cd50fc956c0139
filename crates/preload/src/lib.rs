//! libsluice_preload.so: runs unmodified socket programs over the Sluice engine.
//!
//! Loaded with `LD_PRELOAD` (`sluice run -- PROGRAM` sets it up), it interposes the socket
//! calls of the C library. IPv4 TCP sockets bound or connected through the engine's address
//! become libsluice sockets ([`decide`]); every other descriptor goes to the kernel through
//! a lock-free fast path ([`fdtable`]). Readiness calls (poll, select, epoll) mix engine
//! sockets and kernel descriptors ([`poll`], [`epoll`]). Program signal handlers run through
//! a trampoline so that a signal interrupts the waits emulated here ([`signals`]). See the
//! README's "Running programs over Sluice" for what is supported.
//!
//! Every entry point is `extern "C"` and never unwinds: a panic becomes EIO and a log line.
//! The entry points are only exported from the cdylib (`cfg(not(test))`), so that unit-test
//! binaries do not interpose on themselves.
#![cfg_attr(test, allow(dead_code))]

mod blocking;
pub mod decide;
pub mod epoll;
pub mod epoll_set;
pub mod fdtable;
pub mod file;
pub mod fork;
pub mod generation;
mod io_calls;
pub mod log;
pub mod poll;
pub mod real;
pub mod signals;
mod socket_calls;
pub mod sockopt;
mod sockopt_calls;
mod splice_calls;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::panic::{catch_unwind, AssertUnwindSafe};

use libc::{c_int, sockaddr, sockaddr_in, socklen_t, ssize_t};

/// Runs an entry point's body; a panic becomes `fail` with errno EIO and a log line,
/// because unwinding into C is undefined behaviour.
pub fn guard<R>(call: &str, fail: R, body: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(_) => {
            log_once!("internal error in {call}: returning EIO");
            real::set_errno(libc::EIO);
            fail
        }
    }
}

/// An int-returning call's result: the value, or -1 with errno set.
pub fn ret_int(r: Result<c_int, c_int>) -> c_int {
    match r {
        Ok(v) => v,
        Err(e) => {
            real::set_errno(e);
            -1
        }
    }
}

/// A size-returning call's result: the value, or -1 with errno set.
pub fn ret_size(r: Result<usize, c_int>) -> ssize_t {
    match r {
        Ok(v) => v.min(ssize_t::MAX as usize) as ssize_t,
        Err(e) => {
            real::set_errno(e);
            -1
        }
    }
}

/// The IPv4 address of a sockaddr the program passed; EAFNOSUPPORT for other families and
/// EINVAL for a short length (as Linux says).
///
/// # Safety
/// `addr` must be valid for `len` bytes (or null).
pub unsafe fn sockaddr_in_of(addr: *const sockaddr, len: socklen_t) -> Result<SocketAddrV4, c_int> {
    if addr.is_null() {
        return Err(libc::EFAULT);
    }
    if (len as usize) < std::mem::size_of::<libc::sa_family_t>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: addr is valid for at least the family field.
    let family = unsafe { std::ptr::read_unaligned(std::ptr::addr_of!((*addr).sa_family)) };
    if c_int::from(family) != libc::AF_INET {
        return Err(libc::EAFNOSUPPORT);
    }
    if (len as usize) < std::mem::size_of::<sockaddr_in>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: addr is valid for a whole sockaddr_in (checked above); unaligned read.
    let sin = unsafe { std::ptr::read_unaligned(addr.cast::<sockaddr_in>()) };
    Ok(SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
        u16::from_be(sin.sin_port),
    ))
}

/// Writes `a` to a program's (sockaddr, socklen) pair, truncating as Linux does, and sets
/// the length to the full size. Null pointers are allowed (nothing is written).
///
/// # Safety
/// `addr` must be valid for `*len` bytes when both are non-null.
pub unsafe fn write_sockaddr_in(
    addr: *mut sockaddr,
    len: *mut socklen_t,
    a: SocketAddrV4,
) -> Result<(), c_int> {
    if addr.is_null() || len.is_null() {
        return Ok(());
    }
    // SAFETY: len is the caller's socklen_t.
    let room = unsafe { *len };
    if (room as i32) < 0 {
        return Err(libc::EINVAL);
    }
    let sin = sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    let full = std::mem::size_of::<sockaddr_in>();
    let n = (room as usize).min(full);
    // SAFETY: the caller's buffer holds `room` >= n bytes; sin is a live local.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (&sin as *const sockaddr_in).cast::<u8>(),
            addr.cast::<u8>(),
            n,
        );
        *len = full as socklen_t;
    }
    Ok(())
}

/// Aborts like glibc's _FORTIFY_SOURCE check when a buffer is smaller than claimed.
pub fn chk_fail() -> ! {
    log::emit(format_args!("*** buffer overflow detected ***: terminated"));
    std::process::abort()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_round_trip_and_truncation() {
        let a = SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 1), 8080);
        // SAFETY: an all-zero sockaddr_in is valid.
        let mut sin: sockaddr_in = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<sockaddr_in>() as socklen_t;
        // SAFETY: sin and len are live locals of the sizes given.
        unsafe { write_sockaddr_in((&mut sin as *mut sockaddr_in).cast(), &mut len, a) }.unwrap();
        // SAFETY: as above.
        let back = unsafe { sockaddr_in_of((&sin as *const sockaddr_in).cast(), len) }.unwrap();
        assert_eq!(back, a);

        let mut short = [0xffu8; 4];
        let mut len = 4 as socklen_t;
        // SAFETY: short holds 4 bytes, the length given.
        unsafe { write_sockaddr_in(short.as_mut_ptr().cast(), &mut len, a) }.unwrap();
        assert_eq!(
            len as usize,
            std::mem::size_of::<sockaddr_in>(),
            "full size reported"
        );
        assert_eq!(
            &short[2..4],
            &8080u16.to_be_bytes(),
            "the port fits in 4 bytes"
        );
    }

    #[test]
    fn foreign_families_and_short_lengths_are_refused() {
        // SAFETY: all-zero sockaddr_in6 is valid.
        let mut s6: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
        s6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        let len = std::mem::size_of::<libc::sockaddr_in6>() as socklen_t;
        // SAFETY: s6 is live for len bytes.
        let r = unsafe { sockaddr_in_of((&s6 as *const libc::sockaddr_in6).cast(), len) };
        assert_eq!(r, Err(libc::EAFNOSUPPORT));
        // SAFETY: an all-zero sockaddr_in is valid.
        let mut sin: sockaddr_in = unsafe { std::mem::zeroed() };
        sin.sin_family = libc::AF_INET as libc::sa_family_t;
        // SAFETY: sin is live for the 8 bytes given.
        let r = unsafe { sockaddr_in_of((&sin as *const sockaddr_in).cast(), 8) };
        assert_eq!(r, Err(libc::EINVAL));
    }

    #[test]
    fn a_panic_becomes_eio() {
        let r = guard("test", -1, || -> i32 { panic!("boom") });
        assert_eq!(r, -1);
        assert_eq!(real::errno(), libc::EIO);
    }
}
