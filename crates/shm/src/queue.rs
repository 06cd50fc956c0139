//! Context queues: single-producer/single-consumer rings of cache-line entries with a phase
//! bit (FlexiNS 3.4, FlexTOE's CTX-Qs).
//!
//! The producer writes an entry's 63 payload bytes and then its last byte, whose low bit is
//! the phase of the lap being written (1 on the first lap, so zeroed memory reads empty).
//! The consumer takes entries while their phase matches its lap and publishes its head in
//! the queue header now and then, which is all the producer needs to know the free space.
//! Both sides keep their own index privately; the only index one side reads from the other
//! is that published head, and a producer that does not trust its consumer checks it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::layout::{ENTRY_BYTES, QUEUE_HEADER_BYTES};
use crate::{Region, ShmError};

/// Payload bytes of an entry (the last byte holds the phase).
pub const PAYLOAD_BYTES: usize = ENTRY_BYTES - 1;

/// Which context queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueKind {
    /// Application to engine.
    Command,
    /// Engine to application.
    Completion,
}

fn queue_offset(region: &Region, context: u32, core: u32, kind: QueueKind) -> Option<usize> {
    let l = region.layout();
    (context < l.max_contexts && core < l.queue_cores).then(|| match kind {
        QueueKind::Command => l.command_queue_offset_on(context, core),
        QueueKind::Completion => l.completion_queue_offset_on(context, core),
    })
}

fn verbs_queue(region: &Region, q: u32) -> Option<(usize, u64)> {
    let l = region.layout();
    (q < l.verbs_queues).then(|| (l.verbs_queue_offset(q), l.verbs_queue_entries as u64))
}

fn phase_of(index: u64, entries: u64) -> u8 {
    // Lap 0 writes 1, lap 1 writes 0, ...
    1 ^ ((index / entries) & 1) as u8
}

/// The producing end of a context queue.
pub struct Producer {
    region: Arc<Region>,
    offset: usize,
    entries: u64,
    tail: u64,
}

impl Producer {
    /// A producer over the queue at `offset` with `entries` entries (a notification pipe).
    pub(crate) fn at(region: Arc<Region>, offset: usize, entries: u64) -> Producer {
        Producer {
            region,
            offset,
            entries,
            tail: 0,
        }
    }

    /// The producer of `context`'s `kind` queue (engine core 0's), or None if the
    /// context is out of range.
    pub fn new(region: Arc<Region>, context: u32, kind: QueueKind) -> Option<Producer> {
        Self::on_core(region, context, 0, kind)
    }

    /// The producer of `context`'s `kind` queue for engine core `core`, or None if the
    /// context or the core is out of range.
    pub fn on_core(
        region: Arc<Region>,
        context: u32,
        core: u32,
        kind: QueueKind,
    ) -> Option<Producer> {
        let offset = queue_offset(&region, context, core, kind)?;
        let entries = region.layout().queue_entries as u64;
        Some(Producer {
            region,
            offset,
            entries,
            tail: 0,
        })
    }

    /// The producer of verbs queue `q` (an RDMA send or receive queue on the application's
    /// side, a completion queue on the engine's), or None if `q` is out of range.
    pub fn verbs(region: Arc<Region>, q: u32) -> Option<Producer> {
        let (offset, entries) = verbs_queue(&region, q)?;
        Some(Producer {
            region,
            offset,
            entries,
            tail: 0,
        })
    }

    /// Entries the queue holds.
    pub fn capacity(&self) -> u64 {
        self.entries
    }

    /// Entries the consumer has not taken yet; an out-of-bounds published head (a consumer
    /// that wrote garbage) is an error and the queue should no longer be used.
    pub fn pending(&self) -> Result<u64, ShmError> {
        let head = self.region.atomic_u64(self.offset).load(Ordering::Acquire);
        if head > self.tail || self.tail - head > self.entries {
            return Err(ShmError::CorruptQueue);
        }
        Ok(self.tail - head)
    }

    /// Free entries.
    pub fn free(&self) -> Result<u64, ShmError> {
        Ok(self.entries - self.pending()?)
    }

    /// Appends one entry; Ok(false) when the queue is full.
    pub fn push(&mut self, payload: &[u8; PAYLOAD_BYTES]) -> Result<bool, ShmError> {
        if self.free()? == 0 {
            return Ok(false);
        }
        self.write_next(payload);
        Ok(true)
    }

    /// Writes the next entry; the caller knows there is room (a notification pipe counts
    /// its credit instead of reading the consumer's head each time).
    pub(crate) fn write_next(&mut self, payload: &[u8; PAYLOAD_BYTES]) {
        let slot =
            self.offset + QUEUE_HEADER_BYTES + (self.tail % self.entries) as usize * ENTRY_BYTES;
        self.region.write_bytes(slot, payload);
        // The phase byte is written last and released: a consumer that sees the new phase
        // sees the payload too.
        self.region
            .atomic_u8(slot + PAYLOAD_BYTES)
            .store(phase_of(self.tail, self.entries), Ordering::Release);
        self.tail += 1;
    }

    /// Entries written so far.
    pub fn position(&self) -> u64 {
        self.tail
    }
}

/// The consuming end of a context queue.
pub struct Consumer {
    region: Arc<Region>,
    offset: usize,
    entries: u64,
    head: u64,
    published: u64,
}

impl Consumer {
    /// A consumer over the queue at `offset` with `entries` entries (a notification pipe).
    pub(crate) fn at(region: Arc<Region>, offset: usize, entries: u64) -> Consumer {
        Consumer {
            region,
            offset,
            entries,
            head: 0,
            published: 0,
        }
    }

    /// The consumer of `context`'s `kind` queue (engine core 0's), or None if the
    /// context is out of range.
    pub fn new(region: Arc<Region>, context: u32, kind: QueueKind) -> Option<Consumer> {
        Self::on_core(region, context, 0, kind)
    }

    /// The consumer of `context`'s `kind` queue for engine core `core`, or None if the
    /// context or the core is out of range.
    pub fn on_core(
        region: Arc<Region>,
        context: u32,
        core: u32,
        kind: QueueKind,
    ) -> Option<Consumer> {
        let offset = queue_offset(&region, context, core, kind)?;
        let entries = region.layout().queue_entries as u64;
        Some(Consumer {
            region,
            offset,
            entries,
            head: 0,
            published: 0,
        })
    }

    /// The consumer of verbs queue `q`, or None if `q` is out of range.
    pub fn verbs(region: Arc<Region>, q: u32) -> Option<Consumer> {
        let (offset, entries) = verbs_queue(&region, q)?;
        Some(Consumer {
            region,
            offset,
            entries,
            head: 0,
            published: 0,
        })
    }

    /// Entries the queue holds.
    pub fn capacity(&self) -> u64 {
        self.entries
    }

    /// Entries taken so far (the position of the next one).
    pub fn position(&self) -> u64 {
        self.head
    }

    fn slot(&self) -> usize {
        self.offset + QUEUE_HEADER_BYTES + (self.head % self.entries) as usize * ENTRY_BYTES
    }

    /// Whether an entry is waiting.
    pub fn has_entry(&self) -> bool {
        let phase = self
            .region
            .atomic_u8(self.slot() + PAYLOAD_BYTES)
            .load(Ordering::Acquire);
        phase & 1 == phase_of(self.head, self.entries)
    }

    /// Whether the next `n` entries are all waiting (a request spanning several entries is
    /// taken only whole: the producer may still be writing its tail).
    pub fn has_entries(&self, n: u64) -> bool {
        if n > self.entries {
            return false;
        }
        (0..n).all(|k| {
            let i = self.head + k;
            let slot = self.offset + QUEUE_HEADER_BYTES + (i % self.entries) as usize * ENTRY_BYTES;
            let phase = self
                .region
                .atomic_u8(slot + PAYLOAD_BYTES)
                .load(Ordering::Acquire);
            phase & 1 == phase_of(i, self.entries)
        })
    }

    /// The next entry's payload without taking it, if one is waiting.
    pub fn peek(&self) -> Option<[u8; PAYLOAD_BYTES]> {
        if !self.has_entry() {
            return None;
        }
        let mut out = [0u8; PAYLOAD_BYTES];
        self.region.read_bytes(self.slot(), &mut out);
        Some(out)
    }

    /// Takes the next entry's payload, if one is waiting. Call [`Consumer::publish`] after
    /// a batch so the producer can reuse the slots.
    pub fn pop(&mut self) -> Option<[u8; PAYLOAD_BYTES]> {
        let out = self.take()?;
        // Publish at least every half queue so a long batch does not stall the producer.
        if self.head - self.published >= self.entries / 2 {
            self.publish();
        }
        Some(out)
    }

    /// Takes the next entry without publishing (a notification pipe publishes on its own
    /// schedule).
    pub(crate) fn take(&mut self) -> Option<[u8; PAYLOAD_BYTES]> {
        if !self.has_entry() {
            return None;
        }
        let mut out = [0u8; PAYLOAD_BYTES];
        self.region.read_bytes(self.slot(), &mut out);
        self.head += 1;
        Some(out)
    }

    /// Entries taken but not yet published.
    pub fn unpublished(&self) -> u64 {
        self.head - self.published
    }

    /// Tells the producer which entries are free again.
    pub fn publish(&mut self) {
        if self.published != self.head {
            self.region
                .atomic_u64(self.offset)
                .store(self.head, Ordering::Release);
            self.published = self.head;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Layout;

    fn region() -> Arc<Region> {
        let layout = Layout {
            max_sockets: 2,
            max_contexts: 2,
            queue_entries: 8,
            ring_size: 4096,
            ..Layout::default()
        };
        Arc::new(Region::create("queue-test", layout).unwrap())
    }

    #[test]
    #[cfg_attr(miri, ignore = "maps a memfd, which Miri cannot")]
    fn entries_pass_in_order_across_many_laps() {
        let r = region();
        let mut p = Producer::new(r.clone(), 1, QueueKind::Command).unwrap();
        let mut c = Consumer::new(r, 1, QueueKind::Command).unwrap();
        let (mut pushed, mut popped) = (0u32, 0u32);
        for round in 0..100u32 {
            for _ in 0..1 + round % 8 {
                let mut e = [0u8; PAYLOAD_BYTES];
                e[..4].copy_from_slice(&pushed.to_le_bytes());
                e[PAYLOAD_BYTES - 1] = pushed as u8;
                assert!(p.push(&e).unwrap());
                pushed += 1;
            }
            while let Some(e) = c.pop() {
                assert_eq!(u32::from_le_bytes(e[..4].try_into().unwrap()), popped);
                assert_eq!(e[PAYLOAD_BYTES - 1], popped as u8);
                popped += 1;
            }
            c.publish();
        }
        assert_eq!(popped, pushed);
    }

    #[test]
    #[cfg_attr(miri, ignore = "maps a memfd, which Miri cannot")]
    fn peek_leaves_the_entry_and_has_entries_sees_a_whole_request() {
        let r = region();
        let mut p = Producer::new(r.clone(), 0, QueueKind::Command).unwrap();
        let mut c = Consumer::new(r, 0, QueueKind::Command).unwrap();
        assert!(c.peek().is_none());
        assert!(c.has_entries(0));
        assert!(!c.has_entries(1));
        p.push(&[1; PAYLOAD_BYTES]).unwrap();
        p.push(&[2; PAYLOAD_BYTES]).unwrap();
        assert_eq!(c.peek(), Some([1; PAYLOAD_BYTES]));
        assert!(c.has_entries(2));
        assert!(!c.has_entries(3));
        assert!(!c.has_entries(9), "more than the queue holds");
        assert_eq!(c.pop(), Some([1; PAYLOAD_BYTES]));
        assert_eq!(c.peek(), Some([2; PAYLOAD_BYTES]));
    }

    #[test]
    #[cfg_attr(miri, ignore = "maps a memfd, which Miri cannot")]
    fn a_full_queue_refuses_until_the_consumer_publishes() {
        let r = region();
        let mut p = Producer::new(r.clone(), 0, QueueKind::Completion).unwrap();
        let mut c = Consumer::new(r, 0, QueueKind::Completion).unwrap();
        let e = [7u8; PAYLOAD_BYTES];
        for _ in 0..8 {
            assert!(p.push(&e).unwrap());
        }
        assert!(!p.push(&e).unwrap());
        assert_eq!(c.pop(), Some(e));
        // Not yet published: still full.
        assert!(!p.push(&e).unwrap());
        c.publish();
        assert!(p.push(&e).unwrap());
    }

    #[test]
    #[cfg_attr(miri, ignore = "maps a memfd, which Miri cannot")]
    fn a_garbage_published_head_is_an_error_not_space() {
        let r = region();
        let mut p = Producer::new(r.clone(), 0, QueueKind::Completion).unwrap();
        let off = r.layout().completion_queue_offset(0);
        r.atomic_u64(off).store(1_000, Ordering::Release);
        assert!(matches!(
            p.push(&[0; PAYLOAD_BYTES]),
            Err(ShmError::CorruptQueue)
        ));
    }

    #[test]
    #[cfg_attr(miri, ignore = "maps a memfd, which Miri cannot")]
    fn out_of_range_contexts_have_no_queue() {
        let r = region();
        assert!(Producer::new(r.clone(), 2, QueueKind::Command).is_none());
        assert!(Consumer::new(r, 9, QueueKind::Completion).is_none());
    }
}
