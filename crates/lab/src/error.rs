//! Why the lab could not be built, torn down or used.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why a lab operation failed.
#[derive(Debug)]
pub enum LabError {
    /// The process is not root; network namespaces need root (CAP_SYS_ADMIN and CAP_NET_ADMIN).
    NotRoot {
        /// The effective user id.
        euid: u32,
    },
    /// The kernel refused a lab command for lack of privilege although we are root (e.g. in a container).
    PermissionDenied {
        /// The command line that was refused.
        command: String,
        /// What it printed on standard error.
        stderr: String,
    },
    /// A tool the lab drives is not installed (scripts/setup.sh installs it).
    MissingTool {
        /// The program name, e.g. "ip".
        tool: &'static str,
        /// The Debian package that provides it.
        package: &'static str,
    },
    /// A command ran and failed.
    Command {
        /// The command line.
        command: String,
        /// Its exit code, or None if a signal ended it.
        code: Option<i32>,
        /// What it printed on standard error.
        stderr: String,
    },
    /// A command could not be started.
    Spawn {
        /// The command line.
        command: String,
        /// Why it could not be started.
        source: io::Error,
    },
    /// A namespace named in a call is not one of the lab's.
    UnknownNamespace(String),
    /// An argument would be unsafe to pass on (empty, or starts with '-' where a name is expected).
    InvalidArgument(String),
    /// The lab lock file could not be opened or locked.
    Lock {
        /// The lock file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A packet socket the lab opened itself (the SYN flood's) failed.
    Device(sluice_device::DeviceError),
    /// A thread the lab started (the SYN flood's) panicked.
    Panicked(&'static str),
    /// A file the lab reads or writes itself (/proc/sys, its saved settings) failed.
    Io {
        /// What it was doing.
        what: String,
        /// Why it failed.
        source: io::Error,
    },
}

impl fmt::Display for LabError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LabError::NotRoot { euid } => write!(
                f,
                "the lab needs root (network namespaces, veth pairs, bridges); running as uid \
                 {euid}: rerun with sudo"
            ),
            LabError::PermissionDenied { command, stderr } => write!(
                f,
                "permission denied running `{command}` (needs CAP_SYS_ADMIN and CAP_NET_ADMIN): \
                 {}",
                stderr.trim()
            ),
            LabError::MissingTool { tool, package } => write!(
                f,
                "`{tool}` is not installed (apt-get install {package}, or run scripts/setup.sh)"
            ),
            LabError::Command {
                command,
                code,
                stderr,
            } => {
                match code {
                    Some(c) => write!(f, "`{command}` failed with exit code {c}")?,
                    None => write!(f, "`{command}` was killed by a signal")?,
                }
                if !stderr.trim().is_empty() {
                    write!(f, ": {}", stderr.trim())?;
                }
                Ok(())
            }
            LabError::Spawn { command, source } => {
                write!(f, "cannot start `{command}`: {source}")
            }
            LabError::UnknownNamespace(ns) => write!(
                f,
                "{ns:?} is not a lab namespace (sluice-a, sluice-b, sluice-k, sluice-e)"
            ),
            LabError::InvalidArgument(why) => write!(f, "invalid lab argument: {why}"),
            LabError::Lock { path, source } => {
                write!(f, "cannot lock the lab ({}): {source}", path.display())
            }
            LabError::Device(e) => write!(f, "{e}"),
            LabError::Panicked(what) => write!(f, "{what} panicked"),
            LabError::Io { what, source } => write!(f, "cannot {what}: {source}"),
        }
    }
}

impl std::error::Error for LabError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LabError::Spawn { source, .. }
            | LabError::Lock { source, .. }
            | LabError::Io { source, .. } => Some(source),
            LabError::Device(e) => Some(e),
            _ => None,
        }
    }
}

impl From<sluice_device::DeviceError> for LabError {
    fn from(e: sluice_device::DeviceError) -> Self {
        LabError::Device(e)
    }
}
