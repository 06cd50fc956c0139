//! The descriptor table: which fd numbers this library manages, and what they refer to.
//!
//! A fixed array of atomic pointers indexed by fd (fds below [`MAX_FDS`]). Every interposed
//! call first loads its fd's slot: a null slot (every descriptor the application opened for
//! files, pipes, Unix sockets, and everything Rust's std and libsluice open themselves) means
//! "go straight to the kernel", with no lock, no allocation, one relaxed-cost load.
//!
//! A non-null slot holds one strong count of an `Arc`. Dup'd fds hold one count each on the
//! same object, so a socket lives until its last fd is closed (and until the last call in
//! flight on it returns). Taking a reference while another thread may be closing the fd
//! needs the slot not to be freed in between: a striped reader-writer spin lock covers that
//! instant (readers: load + count increment; writers: pointer swap). The locks are held for
//! a few instructions and never across a call into libsluice or the kernel, and a fork child
//! resets them ([`FdTable::after_fork_child`]), since a thread that held one at fork is gone.

use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::Arc;

/// Descriptors at or above this number are never managed (they always go to the kernel).
pub const MAX_FDS: usize = 65536;

/// Lock stripes (slot `fd` uses stripe `fd % STRIPES`).
const STRIPES: usize = 64;

/// A reader-writer spin lock: a count of readers, or the writer bit.
pub struct RwSpin(AtomicU32);

const WRITER: u32 = 1 << 31;

impl RwSpin {
    /// An unlocked lock.
    pub const fn new() -> RwSpin {
        RwSpin(AtomicU32::new(0))
    }

    fn read_lock(&self) {
        let mut spins = 0u32;
        loop {
            let s = self.0.load(Ordering::Relaxed);
            if s & WRITER == 0
                && self
                    .0
                    .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            backoff(&mut spins);
        }
    }

    fn read_unlock(&self) {
        self.0.fetch_sub(1, Ordering::Release);
    }

    fn write_lock(&self) {
        let mut spins = 0u32;
        while self
            .0
            .compare_exchange_weak(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            backoff(&mut spins);
        }
    }

    fn write_unlock(&self) {
        self.0.store(0, Ordering::Release);
    }

    /// Unlocks whatever state the lock is in (only in a fork child, where the holders are
    /// gone and every critical section is a single atomic step that either happened or not).
    pub fn force_unlock(&self) {
        self.0.store(0, Ordering::Release);
    }
}

impl Default for RwSpin {
    fn default() -> Self {
        RwSpin::new()
    }
}

/// Spins briefly, then yields: the sections guarded are a few instructions long, but the
/// holder may have been preempted.
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// fd → `Arc<T>` for fds below `N`, lock-free for untracked fds.
pub struct FdTable<T, const N: usize> {
    slots: [AtomicPtr<T>; N],
    stripes: [RwSpin; STRIPES],
}

/// Why an fd could not be put in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfRange;

impl<T, const N: usize> FdTable<T, N> {
    /// An empty table (const, so the global one lives in .bss and needs no initialisation).
    pub const fn new() -> Self {
        FdTable {
            slots: [const { AtomicPtr::new(ptr::null_mut()) }; N],
            stripes: [const { RwSpin::new() }; STRIPES],
        }
    }

    fn slot(&self, fd: i32) -> Option<&AtomicPtr<T>> {
        usize::try_from(fd).ok().and_then(|i| self.slots.get(i))
    }

    fn stripe(&self, fd: i32) -> &RwSpin {
        &self.stripes[(fd as usize) % STRIPES]
    }

    /// Whether `fd` is managed (lock-free; the hot-path test for every interposed call).
    #[inline]
    pub fn is_tracked(&self, fd: i32) -> bool {
        self.slot(fd)
            .is_some_and(|s| !s.load(Ordering::Acquire).is_null())
    }

    /// What `fd` refers to, or None (the kernel's). No lock unless the fd is managed.
    #[inline]
    pub fn get(&self, fd: i32) -> Option<Arc<T>> {
        let slot = self.slot(fd)?;
        if slot.load(Ordering::Acquire).is_null() {
            return None;
        }
        let stripe = self.stripe(fd);
        stripe.read_lock();
        let p = slot.load(Ordering::Acquire);
        let got = if p.is_null() {
            None
        } else {
            // SAFETY: p came from Arc::into_raw and the slot still owns one count (a remover
            // must take the write lock before taking it away), so the object is alive while
            // we add a count for the reference we return.
            unsafe {
                Arc::increment_strong_count(p);
                Some(Arc::from_raw(p))
            }
        };
        stripe.read_unlock();
        got
    }

    /// Makes `fd` refer to `obj`; returns what it referred to before (dropped by the caller,
    /// outside the lock).
    pub fn insert(&self, fd: i32, obj: Arc<T>) -> Result<Option<Arc<T>>, OutOfRange> {
        let slot = self.slot(fd).ok_or(OutOfRange)?;
        let p = Arc::into_raw(obj) as *mut T;
        let stripe = self.stripe(fd);
        stripe.write_lock();
        let old = slot.swap(p, Ordering::AcqRel);
        stripe.write_unlock();
        // SAFETY: a non-null old pointer came from Arc::into_raw and its count was the slot's.
        Ok((!old.is_null()).then(|| unsafe { Arc::from_raw(old) }))
    }

    /// Forgets `fd`; returns what it referred to (the slot's count, for the caller to drop).
    pub fn remove(&self, fd: i32) -> Option<Arc<T>> {
        let slot = self.slot(fd)?;
        if slot.load(Ordering::Acquire).is_null() {
            return None;
        }
        let stripe = self.stripe(fd);
        stripe.write_lock();
        let old = slot.swap(ptr::null_mut(), Ordering::AcqRel);
        stripe.write_unlock();
        // SAFETY: as in insert.
        (!old.is_null()).then(|| unsafe { Arc::from_raw(old) })
    }

    /// Forgets `fd` only if it still refers to `obj` (a decision racing with close and
    /// reuse of the number must not forget the new descriptor's object).
    pub fn remove_if(&self, fd: i32, obj: &Arc<T>) -> Option<Arc<T>> {
        let slot = self.slot(fd)?;
        let want = Arc::as_ptr(obj) as *mut T;
        let stripe = self.stripe(fd);
        stripe.write_lock();
        let swapped =
            slot.compare_exchange(want, ptr::null_mut(), Ordering::AcqRel, Ordering::Acquire);
        stripe.write_unlock();
        // SAFETY: on success the slot's count on `want` is handed to us.
        swapped.ok().map(|p| unsafe { Arc::from_raw(p) })
    }

    /// Resets the locks in a fork child (see [`RwSpin::force_unlock`]).
    pub fn after_fork_child(&self) {
        for s in &self.stripes {
            s.force_unlock();
        }
    }
}

impl<T, const N: usize> Default for FdTable<T, N> {
    fn default() -> Self {
        FdTable::new()
    }
}

impl<T, const N: usize> Drop for FdTable<T, N> {
    fn drop(&mut self) {
        for slot in &self.slots {
            let p = slot.swap(ptr::null_mut(), Ordering::AcqRel);
            if !p.is_null() {
                // SAFETY: the slot owned this count.
                drop(unsafe { Arc::from_raw(p) });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untracked_fds_are_none_and_out_of_range_is_refused() {
        let t: FdTable<u32, 16> = FdTable::new();
        assert!(t.get(3).is_none());
        assert!(!t.is_tracked(3));
        assert!(t.get(-1).is_none());
        assert!(t.get(16).is_none());
        assert_eq!(t.insert(16, Arc::new(1)), Err(OutOfRange));
        assert_eq!(t.insert(-2, Arc::new(1)), Err(OutOfRange));
    }

    #[test]
    fn dups_share_one_object_until_the_last_close() {
        let t: FdTable<String, 16> = FdTable::new();
        let obj = Arc::new("socket".to_string());
        let weak = Arc::downgrade(&obj);
        assert!(t.insert(3, obj.clone()).unwrap().is_none());
        assert!(t.insert(7, obj).unwrap().is_none()); // dup(3) = 7
        assert_eq!(weak.strong_count(), 2);
        let r = t.get(7).unwrap();
        assert_eq!(
            weak.strong_count(),
            3,
            "a call in flight holds its own count"
        );
        drop(r);
        drop(t.remove(3));
        assert!(weak.upgrade().is_some(), "fd 7 still refers to it");
        assert!(t.get(3).is_none());
        drop(t.remove(7));
        assert!(weak.upgrade().is_none(), "the last close released it");
        assert!(t.remove(7).is_none());
    }

    #[test]
    fn remove_if_only_removes_the_same_object() {
        let t: FdTable<u32, 8> = FdTable::new();
        let a = Arc::new(1);
        let b = Arc::new(2);
        t.insert(4, b.clone()).unwrap();
        assert!(t.remove_if(4, &a).is_none());
        assert_eq!(t.get(4).as_deref(), Some(&2));
        assert!(t.remove_if(4, &b).is_some());
        assert!(t.get(4).is_none());
    }

    #[test]
    fn insert_over_a_tracked_fd_returns_the_old_object() {
        let t: FdTable<u32, 16> = FdTable::new();
        t.insert(5, Arc::new(1)).unwrap();
        let old = t.insert(5, Arc::new(2)).unwrap(); // dup2 onto a managed fd
        assert_eq!(old.as_deref(), Some(&1));
        assert_eq!(t.get(5).as_deref(), Some(&2));
    }

    #[test]
    fn dropping_the_table_releases_every_object() {
        let obj = Arc::new(9u32);
        {
            let t: FdTable<u32, 8> = FdTable::new();
            t.insert(1, obj.clone()).unwrap();
            t.insert(2, obj.clone()).unwrap();
            assert_eq!(Arc::strong_count(&obj), 3);
        }
        assert_eq!(Arc::strong_count(&obj), 1);
    }

    #[test]
    fn concurrent_get_and_remove_never_use_a_freed_object() {
        let t: Arc<FdTable<Vec<u8>, 64>> = Arc::new(FdTable::new());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let t = t.clone();
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut seen = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for fd in 0..64 {
                            if let Some(v) = t.get(fd) {
                                assert_eq!(v.len(), 100);
                                seen += 1;
                            }
                        }
                    }
                    seen
                })
            })
            .collect();
        for round in 0..20_000 {
            let fd = round % 64;
            t.insert(fd, Arc::new(vec![7; 100])).unwrap();
            drop(t.remove((round + 32) % 64));
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
    }

    #[test]
    fn a_lock_left_held_is_reset_after_fork() {
        let t: FdTable<u32, 8> = FdTable::new();
        t.stripes[3].write_lock(); // a thread that no longer exists in the child
        t.after_fork_child();
        t.insert(3, Arc::new(1)).unwrap();
        assert_eq!(t.get(3).as_deref(), Some(&1));
    }
}
