//! The workloads, their ports, and how long each runs.

use serde::{Deserialize, Serialize};
use sluice_engine::apps::BenchPorts;

/// What a client does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// 64 B echo, closed loop, latency and ops/s.
    Rpc,
    /// One connection, client sends to the server's sink: Gbps.
    StreamUp,
    /// One connection, the server's source sends to the client: Gbps.
    StreamDown,
    /// A new connection per 64 B request-response: connections/s.
    Connect,
}

impl Kind {
    /// The command-line spelling (also the JSON name).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Rpc => "rpc",
            Kind::StreamUp => "stream-up",
            Kind::StreamDown => "stream-down",
            Kind::Connect => "connect",
        }
    }
}

/// Size of an rpc request and of its echo.
pub const REQUEST_BYTES: usize = 64;

/// Ports every server (engine or Linux) listens on: below the clients' ephemeral ports
/// (10000-65535, set by the bench), so no client TIME-WAIT can block a server's bind.
pub const PORTS: BenchPorts = BenchPorts {
    echo: 7001,
    sink: 7002,
    source: 7003,
};

/// One workload: a kind and how many connections run it at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Workload {
    /// What each connection does.
    pub kind: Kind,
    /// Connections (or connection loops) in parallel.
    pub conns: usize,
}

impl Workload {
    /// Its name in the table and JSON, e.g. "rpc-16".
    pub fn name(&self) -> String {
        match self.kind {
            Kind::Rpc | Kind::Connect => format!("{}-{}", self.kind.as_str(), self.conns),
            _ => self.kind.as_str().to_string(),
        }
    }

    /// The server port this workload uses.
    pub fn port(&self) -> u16 {
        match self.kind {
            Kind::Rpc | Kind::Connect => PORTS.echo,
            Kind::StreamUp => PORTS.sink,
            Kind::StreamDown => PORTS.source,
        }
    }
}

/// Every workload, in the order they run.
pub const WORKLOADS: [Workload; 5] = [
    Workload {
        kind: Kind::Rpc,
        conns: 1,
    },
    Workload {
        kind: Kind::Rpc,
        conns: 16,
    },
    Workload {
        kind: Kind::StreamUp,
        conns: 1,
    },
    Workload {
        kind: Kind::StreamDown,
        conns: 1,
    },
    Workload {
        kind: Kind::Connect,
        conns: 4,
    },
];

/// How long each run lasts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    /// Measured seconds per run.
    pub seconds: f64,
    /// Unmeasured warm-up before them.
    pub warmup: f64,
}

impl Timing {
    /// Full runs, or short ones for CI smoke tests.
    pub fn new(quick: bool, seconds: Option<f64>) -> Self {
        let (s, w) = if quick { (0.4, 0.1) } else { (5.0, 1.0) };
        Timing {
            seconds: seconds.unwrap_or(s),
            warmup: w,
        }
    }
}
