//! The experiment's rows: which server each ran against (the echo or the service on N
//! data-path cores and a layout, or Linux), and what it measured or why it has nothing.

use std::fmt;

use sluice_bench::Measurement;

/// Where a row's server runs and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    /// `sluice echo` on `cores` data-path cores, `layout` as `--layout` spells it (None: the
    /// single-core engine).
    Engine {
        /// `--cores`.
        cores: usize,
        /// `--layout`.
        layout: Option<&'static str>,
    },
    /// Linux's echo server (`sluice kserve echo`) in sluice-k.
    Linux,
}

impl Server {
    /// The row's name in the tables.
    pub fn name(&self) -> String {
        match self {
            Server::Engine {
                cores,
                layout: Some(l),
            } => format!(
                "engine {l} ({cores} core{})",
                if *cores > 1 { "s" } else { "" }
            ),
            Server::Engine {
                cores,
                layout: None,
            } => format!("engine {cores} core{}", if *cores > 1 { "s" } else { "" }),
            Server::Linux => "linux".into(),
        }
    }
}

/// The parallelism table's rows, in order (Linux last).
pub const TABLE3: [Server; 5] = [
    Server::Engine {
        cores: 1,
        layout: Some("run-to-completion"),
    },
    Server::Engine {
        cores: 2,
        layout: Some("pipelined"),
    },
    Server::Engine {
        cores: 2,
        layout: Some("replicated"),
    },
    Server::Engine {
        cores: 2,
        layout: Some("flow-groups"),
    },
    Server::Linux,
];

/// The scaling table's servers (per connection count).
pub const SCALING: [Server; 3] = [
    Server::Engine {
        cores: 1,
        layout: None,
    },
    Server::Engine {
        cores: 2,
        layout: Some("flow-groups"),
    },
    Server::Linux,
];

/// One measured row.
#[derive(Clone, Debug)]
pub struct Row {
    /// Which table: "parallelism" or "scaling".
    pub table: &'static str,
    /// The server.
    pub server: Server,
    /// Connections.
    pub conns: usize,
    /// Request and response bytes.
    pub bytes: usize,
    /// What the clients measured and the CPU seconds spent, or why the row has none.
    pub result: Result<(Measurement, f64), RowError>,
    /// The redis rows: what redis counted against what was sent.
    pub answered: Option<Answered>,
}

/// Why a row has no measurement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RowError {
    /// It ran and failed.
    Failed(String),
    /// The engine refused the configuration at start (a usage error: a layout this build
    /// does not serve).
    Refused(String),
}

impl fmt::Display for RowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RowError::Failed(why) => f.write_str(why),
            RowError::Refused(why) => write!(f, "refused: {why}"),
        }
    }
}

/// What redis counted over one test against the requests sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answered {
    /// Requests redis-benchmark was told to send (`-n`).
    pub requests: u64,
    /// Calls of the test's command redis counted over the run.
    pub calls: u64,
    /// Error replies, failed and rejected calls over the run.
    pub errors: u64,
}

impl Answered {
    /// Every request answered, none with an error.
    pub fn complete(&self) -> bool {
        self.calls >= self.requests && self.errors == 0
    }
}

impl fmt::Display for Answered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} requests, {} answered, {} errors",
            self.requests, self.calls, self.errors
        )
    }
}
