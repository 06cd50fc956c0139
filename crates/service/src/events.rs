//! Core events into socket blocks: connections accepted into listeners' rings, connected,
//! readable, writable, end of stream, errors as Linux errnos, closed.

use nix::errno::Errno;
use sluice_shm::flags::{CONNECTED, CONNECTING};
use sluice_tcp::{ConnError, ConnId, Event, Readiness, Stack};

use crate::app::AttachedApp;
use crate::shared::Shared;
use crate::slots::SlotState;
use crate::teardown;
use crate::{data, handover};

/// The Linux errno an application sees for a failed connection (SO_ERROR, read, write).
pub(crate) fn errno_of(e: Option<ConnError>) -> i32 {
    (match e {
        Some(ConnError::Reset) => Errno::ECONNRESET,
        Some(ConnError::Refused) => Errno::ECONNREFUSED,
        Some(ConnError::TimedOut) => Errno::ETIMEDOUT,
        Some(ConnError::Aborted) | None => Errno::ECONNABORTED,
    }) as i32
}

/// Applies one core event to the socket it belongs to (O(1): ports and connections map
/// straight to their application and slot).
pub(crate) fn dispatch(
    apps: &mut [Option<AttachedApp>],
    event: Event,
    stack: &mut Stack,
    sh: &mut Shared,
) {
    match event {
        Event::Acceptable(listener) => {
            if let Some(r) = sh.replicas.get_mut(listener) {
                // Another part's listener (src/handover.rs).
                r.ready = true;
                handover::accept_for_replica(apps, listener, stack, sh);
                return;
            }
            // Listener ids are per core: only this part's own listeners are looked at.
            let Some(owner) = sh.ports.owner_of(listener, |o| sh.links.mine(o.slot)) else {
                return;
            };
            let Some(Some(app)) = apps.get_mut(owner.app as usize) else {
                return;
            };
            let Some(slot) = app.slots.get_mut(owner.slot) else {
                return;
            };
            if slot.state == (SlotState::Listening { listener }) {
                slot.accept_ready = true;
                data::accept_into(app, owner.slot, stack, sh);
            }
        }
        Event::Conn(id, readiness) => {
            let Some(owner) = sh.conns.get(id) else {
                return;
            };
            if let Some(Some(app)) = apps.get_mut(owner.app as usize) {
                connection(app, owner.slot, id, readiness, stack, sh);
            }
        }
    }
}

/// A connection's readiness changed.
fn connection(
    app: &mut AttachedApp,
    s: u32,
    id: ConnId,
    r: Readiness,
    stack: &mut Stack,
    sh: &mut Shared,
) {
    let Some(h) = app.slot(s) else {
        return;
    };
    match h.slot.state {
        SlotState::Conn { id: known } if known == id => {
            if r.connected() {
                if let Ok((local, peer)) = stack.endpoints(id) {
                    h.block.set_addresses(local, peer);
                }
                h.slot.set_flags(&h.block, CONNECTED, CONNECTING);
                sh.classes.note(id, stack, &mut sh.counters);
                *h.dirty = true;
                sh.busy = true;
            }
            if r.readable() || r.error() || r.closed() || r.connected() {
                data::rx_move(app, s, stack, sh);
            }
            if r.writable() || r.connected() {
                data::tx_move(app, s, stack, sh);
            }
            if r.error() || r.closed() {
                let error = stack.error(id).ok().flatten();
                // The movers may have reset or freed the slot meanwhile.
                let Some(h) = app.slot(s) else {
                    return;
                };
                if h.slot.state != (SlotState::Conn { id }) {
                    return;
                }
                if r.error() || error.is_some() {
                    h.slot.fail(&h.block, errno_of(error), 0);
                }
                if r.closed() {
                    // After the error and after the bytes: if the RX ring could not take
                    // everything yet, rx_move publishes CLOSED once it has.
                    h.slot.core_closed = true;
                    // No longer a connection in its quota: only a socket until Close.
                    h.slot.settle(&mut sh.books, h.uid, h.usage);
                    data::publish_closed(h.slot, &h.block, id, stack);
                }
                *h.dirty = true;
                sh.busy = true;
            }
        }
        SlotState::Closing { id: known } if known == id => {
            if r.error() || r.closed() {
                teardown::finish_close(app, s, stack, sh);
            } else if r.writable() || r.connected() {
                data::tx_move(app, s, stack, sh);
            }
        }
        _ => {}
    }
}
