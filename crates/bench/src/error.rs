//! Why a bench, load generator or kernel server run failed.

use std::fmt;
use std::io;

use std::time::Duration;

use sluice_engine::EngineError;
use sluice_lab::LabError;
use sluice_tcp::ConfigError;

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
    Engine(EngineFailure),
    /// The arguments ask for something the bench cannot do.
    Usage(String),
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
            BenchError::Usage(what) => write!(f, "{what}"),
            BenchError::Empty(what) => write!(f, "{what}: measured nothing"),
        }
    }
}

impl std::error::Error for BenchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BenchError::NotRoot(e) | BenchError::Lab(e) => Some(e),
            BenchError::Io { source, .. } => Some(source),
            BenchError::Engine(e) => Some(e),
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

impl From<EngineFailure> for BenchError {
    fn from(e: EngineFailure) -> Self {
        BenchError::Engine(e)
    }
}

/// Why the engine side of a run failed.
#[derive(Debug)]
pub enum EngineFailure {
    /// The engine could not be opened (namespace, device, address).
    Open(EngineError),
    /// The core refused the configuration the run asked for.
    Config(ConfigError),
    /// The engine stopped with an error while running.
    Run(EngineError),
    /// A client workload did not finish within its bound.
    Unfinished {
        /// The workload's name.
        workload: String,
        /// The bound.
        limit: Duration,
    },
    /// The engine thread did not report an open device in time.
    NotStarted,
    /// The engine thread panicked.
    Panicked,
}

impl fmt::Display for EngineFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineFailure::Open(e) | EngineFailure::Run(e) => write!(f, "{e}"),
            EngineFailure::Config(e) => write!(f, "{e}"),
            EngineFailure::Unfinished { workload, limit } => {
                write!(f, "{workload} did not finish in {limit:?}")
            }
            EngineFailure::NotStarted => f.write_str("the engine did not start"),
            EngineFailure::Panicked => f.write_str("the engine thread panicked"),
        }
    }
}

impl std::error::Error for EngineFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EngineFailure::Open(e) | EngineFailure::Run(e) => Some(e),
            EngineFailure::Config(e) => Some(e),
            _ => None,
        }
    }
}
