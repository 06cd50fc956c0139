//! The C API's RDMA verbs (`sluice_rdma_*`, the "RDMA verbs" section of include/sluice.h)
//! over [`crate::verbs`]. As the verbs do, calls return 0 or a positive errno
//! (`sluice_rdma_poll_cq`: a count or a negative errno); null pointers are EINVAL and a
//! panic becomes EIO, never an unwind across the boundary.

use std::collections::{HashMap, HashSet};
use std::ffi::c_int;
use std::os::fd::BorrowedFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

use crate::capi::attachment;
use crate::capi_verbs_types::{
    attrs_from_c, attrs_to_c, inline_parts, send_wr, sge, sges, RdmaDeviceAttr, RdmaQpAttr,
    RdmaQpCaps, RdmaQpInit, RdmaRecvWr, RdmaSendWr, SluiceRdma, SluiceRdmaCq, SluiceRdmaQp, NULL,
};
use crate::lock::lock;
use crate::verbs::{Device, OffloadHandler, QpInit, RecvWr, VerbsError, WorkCompletion};

/// Runs `f`: 0, its error's errno, or EIO for a panic.
fn verb(f: impl FnOnce() -> Result<(), VerbsError>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => e.errno(),
        Err(_) => libc::EIO,
    }
}

/// # Safety
/// `p` is null or valid for reads as `T` for `'a`.
unsafe fn non_null<'a, T>(p: *const T) -> Result<&'a T, VerbsError> {
    // SAFETY: the caller's contract; null is checked.
    unsafe { p.as_ref() }.ok_or(NULL)
}

/// # Safety
/// `p` is null or valid for writes as `T`.
unsafe fn put<T>(p: *mut T, v: T) -> Result<(), VerbsError> {
    if p.is_null() {
        return Err(NULL);
    }
    // SAFETY: the caller's contract; null is checked.
    unsafe { p.write(v) };
    Ok(())
}

/// Opens the engine's RDMA device (attaching from the environment first if needed).
///
/// # Safety
/// `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_open(out: *mut *mut SluiceRdma) -> c_int {
    verb(|| {
        if out.is_null() {
            return Err(NULL);
        }
        let dev = Device::open(&attachment()?)?;
        let d = Box::new(SluiceRdma {
            dev,
            pds: Mutex::new(HashMap::new()),
            mrs: Mutex::new(HashMap::new()),
            cqs: Mutex::new(HashSet::new()),
            qps: Mutex::new(HashSet::new()),
        });
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(out, Box::into_raw(d)) }
    })
}

/// Closes the device, destroying what is left of it.
///
/// # Safety
/// `dev` is null or from `sluice_rdma_open`, not used again (nor its CQs and QPs).
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_close(dev: *mut SluiceRdma) {
    let _ = verb(|| {
        if dev.is_null() {
            return Ok(());
        }
        // SAFETY: the caller's contract: from Box::into_raw, not used again.
        let d = unsafe { Box::from_raw(dev) };
        for qp in lock(&d.qps).drain() {
            // SAFETY: every pointer in qps came from Box::into_raw and was not freed
            // (sluice_rdma_destroy_qp removes it first).
            drop(unsafe { Box::from_raw(qp as *mut SluiceRdmaQp) });
        }
        for cq in lock(&d.cqs).drain() {
            // SAFETY: as for qps.
            drop(unsafe { Box::from_raw(cq as *mut SluiceRdmaCq) });
        }
        lock(&d.mrs).clear();
        lock(&d.pds).clear();
        Ok(())
    });
}

/// The device's attributes.
///
/// # Safety
/// `dev` is null or open; `attr` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_query_device(
    dev: *mut SluiceRdma,
    attr: *mut RdmaDeviceAttr,
) -> c_int {
    verb(|| {
        // SAFETY: the caller's contract.
        let d = unsafe { non_null(dev) }?;
        let a = d.dev.attrs();
        let v = RdmaDeviceAttr {
            ipv4: u32::from(a.ip).to_be(),
            mac: a.mac,
            active_mtu: a.active_mtu,
            reserved: 0,
            max_qp: a.max_qp,
            max_qp_wr: a.max_qp_wr,
            max_cq: a.max_cq,
            max_cqe: a.max_cqe,
            max_mr: a.max_mr,
            max_sge: a.max_sge,
            max_mr_size: a.max_mr_size,
            max_inline: a.max_inline,
            max_qp_rd_atom: a.max_qp_rd_atom,
        };
        // SAFETY: the caller's contract.
        unsafe { put(attr, v) }
    })
}

/// A new protection domain.
///
/// # Safety
/// `dev` is null or open; `pd` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_alloc_pd(dev: *mut SluiceRdma, pd: *mut u32) -> c_int {
    verb(|| {
        // SAFETY: the caller's contract.
        let d = unsafe { non_null(dev) }?;
        if pd.is_null() {
            return Err(NULL);
        }
        let p = d.dev.alloc_pd()?;
        let h = p.handle();
        lock(&d.pds).insert(h, p);
        // SAFETY: the caller's contract.
        unsafe { put(pd, h) }
    })
}

/// Deallocates a protection domain (EBUSY while regions or QPs use it).
///
/// # Safety
/// `dev` is null or open.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_dealloc_pd(dev: *mut SluiceRdma, pd: u32) -> c_int {
    verb(|| {
        // SAFETY: the caller's contract.
        let d = unsafe { non_null(dev) }?;
        let mut pds = lock(&d.pds);
        match pds.get(&pd) {
            None => Err(VerbsError::Refused(libc::ENOENT)),
            Some(p) if p.in_use() => Err(VerbsError::Busy),
            Some(_) => pds.remove(&pd).expect("present").dealloc(),
        }
    })
}

/// Registers `len` bytes at `addr` (any memory; its pages become shared).
///
/// # Safety
/// `dev` is null or open; `addr .. addr + len` is this process's readable and writable
/// memory that stays mapped while registered; `key` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_reg_mr(
    dev: *mut SluiceRdma,
    pd: u32,
    addr: *mut libc::c_void,
    len: usize,
    access: c_int,
    key: *mut u32,
) -> c_int {
    verb(|| {
        // SAFETY: the caller's contract.
        let d = unsafe { non_null(dev) }?;
        if key.is_null() || addr.is_null() {
            return Err(NULL);
        }
        let access = u32::try_from(access).map_err(|_| VerbsError::Invalid("access flags"))?;
        let pds = lock(&d.pds);
        let p = pds.get(&pd).ok_or(VerbsError::Refused(libc::ENOENT))?;
        // SAFETY: the caller's contract is reg_mr's.
        let mr = unsafe { p.reg_mr(addr.cast(), len, access) }?;
        drop(pds);
        let k = mr.key();
        lock(&d.mrs).insert(k, mr);
        // SAFETY: the caller's contract.
        unsafe { put(key, k) }
    })
}

/// Deregisters the region `key`.
///
/// # Safety
/// `dev` is null or open.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_dereg_mr(dev: *mut SluiceRdma, key: u32) -> c_int {
    verb(|| {
        // SAFETY: the caller's contract.
        let d = unsafe { non_null(dev) }?;
        let mr = lock(&d.mrs).remove(&key);
        mr.ok_or(VerbsError::Refused(libc::ENOENT))?.dereg()
    })
}

/// A CQ of at least `cqe` entries; `event_fd` (or -1) is its completion event.
///
/// # Safety
/// `dev` is null or open; `out` and `actual` are null or writable; `event_fd` is -1 or an
/// open eventfd.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_create_cq(
    dev: *mut SluiceRdma,
    cqe: u32,
    event_fd: c_int,
    out: *mut *mut SluiceRdmaCq,
    actual: *mut u32,
) -> c_int {
    // SAFETY: the caller's contract, passed on.
    unsafe { sluice_rdma_create_cq_channel(dev, cqe, event_fd, 1, out, actual) }
}

/// Creates a CQ whose events write `token` (8 bytes, native order) to `event_fd`, a
/// non-blocking eventfd or pipe write end (rdma-core's completion channels: the token is the
/// `struct ibv_cq *` that `ibv_get_cq_event` reads back).
///
/// # Safety
/// `dev` is null or live; `out` and `actual` are null or writable; `event_fd` is -1 or open.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_create_cq_channel(
    dev: *mut SluiceRdma,
    cqe: u32,
    event_fd: c_int,
    token: u64,
    out: *mut *mut SluiceRdmaCq,
    actual: *mut u32,
) -> c_int {
    verb(|| {
        // SAFETY: the caller's contract.
        let d = unsafe { non_null(dev) }?;
        if out.is_null() || actual.is_null() {
            return Err(NULL);
        }
        let fd = match event_fd {
            -1 => None,
            // SAFETY: the caller's contract: an open descriptor for the call's length.
            fd if fd >= 0 => Some(unsafe { BorrowedFd::borrow_raw(fd) }),
            _ => return Err(VerbsError::Invalid("event_fd")),
        };
        let cq = d.dev.create_cq_with_token(cqe, fd, token)?;
        let n = cq.cqe();
        let p = Box::into_raw(Box::new(SluiceRdmaCq { cq, dev }));
        lock(&d.cqs).insert(p as usize);
        // SAFETY: the caller's contract; both checked non-null.
        unsafe {
            put(out, p)?;
            put(actual, n)
        }
    })
}

/// Destroys a CQ (EBUSY, and it stays, while a QP uses it).
///
/// # Safety
/// `cq` is null or live, not used again unless EBUSY.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_destroy_cq(cq: *mut SluiceRdmaCq) -> c_int {
    verb(|| {
        // SAFETY: the caller's contract.
        let c = unsafe { non_null(cq) }?;
        if c.cq.in_use() {
            return Err(VerbsError::Busy);
        }
        // SAFETY: a live CQ's device is open (closing it frees its CQs).
        let d = unsafe { &*c.dev };
        lock(&d.cqs).remove(&(cq as usize));
        // SAFETY: from Box::into_raw in create_cq, removed from the device's set: freed once.
        let c = unsafe { Box::from_raw(cq) };
        c.cq.destroy()
    })
}

/// Takes up to `n` completions into `wc`: how many, or a negative errno.
///
/// # Safety
/// `cq` is null or live; `wc` is null or has room for `n` entries.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_poll_cq(
    cq: *mut SluiceRdmaCq,
    n: c_int,
    wc: *mut WorkCompletion,
) -> c_int {
    let r = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller's contract.
        let c = unsafe { non_null(cq) }?;
        if n < 0 || (wc.is_null() && n > 0) {
            return Err(VerbsError::Invalid("poll count"));
        }
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: the caller's contract: room for n entries at wc (WorkCompletion is the
        // layout of struct sluice_rdma_wc, and any bytes are a valid value of it).
        let out = unsafe { std::slice::from_raw_parts_mut(wc, n as usize) };
        Ok(c.cq.poll(out) as c_int)
    }));
    match r {
        Ok(Ok(k)) => k,
        Ok(Err(e)) => -e.errno(),
        Err(_) => -libc::EIO,
    }
}

/// Arms the CQ's event.
///
/// # Safety
/// `cq` is null or live.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_req_notify_cq(
    cq: *mut SluiceRdmaCq,
    solicited_only: c_int,
) -> c_int {
    verb(|| {
        // SAFETY: the caller's contract.
        let c = unsafe { non_null(cq) }?;
        c.cq.req_notify(solicited_only != 0)
    })
}

/// An RC QP in RESET.
///
/// # Safety
/// `dev` is null or open; `init` is null or readable with live CQs of `dev`; `out` and
/// `caps` are null or writable.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_create_qp(
    dev: *mut SluiceRdma,
    init: *const RdmaQpInit,
    out: *mut *mut SluiceRdmaQp,
    caps: *mut RdmaQpCaps,
) -> c_int {
    // SAFETY: the caller's contract, passed on.
    unsafe { create_qp_in(dev, init, out, caps, false) }
}

/// ibv_modify_qp.
///
/// # Safety
/// `qp` is null or live; `attr` is null or readable.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_modify_qp(
    qp: *mut SluiceRdmaQp,
    attr: *const RdmaQpAttr,
    mask: c_int,
) -> c_int {
    verb(|| {
        // SAFETY: the caller's contract.
        let (q, a) = unsafe { (non_null(qp)?, non_null(attr)?) };
        q.qp.modify(&attrs_from_c(a), mask as u32)
    })
}

/// ibv_query_qp.
///
/// # Safety
/// `qp` is null or live; `attr` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_query_qp(
    qp: *mut SluiceRdmaQp,
    attr: *mut RdmaQpAttr,
) -> c_int {
    verb(|| {
        // SAFETY: the caller's contract.
        let q = unsafe { non_null(qp) }?;
        if attr.is_null() {
            return Err(NULL);
        }
        let a = q.qp.query()?;
        // SAFETY: the caller's contract.
        unsafe { put(attr, attrs_to_c(&a)) }
    })
}

/// Destroys a QP (its outstanding work is flushed).
///
/// # Safety
/// `qp` is null or live, not used again.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_destroy_qp(qp: *mut SluiceRdmaQp) -> c_int {
    verb(|| {
        // SAFETY: the caller's contract.
        let q = unsafe { non_null(qp) }?;
        // SAFETY: a live QP's device is open (closing it frees its QPs).
        let d = unsafe { &*q.dev };
        lock(&d.qps).remove(&(qp as usize));
        // SAFETY: from Box::into_raw in create_qp, removed from the device's set: freed once.
        let q = unsafe { Box::from_raw(qp) };
        q.qp.destroy()
    })
}

/// The QP's number (0 for null).
///
/// # Safety
/// `qp` is null or live.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_qp_num(qp: *const SluiceRdmaQp) -> u32 {
    // SAFETY: the caller's contract.
    unsafe { qp.as_ref() }.map_or(0, |q| q.qp.qpn())
}

/// Posts `n` send work requests in order.
///
/// # Safety
/// `qp` is null or live; `wr` is null or holds `n` readable requests whose SGE lists are
/// readable (and, with IBV_SEND_INLINE, whose bytes are); `bad` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_post_send(
    qp: *mut SluiceRdmaQp,
    wr: *const RdmaSendWr,
    n: usize,
    bad: *mut usize,
) -> c_int {
    let mut first_bad = 0;
    let r = verb(|| {
        // SAFETY: the caller's contract.
        let q = unsafe { non_null(qp) }?;
        if n > 0 && wr.is_null() {
            return Err(NULL);
        }
        let list = if n == 0 {
            &[][..]
        } else {
            // SAFETY: the caller's contract: n requests at wr (checked non-null).
            unsafe { std::slice::from_raw_parts(wr, n) }
        };
        // Inline parts first (the requests borrow them), up to the first bad request.
        let mut parts: Vec<Vec<&[u8]>> = Vec::with_capacity(n);
        let mut stop = None;
        for (i, w) in list.iter().enumerate() {
            // SAFETY: the caller's contract.
            let p = match unsafe { inline_parts(w) } {
                Ok(p) => p,
                Err(e) => {
                    stop = Some((i, e));
                    break;
                }
            };
            parts.push(p);
        }
        let mut wrs = Vec::with_capacity(parts.len());
        for (i, w) in list.iter().enumerate().take(parts.len()) {
            match send_wr(w, &parts[i]) {
                Ok(s) => wrs.push(s),
                Err(e) => {
                    stop = Some((i, e));
                    break;
                }
            }
        }
        if let Err(e) = q.qp.post_send(&wrs) {
            first_bad = e.index;
            return Err(e.error);
        }
        if let Some((i, e)) = stop {
            first_bad = i;
            return Err(e);
        }
        Ok(())
    });
    if r != 0 && !bad.is_null() {
        // SAFETY: the caller's contract.
        unsafe { bad.write(first_bad) };
    }
    r
}

/// Posts `n` receive work requests in order.
///
/// # Safety
/// `qp` is null or live; `wr` is null or holds `n` readable requests whose SGE lists are
/// readable; `bad` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_post_recv(
    qp: *mut SluiceRdmaQp,
    wr: *const RdmaRecvWr,
    n: usize,
    bad: *mut usize,
) -> c_int {
    let mut first_bad = 0;
    let r = verb(|| {
        // SAFETY: the caller's contract.
        let q = unsafe { non_null(qp) }?;
        if n > 0 && wr.is_null() {
            return Err(NULL);
        }
        let list = if n == 0 {
            &[][..]
        } else {
            // SAFETY: the caller's contract: n requests at wr (checked non-null).
            unsafe { std::slice::from_raw_parts(wr, n) }
        };
        let mut wrs = Vec::with_capacity(n);
        let mut stop = None;
        for (i, w) in list.iter().enumerate() {
            // SAFETY: the caller's contract.
            let s = match unsafe { sges(w.sg_list, w.num_sge) } {
                Ok([]) => None,
                Ok([s]) => Some(sge(s)),
                Ok(_) => {
                    stop = Some((i, VerbsError::Invalid("num_sge > 1")));
                    break;
                }
                Err(e) => {
                    stop = Some((i, e));
                    break;
                }
            };
            wrs.push(RecvWr {
                wr_id: w.wr_id,
                sge: s,
            });
        }
        if let Err(e) = q.qp.post_recv(&wrs) {
            first_bad = e.index;
            return Err(e.error);
        }
        if let Some((i, e)) = stop {
            first_bad = i;
            return Err(e);
        }
        Ok(())
    });
    if r != 0 && !bad.is_null() {
        // SAFETY: the caller's contract.
        unsafe { bad.write(first_bad) };
    }
    r
}

/// A pipe-mode CQ (docs/verbs.md "Notification pipes"): its completions come through the
/// completion pipes; only pipe-mode QPs may use it.
///
/// # Safety
/// `dev` is null or live; `out` and `actual` are null or writable; `event_fd` is -1 or open.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_create_pipe_cq(
    dev: *mut SluiceRdma,
    cqe: u32,
    event_fd: c_int,
    out: *mut *mut SluiceRdmaCq,
    actual: *mut u32,
) -> c_int {
    verb(|| {
        // SAFETY: the caller's contract.
        let d = unsafe { non_null(dev) }?;
        if out.is_null() || actual.is_null() {
            return Err(NULL);
        }
        let fd = match event_fd {
            -1 => None,
            // SAFETY: the caller's contract: an open descriptor for the call's length.
            fd if fd >= 0 => Some(unsafe { BorrowedFd::borrow_raw(fd) }),
            _ => return Err(VerbsError::Invalid("event_fd")),
        };
        let cq = d.dev.create_pipe_cq(cqe, fd)?;
        let n = cq.cqe();
        let p = Box::into_raw(Box::new(SluiceRdmaCq { cq, dev }));
        lock(&d.cqs).insert(p as usize);
        // SAFETY: the caller's contract; both checked non-null.
        unsafe {
            put(out, p)?;
            put(actual, n)
        }
    })
}

/// A pipe-mode RC QP in RESET on the calling thread's context's pipe (both CQs pipe-mode;
/// `max_inline` up to one MTU: the inline QP).
///
/// # Safety
/// As [`sluice_rdma_create_qp`].
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_create_pipe_qp(
    dev: *mut SluiceRdma,
    init: *const RdmaQpInit,
    out: *mut *mut SluiceRdmaQp,
    caps: *mut RdmaQpCaps,
) -> c_int {
    // SAFETY: the caller's contract, passed on.
    unsafe { create_qp_in(dev, init, out, caps, true) }
}

/// The inline QP: `len` bytes at `data` and the flag trailer, inline in the pipe, placed to
/// end at the end of the peer's slot (`slot_addr`, `slot_len`, key `rkey`).
///
/// # Safety
/// `qp` is null or live; `data` is null (with `len` 0) or readable for `len` bytes.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn sluice_rdma_post_send_inline_flagged(
    qp: *mut SluiceRdmaQp,
    wr_id: u64,
    data: *const u8,
    len: usize,
    slot_addr: u64,
    slot_len: usize,
    rkey: u32,
    signaled: c_int,
) -> c_int {
    verb(|| {
        // SAFETY: the caller's contract.
        let q = unsafe { non_null(qp) }?;
        let bytes = if len == 0 {
            &[][..]
        } else if data.is_null() {
            return Err(NULL);
        } else {
            // SAFETY: the caller's contract: len readable bytes at data (non-null).
            unsafe { std::slice::from_raw_parts(data, len) }
        };
        q.qp.post_send_inline_flagged(wr_id, bytes, slot_addr, slot_len, rkey, signaled != 0)
    })
}

/// The inline QP's receive side: the payload's length (copied to `out`, at most `out_len`
/// bytes) once the slot `offset .. offset + slot_len` of region `key` holds a flagged
/// message, -EAGAIN while it does not, or a negative errno.
///
/// # Safety
/// `dev` is null or live; `out` is null (with `out_len` 0) or writable for `out_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_poll_inline_recv(
    dev: *mut SluiceRdma,
    key: u32,
    offset: usize,
    slot_len: usize,
    out: *mut u8,
    out_len: usize,
) -> i64 {
    let r = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller's contract.
        let d = unsafe { non_null(dev) }?;
        let buf = if out_len == 0 {
            &mut [][..]
        } else if out.is_null() {
            return Err(NULL);
        } else {
            // SAFETY: the caller's contract: out_len writable bytes at out (non-null).
            unsafe { std::slice::from_raw_parts_mut(out, out_len) }
        };
        let mrs = lock(&d.mrs);
        let mr = mrs.get(&key).ok_or(VerbsError::Refused(libc::ENOENT))?;
        mr.poll_inline_recv(offset, slot_len, buf)
    }));
    match r {
        Ok(Ok(Some(n))) => n as i64,
        Ok(Ok(None)) => -i64::from(libc::EAGAIN),
        Ok(Err(e)) => -i64::from(e.errno()),
        Err(_) => -i64::from(libc::EIO),
    }
}

/// `sluice_rdma_create_qp` and `sluice_rdma_create_pipe_qp`: a QP on the doorbell path or
/// on the context's notification pipes.
///
/// # Safety
/// As [`sluice_rdma_create_qp`].
unsafe fn create_qp_in(
    dev: *mut SluiceRdma,
    init: *const RdmaQpInit,
    out: *mut *mut SluiceRdmaQp,
    caps: *mut RdmaQpCaps,
    pipe: bool,
) -> c_int {
    verb(|| {
        // SAFETY: the caller's contract.
        let (d, i) = unsafe { (non_null(dev)?, non_null(init)?) };
        if out.is_null() || caps.is_null() {
            return Err(NULL);
        }
        // SAFETY: the caller's contract: live CQs or null.
        let (scq, rcq) = unsafe { (non_null(i.send_cq)?, non_null(i.recv_cq)?) };
        let pds = lock(&d.pds);
        let pd = pds.get(&i.pd).ok_or(VerbsError::Refused(libc::ENOENT))?;
        let qp_init = QpInit {
            max_send_wr: i.max_send_wr,
            max_recv_wr: i.max_recv_wr,
            max_inline: i.max_inline,
        };
        let qp = if pipe {
            pd.create_pipe_qp(&scq.cq, &rcq.cq, qp_init)?
        } else {
            pd.create_qp(&scq.cq, &rcq.cq, qp_init)?
        };
        drop(pds);
        let c = qp.caps();
        let p = Box::into_raw(Box::new(SluiceRdmaQp { qp, dev }));
        lock(&d.qps).insert(p as usize);
        // SAFETY: the caller's contract; both checked non-null.
        unsafe {
            put(out, p)?;
            put(
                caps,
                RdmaQpCaps {
                    qpn: c.qpn,
                    max_send_wr: c.max_send_wr,
                    max_recv_wr: c.max_recv_wr,
                    max_inline: c.max_inline,
                },
            )
        }
    })
}

/// The `n` region keys at `keys` (none for n == 0).
///
/// # Safety
/// `keys` is null or holds `n` readable keys.
unsafe fn keys_of<'a>(keys: *const u32, n: usize) -> Result<&'a [u32], VerbsError> {
    match n {
        0 => Ok(&[]),
        _ if keys.is_null() => Err(NULL),
        // SAFETY: the caller's contract.
        n => Ok(unsafe { std::slice::from_raw_parts(keys, n) }),
    }
}

/// A NUL-terminated string argument as UTF-8.
///
/// # Safety
/// `s` is null or a NUL-terminated string.
unsafe fn c_str<'a>(s: *const std::ffi::c_char, what: &'static str) -> Result<&'a str, VerbsError> {
    if s.is_null() {
        return Err(NULL);
    }
    // SAFETY: the caller's contract.
    unsafe { std::ffi::CStr::from_ptr(s) }
        .to_str()
        .map_err(|_| VerbsError::Invalid(what))
}

/// Registers the eBPF object `object` (`len` bytes, section `offload`) as the handler of
/// offload opcode `opcode` on `qp`, with access to the regions of the `n` keys at `keys`
/// (docs/offload.md).
///
/// # Safety
/// `qp` is null or live; `name` is null or a string; `object` is null or holds `len`
/// readable bytes; `keys` is null or holds `n` keys.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_register_offload_ebpf(
    qp: *mut SluiceRdmaQp,
    opcode: u32,
    name: *const std::ffi::c_char,
    object: *const u8,
    len: usize,
    keys: *const u32,
    n: usize,
) -> c_int {
    verb(|| {
        // SAFETY: the caller's contract.
        let q = unsafe { non_null(qp) }?;
        // SAFETY: the caller's contract.
        let name = unsafe { c_str(name, "name") }?;
        if object.is_null() {
            return Err(NULL);
        }
        // SAFETY: the caller's contract: `len` readable bytes.
        let object = unsafe { std::slice::from_raw_parts(object, len) };
        // SAFETY: the caller's contract.
        let keys = unsafe { keys_of(keys, n) }?;
        q.qp.register_offload_keys(opcode, OffloadHandler::Ebpf { name, object }, keys)
    })
}

/// Registers handler `handler` of the Rust handler library at `path` (uid 0 or the engine's
/// uid only) for offload opcode `opcode` on `qp`, with the regions of the `n` keys at
/// `keys`.
///
/// # Safety
/// `qp` is null or live; `path` and `handler` are null or strings; `keys` is null or holds
/// `n` keys.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_register_offload_rust(
    qp: *mut SluiceRdmaQp,
    opcode: u32,
    path: *const std::ffi::c_char,
    handler: *const std::ffi::c_char,
    keys: *const u32,
    n: usize,
) -> c_int {
    verb(|| {
        // SAFETY: the caller's contract.
        let q = unsafe { non_null(qp) }?;
        // SAFETY: the caller's contract.
        let path = std::path::Path::new(unsafe { c_str(path, "path") }?);
        // SAFETY: the caller's contract.
        let handler = unsafe { c_str(handler, "handler") }?;
        // SAFETY: the caller's contract.
        let keys = unsafe { keys_of(keys, n) }?;
        q.qp.register_offload_keys(opcode, OffloadHandler::Rust { path, handler }, keys)
    })
}

/// Unregisters the handler of offload opcode `opcode` on `qp`.
///
/// # Safety
/// `qp` is null or live.
#[no_mangle]
pub unsafe extern "C" fn sluice_rdma_unregister_offload(
    qp: *mut SluiceRdmaQp,
    opcode: u32,
) -> c_int {
    verb(|| {
        // SAFETY: the caller's contract.
        let q = unsafe { non_null(qp) }?;
        q.qp.unregister_offload(opcode)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_pointers_are_einval_and_never_touched() {
        // SAFETY: every pointer is null, which each call checks first.
        unsafe {
            assert_eq!(sluice_rdma_open(std::ptr::null_mut()), libc::EINVAL);
            assert_eq!(
                sluice_rdma_query_device(std::ptr::null_mut(), std::ptr::null_mut()),
                libc::EINVAL
            );
            assert_eq!(
                sluice_rdma_alloc_pd(std::ptr::null_mut(), std::ptr::null_mut()),
                libc::EINVAL
            );
            assert_eq!(
                sluice_rdma_dealloc_pd(std::ptr::null_mut(), 1),
                libc::EINVAL
            );
            assert_eq!(sluice_rdma_dereg_mr(std::ptr::null_mut(), 1), libc::EINVAL);
            assert_eq!(sluice_rdma_destroy_cq(std::ptr::null_mut()), libc::EINVAL);
            assert_eq!(sluice_rdma_destroy_qp(std::ptr::null_mut()), libc::EINVAL);
            assert_eq!(
                sluice_rdma_poll_cq(std::ptr::null_mut(), 1, std::ptr::null_mut()),
                -libc::EINVAL
            );
            assert_eq!(
                sluice_rdma_req_notify_cq(std::ptr::null_mut(), 0),
                libc::EINVAL
            );
            assert_eq!(
                sluice_rdma_modify_qp(std::ptr::null_mut(), std::ptr::null(), 1),
                libc::EINVAL
            );
            let mut bad = 7usize;
            assert_eq!(
                sluice_rdma_post_send(std::ptr::null_mut(), std::ptr::null(), 1, &mut bad),
                libc::EINVAL
            );
            assert_eq!(bad, 0);
            assert_eq!(
                sluice_rdma_post_recv(
                    std::ptr::null_mut(),
                    std::ptr::null(),
                    1,
                    std::ptr::null_mut()
                ),
                libc::EINVAL
            );
            assert_eq!(sluice_rdma_qp_num(std::ptr::null()), 0);
            sluice_rdma_close(std::ptr::null_mut());
        }
    }
}
