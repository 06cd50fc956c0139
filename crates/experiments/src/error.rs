//! What can go wrong running an experiment.

use std::fmt;

/// An experiment's failure.
#[derive(Debug)]
pub enum ExperimentError {
    /// A file could not be written.
    Io(String, std::io::Error),
    /// The CSV could not be written.
    Csv(String),
    /// The plot could not be drawn (for example, no font is installed).
    Plot(String),
    /// The simulation could not be built or run.
    Sim(String),
    /// The workload failed (a connection broke, or data went missing).
    Workload(String),
    /// Bad arguments.
    Usage(String),
}

impl fmt::Display for ExperimentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExperimentError::Io(what, e) => write!(f, "{what}: {e}"),
            ExperimentError::Csv(e) => write!(f, "writing the CSV: {e}"),
            ExperimentError::Plot(e) => write!(f, "drawing the plot: {e}"),
            ExperimentError::Sim(e) => write!(f, "simulation: {e}"),
            ExperimentError::Workload(e) => write!(f, "workload: {e}"),
            ExperimentError::Usage(e) => write!(f, "usage: {e}"),
        }
    }
}

impl std::error::Error for ExperimentError {}

impl From<sluice_sim::SimError> for ExperimentError {
    fn from(e: sluice_sim::SimError) -> Self {
        ExperimentError::Sim(e.to_string())
    }
}
