//! `sluice proxy --config FILE.toml`: the proxy's settings from a small TOML file, which
//! the command-line flags override. Every key is checked: an unknown one or a bad value is
//! refused with the file, the key and the line.
//!
//! ```toml
//! listen = "10.77.0.1:8090"
//! mode = "http"            # or "tcp" (no routes then)
//! splice = true            # false: relay in the proxy (--no-splice)
//! splice_after = 65536     # bytes relayed before splicing (--splice-after; 0: at once)
//! upstream = ["10.77.0.2:8080"]   # the default pool; optional when routes are given
//!
//! [[route]]
//! host = "api.example"     # exact, case-insensitive, port ignored
//! path_prefix = "/v2/"     # longest prefix wins
//! backends = ["10.77.0.2:9001", "10.77.0.2:9002"]
//! ```

use std::net::SocketAddrV4;
use std::path::Path;

use clap::ValueEnum;
use serde::Deserialize;
use sluice_apps::Route;

use crate::error::CliError;

/// What the proxy reads before connecting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Nothing: splice as soon as the backend connection is up.
    Tcp,
    /// The HTTP request header (an X-Forwarded-For line is added).
    Http,
}

/// The file's keys (all optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyFile {
    /// Address to listen on.
    pub listen: Option<SocketAddrV4>,
    /// What to read before connecting.
    pub mode: Option<Mode>,
    /// Splice (true) or relay in the proxy (false).
    pub splice: Option<bool>,
    /// Bytes relayed in the proxy before splicing.
    pub splice_after: Option<u64>,
    /// The default pool.
    pub upstream: Option<Vec<SocketAddrV4>>,
    /// Routing rules, `[[route]]` tables.
    #[serde(default, rename = "route")]
    pub routes: Vec<RouteTable>,
}

/// One `[[route]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteTable {
    /// The Host it matches.
    pub host: Option<String>,
    /// The path prefix it matches.
    pub path_prefix: Option<String>,
    /// Its pool.
    pub backends: Vec<SocketAddrV4>,
}

impl From<RouteTable> for Route {
    fn from(t: RouteTable) -> Route {
        Route {
            host: t.host,
            path_prefix: t.path_prefix,
            backends: t.backends,
        }
    }
}

impl ProxyFile {
    /// Parses the file's text (`origin` names it in errors).
    pub fn parse(text: &str, origin: &str) -> Result<ProxyFile, CliError> {
        toml::from_str(text).map_err(|e| CliError::usage(format!("{origin}: {e}")))
    }

    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<ProxyFile, CliError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::usage(format!("--config {}: {e}", path.display())))?;
        ProxyFile::parse(&text, &path.display().to_string())
    }
}
