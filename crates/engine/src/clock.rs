//! The real clock, as the core's virtual time: nanoseconds since the engine started.

use sluice_tcp::Instant;

/// Maps the monotonic OS clock onto [`Instant`].
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    epoch: std::time::Instant,
}

impl Clock {
    /// A clock whose epoch is now.
    pub fn start() -> Self {
        Clock {
            epoch: std::time::Instant::now(),
        }
    }

    /// The current time.
    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    /// The OS instant corresponding to a core instant (for computing sleep lengths).
    pub fn until(&self, t: Instant) -> std::time::Duration {
        let now = self.now();
        t.saturating_since(now)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::start()
    }
}
