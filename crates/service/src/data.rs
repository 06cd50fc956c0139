//! Moving bytes between the rings and the core: TX ring → core (header-only: the ring is
//! the send buffer, `send_external`; staging: `send` copies), core `peek`/`consume` → RX
//! ring, and accepted connections into a listener's ring as accept records. Every position
//! the application wrote is checked first (docs/service.md, Send and Consumed).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use sluice_shm::flags::{ALLOCATED, CLOSED, CONNECTED, CONNECTING, RX_FIN, RX_STALLED};
use sluice_shm::{AcceptRecord, Dir, Region, SocketBlock, ACCEPT_RECORD_BYTES};
use sluice_tcp::{Error, PayloadSource, Stack, TxPath, TxPositions};

use crate::app::AttachedApp;
use crate::congestion::apply_congestion;
use crate::quota::Resource;
use crate::shared::Shared;
use crate::slots::{Slot, SlotState, Unclaimed};
use crate::teardown;

/// The application's tx_tail if it lies in `tx_head ..= tx_head + ring_size`.
pub(crate) fn read_tx_tail(slot: &Slot, block: &SocketBlock<'_>, ring_size: u64) -> Option<u64> {
    let tail = block.tx_tail().load(Ordering::Acquire);
    (tail >= slot.tx_head && tail - slot.tx_head <= ring_size).then_some(tail)
}

/// The application's rx_head if it lies in `last validated ..= rx_tail` (it never moves
/// backwards, and never past what the engine placed).
pub(crate) fn read_rx_head(slot: &Slot, block: &SocketBlock<'_>) -> Option<u64> {
    let head = block.rx_head().load(Ordering::Acquire);
    (head >= slot.rx_head_seen && head <= slot.rx_tail).then_some(head)
}

/// The socket's TX ring as its connection's send buffer (header-only TX, flexins.txt 3.2):
/// the core gathers each segment's payload, first transmission or retransmission, from the
/// ring straight into the frame, and the ring's tx_head moves only as bytes are
/// acknowledged. It holds the application's own region only, so whatever the application
/// does to its ring reaches at most its own connection's segments.
pub(crate) struct TxRingSource {
    region: Arc<Region>,
    slot: u32,
    size: u64,
}

impl PayloadSource for TxRingSource {
    fn capacity(&self) -> u64 {
        self.size
    }

    fn gather(&self, pos: u64, dst: &mut [u8]) -> bool {
        if dst.len() as u64 > self.size {
            return false;
        }
        // The application may write these bytes meanwhile (it must not, until released):
        // the frame then carries whatever is there, with a checksum over exactly that.
        match self.region.ring(self.slot, Dir::Tx) {
            Some(ring) => {
                ring.read(pos, dst);
                true
            }
            None => false,
        }
    }
}

/// The core's positions in `s`'s TX stream when the ring is the connection's send buffer;
/// gives the core the ring as its source the first time (ServiceConfig::tx_path =
/// HeaderOnly, nothing sent yet). None: the staging path (`Stack::send` copies).
fn header_only_positions(
    app: &mut AttachedApp,
    s: u32,
    id: sluice_tcp::ConnId,
    stack: &mut Stack,
    sh: &Shared,
) -> Option<TxPositions> {
    if let Some(p) = stack.tx_positions(id).ok()? {
        return Some(p);
    }
    if sh.tx_path != TxPath::HeaderOnly {
        return None;
    }
    let base = app.slots.get(s)?.tx_head;
    let source = TxRingSource {
        region: Arc::clone(&app.region),
        slot: s,
        size: app.ring_size,
    };
    // Refused only for a connection that already staged bytes or is spliced: it stays on
    // the staging path.
    stack.set_payload_source(id, Box::new(source), base).ok()?;
    stack.tx_positions(id).ok().flatten()
}

/// Where the core's view of `s`'s TX stream ends: the position after the last byte handed
/// to the core (committed on the header-only path, copied on the staging one).
pub(crate) fn tx_taken(slot: &Slot, stack: &Stack) -> u64 {
    let id = match slot.state {
        SlotState::Conn { id } | SlotState::Closing { id } => id,
        _ => return slot.tx_head,
    };
    match stack.tx_positions(id) {
        Ok(Some(p)) => p.committed,
        _ => slot.tx_head,
    }
}

/// Moves what the application queued in `s`'s TX ring into the core (header-only: commits
/// it, and publishes as tx_head what the peer acknowledged; staging: copies it); sends the
/// FIN or finishes a close once everything is in the core.
pub(crate) fn tx_move(app: &mut AttachedApp, s: u32, stack: &mut Stack, sh: &mut Shared) {
    let (id, closing) = match app.slots.get(s).map(|slot| slot.state) {
        Some(SlotState::Conn { id }) => (id, false),
        Some(SlotState::Closing { id }) => (id, true),
        _ => return,
    };
    let positions = header_only_positions(app, s, id, stack, sh);
    let Some(h) = app.slot(s) else {
        return;
    };
    let end = match h.slot.tx_end {
        Some(end) => end,
        None => match read_tx_tail(h.slot, &h.block, h.ring_size) {
            Some(tail) => tail,
            None => {
                teardown::bad_position(app, s, stack, sh);
                return;
            }
        },
    };
    let slot = h.slot;
    let mut failed = false;
    let taken = if let Some(p) = positions {
        if end < p.committed {
            // The application took back bytes it had committed.
            teardown::bad_position(app, s, stack, sh);
            return;
        }
        if p.released != slot.tx_head {
            // Acknowledged: the application may reuse that part of the ring.
            slot.publish_tx_head(&h.block, p.released);
            sh.busy = true;
            *h.dirty = true;
        }
        let mut committed = p.committed;
        if end > committed {
            let avail = (end - committed) as usize;
            let r = if p.external {
                stack.send_external(id, avail)
            } else {
                // The core took the bytes in (a splice): it copies the rest.
                h.tx.with_slice(committed, avail, |bytes| stack.send(id, bytes))
            };
            match r {
                Ok(n) if n > 0 => {
                    committed += n as u64;
                    sh.counters.tx_bytes += n as u64;
                    sh.busy = true;
                }
                Ok(_) | Err(Error::WouldBlock) => {}
                Err(_) => failed = true,
            }
        }
        committed
    } else {
        if end > slot.tx_head {
            let avail = (end - slot.tx_head) as usize;
            match h
                .tx
                .with_slice(slot.tx_head, avail, |bytes| stack.send(id, bytes))
            {
                Ok(n) if n > 0 => {
                    slot.publish_tx_head(&h.block, slot.tx_head + n as u64);
                    sh.counters.tx_bytes += n as u64;
                    sh.busy = true;
                    *h.dirty = true;
                }
                Ok(_) | Err(Error::WouldBlock) => {}
                // Not open for sending (reset, or FIN already sent): the bytes can never go;
                // the block shows the error when the core reports it.
                Err(_) => failed = true,
            }
        }
        slot.tx_head
    };
    if taken < end && !failed && !slot.tx_listed {
        slot.tx_listed = true;
        sh.tx_pending.push(h.owner);
    }
    if taken < end && !failed {
        return;
    }
    // Header-only: the ring is the send buffer until the peer acknowledged it, so a closing
    // slot stays (FIN sent) until then; its application may even be gone (an orphan). A
    // connection whose close goes to the teardown stage closes now: the core takes the
    // unacknowledged bytes in (one copy) and the stage finishes from its own.
    let unacked = !failed
        && positions.is_some_and(|p| p.external)
        && slot.tx_head < taken
        && !stack.teardown_offload(id);
    if closing && !unacked {
        teardown::finish_close(app, s, stack, sh);
    } else if slot.tx_end.is_some() && !slot.fin_sent {
        // RFC 9293 3.10.4: the FIN follows every byte queued before the shutdown.
        match stack.shutdown(id) {
            Err(Error::NotConnected) if slot.flags & CONNECTING != 0 => {}
            _ => slot.fin_sent = true,
        }
    }
}

/// Moves received bytes from the core into `s`'s RX ring as far as it has room; flags
/// RX_STALLED when more waits, RX_FIN once the peer's FIN is next.
pub(crate) fn rx_move(app: &mut AttachedApp, s: u32, stack: &mut Stack, sh: &mut Shared) {
    let Some(h) = app.slot(s) else {
        return;
    };
    let SlotState::Conn { id } = h.slot.state else {
        return;
    };
    let Some(mut rx_head) = read_rx_head(h.slot, &h.block) else {
        teardown::bad_position(app, s, stack, sh);
        return;
    };
    let (slot, block) = (h.slot, &h.block);
    slot.rx_head_seen = rx_head;
    if slot.splice_hold {
        // A refused Splice waits for the application to forward what the ring holds;
        // the core keeps the rest (Consumed or the splice ends the hold).
        return;
    }
    loop {
        let room = (h.ring_size - (slot.rx_tail - rx_head)) as usize;
        let (placed, more) = {
            let Ok((a, b)) = stack.peek(id) else {
                return;
            };
            let avail = a.len() + b.len();
            let n = avail.min(room);
            let k = n.min(a.len());
            // The ring is mapped twice, so a run that wraps is still one copy each.
            h.rx.write(slot.rx_tail, &a[..k]);
            h.rx.write(slot.rx_tail + k as u64, &b[..n - k]);
            (n, avail > n)
        };
        if placed > 0 {
            let _ = stack.consume(id, placed);
            slot.publish_rx_tail(block, slot.rx_tail + placed as u64);
            sh.counters.rx_bytes += placed as u64;
            sh.busy = true;
            *h.dirty = true;
        }
        if !more {
            break;
        }
        // The ring is full and the core holds more (docs/service.md RX_STALLED): the
        // application sends Consumed after reading; the pending list retries meanwhile.
        if slot.flags & RX_STALLED == 0 {
            slot.set_flags(block, RX_STALLED, 0);
            sh.counters.rx_stalls += 1;
            *h.dirty = true;
        }
        if !slot.rx_listed {
            slot.rx_listed = true;
            sh.rx_pending.push(h.owner);
        }
        // The application may have read and checked the flag just before it was set:
        // look at its head again after a full fence (it fences between the two as well).
        fence(Ordering::SeqCst);
        match read_rx_head(slot, block) {
            Some(h) if h == rx_head => return,
            Some(h) => {
                rx_head = h;
                slot.rx_head_seen = h;
            }
            None => {
                teardown::bad_position(app, s, stack, sh);
                return;
            }
        }
    }
    if slot.flags & RX_STALLED != 0 {
        slot.set_flags(block, 0, RX_STALLED);
        *h.dirty = true;
    }
    // Everything the core had is in the ring: end of stream shows now, after the bytes.
    if slot.flags & RX_FIN == 0 && stack.recv(id, &mut []) == Ok(0) {
        slot.set_flags(block, RX_FIN, 0);
        *h.dirty = true;
    }
    if publish_closed(slot, block, id, stack) {
        *h.dirty = true;
    }
}

/// Publishes CLOSED once the core closed the connection and every byte it received is in
/// the RX ring (never while it still holds bytes the ring had no room for: an application
/// must be able to take CLOSED as "nothing more will come"). Returns whether it did.
pub(crate) fn publish_closed(
    slot: &mut Slot,
    block: &SocketBlock<'_>,
    id: sluice_tcp::ConnId,
    stack: &Stack,
) -> bool {
    if !slot.core_closed || slot.flags & CLOSED != 0 {
        return false;
    }
    let held = stack
        .peek(id)
        .is_ok_and(|(a, b)| !a.is_empty() || !b.is_empty());
    if held {
        return false;
    }
    slot.set_flags(block, CLOSED, CONNECTING | RX_STALLED);
    true
}

/// Accepts waiting connections of listener `s` into slots of the same application and
/// announces each with an accept record in the listener's ring, while the ring has room
/// and the application a free slot and room in its connections quota (otherwise
/// RX_STALLED; the rest wait in the core's accept queue until it closes some).
pub(crate) fn accept_into(app: &mut AttachedApp, s: u32, stack: &mut Stack, sh: &mut Shared) {
    let record_bytes = ACCEPT_RECORD_BYTES as u64;
    let (listener, nodelay, offload, congestion, mut rx_head) = {
        let Some(h) = app.slot(s) else {
            return;
        };
        let SlotState::Listening { listener } = h.slot.state else {
            return;
        };
        // A listener's reader moves in whole records.
        let head = read_rx_head(h.slot, &h.block).filter(|h| h % record_bytes == 0);
        let Some(head) = head else {
            teardown::bad_position(app, s, stack, sh);
            return;
        };
        let slot = h.slot;
        slot.rx_head_seen = head;
        // Records before the head are the application's now.
        while slot.unclaimed.front().is_some_and(|u| u.pos < head) {
            slot.unclaimed.pop_front();
        }
        (
            listener,
            slot.nodelay,
            slot.teardown_offload,
            slot.congestion,
            head,
        )
    };
    loop {
        // Quota check and charge, one part at a time (shared.rs).
        let setup = sh.setup.clone();
        let _held = crate::shared::hold(&setup);
        // At its (or its uid's) connections quota, the application is as one without a
        // free slot: it takes no more until it closes some.
        let over_quota = sh
            .books
            .admits(&sh.quotas, app.creds.uid, &app.usage, Resource::Connection)
            .is_err();
        let free_slots = if over_quota {
            0
        } else {
            app.slots.free_count()
        };
        // Looked up again each round: the accepted connection's slot was taken meanwhile.
        let Some(h) = app.slot(s) else {
            return;
        };
        let slot = h.slot;
        if !slot.accept_ready {
            if slot.flags & RX_STALLED != 0 {
                slot.set_flags(&h.block, 0, RX_STALLED);
                *h.dirty = true;
            }
            return;
        }
        let room = h.ring_size - (slot.rx_tail - rx_head);
        if room < record_bytes || free_slots == 0 {
            if slot.flags & RX_STALLED == 0 {
                slot.set_flags(&h.block, RX_STALLED, 0);
                sh.counters.accept_stalls += 1;
                if over_quota {
                    sh.counters.quota_accept_stalls += 1;
                }
                *h.dirty = true;
            }
            if !slot.rx_listed {
                slot.rx_listed = true;
                sh.rx_pending.push(h.owner);
            }
            if free_slots == 0 {
                return;
            }
            fence(Ordering::SeqCst);
            match read_rx_head(slot, &h.block).filter(|h| h % record_bytes == 0) {
                Some(h) if h == rx_head => return,
                Some(h) => {
                    rx_head = h;
                    slot.rx_head_seen = h;
                    continue;
                }
                None => {
                    teardown::bad_position(app, s, stack, sh);
                    return;
                }
            }
        }
        let id = match stack.accept(listener) {
            Ok(id) => id,
            Err(_) => {
                slot.accept_ready = false;
                continue;
            }
        };
        sh.classes.note(id, stack, &mut sh.counters);
        let pos = slot.rx_tail;
        let Some(c) = app.alloc_slot(SlotState::Conn { id }, ALLOCATED | CONNECTED) else {
            // A free slot was counted above; were it gone, the peer is reset, not leaked.
            let _ = stack.abort(id);
            return;
        };
        c.slot.settle(&mut sh.books, c.uid, c.usage);
        c.block.reset(ALLOCATED | CONNECTED);
        let (local, peer) = stack.endpoints(id).unwrap_or((
            SocketAddrV4::new(sh.ip, listener.port()),
            SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
        ));
        c.block.set_addresses(local, peer);
        if nodelay {
            // Accepted connections inherit the listener's TCP_NODELAY.
            let _ = stack.set_nagle(id, false);
            c.slot.nodelay = true;
        }
        if offload {
            // And its teardown offload.
            let _ = stack.set_teardown_offload(id, true);
            c.slot.teardown_offload = true;
        }
        // Accepted connections inherit the listener's TCP_CONGESTION, as on Linux.
        apply_congestion(stack, id, congestion, &c.block);
        c.slot.congestion = congestion;
        sh.conns.insert(id, c.owner);
        let c = c.s;
        let record = AcceptRecord {
            slot: c,
            peer,
            local_port: local.port(),
        };
        let Some(h) = app.slot(s) else {
            return;
        };
        h.rx.write(pos, &record.encode());
        h.slot.unclaimed.push_back(Unclaimed { pos, slot: c, id });
        h.slot.publish_rx_tail(&h.block, pos + record_bytes);
        sh.counters.accepts += 1;
        sh.busy = true;
        *h.dirty = true;
        // Bytes (or a FIN) that arrived before the accept raised no event for us.
        rx_move(app, c, stack, sh);
    }
}
