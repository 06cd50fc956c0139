//! Handles the application holds: connections and listeners.

/// A connection handle. Stale handles (to a freed slot) are refused, never misdirected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnId {
    pub(crate) slot: u32,
    pub(crate) generation: u32,
}

impl ConnId {
    /// The connection's slot index (stable for its lifetime).
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// Its slot's generation: with the slot, it names this connection and no later one.
    pub fn generation(&self) -> u32 {
        self.generation
    }
}

/// A listener handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ListenerId {
    pub(crate) index: u16,
    pub(crate) port: u16,
    /// Which listener of those that held the index: a handle outliving its listener must
    /// not reach a later one on the same index and port.
    pub(crate) generation: u32,
}

impl ListenerId {
    /// The listening port.
    pub fn port(&self) -> u16 {
        self.port
    }
}
