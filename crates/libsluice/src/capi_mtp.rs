//! The C API's MTP messages (`sluice_mtp_*`, the "MTP messages" section of
//! include/sluice.h) over [`crate::mtp`]. Calls return 0 or a positive errno;
//! `sluice_mtp_poll`, `sluice_mtp_recv` and `sluice_mtp_wait` return a count or a length, or
//! a negative errno. Null pointers are EINVAL and a panic becomes EIO, never an unwind
//! across the boundary.

use std::ffi::{c_int, c_void};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;
use std::time::Duration;

use crate::capi::attachment;
use crate::lock::lock;
use crate::mtp::{CqeKind, Endpoint, MtpError, Received};

/// An MTP endpoint as C sees it (opaque `sluice_mtp`).
pub struct SluiceMtp {
    ep: Endpoint,
    /// A message too long for the caller's buffer, kept for the next call.
    held: Mutex<Option<Received>>,
}

/// A completion; the layout of C's `struct sluice_mtp_completion`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MtpCompletionC {
    /// The id `sluice_mtp_send` returned (or a raw entry's cookie).
    pub id: u64,
    /// The message id on the wire.
    pub msg_id: u32,
    /// 0 success, else `MtpStatus`'s code.
    pub status: u32,
    /// The message's length.
    pub len: u32,
    /// The peer's IPv4 address, network order.
    pub peer_ipv4: u32,
    /// The peer's port.
    pub peer_port: u16,
    /// 1 sent, 2 received (a buffer's error).
    pub kind: u8,
    /// Zero.
    pub reserved: u8,
}

/// Runs `f`: its value, or a negative errno (EIO for a panic).
fn call(f: impl FnOnce() -> Result<isize, MtpError>) -> isize {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => -(e.errno() as isize),
        Err(_) => -(libc::EIO as isize),
    }
}

const NULL: MtpError = MtpError::Os(libc::EINVAL);

/// # Safety
/// `p` is null or a pointer from `sluice_mtp_bind` not yet closed.
unsafe fn endpoint<'a>(p: *mut SluiceMtp) -> Result<&'a SluiceMtp, MtpError> {
    // SAFETY: the caller's contract; null is checked.
    unsafe { p.as_ref() }.ok_or(NULL)
}

/// Binds MTP port `port` (0: ephemeral) on the engine (attaching from the environment first
/// if needed); 0 or a positive errno.
///
/// # Safety
/// `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_bind(port: u16, out: *mut *mut SluiceMtp) -> c_int {
    -call(|| {
        if out.is_null() {
            return Err(NULL);
        }
        let ep = Endpoint::bind(&attachment()?, port)?;
        let b = Box::new(SluiceMtp {
            ep,
            held: Mutex::new(None),
        });
        // SAFETY: out is writable (checked non-null; the caller's contract).
        unsafe { out.write(Box::into_raw(b)) };
        Ok(0)
    }) as c_int
}

/// The endpoint's port (0 for null).
///
/// # Safety
/// `m` is null or a live endpoint.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_port(m: *mut SluiceMtp) -> u16 {
    // SAFETY: the caller's contract.
    unsafe { endpoint(m) }.map_or(0, |m| m.ep.port())
}

/// Sends `len` bytes at `buf` to `ipv4` (network order) port `port`; `*id` (if not null)
/// is what its completion names. 0 or a positive errno (EMSGSIZE: too long).
///
/// # Safety
/// `m` is null or a live endpoint; `buf` is readable for `len` bytes (or null with 0);
/// `id` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_send(
    m: *mut SluiceMtp,
    ipv4: u32,
    port: u16,
    buf: *const c_void,
    len: usize,
    priority: u8,
    tc: u8,
    id: *mut u32,
) -> c_int {
    -call(|| {
        // SAFETY: the caller's contract.
        let m = unsafe { endpoint(m) }?;
        let data: &[u8] = if len == 0 {
            &[]
        } else if buf.is_null() {
            return Err(NULL);
        } else {
            // SAFETY: buf is readable for len bytes (the caller's contract).
            unsafe { std::slice::from_raw_parts(buf.cast(), len) }
        };
        let dst = SocketAddrV4::new(Ipv4Addr::from(u32::from_be(ipv4)), port);
        let got = m.ep.send_message(dst, data, priority, tc)?;
        if !id.is_null() {
            // SAFETY: id is writable (the caller's contract).
            unsafe { id.write(got) };
        }
        Ok(0)
    }) as c_int
}

/// Takes the next completion into `*out`: 1, 0 when none is waiting, or a negative errno.
///
/// # Safety
/// `m` is null or a live endpoint; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_poll(m: *mut SluiceMtp, out: *mut MtpCompletionC) -> c_int {
    call(|| {
        // SAFETY: the caller's contract.
        let m = unsafe { endpoint(m) }?;
        if out.is_null() {
            return Err(NULL);
        }
        let Some(c) = m.ep.completion() else {
            return Ok(0);
        };
        let v = MtpCompletionC {
            id: c.cookie,
            msg_id: c.msg_id,
            status: c.status as u32,
            len: c.len,
            peer_ipv4: u32::from(*c.peer.ip()).to_be(),
            peer_port: c.peer.port(),
            kind: match c.kind {
                CqeKind::Sent => 1,
                CqeKind::Received => 2,
            },
            reserved: 0,
        };
        // SAFETY: out is writable (the caller's contract).
        unsafe { out.write(v) };
        Ok(1)
    }) as c_int
}

/// Copies the next whole message into `buf` (`cap` bytes): its length, -EAGAIN when none
/// is waiting, or -EMSGSIZE when it is longer than `cap` (it stays for the next call). The
/// source (network order), its port and the sender's message id go to the pointers that
/// are not null.
///
/// # Safety
/// `m` is null or a live endpoint; `buf` is writable for `cap` bytes; the out pointers are
/// null or writable.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_recv(
    m: *mut SluiceMtp,
    buf: *mut c_void,
    cap: usize,
    src_ipv4: *mut u32,
    src_port: *mut u16,
    msg_id: *mut u32,
) -> isize {
    call(|| {
        // SAFETY: the caller's contract.
        let m = unsafe { endpoint(m) }?;
        let mut held = lock(&m.held);
        let Some(r) = held.take().or_else(|| m.ep.recv_message()) else {
            return Err(MtpError::Os(libc::EAGAIN));
        };
        // SAFETY: each pointer written below is null-checked and writable (the contract).
        unsafe {
            if !src_ipv4.is_null() {
                src_ipv4.write(u32::from(*r.src.ip()).to_be());
            }
            if !src_port.is_null() {
                src_port.write(r.src.port());
            }
            if !msg_id.is_null() {
                msg_id.write(r.msg_id);
            }
        }
        if r.data.len() > cap {
            *held = Some(r);
            return Err(MtpError::Os(libc::EMSGSIZE));
        }
        if !r.data.is_empty() {
            if buf.is_null() {
                *held = Some(r);
                return Err(NULL);
            }
            // SAFETY: buf is writable for cap >= len bytes (the caller's contract).
            unsafe { std::ptr::copy_nonoverlapping(r.data.as_ptr(), buf.cast(), r.data.len()) };
        }
        Ok(r.data.len() as isize)
    })
}

/// Waits until a completion or a message is waiting (1), `timeout_ms` passes (0; negative
/// waits forever), or a negative errno.
///
/// # Safety
/// `m` is null or a live endpoint.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_wait(m: *mut SluiceMtp, timeout_ms: c_int) -> c_int {
    call(|| {
        // SAFETY: the caller's contract.
        let m = unsafe { endpoint(m) }?;
        if lock(&m.held).is_some() {
            return Ok(1);
        }
        let t = (timeout_ms >= 0).then(|| Duration::from_millis(timeout_ms as u64));
        Ok(m.ep.wait(t)? as isize)
    }) as c_int
}

/// Unbinds the endpoint and frees it (null is ignored).
///
/// # Safety
/// `m` is null or a live endpoint, not used again.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_close(m: *mut SluiceMtp) {
    if !m.is_null() {
        // SAFETY: m came from Box::into_raw in sluice_mtp_bind and is freed once.
        drop(unsafe { Box::from_raw(m) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_pointers_are_einval_and_nothing_is_touched() {
        // SAFETY: null endpoints and buffers are what is being checked.
        unsafe {
            assert_eq!(sluice_mtp_bind(0, std::ptr::null_mut()), libc::EINVAL);
            assert_eq!(sluice_mtp_port(std::ptr::null_mut()), 0);
            let sent = sluice_mtp_send(
                std::ptr::null_mut(),
                0,
                1,
                std::ptr::null(),
                0,
                0,
                0,
                std::ptr::null_mut(),
            );
            assert_eq!(sent, libc::EINVAL);
            let mut c = MtpCompletionC::default();
            assert_eq!(sluice_mtp_poll(std::ptr::null_mut(), &mut c), -libc::EINVAL);
            let got = sluice_mtp_recv(
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
            assert_eq!(got, -(libc::EINVAL as isize));
            assert_eq!(sluice_mtp_wait(std::ptr::null_mut(), 0), -libc::EINVAL);
            sluice_mtp_close(std::ptr::null_mut());
        }
    }
}
