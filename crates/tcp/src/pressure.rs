//! The count of bytes all connections buffer, and where it stands against the thresholds
//! of [`MemoryLimits`] (Linux's tcp_mem, Documentation/networking/ip-sysctl.rst). Bytes
//! actually held count, not ring capacity: received and not yet read, received out of
//! order, and sent but not yet acknowledged. Each connection's share is recomputed when one
//! of those changes and the difference applied to the total, so the total never drifts from
//! the sum however a connection ends. What the states do is in control/memory.rs.

use crate::buffer::tx_limit;
use crate::config::{Config, MemoryLimits};

/// Where the bytes buffered by all connections stand against the thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryState {
    /// Below the pressure threshold, or back below the low one since.
    Normal,
    /// Rose above the pressure threshold and has not yet fallen below the low one
    /// (Linux's tcp_memory_pressure): rings do not grow, reads reopen windows only a little.
    Pressure,
    /// Above the high threshold (Linux's hard limit): besides pressure, new connections
    /// and new out-of-order data are refused.
    OverLimit,
}

/// The most a connection's send ring may hold with `open` connections: `tx_limit`, and over
/// the limit only an initial ring's worth (every Linux socket keeps its tcp_wmem minimum
/// over the hard limit, and no more).
#[inline]
pub(crate) fn send_limit(cfg: &Config, open: usize, state: MemoryState) -> usize {
    let limit = tx_limit(cfg, open);
    if state == MemoryState::OverLimit {
        limit.min(cfg.tx_initial())
    } else {
        limit
    }
}

/// What a change of one connection's bytes did to the state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Crossed {
    /// The total rose above the pressure threshold from the normal state.
    pub(crate) pressure: bool,
    /// The total rose above the high threshold.
    pub(crate) over_limit: bool,
}

/// The total and each connection's part of it.
pub(crate) struct BufferedBytes {
    limits: MemoryLimits,
    total: u64,
    /// Bytes counted for each slot; rows are added as slots are first used.
    charged: Vec<u32>,
    state: MemoryState,
}

impl BufferedBytes {
    /// An empty count with room reserved for `slots` connections.
    pub(crate) fn new(limits: MemoryLimits, slots: usize) -> Self {
        BufferedBytes {
            limits,
            total: 0,
            charged: Vec::with_capacity(slots),
            state: MemoryState::Normal,
        }
    }

    /// Bytes buffered by all connections.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Bytes counted for `slot`.
    pub(crate) fn charged(&self, slot: u32) -> u32 {
        self.charged.get(slot as usize).copied().unwrap_or(0)
    }

    /// The state the total is in.
    #[inline]
    pub(crate) fn state(&self) -> MemoryState {
        self.state
    }

    /// Records that `slot` now holds `bytes` and moves the state as the total says: into
    /// pressure above `pressure`, out of it only below `low` (hysteresis, as Linux's
    /// tcp_enter/leave_memory_pressure), over the limit above `high`.
    #[inline]
    pub(crate) fn charge(&mut self, slot: u32, bytes: u32) -> Crossed {
        let s = slot as usize;
        if s >= self.charged.len() {
            if bytes == 0 {
                return Crossed::default();
            }
            // Within the capacity reserved at construction for the table's slots.
            self.charged.resize(s + 1, 0);
        }
        let old = core::mem::replace(&mut self.charged[s], bytes);
        if old == bytes {
            return Crossed::default();
        }
        self.total = self.total - u64::from(old) + u64::from(bytes);
        self.update_state()
    }

    /// Changes what `slot` holds by `delta` (see [`BufferedBytes::charge`]): the fast
    /// path's update, a few instructions while the total is below the pressure threshold.
    #[inline(always)]
    pub(crate) fn add(&mut self, slot: u32, delta: i64) -> Crossed {
        let Some(c) = self.charged.get_mut(slot as usize) else {
            return self.charge(slot, delta.clamp(0, i64::from(u32::MAX)) as u32);
        };
        // Never below 0 or above u32::MAX: a miscount would show in check_invariants.
        let held = (i64::from(*c) + delta).clamp(0, i64::from(u32::MAX)) as u32;
        self.total = self.total - u64::from(*c) + u64::from(held);
        *c = held;
        if self.state == MemoryState::Normal && self.total <= self.limits.pressure as u64 {
            return Crossed::default();
        }
        self.update_state()
    }

    #[cold]
    fn update_state(&mut self) -> Crossed {
        let before = self.state;
        self.state = next_state(&self.limits, self.total, before);
        Crossed::between(before, self.state)
    }
}

/// The state `total` bytes put a count in that was in `before`: into pressure above
/// `pressure`, out of it only below `low` (hysteresis), over the limit above `high`. Shared
/// by the global count and the memory groups' (crate::memory_group).
#[inline]
pub(crate) fn next_state(l: &MemoryLimits, total: u64, before: MemoryState) -> MemoryState {
    if total > l.high as u64 {
        MemoryState::OverLimit
    } else if total > l.pressure as u64 || before != MemoryState::Normal && total >= l.low as u64 {
        MemoryState::Pressure
    } else {
        MemoryState::Normal
    }
}

impl Crossed {
    /// What moving from `before` to `after` crossed.
    #[inline]
    pub(crate) fn between(before: MemoryState, after: MemoryState) -> Crossed {
        Crossed {
            pressure: before == MemoryState::Normal && after != MemoryState::Normal,
            over_limit: before != MemoryState::OverLimit && after == MemoryState::OverLimit,
        }
    }
}

impl MemoryState {
    /// The stricter of two states: a connection in a memory group lives under both its
    /// group's state and the global one.
    #[inline]
    pub(crate) fn worse(self, other: MemoryState) -> MemoryState {
        let rank = |s: MemoryState| match s {
            MemoryState::Normal => 0,
            MemoryState::Pressure => 1,
            MemoryState::OverLimit => 2,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> MemoryLimits {
        MemoryLimits {
            low: 100,
            pressure: 200,
            high: 300,
        }
    }

    #[test]
    fn pressure_begins_above_pressure_and_ends_only_below_low() {
        let mut b = BufferedBytes::new(limits(), 4);
        assert_eq!(b.charge(0, 150), Crossed::default());
        assert_eq!(b.state(), MemoryState::Normal);
        let c = b.charge(1, 60);
        assert!(c.pressure && !c.over_limit);
        assert_eq!(b.state(), MemoryState::Pressure);
        // Falling below the pressure threshold is not enough.
        b.charge(0, 50);
        assert_eq!((b.total(), b.state()), (110, MemoryState::Pressure));
        b.charge(1, 40);
        assert_eq!((b.total(), b.state()), (90, MemoryState::Normal));
    }

    #[test]
    fn over_the_limit_and_back_to_pressure_then_normal() {
        let mut b = BufferedBytes::new(limits(), 4);
        let c = b.charge(3, 301);
        assert!(c.pressure && c.over_limit, "straight past both");
        assert_eq!(b.state(), MemoryState::OverLimit);
        assert_eq!(b.charge(3, 250), Crossed::default());
        assert_eq!(b.state(), MemoryState::Pressure);
        let c = b.charge(2, 60);
        assert!(!c.pressure && c.over_limit, "already under pressure");
        b.charge(2, 0);
        b.charge(3, 0);
        assert_eq!((b.total(), b.state()), (0, MemoryState::Normal));
    }

    #[test]
    fn a_slot_recharged_replaces_its_part_and_an_unused_slot_adds_no_row() {
        let mut b = BufferedBytes::new(limits(), 8);
        b.charge(5, 0);
        assert!(b.charged.is_empty());
        b.charge(5, 10);
        b.charge(5, 30);
        b.charge(2, 5);
        assert_eq!(b.total(), 35);
        b.charge(5, 0);
        assert_eq!(b.total(), 5);
    }
}
