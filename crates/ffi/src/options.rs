//! Per-connection options: congestion control chosen before the SYN or changed later
//! (Linux's TCP_CONGESTION), Nagle (TCP_NODELAY), a fixed pacing rate.

use std::net::Ipv4Addr;

use sluice_tcp::Instant;

use crate::boundary::{status, with_stack, Out};
use crate::config::algorithm;
use crate::error::sluice_error;
use crate::handle::sluice_conn;
use crate::host::sluice_stack;

/// `sluice_connect` with the connection's congestion control (`SLUICE_CC_*`) chosen before
/// its SYN is built, so the SYN asks for ECN only if that algorithm wants it (RFC 3168
/// 6.1.1). An unknown value is `SLUICE_ERROR_INVALID_ARGUMENT`.
///
/// # Safety
/// `stack` is NULL or a live stack that no other thread uses during the call; `conn` is
/// NULL or valid for a write of a `sluice_conn`.
#[no_mangle]
pub unsafe extern "C" fn sluice_connect_with(
    stack: *mut sluice_stack,
    now_ns: u64,
    ip: u32,
    port: u16,
    congestion_control: u32,
    conn: *mut sluice_conn,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    let out = unsafe { Out::new(conn) };
    // SAFETY: forwarded from this function's contract.
    status(unsafe {
        with_stack(stack, |s| {
            let out = out?;
            let cc = algorithm(congestion_control).ok_or(sluice_error::InvalidArgument)?;
            let now = Instant::from_nanos(now_ns);
            let id = s
                .core
                .connect_with(now, Ipv4Addr::from(ip), port, Some(cc))?;
            out.write(s.handles.insert_conn(id));
            Ok(0)
        })
    })
}

/// Changes the connection's congestion control (`SLUICE_CC_*`); after the handshake the new
/// algorithm takes over at the current window.
///
/// # Safety
/// `stack` is NULL or a live stack that no other thread uses during the call.
#[no_mangle]
pub unsafe extern "C" fn sluice_set_congestion_control(
    stack: *mut sluice_stack,
    conn: sluice_conn,
    congestion_control: u32,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    status(unsafe {
        with_stack(stack, |s| {
            let cc = algorithm(congestion_control).ok_or(sluice_error::InvalidArgument)?;
            let id = s.handles.conn(conn)?.id;
            s.core.set_congestion_control(id, cc)?;
            Ok(0)
        })
    })
}

/// Turns Nagle's algorithm on (nonzero) or off (0, TCP_NODELAY) for the connection.
///
/// # Safety
/// `stack` is NULL or a live stack that no other thread uses during the call.
#[no_mangle]
pub unsafe extern "C" fn sluice_set_nagle(
    stack: *mut sluice_stack,
    conn: sluice_conn,
    on: u8,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    status(unsafe {
        with_stack(stack, |s| {
            let id = s.handles.conn(conn)?.id;
            s.core.set_nagle(id, on != 0)?;
            Ok(0)
        })
    })
}

/// Paces the connection at a fixed rate in bits per second of Ethernet frames (0: the
/// congestion control's own rate, unlimited for window-based ones); the window still caps it.
///
/// # Safety
/// `stack` is NULL or a live stack that no other thread uses during the call.
#[no_mangle]
pub unsafe extern "C" fn sluice_set_rate(
    stack: *mut sluice_stack,
    conn: sluice_conn,
    bits_per_sec: u64,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    status(unsafe {
        with_stack(stack, |s| {
            let id = s.handles.conn(conn)?.id;
            s.core.set_rate(id, bits_per_sec)?;
            Ok(0)
        })
    })
}
