//! The shim's splicing extension (README, "Running programs over Sluice"; sluice.h): a C
//! proxy run under the shim joins two engine sockets by descriptor, and waits for the
//! splice's end with its byte counts. Not libc calls: programs find them with
//! `dlsym(RTLD_DEFAULT, "sluice_splice_fds")` or declare them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use libc::c_int;
use sluice::{Splice, SpliceStatsC};

use crate::file::{lookup, Route};
use crate::{guard, real, ret_int};

/// Splices the shim keeps handles for at once; beyond, ENOBUFS.
const MAX_HANDLES: usize = 65536;

/// Handles given out: a splice's until its end was reported.
struct Handles {
    next: c_int,
    map: HashMap<c_int, Arc<Splice>>,
}

static HANDLES: Mutex<Option<Handles>> = Mutex::new(None);

fn with_handles<R>(f: impl FnOnce(&mut Handles) -> R) -> R {
    let mut g = HANDLES.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(|| Handles {
        next: 0,
        map: HashMap::new(),
    }))
}

/// The engine socket behind `fd`: EBADF for a descriptor that is not open (or an engine
/// socket inherited across fork), ENOTSOCK for one that is not an engine socket.
fn engine_socket(fd: c_int) -> Result<Arc<crate::file::FdObject>, c_int> {
    let Some(obj) = lookup(fd) else {
        return Err(if real::fcntl_int(fd, libc::F_GETFD, 0) < 0 {
            libc::EBADF
        } else {
            libc::ENOTSOCK
        });
    };
    match obj.route() {
        Route::Engine(..) => {}
        Route::Stale => return Err(libc::EBADF),
        Route::Kernel => return Err(libc::ENOTSOCK),
    }
    Ok(obj)
}

fn splice_fds(fd_a: c_int, fd_b: c_int) -> Result<c_int, c_int> {
    let (a, b) = (engine_socket(fd_a)?, engine_socket(fd_b)?);
    let (Route::Engine(_, sa), Route::Engine(_, sb)) = (a.route(), b.route()) else {
        return Err(libc::EBADF);
    };
    if with_handles(|h| h.map.len() >= MAX_HANDLES) {
        return Err(libc::ENOBUFS);
    }
    let sp = sa.splice(sb).map_err(|e| e.errno())?;
    Ok(with_handles(|h| {
        // Handles are >= 0 and not reused while their splice is known.
        loop {
            let handle = h.next;
            h.next = h.next.checked_add(1).unwrap_or(0);
            if let std::collections::hash_map::Entry::Vacant(e) = h.map.entry(handle) {
                e.insert(Arc::new(sp));
                return handle;
            }
        }
    }))
}

fn splice_wait(handle: c_int, timeout_ms: c_int, st: *mut SpliceStatsC) -> Result<c_int, c_int> {
    let sp = with_handles(|h| h.map.get(&handle).cloned()).ok_or(libc::EINVAL)?;
    if timeout_ms != 0 {
        let timeout = u64::try_from(timeout_ms)
            .ok()
            .map(std::time::Duration::from_millis);
        sp.wait(timeout).map_err(|e| e.errno())?;
    }
    let (now, ended) = SpliceStatsC::of(&sp);
    // SAFETY: the caller's contract: null or a writable struct sluice_splice_stats.
    if let Some(st) = unsafe { st.as_mut() } {
        *st = now;
    }
    if ended {
        with_handles(|h| h.map.remove(&handle));
    }
    Ok(c_int::from(ended))
}

/// `int sluice_splice_fds(int fd_a, int fd_b)`: splices the engine sockets `fd_a` and
/// `fd_b`; a handle >= 0, or -1 with errno (EBADF or ENOTSOCK for descriptors that are not
/// engine sockets, otherwise as `sluice_splice`).
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn sluice_splice_fds(fd_a: c_int, fd_b: c_int) -> c_int {
    guard("sluice_splice_fds", -1, || ret_int(splice_fds(fd_a, fd_b)))
}

/// `int sluice_splice_wait(int handle, int timeout_ms, struct sluice_splice_stats *st)`:
/// waits up to `timeout_ms` (negative: forever) for the splice's end; fills `*st`; 1 once
/// it ended (the handle is then released), 0 if not yet, -1 with errno (EINVAL for an
/// unknown handle).
///
/// # Safety
/// `st` is null or points to a writable `struct sluice_splice_stats`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sluice_splice_wait(
    handle: c_int,
    timeout_ms: c_int,
    st: *mut SpliceStatsC,
) -> c_int {
    guard("sluice_splice_wait", -1, || {
        ret_int(splice_wait(handle, timeout_ms, st))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_that_are_not_engine_sockets_are_refused() {
        assert_eq!(splice_fds(-1, 5), Err(libc::EBADF));
        // A pipe is open but not an engine socket.
        let mut p = [0 as c_int; 2];
        // SAFETY: p has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        assert_eq!(splice_fds(p[0], p[1]), Err(libc::ENOTSOCK));
        for fd in p {
            // SAFETY: the test's own descriptors.
            unsafe { libc::close(fd) };
        }
        assert_eq!(
            splice_wait(12345, 0, std::ptr::null_mut()),
            Err(libc::EINVAL)
        );
    }
}
