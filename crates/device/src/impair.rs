//! Fault injection on the engine's side of the wire: [`Impaired`] wraps any [`Device`] and
//! drops or reorders frames, seeded, in each direction.
//!
//! The kernel here has no netem, so interoperability tests impair the engine's own device.
//! Reordering holds a frame back in a bounded, preallocated hold buffer and releases it after
//! the next frame has passed it (or, if none comes, at the next poll), so a reordered frame
//! is displaced by at least one frame and never stuck. When the hold buffer is full, or a
//! frame is larger than a hold slot, the frame goes through unimpaired. Nothing is allocated
//! per packet.
//!
//! Loss is injected per wire frame, so an impaired device offers no segmentation offload
//! (its `max_tso_frame` is its `max_frame`): the engine sends MTU-sized frames through it.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_wire::EthernetAddress;

use crate::checksum::complete_partial_checksum;
use crate::error::DeviceError;
use crate::{Device, DeviceStats, RxMeta, TxFrame};

/// Loss and reordering probabilities for one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Impairment {
    /// Probability (0..=1) that a frame is dropped.
    pub loss: f64,
    /// Probability (0..=1) that a frame is held back and delivered after the next one.
    pub reorder: f64,
}

impl Impairment {
    /// Whether this direction is left alone.
    pub fn is_none(&self) -> bool {
        self.loss <= 0.0 && self.reorder <= 0.0
    }
}

/// Configuration of an [`Impaired`] device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImpairConfig {
    /// Seed of the random choices (the same seed and frame sequence give the same choices).
    pub seed: u64,
    /// Impairment of received frames.
    pub rx: Impairment,
    /// Impairment of transmitted frames.
    pub tx: Impairment,
    /// Frames each direction may hold back for reordering at once.
    pub hold: usize,
    /// Size of a receive hold slot; larger received frames are never held.
    pub rx_slot: usize,
}

impl Default for ImpairConfig {
    fn default() -> Self {
        ImpairConfig {
            seed: 1,
            rx: Impairment::default(),
            tx: Impairment::default(),
            hold: 8,
            rx_slot: 65_536 + 18,
        }
    }
}

impl ImpairConfig {
    /// The same loss and reordering probabilities in both directions.
    pub fn symmetric(seed: u64, loss: f64, reorder: f64) -> Self {
        let both = Impairment { loss, reorder };
        ImpairConfig {
            seed,
            rx: both,
            tx: both,
            ..ImpairConfig::default()
        }
    }

    fn check(&self) -> Result<(), DeviceError> {
        let ok = |p: f64| (0.0..=1.0).contains(&p);
        if ![self.rx.loss, self.rx.reorder, self.tx.loss, self.tx.reorder]
            .into_iter()
            .all(ok)
        {
            return Err(DeviceError::InvalidConfig(
                "loss and reorder probabilities must be within 0..=1",
            ));
        }
        if self.hold == 0 || self.hold > 4096 || self.rx_slot > (1 << 20) {
            return Err(DeviceError::InvalidConfig(
                "impairment hold must be 1..=4096 frames of at most 1 MiB",
            ));
        }
        Ok(())
    }
}

/// Counters of what an [`Impaired`] device did to the traffic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImpairStats {
    /// Received frames dropped.
    pub rx_dropped: u64,
    /// Received frames held back and delivered late.
    pub rx_reordered: u64,
    /// Transmitted frames dropped.
    pub tx_dropped: u64,
    /// Transmitted frames held back and sent late.
    pub tx_reordered: u64,
    /// Frames that drew reordering but went through in order (hold full or frame too large).
    pub hold_full: u64,
}

/// A FIFO of preallocated frame slots.
struct Hold {
    buf: Box<[u8]>,
    lens: Box<[usize]>,
    slot: usize,
    head: usize,
    len: usize,
    /// The oldest `passed` held frames have had a later frame go out before them.
    passed: usize,
}

impl Hold {
    fn new(count: usize, slot: usize) -> Hold {
        Hold {
            buf: vec![0u8; count * slot].into_boxed_slice(),
            lens: vec![0usize; count].into_boxed_slice(),
            slot,
            head: 0,
            len: 0,
            passed: 0,
        }
    }

    fn fits(&self, len: usize) -> bool {
        self.len < self.lens.len() && len <= self.slot
    }

    fn push(&mut self, frame: &[u8]) {
        let i = (self.head + self.len) % self.lens.len();
        self.buf[i * self.slot..i * self.slot + frame.len()].copy_from_slice(frame);
        self.lens[i] = frame.len();
        self.len += 1;
    }

    fn front(&self) -> &[u8] {
        let i = self.head;
        &self.buf[i * self.slot..i * self.slot + self.lens[i]]
    }

    fn pop(&mut self) {
        self.head = (self.head + 1) % self.lens.len();
        self.len -= 1;
        self.passed = self.passed.saturating_sub(1);
    }
}

/// A device that drops and reorders frames on the way in and out (see the module docs).
pub struct Impaired<D: Device> {
    inner: D,
    config: ImpairConfig,
    rng: ChaCha8Rng,
    rx_hold: Hold,
    rx_hold_meta: Box<[RxMeta]>,
    tx_hold: Hold,
    stats: ImpairStats,
}

impl<D: Device> std::fmt::Debug for Impaired<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Impaired")
            .field("config", &self.config)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Draws whether an event of probability `p` happens (no draw at all for 0, so an
/// unimpaired direction does not shift the other direction's choices).
fn draw(rng: &mut ChaCha8Rng, p: f64) -> bool {
    p > 0.0 && rng.gen_bool(p)
}

impl<D: Device> Impaired<D> {
    /// Wraps `inner`; the hold buffers are allocated here, once.
    pub fn new(inner: D, config: ImpairConfig) -> Result<Self, DeviceError> {
        config.check()?;
        let tx_slot = inner.max_frame();
        Ok(Impaired {
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            rx_hold: Hold::new(config.hold, config.rx_slot),
            rx_hold_meta: vec![
                RxMeta {
                    checksum: crate::RxChecksum::Unverified
                };
                config.hold
            ]
            .into_boxed_slice(),
            tx_hold: Hold::new(config.hold, tx_slot),
            inner,
            config,
            stats: ImpairStats::default(),
        })
    }

    /// What was dropped and reordered so far.
    pub fn impair_stats(&self) -> ImpairStats {
        self.stats
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// Unwraps the device (held frames are discarded).
    pub fn into_inner(self) -> D {
        self.inner
    }

    /// Queues the oldest `count` held transmit frames on the inner device.
    fn release_tx(&mut self, count: usize) -> Result<(), DeviceError> {
        for _ in 0..count.min(self.tx_hold.len) {
            let hold = &mut self.tx_hold;
            let mut queued = false;
            let mut put = |buf: &mut [u8]| {
                let frame = hold.front();
                buf[..frame.len()].copy_from_slice(frame);
                queued = true;
                Some(TxFrame::plain(frame.len()))
            };
            if !self.inner.transmit_with(&mut put)? {
                // Every slot is taken: send them and try once more.
                self.inner.flush()?;
                self.inner.transmit_with(&mut put)?;
            }
            if !queued {
                break;
            }
            self.tx_hold.pop();
        }
        Ok(())
    }
}

/// Delivers every held receive frame to `f`.
fn release_rx(hold: &mut Hold, metas: &[RxMeta], f: &mut dyn FnMut(&[u8], RxMeta)) {
    while hold.len > 0 {
        f(hold.front(), metas[hold.head]);
        hold.pop();
    }
}

impl<D: Device> Device for Impaired<D> {
    fn receive(&mut self, f: &mut dyn FnMut(&[u8], RxMeta)) -> Result<usize, DeviceError> {
        // Transmit frames held at the last burst's end have waited a whole loop iteration.
        if self.tx_hold.len > 0 {
            self.release_tx(self.tx_hold.len)?;
            self.inner.flush()?;
        }
        let Impaired {
            inner,
            config,
            rng,
            rx_hold,
            rx_hold_meta,
            stats,
            ..
        } = self;
        let mut delivered = 0;
        let received = inner.receive(&mut |frame, meta| {
            if draw(rng, config.rx.loss) {
                stats.rx_dropped += 1;
                return;
            }
            if draw(rng, config.rx.reorder) {
                if rx_hold.fits(frame.len()) {
                    let i = (rx_hold.head + rx_hold.len) % rx_hold_meta.len();
                    rx_hold_meta[i] = meta;
                    rx_hold.push(frame);
                    stats.rx_reordered += 1;
                    return;
                }
                stats.hold_full += 1;
            }
            f(frame, meta);
            delivered += 1;
            // Held frames go right after the frame that passed them.
            delivered += rx_hold.len;
            release_rx(rx_hold, rx_hold_meta, f);
        })?;
        if received == 0 && rx_hold.len > 0 {
            // Nothing came to pass them: deliver them now rather than hold them forever.
            delivered += rx_hold.len;
            release_rx(rx_hold, rx_hold_meta, f);
        }
        Ok(delivered)
    }

    fn transmit_with(
        &mut self,
        f: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<bool, DeviceError> {
        let Impaired {
            inner,
            config,
            rng,
            tx_hold,
            stats,
            ..
        } = self;
        let mut went_out = false;
        let free = inner.transmit_with(&mut |buf| {
            let frame = f(buf)?;
            let len = frame.len;
            if len == 0 || len > buf.len() || frame.gso_size != 0 {
                // Let the inner device judge it (nothing queued, FrameTooLong, no offload:
                // loss is injected per wire segment, so large segments are not taken here).
                return Some(frame);
            }
            if draw(rng, config.tx.loss) {
                stats.tx_dropped += 1;
                return None;
            }
            if draw(rng, config.tx.reorder) {
                // A held frame goes out later as a plain one: finish its checksum now.
                if tx_hold.fits(len)
                    && (!frame.csum_partial || complete_partial_checksum(&mut buf[..len]))
                {
                    tx_hold.push(&buf[..len]);
                    stats.tx_reordered += 1;
                    return None;
                }
                stats.hold_full += 1;
            }
            went_out = true;
            Some(frame)
        })?;
        if went_out {
            // Every frame held so far has now been passed by this one.
            self.tx_hold.passed = self.tx_hold.len;
        }
        Ok(free)
    }

    fn flush(&mut self) -> Result<(), DeviceError> {
        // Held frames that a later frame has passed go out behind it; the rest wait for the
        // next frame or the next receive poll.
        self.release_tx(self.tx_hold.passed)?;
        self.inner.flush()
    }

    fn wait(&mut self, timeout: Option<Duration>) -> Result<(), DeviceError> {
        if self.rx_hold.len > 0 || self.tx_hold.len > 0 {
            // The next receive releases them; do not sleep on them.
            return Ok(());
        }
        self.inner.wait(timeout)
    }

    fn wait_also(
        &mut self,
        extra: std::os::fd::BorrowedFd<'_>,
        timeout: Option<Duration>,
    ) -> Result<(), DeviceError> {
        if self.rx_hold.len > 0 || self.tx_hold.len > 0 {
            return Ok(());
        }
        self.inner.wait_also(extra, timeout)
    }

    fn max_frame(&self) -> usize {
        self.inner.max_frame()
    }

    fn mac(&self) -> EthernetAddress {
        self.inner.mac()
    }

    fn stats(&self) -> DeviceStats {
        let mut s = self.inner.stats();
        s.impaired_rx_dropped += self.stats.rx_dropped;
        s.impaired_rx_reordered += self.stats.rx_reordered;
        s.impaired_tx_dropped += self.stats.tx_dropped;
        s.impaired_tx_reordered += self.stats.tx_reordered;
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{pair, PairConfig, PairEnd};

    /// A 60-byte frame carrying `i` in its first four bytes.
    fn frame(i: u32) -> [u8; 60] {
        let mut f = [0u8; 60];
        f[..4].copy_from_slice(&i.to_be_bytes());
        f
    }

    fn send_all(dev: &mut impl Device, range: std::ops::Range<u32>) {
        for i in range {
            while !dev
                .transmit_with(&mut |buf| {
                    buf[..60].copy_from_slice(&frame(i));
                    Some(60.into())
                })
                .unwrap()
            {
                dev.flush().unwrap();
            }
        }
        dev.flush().unwrap();
    }

    fn receive_all(dev: &mut impl Device) -> Vec<u32> {
        let mut out = Vec::new();
        // A few empty polls release whatever is still held.
        let mut idle = 0;
        while idle < 3 {
            let n = dev
                .receive(&mut |f, _| out.push(u32::from_be_bytes(f[..4].try_into().unwrap())))
                .unwrap();
            idle = if n == 0 { idle + 1 } else { 0 };
        }
        out
    }

    fn big_pair() -> (PairEnd, PairEnd) {
        pair(PairConfig {
            capacity: 20_000,
            ..PairConfig::default()
        })
        .unwrap()
    }

    fn displaced(got: &[u32]) -> usize {
        got.windows(2).filter(|w| w[0] > w[1]).count()
    }

    #[test]
    fn no_impairment_is_transparent() {
        let (a, mut b) = big_pair();
        let mut a = Impaired::new(a, ImpairConfig::default()).unwrap();
        send_all(&mut a, 0..1000);
        assert_eq!(receive_all(&mut b), (0..1000).collect::<Vec<_>>());
        assert_eq!(a.impair_stats(), ImpairStats::default());
        assert_eq!(a.stats().tx_frames, 1000);
    }

    #[test]
    fn rx_loss_drops_about_the_configured_share() {
        let (mut a, b) = big_pair();
        let config = ImpairConfig {
            seed: 7,
            rx: Impairment {
                loss: 0.01,
                reorder: 0.0,
            },
            ..ImpairConfig::default()
        };
        let mut b = Impaired::new(b, config).unwrap();
        send_all(&mut a, 0..10_000);
        let got = receive_all(&mut b);
        let dropped = b.impair_stats().rx_dropped as usize;
        assert_eq!(got.len() + dropped, 10_000);
        assert!((50..200).contains(&dropped), "dropped {dropped}");
        // What arrives is in order and each frame once.
        assert!(got.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(b.stats().impaired_rx_dropped, dropped as u64);
    }

    #[test]
    fn tx_loss_drops_about_the_configured_share() {
        let (a, mut b) = big_pair();
        let config = ImpairConfig {
            seed: 8,
            tx: Impairment {
                loss: 0.05,
                reorder: 0.0,
            },
            ..ImpairConfig::default()
        };
        let mut a = Impaired::new(a, config).unwrap();
        send_all(&mut a, 0..10_000);
        let got = receive_all(&mut b);
        let dropped = a.impair_stats().tx_dropped as usize;
        assert_eq!(got.len() + dropped, 10_000);
        assert!((350..650).contains(&dropped), "dropped {dropped}");
        assert!(got.windows(2).all(|w| w[0] < w[1]));
    }

    /// Reordered but complete: every frame exactly once, some out of order.
    fn assert_permutation(got: &mut [u32], n: u32) {
        got.sort_unstable();
        assert_eq!(got, (0..n).collect::<Vec<_>>().as_slice());
    }

    #[test]
    fn rx_reordering_delivers_every_frame_once_some_late() {
        let (mut a, b) = big_pair();
        let config = ImpairConfig {
            seed: 9,
            rx: Impairment {
                loss: 0.0,
                reorder: 0.02,
            },
            hold: 4,
            ..ImpairConfig::default()
        };
        let mut b = Impaired::new(b, config).unwrap();
        send_all(&mut a, 0..10_000);
        let mut got = receive_all(&mut b);
        let reordered = b.impair_stats().rx_reordered as usize;
        assert!((100..300).contains(&reordered), "reordered {reordered}");
        assert!(displaced(&got) > 100);
        assert_permutation(&mut got, 10_000);
    }

    #[test]
    fn tx_reordering_sends_every_frame_once_some_late() {
        let (a, mut b) = big_pair();
        let config = ImpairConfig {
            seed: 10,
            tx: Impairment {
                loss: 0.0,
                reorder: 0.02,
            },
            ..ImpairConfig::default()
        };
        let mut a = Impaired::new(a, config).unwrap();
        send_all(&mut a, 0..10_000);
        // A receive poll on the sender releases what is still held at the burst's end.
        a.receive(&mut |_, _| {}).unwrap();
        let mut got = receive_all(&mut b);
        let reordered = a.impair_stats().tx_reordered as usize;
        assert!((100..300).contains(&reordered), "reordered {reordered}");
        assert!(displaced(&got) > 100);
        assert_permutation(&mut got, 10_000);
        assert_eq!(a.stats().tx_frames, 10_000);
    }

    #[test]
    fn a_held_frame_is_never_stuck() {
        let (mut a, b) = big_pair();
        let config = ImpairConfig {
            seed: 11,
            rx: Impairment {
                loss: 0.0,
                reorder: 1.0,
            },
            hold: 2,
            ..ImpairConfig::default()
        };
        let mut b = Impaired::new(b, config).unwrap();
        send_all(&mut a, 0..1);
        // Held on the first poll; wait() does not sleep on it; the next poll delivers it.
        let mut got = Vec::new();
        assert_eq!(b.receive(&mut |f, _| got.push(f[3])).unwrap(), 0);
        let start = std::time::Instant::now();
        b.wait(Some(Duration::from_secs(5))).unwrap();
        assert!(start.elapsed() < Duration::from_secs(1));
        assert_eq!(b.receive(&mut |f, _| got.push(f[3])).unwrap(), 1);
        assert_eq!(got, vec![0]);
        // With the hold full, frames pass straight through (counted).
        send_all(&mut a, 1..5);
        let mut got = receive_all(&mut b);
        got.sort_unstable();
        assert_eq!(got, vec![1, 2, 3, 4]);
        assert_eq!(b.impair_stats().hold_full, 1);
    }

    #[test]
    fn same_seed_same_choices_and_bad_config_refused() {
        let run = |seed| {
            let (mut a, b) = big_pair();
            let mut b = Impaired::new(b, ImpairConfig::symmetric(seed, 0.05, 0.05)).unwrap();
            send_all(&mut a, 0..2000);
            receive_all(&mut b)
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
        let (a, _b) = big_pair();
        assert!(matches!(
            Impaired::new(a, ImpairConfig::symmetric(1, 1.5, 0.0)),
            Err(DeviceError::InvalidConfig(_))
        ));
    }
}
