//! The names of the hook points (hooks.rs has what runs there): a leaf both the hooks and
//! the modules they run name.

use std::fmt;

/// A named place in the path of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HookPoint {
    /// Received frames, before classification.
    Ingress,
    /// Frames handed to the device.
    Egress,
    /// Segments of established connections, after classification and before the TCP
    /// core's protocol stage (the frame as at ingress).
    Established,
}

impl HookPoint {
    /// The point's name in docs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            HookPoint::Ingress => "ingress",
            HookPoint::Egress => "egress",
            HookPoint::Established => "established",
        }
    }
}

impl fmt::Display for HookPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
