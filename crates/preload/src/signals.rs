//! Signal handlers, so that a signal interrupts the waits this library emulates.
//!
//! Linux ends a blocking call with EINTR when a caught signal's handler runs on the thread
//! in it (signal(7), "Interruption of system calls and library functions by signal
//! handlers"): epoll_wait, poll and select always; read, recv, accept, connect, send and
//! the like only without SA_RESTART, or whatever the flag when the socket has a timeout
//! (SO_RCVTIMEO for the reading calls, SO_SNDTIMEO for the writing ones). The waits on
//! engine sockets first spin in user space (`Sluice::wait`, for the engine's app_idle_us),
//! where no system call is there to be interrupted: a handler that runs meanwhile would
//! leave the wait going (nginx blocked in epoll_wait would never see its SIGTERM flag).
//!
//! So sigaction, `signal` (and bsd_signal), sysv_signal, sigset and siginterrupt are
//! interposed. When a program installs a handler (not SIG_DFL or SIG_IGN), the kernel gets
//! a trampoline instead, with the program's mask and flags plus SA_SIGINFO, and the
//! program's handler and flags go in a fixed table indexed by signal number. The trampoline
//! counts the signal (process-wide, and for the thread it runs on, apart for handlers
//! without SA_RESTART), then calls the program's handler with its own signature. The old
//! action sigaction reports is the program's, never the trampoline. SIG_DFL and SIG_IGN go
//! to the kernel as they are (and the kernel reports them as they are).
//!
//! An emulated blocking call takes a [`Mark`] when it starts and ends with EINTR once
//! [`Mark::interrupts`] says so: it watches the counts of the calling thread only, because
//! on Linux a signal handled by another thread does not interrupt this one's call. A
//! signal during the sleep that ends the spin interrupts poll(2) there, which `Sluice::wait`
//! reports as EINTR.
//!
//! Everything the trampoline touches is async-signal-safe: atomics in static memory and in
//! thread-local storage (this library's TLS is allocated with each thread, as it is loaded
//! at start-up), no allocation, no lock. The table is a seqlock per signal; its writers
//! (sigaction and friends, which may run in a signal handler themselves) block every signal
//! while they hold it, so a trampoline never waits for its own thread.
//!
//! Handlers installed before this library's constructor ran work the same (the table is
//! static; the real sigaction is looked up at first use). Handlers installed without going
//! through these functions (the raw system call, glibc-internal calls) are left alone and
//! do not interrupt the spin.

use std::sync::atomic::{fence, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use libc::{c_int, c_void, sighandler_t, siginfo_t};

use crate::real;

/// Signal numbers are 1..NSIG (Linux: 64 signals).
pub const NSIG: usize = 65;

/// sigset's "add to the signal mask" disposition (glibc's value).
pub const SIG_HOLD: sighandler_t = 2;

/// Linux's historical no-op flag, which glibc's sysv_signal sets.
const SA_INTERRUPT: c_int = 0x2000_0000;

/// A program's disposition for one signal: its handler (SIG_DFL, SIG_IGN or a function)
/// and the sa_flags it asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Action {
    /// sa_sigaction / sa_handler.
    pub handler: sighandler_t,
    /// sa_flags.
    pub flags: c_int,
}

impl Action {
    /// Whether the handler is a function (not SIG_DFL or SIG_IGN).
    pub fn is_function(&self) -> bool {
        self.handler != libc::SIG_DFL && self.handler != libc::SIG_IGN
    }

    /// Whether a call it interrupts is restarted (SA_RESTART).
    pub fn restarts(&self) -> bool {
        self.flags & libc::SA_RESTART != 0
    }
}

/// One signal's entry: a seqlock over the program's action.
struct Slot {
    /// Even: stable; odd: a writer is changing the entry.
    seq: AtomicU32,
    handler: AtomicUsize,
    flags: AtomicI32,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            seq: AtomicU32::new(0),
            handler: AtomicUsize::new(libc::SIG_DFL),
            flags: AtomicI32::new(0),
        }
    }
}

/// Spins a reader makes before it yields the processor to a writer.
const READ_SPINS: u32 = 1 << 10;
/// Tries after which a reader takes what it sees (a writer stopped by a debugger, ...).
const READ_TRIES: u32 = 1 << 20;

/// The handler each signal's trampoline calls: the last handler function the program
/// installed for it, indexed by signal number.
pub struct Table {
    slots: [Slot; NSIG],
}

/// Exclusive access to one entry of the [`Table`]; released when dropped.
pub struct Entry<'a> {
    slot: &'a Slot,
    seq: u32,
}

impl Entry<'_> {
    /// The entry's action.
    pub fn get(&self) -> Action {
        Action {
            handler: self.slot.handler.load(Ordering::Relaxed),
            flags: self.slot.flags.load(Ordering::Relaxed),
        }
    }

    /// Changes the entry's action.
    pub fn set(&self, a: Action) {
        self.slot.handler.store(a.handler, Ordering::Relaxed);
        self.slot.flags.store(a.flags, Ordering::Relaxed);
    }
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        self.slot
            .seq
            .store(self.seq.wrapping_add(2), Ordering::Release);
    }
}

impl Default for Table {
    fn default() -> Table {
        Table::new()
    }
}

impl Table {
    /// Every signal at SIG_DFL.
    pub const fn new() -> Table {
        Table {
            slots: [const { Slot::new() }; NSIG],
        }
    }

    fn slot(&self, sig: c_int) -> Option<&Slot> {
        usize::try_from(sig)
            .ok()
            .filter(|&i| i > 0)
            .and_then(|i| self.slots.get(i))
    }

    /// Locks `sig`'s entry (None for a number outside 1..NSIG). Not async-signal-safe
    /// unless the caller blocks every signal while it holds the entry (see [`install`]).
    pub fn lock(&self, sig: c_int) -> Option<Entry<'_>> {
        let slot = self.slot(sig)?;
        let mut spins = 0u32;
        loop {
            let s = slot.seq.load(Ordering::Relaxed);
            if s & 1 == 0
                && slot
                    .seq
                    .compare_exchange_weak(s, s | 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                // The entry's stores must not become visible before the odd sequence.
                fence(Ordering::Release);
                return Some(Entry { slot, seq: s });
            }
            relax(&mut spins);
        }
    }

    /// `sig`'s action (None outside 1..NSIG). Async-signal-safe: it never writes, and a
    /// writer holds every signal blocked, so it cannot be this thread.
    pub fn read(&self, sig: c_int) -> Option<Action> {
        let slot = self.slot(sig)?;
        let mut spins = 0u32;
        for _ in 0..READ_TRIES {
            let s1 = slot.seq.load(Ordering::Acquire);
            if s1 & 1 == 0 {
                let handler = slot.handler.load(Ordering::Relaxed);
                let flags = slot.flags.load(Ordering::Relaxed);
                fence(Ordering::Acquire);
                if slot.seq.load(Ordering::Relaxed) == s1 {
                    return Some(Action { handler, flags });
                }
            }
            relax(&mut spins);
        }
        Some(Action {
            handler: slot.handler.load(Ordering::Acquire),
            flags: slot.flags.load(Ordering::Acquire),
        })
    }

    /// In a fork child: an entry a thread of the parent was changing is released (that
    /// thread does not exist here).
    pub fn after_fork_child(&self) {
        for slot in &self.slots {
            let s = slot.seq.load(Ordering::Relaxed);
            if s & 1 != 0 {
                slot.seq.store(s.wrapping_add(1), Ordering::Release);
            }
        }
    }
}

/// Spins, then yields (sched_yield is async-signal-safe).
fn relax(spins: &mut u32) {
    if *spins < READ_SPINS {
        *spins += 1;
        std::hint::spin_loop();
    } else {
        // SAFETY: no arguments.
        unsafe { libc::sched_yield() };
    }
}

/// The programs' handlers.
pub static TABLE: Table = Table::new();

/// Signals for which `siginterrupt(sig, 1)` was called (bit sig - 1): `signal` installs
/// their handlers without SA_RESTART, as glibc's does.
static INTERRUPTING: AtomicU64 = AtomicU64::new(0);

// ---- counting ----

/// Program handlers run through the trampoline, process-wide.
static TOTAL: AtomicU64 = AtomicU64::new(0);

/// Handlers run on one thread.
struct Counts {
    /// Every handler.
    all: AtomicU64,
    /// Handlers without SA_RESTART.
    no_restart: AtomicU64,
}

thread_local! {
    // Const-initialised and without a destructor: a plain TLS access, nothing lazy (safe in
    // a signal handler).
    static THREAD: Counts = const {
        Counts {
            all: AtomicU64::new(0),
            no_restart: AtomicU64::new(0),
        }
    };
}

/// Counts one handler run on this thread.
fn note(a: &Action) {
    TOTAL.fetch_add(1, Ordering::Relaxed);
    // try_with: never a panic in a signal handler (it cannot fail for this key anyway).
    let _ = THREAD.try_with(|c| {
        c.all.fetch_add(1, Ordering::Relaxed);
        if !a.restarts() {
            c.no_restart.fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// Program handlers that ran through the trampoline so far, in every thread.
pub fn total() -> u64 {
    TOTAL.load(Ordering::Relaxed)
}

/// The calling thread's handler counts at one moment: taken when a blocking call starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    all: u64,
    no_restart: u64,
}

/// The calling thread's counts now.
pub fn mark() -> Mark {
    THREAD
        .try_with(|c| Mark {
            all: c.all.load(Ordering::Relaxed),
            no_restart: c.no_restart.load(Ordering::Relaxed),
        })
        .unwrap_or(Mark {
            all: 0,
            no_restart: 0,
        })
}

impl Mark {
    /// Whether a handler that ran on this thread since the mark ends the call with EINTR:
    /// any handler for a call that is never restarted (`restartable` false: epoll_wait,
    /// poll, select, a socket call with a timeout), a handler without SA_RESTART otherwise.
    pub fn interrupts(&self, restartable: bool) -> bool {
        let now = mark();
        if restartable {
            now.no_restart != self.no_restart
        } else {
            now.all != self.all
        }
    }
}

// ---- the trampoline ----

type InfoHandler = unsafe extern "C-unwind" fn(c_int, *mut siginfo_t, *mut c_void);
type PlainHandler = unsafe extern "C-unwind" fn(c_int);

/// What the kernel runs for every signal a program handles: counts it, then runs the
/// program's handler with its own signature.
extern "C-unwind" fn trampoline(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    let Some(a) = TABLE.read(sig) else {
        return;
    };
    // No handler recorded: the trampoline was installed behind this library's back.
    if !a.is_function() || a.handler == trampoline_address() {
        return;
    }
    note(&a);
    if a.flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the program installed this function as an SA_SIGINFO handler.
        let f = unsafe { std::mem::transmute::<sighandler_t, InfoHandler>(a.handler) };
        // SAFETY: the kernel's arguments, as the kernel would have passed them.
        unsafe { f(sig, info, ctx) }
    } else {
        // SAFETY: the program installed this function as a plain handler.
        let f = unsafe { std::mem::transmute::<sighandler_t, PlainHandler>(a.handler) };
        // SAFETY: as above.
        unsafe { f(sig) }
    }
}

/// The trampoline's address, as a sighandler_t.
pub fn trampoline_address() -> sighandler_t {
    trampoline as InfoHandler as sighandler_t
}

// ---- installing ----

/// Every signal blocked on this thread until dropped (pthread_sigmask is
/// async-signal-safe; glibc keeps its own two signals out of the set).
struct AllBlocked(libc::sigset_t);

impl AllBlocked {
    fn new() -> AllBlocked {
        // SAFETY: all-zero sigsets are valid for sigfillset/pthread_sigmask to overwrite.
        let (mut all, mut old): (libc::sigset_t, libc::sigset_t) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        // SAFETY: live local sets.
        unsafe {
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        }
        AllBlocked(old)
    }
}

impl Drop for AllBlocked {
    fn drop(&mut self) {
        // SAFETY: the mask saved by new().
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
    }
}

/// sigaction(2) as a program sees it: a handler function is installed as the trampoline
/// (the program's action goes in [`TABLE`]), and `old` reports the program's action.
///
/// # Safety
/// sigaction's contract: `act` null or valid, `old` null or writable.
pub unsafe fn install(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    let blocked = AllBlocked::new();
    let Some(entry) = TABLE.lock(sig) else {
        drop(blocked);
        // Not a signal number: the C library says what it says (EINVAL).
        // SAFETY: the caller's arguments.
        return unsafe { real::sigaction(sig, act, old) };
    };
    let before = entry.get();
    // SAFETY: a non-null act is the caller's.
    let new = unsafe { act.as_ref() }.copied();
    let r = match new {
        Some(a) if a.sa_sigaction == trampoline_address() => {
            // Only the kernel's view could have told the program this address: pass it on,
            // keeping the handler the trampoline calls.
            // SAFETY: the caller's arguments.
            unsafe { real::sigaction(sig, act, old) }
        }
        Some(a) => {
            let program = Action {
                handler: a.sa_sigaction,
                flags: a.sa_flags,
            };
            let mut k = a;
            if program.is_function() {
                k.sa_sigaction = trampoline_address();
                k.sa_flags |= libc::SA_SIGINFO;
            }
            // SAFETY: k is a live sigaction; old is the caller's.
            let r = unsafe { real::sigaction(sig, &k, old) };
            // SIG_DFL and SIG_IGN leave the entry alone: the kernel holds them and reports
            // them itself, and the handler stays for a trampoline already under way (Linux
            // runs the handler chosen at delivery) or for a vfork parent whose child (same
            // memory, its own dispositions) resets its signals before exec.
            if r == 0 && program.is_function() {
                entry.set(program);
            }
            r
        }
        // SAFETY: a query; old is the caller's.
        None => unsafe { real::sigaction(sig, std::ptr::null(), old) },
    };
    let errno = real::errno();
    drop(entry);
    drop(blocked);
    if r == 0 {
        // SAFETY: a non-null old is the caller's, just filled in.
        if let Some(o) = unsafe { old.as_mut() } {
            report(o, before);
        }
    }
    real::set_errno(errno);
    r
}

/// Puts the program's handler in place of the trampoline in an old action the kernel gave.
fn report(o: &mut libc::sigaction, program: Action) {
    if o.sa_sigaction == trampoline_address() {
        o.sa_sigaction = program.handler;
        o.sa_flags = (o.sa_flags & !libc::SA_SIGINFO) | (program.flags & libc::SA_SIGINFO);
    }
}

/// A zeroed sigaction with `handler`, `flags` and an empty mask.
fn action_of(handler: sighandler_t, flags: c_int) -> libc::sigaction {
    // SAFETY: an all-zero sigaction is valid (SIG_DFL, empty mask, no flags).
    let mut a: libc::sigaction = unsafe { std::mem::zeroed() };
    a.sa_sigaction = handler;
    a.sa_flags = flags;
    // SAFETY: a live set.
    unsafe { libc::sigemptyset(&mut a.sa_mask) };
    a
}

/// Whether `sig` is a signal number `signal` and friends accept.
fn valid(sig: c_int) -> bool {
    (1..NSIG as c_int).contains(&sig)
}

/// glibc's signal (BSD semantics): the signal blocked in its handler, SA_RESTART unless
/// siginterrupt said otherwise.
pub fn signal_bsd(sig: c_int, handler: sighandler_t) -> sighandler_t {
    if handler == libc::SIG_ERR || !valid(sig) {
        real::set_errno(libc::EINVAL);
        return libc::SIG_ERR;
    }
    let restart = if INTERRUPTING.load(Ordering::Relaxed) & (1 << (sig - 1)) != 0 {
        0
    } else {
        libc::SA_RESTART
    };
    let mut act = action_of(handler, restart);
    // SAFETY: a live set; sig is valid.
    unsafe { libc::sigaddset(&mut act.sa_mask, sig) };
    replace(sig, &act)
}

/// glibc's sysv_signal: one-shot, not blocked in its handler, never restarting.
pub fn signal_sysv(sig: c_int, handler: sighandler_t) -> sighandler_t {
    if handler == libc::SIG_ERR || !valid(sig) {
        real::set_errno(libc::EINVAL);
        return libc::SIG_ERR;
    }
    let act = action_of(
        handler,
        libc::SA_RESETHAND | libc::SA_NODEFER | SA_INTERRUPT,
    );
    replace(sig, &act)
}

/// Installs `act`, returning the old handler or SIG_ERR.
fn replace(sig: c_int, act: &libc::sigaction) -> sighandler_t {
    let mut old = action_of(libc::SIG_DFL, 0);
    // SAFETY: live locals.
    if unsafe { install(sig, act, &mut old) } < 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

/// Blocks or unblocks `sig` on this thread; returns whether it was blocked, or None.
fn mask_one(how: c_int, sig: c_int) -> Option<bool> {
    // SAFETY: all-zero sigsets are valid to fill in.
    let (mut set, mut old): (libc::sigset_t, libc::sigset_t) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: live local sets.
    unsafe {
        libc::sigemptyset(&mut set);
        if libc::sigaddset(&mut set, sig) < 0 {
            return None;
        }
        if libc::sigprocmask(how, &set, &mut old) < 0 {
            return None;
        }
        Some(libc::sigismember(&old, sig) == 1)
    }
}

/// sigset (System V): SIG_HOLD blocks the signal; anything else installs it (empty mask,
/// no flags) and unblocks it. Returns the old handler, or SIG_HOLD if it was blocked.
pub fn sigset_impl(sig: c_int, disp: sighandler_t) -> sighandler_t {
    if !valid(sig) {
        real::set_errno(libc::EINVAL);
        return libc::SIG_ERR;
    }
    if disp == SIG_HOLD {
        let Some(was_blocked) = mask_one(libc::SIG_BLOCK, sig) else {
            return libc::SIG_ERR;
        };
        if was_blocked {
            return SIG_HOLD;
        }
        let mut old = action_of(libc::SIG_DFL, 0);
        // SAFETY: a query into a live local.
        if unsafe { install(sig, std::ptr::null(), &mut old) } < 0 {
            return libc::SIG_ERR;
        }
        return old.sa_sigaction;
    }
    let old = replace(sig, &action_of(disp, 0));
    if old == libc::SIG_ERR {
        return old;
    }
    match mask_one(libc::SIG_UNBLOCK, sig) {
        None => libc::SIG_ERR,
        Some(true) => SIG_HOLD,
        Some(false) => old,
    }
}

/// siginterrupt: whether a call `sig`'s handler interrupts fails with EINTR (no
/// SA_RESTART) or is restarted; also for handlers `signal` installs later.
pub fn siginterrupt_impl(sig: c_int, interrupt: c_int) -> c_int {
    if !valid(sig) {
        real::set_errno(libc::EINVAL);
        return -1;
    }
    let mut act = action_of(libc::SIG_DFL, 0);
    // SAFETY: a query into a live local.
    if unsafe { install(sig, std::ptr::null(), &mut act) } < 0 {
        return -1;
    }
    let bit = 1u64 << (sig - 1);
    if interrupt != 0 {
        INTERRUPTING.fetch_or(bit, Ordering::Relaxed);
        act.sa_flags &= !libc::SA_RESTART;
    } else {
        INTERRUPTING.fetch_and(!bit, Ordering::Relaxed);
        act.sa_flags |= libc::SA_RESTART;
    }
    // SAFETY: a live local.
    unsafe { install(sig, &act, std::ptr::null_mut()) }
}

/// Looks the real sigaction up now (from the constructor): a first call made in a signal
/// handler must not run dlsym.
pub fn init() {
    // SAFETY: a query of no signal's action: EINVAL, no effect.
    unsafe { real::sigaction(0, std::ptr::null(), std::ptr::null_mut()) };
}

/// In a fork child.
pub fn after_fork_child() {
    TABLE.after_fork_child();
}

// ---- entry points ----

/// sigaction(2).
#[cfg_attr(not(test), no_mangle)]
#[allow(clippy::missing_safety_doc)] // libc's contract
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { install(sig, act, old) }
}

/// glibc's other name for sigaction.
#[cfg_attr(not(test), no_mangle)]
#[allow(clippy::missing_safety_doc)] // libc's contract
pub unsafe extern "C" fn __sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { install(sig, act, old) }
}

/// signal(2) (glibc's: BSD semantics).
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    signal_bsd(sig, handler)
}

/// bsd_signal(3).
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn bsd_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    signal_bsd(sig, handler)
}

/// sysv_signal(3).
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn sysv_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    signal_sysv(sig, handler)
}

/// glibc's other name for sysv_signal.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn __sysv_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    signal_sysv(sig, handler)
}

/// sigset(3).
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn sigset(sig: c_int, disp: sighandler_t) -> sighandler_t {
    sigset_impl(sig, disp)
}

/// siginterrupt(3).
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn siginterrupt(sig: c_int, interrupt: c_int) -> c_int {
    siginterrupt_impl(sig, interrupt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    /// The kernel's own view of a signal's handler (the raw system call, not interposed).
    fn kernel_handler(sig: c_int) -> sighandler_t {
        #[repr(C)]
        struct KernelAction {
            handler: sighandler_t,
            flags: u64,
            restorer: usize,
            mask: u64,
        }
        let mut k = KernelAction {
            handler: 0,
            flags: 0,
            restorer: 0,
            mask: 0,
        };
        // SAFETY: rt_sigaction with a null new action and a live old one of the kernel's
        // layout and an 8-byte mask.
        let r = unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                std::ptr::null::<KernelAction>(),
                &mut k,
                8usize,
            )
        };
        assert_eq!(r, 0);
        k.handler
    }

    fn query(sig: c_int) -> libc::sigaction {
        let mut old = action_of(libc::SIG_DFL, 0);
        // SAFETY: a query into a live local.
        assert_eq!(unsafe { install(sig, std::ptr::null(), &mut old) }, 0);
        old
    }

    fn set(sig: c_int, handler: sighandler_t, flags: c_int) -> libc::sigaction {
        let act = action_of(handler, flags);
        let mut old = action_of(libc::SIG_DFL, 0);
        // SAFETY: live locals.
        assert_eq!(unsafe { install(sig, &act, &mut old) }, 0);
        old
    }

    fn raise(sig: c_int) {
        // SAFETY: raise delivers to the calling thread, whose handler is installed.
        assert_eq!(unsafe { libc::raise(sig) }, 0);
    }

    /// Each test has its own signals (tests run in parallel in one process).
    fn rt(n: c_int) -> c_int {
        libc::SIGRTMIN() + n
    }

    static PLAIN_RUNS: [AtomicU64; NSIG] = [const { AtomicU64::new(0) }; NSIG];
    static INFO_OK: [AtomicU64; NSIG] = [const { AtomicU64::new(0) }; NSIG];

    extern "C-unwind" fn plain(sig: c_int) {
        PLAIN_RUNS[sig as usize].fetch_add(1, Ordering::Relaxed);
    }

    extern "C-unwind" fn with_info(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
        // SAFETY: the kernel's siginfo.
        let signo = unsafe { info.as_ref() }.map(|i| i.si_signo);
        if signo == Some(sig) && !ctx.is_null() {
            INFO_OK[sig as usize].fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn the_table_starts_at_sig_dfl_and_knows_only_signal_numbers() {
        let t = Table::new();
        assert_eq!(t.read(libc::SIGTERM), Some(Action::default()));
        assert_eq!(t.read(0), None);
        assert_eq!(t.read(-3), None);
        assert_eq!(t.read(NSIG as c_int), None);
        assert!(t.lock(NSIG as c_int).is_none());
        let a = Action {
            handler: 0x1234,
            flags: libc::SA_SIGINFO,
        };
        t.lock(64).expect("64 is a signal").set(a);
        assert_eq!(t.read(64), Some(a));
        assert!(a.is_function() && !a.restarts());
        assert!(!Action::default().is_function());
    }

    #[test]
    fn an_entry_locked_at_fork_time_is_released_in_the_child() {
        let t = Table::new();
        let e = t.lock(5).expect("entry");
        std::mem::forget(e); // the thread that held it does not exist in the child
        t.after_fork_child();
        t.lock(5).expect("relockable").set(Action {
            handler: 9,
            flags: 0,
        });
        assert_eq!(t.read(5).map(|a| a.handler), Some(9));
    }

    #[test]
    fn readers_never_see_half_an_update() {
        let t = Arc::new(Table::new());
        let a = Action {
            handler: 0x1000,
            flags: libc::SA_SIGINFO,
        };
        let b = Action {
            handler: 0x2000,
            flags: libc::SA_RESTART,
        };
        t.lock(7).expect("entry").set(a);
        // Readers run until the writer has flipped the entry many times, however the
        // threads are scheduled.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (t, stop) = (t.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut reads = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) || reads == 0 {
                        let r = t.read(7).expect("entry");
                        assert!(r == a || r == b, "torn read {r:?}");
                        reads += 1;
                    }
                })
            })
            .collect();
        for i in 0..100_000u64 {
            t.lock(7)
                .expect("entry")
                .set(if i % 2 == 0 { b } else { a });
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for r in readers {
            r.join().expect("reader");
        }
    }

    #[test]
    fn a_program_handler_runs_through_the_trampoline_and_old_actions_round_trip() {
        let sig = rt(1);
        let before_total = total();
        let mut act = action_of(with_info as InfoHandler as sighandler_t, 0);
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        // SAFETY: a live set.
        unsafe { libc::sigaddset(&mut act.sa_mask, libc::SIGUSR2) };
        let mut old = action_of(libc::SIG_DFL, 0);
        // SAFETY: live locals.
        assert_eq!(unsafe { install(sig, &act, &mut old) }, 0);
        assert_eq!(old.sa_sigaction, libc::SIG_DFL);
        assert_eq!(
            kernel_handler(sig),
            trampoline_address(),
            "the kernel runs ours"
        );

        let now = query(sig);
        assert_eq!(
            now.sa_sigaction, act.sa_sigaction,
            "the program's handler reported"
        );
        assert_ne!(now.sa_flags & libc::SA_SIGINFO, 0);
        assert_ne!(now.sa_flags & libc::SA_RESTART, 0);
        // SAFETY: a live set.
        assert_eq!(unsafe { libc::sigismember(&now.sa_mask, libc::SIGUSR2) }, 1);

        let m = mark();
        raise(sig);
        assert_eq!(INFO_OK[sig as usize].load(Ordering::Relaxed), 1);
        assert!(total() > before_total);
        assert!(m.interrupts(false), "epoll/poll/select: always EINTR");
        assert!(!m.interrupts(true), "SA_RESTART: a read goes on");

        // Replacing it reports the old one, SA_SIGINFO included; the new one is plain.
        let old = set(sig, plain as PlainHandler as sighandler_t, 0);
        assert_eq!(old.sa_sigaction, act.sa_sigaction);
        assert_ne!(old.sa_flags & libc::SA_SIGINFO, 0);
        let now = query(sig);
        assert_eq!(now.sa_flags & libc::SA_SIGINFO, 0, "the program's flags");
        let m = mark();
        raise(sig);
        assert_eq!(PLAIN_RUNS[sig as usize].load(Ordering::Relaxed), 1);
        assert!(m.interrupts(true), "no SA_RESTART: a read ends too");

        // SIG_IGN and SIG_DFL go to the kernel as they are.
        let old = set(sig, libc::SIG_IGN, 0);
        assert_eq!(old.sa_sigaction, plain as PlainHandler as sighandler_t);
        assert_eq!(kernel_handler(sig), libc::SIG_IGN);
        let m = mark();
        raise(sig);
        assert!(!m.interrupts(false), "an ignored signal interrupts nothing");
        assert_eq!(PLAIN_RUNS[sig as usize].load(Ordering::Relaxed), 1);
        assert_eq!(
            TABLE.read(sig).map(|a| a.handler),
            Some(plain as PlainHandler as sighandler_t),
            "the last handler stays for a delivery already under way"
        );
        assert_eq!(set(sig, libc::SIG_DFL, 0).sa_sigaction, libc::SIG_IGN);
        assert_eq!(query(sig).sa_sigaction, libc::SIG_DFL);
    }

    #[test]
    fn act_and_old_may_be_the_same_struct() {
        let sig = rt(2);
        set(sig, plain as PlainHandler as sighandler_t, libc::SA_RESTART);
        let mut both = action_of(libc::SIG_IGN, 0);
        // SAFETY: one live local as both arguments (allowed by sigaction).
        assert_eq!(unsafe { install(sig, &both, &mut both) }, 0);
        assert_eq!(both.sa_sigaction, plain as PlainHandler as sighandler_t);
        assert_eq!(query(sig).sa_sigaction, libc::SIG_IGN);
    }

    #[test]
    fn bad_signal_numbers_fail_as_the_c_library_says() {
        let act = action_of(libc::SIG_IGN, 0);
        for sig in [0, -1, NSIG as c_int, 1000] {
            // SAFETY: live locals.
            assert_eq!(unsafe { install(sig, &act, std::ptr::null_mut()) }, -1);
            assert_eq!(real::errno(), libc::EINVAL);
            assert_eq!(signal_bsd(sig, libc::SIG_IGN), libc::SIG_ERR);
        }
        // SIGKILL cannot be caught: the kernel refuses, the table is unchanged.
        let h = plain as PlainHandler as sighandler_t;
        // SAFETY: live locals.
        let r = unsafe { install(libc::SIGKILL, &action_of(h, 0), std::ptr::null_mut()) };
        assert_eq!((r, real::errno()), (-1, libc::EINVAL));
        assert_eq!(TABLE.read(libc::SIGKILL), Some(Action::default()));
    }

    #[test]
    fn signal_is_bsd_and_siginterrupt_turns_sa_restart_off() {
        let sig = rt(3);
        let h = plain as PlainHandler as sighandler_t;
        assert_eq!(signal_bsd(sig, h), libc::SIG_DFL);
        let a = query(sig);
        assert_eq!(a.sa_sigaction, h);
        assert_ne!(a.sa_flags & libc::SA_RESTART, 0);
        // SAFETY: a live set.
        assert_eq!(unsafe { libc::sigismember(&a.sa_mask, sig) }, 1);
        let m = mark();
        raise(sig);
        assert_eq!(PLAIN_RUNS[sig as usize].load(Ordering::Relaxed), 1);
        assert!(!m.interrupts(true));

        assert_eq!(siginterrupt_impl(sig, 1), 0);
        assert_eq!(query(sig).sa_flags & libc::SA_RESTART, 0);
        assert_eq!(kernel_handler(sig), trampoline_address());
        let m = mark();
        raise(sig);
        assert!(m.interrupts(true), "siginterrupt(1): reads end with EINTR");
        // Later signal() calls remember it, until siginterrupt(0).
        assert_eq!(signal_bsd(sig, h), h);
        assert_eq!(query(sig).sa_flags & libc::SA_RESTART, 0);
        assert_eq!(siginterrupt_impl(sig, 0), 0);
        assert_ne!(query(sig).sa_flags & libc::SA_RESTART, 0);
        assert_eq!(signal_bsd(sig, libc::SIG_DFL), h);
    }

    #[test]
    fn sysv_signal_is_one_shot() {
        let sig = rt(4);
        let h = plain as PlainHandler as sighandler_t;
        assert_eq!(signal_sysv(sig, h), libc::SIG_DFL);
        let m = mark();
        raise(sig);
        assert_eq!(PLAIN_RUNS[sig as usize].load(Ordering::Relaxed), 1);
        assert!(m.interrupts(true));
        assert_eq!(query(sig).sa_sigaction, libc::SIG_DFL, "reset on delivery");
    }

    #[test]
    fn sigset_holds_and_releases() {
        let sig = rt(5);
        let h = plain as PlainHandler as sighandler_t;
        let blocked = |sig| {
            // SAFETY: all-zero is a valid set to fill in; a query of the mask.
            let mut cur: libc::sigset_t = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut cur) };
            // SAFETY: a live set.
            unsafe { libc::sigismember(&cur, sig) == 1 }
        };
        assert_eq!(sigset_impl(sig, h), libc::SIG_DFL);
        assert_eq!(
            sigset_impl(sig, SIG_HOLD),
            h,
            "not blocked before: the handler"
        );
        assert!(blocked(sig));
        assert_eq!(sigset_impl(sig, SIG_HOLD), SIG_HOLD, "already blocked");
        raise(sig); // pending while held
        assert_eq!(PLAIN_RUNS[sig as usize].load(Ordering::Relaxed), 0);
        assert_eq!(sigset_impl(sig, h), SIG_HOLD, "it was held");
        assert!(!blocked(sig));
        assert_eq!(
            PLAIN_RUNS[sig as usize].load(Ordering::Relaxed),
            1,
            "delivered"
        );
        assert_eq!(sigset_impl(sig, libc::SIG_DFL), h);
        assert_eq!(sigset_impl(0, h), libc::SIG_ERR);
    }

    static NESTED_DONE: AtomicBool = AtomicBool::new(false);

    extern "C-unwind" fn installs_another(_sig: c_int) {
        // sigaction from a signal handler: the table is only written with every signal
        // blocked, so this cannot deadlock on the entry being read for this very signal.
        let sig = rt(7);
        let act = action_of(plain as PlainHandler as sighandler_t, 0);
        let mut old = action_of(libc::SIG_DFL, 0);
        // SAFETY: live locals.
        let ok = unsafe { install(sig, &act, &mut old) } == 0;
        NESTED_DONE.store(ok && old.sa_sigaction == libc::SIG_DFL, Ordering::Relaxed);
    }

    #[test]
    fn sigaction_works_inside_a_handler() {
        let sig = rt(6);
        set(sig, installs_another as PlainHandler as sighandler_t, 0);
        raise(sig);
        assert!(NESTED_DONE.load(Ordering::Relaxed));
        assert_eq!(
            query(rt(7)).sa_sigaction,
            plain as PlainHandler as sighandler_t
        );
        raise(rt(7));
        assert_eq!(PLAIN_RUNS[rt(7) as usize].load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_handler_on_another_thread_does_not_interrupt_this_one() {
        let sig = rt(8);
        set(sig, plain as PlainHandler as sighandler_t, 0);
        let m = mark();
        std::thread::spawn(move || raise(sig))
            .join()
            .expect("raiser");
        assert_eq!(PLAIN_RUNS[sig as usize].load(Ordering::Relaxed), 1);
        assert!(
            !m.interrupts(false),
            "Linux interrupts the thread that ran it only"
        );
    }
}
