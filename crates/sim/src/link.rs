//! Links: the two directions of a full-duplex link. Each direction is a
//! [`sluice_fabric::Channel`], the model the software switch runs too.

/// One direction of a full-duplex link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// From the link's first node (`a` in [`Sim::connect`](crate::Sim::connect)) to its second.
    AToB,
    /// From the link's second node to its first.
    BToA,
}

impl Direction {
    /// The direction with the given index.
    pub(crate) fn from_index(i: usize) -> Self {
        if i == 0 {
            Direction::AToB
        } else {
            Direction::BToA
        }
    }
}
