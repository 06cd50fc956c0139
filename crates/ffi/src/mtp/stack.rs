//! Creating and destroying an MTP stack, and driving it: received frames in, frames to send
//! out, the next deadline, the timers, and the neighbors frames go to.

use std::net::Ipv4Addr;

use sluice_mtp::stack::MtpStack;
use sluice_wire::EthernetAddress;

use crate::boundary::{self, bytes, bytes_mut, free, input, run, status, with_stack, Out};
use crate::error::sluice_error;
use crate::mtp::config::sluice_mtp_config;
use crate::mtp::host::sluice_mtp_stack;

/// Bytes the Ethernet header adds to an MTU-sized IPv4 packet.
const ETHERNET_HEADER: usize = 14;

/// Creates an MTP stack from `*config` and stores it in `*stack`. An invalid configuration
/// is `SLUICE_ERROR_INVALID_CONFIG` (`sluice_mtp_config_check` says why) and `*stack` is
/// unchanged. Stacks share no state.
///
/// # Safety
/// `config` is NULL or points to a `sluice_mtp_config`; `stack` is NULL or valid for a
/// write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_stack_new(
    config: *const sluice_mtp_config,
    stack: *mut *mut sluice_mtp_stack,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    let (config, out) = unsafe { (input(config), Out::new(stack)) };
    status(run(|| {
        let (config, out) = (config?, out?);
        let core_config = config.to_core().map_err(|_| sluice_error::InvalidConfig)?;
        let core = MtpStack::new(core_config).map_err(|_| sluice_error::InvalidConfig)?;
        out.write(Box::into_raw(Box::new(sluice_mtp_stack::new(core))));
        Ok(0)
    }))
}

/// Destroys an MTP stack and everything in it (outstanding messages vanish). NULL is
/// ignored. Its endpoint handles mean nothing afterwards.
///
/// # Safety
/// `stack` is NULL or a pointer from `sluice_mtp_stack_new` not yet freed; it is not used
/// after this call.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_stack_free(stack: *mut sluice_mtp_stack) {
    // SAFETY: forwarded from this function's contract (sluice_mtp_stack_new boxes it).
    unsafe { free(stack) }
}

/// The buffer size `sluice_mtp_stack_poll_transmit` needs: the MTU plus the 14-byte
/// Ethernet header.
///
/// # Safety
/// `stack` is NULL or a live MTP stack that no other thread uses during the call.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_stack_max_frame_len(stack: *mut sluice_mtp_stack) -> i64 {
    // SAFETY: forwarded from this function's contract.
    unsafe { with_stack(stack, |s| Ok(frame_len(s) as i64)) }
}

/// The buffer a frame needs on this stack.
fn frame_len(s: &sluice_mtp_stack) -> usize {
    s.core.config().mtu + ETHERNET_HEADER
}

/// Hands the stack one received Ethernet frame carrying MTP (IPv4 protocol 253 or UDP port
/// 9919) at time `now_ns` (the caller's clock, never going backwards). Malformed frames and
/// frames for another address are dropped and counted (`sluice_mtp_stack_counters`), never
/// an error.
///
/// # Safety
/// `stack` is NULL or a live MTP stack that no other thread uses during the call; `frame`
/// is NULL or valid for reads of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_stack_handle_frame(
    stack: *mut sluice_mtp_stack,
    now_ns: u64,
    frame: *const u8,
    len: usize,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    let frame = unsafe { bytes(frame, len) };
    // SAFETY: forwarded from this function's contract.
    status(unsafe {
        with_stack(stack, |s| {
            s.core.handle_frame(now_ns, frame?);
            Ok(0)
        })
    })
}

/// Writes the next frame to send into `buf` and returns its length; 0 when nothing is to be
/// sent. A buffer smaller than `sluice_mtp_stack_max_frame_len` is
/// `SLUICE_ERROR_BUFFER_TOO_SMALL` and takes nothing: the frame stays queued.
///
/// # Safety
/// `stack` is NULL or a live MTP stack that no other thread uses during the call; `buf` is
/// NULL or valid for writes of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_stack_poll_transmit(
    stack: *mut sluice_mtp_stack,
    now_ns: u64,
    buf: *mut u8,
    len: usize,
) -> i64 {
    let body = |s: &mut sluice_mtp_stack| {
        let need = frame_len(s);
        if buf.is_null() {
            return Err(sluice_error::NullPointer);
        }
        if len < need {
            return Err(sluice_error::BufferTooSmall);
        }
        // SAFETY: `buf` is valid for writes of `len` >= `need` bytes by this function's
        // contract.
        let buf = unsafe { bytes_mut(buf, need)? };
        Ok(s.core.poll_transmit(now_ns, buf).map_or(0, |n| n as i64))
    };
    // SAFETY: forwarded from this function's contract.
    unsafe { with_stack(stack, body) }
}

/// The earliest time `sluice_mtp_stack_handle_timeout` may have work (a retransmission
/// timer or paced data): returns 1 and writes it to `*deadline_ns`, or returns 0 (and
/// writes `UINT64_MAX`) when nothing is armed. Poll it again after every call.
///
/// # Safety
/// `stack` is NULL or a live MTP stack that no other thread uses during the call;
/// `deadline_ns` is NULL or valid for a write of a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_stack_poll_timeout(
    stack: *mut sluice_mtp_stack,
    deadline_ns: *mut u64,
) -> i32 {
    // SAFETY: forwarded from this function's contract.
    let out = unsafe { Out::new(deadline_ns) };
    // SAFETY: forwarded from this function's contract.
    let r = unsafe {
        with_stack(stack, |s| {
            let out = out?;
            let deadline = s.core.poll_timeout();
            out.write(deadline.unwrap_or(u64::MAX));
            Ok(i64::from(deadline.is_some()))
        })
    };
    r as i32
}

/// Runs every timer due at or before `now_ns` (retransmissions, failing messages that timed
/// out too often, paced sends). Frames it queues come out of `sluice_mtp_stack_poll_transmit`.
///
/// # Safety
/// `stack` is NULL or a live MTP stack that no other thread uses during the call.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_stack_handle_timeout(
    stack: *mut sluice_mtp_stack,
    now_ns: u64,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    status(unsafe {
        with_stack(stack, |s| {
            s.core.handle_timeout(now_ns);
            Ok(0)
        })
    })
}

/// Sets the next hop's MAC for `ip` (host byte order; `mac` is 6 bytes). MTP has no ARP:
/// frames to an address without a neighbor wait (counted in `no_neighbor`).
///
/// # Safety
/// `stack` is NULL or a live MTP stack that no other thread uses during the call; `mac` is
/// NULL or valid for reads of 6 bytes.
#[no_mangle]
pub unsafe extern "C" fn sluice_mtp_set_neighbor(
    stack: *mut sluice_mtp_stack,
    ip: u32,
    mac: *const u8,
) -> sluice_error {
    // SAFETY: forwarded from this function's contract.
    let mac = unsafe { boundary::mac(mac) };
    // SAFETY: forwarded from this function's contract.
    status(unsafe {
        with_stack(stack, |s| {
            let mac = mac?;
            s.core
                .set_neighbor(Ipv4Addr::from(ip), EthernetAddress(mac));
            Ok(0)
        })
    })
}
