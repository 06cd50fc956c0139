//! Time as every sans-IO core here takes it: passed in, never read from a clock.

/// Time in nanoseconds, passed in by the caller.
pub type Nanos = u64;
