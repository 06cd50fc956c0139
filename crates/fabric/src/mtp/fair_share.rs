//! Per-tenant fair share at ingress on one shared queue (mtp.txt 5.3): the device tracks the
//! traffic classes arriving for an egress port, gives each active one an equal share of the
//! port's capacity, tells senders that share as explicit rate feedback, and enforces it with
//! a token bucket per class: a class out of tokens while the shared queue is above a
//! threshold is over its share, and its packet is dropped (or trimmed).

use std::time::Duration;

/// Most traffic classes tracked per port (a fixed table: no allocation on the data path).
pub const MAX_TRACKED_TCS: usize = 16;

/// Fair-share configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FairShare {
    /// Enforce only while the shared egress queue holds more than this many bytes.
    pub threshold_bytes: usize,
    /// A class is active while it sent within this window.
    pub active_window: Duration,
    /// Depth of each class's token bucket in bytes (the burst a class may send over its
    /// share).
    pub burst_bytes: usize,
}

impl FairShare {
    /// Enforcement above `threshold_bytes` of queue, classes active for 100 us, 16 KB bursts.
    pub fn new(threshold_bytes: usize) -> FairShare {
        FairShare {
            threshold_bytes,
            active_window: Duration::from_micros(100),
            burst_bytes: 16 * 1024,
        }
    }
}

/// One tracked class.
#[derive(Clone, Copy, Debug, Default)]
struct TcSlot {
    tc: u8,
    used: bool,
    /// Last arrival (also when tokens were last refilled).
    last: Duration,
    tokens: f64,
    drops: u64,
}

/// What an arrival found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Share {
    /// The class's share in bit/s (u64::MAX for an unlimited port).
    pub(crate) bps: u64,
    /// Whether the class is over its share (out of tokens).
    pub(crate) over: bool,
}

/// One egress port's classes.
#[derive(Clone, Debug, Default)]
pub(crate) struct PortShare {
    slots: [TcSlot; MAX_TRACKED_TCS],
}

impl PortShare {
    /// Classes active at `now`.
    fn active(&self, now: Duration, window: Duration) -> usize {
        self.slots
            .iter()
            .filter(|s| s.used && now.saturating_sub(s.last) < window)
            .count()
    }

    /// A packet of class `tc` and `len` bytes arrives for a port of `capacity_bps` (0:
    /// unlimited). None when the class table is full of active classes.
    pub(crate) fn arrive(
        &mut self,
        now: Duration,
        tc: u8,
        len: usize,
        capacity_bps: u64,
        cfg: &FairShare,
    ) -> Option<Share> {
        let window = cfg.active_window;
        let i = match self.slots.iter().position(|s| s.used && s.tc == tc) {
            Some(i) => i,
            None => {
                let i = self
                    .slots
                    .iter()
                    .position(|s| !s.used || now.saturating_sub(s.last) >= window)?;
                self.slots[i] = TcSlot {
                    tc,
                    used: true,
                    last: now,
                    tokens: cfg.burst_bytes as f64,
                    drops: 0,
                };
                i
            }
        };
        // A class idle past the window is inactive: it rejoins with a full bucket.
        if now.saturating_sub(self.slots[i].last) >= window {
            self.slots[i].tokens = cfg.burst_bytes as f64;
        }
        let active = self.active(now, window).max(1);
        if capacity_bps == 0 {
            self.slots[i].last = now;
            return Some(Share {
                bps: u64::MAX,
                over: false,
            });
        }
        let bps = capacity_bps / active as u64;
        let slot = &mut self.slots[i];
        let dt = now.saturating_sub(slot.last).as_secs_f64();
        slot.tokens = (slot.tokens + dt * bps as f64 / 8.0).min(cfg.burst_bytes as f64);
        slot.last = now;
        let need = len as f64;
        let over = slot.tokens < need;
        slot.tokens = (slot.tokens - need).max(0.0);
        Some(Share { bps, over })
    }

    /// Counts a packet of class `tc` dropped (or trimmed) as over its share.
    pub(crate) fn count_drop(&mut self, tc: u8) {
        if let Some(s) = self.slots.iter_mut().find(|s| s.used && s.tc == tc) {
            s.drops += 1;
        }
    }

    /// Packets of class `tc` dropped or trimmed as over its share (while it is tracked).
    pub(crate) fn drops(&self, tc: u8) -> u64 {
        self.slots
            .iter()
            .find(|s| s.used && s.tc == tc)
            .map_or(0, |s| s.drops)
    }
}
