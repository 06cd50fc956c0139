//! One direction of a link: its configuration, impairments, egress queue and counters.
//!
//! [`Channel`] is the model both the simulator and the software switch run: a FIFO egress
//! queue drained at line rate (serialization carried to the nanosecond), tail drop at a
//! byte (and optionally packet) capacity, ECN CE marking above a threshold K at enqueue, and
//! random impairments applied when a frame leaves the line. It keeps no clock: the caller
//! is told how long serialization takes and says when it has finished.

use std::collections::VecDeque;
use std::time::Duration;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::classes::{class_of, ClassQueues, ClassService};
use crate::ecn::{mark_ce, EcnOutcome};
use crate::pool::FramePool;

/// Default egress queue capacity: 1 MB.
const DEFAULT_QUEUE_BYTES: usize = 1 << 20;

/// Configuration of one direction of a link.
#[derive(Clone, Debug)]
pub struct LinkConfig {
    /// Line rate in bits per second; 0 means infinite (no serialization delay).
    pub bandwidth_bps: u64,
    /// Propagation delay.
    pub delay: Duration,
    /// Egress queue capacity in bytes (the frame being serialized is not counted); tail drop beyond it.
    pub queue_capacity_bytes: usize,
    /// Egress queue capacity in frames (the frame being serialized is not counted); None: no limit but bytes.
    pub queue_capacity_packets: Option<usize>,
    /// Mark CE on ECT packets when the queue holds more than this many bytes at enqueue (in-flight frame excluded).
    pub ecn_threshold_bytes: Option<usize>,
    /// Random impairments applied at transmit time.
    pub impairment: Impairment,
    /// Class queues served by deficit round robin, classified by IPv4 DSCP (each with the
    /// capacity and ECN threshold above); 0 or 1: one FIFO. Read when the channel is made.
    pub class_queues: usize,
    /// How the class queues are served (deficit round robin or strict priority).
    pub class_service: ClassService,
}

impl LinkConfig {
    /// A link with the given rate and delay, a 1 MB queue, no ECN and no impairment.
    pub fn new(bandwidth_bps: u64, delay: Duration) -> Self {
        LinkConfig {
            bandwidth_bps,
            delay,
            queue_capacity_bytes: DEFAULT_QUEUE_BYTES,
            queue_capacity_packets: None,
            ecn_threshold_bytes: None,
            impairment: Impairment::default(),
            class_queues: 0,
            class_service: ClassService::Drr,
        }
    }

    /// Serves `n` class queues (IPv4 DSCP modulo `n`) by deficit round robin instead of one
    /// FIFO: the "queue per tenant" switch of mtp.txt 5.3.
    pub fn with_class_queues(mut self, n: usize) -> Self {
        self.class_queues = n;
        self
    }

    /// Serves `n` priority queues (IPv4 DSCP modulo `n`, the highest first) sharing the
    /// queue's capacity: the switch priority queues Homa and pFabric use for short messages.
    pub fn with_priority_queues(mut self, n: usize) -> Self {
        self.class_queues = n;
        self.class_service = ClassService::Strict;
        self
    }

    /// Sets the egress queue capacity in bytes.
    pub fn with_queue(mut self, bytes: usize) -> Self {
        self.queue_capacity_bytes = bytes;
        self
    }

    /// Sets the egress queue capacity in frames, besides the byte capacity.
    pub fn with_queue_packets(mut self, packets: usize) -> Self {
        self.queue_capacity_packets = Some(packets);
        self
    }

    /// Enables ECN CE marking above `k_bytes` of queue.
    pub fn with_ecn(mut self, k_bytes: usize) -> Self {
        self.ecn_threshold_bytes = Some(k_bytes);
        self
    }

    /// Sets the impairments.
    pub fn with_impairment(mut self, imp: Impairment) -> Self {
        self.impairment = imp;
        self
    }
}

/// Random impairments of one link direction.
///
/// Probabilities are interpreted leniently: NaN or ≤ 0 means never, ≥ 1 means always.
#[derive(Clone, Debug, Default)]
pub struct Impairment {
    /// Independent random loss probability.
    pub loss: f64,
    /// Two-state (Gilbert–Elliott) burst loss.
    pub burst_loss: Option<GilbertElliott>,
    /// Probability a frame is held back an extra `reorder_delay` (so later frames overtake it).
    pub reorder: f64,
    /// Extra delay of a reordered frame.
    pub reorder_delay: Duration,
    /// Probability a frame is delivered twice.
    pub duplicate: f64,
    /// Probability one random bit of the frame is flipped.
    pub corrupt: f64,
}

impl Impairment {
    /// Sets the independent loss probability.
    pub fn with_loss(mut self, p: f64) -> Self {
        self.loss = p;
        self
    }

    /// Sets the burst-loss model.
    pub fn with_burst_loss(mut self, ge: GilbertElliott) -> Self {
        self.burst_loss = Some(ge);
        self
    }

    /// Sets the reordering probability and hold-back delay.
    pub fn with_reorder(mut self, p: f64, delay: Duration) -> Self {
        self.reorder = p;
        self.reorder_delay = delay;
        self
    }

    /// Sets the duplication probability.
    pub fn with_duplicate(mut self, p: f64) -> Self {
        self.duplicate = p;
        self
    }

    /// Sets the corruption probability.
    pub fn with_corrupt(mut self, p: f64) -> Self {
        self.corrupt = p;
        self
    }
}

/// Gilbert–Elliott two-state burst loss: the state moves between good and bad
/// before each frame, and frames are lost with `loss_in_bad` while bad.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GilbertElliott {
    /// Per-frame probability of moving from the good to the bad state.
    pub p_good_to_bad: f64,
    /// Per-frame probability of moving from the bad to the good state.
    pub p_bad_to_good: f64,
    /// Loss probability while in the bad state.
    pub loss_in_bad: f64,
}

/// Counters of one link direction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Frames accepted into the egress queue (including ones sent at once).
    pub enqueued: u64,
    /// Frames that arrived at the far end (each duplicate copy counts).
    pub delivered: u64,
    /// Bytes that arrived at the far end.
    pub bytes_delivered: u64,
    /// Frames tail-dropped because the queue was full.
    pub queue_drops: u64,
    /// Frames lost at transmit time (random or burst loss).
    pub lost: u64,
    /// Of `lost`, frames lost to independent random loss.
    pub lost_random: u64,
    /// Of `lost`, frames lost in the burst model's bad state only.
    pub lost_burst: u64,
    /// Frames with one bit flipped.
    pub corrupted: u64,
    /// Frames delivered twice.
    pub duplicated: u64,
    /// Frames held back by the reorder delay.
    pub reordered: u64,
    /// Frames marked CE.
    pub ecn_marked: u64,
    /// Largest queue occupancy seen, in bytes.
    pub max_queue_bytes: usize,
    /// Largest queue occupancy seen, in frames.
    pub max_queue_packets: usize,
    /// Frames offered to the queue, each sampling the occupancy it found.
    pub queue_samples: u64,
    /// Sum of those samples in bytes: the mean occupancy seen by arrivals is
    /// [`LinkStats::mean_queue_bytes`].
    pub queue_bytes_sum: u64,
}

impl LinkStats {
    /// The mean queue occupancy in bytes as seen by arriving frames (0 if none arrived).
    pub fn mean_queue_bytes(&self) -> f64 {
        if self.queue_samples == 0 {
            0.0
        } else {
            self.queue_bytes_sum as f64 / self.queue_samples as f64
        }
    }
}

/// Draws a Bernoulli trial without consuming randomness for p ≤ 0 or p ≥ 1.
fn chance(rng: &mut ChaCha8Rng, p: f64) -> bool {
    if p >= 1.0 {
        true
    } else if p > 0.0 {
        rng.gen::<f64>() < p
    } else {
        false
    }
}

/// What happened to a frame offered to a channel.
#[derive(Debug)]
pub enum Offer {
    /// Tail-dropped; the buffer is handed back.
    Dropped(Vec<u8>),
    /// Waiting in the queue.
    Queued,
    /// Serialization started; it finishes after this many nanoseconds.
    Started(u64),
    /// Zero serialization time and an idle line: transmit it right now.
    Immediate(Vec<u8>),
}

/// The outcome of putting a frame on the wire.
#[derive(Debug, Default)]
pub struct Transmitted {
    /// The frame, unless lost.
    pub frame: Option<Vec<u8>>,
    /// A duplicate copy, if chosen.
    pub duplicate: Option<Vec<u8>>,
    /// Extra delay beyond propagation (reordering).
    pub extra_delay: Duration,
    /// Whether the frame was lost.
    pub lost: bool,
    /// Whether a bit was flipped.
    pub corrupted: bool,
    /// Whether the frame was held back.
    pub reordered: bool,
}

/// One direction of a link: egress queue, line state, RNG and stats.
#[derive(Debug)]
pub struct Channel {
    /// The configuration; may be changed between frames (e.g. new impairments mid-run).
    pub config: LinkConfig,
    /// The counters so far.
    pub stats: LinkStats,
    queue: VecDeque<Vec<u8>>,
    /// Class queues instead of `queue`, when configured.
    classes: Option<ClassQueues>,
    /// Bytes queued (over all classes).
    queue_bytes: usize,
    in_flight: Option<Vec<u8>>,
    /// Sub-nanosecond remainder of serialization times, in units of 1/bandwidth ns.
    carry: u128,
    rng: ChaCha8Rng,
    burst_bad: bool,
}

impl Channel {
    /// A fresh idle channel.
    pub fn new(config: LinkConfig, rng: ChaCha8Rng) -> Self {
        let classes = (config.class_queues >= 2)
            .then(|| ClassQueues::new(config.class_queues, config.class_service));
        Channel {
            config,
            stats: LinkStats::default(),
            queue: VecDeque::new(),
            classes,
            queue_bytes: 0,
            in_flight: None,
            carry: 0,
            rng,
            burst_bad: false,
        }
    }

    /// Serialization time of `len` bytes in whole nanoseconds, carrying the fraction.
    fn serialization_nanos(&mut self, len: usize) -> u64 {
        let bw = u128::from(self.config.bandwidth_bps);
        if bw == 0 {
            return 0;
        }
        let num = (len as u128) * 8 * 1_000_000_000 + self.carry;
        self.carry = num % bw;
        u64::try_from(num / bw).unwrap_or(u64::MAX)
    }

    /// The class a frame goes to and that class's (bytes, frames) queued; the whole queue's
    /// without class queues; with strict priority, what waits at or above its class.
    fn occupancy(&self, frame: &[u8]) -> (usize, usize, usize) {
        match &self.classes {
            Some(c) if c.service() == ClassService::Strict => {
                let class = class_of(frame, c.len());
                let (bytes, frames) = c.at_or_above(class);
                (class, bytes, frames)
            }
            Some(c) => {
                let class = class_of(frame, c.len());
                (class, c.class_bytes(class), c.class_frames(class))
            }
            None => (0, self.queue_bytes, self.queue.len()),
        }
    }

    /// Whether a frame of `frame`'s class and `len` bytes would be tail-dropped now, with
    /// `headroom` bytes allowed beyond the capacity (and one frame per 64 of them).
    pub fn would_drop(&self, frame: &[u8], len: usize, headroom: usize) -> bool {
        let (_, bytes, frames) = match &self.classes {
            // Priority queues share one buffer.
            Some(c) if c.service() == ClassService::Strict => (0, self.queue_bytes, c.frames()),
            _ => self.occupancy(frame),
        };
        let packets_full = self
            .config
            .queue_capacity_packets
            .is_some_and(|cap| frames >= cap.saturating_add(headroom / 64));
        self.in_flight.is_some()
            && (packets_full
                || bytes.saturating_add(len)
                    > self.config.queue_capacity_bytes.saturating_add(headroom))
    }

    /// Bytes queued in the class `frame` would join (the whole queue without classes).
    pub fn queued_bytes_for(&self, frame: &[u8]) -> usize {
        self.occupancy(frame).1
    }

    /// Offers a frame for transmission; returns whether ECN marked it too.
    pub fn offer(&mut self, frame: Vec<u8>) -> (Offer, bool) {
        self.offer_with_headroom(frame, 0)
    }

    /// Offers a frame that may use `headroom` bytes beyond the queue's capacity (a trimmed
    /// header-only MTP packet, so trimming stays bounded); returns whether ECN marked it.
    pub fn offer_with_headroom(&mut self, mut frame: Vec<u8>, headroom: usize) -> (Offer, bool) {
        let len = frame.len();
        let busy = self.in_flight.is_some();
        self.stats.queue_samples += 1;
        self.stats.queue_bytes_sum = self
            .stats
            .queue_bytes_sum
            .saturating_add(self.queue_bytes as u64);
        if self.would_drop(&frame, len, headroom) {
            self.stats.queue_drops += 1;
            return (Offer::Dropped(frame), false);
        }
        let (class, class_bytes, _) = self.occupancy(&frame);
        let mut marked = false;
        if let Some(k) = self.config.ecn_threshold_bytes {
            if class_bytes > k && mark_ce(&mut frame) == EcnOutcome::Marked {
                self.stats.ecn_marked += 1;
                marked = true;
            }
        }
        self.stats.enqueued += 1;
        if busy {
            self.queue_bytes += len;
            self.stats.max_queue_bytes = self.stats.max_queue_bytes.max(self.queue_bytes);
            self.stats.max_queue_packets =
                self.stats.max_queue_packets.max(self.queued_packets() + 1);
            match &mut self.classes {
                Some(c) => c.push(class, frame),
                None => self.queue.push_back(frame),
            }
            return (Offer::Queued, marked);
        }
        let ns = self.serialization_nanos(len);
        if ns == 0 {
            self.carry = 0;
            (Offer::Immediate(frame), marked)
        } else {
            self.in_flight = Some(frame);
            (Offer::Started(ns), marked)
        }
    }

    /// Bytes waiting in the queue (the frame being serialized excluded).
    pub fn queued_bytes(&self) -> usize {
        self.queue_bytes
    }

    /// Frames waiting in the queue (the frame being serialized excluded).
    pub fn queued_packets(&self) -> usize {
        self.queue.len() + self.classes.as_ref().map_or(0, ClassQueues::frames)
    }

    /// Whether a frame is being serialized.
    pub fn busy(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Takes the frame whose serialization just finished.
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        self.in_flight.take()
    }

    /// Starts serializing the next queued frame, returning its duration in ns.
    pub fn start_next(&mut self) -> Option<u64> {
        let next = match &mut self.classes {
            Some(c) => c.pop(),
            None => self.queue.pop_front(),
        };
        match next {
            Some(frame) => {
                self.queue_bytes -= frame.len();
                let ns = self.serialization_nanos(frame.len());
                self.in_flight = Some(frame);
                Some(ns)
            }
            None => {
                self.carry = 0;
                None
            }
        }
    }

    /// Applies loss, corruption, duplication and reordering to a frame leaving the line.
    pub fn transmit(&mut self, mut frame: Vec<u8>, pool: &mut FramePool) -> Transmitted {
        let imp = &self.config.impairment;
        let lost_random = chance(&mut self.rng, imp.loss);
        let mut lost = lost_random;
        if let Some(ge) = imp.burst_loss {
            let flip = if self.burst_bad {
                ge.p_bad_to_good
            } else {
                ge.p_good_to_bad
            };
            if chance(&mut self.rng, flip) {
                self.burst_bad = !self.burst_bad;
            }
            if self.burst_bad && chance(&mut self.rng, ge.loss_in_bad) {
                lost = true;
            }
        }
        if lost {
            self.stats.lost += 1;
            if lost_random {
                self.stats.lost_random += 1;
            } else {
                self.stats.lost_burst += 1;
            }
            pool.put(frame);
            return Transmitted {
                lost: true,
                ..Transmitted::default()
            };
        }
        let mut out = Transmitted::default();
        if !frame.is_empty() && chance(&mut self.rng, imp.corrupt) {
            let bit = self.rng.gen_range(0..frame.len() * 8);
            if let Some(b) = frame.get_mut(bit / 8) {
                *b ^= 1 << (bit % 8);
            }
            self.stats.corrupted += 1;
            out.corrupted = true;
        }
        if chance(&mut self.rng, imp.duplicate) {
            out.duplicate = Some(pool.copy_of(&frame));
            self.stats.duplicated += 1;
        }
        if chance(&mut self.rng, imp.reorder) {
            out.extra_delay = imp.reorder_delay;
            self.stats.reordered += 1;
            out.reordered = true;
        }
        out.frame = Some(frame);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn serialization_carries_fractions() {
        // 1514 bytes at 10 Gbps = 1211.2 ns per frame.
        let mut ch = Channel::new(
            LinkConfig::new(10_000_000_000, Duration::ZERO),
            ChaCha8Rng::seed_from_u64(1),
        );
        let total: u64 = (0..5).map(|_| ch.serialization_nanos(1514)).sum();
        assert_eq!(total, 6056);
    }

    #[test]
    fn chance_edges() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        assert!(!chance(&mut rng, f64::NAN));
        assert!(!chance(&mut rng, 0.0));
        assert!(chance(&mut rng, 1.0));
        assert!(chance(&mut rng, 7.0));
    }
}
