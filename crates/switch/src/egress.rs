//! One switch port's egress in time: the shared [`Channel`] model (queue, line rate, ECN,
//! impairments) plus the delay line a frame waits in between leaving the line and being
//! handed to the device (propagation delay, reordering hold-back).
//!
//! Time is a [`Duration`] since the switch started, passed in by the caller. Serialization
//! ends are chained from the previous end, not from when the caller looks, so a late poll
//! never lowers the line rate.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use sluice_fabric::{ChaCha8Rng, Channel, FramePool, LinkConfig, LinkStats, Offer};

/// Counters of one egress beyond the channel's own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EgressStats {
    /// The shared model's counters (enqueued, tail drops, ECN marks, losses, ...).
    pub link: LinkStats,
    /// Frames dropped because the delay line was full.
    pub delay_line_drops: u64,
}

/// One port's egress: queue and line ([`Channel`]) followed by a bounded delay line.
#[derive(Debug)]
pub struct Egress {
    channel: Channel,
    /// When the frame on the line finishes serializing.
    tx_done_at: Option<Duration>,
    /// Frames by (due time, arrival order), earliest first; the order is unique, so frames
    /// themselves are never compared.
    delay_line: BinaryHeap<Reverse<(Duration, u64, Vec<u8>)>>,
    max_delayed: usize,
    seq: u64,
    delay_line_drops: u64,
    /// A due frame the device could not take; the next one out.
    held: Option<Vec<u8>>,
}

impl Egress {
    /// An idle egress; the delay line holds at most `max_delayed` frames.
    pub fn new(config: LinkConfig, rng: ChaCha8Rng, max_delayed: usize) -> Self {
        Egress {
            channel: Channel::new(config, rng),
            tx_done_at: None,
            delay_line: BinaryHeap::new(),
            max_delayed,
            seq: 0,
            delay_line_drops: 0,
            held: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &LinkConfig {
        &self.channel.config
    }

    /// The queue and line model (for an MTP device's look at the queue).
    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    /// Offers a frame at `now`: it is tail-dropped, queued, or goes on the line.
    pub fn offer(&mut self, now: Duration, frame: Vec<u8>, pool: &mut FramePool) {
        self.offer_with_headroom(now, frame, 0, pool);
    }

    /// Offers a frame that may use `headroom` bytes beyond the queue's capacity (an MTP
    /// device's trimmed header).
    pub fn offer_with_headroom(
        &mut self,
        now: Duration,
        frame: Vec<u8>,
        headroom: usize,
        pool: &mut FramePool,
    ) {
        self.advance(now, pool);
        match self.channel.offer_with_headroom(frame, headroom).0 {
            Offer::Dropped(f) => pool.put(f),
            Offer::Queued => {}
            Offer::Started(ns) => self.tx_done_at = Some(now + Duration::from_nanos(ns)),
            Offer::Immediate(f) => self.leave_line(now, f, pool),
        }
    }

    /// Finishes every serialization that ends by `now`, starting the next queued frame at
    /// the end of the previous one.
    pub fn advance(&mut self, now: Duration, pool: &mut FramePool) {
        while let Some(done) = self.tx_done_at.filter(|t| *t <= now) {
            let frame = self.channel.finish();
            self.tx_done_at = self
                .channel
                .start_next()
                .map(|ns| done + Duration::from_nanos(ns));
            if let Some(frame) = frame {
                self.leave_line(done, frame, pool);
            }
        }
    }

    /// The next frame due at or before `now` (call [`Egress::advance`] first).
    pub fn pop_ready(&mut self, now: Duration) -> Option<Vec<u8>> {
        if let Some(f) = self.held.take() {
            return Some(f);
        }
        if self.delay_line.peek()?.0 .0 > now {
            return None;
        }
        self.delay_line.pop().map(|Reverse((_, _, frame))| frame)
    }

    /// Puts back a frame from [`Egress::pop_ready`] that the device could not take; it is
    /// the next one out (one such frame at a time: a second goes behind it).
    pub fn push_front(&mut self, frame: Vec<u8>) {
        match self.held.take() {
            None => self.held = Some(frame),
            Some(first) => {
                self.held = Some(first);
                self.delay_line
                    .push(Reverse((Duration::ZERO, self.seq, frame)));
                self.seq += 1;
            }
        }
    }

    /// When something next happens here: a serialization ends or a frame falls due
    /// (`Duration::ZERO` when a put-back frame waits).
    pub fn next_deadline(&self) -> Option<Duration> {
        if self.held.is_some() {
            return Some(Duration::ZERO);
        }
        let due = self.delay_line.peek().map(|d| d.0 .0);
        match (self.tx_done_at, due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Frames anywhere in this egress (queue, line, delay line).
    pub fn backlog(&self) -> usize {
        self.channel.queued_packets()
            + usize::from(self.channel.busy())
            + self.delay_line.len()
            + usize::from(self.held.is_some())
    }

    /// The counters so far.
    pub fn stats(&self) -> EgressStats {
        EgressStats {
            link: self.channel.stats.clone(),
            delay_line_drops: self.delay_line_drops,
        }
    }

    /// A frame left the line at `at`: impairments, then into the delay line.
    fn leave_line(&mut self, at: Duration, frame: Vec<u8>, pool: &mut FramePool) {
        let delay = self.channel.config.delay;
        let tx = self.channel.transmit(frame, pool);
        let due = at + delay + tx.extra_delay;
        for frame in [tx.frame, tx.duplicate].into_iter().flatten() {
            if self.delay_line.len() >= self.max_delayed {
                self.delay_line_drops += 1;
                pool.put(frame);
                continue;
            }
            self.delay_line.push(Reverse((due, self.seq, frame)));
            self.seq += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use sluice_fabric::{GilbertElliott, Impairment};

    const GBPS: u64 = 1_000_000_000;

    fn egress(config: LinkConfig) -> (Egress, FramePool) {
        (
            Egress::new(config, ChaCha8Rng::seed_from_u64(7), 1 << 20),
            FramePool::default(),
        )
    }

    /// An Ethernet + IPv4 frame of `len` bytes with the given TOS (valid header checksum).
    fn ipv4_frame(len: usize, tos: u8) -> Vec<u8> {
        let mut f = vec![0u8; len.max(34)];
        f[12] = 0x08;
        f[13] = 0x00;
        f[14] = 0x45;
        f[15] = tos;
        let ip_len = (f.len() - 14) as u16;
        f[16..18].copy_from_slice(&ip_len.to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        let sum = sluice_wire::checksum::checksum(&f[14..34]);
        f[24..26].copy_from_slice(&sum.to_be_bytes());
        f
    }

    /// Drives the egress to quiescence, returning (due time, frame) of every frame out.
    fn drain(e: &mut Egress, pool: &mut FramePool) -> Vec<(Duration, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(t) = e.next_deadline() {
            e.advance(t, pool);
            while let Some(f) = e.pop_ready(t) {
                out.push((t, f));
            }
        }
        out
    }

    #[test]
    fn rate_serializes_back_to_back_at_line_rate() {
        // 100 frames of 1500 B at 1 Gb/s: exactly 100 * 1500 * 8 / 1e9 s = 1.2 ms.
        let (mut e, mut pool) = egress(LinkConfig::new(GBPS, Duration::ZERO));
        for _ in 0..100 {
            e.offer(Duration::ZERO, vec![0u8; 1500], &mut pool);
        }
        let out = drain(&mut e, &mut pool);
        assert_eq!(out.len(), 100);
        assert_eq!(out[0].0, Duration::from_nanos(12_000));
        assert_eq!(out[99].0, Duration::from_micros(1200));
        // Every frame leaves exactly one serialization time after the one before.
        for w in out.windows(2) {
            assert_eq!(w[1].0 - w[0].0, Duration::from_nanos(12_000));
        }
    }

    #[test]
    fn rate_is_kept_when_polled_late() {
        // Looking only after everything should have finished changes no due time.
        let (mut e, mut pool) = egress(LinkConfig::new(GBPS / 10, Duration::ZERO));
        for _ in 0..10 {
            e.offer(Duration::ZERO, vec![0u8; 1000], &mut pool);
        }
        let late = Duration::from_secs(1);
        e.advance(late, &mut pool);
        assert_eq!(e.next_deadline(), Some(Duration::from_micros(80)));
        let mut n = 0;
        while e.pop_ready(late).is_some() {
            n += 1;
        }
        assert_eq!(n, 10);
        assert_eq!(e.backlog(), 0);
    }

    #[test]
    fn delay_is_exact_and_added_to_serialization() {
        let delay = Duration::from_micros(250);
        let (mut e, mut pool) = egress(LinkConfig::new(GBPS, delay));
        e.offer(Duration::from_micros(10), vec![0u8; 125], &mut pool);
        let out = drain(&mut e, &mut pool);
        // 125 B at 1 Gb/s = 1 µs on the line.
        assert_eq!(out[0].0, Duration::from_micros(10 + 1 + 250));
        // Unlimited rate: the delay alone.
        let (mut e, mut pool) = egress(LinkConfig::new(0, delay));
        e.offer(Duration::from_micros(3), vec![1u8; 60], &mut pool);
        assert_eq!(e.pop_ready(Duration::from_micros(252)), None);
        assert_eq!(e.next_deadline(), Some(Duration::from_micros(253)));
        assert_eq!(e.pop_ready(Duration::from_micros(253)), Some(vec![1u8; 60]));
    }

    #[test]
    fn tail_drop_at_byte_and_packet_capacity() {
        // The frame on the line does not count; 4 × 1000 B fit a 4000 B queue, the 6th drops.
        let (mut e, mut pool) = egress(LinkConfig::new(GBPS, Duration::ZERO).with_queue(4000));
        for _ in 0..6 {
            e.offer(Duration::ZERO, vec![0u8; 1000], &mut pool);
        }
        let s = e.stats().link;
        assert_eq!((s.enqueued, s.queue_drops, s.max_queue_bytes), (5, 1, 4000));
        assert_eq!(drain(&mut e, &mut pool).len(), 5);
        // A 3-frame limit drops the 5th even though bytes would fit.
        let config = LinkConfig::new(GBPS, Duration::ZERO)
            .with_queue(1 << 20)
            .with_queue_packets(3);
        let (mut e, mut pool) = egress(config);
        for _ in 0..5 {
            e.offer(Duration::ZERO, vec![0u8; 100], &mut pool);
        }
        let s = e.stats().link;
        assert_eq!((s.queue_drops, s.max_queue_packets), (1, 3));
        // Once drained, the queue takes frames again.
        drain(&mut e, &mut pool);
        e.offer(Duration::from_secs(1), vec![0u8; 100], &mut pool);
        assert_eq!(e.stats().link.queue_drops, 1);
    }

    #[test]
    fn ecn_marks_only_ect_and_only_above_k() {
        let k = 3000;
        let config = LinkConfig::new(GBPS, Duration::ZERO).with_ecn(k);
        let (mut e, mut pool) = egress(config);
        // Frame 1 goes on the line, frames 2..=4 queue 0, 1000, 2000 B ahead of them: no mark.
        // Frame 5 finds 3000 B (not above K): no mark. Frames 6.. find 4000 B+: marked if ECT.
        let tos = [0x02, 0x02, 0x01, 0x02, 0x02, 0x02, 0x00, 0x01, 0x03];
        for t in tos {
            e.offer(Duration::ZERO, ipv4_frame(1000, t), &mut pool);
        }
        assert_eq!(e.stats().link.ecn_marked, 2);
        let out = drain(&mut e, &mut pool);
        let ecn: Vec<u8> = out.iter().map(|(_, f)| f[15] & 3).collect();
        // Not-ECT (frame 7) stays 0 and the already-CE frame 9 is not counted again.
        assert_eq!(ecn, [2, 2, 1, 2, 2, 3, 0, 3, 3]);
        for (_, f) in &out {
            assert_eq!(
                sluice_wire::checksum::checksum(&f[14..34]),
                0,
                "IPv4 checksum"
            );
        }
    }

    #[test]
    fn random_loss_near_configured_rate() {
        let config = LinkConfig::new(0, Duration::ZERO)
            .with_impairment(Impairment::default().with_loss(0.05));
        let (mut e, mut pool) = egress(config);
        let n = 20_000;
        for _ in 0..n {
            e.offer(Duration::ZERO, vec![0u8; 64], &mut pool);
        }
        let s = e.stats().link;
        let out = drain(&mut e, &mut pool).len() as u64;
        assert_eq!(out + s.lost, n);
        assert_eq!(s.lost, s.lost_random);
        let rate = s.lost as f64 / n as f64;
        assert!((0.045..0.055).contains(&rate), "loss rate {rate}");
    }

    #[test]
    fn burst_loss_comes_in_runs() {
        // Mean stationary loss = p_gb / (p_gb + p_bg) = 0.01 / 0.11 ≈ 9 %, in runs of ~10.
        let ge = GilbertElliott {
            p_good_to_bad: 0.01,
            p_bad_to_good: 0.1,
            loss_in_bad: 1.0,
        };
        let config = LinkConfig::new(0, Duration::ZERO)
            .with_impairment(Impairment::default().with_burst_loss(ge));
        let (mut e, mut pool) = egress(config);
        let n = 50_000u32;
        let mut kept = Vec::new();
        for i in 0..n {
            e.offer(Duration::ZERO, i.to_be_bytes().to_vec(), &mut pool);
            if let Some(f) = e.pop_ready(Duration::ZERO) {
                kept.push(u32::from_be_bytes([f[0], f[1], f[2], f[3]]));
            }
        }
        let s = e.stats().link;
        assert_eq!(s.lost, s.lost_burst);
        let rate = f64::from(s.lost as u32) / f64::from(n);
        assert!((0.07..0.11).contains(&rate), "burst loss rate {rate}");
        let gaps = kept.windows(2).filter(|w| w[1] != w[0] + 1).count() as f64;
        let mean_run = s.lost as f64 / gaps;
        assert!(mean_run > 5.0, "mean loss run {mean_run}");
    }

    #[test]
    fn duplication_and_reordering_are_visible() {
        let imp = Impairment::default()
            .with_duplicate(0.1)
            .with_reorder(0.1, Duration::from_micros(100));
        let config = LinkConfig::new(GBPS, Duration::ZERO).with_impairment(imp);
        let (mut e, mut pool) = egress(config);
        let n = 2000u32;
        for i in 0..n {
            // 125 B at 1 Gb/s: one every microsecond.
            e.offer(
                Duration::from_micros(u64::from(i)),
                i.to_be_bytes().to_vec(),
                &mut pool,
            );
        }
        let out: Vec<u32> = drain(&mut e, &mut pool)
            .into_iter()
            .map(|(_, f)| u32::from_be_bytes([f[0], f[1], f[2], f[3]]))
            .collect();
        let s = e.stats().link;
        assert!(s.duplicated > 100 && s.duplicated < 300, "{s:?}");
        assert!(s.reordered > 100 && s.reordered < 300, "{s:?}");
        assert_eq!(out.len() as u64, u64::from(n) + s.duplicated);
        let late = out.windows(2).filter(|w| w[1] < w[0]).count();
        assert!(late > 100, "only {late} frames overtaken");
    }

    #[test]
    fn same_seed_same_outcome() {
        let imp = Impairment::default().with_loss(0.2).with_duplicate(0.2);
        let run = || {
            let config = LinkConfig::new(GBPS, Duration::ZERO).with_impairment(imp.clone());
            let (mut e, mut pool) = egress(config);
            for i in 0..500u32 {
                e.offer(Duration::ZERO, i.to_be_bytes().to_vec(), &mut pool);
            }
            drain(&mut e, &mut pool)
        };
        assert_eq!(run(), run());
    }

    #[test]
    fn delay_line_is_bounded() {
        let config = LinkConfig::new(0, Duration::from_secs(1));
        let mut e = Egress::new(config, ChaCha8Rng::seed_from_u64(1), 10);
        let mut pool = FramePool::default();
        for _ in 0..15 {
            e.offer(Duration::ZERO, vec![0u8; 60], &mut pool);
        }
        assert_eq!(e.stats().delay_line_drops, 5);
        assert_eq!(e.backlog(), 10);
    }
}
