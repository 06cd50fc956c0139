//! The name of an application's bound port (shared by the stack and its message table).

/// An application's bound port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EndpointId(pub u32);
