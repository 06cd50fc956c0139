//! An optional record of everything that happened to frames on links.

use crate::{Direction, Instant, LinkId};

/// What happened to a frame on a link direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TraceKind {
    /// Accepted into the egress queue (or straight onto the wire).
    Enqueued,
    /// Tail-dropped because the queue was full.
    QueueDrop,
    /// Marked CE at enqueue.
    EcnMarked,
    /// Lost at transmit time (random or burst loss).
    Lost,
    /// One bit flipped at transmit time.
    Corrupted,
    /// A second copy was scheduled for delivery.
    Duplicated,
    /// Held back by the reorder delay.
    Reordered,
    /// Arrived at the far end.
    Delivered,
}

/// One entry of the simulator's trace (see [`Sim::set_trace`](crate::Sim::set_trace)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceEvent {
    /// Virtual time of the event.
    pub time: Instant,
    /// The link the frame was on.
    pub link: LinkId,
    /// Which direction of the link.
    pub direction: Direction,
    /// What happened.
    pub kind: TraceKind,
    /// Frame length in bytes.
    pub len: usize,
}
