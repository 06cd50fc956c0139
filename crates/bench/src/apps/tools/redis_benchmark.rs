//! redis-benchmark in sluice-b: GET and SET with 50 clients (together, or one test per run),
//! its `--csv` output parsed.
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
    /// Median latency, milliseconds.
    pub p50_ms: f64,
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

/// One of redis-benchmark's tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    /// `-t get`.
    Get,
    /// `-t set`.
    Set,
}

impl Test {
    /// The name `-t` takes.
    pub fn name(self) -> &'static str {
        match self {
            Test::Get => "get",
            Test::Set => "set",
        }
    }

    /// The name of its `--csv` row.
    fn row(self) -> &'static str {
        match self {
            Test::Get => "GET",
            Test::Set => "SET",
        }
    }
}

/// Runs `redis-benchmark -h IP -p PORT -c 50 -n REQUESTS -t get,set --csv` in sluice-b.
pub fn run(h: &Harness, addr: SocketAddr, requests: u64) -> Result<GetSet, AppsError> {
    let (what, csv) = bench(h, addr, "get,set", requests)?;
    parse(&csv).map_err(|e| AppsError::client(what, e.to_string()))
}

/// Runs one test, `redis-benchmark ... -n REQUESTS -t TEST --csv`, in sluice-b.
pub fn run_test(
    h: &Harness,
    addr: SocketAddr,
    test: Test,
    requests: u64,
) -> Result<RedisResult, AppsError> {
    let (what, csv) = bench(h, addr, test.name(), requests)?;
    parse_rows(&csv)
        .and_then(|rows| {
            rows.into_iter()
                .find(|(name, _)| name == test.row())
                .map(|(_, r)| r)
                .ok_or_else(|| ParseError::NoGetSet(csv.clone()))
        })
        .map_err(|e| AppsError::client(what, e.to_string()))
}

/// Runs redis-benchmark with `-t tests` and returns what it ran and its stdout.
fn bench(
    h: &Harness,
    addr: SocketAddr,
    tests: &str,
    requests: u64,
) -> Result<(String, String), AppsError> {
    let what = format!("redis-benchmark -t {tests} against {addr}");
    let mut cmd = h.client(REDIS_BENCHMARK)?;
    cmd.args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(["-c", &CLIENTS.to_string(), "-n", &requests.to_string()])
        .args(["-t", tests, "--csv"]);
    // Generous: far slower than this is a failure anyway.
    let limit = Duration::from_secs(60 + requests / 1000);
    let out = run_bounded(cmd, &what, limit)?;
    Ok((what, String::from_utf8_lossy(&out.stdout).into_owned()))
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
    /// No GET row or no SET row (or not the one test asked for).
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
    let rows = parse_rows(csv)?;
    let find = |name: &str| rows.iter().find(|(n, _)| n == name).map(|(_, r)| *r);
    match (find("GET"), find("SET")) {
        (Some(get), Some(set)) => Ok(GetSet { get, set }),
        _ => Err(ParseError::NoGetSet(csv.to_owned())),
    }
}

/// Parses `--csv` output into its rows, by test name.
pub fn parse_rows(csv: &str) -> Result<Vec<(String, RedisResult)>, ParseError> {
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
    let (test, rps) = (col("test")?, col("rps")?);
    let (p99, p50) = (col("p99_latency_ms")?, col("p50_latency_ms")?);
    let mut rows = Vec::new();
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
            p50_ms: num(p50)?,
            p99_ms: num(p99)?,
        };
        let name = fields
            .get(test)
            .ok_or_else(|| ParseError::UnreadableRow(line.to_owned()))?;
        rows.push((name.clone(), result));
    }
    Ok(rows)
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
        assert_eq!(r.set.p50_ms, 0.479);
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

    #[test]
    fn one_test_run_has_its_row_only() {
        let header = BOOKWORM.lines().next().unwrap();
        let get = BOOKWORM.lines().nth(2).unwrap();
        let rows = parse_rows(&format!("{header}\n{get}\n")).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].0, "GET");
        assert_eq!(rows[0].1.p50_ms, 0.359);
        assert!(parse(&format!("{header}\n{get}\n")).is_err(), "no SET row");
        assert_eq!((Test::Get.name(), Test::Set.row()), ("get", "SET"));
    }
}
