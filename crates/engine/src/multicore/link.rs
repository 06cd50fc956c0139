//! A link between two roles: a bounded single-producer/single-consumer ring of full batches
//! forward and a second ring that brings the empty ones back (FlexTOE 3.2: modules talk
//! only through queues). Both ends are wait-free (`rtrb`); no lock anywhere.
//!
//! The rings hold at least every batch that can reach them, so a push never finds one full;
//! should it ever, the batch waits in the end's overflow and is pushed first next time,
//! rather than being lost (a lost batch would leave a hole in its group's sequence).

use std::collections::VecDeque;

use rtrb::{Consumer, Producer, RingBuffer};

use super::batch::Batch;

/// The producer's end: sends full batches, takes back empty ones.
pub struct LinkTx {
    full: Producer<Box<Batch>>,
    empty: Consumer<Box<Batch>>,
    overflow: VecDeque<Box<Batch>>,
    spare: Option<Box<Batch>>,
}

/// The consumer's end: receives full batches, gives back empty ones.
pub struct LinkRx {
    full: Consumer<Box<Batch>>,
    empty: Producer<Box<Batch>>,
    overflow: VecDeque<Box<Batch>>,
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
        },
        LinkRx {
            full: full_rx,
            empty: empty_tx,
            overflow: VecDeque::new(),
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
    }

    /// Pushes what waits in the overflow (normally nothing).
    pub fn flush(&mut self) {
        push_in_order(&mut self.full, &mut self.overflow, None);
    }
}

impl LinkRx {
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
    }
}

#[cfg(test)]
mod tests {
    use super::super::batch::FrameMeta;
    use super::*;

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
}
