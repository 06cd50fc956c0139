//! The application calls on messages: bind and unbind endpoints, send a message, receive
//! one into a caller's buffer, and events (delivered, failed, readable).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::ptr::NonNull;

use sluice_mtp::stack::{EndpointId, Event, FailReason, Message, SendOptions};

use crate::boundary::{bytes, bytes_mut, status, with_stack, Out};
use crate::error::sluice_error;
use crate::mtp::endpoint::{handle, resolve, sluice_mtp_endpoint};
use crate::mtp::host::sluice_mtp_stack;

/// What an MTP event is about.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum sluice_mtp_event_kind {
    /// No event (the struct was not filled).
    None = 0,
    /// Every packet of the message `msg_id` sent on `endpoint` was acknowledged at `at_ns`.
    Delivered = 1,
    /// The message `msg_id` sent on `endpoint` was given up (`fail_reason` says why).
    Failed = 2,
    /// A whole message waits on `endpoint` for `sluice_mtp_recv`.
    Readable = 3,
}

/// Why a message failed.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum sluice_mtp_fail_reason {
    /// Not a failure.
    None = 0,
    /// It timed out more than `max_timeouts` times.
    Timeout = 1,
    /// Its endpoint was unbound before it was acknowledged.
    Unbound = 2,
}

/// An MTP event, from `sluice_mtp_poll_event`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct sluice_mtp_event {
    /// What the event is about.
    pub kind: sluice_mtp_event_kind,
    /// The message, for `DELIVERED` and `FAILED` (else 0).
    pub msg_id: u32,
    /// The endpoint (for `FAILED` with `UNBOUND` it is no longer valid).
    pub endpoint: sluice_mtp_endpoint,
    /// When the last acknowledgement arrived, for `DELIVERED` (else 0).
    pub at_ns: u64,
    /// Why, for `FAILED` (else `SLUICE_MTP_FAIL_REASON_NONE`).
    pub fail_reason: sluice_mtp_fail_reason,
}

/// Where a received message came from, from `sluice_mtp_recv`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sluice_mtp_message_info {
    /// The sender's address, host byte order.
    pub src_ip: u32,
    /// The sender's port.
    pub src_port: u16,
    /// The message's priority.
    pub priority: u8,
    /// Its traffic class.
    pub tc: u8,
    /// The sender's message id.
    pub msg_id: u32,
    /// Its length, bytes.
    pub len: u64,
}

/// Binds `port` (0: an ephemeral one, 49152..=65535) and stores the endpoint in `*endpoint`.
///
/// # Safety
/// `stack` is NULL or a live MTP stack that no other thread uses during the call;
/// `endpoint` is NULL or valid for a write of a `sluice_mtp_endpoint`.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_bind(
    stack: *mut sluice_mtp_stack,
    port: u16,
    endpoint: *mut sluice_mtp_endpoint,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    let out = unsafe { Out::new(endpoint) };
    // SAFETY: forwarded from this function's contract.
    status(unsafe {
        with_stack(stack, |s| {
            let out = out?;
            let ep = s.core.bind(port)?;
            out.write(handle(s.tag, ep));
            Ok(0)
        })
    })
}

/// The port an endpoint is bound to (what an ephemeral bind chose).
///
/// # Safety
/// `stack` is NULL or a live MTP stack that no other thread uses during the call.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_local_port(
    stack: *mut sluice_mtp_stack,
    endpoint: sluice_mtp_endpoint,
) -> i32 {
    // SAFETY: forwarded from this function's contract.
    let r = unsafe {
        with_stack(stack, |s| {
            let ep = resolve(s, endpoint)?;
            let port = s.core.local_port(ep).ok_or(sluice_error::InvalidHandle)?;
            Ok(i64::from(port))
        })
    };
    r as i32
}

/// Unbinds an endpoint: its received messages go, its outstanding messages fail
/// (`SLUICE_MTP_EVENT_KIND_FAILED` with `SLUICE_MTP_FAIL_REASON_UNBOUND`). The handle is
/// invalid afterwards.
///
/// # Safety
/// `stack` is NULL or a live MTP stack that no other thread uses during the call.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_unbind(
    stack: *mut sluice_mtp_stack,
    endpoint: sluice_mtp_endpoint,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    status(unsafe {
        with_stack(stack, |s| {
            let ep = resolve(s, endpoint)?;
            s.held.remove(&ep);
            s.core.unbind(ep);
            Ok(0)
        })
    })
}

/// Queues a message of `len` bytes from `data` on `endpoint` to `ip:port` (host byte order)
/// with `priority` (higher goes first) and traffic class `tc`; returns its id (>= 0). The
/// bytes are copied. Too long a message or a bad destination (port 0, 0.0.0.0, broadcast,
/// multicast) is `SLUICE_ERROR_INVALID_ARGUMENT`; `SLUICE_ERROR_WOULD_BLOCK` when
/// `max_outstanding` messages are unacknowledged (retry after an event).
///
/// # Safety
/// `stack` is NULL or a live MTP stack that no other thread uses during the call; `data` is
/// NULL (only with `len` 0) or valid for reads of `len` bytes.
#[no_mangle]
// A C call names the message's every part; a struct for them would only move the list.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn sluice_mtp_send(
    stack: *mut sluice_mtp_stack,
    now_ns: u64,
    endpoint: sluice_mtp_endpoint,
    ip: u32,
    port: u16,
    priority: u8,
    tc: u8,
    data: *const u8,
    len: usize,
) -> i64 {
    // SAFETY: forwarded from this function's contract.
    let data = unsafe { bytes(data, len) };
    // SAFETY: forwarded from this function's contract.
    unsafe {
        with_stack(stack, |s| {
            let data = data?;
            let ep = resolve(s, endpoint)?;
            let dst = SocketAddrV4::new(Ipv4Addr::from(ip), port);
            let opts = SendOptions { priority, tc };
            let id = s.core.send_message(now_ns, ep, dst, data, opts)?;
            Ok(i64::from(id))
        })
    }
}

/// The length of the next message `sluice_mtp_recv` on `endpoint` returns, without taking
/// it; `SLUICE_ERROR_WOULD_BLOCK` when none waits.
///
/// # Safety
/// `stack` is NULL or a live MTP stack that no other thread uses during the call.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_next_len(
    stack: *mut sluice_mtp_stack,
    endpoint: sluice_mtp_endpoint,
) -> i64 {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        with_stack(stack, |s| {
            let ep = resolve(s, endpoint)?;
            let msg = next(s, ep).ok_or(sluice_error::WouldBlock)?;
            let n = msg.data.len() as i64;
            s.held.insert(ep, msg);
            Ok(n)
        })
    }
}

/// The message the next receive on `ep` gets: the one held back, else the core's next.
fn next(s: &mut sluice_mtp_stack, ep: EndpointId) -> Option<Message> {
    s.held.remove(&ep).or_else(|| s.core.recv_message(ep))
}

/// Takes the next whole message received on `endpoint` into `buf` and returns its length
/// (a message may be empty: 0); `info`, unless NULL, gets its sender, id, priority, class
/// and length. `SLUICE_ERROR_WOULD_BLOCK` when none waits. A message longer than `len` is
/// `SLUICE_ERROR_BUFFER_TOO_SMALL` and stays first in line (`sluice_mtp_next_len` gives
/// its length).
///
/// # Safety
/// `stack` is NULL or a live MTP stack that no other thread uses during the call; `buf` is
/// NULL (only with `len` 0) or valid for writes of `len` bytes; `info` is NULL or valid for
/// a write of a `sluice_mtp_message_info`.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_recv(
    stack: *mut sluice_mtp_stack,
    endpoint: sluice_mtp_endpoint,
    buf: *mut u8,
    len: usize,
    info: *mut sluice_mtp_message_info,
) -> i64 {
    // `info` is optional: NULL means not wanted, misaligned is refused.
    let info = match NonNull::new(info) {
        None => Ok(None),
        // SAFETY: forwarded from this function's contract.
        Some(p) => unsafe { Out::new(p.as_ptr()) }.map(Some),
    };
    let body = |s: &mut sluice_mtp_stack| {
        let info = info?;
        if buf.is_null() && len > 0 {
            return Err(sluice_error::NullPointer);
        }
        let ep = resolve(s, endpoint)?;
        let msg = next(s, ep).ok_or(sluice_error::WouldBlock)?;
        if msg.data.len() > len {
            s.held.insert(ep, msg);
            return Err(sluice_error::BufferTooSmall);
        }
        // SAFETY: `buf` is valid for writes of `len` >= the message's length bytes by this
        // function's contract (non-null unless the message is empty).
        let out = unsafe { bytes_mut(buf, msg.data.len())? };
        out.copy_from_slice(&msg.data);
        if let Some(info) = info {
            info.write(sluice_mtp_message_info {
                src_ip: u32::from(*msg.src.ip()),
                src_port: msg.src.port(),
                priority: msg.priority,
                tc: msg.tc,
                msg_id: msg.msg_id,
                len: msg.data.len() as u64,
            });
        }
        Ok(msg.data.len() as i64)
    };
    // SAFETY: forwarded from this function's contract.
    unsafe { with_stack(stack, body) }
}

/// Takes the next event into `*event`: returns 1 when one was written, 0 when there is none.
///
/// # Safety
/// `stack` is NULL or a live MTP stack that no other thread uses during the call; `event`
/// is NULL or valid for a write of a `sluice_mtp_event`.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_poll_event(
    stack: *mut sluice_mtp_stack,
    event: *mut sluice_mtp_event,
) -> i32 {
    // SAFETY: forwarded from this function's contract.
    let out = unsafe { Out::new(event) };
    // SAFETY: forwarded from this function's contract.
    let r = unsafe {
        with_stack(stack, |s| {
            let out = out?;
            let Some(e) = s.core.poll_event() else {
                return Ok(0);
            };
            out.write(c_event(s.tag, e));
            Ok(1)
        })
    };
    r as i32
}

/// The C struct of an event on a stack with `tag`.
fn c_event(tag: u8, e: Event) -> sluice_mtp_event {
    let empty = sluice_mtp_event {
        kind: sluice_mtp_event_kind::None,
        msg_id: 0,
        endpoint: 0,
        at_ns: 0,
        fail_reason: sluice_mtp_fail_reason::None,
    };
    match e {
        Event::Delivered { ep, msg_id, at } => sluice_mtp_event {
            kind: sluice_mtp_event_kind::Delivered,
            msg_id,
            endpoint: handle(tag, ep),
            at_ns: at,
            ..empty
        },
        Event::Failed { ep, msg_id, reason } => sluice_mtp_event {
            kind: sluice_mtp_event_kind::Failed,
            msg_id,
            endpoint: handle(tag, ep),
            fail_reason: match reason {
                FailReason::Timeout => sluice_mtp_fail_reason::Timeout,
                FailReason::Unbound => sluice_mtp_fail_reason::Unbound,
            },
            ..empty
        },
        Event::Readable { ep } => sluice_mtp_event {
            kind: sluice_mtp_event_kind::Readable,
            endpoint: handle(tag, ep),
            ..empty
        },
    }
}
