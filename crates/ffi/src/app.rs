//! The application calls: listen, accept, connect, send, recv, shutdown, close, abort, and
//! events (RFC 9293 3.10's user interface, as the Rust `Stack` has it).

use std::net::Ipv4Addr;

use sluice_tcp::{Event, Instant};

use crate::boundary::{bytes, bytes_mut, status, with_stack, Out};
use crate::error::sluice_error;
use crate::handle::{sluice_conn, sluice_listener};
use crate::host::sluice_stack;

/// Readiness bit: the active open completed.
pub const SLUICE_READY_CONNECTED: u32 = 1;
/// Readiness bit: data or end-of-stream can be read.
pub const SLUICE_READY_READABLE: u32 = 2;
/// Readiness bit: send-buffer space is available.
pub const SLUICE_READY_WRITABLE: u32 = 4;
/// Readiness bit: the connection failed; `sluice_recv`/`sluice_send` return the error.
pub const SLUICE_READY_ERROR: u32 = 8;
/// Readiness bit: the connection is fully closed.
pub const SLUICE_READY_CLOSED: u32 = 16;

/// What an event is about.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum sluice_event_kind {
    /// No event (the struct was not filled).
    None = 0,
    /// A listener has connections to accept (`listener` is set).
    Acceptable = 1,
    /// A connection's readiness changed (`conn` and `readiness` are set).
    Conn = 2,
}

/// An event for the application, from `sluice_poll_event`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct sluice_event {
    /// What the event is about.
    pub kind: sluice_event_kind,
    /// `SLUICE_READY_*` bits, for `SLUICE_EVENT_KIND_CONN`.
    pub readiness: u32,
    /// The connection, for `SLUICE_EVENT_KIND_CONN` (else 0).
    pub conn: sluice_conn,
    /// The listener, for `SLUICE_EVENT_KIND_ACCEPTABLE` (else 0).
    pub listener: sluice_listener,
}

/// Listens on `port` with an accept queue of `backlog` (at most the configured bound) and
/// stores the listener in `*listener`.
///
/// # Safety
/// `stack` is NULL or a live stack that no other thread uses during the call; `listener`
/// is NULL or valid for a write of a `sluice_listener`.
#[no_mangle]
pub unsafe extern "C" fn sluice_listen(
    stack: *mut sluice_stack,
    port: u16,
    backlog: u32,
    listener: *mut sluice_listener,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    let out = unsafe { Out::new(listener) };
    // SAFETY: forwarded from this function's contract.
    status(unsafe {
        with_stack(stack, |s| {
            let out = out?;
            let id = s.core.listen(port, backlog as usize)?;
            out.write(s.handles.insert_listener(id));
            Ok(0)
        })
    })
}

/// Stops listening; connections not yet accepted are reset. The handle becomes invalid.
///
/// # Safety
/// `stack` is NULL or a live stack that no other thread uses during the call.
#[no_mangle]
pub unsafe extern "C" fn sluice_unlisten(
    stack: *mut sluice_stack,
    listener: sluice_listener,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    status(unsafe {
        with_stack(stack, |s| {
            let id = s.handles.listener(listener)?;
            s.handles.remove_listener(id);
            s.core.unlisten(id)?;
            Ok(0)
        })
    })
}

/// Takes an established connection from the listener's accept queue into `*conn`;
/// `SLUICE_ERROR_WOULD_BLOCK` when it is empty.
///
/// # Safety
/// `stack` is NULL or a live stack that no other thread uses during the call; `conn` is
/// NULL or valid for a write of a `sluice_conn`.
#[no_mangle]
pub unsafe extern "C" fn sluice_accept(
    stack: *mut sluice_stack,
    listener: sluice_listener,
    conn: *mut sluice_conn,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    let out = unsafe { Out::new(conn) };
    // SAFETY: forwarded from this function's contract.
    status(unsafe {
        with_stack(stack, |s| {
            let out = out?;
            let id = s.core.accept(s.handles.listener(listener)?)?;
            out.write(s.handles.insert_conn(id));
            Ok(0)
        })
    })
}

/// Opens a connection to `ip:port` (host byte order) from an ephemeral port at time
/// `now_ns` and stores it in `*conn`; an event with `SLUICE_READY_CONNECTED` (or
/// `SLUICE_READY_ERROR`) follows.
///
/// # Safety
/// `stack` is NULL or a live stack that no other thread uses during the call; `conn` is
/// NULL or valid for a write of a `sluice_conn`.
#[no_mangle]
pub unsafe extern "C" fn sluice_connect(
    stack: *mut sluice_stack,
    now_ns: u64,
    ip: u32,
    port: u16,
    conn: *mut sluice_conn,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    let out = unsafe { Out::new(conn) };
    // SAFETY: forwarded from this function's contract.
    status(unsafe {
        with_stack(stack, |s| {
            let out = out?;
            let now = Instant::from_nanos(now_ns);
            let id = s.core.connect(now, Ipv4Addr::from(ip), port)?;
            out.write(s.handles.insert_conn(id));
            Ok(0)
        })
    })
}

/// Copies up to `len` bytes into the connection's send buffer; returns how many it took
/// (`SLUICE_ERROR_WOULD_BLOCK` when none fit: wait for `SLUICE_READY_WRITABLE`).
///
/// # Safety
/// `stack` is NULL or a live stack that no other thread uses during the call; `data` is
/// NULL (only with `len` 0) or valid for reads of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn sluice_send(
    stack: *mut sluice_stack,
    conn: sluice_conn,
    data: *const u8,
    len: usize,
) -> i64 {
    // SAFETY: forwarded from this function's contract.
    let data = unsafe { bytes(data, len) };
    // SAFETY: forwarded from this function's contract.
    unsafe {
        with_stack(stack, |s| {
            let data = data?;
            let entry = s.handles.conn(conn)?;
            let n = s.core.send(entry.id, data)?;
            entry.bytes_sent += n as u64;
            Ok(n as i64)
        })
    }
}

/// Copies received bytes into `buf` (up to `len`); returns how many, 0 at the end of the
/// stream (the peer closed), `SLUICE_ERROR_WOULD_BLOCK` when nothing is there yet. A `len`
/// of 0 is `SLUICE_ERROR_BUFFER_TOO_SMALL` (0 would read as end of stream).
///
/// # Safety
/// `stack` is NULL or a live stack that no other thread uses during the call; `buf` is
/// NULL or valid for writes of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn sluice_recv(
    stack: *mut sluice_stack,
    conn: sluice_conn,
    buf: *mut u8,
    len: usize,
) -> i64 {
    let body = |s: &mut sluice_stack| {
        if buf.is_null() {
            return Err(sluice_error::NullPointer);
        }
        if len == 0 {
            return Err(sluice_error::BufferTooSmall);
        }
        let entry = s.handles.conn(conn)?;
        // Only what can be filled is taken (and zeroed) from the caller's buffer.
        let readable = s.core.info(entry.id)?.readable;
        let take = len.min(readable.max(1));
        // SAFETY: `buf` is valid for writes of `len` >= `take` bytes by this function's
        // contract.
        let buf = unsafe { bytes_mut(buf, take)? };
        let n = s.core.recv(entry.id, buf)?;
        entry.bytes_received += n as u64;
        Ok(n as i64)
    };
    // SAFETY: forwarded from this function's contract.
    unsafe { with_stack(stack, body) }
}

/// Closes the sending side: a FIN follows the queued data (half-close); receiving goes on.
///
/// # Safety
/// `stack` is NULL or a live stack that no other thread uses during the call.
#[no_mangle]
pub unsafe extern "C" fn sluice_shutdown(
    stack: *mut sluice_stack,
    conn: sluice_conn,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    status(unsafe {
        with_stack(stack, |s| {
            let id = s.handles.conn(conn)?.id;
            s.core.shutdown(id)?;
            Ok(0)
        })
    })
}

/// Closes the connection and releases the handle: a FIN follows the queued data and the
/// stack finishes the teardown itself (unread received data makes it an abort, RST). The
/// handle is invalid afterwards (`SLUICE_ERROR_INVALID_HANDLE`).
///
/// # Safety
/// `stack` is NULL or a live stack that no other thread uses during the call.
#[no_mangle]
pub unsafe extern "C" fn sluice_close(stack: *mut sluice_stack, conn: sluice_conn) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    status(unsafe {
        with_stack(stack, |s| {
            let id = s.handles.conn(conn)?.id;
            s.handles.remove_conn(id);
            s.core.close(id)?;
            Ok(0)
        })
    })
}

/// Resets the connection (RST) and releases the handle.
///
/// # Safety
/// `stack` is NULL or a live stack that no other thread uses during the call.
#[no_mangle]
pub unsafe extern "C" fn sluice_abort(stack: *mut sluice_stack, conn: sluice_conn) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    status(unsafe {
        with_stack(stack, |s| {
            let id = s.handles.conn(conn)?.id;
            s.handles.remove_conn(id);
            s.core.abort(id)?;
            Ok(0)
        })
    })
}

/// Takes the next event into `*event`: returns 1 when one was written, 0 when there is none.
///
/// # Safety
/// `stack` is NULL or a live stack that no other thread uses during the call; `event` is
/// NULL or valid for a write of a `sluice_event`.
#[no_mangle]
pub unsafe extern "C" fn sluice_poll_event(
    stack: *mut sluice_stack,
    event: *mut sluice_event,
) -> i32 {
    // SAFETY: forwarded from this function's contract.
    let out = unsafe { Out::new(event) };
    // SAFETY: forwarded from this function's contract.
    let r = unsafe {
        with_stack(stack, |s| {
            let out = out?;
            loop {
                let e = match s.core.poll_event() {
                    None => return Ok(0),
                    Some(Event::Acceptable(id)) => match s.handles.listener_handle(id) {
                        // A listener the application let go of: nobody to tell.
                        None => continue,
                        Some(listener) => sluice_event {
                            kind: sluice_event_kind::Acceptable,
                            readiness: 0,
                            conn: 0,
                            listener,
                        },
                    },
                    Some(Event::Conn(id, r)) => sluice_event {
                        kind: sluice_event_kind::Conn,
                        readiness: readiness_bits(r),
                        conn: s.handles.conn_handle(id),
                        listener: 0,
                    },
                };
                out.write(e);
                return Ok(1);
            }
        })
    };
    r as i32
}

/// The `SLUICE_READY_*` bits of a readiness.
fn readiness_bits(r: sluice_tcp::Readiness) -> u32 {
    [
        (r.connected(), SLUICE_READY_CONNECTED),
        (r.readable(), SLUICE_READY_READABLE),
        (r.writable(), SLUICE_READY_WRITABLE),
        (r.error(), SLUICE_READY_ERROR),
        (r.closed(), SLUICE_READY_CLOSED),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .fold(0, |bits, (_, bit)| bits | bit)
}
