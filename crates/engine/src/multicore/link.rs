//! A link between two roles: a bounded single-producer/single-consumer ring of full batches
//! forward and a second ring that brings the empty ones back (FlexTOE 3.2: modules talk
//! only through queues). Both ends are wait-free (`rtrb`); no lock anywhere.
//!
//! The rings hold at least every batch that can reach them, so a push never finds one full;
//! should it ever, the batch waits in the end's overflow and is pushed first next time,
//! rather than being lost (a lost batch would leave a hole in its group's sequence).
//!
//! Between two threads each end also holds the other thread's [`Doorbell`]: a full batch
//! sent, or an empty one given back, rings it if that thread announced its sleep
//! (doorbell.rs says why no wake-up is lost); between roles of one thread, none.

use std::collections::VecDeque;
use std::sync::Arc;

use rtrb::{Consumer, Producer, RingBuffer};

use super::batch::Batch;
use super::doorbell::Doorbell;

/// The producer's end: sends full batches, takes back empty ones.
pub struct LinkTx {
    full: Producer<Box<Batch>>,
    empty: Consumer<Box<Batch>>,
    overflow: VecDeque<Box<Batch>>,
    spare: Option<Box<Batch>>,
    consumer: Option<Arc<Doorbell>>,
}

/// The consumer's end: receives full batches, gives back empty ones.
pub struct LinkRx {
    full: Consumer<Box<Batch>>,
    empty: Producer<Box<Batch>>,
    overflow: VecDeque<Box<Batch>>,
    producer: Option<Arc<Doorbell>>,
}

/// A link whose rings hold `capacity` batches each, with `pool` new empty batches waiting for
/// the producer (at most `capacity`).
pub fn link(capacity: usize, pool: usize) -> (LinkTx, LinkRx) {
    let capacity = capacity.max(1);
    let (full_tx, full_rx) = RingBuffer::new(capacity);
    let (mut empty_tx, empty_rx) = RingBuffer::new(capacity);
    for _ in 0..pool.min(capacity) {
        // Cannot fail: the ring has room for `capacity` and gets at most that many.
        let _ = empty_tx.push(Box::new(Batch::new()));
    }
    (
        LinkTx {
            full: full_tx,
            empty: empty_rx,
            overflow: VecDeque::new(),
            spare: None,
            consumer: None,
        },
        LinkRx {
            full: full_rx,
            empty: empty_tx,
            overflow: VecDeque::new(),
            producer: None,
        },
    )
}

/// Pushes what waits in `overflow`, then `item`; what does not fit waits in `overflow`.
fn push_in_order(
    ring: &mut Producer<Box<Batch>>,
    overflow: &mut VecDeque<Box<Batch>>,
    item: Option<Box<Batch>>,
) {
    while let Some(b) = overflow.pop_front() {
        if let Err(rtrb::PushError::Full(b)) = ring.push(b) {
            overflow.push_front(b);
            break;
        }
    }
    if let Some(b) = item {
        if !overflow.is_empty() {
            overflow.push_back(b);
        } else if let Err(rtrb::PushError::Full(b)) = ring.push(b) {
            overflow.push_back(b);
        }
    }
}

impl LinkTx {
    /// Rings `bell` (the consumer's thread's) after each batch sent, if it sleeps.
    pub fn wake(&mut self, bell: Arc<Doorbell>) {
        self.consumer = Some(bell);
    }

    /// An empty batch to fill (cleared), if one has come back.
    pub fn take_empty(&mut self) -> Option<Box<Batch>> {
        let mut b = self.spare.take().or_else(|| self.empty.pop().ok())?;
        b.clear();
        Some(b)
    }

    /// Keeps an empty batch taken but not used, for the next [`LinkTx::take_empty`].
    pub fn keep(&mut self, batch: Box<Batch>) {
        self.spare = Some(batch);
    }

    /// Empty batches waiting to be taken.
    pub fn empties(&self) -> usize {
        self.empty.slots() + usize::from(self.spare.is_some())
    }

    /// Sends a full batch to the consumer.
    pub fn send(&mut self, batch: Box<Batch>) {
        push_in_order(&mut self.full, &mut self.overflow, Some(batch));
        if let Some(b) = &self.consumer {
            b.ring_if_asleep();
        }
    }

    /// Pushes what waits in the overflow (normally nothing).
    pub fn flush(&mut self) {
        if self.overflow.is_empty() {
            return;
        }
        push_in_order(&mut self.full, &mut self.overflow, None);
        if let Some(b) = &self.consumer {
            b.ring_if_asleep();
        }
    }
}

impl LinkRx {
    /// Rings `bell` (the producer's thread's) after each batch given back, if it sleeps.
    pub fn wake(&mut self, bell: Arc<Doorbell>) {
        self.producer = Some(bell);
    }

    /// The next full batch, if one waits.
    pub fn recv(&mut self) -> Option<Box<Batch>> {
        self.full.pop().ok()
    }

    /// Whether a full batch waits.
    pub fn has_batch(&self) -> bool {
        !self.full.is_empty()
    }

    /// Returns a batch, used up, to the producer.
    pub fn give_back(&mut self, batch: Box<Batch>) {
        push_in_order(&mut self.empty, &mut self.overflow, Some(batch));
        if let Some(b) = &self.producer {
            b.ring_if_asleep();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::batch::FrameMeta;
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    #[test]
    fn batches_go_forward_in_order_and_come_back_empty() {
        let (mut tx, mut rx) = link(4, 2);
        assert_eq!(tx.empties(), 2);
        for seq in 0..2 {
            let mut b = tx.take_empty().expect("from the pool");
            b.seq = seq;
            assert!(b.push_copy(&[seq as u8; 64], FrameMeta::default()));
            tx.send(b);
        }
        assert!(tx.take_empty().is_none(), "the pool is out: back-pressure");
        let first = rx.recv().unwrap();
        assert_eq!((first.seq, first.frame(0)[0]), (0, 0));
        rx.give_back(first);
        let b = tx.take_empty().expect("came back");
        assert!(b.is_empty(), "cleared on take");
        tx.keep(b);
        assert_eq!(tx.empties(), 1);
        assert_eq!(rx.recv().unwrap().seq, 1);
        assert!(rx.recv().is_none());
    }

    #[test]
    fn a_full_ring_keeps_the_batch_and_its_order() {
        let (mut tx, mut rx) = link(1, 0);
        for seq in 0..3 {
            let mut b = Box::new(Batch::new());
            b.seq = seq;
            tx.send(b);
        }
        let mut got = Vec::new();
        while got.len() < 3 {
            if let Some(b) = rx.recv() {
                got.push(b.seq);
            }
            tx.flush();
        }
        assert_eq!(got, [0, 1, 2]);
    }

    /// A sleep this long that ends unrung with work pending is a lost wake-up (neither end
    /// waits anywhere near it otherwise).
    const LOST: Duration = Duration::from_secs(5);

    /// A random pause: none, a spin, a yield or a short sleep (so both ends go to sleep
    /// often, at every point of the other's handshake).
    fn pause(rng: &mut u64) {
        *rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        match (*rng >> 33) % 8 {
            0..=3 => {}
            4 => std::hint::spin_loop(),
            5 => std::thread::yield_now(),
            _ => std::thread::sleep(Duration::from_micros((*rng >> 40) % 50)),
        }
    }

    /// The idle side of a thread: announce, re-check `pending`, sleep unless it holds.
    /// Returns whether the sleep timed out with work pending (a lost wake-up).
    fn idle(bell: &Doorbell, pending: impl Fn() -> bool) -> bool {
        bell.announce();
        if pending() {
            bell.cancel();
            return false;
        }
        let rung = bell.sleep(&[], LOST).unwrap();
        !rung && pending()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(8))]

        /// Producer and consumer threads, each sleeping on its doorbell whenever it has
        /// nothing to do, with random pauses: every batch arrives, in order, and no end
        /// ever sleeps through work the other handed it.
        #[test]
        fn the_sleep_and_wake_handshake_loses_no_batch_and_no_wake_up(
            seed in any::<u64>(),
            capacity in 1usize..4,
            pool in 1usize..4,
        ) {
            const BATCHES: u64 = 1500;
            let (mut tx, mut rx) = link(capacity, pool);
            let producer = Arc::new(Doorbell::new().unwrap());
            let consumer = Arc::new(Doorbell::new().unwrap());
            tx.wake(consumer.clone());
            rx.wake(producer.clone());
            let (sent_lost, got, got_lost) = std::thread::scope(|s| {
                let p = s.spawn(|| {
                    let mut rng = seed;
                    let (mut next, mut lost) = (0, 0);
                    while next < BATCHES {
                        if let Some(mut b) = tx.take_empty() {
                            b.seq = next;
                            tx.send(b);
                            next += 1;
                            pause(&mut rng);
                        } else if idle(&producer, || tx.empties() > 0) {
                            lost += 1;
                        }
                    }
                    lost
                });
                let c = s.spawn(|| {
                    let mut rng = seed ^ 0x5555;
                    let (mut got, mut lost) = (Vec::new(), 0);
                    while (got.len() as u64) < BATCHES {
                        if let Some(b) = rx.recv() {
                            got.push(b.seq);
                            pause(&mut rng);
                            rx.give_back(b);
                        } else if idle(&consumer, || rx.has_batch()) {
                            lost += 1;
                        }
                    }
                    (got, lost)
                });
                let sent_lost = p.join().unwrap();
                let (got, got_lost) = c.join().unwrap();
                (sent_lost, got, got_lost)
            });
            prop_assert_eq!((sent_lost, got_lost), (0, 0), "a wake-up was lost");
            prop_assert!(got.iter().copied().eq(0..BATCHES), "every batch, in order");
            prop_assert!(!rx.has_batch(), "nothing left behind");
            prop_assert!(!producer.announced() && !consumer.announced());
            // Both ends slept, and rang each other (random pauses make it all but sure;
            // counted, not asserted per case).
            let (p, c) = (producer.counters(), consumer.counters());
            prop_assert!(p.sleeps + c.sleeps + p.cancelled + c.cancelled > 0);
        }
    }
}
