//! Socket slots of one application, from the engine's side: each slot's state, the ConnId or
//! ListenerId it maps to, and the engine's private copies of what it publishes in the block.
//!
//! The engine never reads its own line of a socket block back (the application can write
//! there too); it keeps the truth here and only stores into the block.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use sluice_shm::SocketBlock;
use sluice_tcp::{Algorithm, ConnId, ListenerId};

use crate::quota::{Books, Charge, Tally};

/// Where a slot is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotState {
    /// Not allocated.
    Free,
    /// Allocated by Open, nothing else yet.
    Opened,
    /// Bound to a local port (0: pick one at Listen).
    Bound {
        /// The port, or 0.
        port: u16,
    },
    /// Listening; its RX ring carries accept records.
    Listening {
        /// The core's listener.
        listener: ListenerId,
    },
    /// A connection, connecting or connected (the flags say which), possibly failed.
    Conn {
        /// The core's connection.
        id: ConnId,
    },
    /// The application closed the slot; the engine moves the rest of its TX ring into the
    /// core and then closes the connection gracefully (docs/service.md, Close).
    Closing {
        /// The core's connection.
        id: ConnId,
    },
    /// The core connection is gone (reset for bad input); the slot waits for Close.
    Dead,
    /// The connection was given to a splice (the core owns it now); the slot waits for
    /// Close, which only frees it.
    Spliced,
}

/// An accept record placed in a listener's ring that the application has not read yet.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unclaimed {
    /// The record's position in the listener's RX ring.
    pub pos: u64,
    /// The connection's slot.
    pub slot: u32,
    /// The connection.
    pub id: ConnId,
}

/// One slot's engine-side state.
#[derive(Debug)]
pub(crate) struct Slot {
    /// Where it is in its life.
    pub state: SlotState,
    /// End of what the engine placed in the RX ring (published as rx_tail).
    pub rx_tail: u64,
    /// Published as tx_head: the application may reuse the TX ring before it (header-only:
    /// acknowledged bytes; staging: bytes copied into the core).
    pub tx_head: u64,
    /// The flags published.
    pub flags: u32,
    /// The application's rx_head as last validated: it may only move forward.
    pub rx_head_seen: u64,
    /// Where the TX stream ends (the application's tx_tail at Shutdown(Write) or Close).
    pub tx_end: Option<u64>,
    /// The FIN has been handed to the core.
    pub fin_sent: bool,
    /// The core reported the connection closed; CLOSED is published only once every byte
    /// it received is in the RX ring (docs/service.md: CLOSED never precedes the data).
    pub core_closed: bool,
    /// TCP_NODELAY (accepted connections inherit their listener's).
    pub nodelay: bool,
    /// Teardown offload asked for (accepted connections inherit their listener's).
    pub teardown_offload: bool,
    /// TCP_CONGESTION as the application chose it (None: the engine's default); applied
    /// at connect, and inherited by a listener's accepted connections.
    pub congestion: Option<Algorithm>,
    /// A Splice was refused for bytes left in the rings: nothing more is placed in the RX
    /// ring (RX_STALLED shows) until the next Splice or `Consumed`.
    pub splice_hold: bool,
    /// On the service's RX pending list (data or connections the ring could not take).
    pub rx_listed: bool,
    /// On the service's TX pending list (bytes the core could not take yet).
    pub tx_listed: bool,
    /// Listener: the core has connections waiting to be accepted.
    pub accept_ready: bool,
    /// Listener: records in its ring not yet read by the application (bounded by the ring).
    pub unclaimed: VecDeque<Unclaimed>,
    /// Listener: the other flow-group parts whose replica answered (its Listen is answered
    /// once all have, so that no SYN meets a part not listening yet).
    pub replicas_answered: u32,
    /// What the quota books count it as (kept across lives: released before the slot is
    /// freed, so that it is released exactly once).
    pub charged: Charge,
}

impl Slot {
    fn free() -> Slot {
        Slot {
            state: SlotState::Free,
            rx_tail: 0,
            tx_head: 0,
            flags: 0,
            rx_head_seen: 0,
            tx_end: None,
            fin_sent: false,
            core_closed: false,
            nodelay: false,
            teardown_offload: false,
            congestion: None,
            splice_hold: false,
            rx_listed: false,
            tx_listed: false,
            accept_ready: false,
            unclaimed: VecDeque::new(),
            replicas_answered: 0,
            charged: Charge::NONE,
        }
    }

    /// What the quota books count it as in its present state. A connection the core has
    /// closed (reset by the peer, or done) is no longer one: only a socket until Close.
    pub fn charge(&self) -> Charge {
        let socket = |connection| Charge {
            socket: true,
            listener: false,
            connection,
        };
        match self.state {
            SlotState::Free => Charge::NONE,
            SlotState::Opened | SlotState::Bound { .. } | SlotState::Dead | SlotState::Spliced => {
                socket(false)
            }
            SlotState::Listening { .. } => Charge {
                socket: true,
                listener: true,
                connection: false,
            },
            SlotState::Conn { .. } => socket(!self.core_closed),
            SlotState::Closing { .. } => socket(true),
        }
    }

    /// Counts it in the books of its application (`usage`) and `uid` as its state makes it.
    pub fn settle(&mut self, books: &mut Books, uid: u32, usage: &mut impl Tally) {
        let now = self.charge();
        books.recharge(uid, usage, &mut self.charged, now);
    }

    /// Counts it as nothing: it is about to be freed.
    pub fn uncharge(&mut self, books: &mut Books, uid: u32, usage: &mut impl Tally) {
        books.recharge(uid, usage, &mut self.charged, Charge::NONE);
    }

    /// Resets the slot for a new life (keeps the unclaimed queue's allocation).
    ///
    /// `rx_listed`/`tx_listed` are kept: they say whether the service's pending lists hold an
    /// entry for this slot index, which outlives the slot's life. Clearing them here would
    /// let a reused slot be listed a second time, and such duplicates accumulate with every
    /// reuse while the slot stalls.
    fn reopen(&mut self, state: SlotState, flags: u32) {
        self.state = state;
        self.rx_tail = 0;
        self.tx_head = 0;
        self.flags = flags;
        self.rx_head_seen = 0;
        self.tx_end = None;
        self.fin_sent = false;
        self.core_closed = false;
        self.nodelay = false;
        self.teardown_offload = false;
        self.congestion = None;
        self.splice_hold = false;
        self.accept_ready = false;
        self.unclaimed.clear();
        self.replicas_answered = 0;
    }

    /// Sets and clears flags and publishes them (bumping event_seq).
    pub fn set_flags(&mut self, block: &SocketBlock<'_>, set: u32, clear: u32) {
        let flags = (self.flags | set) & !clear;
        if flags != self.flags {
            self.flags = flags;
            block.flags().store(flags, Ordering::Release);
            block.event_seq().fetch_add(1, Ordering::Release);
        }
    }

    /// Publishes a failure: ERROR with a Linux errno, no longer connecting, and `clear`
    /// cleared in the same store.
    pub fn fail(&mut self, block: &SocketBlock<'_>, errno: i32, clear: u32) {
        block.error().store(errno as u32, Ordering::Relaxed);
        // The flag store releases the error with it.
        self.set_flags(
            block,
            sluice_shm::flags::ERROR,
            sluice_shm::flags::CONNECTING | clear,
        );
    }

    /// Publishes a new RX tail (after the bytes are in the ring).
    pub fn publish_rx_tail(&mut self, block: &SocketBlock<'_>, rx_tail: u64) {
        self.rx_tail = rx_tail;
        block.rx_tail().store(rx_tail, Ordering::Release);
        block.event_seq().fetch_add(1, Ordering::Release);
    }

    /// Publishes a new TX head (the bytes before it are in the core).
    pub fn publish_tx_head(&mut self, block: &SocketBlock<'_>, tx_head: u64) {
        self.tx_head = tx_head;
        block.tx_head().store(tx_head, Ordering::Release);
        block.event_seq().fetch_add(1, Ordering::Release);
    }
}

/// Freed slots whose ring pages stay resident for the next socket. Giving a slot's pages
/// back (hole punching) costs a TLB shootdown on every core that maps the region, and the
/// next socket in the slot faults them in again: for a connection that lives one request
/// (acceltcp.txt 5.2's short connections) that was the engine's largest per-connection
/// cost. The pages hold only this application's own old bytes, never another's.
pub(crate) const WARM_SLOTS: usize = 32;

/// All slots of one application and the free lists.
pub(crate) struct Slots {
    slots: Vec<Slot>,
    /// Free slot indices whose pages were given back; popped from the end, so the lowest
    /// index goes first.
    free: Vec<u32>,
    /// Free slots whose pages are still resident, oldest first; handed out before `free`,
    /// newest first. At most [`WARM_SLOTS`].
    warm: VecDeque<u32>,
    /// How many slots this part hands out (all of them with one part).
    own: usize,
}

impl Slots {
    /// `n` free slots.
    #[cfg(test)]
    pub fn new(n: u32) -> Slots {
        Slots::partition(n, 0, 1)
    }

    /// `n` slots of which this part (`part` of `parts`, flow groups) hands out only its
    /// own, those with `s % parts == part` (the region's `Layout::slot_core`): a slot's
    /// block and rings have one writer part.
    pub fn partition(n: u32, part: u32, parts: u32) -> Slots {
        let parts = parts.max(1);
        let free: Vec<u32> = (0..n).rev().filter(|s| s % parts == part).collect();
        Slots {
            slots: (0..n).map(|_| Slot::free()).collect(),
            own: free.len(),
            free,
            warm: VecDeque::with_capacity(WARM_SLOTS + 1),
        }
    }

    /// How many slots are free.
    pub fn free_count(&self) -> usize {
        self.free.len() + self.warm.len()
    }

    /// Whether every slot is free.
    pub fn all_free(&self) -> bool {
        self.free_count() == self.own
    }

    /// Free slots whose ring pages are still resident.
    #[cfg(test)]
    pub fn warm_count(&self) -> usize {
        self.warm.len()
    }

    /// Takes a free slot into use in `state` with `flags`; None when all are in use.
    pub fn alloc(&mut self, state: SlotState, flags: u32) -> Option<u32> {
        let s = self.warm.pop_back().or_else(|| self.free.pop())?;
        self.slots[s as usize].reopen(state, flags);
        Some(s)
    }

    /// Returns a slot to the free lists (a slot already free is left alone). Returns the
    /// slot whose ring pages the caller now gives back, if any: the oldest warm one once
    /// more than [`WARM_SLOTS`] are kept.
    #[must_use = "the returned slot's pages are to be given back"]
    pub fn release(&mut self, s: u32) -> Option<u32> {
        let slot = self.slots.get_mut(s as usize)?;
        if slot.state == SlotState::Free {
            return None;
        }
        debug_assert_eq!(slot.charged, Charge::NONE, "slot {s} freed while counted");
        slot.reopen(SlotState::Free, 0);
        self.warm.push_back(s);
        if self.warm.len() <= WARM_SLOTS {
            return None;
        }
        let cold = self.warm.pop_front()?;
        self.free.push(cold);
        Some(cold)
    }

    /// Every warm slot turns cold; returns them for their pages to be given back (an
    /// application gone, or memory wanted back).
    pub fn cool_all(&mut self) -> Vec<u32> {
        let cold: Vec<u32> = self.warm.drain(..).collect();
        self.free.extend(&cold);
        cold
    }

    /// Takes slot `s`'s entry off the RX pending list's books, whatever the slot's state;
    /// false if it had none (the entry is stale).
    pub fn unlist_rx(&mut self, s: u32) -> bool {
        self.slots
            .get_mut(s as usize)
            .is_some_and(|slot| std::mem::take(&mut slot.rx_listed))
    }

    /// As [`Slots::unlist_rx`] for the TX pending list.
    pub fn unlist_tx(&mut self, s: u32) -> bool {
        self.slots
            .get_mut(s as usize)
            .is_some_and(|slot| std::mem::take(&mut slot.tx_listed))
    }

    /// The slot `s` if it is in range and allocated.
    pub fn get_mut(&mut self, s: u32) -> Option<&mut Slot> {
        self.slots
            .get_mut(s as usize)
            .filter(|slot| slot.state != SlotState::Free)
    }

    /// The slot `s` if it is in range and allocated.
    pub fn get(&self, s: u32) -> Option<&Slot> {
        self.slots
            .get(s as usize)
            .filter(|slot| slot.state != SlotState::Free)
    }

    /// Every allocated slot's index and state (for teardown only: scans all slots).
    pub fn allocated(&self) -> impl Iterator<Item = (u32, SlotState)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state != SlotState::Free)
            .map(|(i, s)| (i as u32, s.state))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_handed_out_lowest_first_and_reused_after_release() {
        let mut slots = Slots::new(3);
        assert_eq!(slots.alloc(SlotState::Opened, 1), Some(0));
        assert_eq!(slots.alloc(SlotState::Opened, 1), Some(1));
        assert_eq!(slots.alloc(SlotState::Opened, 1), Some(2));
        assert_eq!(slots.alloc(SlotState::Opened, 1), None);
        assert_eq!(slots.release(1), None);
        assert_eq!(slots.release(1), None);
        assert_eq!(slots.free_count(), 1);
        assert!(slots.get(1).is_none());
        assert_eq!(slots.alloc(SlotState::Opened, 1), Some(1));
        assert!(slots.get(7).is_none());
        assert_eq!(slots.allocated().count(), 3);
    }

    #[test]
    fn pending_list_membership_outlives_a_slot_freed_and_reused() {
        let mut slots = Slots::new(2);
        let s = slots.alloc(SlotState::Opened, 1).unwrap();
        // The service listed it (its RX ring stalled), then the application closed it.
        slots.get_mut(s).unwrap().rx_listed = true;
        slots.get_mut(s).unwrap().tx_listed = true;
        let _ = slots.release(s);
        assert_eq!(slots.alloc(SlotState::Opened, 1), Some(s));
        let reused = slots.get(s).unwrap();
        assert!(
            reused.rx_listed && reused.tx_listed,
            "the old entries are still on the lists: the new life must not add more"
        );
        assert!(slots.unlist_rx(s) && slots.unlist_tx(s));
        assert!(!slots.unlist_rx(s) && !slots.unlist_tx(s));
        // An entry for a slot that is free when retried is dropped, and so is its mark.
        slots.get_mut(s).unwrap().rx_listed = true;
        let _ = slots.release(s);
        assert!(slots.unlist_rx(s));
        assert!(!slots.unlist_rx(9));
    }

    #[test]
    fn freed_slots_stay_warm_up_to_a_bound_and_are_reused_newest_first() {
        let n = WARM_SLOTS as u32 + 8;
        let mut slots = Slots::new(n);
        let all: Vec<u32> = (0..n)
            .map(|_| slots.alloc(SlotState::Opened, 1).unwrap())
            .collect();
        // The first WARM_SLOTS releases keep their pages; each later one gives back the
        // oldest warm slot's.
        let mut cooled = Vec::new();
        for &s in &all {
            cooled.extend(slots.release(s));
        }
        assert_eq!(cooled, (0..8).collect::<Vec<u32>>());
        assert_eq!(slots.warm_count(), WARM_SLOTS);
        assert_eq!(slots.free_count(), n as usize);
        assert!(slots.all_free());
        // The newest warm slot is reused first; warm ones before cold ones.
        assert_eq!(slots.alloc(SlotState::Opened, 1), Some(n - 1));
        assert_eq!(slots.warm_count(), WARM_SLOTS - 1);
        let cold = slots.cool_all();
        assert_eq!(cold.len(), WARM_SLOTS - 1);
        assert_eq!(slots.warm_count(), 0);
        assert_eq!(slots.free_count(), n as usize - 1);
        // Then cold slots are handed out.
        assert!(slots.alloc(SlotState::Opened, 1).is_some());
        assert_eq!(slots.warm_count(), 0);
    }
}
