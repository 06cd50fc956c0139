//! poll, ppoll, select and pselect over engine sockets and kernel descriptors together.
//!
//! A set without engine sockets is the real call, untouched. With some, the loop is: the
//! engine sockets' readiness from their blocks, `poll(kernel fds, 0)`, and if nothing is
//! ready, one `Sluice::wait` that sleeps on the engine's wake-up and the kernel fds at once,
//! and that a signal handler running on the thread ends (EINTR, as Linux's poll and select).
//! select and pselect are converted to a pollfd list and back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use libc::{c_int, fd_set, pollfd, sigset_t};

use crate::epoll::{bits, interrupted, sluice_of, socket_ready, with_sigmask};
use crate::file::{lookup, FdObject, Route};
use crate::real;
use crate::signals;

/// poll(2) bits of an engine socket's readiness.
pub fn poll_bits(epoll_bits: u32) -> i16 {
    let mut p = 0i16;
    if epoll_bits & bits::IN != 0 {
        p |= libc::POLLIN | libc::POLLRDNORM;
    }
    if epoll_bits & bits::OUT != 0 {
        p |= libc::POLLOUT | libc::POLLWRNORM;
    }
    if epoll_bits & bits::RDHUP != 0 {
        p |= libc::POLLRDHUP;
    }
    if epoll_bits & bits::HUP != 0 {
        p |= libc::POLLHUP;
    }
    if epoll_bits & bits::ERR != 0 {
        p |= libc::POLLERR;
    }
    p
}

/// The managed objects of the engine sockets among `fds` (index-aligned), or None when
/// there are none (then the real call is all there is to do).
fn engine_entries(fds: &[pollfd]) -> Option<Vec<Option<Arc<FdObject>>>> {
    let engine = |fd| lookup(fd).filter(|o| !matches!(o.route(), Route::Kernel));
    // A first pass that allocates nothing: most poll calls hold kernel descriptors only.
    if !fds
        .iter()
        .any(|p| crate::file::TABLE.is_tracked(p.fd) && engine(p.fd).is_some())
    {
        return None;
    }
    Some(fds.iter().map(|p| engine(p.fd)).collect())
}

/// The revents of an engine entry for the events asked.
fn engine_revents(obj: &FdObject, events: i16) -> i16 {
    match obj.route() {
        Route::Engine(_, s) => {
            poll_bits(socket_ready(s).bits) & (events | libc::POLLHUP | libc::POLLERR)
        }
        // Inherited across fork: not a descriptor of this process's engine.
        _ => libc::POLLNVAL,
    }
}

/// poll over `fds` (`timeout` None: forever). Returns None if there is no engine socket in
/// the set (the caller makes the real call), else the result.
///
/// # Safety
/// `mask` must be null or point to a sigset_t.
pub unsafe fn poll_mixed(
    fds: &mut [pollfd],
    timeout: Option<Duration>,
    mask: *const sigset_t,
) -> Option<Result<c_int, c_int>> {
    let objs = engine_entries(fds)?;
    let kernel_idx: Vec<usize> = (0..fds.len()).filter(|&i| objs[i].is_none()).collect();
    let mut kernel: Vec<pollfd> = kernel_idx.iter().map(|&i| fds[i]).collect();
    let sluice = objs.iter().flatten().find_map(|o| sluice_of(o));
    let deadline = timeout.map(|t| Instant::now() + t);
    // poll and select are never restarted: any handler that runs on this thread from now
    // on ends the call with EINTR (unless descriptors are ready first).
    let mark = signals::mark();
    let body = || loop {
        let mut count = 0;
        for (p, o) in fds.iter_mut().zip(&objs) {
            if let Some(o) = o {
                p.revents = if p.fd < 0 {
                    0
                } else {
                    engine_revents(o, p.events)
                };
                count += (p.revents != 0) as c_int;
            }
        }
        if !kernel.is_empty() {
            for k in kernel.iter_mut() {
                k.revents = 0;
            }
            // SAFETY: kernel is a live vector of pollfds.
            let r = unsafe { real::poll(kernel.as_mut_ptr(), kernel.len() as libc::nfds_t, 0) };
            if r < 0 && real::errno() != libc::EINTR {
                return Err(real::errno());
            }
            for (k, &i) in kernel.iter().zip(&kernel_idx) {
                fds[i].revents = k.revents;
                count += (k.revents != 0) as c_int;
            }
        }
        if count > 0 {
            return Ok(count);
        }
        if mark.interrupts(false) {
            return Err(libc::EINTR);
        }
        let remaining = match deadline {
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(r) if !r.is_zero() => Some(r),
                _ => return Ok(0),
            },
            None => None,
        };
        let Some(sluice) = &sluice else {
            // Only stale (inherited) engine sockets: they were reported POLLNVAL above, so
            // this is unreachable in practice; sleep on the kernel fds alone to be safe.
            let ms = remaining.map_or(-1, |r| r.as_millis().min(c_int::MAX as u128) as c_int);
            // SAFETY: as above.
            let r = unsafe { real::poll(kernel.as_mut_ptr(), kernel.len() as libc::nfds_t, ms) };
            return if r < 0 { Err(real::errno()) } else { Ok(r) };
        };
        let mut ready = || {
            mark.interrupts(false)
                || fds.iter().zip(&objs).any(|(p, o)| {
                    o.as_ref()
                        .is_some_and(|o| p.fd >= 0 && engine_revents(o, p.events) != 0)
                })
        };
        match sluice.wait(remaining, &mut kernel, &mut ready) {
            Ok(_) => {}
            Err(e) if interrupted(&e) => return Err(libc::EINTR),
            Err(_) => {}
        }
    };
    // SAFETY: the caller's mask.
    Some(unsafe { with_sigmask(mask, body) })
}

/// What select asks about one descriptor.
const SELECT_IN: i16 = libc::POLLIN | libc::POLLRDNORM | libc::POLLRDBAND;
const SELECT_OUT: i16 = libc::POLLOUT | libc::POLLWRNORM | libc::POLLWRBAND;
const SELECT_EX: i16 = libc::POLLPRI;

/// Whether `fd` is in the set (a null set holds nothing).
fn is_set(fd: c_int, set: *const fd_set) -> bool {
    // SAFETY: a non-null set points to the caller's fd_set and fd < FD_SETSIZE.
    !set.is_null() && unsafe { libc::FD_ISSET(fd, set) }
}

/// The pollfd list of a select call: one entry per descriptor in any of the sets.
///
/// # Safety
/// Each non-null set must point to a valid fd_set; `nfds` must be at most FD_SETSIZE.
pub unsafe fn fdsets_to_pollfds(
    nfds: c_int,
    r: *const fd_set,
    w: *const fd_set,
    e: *const fd_set,
) -> Vec<pollfd> {
    let mut out = Vec::new();
    for fd in 0..nfds {
        let mut events = 0;
        if is_set(fd, r) {
            events |= SELECT_IN;
        }
        if is_set(fd, w) {
            events |= SELECT_OUT;
        }
        if is_set(fd, e) {
            events |= SELECT_EX;
        }
        if events != 0 {
            out.push(pollfd {
                fd,
                events,
                revents: 0,
            });
        }
    }
    out
}

/// Writes poll results back into select's sets (which are cleared first); returns select's
/// count (a descriptor ready for reading and writing counts twice), or EBADF.
///
/// # Safety
/// As for [`fdsets_to_pollfds`].
pub unsafe fn pollfds_to_fdsets(
    pfds: &[pollfd],
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
) -> Result<c_int, c_int> {
    if pfds.iter().any(|p| p.revents & libc::POLLNVAL != 0) {
        return Err(libc::EBADF);
    }
    for set in [r, w, e] {
        if !set.is_null() {
            // SAFETY: the caller's fd_set.
            unsafe { libc::FD_ZERO(set) };
        }
    }
    let mut count = 0;
    // Linux's select: readable on IN/HUP/ERR, writable on OUT/ERR, exceptional on PRI.
    let in_set = SELECT_IN | libc::POLLHUP | libc::POLLERR;
    let out_set = SELECT_OUT | libc::POLLERR;
    for p in pfds {
        for (set, ready, asked) in [
            (r, in_set, SELECT_IN),
            (w, out_set, SELECT_OUT),
            (e, SELECT_EX, SELECT_EX),
        ] {
            if !set.is_null() && p.events & asked != 0 && p.revents & ready != 0 {
                // SAFETY: the caller's fd_set; p.fd < nfds <= FD_SETSIZE.
                unsafe { libc::FD_SET(p.fd, set) };
                count += 1;
            }
        }
    }
    Ok(count)
}

/// Whether any descriptor in select's sets is an engine socket (or a stale one).
///
/// # Safety
/// As for [`fdsets_to_pollfds`].
pub unsafe fn select_has_engine(
    nfds: c_int,
    r: *const fd_set,
    w: *const fd_set,
    e: *const fd_set,
) -> bool {
    (0..nfds.min(libc::FD_SETSIZE as c_int)).any(|fd| {
        (is_set(fd, r) || is_set(fd, w) || is_set(fd, e))
            && lookup(fd).is_some_and(|o| !matches!(o.route(), Route::Kernel))
    })
}

/// select/pselect with engine sockets among the sets.
///
/// # Safety
/// As for [`fdsets_to_pollfds`].
pub unsafe fn select_mixed(
    nfds: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    timeout: Option<Duration>,
    mask: *const sigset_t,
) -> Result<(c_int, Duration), c_int> {
    let started = Instant::now();
    // SAFETY: forwarded from the caller.
    let mut pfds = unsafe { fdsets_to_pollfds(nfds, r, w, e) };
    // SAFETY: the caller's mask.
    match unsafe { poll_mixed(&mut pfds, timeout, mask) } {
        Some(r) => {
            r?;
        }
        None => {
            // The engine sockets were closed meanwhile: the kernel alone.
            let ms = timeout.map_or(-1, |t| t.as_millis().min(c_int::MAX as u128) as c_int);
            // SAFETY: pfds is a live vector.
            let n = unsafe { real::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
            if n < 0 {
                return Err(real::errno());
            }
        }
    }
    // SAFETY: forwarded from the caller.
    let count = unsafe { pollfds_to_fdsets(&pfds, r, w, e) }?;
    let left = timeout.map_or(Duration::ZERO, |t| t.saturating_sub(started.elapsed()));
    Ok((count, left))
}

// ---- entry points ----

fn ms_timeout(ms: c_int) -> Option<Duration> {
    crate::epoll::timeout_of_ms(ms)
}

/// The pollfd array of a call (empty when n is 0).
///
/// # Safety
/// `fds` must be valid for `n` entries.
unsafe fn pollfds<'a>(fds: *mut pollfd, n: libc::nfds_t) -> Option<&'a mut [pollfd]> {
    if n == 0 || fds.is_null() {
        return None;
    }
    // SAFETY: the caller's array of n pollfds.
    Some(unsafe { std::slice::from_raw_parts_mut(fds, n as usize) })
}

/// poll(2).
#[cfg_attr(not(test), no_mangle)]
#[allow(clippy::missing_safety_doc)] // libc's contract
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    // SAFETY: the caller's arguments, unchanged.
    let real_call = || unsafe { real::poll(fds, n, timeout) };
    // SAFETY: the caller's array.
    let Some(set) = (unsafe { pollfds(fds, n) }) else {
        return real_call();
    };
    crate::guard("poll", -1, || {
        // SAFETY: the caller's array, checked above; no signal mask.
        match unsafe { poll_mixed(set, ms_timeout(timeout), std::ptr::null()) } {
            None => real_call(),
            Some(r) => crate::ret_int(r),
        }
    })
}

/// _FORTIFY_SOURCE's poll.
#[cfg_attr(not(test), no_mangle)]
#[allow(clippy::missing_safety_doc)] // libc's contract
pub unsafe extern "C" fn __poll_chk(
    fds: *mut pollfd,
    n: libc::nfds_t,
    timeout: c_int,
    fdslen: usize,
) -> c_int {
    if fdslen / std::mem::size_of::<pollfd>() < n as usize {
        crate::chk_fail();
    }
    // SAFETY: forwarded.
    unsafe { poll(fds, n, timeout) }
}

/// ppoll(2).
#[cfg_attr(not(test), no_mangle)]
#[allow(clippy::missing_safety_doc)] // libc's contract
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    n: libc::nfds_t,
    timeout: *const libc::timespec,
    mask: *const sigset_t,
) -> c_int {
    // SAFETY: the caller's arguments, unchanged.
    let real_call = || unsafe { real::ppoll(fds, n, timeout, mask) };
    // SAFETY: the caller's array.
    let Some(set) = (unsafe { pollfds(fds, n) }) else {
        return real_call();
    };
    crate::guard("ppoll", -1, || {
        // SAFETY: the caller's timespec.
        let t = match unsafe { crate::epoll::timeout_of_timespec(timeout) } {
            Ok(t) => t,
            Err(e) => return crate::ret_int(Err(e)),
        };
        // SAFETY: the caller's mask.
        match unsafe { poll_mixed(set, t, mask) } {
            None => real_call(),
            Some(r) => crate::ret_int(r),
        }
    })
}

/// _FORTIFY_SOURCE's ppoll.
#[cfg_attr(not(test), no_mangle)]
#[allow(clippy::missing_safety_doc)] // libc's contract
pub unsafe extern "C" fn __ppoll_chk(
    fds: *mut pollfd,
    n: libc::nfds_t,
    timeout: *const libc::timespec,
    mask: *const sigset_t,
    fdslen: usize,
) -> c_int {
    if fdslen / std::mem::size_of::<pollfd>() < n as usize {
        crate::chk_fail();
    }
    // SAFETY: forwarded.
    unsafe { ppoll(fds, n, timeout, mask) }
}

/// select(2).
#[cfg_attr(not(test), no_mangle)]
#[allow(clippy::missing_safety_doc)] // libc's contract
pub unsafe extern "C" fn select(
    nfds: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    // SAFETY: the caller's sets, nfds checked by the guard below.
    if nfds <= 0 || nfds > libc::FD_SETSIZE as c_int || !unsafe { select_has_engine(nfds, r, w, e) }
    {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::select(nfds, r, w, e, timeout) };
    }
    crate::guard("select", -1, || {
        let t = if timeout.is_null() {
            None
        } else {
            // SAFETY: the caller's timeval.
            let tv = unsafe { *timeout };
            if tv.tv_sec < 0 || !(0..1_000_000).contains(&tv.tv_usec) {
                return crate::ret_int(Err(libc::EINVAL));
            }
            Some(Duration::from_secs(tv.tv_sec as u64) + Duration::from_micros(tv.tv_usec as u64))
        };
        // SAFETY: the caller's sets.
        match unsafe { select_mixed(nfds, r, w, e, t, std::ptr::null()) } {
            Ok((n, left)) => {
                if !timeout.is_null() {
                    // Linux writes back the time not slept.
                    // SAFETY: the caller's timeval.
                    unsafe {
                        (*timeout).tv_sec = left.as_secs() as libc::time_t;
                        (*timeout).tv_usec = left.subsec_micros() as libc::suseconds_t;
                    }
                }
                n
            }
            Err(e) => crate::ret_int(Err(e)),
        }
    })
}

/// pselect(2).
#[cfg_attr(not(test), no_mangle)]
#[allow(clippy::missing_safety_doc)] // libc's contract
pub unsafe extern "C" fn pselect(
    nfds: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    timeout: *const libc::timespec,
    mask: *const sigset_t,
) -> c_int {
    // SAFETY: the caller's sets, nfds checked.
    if nfds <= 0 || nfds > libc::FD_SETSIZE as c_int || !unsafe { select_has_engine(nfds, r, w, e) }
    {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::pselect(nfds, r, w, e, timeout, mask) };
    }
    crate::guard("pselect", -1, || {
        // SAFETY: the caller's timespec.
        let t = match unsafe { crate::epoll::timeout_of_timespec(timeout) } {
            Ok(t) => t,
            Err(e) => return crate::ret_int(Err(e)),
        };
        // SAFETY: the caller's sets.
        crate::ret_int(unsafe { select_mixed(nfds, r, w, e, t, mask) }.map(|(n, _)| n))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty() -> fd_set {
        // SAFETY: an all-zero fd_set is the empty set.
        let mut s: fd_set = unsafe { std::mem::zeroed() };
        // SAFETY: s is a live fd_set.
        unsafe { libc::FD_ZERO(&mut s) };
        s
    }

    #[test]
    fn select_sets_become_pollfds_and_back() {
        let (mut r, mut w, mut e) = (empty(), empty(), empty());
        // SAFETY: live local sets, fds below FD_SETSIZE.
        unsafe {
            libc::FD_SET(3, &mut r);
            libc::FD_SET(3, &mut w);
            libc::FD_SET(7, &mut w);
            libc::FD_SET(9, &mut e);
        }
        // SAFETY: as above.
        let mut p = unsafe { fdsets_to_pollfds(10, &r, &w, &e) };
        assert_eq!(
            p.iter().map(|p| (p.fd, p.events)).collect::<Vec<_>>(),
            vec![(3, SELECT_IN | SELECT_OUT), (7, SELECT_OUT), (9, SELECT_EX)]
        );
        p[0].revents = libc::POLLIN | libc::POLLOUT;
        p[1].revents = libc::POLLHUP; // a hang-up is not writability
        p[2].revents = libc::POLLPRI;
        // SAFETY: as above.
        let n = unsafe { pollfds_to_fdsets(&p, &mut r, &mut w, &mut e) }.unwrap();
        assert_eq!(n, 3, "fd 3 counts twice, fd 9 once");
        // SAFETY: as above.
        unsafe {
            assert!(libc::FD_ISSET(3, &r) && libc::FD_ISSET(3, &w));
            assert!(!libc::FD_ISSET(7, &w));
            assert!(libc::FD_ISSET(9, &e));
        }
    }

    #[test]
    fn an_error_is_readable_and_writable_for_select() {
        let (mut r, mut w) = (empty(), empty());
        // SAFETY: live local sets.
        unsafe {
            libc::FD_SET(4, &mut r);
            libc::FD_SET(4, &mut w);
        }
        // SAFETY: as above.
        let mut p = unsafe { fdsets_to_pollfds(5, &r, &w, std::ptr::null()) };
        p[0].revents = libc::POLLERR;
        // SAFETY: as above.
        let n = unsafe { pollfds_to_fdsets(&p, &mut r, &mut w, std::ptr::null_mut()) }.unwrap();
        assert_eq!(n, 2);
    }

    #[test]
    fn an_invalid_descriptor_is_ebadf() {
        let mut r = empty();
        // SAFETY: a live local set.
        unsafe { libc::FD_SET(4, &mut r) };
        let p = [pollfd {
            fd: 4,
            events: SELECT_IN,
            revents: libc::POLLNVAL,
        }];
        // SAFETY: as above.
        let res =
            unsafe { pollfds_to_fdsets(&p, &mut r, std::ptr::null_mut(), std::ptr::null_mut()) };
        assert_eq!(res, Err(libc::EBADF));
    }

    #[test]
    fn engine_readiness_maps_to_poll_bits() {
        assert_eq!(
            poll_bits(bits::IN | bits::OUT),
            libc::POLLIN | libc::POLLRDNORM | libc::POLLOUT | libc::POLLWRNORM
        );
        assert_eq!(
            poll_bits(bits::HUP | bits::ERR | bits::RDHUP),
            libc::POLLHUP | libc::POLLERR | libc::POLLRDHUP
        );
        assert_eq!(poll_bits(0), 0);
    }
}
