//! How a device picks a port of a route group: ECMP by flow hash, per-packet spraying, an
//! optical switch's time-slotted alternation (mtp.txt 5.1), or MTP's message-aware balancer
//! (mtp.txt 5.2) with its bounded pin table.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::Duration;

/// Default bound of the message balancer's pin table.
pub const DEFAULT_MAX_PINS: usize = 4096;

/// The balancer of a device's route groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Balancer {
    /// ECMP: a flow keeps the member its hash picks (the static switch's own behaviour).
    Hash,
    /// Per-packet round robin over the group, for every frame.
    Spray,
    /// Every frame of every protocol takes member (now / period) % n: the optical
    /// first-hop switch of mtp.txt 5.1 (Figure 5).
    Alternate {
        /// How long each member is connected.
        period: Duration,
    },
    /// mtp.txt 5.2: an MTP message is pinned at its first packet to the least-loaded
    /// allowed member (queued bytes plus the bytes of messages pinned there still
    /// expected; ties go to the first member counted from the message id); non-MTP frames
    /// by hash.
    Message,
}

/// Names a message: (source address, source port, message id), as the transport does.
pub(crate) type MessageKey = (Ipv4Addr, u16, u32);

/// A message pinned to a port.
#[derive(Clone, Copy, Debug)]
struct Pin {
    port: usize,
    /// Bytes of the message not yet seen (its expected load on `port`).
    remaining: u64,
    /// When a packet of it last passed.
    last: Duration,
}

/// The message balancer's state: a bounded pin table and the expected bytes per port.
#[derive(Debug)]
pub(crate) struct PinTable {
    pins: HashMap<MessageKey, Pin>,
    max: usize,
    /// Per port: bytes of pinned messages still expected (the "message size as load").
    expected: Vec<u64>,
}

/// What looking a message up did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PinOutcome {
    /// Already pinned: its port.
    Hit(usize),
    /// Newly pinned; `evicted` when the oldest pin made room.
    New { port: usize, evicted: bool },
}

impl PinTable {
    /// An empty table of at most `max` pins over `ports` ports (allocated now, so the data
    /// path does not allocate).
    pub(crate) fn new(max: usize, ports: usize) -> Self {
        let max = max.max(1);
        PinTable {
            pins: HashMap::with_capacity(max),
            max,
            expected: vec![0; ports],
        }
    }

    /// Grows the per-port load table to `ports` (configuration time).
    pub(crate) fn resize(&mut self, ports: usize) {
        if self.expected.len() < ports {
            self.expected.resize(ports, 0);
        }
    }

    /// Bytes expected on `port` from pinned messages.
    pub(crate) fn expected(&self, port: usize) -> u64 {
        self.expected.get(port).copied().unwrap_or(0)
    }

    /// The port of message `key`: its pin, or else `pick(expected load per port)` pins it
    /// (evicting the least recently used pin when the table is full). `per_packet` bytes of
    /// its expected load move to the queue as each packet passes.
    pub(crate) fn lookup(
        &mut self,
        now: Duration,
        key: MessageKey,
        msg_len: u32,
        per_packet: u64,
        pick: impl FnOnce(&[u64]) -> usize,
    ) -> PinOutcome {
        if let Some(pin) = self.pins.get_mut(&key) {
            pin.last = now;
            let seen = per_packet.min(pin.remaining);
            pin.remaining -= seen;
            if let Some(e) = self.expected.get_mut(pin.port) {
                *e = e.saturating_sub(seen);
            }
            return PinOutcome::Hit(pin.port);
        }
        let mut evicted = false;
        if self.pins.len() >= self.max {
            let oldest = self
                .pins
                .iter()
                .min_by_key(|(k, p)| (p.last, **k))
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                if let Some(p) = self.pins.remove(&k) {
                    if let Some(e) = self.expected.get_mut(p.port) {
                        *e = e.saturating_sub(p.remaining);
                    }
                }
                evicted = true;
            }
        }
        let port = pick(&self.expected);
        let remaining = u64::from(msg_len).saturating_sub(per_packet);
        if let Some(e) = self.expected.get_mut(port) {
            *e = e.saturating_add(remaining);
        }
        self.pins.insert(
            key,
            Pin {
                port,
                remaining,
                last: now,
            },
        );
        PinOutcome::New { port, evicted }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: u32) -> MessageKey {
        (Ipv4Addr::new(10, 0, 0, 1), 7, id)
    }

    #[test]
    fn pins_are_bounded_and_the_oldest_goes() {
        let mut t = PinTable::new(2, 2);
        let t0 = Duration::ZERO;
        let at = Duration::from_micros;
        assert_eq!(
            t.lookup(t0, key(1), 3000, 1000, |_| 0),
            PinOutcome::New {
                port: 0,
                evicted: false
            }
        );
        assert_eq!(t.expected(0), 2000);
        assert_eq!(
            t.lookup(at(1), key(2), 1000, 1000, |_| 1),
            PinOutcome::New {
                port: 1,
                evicted: false
            }
        );
        assert_eq!(
            t.lookup(at(2), key(1), 3000, 1000, |_| 1),
            PinOutcome::Hit(0)
        );
        assert_eq!(t.expected(0), 1000);
        // Full: message 2 (last seen at 1 us) is the oldest and goes.
        assert_eq!(
            t.lookup(at(3), key(3), 500, 500, |_| 1),
            PinOutcome::New {
                port: 1,
                evicted: true
            }
        );
        assert_eq!(t.pins.len(), 2);
        assert!(matches!(
            t.lookup(at(4), key(2), 1000, 1000, |_| 0),
            PinOutcome::New { evicted: true, .. }
        ));
    }
}
