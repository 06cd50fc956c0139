//! setsockopt(2) and getsockopt(2): the kernel's for kernel and undecided sockets, the
//! engine socket's options ([`crate::sockopt`]) for engine sockets.

use libc::c_int;
use sluice_shm::CONGESTION_NAME_MAX;

use crate::file::{lookup, Route, SockFile};
use crate::sockopt::{congestion_of, get, set};
use crate::{guard, real, ret_int};

/// setsockopt(2).
#[cfg_attr(not(test), no_mangle)]
#[allow(clippy::missing_safety_doc)] // libc's contract
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const libc::c_void,
    len: libc::socklen_t,
) -> c_int {
    // SAFETY: the caller's arguments, unchanged.
    let real_call = || unsafe { real::setsockopt(fd, level, name, val, len) };
    let Some(obj) = lookup(fd) else {
        return real_call();
    };
    guard("setsockopt", -1, || match obj.route() {
        Route::Stale => ret_int(Err(libc::EBADF)),
        Route::Kernel => {
            if (level, name) == (libc::IPPROTO_TCP, sluice::TCP_TEARDOWN_OFFLOAD) {
                if let Some(sf) = obj.as_sock().filter(|sf| sf.is_undecided()) {
                    if val.is_null() {
                        return ret_int(Err(libc::EFAULT));
                    }
                    if (len as usize) < std::mem::size_of::<c_int>() {
                        return ret_int(Err(libc::EINVAL));
                    }
                    // SAFETY: the caller's int option value, at least 4 bytes.
                    let on = unsafe { val.cast::<c_int>().read_unaligned() } != 0;
                    return set_undecided_teardown_offload(sf, on);
                }
            }
            if (level, name) == (libc::IPPROTO_TCP, libc::TCP_CONGESTION) {
                if let Some(sf) = obj.as_sock().filter(|sf| sf.is_undecided()) {
                    if val.is_null() && len > 0 {
                        return ret_int(Err(libc::EFAULT));
                    }
                    let bytes: &[u8] = if len == 0 {
                        &[]
                    } else {
                        // SAFETY: the caller's option value, valid for len bytes (Linux
                        // reads at most 15 of them; so do we).
                        unsafe {
                            std::slice::from_raw_parts(
                                val.cast::<u8>(),
                                (len as usize).min(CONGESTION_NAME_MAX),
                            )
                        }
                    };
                    return set_undecided_congestion(sf, bytes, real_call);
                }
            }
            obj.touch();
            real_call()
        }
        Route::Engine(sf, s) => {
            if val.is_null() && len > 0 {
                return ret_int(Err(libc::EFAULT));
            }
            let bytes: &[u8] = if len == 0 {
                &[]
            } else {
                // SAFETY: the caller's option value, valid for len bytes.
                unsafe { std::slice::from_raw_parts(val.cast::<u8>(), len as usize) }
            };
            let mut opts = sf.options();
            ret_int(set(s, &mut opts, level, name, bytes).map(|()| 0))
        }
    })
}

/// getsockopt(2).
#[cfg_attr(not(test), no_mangle)]
#[allow(clippy::missing_safety_doc)] // libc's contract
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut libc::c_void,
    len: *mut libc::socklen_t,
) -> c_int {
    // SAFETY: the caller's arguments, unchanged.
    let real_call = || unsafe { real::getsockopt(fd, level, name, val, len) };
    let Some(obj) = lookup(fd) else {
        return real_call();
    };
    guard("getsockopt", -1, || match obj.route() {
        Route::Stale => ret_int(Err(libc::EBADF)),
        Route::Kernel => real_call(),
        Route::Engine(sf, s) => {
            if len.is_null() {
                return ret_int(Err(libc::EFAULT));
            }
            // SAFETY: len is the caller's socklen_t.
            let room = unsafe { *len } as i32;
            if room < 0 {
                return ret_int(Err(libc::EINVAL));
            }
            if val.is_null() && room > 0 {
                return ret_int(Err(libc::EFAULT));
            }
            let out: &mut [u8] = if room == 0 {
                &mut []
            } else {
                // SAFETY: the caller's buffer, valid for room bytes.
                unsafe { std::slice::from_raw_parts_mut(val.cast::<u8>(), room as usize) }
            };
            let opts = *sf.options();
            match get(s, &opts, level, name, out) {
                Ok(n) => {
                    // SAFETY: as above.
                    unsafe { *len = n as libc::socklen_t };
                    0
                }
                Err(e) => ret_int(Err(e)),
            }
        }
    })
}

/// setsockopt(TCP_TEARDOWN_OFFLOAD) on a socket not yet decided: remembered for the
/// engine socket it may become (the kernel has no such option; a socket that stays with
/// the kernel never uses it).
fn set_undecided_teardown_offload(sf: &SockFile, on: bool) -> c_int {
    let mut und = sf.undecided_state();
    if let Some(sock) = sf.socket() {
        drop(und);
        return ret_int(
            sock.set_teardown_offload(on)
                .map(|()| 0)
                .map_err(|e| e.errno()),
        );
    }
    und.teardown_offload = Some(on);
    0
}

/// setsockopt(TCP_CONGESTION) on a socket not yet decided: the kernel socket gets it (it
/// may stay the kernel's), and the name is remembered for the engine socket it may become.
/// A name only the engine runs (dctcp without the kernel module, timely) succeeds for the
/// engine's sake; a name only the kernel runs (bbr, ...) succeeds and the engine socket
/// keeps the engine's default; a name neither runs fails as the kernel says.
fn set_undecided_congestion(sf: &SockFile, val: &[u8], real_call: impl FnOnce() -> c_int) -> c_int {
    let mut und = sf.undecided_state();
    // Decided meanwhile by another thread: the socket's own rules apply.
    if let Some(sock) = sf.socket() {
        drop(und);
        let r = congestion_of(val).and_then(|c| sock.set_congestion(c).map_err(|e| e.errno()));
        return ret_int(r.map(|()| 0));
    }
    if sf.is_kernel() {
        return real_call();
    }
    let rc = real_call();
    let kernel_errno = (rc != 0).then(real::errno);
    let ours = congestion_of(val);
    match (kernel_errno, ours) {
        (_, Ok(algorithm)) => {
            if let Some(e) = kernel_errno {
                crate::log_once!(
                    "TCP_CONGESTION {algorithm}: the kernel refused it (errno {e}); kept for the engine (a socket that stays with the kernel keeps the kernel's choice)"
                );
            }
            und.congestion = Some(algorithm);
            0
        }
        (None, Err(_)) => {
            crate::log_once!(
                "TCP_CONGESTION with an algorithm the engine does not run: an engine socket keeps the engine's default"
            );
            und.congestion = None;
            0
        }
        (Some(e), Err(_)) => ret_int(Err(e)),
    }
}
