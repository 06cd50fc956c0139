//! The C API's splicing (declared in `include/sluice.h`): `sluice_splice` joins two engine
//! sockets, `sluice_splice_poll` waits for the splice's end and its byte counts.

use std::ffi::c_int;
use std::time::Duration;

use crate::capi::{ffi, socket, SluiceSocket};
use crate::error::{Error, Op};
use crate::splice::Splice;

/// `struct sluice_splice_stats`: how a splice stands (also what the preload shim's
/// `sluice_splice_wait` fills in).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpliceStatsC {
    /// 0 before the engine installed it, else `SLUICE_SPLICE_*` ([`crate::SpliceOutcome`]'s
    /// code: 1 installed, 2 failed, 3 closed, 4 reset by a's peer, 5 by b's).
    pub outcome: c_int,
    /// Bytes relayed from a's peer to b's by the engine.
    pub a_to_b: u64,
    /// Bytes relayed the other way.
    pub b_to_a: u64,
    /// Bytes the library forwarded from a's ring to b before the splice.
    pub forwarded_a_to_b: u64,
    /// Bytes it forwarded the other way.
    pub forwarded_b_to_a: u64,
}

impl SpliceStatsC {
    /// The stats of `sp` as it stands; whether it ended.
    pub fn of(sp: &Splice) -> (SpliceStatsC, bool) {
        let r = sp.poll();
        let (fa, fb) = sp.forwarded();
        let st = SpliceStatsC {
            outcome: r.map_or(0, |r| c_int::from(r.outcome.code())),
            a_to_b: r.map_or(0, |r| r.a_to_b),
            b_to_a: r.map_or(0, |r| r.b_to_a),
            forwarded_a_to_b: fa,
            forwarded_b_to_a: fb,
        };
        (st, r.is_some_and(|r| r.outcome.is_final()))
    }
}

/// A splice as C sees it (opaque `sluice_splice_handle`).
pub struct SluiceSplice {
    sp: Splice,
}

/// A negative timeout waits forever.
pub fn timeout_of(ms: c_int) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// Splices `a` to `b`; on success stores the splice in `*out` (free it with
/// `sluice_splice_free`) and returns 0; -1 with errno (EBADF, EINVAL, ENOTCONN, EALREADY,
/// EOPNOTSUPP, ENOBUFS, EAGAIN) otherwise. The sockets stay the caller's to close.
///
/// # Safety
/// `a` and `b` are live sockets or null; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn sluice_splice(
    a: *mut SluiceSocket,
    b: *mut SluiceSocket,
    out: *mut *mut SluiceSplice,
) -> c_int {
    ffi(-1, Op::Open, || {
        // SAFETY: the caller's contract.
        let (a, b) = unsafe { (socket(a)?, socket(b)?) };
        if out.is_null() {
            return Err(Error::Os(libc::EINVAL));
        }
        let sp = a.sock.splice(&b.sock).map_err(|e| Error::Os(e.errno()))?;
        // SAFETY: checked non-null; the caller's contract says writable.
        unsafe { *out = Box::into_raw(Box::new(SluiceSplice { sp })) };
        Ok(0)
    })
}

/// Waits up to `timeout_ms` (negative: forever; 0: just look) for the splice to end;
/// fills `*st` (if not null) with how it stands; returns 1 once it ended, 0 if not yet,
/// -1 with errno.
///
/// # Safety
/// `sp` is a splice from `sluice_splice` not yet freed, or null; `st` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn sluice_splice_poll(
    sp: *mut SluiceSplice,
    timeout_ms: c_int,
    st: *mut SpliceStatsC,
) -> c_int {
    ffi(-1, Op::Read, || {
        // SAFETY: the caller's contract; null is checked.
        let sp = unsafe { sp.as_ref() }.ok_or(Error::Os(libc::EINVAL))?;
        if timeout_ms != 0 {
            sp.sp.wait(timeout_of(timeout_ms))?;
        }
        let (now, ended) = SpliceStatsC::of(&sp.sp);
        // SAFETY: the caller's contract; null means "not wanted".
        if let Some(st) = unsafe { st.as_mut() } {
            *st = now;
        }
        Ok(c_int::from(ended))
    })
}

/// Frees a splice handle (the splice itself goes on in the engine). NULL is ignored.
///
/// # Safety
/// `sp` is a splice from `sluice_splice` not yet freed, or null.
#[no_mangle]
pub unsafe extern "C" fn sluice_splice_free(sp: *mut SluiceSplice) {
    if !sp.is_null() {
        // SAFETY: the caller's contract: made by Box::into_raw in sluice_splice, once.
        drop(unsafe { Box::from_raw(sp) });
    }
}
