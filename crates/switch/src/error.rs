//! Errors of the switch.

use std::fmt;

use sluice_device::DeviceError;

use crate::ConfigError;

/// Everything that stops the switch from starting or running.
#[derive(Debug)]
pub enum SwitchError {
    /// A port or parameter was refused.
    Config(ConfigError),
    /// A switch needs 2 to [`crate::MAX_PORTS`] ports.
    PortCount(usize),
    /// A port's device could not be opened or failed.
    Device {
        /// `NETNS:IFACE`.
        port: String,
        /// What the device said.
        source: DeviceError,
    },
    /// Sleeping on the ports failed.
    Poll(nix::errno::Errno),
}

impl fmt::Display for SwitchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SwitchError::Config(e) => write!(f, "{e}"),
            SwitchError::PortCount(n) => write!(
                f,
                "a switch needs 2 to {} ports, {n} given",
                crate::MAX_PORTS
            ),
            SwitchError::Device { port, source } => write!(f, "port {port}: {source}"),
            SwitchError::Poll(e) => write!(f, "waiting on the ports: {e}"),
        }
    }
}

impl std::error::Error for SwitchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SwitchError::Config(e) => Some(e),
            SwitchError::Device { source, .. } => Some(source),
            SwitchError::Poll(e) => Some(e),
            SwitchError::PortCount(_) => None,
        }
    }
}

impl From<ConfigError> for SwitchError {
    fn from(e: ConfigError) -> Self {
        SwitchError::Config(e)
    }
}
