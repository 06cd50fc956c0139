//! What a role's step reports, and the counters each role keeps.

/// What one step of a role did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Units of work done (batches moved, frames handled, timers run); 0 = idle.
    pub work: usize,
}

impl Progress {
    /// Whether the step did anything.
    pub fn busy(&self) -> bool {
        self.work > 0
    }
}

/// Counters of one role.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoleCounters {
    /// Frames handled.
    pub frames: u64,
    /// Batches handled.
    pub batches: u64,
    /// Batches that arrived ahead of an earlier one and waited in a reorder buffer.
    pub reorder_holds: u64,
    /// Batches a reorder buffer refused (duplicate or beyond its window).
    pub reorder_refused: u64,
    /// Frames dropped (bad checksum, no free batch, too long).
    pub drops: u64,
}
