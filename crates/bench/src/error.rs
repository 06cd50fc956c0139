//! Why a bench, load generator or kernel server run failed.

use std::fmt;
use std::io;

use sluice_lab::LabError;

/// Why `sluice bench` (or its hidden helpers) failed.
#[derive(Debug)]
pub enum BenchError {
    /// The bench needs root for the namespace lab.
    NotRoot(LabError),
    /// Building, entering or tearing down the lab failed.
    Lab(LabError),
    /// A socket or process operation failed.
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: io::Error,
    },
    /// A helper process (load generator, kernel server) failed or printed nonsense.
    Helper {
        /// Which helper run.
        what: String,
        /// What went wrong, with its standard error.
        detail: String,
    },
    /// The engine failed to start or run.
    Engine(String),
    /// A run measured nothing (no operation or byte completed).
    Empty(String),
}

impl BenchError {
    /// An I/O error while doing `what`.
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        BenchError::Io {
            what: what.into(),
            source,
        }
    }
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::NotRoot(e) => write!(
                f,
                "the bench needs root to build the namespace lab ({e}); run it with sudo"
            ),
            BenchError::Lab(e) => write!(f, "lab: {e}"),
            BenchError::Io { what, source } => write!(f, "{what}: {source}"),
            BenchError::Helper { what, detail } => write!(f, "{what}: {detail}"),
            BenchError::Engine(e) => write!(f, "engine: {e}"),
            BenchError::Empty(what) => write!(f, "{what}: measured nothing"),
        }
    }
}

impl std::error::Error for BenchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BenchError::NotRoot(e) | BenchError::Lab(e) => Some(e),
            BenchError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<LabError> for BenchError {
    fn from(e: LabError) -> Self {
        match e {
            LabError::NotRoot { .. } => BenchError::NotRoot(e),
            e => BenchError::Lab(e),
        }
    }
}
