//! One attached application: its control socket, region, doorbell, contexts and slots.

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use sluice_shm::{Consumer, Dir, EventFd, Producer, QueueKind, Region, Ring, SocketBlock};

use crate::access::Credentials;
use crate::owners::Owner;
use crate::queues::VerbsQueues;
use crate::quota::AppUsage;
use crate::slots::{Slot, SlotState, Slots};

/// One application thread's context: its two queues and the eventfd the engine signals.
pub(crate) struct Context {
    /// The context's index in the region.
    pub index: u32,
    /// Commands from the application.
    pub commands: Consumer,
    /// Completions to the application.
    pub completions: Producer,
    /// Signalled when the thread sleeps and something changed for its application.
    pub eventfd: EventFd,
    /// The application corrupted the completion queue's head: the context is no longer
    /// served (it harms only that application).
    pub dead: bool,
    /// Since when its first command has been waiting for another part (commands.rs).
    pub deferred_since: Option<sluice_tcp::Instant>,
}

/// One allocated slot of an application, looked up once: its engine-side state, its socket
/// block and its rings, reached from here without another lookup. Only
/// [`AttachedApp::slot`] makes one, so holding one proves the slot is allocated and in range
/// of the region: a slot number from an application is checked there, once.
pub(crate) struct SlotHandle<'a> {
    /// The slot's index.
    pub s: u32,
    /// The slot as the service's port and connection maps know it.
    pub owner: Owner,
    /// Its engine-side state.
    pub slot: &'a mut Slot,
    /// Its socket block.
    pub block: SocketBlock<'a>,
    /// Its RX ring (accept records, for a listener).
    pub rx: Ring<'a>,
    /// Its TX ring.
    pub tx: Ring<'a>,
    /// Bytes per payload ring.
    pub ring_size: u64,
    /// The application's mark that something changed for it (its sleepers get signalled).
    pub dirty: &'a mut bool,
    /// What the application holds, against its quotas.
    pub usage: &'a mut AppUsage,
    /// The application's uid (whose books the slot is counted in too, and whose memory
    /// group its connections are charged to: src/memory_groups.rs).
    pub uid: u32,
}

/// Every attached application, indexed as [`crate::owners::Owner::app`], and the books kept
/// on them.
pub(crate) struct Apps {
    /// The table (a None entry is free for the next attach).
    pub table: Vec<Option<AttachedApp>>,
    /// The id the next attached application is given (never reused).
    pub next_id: u32,
    /// Departed applications whose closed connections are still draining.
    pub orphans: usize,
    /// Part 0 of the service in flow groups: how many other parts still hold application
    /// index i (told Gone, not yet Freed); the index is reused only at 0.
    pub held: Vec<u32>,
}

/// An application attached to the engine.
pub(crate) struct AttachedApp {
    /// Its index in the service's table (what [`crate::owners::Owner::app`] holds).
    pub index: u32,
    /// The id given in Welcome (for logs; never reused).
    pub id: u32,
    /// Its name and pid from Hello (for logs).
    pub name: String,
    /// Its process id (from SO_PEERCRED).
    pub pid: u32,
    /// Its credentials, from the kernel at attach (what it may bind, whom it shares with).
    pub creds: Credentials,
    /// The control socket: hang-up means the application is gone.
    pub sock: OwnedFd,
    /// Its shared region (only this application maps it).
    pub region: Arc<Region>,
    /// Its verbs queues, shared by its RDMA objects and MTP endpoints.
    pub verbs_queues: VerbsQueues,
    /// The engine's doorbell: the application signals it when the engine sleeps.
    pub doorbell: EventFd,
    /// Its contexts, index = context index.
    pub contexts: Vec<Context>,
    /// Its socket slots.
    pub slots: Slots,
    /// Bytes per payload ring.
    pub ring_size: u64,
    /// Something changed for it this iteration (sleeping contexts get signalled).
    pub dirty: bool,
    /// Splice reports its contexts' completion queues had no room for yet (bounded by
    /// [`crate::splice::MAX_HELD_REPORTS`]).
    pub held_reports: std::collections::VecDeque<(u32, sluice_shm::SpliceReport)>,
    /// When its control socket hung up, if it did: it is gone, and only the connections it
    /// had closed (gracefully) before are still being drained from its region.
    pub departed: Option<sluice_tcp::Instant>,
    /// Sockets refused because their rings could not be mapped (`vm.max_map_count`).
    pub ring_maps_refused: u64,
    /// What it holds (sockets, listeners, connections), against its quotas; its uid's
    /// books hold the same counts summed over the uid's applications.
    pub usage: AppUsage,
    /// The context whose commands are taken first next iteration (the commands quota is
    /// shared round-robin, so that every context is served).
    pub next_context: usize,
    /// This part's bit in the region's `engine_sleeping` word (the service in flow
    /// groups); None for the single service, which stores 1 or 0.
    pub sleep_bit: Option<u32>,
    /// This part could not watch its doorbell (`doorbells_unwatched`): it must not sleep.
    pub unwatched: bool,
}

impl AttachedApp {
    /// A freshly attached application with no contexts and every slot free.
    #[cfg(test)]
    pub fn new(
        index: u32,
        id: u32,
        hello: (String, u32),
        sock: OwnedFd,
        region: Region,
        doorbell: EventFd,
    ) -> AttachedApp {
        let layout = region.layout();
        let region = Arc::new(region);
        AttachedApp {
            index,
            id,
            name: hello.0,
            pid: hello.1,
            creds: Credentials::default(),
            sock,
            verbs_queues: VerbsQueues::new(region.clone()),
            region,
            doorbell,
            contexts: Vec::new(),
            slots: Slots::new(layout.max_sockets),
            ring_size: layout.ring_size as u64,
            dirty: false,
            ring_maps_refused: 0,
            usage: AppUsage::default(),
            next_context: 0,
            held_reports: std::collections::VecDeque::new(),
            departed: None,
            sleep_bit: None,
            unwatched: false,
        }
    }

    /// Part `part`'s view of an application part 0 attached (the service in flow groups):
    /// the same region, credentials and usage books, its own partition of the slots and,
    /// as contexts are added, their queue pairs for this part.
    pub fn view(v: crate::links::AppView, part: u32, parts: u32) -> AttachedApp {
        let layout = v.region.layout();
        AttachedApp {
            index: v.index,
            id: v.id,
            name: v.name,
            pid: v.pid,
            creds: v.creds,
            sock: v.sock,
            verbs_queues: VerbsQueues::new(v.region.clone()),
            region: v.region,
            doorbell: v.doorbell,
            contexts: Vec::new(),
            slots: Slots::partition(layout.max_sockets, part, parts),
            ring_size: layout.ring_size as u64,
            dirty: false,
            ring_maps_refused: 0,
            usage: v.usage,
            next_context: 0,
            held_reports: std::collections::VecDeque::new(),
            departed: None,
            // Bit k % 32: ServiceConfig::validate keeps the parts within the word's bits.
            sleep_bit: (parts > 1).then(|| 1 << (part % 32)),
            unwatched: false,
        }
    }

    /// Adds context `index`'s queue pair of part `part` (its eventfd a duplicate of the
    /// one part 0 handed the application); false if the region has no such queues.
    pub fn add_context_on(&mut self, index: u32, part: u32, eventfd: EventFd) -> bool {
        let (Some(commands), Some(completions)) = (
            Consumer::on_core(self.region.clone(), index, part, QueueKind::Command),
            Producer::on_core(self.region.clone(), index, part, QueueKind::Completion),
        ) else {
            return false;
        };
        self.contexts.push(Context {
            index,
            commands,
            completions,
            eventfd,
            dead: false,
            deferred_since: None,
        });
        true
    }

    /// Adds a context and returns its index; None when all are in use.
    pub fn new_context(&mut self) -> Result<Option<u32>, sluice_shm::ShmError> {
        let index = self.contexts.len() as u32;
        let (Some(commands), Some(completions)) = (
            Consumer::new(self.region.clone(), index, QueueKind::Command),
            Producer::new(self.region.clone(), index, QueueKind::Completion),
        ) else {
            return Ok(None);
        };
        self.contexts.push(Context {
            index,
            commands,
            completions,
            eventfd: EventFd::new()?,
            dead: false,
            deferred_since: None,
        });
        Ok(Some(index))
    }

    /// Slot `s` if it is allocated; None for a number out of range or a free slot.
    pub fn slot(&mut self, s: u32) -> Option<SlotHandle<'_>> {
        let slot = self.slots.get_mut(s)?;
        Some(SlotHandle {
            s,
            owner: Owner {
                app: self.index,
                slot: s,
            },
            slot,
            block: SocketBlock::new(&self.region, s)?,
            rx: self.region.ring(s, Dir::Rx)?,
            tx: self.region.ring(s, Dir::Tx)?,
            ring_size: self.ring_size,
            dirty: &mut self.dirty,
            usage: &mut self.usage,
            uid: self.creds.uid,
        })
    }

    /// Takes a free slot into use in `state` with `flags`; None when all are in use. (There
    /// are as many slots as the region has sockets, so a slot handed out is in range.)
    /// A slot whose rings cannot be mapped (the engine's mapping budget or
    /// `vm.max_map_count`) is given back and counted in `ring_maps_refused`.
    pub fn alloc_slot(&mut self, state: SlotState, flags: u32) -> Option<SlotHandle<'_>> {
        let s = self.slots.alloc(state, flags)?;
        if self.region.map_rings(s).is_err() {
            self.ring_maps_refused += 1;
            let _ = self.slots.release(s);
            return None;
        }
        self.slot(s)
    }

    /// Announces (or withdraws) the engine's sleep to this application. A part of the
    /// service in flow groups sets or clears its own bit only, so one part waking does not
    /// withdraw another's announcement (the library rings while the word is non-zero).
    pub fn set_engine_sleeping(&self, sleeping: bool) {
        let word = self.region.engine_sleeping();
        match (self.sleep_bit, sleeping) {
            (None, _) => word.store(sleeping as u32, Ordering::SeqCst),
            (Some(bit), true) => {
                word.fetch_or(bit, Ordering::SeqCst);
            }
            (Some(bit), false) => {
                word.fetch_and(!bit, Ordering::SeqCst);
            }
        }
    }

    /// Whether any live context has a command waiting that the engine can run now: one
    /// whose completion queue is full (the application does not take its completions) waits
    /// for the application, and must not keep the engine from sleeping.
    pub fn has_commands(&self) -> bool {
        self.contexts.iter().any(|c| {
            !c.dead && c.commands.has_entry() && c.completions.free().is_ok_and(|room| room > 0)
        })
    }

    /// Signals every context that sleeps; returns how many were signalled.
    pub fn wake_sleepers(&self) -> u64 {
        let mut n = 0;
        for c in &self.contexts {
            let sleeping = self
                .region
                .context_sleeping(c.index)
                .is_some_and(|f| f.load(Ordering::Acquire) != 0);
            if sleeping {
                c.eventfd.signal();
                n += 1;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;

    use sluice_shm::Layout;

    use super::*;

    #[test]
    fn a_slot_handle_is_had_only_for_an_allocated_slot_in_range() {
        let region = Region::create("sluice-test-slot-handle", Layout::default()).unwrap();
        let max = region.layout().max_sockets;
        let (sock, _peer) = UnixStream::pair().unwrap();
        let doorbell = EventFd::new().unwrap();
        let mut app = AttachedApp::new(3, 1, ("t".into(), 1), sock.into(), region, doorbell);
        assert!(app.slot(0).is_none(), "a free slot");
        assert!(app.slot(max).is_none(), "out of range");
        assert!(app.slot(u32::MAX).is_none(), "far out of range");
        let h = app.alloc_slot(SlotState::Opened, 1).unwrap();
        let s = h.s;
        assert_eq!(h.owner, Owner { app: 3, slot: s });
        *h.dirty = true;
        assert!(app.dirty);
        assert_eq!(app.slot(s).map(|h| h.slot.state), Some(SlotState::Opened));
        let _ = app.slots.release(s);
        assert!(app.slot(s).is_none(), "released");
        // Every slot can be handed out with its handle, and then none.
        for _ in 0..max {
            assert!(app.alloc_slot(SlotState::Opened, 1).is_some());
        }
        assert!(app.alloc_slot(SlotState::Opened, 1).is_none());
    }
}
