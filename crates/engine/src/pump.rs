//! One round of a sans-IO core over a device, written once: frames in, due timers, frames
//! out. The engine's loop runs these steps with its application between timers and
//! transmit; test rigs that drive a plain core over a device (the service's and libsluice's
//! peers) run the same steps.

use sluice_device::{Device, DeviceError, RxChecksum, TxFrame};
use sluice_tcp::{Instant, Stack};

use crate::transport::{is_rocev2, Transport};

/// Hands one burst of received frames from `device` to `stack`; returns how many.
pub fn receive<D: Device + ?Sized>(
    stack: &mut Stack,
    device: &mut D,
    now: Instant,
) -> Result<usize, DeviceError> {
    receive_classified(stack, None, device, now)
}

/// [`receive`] with a second transport: RoCEv2 frames ([`is_rocev2`]) go to it, the rest
/// to the TCP core; without one, everything goes to the core unclassified.
pub fn receive_classified<D: Device + ?Sized>(
    stack: &mut Stack,
    mut transport: Option<&mut dyn Transport>,
    device: &mut D,
    now: Instant,
) -> Result<usize, DeviceError> {
    device.receive(&mut |frame, meta| {
        if let Some(t) = transport.as_deref_mut() {
            if is_rocev2(frame) {
                // The transport checks its own integrity (the ICRC).
                t.handle_frame(now, frame);
                return;
            }
        }
        to_core(stack, now, frame, meta.checksum)
    })
}

fn to_core(stack: &mut Stack, now: Instant, frame: &[u8], checksum: RxChecksum) {
    match checksum {
        RxChecksum::Unverified => stack.handle_frame(now, frame),
        // Verified by the device, or never on a wire (a local sender's partial sum).
        RxChecksum::Verified | RxChecksum::Partial => {
            stack.handle_frames_checksum_ok(now, &[frame])
        }
    }
}

/// Runs a second transport's timers if one is due at `now`.
pub fn run_due_transport_timers(transport: &mut dyn Transport, now: Instant) {
    if transport.poll_timeout().is_some_and(|t| t <= now) {
        transport.handle_timeout(now);
    }
}

/// Moves every frame a second transport has ready onto the device, as [`transmit`] does
/// for the core; returns how many frames were queued.
pub fn transmit_transport<D: Device + ?Sized>(
    transport: &mut dyn Transport,
    device: &mut D,
    now: Instant,
) -> Result<usize, DeviceError> {
    drain(device, |buf| {
        transport.poll_transmit(now, buf).map(TxFrame::plain)
    })
}

/// Runs the core's timers if one is due at `now`.
pub fn run_due_timers(stack: &mut Stack, now: Instant) {
    if stack.poll_timeout().is_some_and(|t| t <= now) {
        stack.handle_timeout(now);
    }
}

/// Moves every frame the core has ready onto the device, flushing full bursts; returns how
/// many frames were queued.
pub fn transmit<D: Device + ?Sized>(
    stack: &mut Stack,
    device: &mut D,
    now: Instant,
) -> Result<usize, DeviceError> {
    drain(device, |buf| {
        // Devices with segmentation offload get large segments (the core only makes them
        // when configured to: Config::tso_max_payload).
        stack.poll_transmit_offload(now, buf).map(|t| TxFrame {
            len: t.len,
            gso_size: t.gso_size,
            csum_partial: t.csum_partial,
        })
    })
}

/// Fills the device's free transmit slots from `produce` until it has nothing more,
/// flushing full bursts; returns how many frames were queued. One loop for every core.
fn drain<D: Device + ?Sized>(
    device: &mut D,
    mut produce: impl FnMut(&mut [u8]) -> Option<TxFrame>,
) -> Result<usize, DeviceError> {
    let mut sent = 0;
    // Whether the last flush left the device without a free slot (a transmit ring whose
    // frames are all still held by the kernel): then wait for the next round.
    let mut flushed_full = false;
    loop {
        let mut produced = false;
        let queued = device.transmit_with(&mut |buf| {
            let t = produce(buf);
            produced = t.is_some();
            t
        })?;
        if queued && produced {
            sent += 1;
            flushed_full = false;
            continue;
        }
        if !queued && !flushed_full {
            // Every slot is full: send the burst and go on.
            device.flush()?;
            flushed_full = true;
            continue;
        }
        break;
    }
    if sent > 0 {
        device.flush()?;
    }
    Ok(sent)
}
