//! One round of a sans-IO core over a device, written once: frames in, due timers, frames
//! out. The engine's loop runs these steps with its application between timers and
//! transmit; test rigs that drive a plain core over a device (the service's and libsluice's
//! peers) run the same steps.

use sluice_device::{Device, DeviceError, RxChecksum, TxFrame};
use sluice_tcp::{Instant, Stack};

use crate::hooks::Hooks;
use crate::transport::{classify, Class, Transports};

/// Hands one burst of received frames from `device` to `stack`; returns how many.
pub fn receive<D: Device + ?Sized>(
    stack: &mut Stack,
    device: &mut D,
    now: Instant,
) -> Result<usize, DeviceError> {
    receive_classified(stack, &mut Transports::none(), device, now)
}

/// [`receive`] with the application's transports: each frame is classified once
/// ([`classify`]); RoCEv2 and MTP frames go to their transport when the set has it, the
/// rest (and those of a transport the set lacks) to the TCP core.
pub fn receive_classified<D: Device + ?Sized>(
    stack: &mut Stack,
    transports: &mut Transports<'_>,
    device: &mut D,
    now: Instant,
) -> Result<usize, DeviceError> {
    receive_hooked(stack, transports, &mut Hooks::new(), device, now)
}

/// [`receive_classified`] through the ingress and established hook points: `hooks` sees
/// each frame first.
pub fn receive_hooked<D: Device + ?Sized>(
    stack: &mut Stack,
    transports: &mut Transports<'_>,
    hooks: &mut Hooks,
    device: &mut D,
    now: Instant,
) -> Result<usize, DeviceError> {
    hooks.now_ns = now.as_nanos();
    device.receive(&mut |frame, meta| {
        // Ingress, then established for the segments the core's pipeline would take.
        let Some(frame) = hooks.receive(frame, stack) else {
            return;
        };
        let class = classify(frame);
        if class != Class::Core {
            if let Some(t) = transports.for_class(class) {
                // The transport checks its own integrity (RoCEv2's ICRC, MTP's checksum).
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

/// Runs the timers of every transport of the set that is due at `now`.
pub fn run_due_transport_timers(transports: &mut Transports<'_>, now: Instant) {
    for t in transports.each() {
        if t.poll_timeout().is_some_and(|d| d <= now) {
            t.handle_timeout(now);
        }
    }
}

/// Moves every frame the set's transports have ready onto the device, as [`transmit`] does
/// for the core (the same transmit loop, once per transport); returns how many frames were queued.
pub fn transmit_transports<D: Device + ?Sized>(
    transports: &mut Transports<'_>,
    device: &mut D,
    now: Instant,
) -> Result<usize, DeviceError> {
    transmit_transports_hooked(transports, &mut Hooks::new(), device, now)
}

/// [`transmit_transports`] through the egress hook point.
pub fn transmit_transports_hooked<D: Device + ?Sized>(
    transports: &mut Transports<'_>,
    hooks: &mut Hooks,
    device: &mut D,
    now: Instant,
) -> Result<usize, DeviceError> {
    let mut sent = 0;
    for t in transports.each() {
        sent += drain(device, hooks, |buf| {
            t.poll_transmit(now, buf).map(TxFrame::plain)
        })?;
    }
    Ok(sent)
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
    transmit_hooked(stack, &mut Hooks::new(), device, now)
}

/// [`transmit`] through the egress hook point: `hooks` sees each frame the core wrote.
pub fn transmit_hooked<D: Device + ?Sized>(
    stack: &mut Stack,
    hooks: &mut Hooks,
    device: &mut D,
    now: Instant,
) -> Result<usize, DeviceError> {
    hooks.now_ns = now.as_nanos();
    let mut sent = transmit_reflected(hooks, device)?;
    sent += drain(device, hooks, |buf| {
        // Devices with segmentation offload get large segments (the core only makes them
        // when configured to: Config::tso_max_payload).
        stack.poll_transmit_offload(now, buf).map(|t| TxFrame {
            len: t.len,
            gso_size: t.gso_size,
            csum_partial: t.csum_partial,
        })
    })?;
    Ok(sent)
}

/// Sends the frames ingress modules returned XDP_TX for, ahead of the core's: they skip
/// the egress point, as XDP_TX skips the kernel's stack.
fn transmit_reflected<D: Device + ?Sized>(
    hooks: &mut Hooks,
    device: &mut D,
) -> Result<usize, DeviceError> {
    if !hooks.modules().has_reflected() {
        return Ok(0);
    }
    let mut modules = hooks.modules_mut();
    drain(device, &mut Hooks::new(), |buf| {
        let f = modules.pop_reflected()?;
        let out = buf.get_mut(..f.len()).map(|slot| {
            slot.copy_from_slice(&f);
            TxFrame::plain(f.len())
        });
        modules.recycle(f);
        out
    })
}

/// Fills the device's free transmit slots from `produce` until it has nothing more,
/// flushing full bursts; returns how many frames were queued. One loop for every core, and
/// so the one place of the egress hook point.
fn drain<D: Device + ?Sized>(
    device: &mut D,
    hooks: &mut Hooks,
    mut produce: impl FnMut(&mut [u8]) -> Option<TxFrame>,
) -> Result<usize, DeviceError> {
    let mut sent = 0;
    // Whether the last flush left the device without a free slot (a transmit ring whose
    // frames are all still held by the kernel): then wait for the next round.
    let mut flushed_full = false;
    loop {
        let mut produced = false;
        // A frame an egress module dropped: the slot stays free, go on with the next.
        let mut dropped = false;
        let queued = device.transmit_with(&mut |buf| {
            let mut t = produce(buf)?;
            produced = true;
            match hooks.egress(buf, t.len) {
                Some(len) => t.len = len,
                None => {
                    dropped = true;
                    return None;
                }
            }
            Some(t)
        })?;
        if dropped {
            continue;
        }
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
