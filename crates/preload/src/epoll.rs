//! epoll with engine sockets and kernel descriptors in one set.
//!
//! Every epoll instance the program creates is managed. Kernel descriptors are registered
//! in the real epoll instance as usual; engine sockets (whose kernel placeholder never
//! becomes ready) are kept in a userspace registration list of the same instance
//! ([`EpollSet`], in epoll_set.rs). `epoll_wait` on an instance without engine registrations is the real
//! call. With some, the wait loop is:
//!
//! 1. scan the engine registrations (level-triggered: report while ready; edge-triggered:
//!    report when ready and the socket's `event_seq` changed since the last report;
//!    EPOLLONESHOT disarms after a report until EPOLL_CTL_MOD);
//! 2. `epoll_wait(real, timeout 0)` for the kernel descriptors;
//! 3. if nothing is ready, `Sluice::wait` with the real epoll fd in its pollfd list (an epoll
//!    fd is readable when it has events), so one sleep covers the engine and the kernel.
//!
//! Registrations hold weak references: closing the last fd of an engine socket removes it
//! from every set, as the kernel does for its files.

use std::sync::Arc;
use std::time::{Duration, Instant};

use libc::{c_int, epoll_event, sigset_t, timespec};
use sluice::{Sluice, Socket};

pub use crate::epoll_set::{bits, EpollSet, Ready, ReadySource};
use crate::file::{lookup, EpollFile, FdObject, PendingEpoll, Route, TABLE};
use crate::{real, signals};

/// The event sequence of an engine socket as [`socket_ready`] reports it.
fn socket_seq(s: &Socket) -> u32 {
    let seq = s.event_seq();
    if s.sluice().is_alive() {
        seq
    } else {
        seq.wrapping_add(1)
    }
}

/// The epoll bits of an engine socket.
pub fn socket_ready(s: &Socket) -> Ready {
    // The sequence first: a change between the two reads then shows as a later change.
    let seq = s.event_seq();
    if !s.sluice().is_alive() {
        // The engine is gone: make the program look (its reads and writes fail cleanly).
        return Ready {
            bits: bits::IN
                | bits::RDNORM
                | bits::OUT
                | bits::WRNORM
                | bits::ERR
                | bits::HUP
                | bits::RDHUP,
            seq: seq.wrapping_add(1),
        };
    }
    let r = s.readiness();
    let mut b = 0;
    if r.readable {
        b |= bits::IN | bits::RDNORM;
    }
    if r.writable {
        b |= bits::OUT | bits::WRNORM;
    }
    if r.rdhup {
        b |= bits::RDHUP;
    }
    if r.hup {
        b |= bits::HUP;
    }
    if r.error {
        b |= bits::ERR;
    }
    Ready { bits: b, seq }
}

impl ReadySource for FdObject {
    fn seq(&self) -> Option<u32> {
        match self.route() {
            Route::Engine(_, s) => Some(socket_seq(s)),
            _ => None,
        }
    }

    fn ready(&self) -> Option<Ready> {
        match self.route() {
            Route::Engine(_, s) => Some(socket_ready(s)),
            _ => None,
        }
    }
}

/// Records a new epoll fd.
pub fn created(epfd: c_int) {
    if epfd < 0 {
        return;
    }
    if TABLE
        .insert(epfd, Arc::new(FdObject::Epoll(EpollFile::new())))
        .is_err()
    {
        crate::log_once!(
            "epoll fd {epfd} is beyond the managed range: it can hold kernel descriptors only"
        );
    }
}

/// The epoll object of `epfd` for this process (a fork child's inherited instance is given a
/// fresh, empty registration list: the parent's engine registrations are not the child's).
fn epoll_object(epfd: c_int) -> Option<Arc<FdObject>> {
    let obj = lookup(epfd)?;
    match &*obj {
        FdObject::Epoll(e) if e.is_current() => Some(obj),
        FdObject::Epoll(_) => {
            let fresh = Arc::new(FdObject::Epoll(EpollFile::inherited()));
            drop(TABLE.insert(epfd, fresh.clone()));
            Some(fresh)
        }
        FdObject::Sock(_) => None,
    }
}

fn as_epoll(obj: &FdObject) -> &EpollFile {
    match obj {
        FdObject::Epoll(e) => e,
        FdObject::Sock(_) => unreachable!("epoll_object returns epoll objects only"),
    }
}

/// epoll_ctl.
///
/// # Safety
/// `ev` must be null or point to an epoll_event.
pub unsafe fn ctl(epfd: c_int, op: c_int, fd: c_int, ev: *mut epoll_event) -> Result<c_int, c_int> {
    let target = lookup(fd);
    let pass = || {
        // SAFETY: the caller's arguments, unchanged.
        let r = unsafe { real::epoll_ctl(epfd, op, fd, ev) };
        if r < 0 {
            Err(real::errno())
        } else {
            Ok(r)
        }
    };
    // Kernel registrations are counted (see EpollFile::kernel_regs).
    let pass = || {
        let r = pass()?;
        if let Some(ep) = lookup(epfd) {
            if let FdObject::Epoll(e) = &*ep {
                e.count_kernel(op);
            }
        }
        Ok(r)
    };
    let Some(target) = target else {
        return pass();
    };
    match target.route() {
        Route::Stale => Err(libc::EBADF),
        Route::Engine(..) => {
            if fd == epfd {
                return Err(libc::EINVAL);
            }
            let Some(ep_obj) = epoll_object(epfd) else {
                if lookup(epfd).is_some() || real::fcntl_int(epfd, libc::F_GETFD, 0) >= 0 {
                    crate::log_once!("epoll_ctl on fd {epfd}, which is not a managed epoll instance, with an engine socket: EPERM");
                    return Err(libc::EPERM);
                }
                return Err(libc::EBADF);
            };
            let ep = as_epoll(&ep_obj);
            let event = if ev.is_null() {
                None
            } else {
                // SAFETY: a non-null ev points to the caller's epoll_event (read by value;
                // the struct is packed on x86_64, so read_unaligned).
                Some(unsafe { std::ptr::read_unaligned(ev) })
            };
            let mut set = ep.lock();
            let result = match (op, event) {
                (libc::EPOLL_CTL_ADD, Some(e)) => set.add(fd, &target, e.events, e.u64),
                (libc::EPOLL_CTL_MOD, Some(e)) => set.modify(fd, &target, e.events, e.u64),
                (libc::EPOLL_CTL_DEL, _) => set.delete(fd, &target),
                (libc::EPOLL_CTL_ADD | libc::EPOLL_CTL_MOD, None) => Err(libc::EFAULT),
                _ => Err(libc::EINVAL),
            };
            ep.update_hint(&mut set);
            result.map(|()| 0)
        }
        Route::Kernel => {
            let r = pass()?;
            // An undecided socket in a kernel epoll set: remember the registration, to move
            // it into the userspace set if the socket becomes an engine socket.
            if let Some(sf) = target.as_sock().filter(|s| s.is_undecided()) {
                let mut und = sf.undecided_state();
                und.epolls.retain(|p| !(p.epfd == epfd && p.fd == fd));
                if op != libc::EPOLL_CTL_DEL && !ev.is_null() {
                    // SAFETY: as above.
                    let e = unsafe { std::ptr::read_unaligned(ev) };
                    und.epolls.push(PendingEpoll {
                        epfd,
                        fd,
                        events: e.events,
                        data: e.u64,
                    });
                }
            }
            Ok(r)
        }
    }
}

/// Moves the kernel epoll registrations of a socket that just became an engine socket into
/// the userspace sets.
pub fn migrate(obj: &Arc<FdObject>, pending: Vec<PendingEpoll>) {
    for p in pending {
        let Some(ep_obj) = epoll_object(p.epfd) else {
            continue;
        };
        let ep = as_epoll(&ep_obj);
        // SAFETY: EPOLL_CTL_DEL ignores the event pointer.
        if unsafe { real::epoll_ctl(p.epfd, libc::EPOLL_CTL_DEL, p.fd, std::ptr::null_mut()) } == 0
        {
            ep.count_kernel(libc::EPOLL_CTL_DEL);
        }
        let mut set = ep.lock();
        let _ = set.add(p.fd, obj, p.events, p.data);
        ep.update_hint(&mut set);
    }
}

/// Converts an epoll/poll millisecond timeout (negative: forever).
pub fn timeout_of_ms(ms: c_int) -> Option<Duration> {
    (ms >= 0).then(|| Duration::from_millis(ms as u64))
}

/// Converts a timespec timeout (null: forever).
///
/// # Safety
/// `ts` must be null or point to a timespec.
pub unsafe fn timeout_of_timespec(ts: *const timespec) -> Result<Option<Duration>, c_int> {
    if ts.is_null() {
        return Ok(None);
    }
    // SAFETY: a non-null timeout points to the caller's timespec.
    let t = unsafe { *ts };
    if t.tv_sec < 0 || !(0..1_000_000_000).contains(&t.tv_nsec) {
        return Err(libc::EINVAL);
    }
    Ok(Some(Duration::new(t.tv_sec as u64, t.tv_nsec as u32)))
}

/// Runs `f` with the thread's signal mask set to `mask` (when given), then restores it.
///
/// The real ppoll/pselect/epoll_pwait swap the mask atomically with the sleep; here the
/// waits take their [`signals::mark`] before the swap, so a signal the new mask lets in
/// (at once, if it was pending) ends the wait with EINTR all the same.
///
/// # Safety
/// `mask` must be null or point to a sigset_t.
pub unsafe fn with_sigmask<T>(mask: *const sigset_t, f: impl FnOnce() -> T) -> T {
    if mask.is_null() {
        return f();
    }
    // SAFETY: an all-zero sigset_t is a valid (empty) set for pthread_sigmask to overwrite.
    let mut old: sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: mask points to the caller's sigset_t; old is a live local.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, mask, &mut old) };
    let r = f();
    // SAFETY: old holds the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    r
}

/// The attachment to sleep on for a set of engine sockets.
pub fn sluice_of(obj: &FdObject) -> Option<Arc<Sluice>> {
    match obj.route() {
        Route::Engine(_, s) => Some(s.sluice().clone()),
        _ => None,
    }
}

/// Whether a sleep result says a signal interrupted it.
pub fn interrupted(e: &sluice::Error) -> bool {
    matches!(e, sluice::Error::Os(libc::EINTR))
}

/// epoll_wait / epoll_pwait / epoll_pwait2 (`timeout` None: forever).
///
/// # Safety
/// `events` must be valid for `max` entries.
pub unsafe fn wait(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: Option<Duration>,
    mask: *const sigset_t,
    real_wait: &dyn Fn() -> c_int,
) -> Result<c_int, c_int> {
    let ep_obj = match lookup(epfd) {
        Some(o) if matches!(&*o, FdObject::Epoll(e) if e.has_engine_regs()) => o,
        _ => return pass_int(real_wait()),
    };
    if max <= 0 || events.is_null() {
        return Err(libc::EINVAL);
    }
    let ep = as_epoll(&ep_obj);
    // SAFETY: the caller guarantees events is valid for max entries.
    let out = unsafe { std::slice::from_raw_parts_mut(events, max as usize) };
    let deadline = timeout.map(|t| Instant::now() + t);
    // epoll_wait is never restarted: any handler that runs on this thread from now on
    // ends the call with EINTR (unless events are ready first).
    let mark = signals::mark();
    // Set when the sleep saw the real instance readable: ask it even if no kernel
    // registration is counted.
    let mut kernel_signalled = false;
    let body = || loop {
        let mut n = ep.lock().collect(out);
        if n < out.len() && (kernel_signalled || ep.may_have_kernel_regs()) {
            let rest = &mut out[n..];
            // SAFETY: rest is a live part of the caller's array.
            let m = unsafe { real::epoll_wait(epfd, rest.as_mut_ptr(), rest.len() as c_int, 0) };
            if m > 0 {
                n += m as usize;
            } else if m < 0 && n == 0 && real::errno() != libc::EINTR {
                return Err(real::errno());
            }
        }
        if n > 0 {
            return Ok(n as c_int);
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
        let source = ep.lock().any_source();
        let Some(sluice) = source.as_deref().and_then(sluice_of) else {
            // The engine sockets were all closed meanwhile: the kernel alone.
            let ms = remaining.map_or(-1, |r| r.as_millis().min(c_int::MAX as u128) as c_int);
            // SAFETY: out is the caller's array.
            return pass_int(unsafe { real::epoll_wait(epfd, out.as_mut_ptr(), max, ms) });
        };
        let mut pfd = [libc::pollfd {
            fd: epfd,
            events: libc::POLLIN,
            revents: 0,
        }];
        let mut ready = || ep.lock().any_ready() || mark.interrupts(false);
        match sluice.wait(remaining, &mut pfd, &mut ready) {
            Ok(_) => kernel_signalled = pfd[0].revents != 0,
            Err(e) if interrupted(&e) => return Err(libc::EINTR),
            // The engine died: its sockets now report errors, which the next scan returns.
            Err(_) => {}
        }
    };
    // SAFETY: the caller's mask.
    unsafe { with_sigmask(mask, body) }
}

fn pass_int(r: c_int) -> Result<c_int, c_int> {
    if r < 0 {
        Err(real::errno())
    } else {
        Ok(r)
    }
}

// ---- entry points ----

/// epoll_create(2).
#[cfg_attr(not(test), no_mangle)]
#[allow(clippy::missing_safety_doc)] // libc's contract
pub unsafe extern "C" fn epoll_create(size: c_int) -> c_int {
    // SAFETY: no pointers.
    let fd = unsafe { real::epoll_create(size) };
    crate::guard("epoll_create", (), || created(fd));
    fd
}

/// epoll_create1(2).
#[cfg_attr(not(test), no_mangle)]
#[allow(clippy::missing_safety_doc)] // libc's contract
pub unsafe extern "C" fn epoll_create1(flags: c_int) -> c_int {
    // SAFETY: no pointers.
    let fd = unsafe { real::epoll_create1(flags) };
    crate::guard("epoll_create1", (), || created(fd));
    fd
}

/// epoll_ctl(2).
#[cfg_attr(not(test), no_mangle)]
#[allow(clippy::missing_safety_doc)] // libc's contract
pub unsafe extern "C" fn epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut epoll_event,
) -> c_int {
    if !TABLE.is_tracked(fd) && !TABLE.is_tracked(epfd) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real::epoll_ctl(epfd, op, fd, ev) };
    }
    crate::guard("epoll_ctl", -1, || {
        // SAFETY: the caller's event pointer.
        crate::ret_int(unsafe { ctl(epfd, op, fd, ev) })
    })
}

/// epoll_wait(2).
#[cfg_attr(not(test), no_mangle)]
#[allow(clippy::missing_safety_doc)] // libc's contract
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    // SAFETY: the caller's arguments, unchanged.
    let real_call = || unsafe { real::epoll_wait(epfd, events, max, timeout) };
    if !TABLE.is_tracked(epfd) {
        return real_call();
    }
    crate::guard("epoll_wait", -1, || {
        // SAFETY: events is the caller's array of max entries.
        crate::ret_int(unsafe {
            wait(
                epfd,
                events,
                max,
                timeout_of_ms(timeout),
                std::ptr::null(),
                &real_call,
            )
        })
    })
}

/// epoll_pwait(2).
#[cfg_attr(not(test), no_mangle)]
#[allow(clippy::missing_safety_doc)] // libc's contract
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const sigset_t,
) -> c_int {
    // SAFETY: the caller's arguments, unchanged.
    let real_call = || unsafe { real::epoll_pwait(epfd, events, max, timeout, mask) };
    if !TABLE.is_tracked(epfd) {
        return real_call();
    }
    crate::guard("epoll_pwait", -1, || {
        // SAFETY: events is the caller's array of max entries.
        crate::ret_int(unsafe { wait(epfd, events, max, timeout_of_ms(timeout), mask, &real_call) })
    })
}

/// epoll_pwait2(2).
#[cfg_attr(not(test), no_mangle)]
#[allow(clippy::missing_safety_doc)] // libc's contract
pub unsafe extern "C" fn epoll_pwait2(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    // SAFETY: the caller's arguments, unchanged.
    let real_call = || unsafe { real::epoll_pwait2(epfd, events, max, timeout, mask) };
    if !TABLE.is_tracked(epfd) {
        return real_call();
    }
    crate::guard("epoll_pwait2", -1, || {
        // SAFETY: the caller's timespec.
        let t = match unsafe { timeout_of_timespec(timeout) } {
            Ok(t) => t,
            Err(e) => return crate::ret_int(Err(e)),
        };
        // SAFETY: events is the caller's array of max entries.
        crate::ret_int(unsafe { wait(epfd, events, max, t, mask, &real_call) })
    })
}
