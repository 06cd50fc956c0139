//! Ending things: a slot freed, a connection closed or reset, a listener stopped, and a
//! whole application released when it goes away or the engine stops.

use nix::errno::Errno;
use sluice_shm::SocketBlock;
use sluice_tcp::Stack;

use crate::app::AttachedApp;
use crate::links::PartMsg;
use crate::owners::Owner;
use crate::shared::Shared;
use crate::slots::SlotState;

/// Why an application's connections are being reset wholesale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Release {
    /// Its control socket hung up: what it still holds is reset; connections it closed
    /// gracefully before are kept and drained (Close is graceful, docs/service.md).
    Detach,
    /// It departed and the orphan linger ran out: everything left is reset.
    Orphan,
    /// The engine is stopping.
    Stop,
}

/// Returns slot `s` to the application's free list: its block reads "not allocated"; its
/// ring pages stay resident for the next socket while few slots are warm, else the oldest
/// warm slot's go back to the system (slots::WARM_SLOTS). What it was counted as leaves
/// the quota books here, once.
pub(crate) fn free_slot(app: &mut AttachedApp, s: u32, sh: &mut Shared) {
    if let Some(slot) = app.slots.get_mut(s) {
        slot.uncharge(&mut sh.books, app.creds.uid, &mut app.usage);
    }
    if let Some(block) = SocketBlock::new(&app.region, s) {
        block.reset(0);
    }
    if let Some(cold) = app.slots.release(s) {
        app.region.release_rings(cold);
    }
    app.dirty = true;
}

/// The application wrote a ring position outside its bounds: that socket is reset with
/// EFAULT and nothing else of the application is touched (docs/service.md, Commands).
pub(crate) fn bad_position(app: &mut AttachedApp, s: u32, stack: &mut Stack, sh: &mut Shared) {
    sh.counters.bad_positions += 1;
    let Some(state) = app.slots.get(s).map(|slot| slot.state) else {
        return;
    };
    match state {
        SlotState::Conn { id } | SlotState::Closing { id } => {
            let _ = stack.abort(id);
            sh.conns.remove(id);
            sh.counters.resets_bad_input += 1;
            if matches!(state, SlotState::Closing { .. }) {
                free_slot(app, s, sh);
                return;
            }
        }
        SlotState::Listening { listener } => {
            stop_listening(app, s, listener, stack, sh);
        }
        _ => return,
    }
    let Some(h) = app.slot(s) else {
        return;
    };
    h.slot.state = SlotState::Dead;
    h.slot.settle(&mut sh.books, h.uid, h.usage);
    // Nothing more will be placed in its ring: an application must not wait for it.
    h.slot.fail(
        &h.block,
        Errno::EFAULT as i32,
        sluice_shm::flags::RX_STALLED,
    );
    *h.dirty = true;
}

/// The application is done with connection `s` and its TX ring is drained (or can never
/// drain): hand the connection to the core's close and free the slot.
pub(crate) fn finish_close(app: &mut AttachedApp, s: u32, stack: &mut Stack, sh: &mut Shared) {
    if let Some(SlotState::Closing { id }) = app.slots.get(s).map(|slot| slot.state) {
        // The core sends a FIN after what it holds, or resets if it holds unread data
        // (RFC 2525 2.17), and finishes the teardown on its own.
        let _ = stack.close(id);
        sh.conns.remove(id);
        free_slot(app, s, sh);
    }
}

/// Stops listener `s`: the core resets connections not yet accepted, and the engine resets
/// those accepted into the ring that the application has not read (docs/service.md, Close).
pub(crate) fn stop_listening(
    app: &mut AttachedApp,
    s: u32,
    listener: sluice_tcp::ListenerId,
    stack: &mut Stack,
    sh: &mut Shared,
) {
    let _ = stack.unlisten(listener);
    let owner = Owner {
        app: app.index,
        slot: s,
    };
    sh.ports.release(listener.port(), owner);
    unlisten_replicas(owner, app.id, sh);
    let Some(slot) = app.slots.get_mut(s) else {
        return;
    };
    let taken = slot.rx_head_seen;
    let unclaimed = std::mem::take(&mut slot.unclaimed);
    for u in unclaimed.iter().filter(|u| u.pos >= taken) {
        if !sh.links.mine(u.slot) {
            // Another part accepted it (src/handover.rs): that part resets it.
            let msg = PartMsg::Refused {
                app: app.index,
                app_id: app.id,
                slot: u.slot,
                id: u.id,
            };
            sh.links.send(sh.links.part_of(u.slot), msg);
            continue;
        }
        // Only if the record's slot still holds that connection (the application may have
        // closed it already, and the slot may have been reused).
        let still = app
            .slots
            .get(u.slot)
            .is_some_and(|c| c.state == SlotState::Conn { id: u.id });
        if still {
            let _ = stack.abort(u.id);
            sh.conns.remove(u.id);
            sh.counters.resets_on_close += 1;
            free_slot(app, u.slot, sh);
        }
    }
    if let Some(slot) = app.slots.get_mut(s) {
        // Give the allocation back for the next listener in this slot.
        slot.unclaimed = unclaimed;
        slot.unclaimed.clear();
    }
}

/// Resets every connection of the application (RST), stops its listeners and releases its
/// ports; its region goes when the application is dropped. On [`Release::Detach`] the
/// connections it already closed are kept draining; returns whether any were.
pub(crate) fn release_app(
    app: &mut AttachedApp,
    why: Release,
    stack: &mut Stack,
    sh: &mut Shared,
) -> bool {
    let owner = |slot| Owner {
        app: app.index,
        slot,
    };
    let mut kept = false;
    let all: Vec<(u32, SlotState)> = app.slots.allocated().collect();
    for (s, state) in all {
        match state {
            SlotState::Closing { .. } if why == Release::Detach => {
                kept = true;
                continue;
            }
            SlotState::Conn { id } | SlotState::Closing { id } => {
                let _ = stack.abort(id);
                sh.conns.remove(id);
                match why {
                    Release::Detach | Release::Orphan => sh.counters.resets_on_detach += 1,
                    Release::Stop => sh.counters.resets_on_stop += 1,
                }
            }
            SlotState::Listening { listener } => {
                let _ = stack.unlisten(listener);
                sh.ports.release(listener.port(), owner(s));
                unlisten_replicas(owner(s), app.id, sh);
            }
            SlotState::Bound { port } if port != 0 => sh.ports.release(port, owner(s)),
            _ => {}
        }
        if let Some(slot) = app.slots.get_mut(s) {
            slot.uncharge(&mut sh.books, app.creds.uid, &mut app.usage);
        }
        if let Some(cold) = app.slots.release(s) {
            app.region.release_rings(cold);
        }
    }
    if kept {
        // It departed but its closed connections drain: its warm pages serve nobody now.
        for cold in app.slots.cool_all() {
            app.region.release_rings(cold);
        }
    } else {
        // The application is dropped: its entries would only be skipped (its index may be
        // reused meanwhile, where they would be harmless as well).
        let index = app.index;
        sh.rx_pending.retain(|o| o.app != index);
        sh.tx_pending.retain(|o| o.app != index);
    }
    kept
}

/// Tells every other part to stop listening for `owner`'s listener (src/replicas.rs).
fn unlisten_replicas(owner: Owner, app_id: u32, sh: &mut Shared) {
    for part in sh.links.others().collect::<Vec<_>>() {
        sh.links.send(part, PartMsg::Unlisten { owner, app_id });
    }
}
