//! The links between the service's flow-group parts (docs/service.md, "Flow groups"): one
//! bounded single-producer/single-consumer ring (`rtrb`, as the multi-core engine's own
//! links) for each ordered pair of parts, carrying [`PartMsg`]s. Part 0 holds the control
//! socket and tells the others about applications; a listener's part tells the others to
//! listen too; a part hands the connections it accepted for another part's listener over.
//! No lock: each ring has one writer and one reader.

use std::collections::VecDeque;
use std::net::SocketAddrV4;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use sluice_shm::{EventFd, Region};
use sluice_tcp::{Algorithm, ConnId};

use crate::access::Credentials;
use crate::counters::Counters;
use crate::owners::Owner;
use crate::quota::AppUsage;

/// Messages each ring holds. A message that must not be lost (an application, a context,
/// a listener) waits in the sender's outbox when its ring is full; one that may wait (a
/// connection handed over) is not sent until there is room, which holds the sender's
/// accepts back.
pub(crate) const LINK_SLOTS: usize = 256;

/// What part 0 tells another part about an application that attached.
pub(crate) struct AppView {
    /// Its index in every part's table.
    pub index: u32,
    /// Its attach id.
    pub id: u32,
    /// Its name and pid.
    pub name: String,
    /// Its process id.
    pub pid: u32,
    /// Its credentials.
    pub creds: Credentials,
    /// A duplicate of its control socket (only part 0 reads or writes it).
    pub sock: OwnedFd,
    /// Its region.
    pub region: Arc<Region>,
    /// A duplicate of its doorbell (only part 0 watches it).
    pub doorbell: EventFd,
    /// What it holds, counted once for every part.
    pub usage: AppUsage,
}

/// A listener's options its replicas take over, so that connections accepted by any part
/// inherit them as the listener's own do.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ListenOptions {
    /// The port.
    pub port: u16,
    /// The backlog asked for.
    pub backlog: usize,
    /// Whether it is in a SO_REUSEPORT group.
    pub reuseport: bool,
    /// TCP_CONGESTION.
    pub congestion: Option<Algorithm>,
    /// TCP_NODELAY.
    pub nodelay: bool,
    /// Teardown offload.
    pub offload: bool,
}

/// A message between two parts.
pub(crate) enum PartMsg {
    /// Part 0 to the others: an application attached.
    Attached(Box<AppView>),
    /// Part 0 to the others: application `app` has a new context (its queue pair for the
    /// receiving part is at the same index).
    Context {
        /// The application's index.
        app: u32,
        /// The context's index.
        index: u32,
        /// A duplicate of the context's eventfd (to wake its sleeping thread).
        eventfd: EventFd,
    },
    /// Part 0 to the others: the application went away; each part releases its slots.
    Gone {
        /// The application's index.
        app: u32,
    },
    /// A part to part 0: it no longer holds application `app` (its index may be reused).
    Freed {
        /// The application's index.
        app: u32,
    },
    /// A listener's part to the others: listen on the same port for it.
    Listen {
        /// The listening slot.
        owner: Owner,
        /// Its application's attach id.
        app_id: u32,
        /// Its application's uid (whose memory group the connections join).
        uid: u32,
        /// The listener's options.
        options: ListenOptions,
    },
    /// A part to a listener's part: its replica of that listener listens (or could not:
    /// counted there), so the Listen may be answered.
    Listening {
        /// The listening slot.
        owner: Owner,
        /// Its application's attach id.
        app_id: u32,
    },
    /// A listener's part to the others: stop listening for it.
    Unlisten {
        /// The listening slot.
        owner: Owner,
        /// Its application's attach id.
        app_id: u32,
    },
    /// A part to a listener's part: it accepted a connection for that listener into its
    /// own slot `slot`; the listener's part announces it in the listener's ring.
    Accepted {
        /// The listening slot.
        listener: Owner,
        /// Its application's attach id.
        app_id: u32,
        /// The new connection's slot (the sender's).
        slot: u32,
        /// The connection in the sender's core.
        id: ConnId,
        /// The connection's local port.
        local_port: u16,
        /// The peer.
        peer: SocketAddrV4,
    },
    /// A listener's part to the part holding an accepted connection: the listener closed
    /// before the application took it; reset it and free its slot.
    Refused {
        /// The application's index.
        app: u32,
        /// Its attach id.
        app_id: u32,
        /// The connection's slot.
        slot: u32,
        /// The connection.
        id: ConnId,
    },
}

/// A part's link doorbell: whoever pushes a message to a part that announced its sleep
/// signals its eventfd (the same handshake as the multi-core engine's doorbell.rs).
///
/// Why no wake-up is lost: the receiver stores `asleep = true`, fences (SeqCst), then
/// looks at every incoming link once more and sleeps only if all are empty; a sender
/// pushes (the ring's Release store), fences (SeqCst), then loads `asleep`. One fence
/// precedes the other: either the receiver's re-check sees the message, or the sender
/// sees the flag and signals. The eventfd stays readable until the receiver drains it,
/// which it does only before its next announcement, so a signal that lands before the
/// receiver is in poll(2) ends that poll at once.
struct PartBell {
    asleep: AtomicBool,
    bell: EventFd,
}

/// One part's ends of the links, and which part it is.
pub(crate) struct Links {
    /// This part's index (its flow group).
    pub index: u32,
    /// How many parts.
    pub count: u32,
    to: Vec<Option<rtrb::Producer<PartMsg>>>,
    from: Vec<Option<rtrb::Consumer<PartMsg>>>,
    /// Messages that must not be lost, waiting for room in their ring (in order; bounded
    /// by what exists to be told about: applications, contexts, listeners).
    outbox: Vec<VecDeque<PartMsg>>,
    /// Every part's counters as it last published them (summed for `sluice ctl`).
    board: Arc<Mutex<Vec<Counters>>>,
    /// Every part's link doorbell, index = part (none for a service of one part).
    bells: Arc<[PartBell]>,
}

impl Links {
    /// The links of a service that is one part (no other part to talk to).
    #[cfg(test)]
    pub fn single() -> Links {
        let links = Links::mesh(1).ok().and_then(|mut l| l.pop());
        links.unwrap_or_else(|| unreachable!())
    }

    /// The links of `n` parts, every pair joined both ways; index i is part i's. Fails
    /// only if a part's link doorbell (an eventfd) cannot be made.
    pub fn mesh(n: u32) -> Result<Vec<Links>, sluice_shm::ShmError> {
        let n = n.max(1) as usize;
        let board = Arc::new(Mutex::new(vec![Counters::default(); n]));
        // One part has no links and so no doorbell (the single-core service as before).
        let bells: Arc<[PartBell]> = if n > 1 {
            (0..n)
                .map(|_| {
                    Ok(PartBell {
                        asleep: AtomicBool::new(false),
                        bell: EventFd::new()?,
                    })
                })
                .collect::<Result<Vec<_>, sluice_shm::ShmError>>()?
                .into()
        } else {
            Arc::new([])
        };
        let mut parts: Vec<Links> = (0..n)
            .map(|i| Links {
                index: i as u32,
                count: n as u32,
                to: (0..n).map(|_| None).collect(),
                from: (0..n).map(|_| None).collect(),
                outbox: (0..n).map(|_| VecDeque::new()).collect(),
                board: board.clone(),
                bells: bells.clone(),
            })
            .collect();
        for a in 0..n {
            for b in 0..n {
                if a != b {
                    let (tx, rx) = rtrb::RingBuffer::new(LINK_SLOTS);
                    parts[a].to[b] = Some(tx);
                    parts[b].from[a] = Some(rx);
                }
            }
        }
        Ok(parts)
    }

    /// Whether slot `s` is this part's (slot `s` is served by part `s % count`, as the
    /// region's `Layout::slot_core` says).
    pub fn mine(&self, s: u32) -> bool {
        self.part_of(s) == self.index
    }

    /// The part serving slot `s`.
    pub fn part_of(&self, s: u32) -> u32 {
        s % self.count
    }

    /// The other parts.
    pub fn others(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.count).filter(move |&p| p != self.index)
    }

    /// Sends `msg` to part `to`, or keeps it in order in the outbox until there is room.
    pub fn send(&mut self, to: u32, msg: PartMsg) {
        let to = to as usize;
        let Some(Some(tx)) = self.to.get_mut(to) else {
            return;
        };
        if !self.outbox[to].is_empty() {
            self.outbox[to].push_back(msg);
            return;
        }
        match tx.push(msg) {
            Ok(()) => self.ring(to),
            Err(rtrb::PushError::Full(msg)) => self.outbox[to].push_back(msg),
        }
    }

    /// After a push to part `to`: signals its link doorbell if it announced its sleep
    /// (a fence and a load while it is awake; see [`PartBell`]).
    fn ring(&self, to: usize) {
        let Some(b) = self.bells.get(to) else {
            return;
        };
        fence(Ordering::SeqCst);
        // The swap lets one sender of several signal; the eventfd stays readable.
        if b.asleep.load(Ordering::Relaxed) && b.asleep.swap(false, Ordering::Relaxed) {
            b.bell.signal();
        }
    }

    /// This part's link doorbell (in the set it sleeps on); None for a single part.
    pub fn bell(&self) -> Option<BorrowedFd<'_>> {
        self.bells.get(self.index as usize).map(|b| b.bell.as_fd())
    }

    /// This part is about to sleep: clears its link doorbell, then raises its flag (the
    /// caller fences and re-checks [`Links::pending`] after).
    pub fn announce_sleep(&self) {
        if let Some(b) = self.bells.get(self.index as usize) {
            // Before the flag: a signal after it is for a message the re-check may miss.
            b.bell.drain();
            b.asleep.store(true, Ordering::Relaxed);
        }
    }

    /// This part is awake: senders stop signalling it.
    pub fn announce_awake(&self) {
        if let Some(b) = self.bells.get(self.index as usize) {
            b.asleep.store(false, Ordering::Relaxed);
        }
    }

    /// Whether a message waits on an incoming link, or in an outbox for room (which only
    /// this part, awake, moves on).
    pub fn pending(&self) -> bool {
        let incoming = self.from.iter().flatten().any(|rx| !rx.is_empty());
        incoming || self.outbox.iter().any(|o| !o.is_empty())
    }

    /// Whether a message to part `to` would go into its ring now (nothing waits before it).
    pub fn room(&self, to: u32) -> bool {
        let to = to as usize;
        self.outbox.get(to).is_some_and(VecDeque::is_empty)
            && matches!(self.to.get(to), Some(Some(tx)) if tx.slots() > 0)
    }

    /// Moves what waits in the outboxes into their rings as far as they have room.
    pub fn flush(&mut self) {
        let mut moved = Vec::new();
        for (to, (tx, outbox)) in self.to.iter_mut().zip(self.outbox.iter_mut()).enumerate() {
            let Some(tx) = tx else {
                continue;
            };
            let before = outbox.len();
            while let Some(msg) = outbox.pop_front() {
                if let Err(rtrb::PushError::Full(msg)) = tx.push(msg) {
                    outbox.push_front(msg);
                    break;
                }
            }
            if outbox.len() < before {
                moved.push(to);
            }
        }
        for to in moved {
            self.ring(to);
        }
    }

    /// The next message from part `from`, left in its ring.
    pub fn peek(&self, from: u32) -> Option<&PartMsg> {
        match self.from.get(from as usize) {
            Some(Some(rx)) => rx.peek().ok(),
            _ => None,
        }
    }

    /// Takes the next message from part `from`.
    pub fn pop(&mut self, from: u32) -> Option<PartMsg> {
        match self.from.get_mut(from as usize) {
            Some(Some(rx)) => rx.pop().ok(),
            _ => None,
        }
    }

    /// Publishes this part's counters on the board.
    pub fn publish(&self, counters: Counters) {
        let mut board = self.board.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mine) = board.get_mut(self.index as usize) {
            *mine = counters;
        }
    }

    /// Every part's counters summed, this part's as `own` (the others' as last published).
    pub fn summed(&self, own: Counters) -> Counters {
        if self.count == 1 {
            return own;
        }
        let board = self.board.lock().unwrap_or_else(|e| e.into_inner());
        let mut sum = own;
        for (i, c) in board.iter().enumerate() {
            if i != self.index as usize {
                sum += *c;
            }
        }
        sum
    }
}
