//! Connections one part accepts for another part's listener (the service in flow groups,
//! docs/service.md): the accepting part takes a slot of its own for the connection, sets
//! it up (block, rings, state) and hands (listener, slot, peer) to the listener's part,
//! which writes the accept record into the listener's ring when it has room. The link
//! holds a handed-over connection until then, and a full link stops the accepting part
//! from accepting more: its core's backlog fills, as a Linux listener's would.

use std::net::{Ipv4Addr, SocketAddrV4};

use sluice_shm::flags::{ALLOCATED, CONNECTED, RX_STALLED};
use sluice_shm::{AcceptRecord, ACCEPT_RECORD_BYTES};
use sluice_tcp::{ConnId, ListenerId, Stack};

use crate::app::AttachedApp;
use crate::congestion::apply_congestion;
use crate::data;
use crate::links::PartMsg;
use crate::owners::Owner;
use crate::quota::Resource;
use crate::shared::{hold, Shared};
use crate::slots::{SlotState, Unclaimed};
use crate::teardown;

/// Accepts what replica `listener`'s core holds into slots of this part and hands each
/// over to the listener's part, while the link has room and the application a free slot
/// of this part and room in its connections quota (otherwise the replica is retried).
pub(crate) fn accept_for_replica(
    apps: &mut [Option<AttachedApp>],
    listener: ListenerId,
    stack: &mut Stack,
    sh: &mut Shared,
) {
    let Some(r) = sh.replicas.get_mut(listener).map(|r| *r) else {
        return;
    };
    let app = apps
        .get_mut(r.owner.app as usize)
        .and_then(Option::as_mut)
        .filter(|a| a.id == r.app_id && a.departed.is_none());
    let Some(app) = app else {
        return;
    };
    let o = r.options;
    loop {
        let over_quota = sh
            .books
            .admits(&sh.quotas, app.creds.uid, &app.usage, Resource::Connection)
            .is_err();
        if !sh.links.room(r.part) || over_quota || app.slots.free_count() == 0 {
            if let Some(r) = sh.replicas.get_mut(listener) {
                if !r.listed {
                    r.listed = true;
                    sh.replicas.pending.push(listener);
                }
            }
            return;
        }
        let setup = sh.setup.clone();
        let _held = hold(&setup);
        let id = match stack.accept(listener) {
            Ok(id) => id,
            Err(_) => {
                if let Some(r) = sh.replicas.get_mut(listener) {
                    r.ready = false;
                }
                return;
            }
        };
        sh.classes.note(id, stack, &mut sh.counters);
        let Some(c) = app.alloc_slot(SlotState::Conn { id }, ALLOCATED | CONNECTED) else {
            // A free slot was counted above; were it gone, the peer is reset, not leaked.
            let _ = stack.abort(id);
            return;
        };
        c.slot.settle(&mut sh.books, c.uid, c.usage);
        c.block.reset(ALLOCATED | CONNECTED);
        let (local, peer) = stack.endpoints(id).unwrap_or((
            SocketAddrV4::new(sh.ip, o.port),
            SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
        ));
        c.block.set_addresses(local, peer);
        // As the listener's own accepts (data::accept_into): its options are inherited.
        if o.nodelay {
            let _ = stack.set_nagle(id, false);
            c.slot.nodelay = true;
        }
        if o.offload {
            let _ = stack.set_teardown_offload(id, true);
            c.slot.teardown_offload = true;
        }
        apply_congestion(stack, id, o.congestion, &c.block);
        c.slot.congestion = o.congestion;
        sh.conns.insert(id, c.owner);
        let slot = c.s;
        let msg = PartMsg::Accepted {
            listener: r.owner,
            app_id: r.app_id,
            slot,
            id,
            local_port: local.port(),
            peer,
        };
        sh.links.send(r.part, msg);
        sh.counters.accepts_handed_over += 1;
        sh.busy = true;
        // Bytes (or a FIN) that arrived before the accept raised no event for us.
        data::rx_move(app, slot, stack, sh);
    }
}

/// Retries the replicas that could not hand their connections over.
pub(crate) fn retry(apps: &mut [Option<AttachedApp>], stack: &mut Stack, sh: &mut Shared) {
    let pending = std::mem::take(&mut sh.replicas.pending);
    for listener in pending {
        let ready = match sh.replicas.get_mut(listener) {
            Some(r) => {
                r.listed = false;
                r.ready
            }
            None => false,
        };
        if ready {
            accept_for_replica(apps, listener, stack, sh);
        }
    }
}

/// What became of a connection handed over to its listener's part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placed {
    /// Its accept record is in the listener's ring.
    Done,
    /// The ring has no room now: it waits in the link.
    Wait,
    /// The listener is gone: the sending part resets it.
    Refuse,
}

/// Writes the accept record of connection `id` in slot `slot` (another part's) into
/// listener `listener`'s ring, if the listener still listens and its ring has room.
pub(crate) fn place(
    app: Option<&mut AttachedApp>,
    (listener, app_id): (Owner, u32),
    (slot, id, local_port, peer): (u32, ConnId, u16, SocketAddrV4),
    stack: &mut Stack,
    sh: &mut Shared,
) -> Placed {
    let record_bytes = ACCEPT_RECORD_BYTES as u64;
    let Some(app) = app.filter(|a| a.id == app_id && a.departed.is_none()) else {
        return Placed::Refuse;
    };
    let Some(h) = app.slot(listener.slot) else {
        return Placed::Refuse;
    };
    if !matches!(h.slot.state, SlotState::Listening { .. }) {
        return Placed::Refuse;
    }
    // A listener's reader moves in whole records.
    let head = data::read_rx_head(h.slot, &h.block).filter(|h| h % record_bytes == 0);
    let Some(head) = head else {
        teardown::bad_position(app, listener.slot, stack, sh);
        return Placed::Refuse;
    };
    let s = h.slot;
    s.rx_head_seen = head;
    while s.unclaimed.front().is_some_and(|u| u.pos < head) {
        s.unclaimed.pop_front();
    }
    if h.ring_size - (s.rx_tail - head) < record_bytes {
        if s.flags & RX_STALLED == 0 {
            // The application sends Consumed once it read: that wakes this part.
            s.set_flags(&h.block, RX_STALLED, 0);
            sh.counters.accept_stalls += 1;
            *h.dirty = true;
        }
        return Placed::Wait;
    }
    let pos = s.rx_tail;
    let record = AcceptRecord {
        slot,
        peer,
        local_port,
    };
    h.rx.write(pos, &record.encode());
    s.unclaimed.push_back(Unclaimed { pos, slot, id });
    s.publish_rx_tail(&h.block, pos + record_bytes);
    sh.counters.accepts += 1;
    sh.busy = true;
    *h.dirty = true;
    Placed::Done
}

/// The listener's part refused connection `id` this part accepted into `slot` (its
/// listener closed first): reset it and free the slot, if it is still that connection.
pub(crate) fn refused(
    app: &mut AttachedApp,
    slot: u32,
    id: ConnId,
    stack: &mut Stack,
    sh: &mut Shared,
) {
    let still = app
        .slots
        .get(slot)
        .is_some_and(|c| c.state == SlotState::Conn { id });
    if still {
        let _ = stack.abort(id);
        sh.conns.remove(id);
        sh.counters.resets_on_close += 1;
        teardown::free_slot(app, slot, sh);
    }
}
