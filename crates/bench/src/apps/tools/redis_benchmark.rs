//! redis-benchmark in sluice-b: GET and SET with 50 clients, its `--csv` output parsed.
//!
//! redis-benchmark 7 (Debian bookworm's redis-tools) prints with --csv a header line and a
//! row per test, every field quoted:
//! `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"`
//! (redis 6 printed only `"test","rps"`; then the p99 is missing and this parser says so).

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use crate::apps::error::AppsError;
use crate::apps::harness::Harness;
use crate::apps::process::run_bounded;
use crate::apps::program::REDIS_BENCHMARK;

/// Parallel clients, as in the benchmark.
pub const CLIENTS: usize = 50;

/// One test's result.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RedisResult {
    /// Requests per second.
    pub ops_per_sec: f64,
    /// 99th percentile latency, milliseconds.
    pub p99_ms: f64,
}

/// The GET and SET results of one run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GetSet {
    /// The GET test.
    pub get: RedisResult,
    /// The SET test.
    pub set: RedisResult,
}

/// Runs `redis-benchmark -h IP -p PORT -c 50 -n REQUESTS -t get,set --csv` in sluice-b.
pub fn run(h: &Harness, addr: SocketAddr, requests: u64) -> Result<GetSet, AppsError> {
    let what = format!("redis-benchmark against {addr}");
    let mut cmd = h.client(REDIS_BENCHMARK)?;
    cmd.args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(["-c", &CLIENTS.to_string(), "-n", &requests.to_string()])
        .args(["-t", "get,set", "--csv"]);
    // Generous: far slower than this is a failure anyway.
    let limit = Duration::from_secs(60 + requests / 1000);
    let out = run_bounded(cmd, &what, limit)?;
    parse(&String::from_utf8_lossy(&out.stdout)).map_err(|e| AppsError::client(what, e.to_string()))
}

/// Why redis-benchmark's `--csv` output could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// It printed nothing.
    Empty,
    /// The header lacks a column the reading needs.
    NoColumn {
        /// The column.
        name: String,
        /// The header as printed.
        header: Vec<String>,
    },
    /// A row's number is missing or not a finite number.
    UnreadableRow(String),
    /// No GET row or no SET row.
    NoGetSet(String),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Empty => f.write_str("printed nothing"),
            ParseError::NoColumn { name, header } => write!(
                f,
                "no {name:?} column in {header:?} (redis-benchmark 7 prints one)"
            ),
            ParseError::UnreadableRow(line) => write!(f, "unreadable row {line:?}"),
            ParseError::NoGetSet(csv) => write!(f, "no GET and SET rows in {csv:?}"),
        }
    }
}

impl std::error::Error for ParseError {}

/// Parses `--csv` output into the GET and SET rows.
pub fn parse(csv: &str) -> Result<GetSet, ParseError> {
    let unquote = |f: &str| f.trim().trim_matches('"').to_string();
    let mut lines = csv.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<String> = lines
        .next()
        .ok_or(ParseError::Empty)?
        .split(',')
        .map(unquote)
        .collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| ParseError::NoColumn {
                name: name.to_owned(),
                header: header.clone(),
            })
    };
    let (test, rps, p99) = (col("test")?, col("rps")?, col("p99_latency_ms")?);
    let mut get = None;
    let mut set = None;
    for line in lines {
        let fields: Vec<String> = line.split(',').map(unquote).collect();
        let num = |i: usize| -> Result<f64, ParseError> {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .filter(|v| v.is_finite())
                .ok_or_else(|| ParseError::UnreadableRow(line.to_owned()))
        };
        let result = RedisResult {
            ops_per_sec: num(rps)?,
            p99_ms: num(p99)?,
        };
        match fields.get(test).map(String::as_str) {
            Some("GET") => get = Some(result),
            Some("SET") => set = Some(result),
            _ => {}
        }
    }
    match (get, set) {
        (Some(get), Some(set)) => Ok(GetSet { get, set }),
        _ => Err(ParseError::NoGetSet(csv.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOKWORM: &str = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
        \"SET\",\"52493.44\",\"0.533\",\"0.136\",\"0.479\",\"0.847\",\"1.383\",\"2.543\"\n\
        \"GET\",\"69204.15\",\"0.384\",\"0.160\",\"0.359\",\"0.551\",\"0.791\",\"1.535\"\n";

    #[test]
    fn parses_redis_7_csv() {
        let r = parse(BOOKWORM).unwrap();
        assert_eq!(r.set.ops_per_sec, 52493.44);
        assert_eq!(r.set.p99_ms, 1.383);
        assert_eq!(r.get.ops_per_sec, 69204.15);
        assert_eq!(r.get.p99_ms, 0.791);
    }

    #[test]
    fn rejects_output_without_latency_or_rows() {
        assert!(parse("\"test\",\"rps\"\n\"SET\",\"1.0\"\n")
            .unwrap_err()
            .to_string()
            .contains("p99_latency_ms"));
        assert!(parse("").is_err());
        assert!(parse(BOOKWORM.lines().next().unwrap()).is_err());
        assert!(parse(&BOOKWORM.replace("69204.15", "fast")).is_err());
    }
}
