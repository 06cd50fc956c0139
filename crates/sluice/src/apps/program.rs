//! Finding the installed programs the harness runs (Debian's packages, see scripts/setup.sh).

use std::path::{Path, PathBuf};

use super::error::AppsError;

/// A program and the Debian package that installs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Program {
    /// The executable's name.
    pub name: &'static str,
    /// Its Debian package.
    pub package: &'static str,
}

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
/// python3.
pub const PYTHON3: Program = Program {
    name: "python3",
    package: "python3",
};

/// Debian's own directories come first, so that the distribution's programs run (not, say, a
/// python3 shim earlier on PATH): the point is unmodified, packaged programs.
const SYSTEM_DIRS: [&str; 4] = ["/usr/bin", "/usr/sbin", "/bin", "/sbin"];

impl Program {
    /// The program's full path, or [`AppsError::MissingProgram`].
    pub fn find(self) -> Result<PathBuf, AppsError> {
        let path_var = std::env::var_os("PATH").unwrap_or_default();
        let dirs = SYSTEM_DIRS
            .iter()
            .map(PathBuf::from)
            .chain(std::env::split_paths(&path_var));
        for dir in dirs {
            let candidate = dir.join(self.name);
            if is_executable(&candidate) {
                return Ok(candidate);
            }
        }
        Err(AppsError::MissingProgram {
            program: self.name,
            package: self.package,
        })
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
