//! redis-cli in sluice-b: the server's own counters (`INFO all`), so a benchmark can check
//! that redis answered every request it sent, and none with an error.
//!
//! Redis 7 prints `cmdstat_set:calls=2000,usec=..,usec_per_call=..,rejected_calls=0,
//! failed_calls=0` per command under `# Commandstats` and `total_error_replies:0` under
//! `# Stats`.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use crate::apps::error::AppsError;
use crate::apps::harness::Harness;
use crate::apps::process::run_bounded;
use crate::apps::program::REDIS_CLI;

/// How long redis-cli may take: one local round trip.
const LIMIT: Duration = Duration::from_secs(20);

/// The counters of one `INFO all`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RedisInfo {
    /// Calls per command, lower-case (`set`, `get`, `config|get`).
    pub calls: Vec<(String, u64)>,
    /// Failed and rejected calls, every command summed.
    pub failed_calls: u64,
    /// Error replies the server sent (`total_error_replies`).
    pub error_replies: u64,
}

impl RedisInfo {
    /// Calls of `command` so far (0 before its first).
    pub fn calls_of(&self, command: &str) -> u64 {
        self.calls
            .iter()
            .find(|(c, _)| c == command)
            .map_or(0, |(_, n)| *n)
    }
}

/// Why `INFO` output could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InfoError {
    /// No `total_error_replies` line (redis before 6.2 does not count them).
    NoErrorReplies,
    /// A `cmdstat_` line without a readable `calls=`.
    UnreadableLine(String),
}

impl fmt::Display for InfoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InfoError::NoErrorReplies => {
                f.write_str("no total_error_replies line (redis 6.2 or later prints one)")
            }
            InfoError::UnreadableLine(l) => write!(f, "unreadable line {l:?}"),
        }
    }
}

impl std::error::Error for InfoError {}

/// Runs `redis-cli -h IP -p PORT INFO all` in sluice-b and reads its counters.
pub fn read(h: &Harness, addr: SocketAddr) -> Result<RedisInfo, AppsError> {
    let what = format!("redis-cli INFO all against {addr}");
    let mut cmd = h.client(REDIS_CLI)?;
    cmd.args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(["INFO", "all"]);
    let out = run_bounded(cmd, &what, LIMIT)?;
    parse(&String::from_utf8_lossy(&out.stdout)).map_err(|e| AppsError::client(what, e.to_string()))
}

/// Reads the counters from `INFO` output.
pub fn parse(info: &str) -> Result<RedisInfo, InfoError> {
    let mut r = RedisInfo::default();
    let mut saw_errors = false;
    for line in info.lines().map(str::trim) {
        if let Some(n) = line.strip_prefix("total_error_replies:") {
            r.error_replies = n
                .parse()
                .map_err(|_| InfoError::UnreadableLine(line.to_owned()))?;
            saw_errors = true;
        } else if let Some(rest) = line.strip_prefix("cmdstat_") {
            let bad = || InfoError::UnreadableLine(line.to_owned());
            let (command, fields) = rest.split_once(':').ok_or_else(bad)?;
            let field = |name: &str| -> Option<u64> {
                fields
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                    .and_then(|v| v.parse().ok())
            };
            let calls = field("calls").ok_or_else(bad)?;
            // Older servers lack these two: nothing failed that they could count.
            r.failed_calls +=
                field("failed_calls").unwrap_or(0) + field("rejected_calls").unwrap_or(0);
            r.calls.push((command.to_owned(), calls));
        }
    }
    if saw_errors {
        Ok(r)
    } else {
        Err(InfoError::NoErrorReplies)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "# Stats\r\ntotal_connections_received:52\r\ntotal_error_replies:1\r\n\
        \r\n# Commandstats\r\n\
        cmdstat_set:calls=2000,usec=900,usec_per_call=0.45,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_config|get:calls=2,usec=10,usec_per_call=5.00,rejected_calls=1,failed_calls=2\r\n";

    #[test]
    fn reads_calls_and_errors() {
        let r = parse(INFO).unwrap();
        assert_eq!(r.calls_of("set"), 2000);
        assert_eq!(r.calls_of("config|get"), 2);
        assert_eq!(r.calls_of("get"), 0, "never called");
        assert_eq!(r.failed_calls, 3);
        assert_eq!(r.error_replies, 1);
    }

    #[test]
    fn refuses_output_it_cannot_read() {
        assert_eq!(
            parse("# Stats\r\ntotal_connections_received:1\r\n"),
            Err(InfoError::NoErrorReplies)
        );
        assert!(matches!(
            parse("total_error_replies:0\r\ncmdstat_set:usec=1\r\n"),
            Err(InfoError::UnreadableLine(_))
        ));
        assert!(matches!(
            parse("total_error_replies:many\r\n"),
            Err(InfoError::UnreadableLine(_))
        ));
    }
}
