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
}

/// A listener handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ListenerId {
    pub(crate) index: u16,
    pub(crate) port: u16,
}

impl ListenerId {
    /// The listening port.
    pub fn port(&self) -> u16 {
        self.port
    }
}
