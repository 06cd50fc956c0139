//! Notification pipes (flexins.txt 3.4, Figure 7b): the single-producer/single-consumer
//! rings between an application context and one engine data-path core, shared by all the
//! context's queue pairs (docs/verbs.md "Notification pipes").
//!
//! A pipe is a context queue (64-byte entries, a valid bit whose sense flips at every
//! wrap-around, the consumer's published head in the header line). Two things make it a
//! pipe: the producer counts credit (the free entries it last learnt of) and reads the
//! consumer's head only when that runs out, and the consumer publishes its head only every
//! `publish_every` entries, so neither side touches the other's line per entry.
//! Credit is never more than what the consumer published, and a consumer only publishes
//! what it took, so the lag can delay the producer but never let it overwrite an entry
//! not yet taken.

use std::sync::Arc;

use crate::queue::{Consumer, Producer, PAYLOAD_BYTES};
use crate::{Region, ShmError};

/// Which pipe of a context and core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PipeKind {
    /// Work requests, application to engine.
    Work,
    /// Completions, engine to application.
    Completion,
}

fn pipe_at(region: &Region, context: u32, core: u32, kind: PipeKind) -> Option<(usize, u64)> {
    let l = region.layout();
    (context < l.max_contexts && core < l.verbs_pipe_cores).then(|| {
        (
            l.pipe_offset(context, core, kind == PipeKind::Completion),
            u64::from(l.verbs_pipe_entries),
        )
    })
}

/// The producing end of a notification pipe.
pub struct PipeProducer {
    queue: Producer,
    /// Free entries as last read from the consumer's head, less those written since.
    credit: u64,
    /// Times the consumer's head was read (the lag's effect, for counters and tests).
    head_reads: u64,
}

impl PipeProducer {
    /// The producer of `context`'s `kind` pipe for engine core `core`, or None if either is
    /// out of the layout's range.
    pub fn new(
        region: Arc<Region>,
        context: u32,
        core: u32,
        kind: PipeKind,
    ) -> Option<PipeProducer> {
        let (offset, entries) = pipe_at(&region, context, core, kind)?;
        Some(PipeProducer {
            queue: Producer::at(region, offset, entries),
            credit: 0,
            head_reads: 0,
        })
    }

    /// Entries the pipe holds.
    pub fn capacity(&self) -> u64 {
        self.queue.capacity()
    }

    /// Whether `n` entries fit now (reads the consumer's head only when the credit is short);
    /// a request of several entries is written only whole. A head out of bounds is an error
    /// and the pipe should no longer be used.
    pub fn room(&mut self, n: u64) -> Result<bool, ShmError> {
        if self.credit < n {
            self.credit = self.queue.free()?;
            self.head_reads += 1;
        }
        Ok(self.credit >= n)
    }

    /// The free entries the producer may count on: its credit, re-read from the consumer's
    /// head only when it is spent.
    pub fn credit(&mut self) -> Result<u64, ShmError> {
        self.room(1)?;
        Ok(self.credit)
    }

    /// Appends one entry; Ok(false) when the pipe is full.
    pub fn push(&mut self, payload: &[u8; PAYLOAD_BYTES]) -> Result<bool, ShmError> {
        if !self.room(1)? {
            return Ok(false);
        }
        self.queue.write_next(payload);
        self.credit -= 1;
        Ok(true)
    }

    /// Entries written so far.
    pub fn position(&self) -> u64 {
        self.queue.position()
    }

    /// Times the consumer's head was read.
    pub fn head_reads(&self) -> u64 {
        self.head_reads
    }
}

/// The consuming end of a notification pipe.
pub struct PipeConsumer {
    queue: Consumer,
    publish_every: u64,
}

impl PipeConsumer {
    /// The consumer of `context`'s `kind` pipe for engine core `core`, publishing its head
    /// every `publish_every` entries (clamped to 1 ..= half the pipe, so the producer is
    /// never starved of room the consumer already freed), or None if out of range.
    pub fn new(
        region: Arc<Region>,
        context: u32,
        core: u32,
        kind: PipeKind,
        publish_every: u64,
    ) -> Option<PipeConsumer> {
        let (offset, entries) = pipe_at(&region, context, core, kind)?;
        Some(PipeConsumer {
            queue: Consumer::at(region, offset, entries),
            publish_every: publish_every.clamp(1, entries / 2),
        })
    }

    /// Entries the pipe holds.
    pub fn capacity(&self) -> u64 {
        self.queue.capacity()
    }

    /// Entries taken so far.
    pub fn position(&self) -> u64 {
        self.queue.position()
    }

    /// Whether the next `n` entries are all there (a request is taken only whole).
    pub fn has_entries(&self, n: u64) -> bool {
        self.queue.has_entries(n)
    }

    /// The next entry without taking it.
    pub fn peek(&self) -> Option<[u8; PAYLOAD_BYTES]> {
        self.queue.peek()
    }

    /// Takes the next entry, publishing the head when `publish_every` entries were taken
    /// since it last was.
    pub fn pop(&mut self) -> Option<[u8; PAYLOAD_BYTES]> {
        let e = self.queue.take()?;
        if self.queue.unpublished() >= self.publish_every {
            self.queue.publish();
        }
        Some(e)
    }

    /// Publishes the head now (when the consumer goes idle, say).
    pub fn publish(&mut self) {
        self.queue.publish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Layout;
    use proptest::prelude::*;

    fn region(entries: u32, cores: u32) -> Arc<Region> {
        let layout = Layout {
            max_sockets: 1,
            max_contexts: 2,
            queue_entries: 8,
            ring_size: 4096,
            verbs_queues: 1,
            verbs_queue_entries: 8,
            verbs_pipe_cores: cores,
            verbs_pipe_entries: entries,
            verbs_pipe_cqs: 4,
            queue_cores: 1,
        };
        Arc::new(Region::create("pipe-test", layout).unwrap())
    }

    fn entry(n: u64) -> [u8; PAYLOAD_BYTES] {
        let mut e = [0u8; PAYLOAD_BYTES];
        e[..8].copy_from_slice(&n.to_le_bytes());
        e[PAYLOAD_BYTES - 1] = n as u8;
        e
    }

    #[test]
    #[cfg_attr(miri, ignore = "maps a memfd, which Miri cannot")]
    fn pipes_are_per_context_and_core_and_out_of_range_ones_do_not_exist() {
        let r = region(8, 2);
        let mut a = PipeProducer::new(r.clone(), 0, 0, PipeKind::Work).unwrap();
        let mut b = PipeProducer::new(r.clone(), 1, 1, PipeKind::Work).unwrap();
        let mut ca = PipeConsumer::new(r.clone(), 0, 0, PipeKind::Work, 1).unwrap();
        let mut cb = PipeConsumer::new(r.clone(), 1, 1, PipeKind::Work, 1).unwrap();
        let cc = PipeConsumer::new(r.clone(), 0, 0, PipeKind::Completion, 1).unwrap();
        assert!(a.push(&entry(1)).unwrap());
        assert!(b.push(&entry(2)).unwrap());
        assert_eq!(ca.pop(), Some(entry(1)));
        assert_eq!(cb.pop(), Some(entry(2)));
        assert!(cc.peek().is_none(), "the completion pipe is another ring");
        assert!(PipeProducer::new(r.clone(), 0, 2, PipeKind::Work).is_none());
        assert!(PipeConsumer::new(r, 2, 0, PipeKind::Completion, 1).is_none());
    }

    #[test]
    #[cfg_attr(miri, ignore = "maps a memfd, which Miri cannot")]
    fn the_producer_reads_the_head_only_when_its_credit_runs_out() {
        let r = region(64, 1);
        let mut p = PipeProducer::new(r.clone(), 0, 0, PipeKind::Completion).unwrap();
        let mut c = PipeConsumer::new(r, 0, 0, PipeKind::Completion, 16).unwrap();
        for n in 0..64 {
            assert!(p.push(&entry(n)).unwrap());
        }
        assert_eq!(p.head_reads(), 1, "one read for 64 entries");
        assert!(!p.push(&entry(64)).unwrap());
        for n in 0..15 {
            assert_eq!(c.pop(), Some(entry(n)));
        }
        assert!(!p.push(&entry(64)).unwrap(), "15 taken, none published yet");
        assert_eq!(c.pop(), Some(entry(15)));
        assert!(p.push(&entry(64)).unwrap(), "the 16th publishes");
    }

    #[test]
    #[cfg_attr(miri, ignore = "maps a memfd, which Miri cannot")]
    fn a_garbage_head_is_an_error() {
        let r = region(8, 1);
        let mut p = PipeProducer::new(r.clone(), 0, 0, PipeKind::Completion).unwrap();
        let off = r.layout().pipe_offset(0, 0, true);
        r.atomic_u64(off)
            .store(99, std::sync::atomic::Ordering::Release);
        assert!(matches!(p.push(&entry(0)), Err(ShmError::CorruptQueue)));
    }

    proptest! {
        /// Batches of pushes and pops of any size, any publishing lag: every entry arrives
        /// once, in order, across many wrap-arounds of the valid bit; the producer never
        /// has more outstanding than the pipe holds, and is refused only when what the
        /// consumer published leaves no room.
        #[test]
        #[cfg_attr(miri, ignore = "maps a memfd, which Miri cannot")]
        fn the_lag_never_lets_the_producer_overwrite(
            log_entries in 3u32..7,
            lag in 1u64..40,
            steps in proptest::collection::vec((0u64..40, 0u64..40), 1..60),
        ) {
            let entries = 1u32 << log_entries;
            let r = region(entries, 1);
            let mut p = PipeProducer::new(r.clone(), 1, 0, PipeKind::Completion).unwrap();
            let mut c = PipeConsumer::new(r, 1, 0, PipeKind::Completion, lag).unwrap();
            let (mut pushed, mut popped) = (0u64, 0u64);
            for (push, pop) in steps {
                for _ in 0..push {
                    if p.push(&entry(pushed)).unwrap() {
                        pushed += 1;
                    } else {
                        // Refused: the published head must leave no room.
                        let published = popped - popped % c.publish_every;
                        prop_assert_eq!(pushed - published, u64::from(entries));
                        break;
                    }
                    prop_assert!(pushed - popped <= u64::from(entries));
                }
                for _ in 0..pop {
                    match c.pop() {
                        Some(e) => {
                            prop_assert_eq!(e, entry(popped));
                            popped += 1;
                        }
                        None => break,
                    }
                }
            }
            while let Some(e) = c.pop() {
                prop_assert_eq!(e, entry(popped));
                popped += 1;
            }
            prop_assert_eq!(popped, pushed);
        }
    }
}
