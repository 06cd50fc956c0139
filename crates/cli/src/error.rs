//! Why a subcommand failed; `main` prints it.

use std::fmt;
use std::io;

use hdrhistogram::{CreationError, RecordError};
use sluice_bench::apps::AppsError;
use sluice_bench::BenchError;
use sluice_engine::multicore::MultiError;
use sluice_engine::EngineError;
use sluice_lab::LabError;
use sluice_service::ServiceError;
use sluice_sim::sim_wire::{SimRunError, SimWireError};
use sluice_switch::{ConfigError, SwitchError};

/// Why a subcommand failed (the experiments and the bench's helpers have their own errors).
#[derive(Debug)]
pub enum CliError {
    /// A flag or a combination of flags is refused; the message names the flag.
    Usage(String),
    /// The engine could not be opened, or stopped with an error.
    Engine(EngineError),
    /// The multi-core engine could not be built, or stopped with an error.
    Multi(MultiError),
    /// The simulated wire or a simulated peer could not be set up.
    SimWire(SimWireError),
    /// The run over the simulated wire failed.
    SimRun(SimRunError),
    /// The latency histogram could not be made.
    Histogram(CreationError),
    /// A latency could not be recorded.
    Record(RecordError),
    /// The service could not be set up.
    Service(ServiceError),
    /// A port of the lab's switch is not a port the switch takes.
    SwitchPort(ConfigError),
    /// The switch could not open its ports or failed while running.
    Switch(SwitchError),
    /// The lab could not be built or removed.
    Lab(LabError),
    /// `sluice bench` failed.
    Bench(BenchError),
    /// `sluice bench apps` failed.
    Apps(AppsError),
    /// An MTP call through the engine failed (`sluice mtp`).
    Mtp(sluice::mtp::MtpError),
    /// A signal's handler could not be installed.
    Signal {
        /// The signal.
        signal: i32,
        /// What the OS said.
        source: io::Error,
    },
}

impl CliError {
    /// A refused flag, with a message that names it.
    pub fn usage(what: impl Into<String>) -> Self {
        CliError::Usage(what.into())
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Usage(what) => f.write_str(what),
            CliError::Engine(e) => write!(f, "{e}"),
            CliError::Multi(e) => write!(f, "{e}"),
            CliError::SimWire(e) => write!(f, "{e}"),
            CliError::SimRun(e) => write!(f, "{e}"),
            CliError::Histogram(e) => write!(f, "{e}"),
            CliError::Record(e) => write!(f, "{e}"),
            CliError::SwitchPort(e) => write!(f, "{e}"),
            CliError::Service(e) => write!(f, "{e}"),
            CliError::Switch(e) => write!(f, "{e}"),
            CliError::Lab(e) => write!(f, "{e}"),
            CliError::Bench(e) => write!(f, "{e}"),
            CliError::Apps(e) => write!(f, "{e}"),
            CliError::Mtp(e) => write!(f, "{e}"),
            CliError::Signal { signal, source } => {
                write!(f, "cannot handle signal {signal}: {source}")
            }
        }
    }
}

impl std::error::Error for CliError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CliError::Usage(_) => None,
            CliError::Engine(e) => Some(e),
            CliError::Multi(e) => Some(e),
            CliError::SimWire(e) => Some(e),
            CliError::SimRun(e) => Some(e),
            CliError::Histogram(e) => Some(e),
            CliError::Record(e) => Some(e),
            CliError::SwitchPort(e) => Some(e),
            CliError::Service(e) => Some(e),
            CliError::Switch(e) => Some(e),
            CliError::Lab(e) => Some(e),
            CliError::Bench(e) => Some(e),
            CliError::Apps(e) => Some(e),
            CliError::Mtp(e) => Some(e),
            CliError::Signal { source, .. } => Some(source),
        }
    }
}

impl From<sluice::mtp::MtpError> for CliError {
    fn from(e: sluice::mtp::MtpError) -> Self {
        CliError::Mtp(e)
    }
}

impl From<sluice::Error> for CliError {
    fn from(e: sluice::Error) -> Self {
        CliError::Mtp(sluice::mtp::MtpError::Library(e))
    }
}

impl From<EngineError> for CliError {
    fn from(e: EngineError) -> Self {
        CliError::Engine(e)
    }
}

impl From<SimWireError> for CliError {
    fn from(e: SimWireError) -> Self {
        CliError::SimWire(e)
    }
}

impl From<SimRunError> for CliError {
    fn from(e: SimRunError) -> Self {
        CliError::SimRun(e)
    }
}

impl From<CreationError> for CliError {
    fn from(e: CreationError) -> Self {
        CliError::Histogram(e)
    }
}

impl From<RecordError> for CliError {
    fn from(e: RecordError) -> Self {
        CliError::Record(e)
    }
}

impl From<ServiceError> for CliError {
    fn from(e: ServiceError) -> Self {
        CliError::Service(e)
    }
}

impl From<SwitchError> for CliError {
    fn from(e: SwitchError) -> Self {
        CliError::Switch(e)
    }
}

impl From<LabError> for CliError {
    fn from(e: LabError) -> Self {
        CliError::Lab(e)
    }
}
