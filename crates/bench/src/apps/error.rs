//! Why running or checking a program failed.

use std::fmt;
use std::io;

use sluice_lab::LabError;

/// Why an application harness step failed.
#[derive(Debug)]
pub enum AppsError {
    /// The harness needs root for the namespace lab.
    NotRoot(LabError),
    /// Building, entering or tearing down the lab failed.
    Lab(LabError),
    /// A file, socket or process operation failed.
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: io::Error,
    },
    /// `sluice engine` did not start or did not become ready.
    Engine {
        /// What happened.
        detail: String,
        /// The end of its output.
        log_tail: String,
    },
    /// A server program exited early or never accepted connections.
    ServerStart {
        /// The program.
        program: String,
        /// Where it ran: a side ("engine", "linux"), or the peer in sluice-b.
        place: String,
        /// What happened.
        detail: String,
        /// The end of its output.
        log_tail: String,
    },
    /// A client (a tool or `sluice appcheck`) failed, timed out or printed nonsense.
    Client {
        /// Which client run.
        what: String,
        /// What went wrong, with the end of its output.
        detail: String,
    },
    /// A server answered something it must not (a protocol error or an unexpected reply).
    Protocol(String),
    /// Data came back different from what was stored or sent.
    Mismatch(String),
    /// A command-line argument is not usable.
    Usage(String),
}

impl AppsError {
    /// An I/O error while doing `what`.
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        AppsError::Io {
            what: what.into(),
            source,
        }
    }

    /// A client failure.
    pub fn client(what: impl Into<String>, detail: impl Into<String>) -> Self {
        AppsError::Client {
            what: what.into(),
            detail: detail.into(),
        }
    }
}

/// Writes `tail` indented under a heading, if there is any.
fn write_tail(f: &mut fmt::Formatter<'_>, tail: &str) -> fmt::Result {
    if tail.trim().is_empty() {
        return write!(f, " (it printed nothing)");
    }
    write!(f, "; its output ends with:")?;
    for line in tail.lines().filter(|l| !l.trim().is_empty()) {
        write!(f, "\n    {line}")?;
    }
    Ok(())
}

impl fmt::Display for AppsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppsError::NotRoot(e) => write!(
                f,
                "running programs in the namespace lab needs root ({e}); run it with sudo"
            ),
            AppsError::Lab(e) => write!(f, "lab: {e}"),
            AppsError::Io { what, source } => write!(f, "{what}: {source}"),
            AppsError::Engine { detail, log_tail } => {
                write!(f, "sluice engine: {detail}")?;
                write_tail(f, log_tail)
            }
            AppsError::ServerStart {
                program,
                place,
                detail,
                log_tail,
            } => {
                write!(f, "{program} on {place}: {detail}")?;
                write_tail(f, log_tail)
            }
            AppsError::Client { what, detail } => write!(f, "{what}: {detail}"),
            AppsError::Protocol(what) => write!(f, "protocol error: {what}"),
            AppsError::Mismatch(what) => write!(f, "mismatch: {what}"),
            AppsError::Usage(what) => write!(f, "{what}"),
        }
    }
}

impl std::error::Error for AppsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AppsError::NotRoot(e) | AppsError::Lab(e) => Some(e),
            AppsError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<LabError> for AppsError {
    fn from(e: LabError) -> Self {
        match e {
            LabError::NotRoot { .. } => AppsError::NotRoot(e),
            e => AppsError::Lab(e),
        }
    }
}
