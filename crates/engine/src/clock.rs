//! The engine's clock as the core's time: nanoseconds since the engine started, read from the
//! monotonic OS clock, or virtual time shared with a simulated wire (`--backend sim`), which
//! only the wire advances so that a run is deterministic and as fast as the CPU allows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice_tcp::Instant;

/// Where the time comes from.
#[derive(Clone, Debug)]
enum Source {
    /// The monotonic OS clock since this epoch.
    Real(std::time::Instant),
    /// Virtual nanoseconds, shared by every clone; advanced by the simulated wire.
    Virtual(Arc<AtomicU64>),
}

/// Maps the monotonic OS clock, or a shared virtual time, onto [`Instant`].
#[derive(Clone, Debug)]
pub struct Clock {
    source: Source,
}

impl Clock {
    /// A real clock whose epoch is now.
    pub fn start() -> Self {
        Clock {
            source: Source::Real(std::time::Instant::now()),
        }
    }

    /// A virtual clock at time zero; clones share it and only [`Clock::advance_to`] moves it.
    pub fn virtual_time() -> Self {
        Clock {
            source: Source::Virtual(Arc::new(AtomicU64::new(0))),
        }
    }

    /// Whether this is a virtual clock (time stands still while the engine polls).
    pub fn is_virtual(&self) -> bool {
        matches!(self.source, Source::Virtual(_))
    }

    /// The current time.
    #[inline]
    pub fn now(&self) -> Instant {
        match &self.source {
            Source::Real(epoch) => Instant::from_nanos(epoch.elapsed().as_nanos() as u64),
            // Relaxed: one thread drives both the engine and the wire; the atomic only makes
            // the shared handle Send + Sync.
            Source::Virtual(nanos) => Instant::from_nanos(nanos.load(Ordering::Relaxed)),
        }
    }

    /// Moves a virtual clock forward to `t` (never backward); a real clock ignores it.
    pub fn advance_to(&self, t: Instant) {
        if let Source::Virtual(nanos) = &self.source {
            nanos.fetch_max(t.as_nanos(), Ordering::Relaxed);
        }
    }

    /// How long from now until `t` (zero if it has passed), for computing sleep lengths.
    pub fn until(&self, t: Instant) -> Duration {
        t.saturating_since(self.now())
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::start()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_clock_is_shared_and_monotonic() {
        let a = Clock::virtual_time();
        let b = a.clone();
        assert!(a.is_virtual());
        assert_eq!(a.now(), Instant::ZERO);
        b.advance_to(Instant::from_millis(5));
        assert_eq!(a.now(), Instant::from_millis(5));
        // Never backward.
        a.advance_to(Instant::from_millis(2));
        assert_eq!(b.now(), Instant::from_millis(5));
        assert_eq!(a.until(Instant::from_millis(7)), Duration::from_millis(2));
        assert_eq!(a.until(Instant::from_millis(1)), Duration::ZERO);
    }

    #[test]
    fn real_clock_ignores_advance() {
        let c = Clock::start();
        assert!(!c.is_virtual());
        c.advance_to(Instant::from_nanos(u64::MAX / 2));
        assert!(c.now() < Instant::from_nanos(u64::MAX / 2));
    }
}
