//! Finding the installed programs the harness runs (Debian's packages, see scripts/setup.sh).

use std::path::PathBuf;

pub use sluice_lab::command::Tool as Program;

use super::error::AppsError;

/// redis-server.
pub const REDIS_SERVER: Program = Program {
    name: "redis-server",
    package: "redis-server",
};
/// redis-benchmark.
pub const REDIS_BENCHMARK: Program = Program {
    name: "redis-benchmark",
    package: "redis-tools",
};
/// redis-cli (the redis counters after a benchmark).
pub const REDIS_CLI: Program = Program {
    name: "redis-cli",
    package: "redis-tools",
};
/// memcached.
pub const MEMCACHED: Program = Program {
    name: "memcached",
    package: "memcached",
};
/// nginx.
pub const NGINX: Program = Program {
    name: "nginx",
    package: "nginx-light",
};
/// wrk.
pub const WRK: Program = Program {
    name: "wrk",
    package: "wrk",
};
/// iperf3 (server and client).
pub const IPERF3: Program = Program {
    name: "iperf3",
    package: "iperf3",
};
/// curl.
pub const CURL: Program = Program {
    name: "curl",
    package: "curl",
};
/// sockperf (server and client).
pub const SOCKPERF: Program = Program {
    name: "sockperf",
    package: "sockperf",
};
/// memcaslap (libmemcached's memaslap): memcached's load generator.
pub const MEMCASLAP: Program = Program {
    name: "memcaslap",
    package: "libmemcached-tools",
};
/// python3.
pub const PYTHON3: Program = Program {
    name: "python3",
    package: "python3",
};

/// The program's full path (Debian's own directories before $PATH), or the lab's
/// missing-tool error naming the package to install.
pub fn find(program: Program) -> Result<PathBuf, AppsError> {
    Ok(sluice_lab::command::find_packaged(program)?)
}
