//! wrk in sluice-b against a web server: requests/s and the 99th percentile latency from
//! its `--latency` report.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use crate::apps::error::AppsError;
use crate::apps::harness::Harness;
use crate::apps::process::run_bounded;
use crate::apps::program::WRK;

/// What one wrk run measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WrkResult {
    /// Requests completed.
    pub requests: u64,
    /// Requests per second.
    pub requests_per_sec: f64,
    /// 99th percentile latency, milliseconds.
    pub p99_ms: f64,
    /// Socket errors of every kind (connect, read, write, timeout).
    pub socket_errors: u64,
    /// Responses that were not 2xx or 3xx.
    pub non_2xx_3xx: u64,
}

/// Runs `wrk -t2 -c50 -dNs --latency http://ADDR/PATH` in sluice-b.
pub fn run(
    h: &Harness,
    addr: SocketAddr,
    path: &str,
    seconds: u32,
) -> Result<WrkResult, AppsError> {
    run_with(h, addr, path, seconds, 50, &[])
}

/// [`run`] with `connections` connections and extra request headers (`"Connection: close"`
/// makes every request a new connection).
pub fn run_with(
    h: &Harness,
    addr: SocketAddr,
    path: &str,
    seconds: u32,
    connections: u32,
    headers: &[&str],
) -> Result<WrkResult, AppsError> {
    let url = format!("http://{addr}/{}", path.trim_start_matches('/'));
    let what = format!("wrk against {url}");
    let mut cmd = h.client(WRK)?;
    cmd.args([
        "-t2",
        &format!("-c{}", connections.max(2)),
        &format!("-d{}s", seconds.max(1)),
        "--latency",
    ]);
    for header in headers {
        cmd.args(["-H", header]);
    }
    cmd.arg(&url);
    let limit = Duration::from_secs(u64::from(seconds) + 30);
    let out = run_bounded(cmd, &what, limit)?;
    parse(&String::from_utf8_lossy(&out.stdout)).map_err(|e| AppsError::client(what, e.to_string()))
}

/// A wrk duration ("845.00us", "1.23ms", "2.00s", "1.00m") in milliseconds.
fn duration_ms(s: &str) -> Option<f64> {
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().ok()?;
    let scale = match unit {
        "us" => 1e-3,
        "ms" => 1.0,
        "s" => 1e3,
        "m" => 60e3,
        "h" => 3600e3,
        _ => return None,
    };
    Some(v * scale).filter(|v| v.is_finite())
}

/// Why wrk's report could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// A line the reading needs has an unreadable value.
    UnreadableLine(String),
    /// No "N requests in" line.
    NoRequests,
    /// No Requests/sec line.
    NoRate,
    /// No 99% latency line.
    NoP99,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::UnreadableLine(line) => {
                write!(f, "unreadable line {line:?} in wrk's report")
            }
            ParseError::NoRequests => f.write_str("no \"N requests in\" line"),
            ParseError::NoRate => f.write_str("no Requests/sec line"),
            ParseError::NoP99 => f.write_str("no 99% latency line (was --latency given?)"),
        }
    }
}

impl std::error::Error for ParseError {}

/// Parses wrk's report.
pub fn parse(report: &str) -> Result<WrkResult, ParseError> {
    let mut requests = None;
    let mut rps = None;
    let mut p99 = None;
    let mut socket_errors = 0;
    let mut non_2xx_3xx = 0;
    let bad = |line: &str| ParseError::UnreadableLine(line.to_owned());
    for line in report.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Requests/sec:", v] => rps = Some(v.parse::<f64>().map_err(|_| bad(line))?),
            ["99%", v] => p99 = Some(duration_ms(v).ok_or_else(|| bad(line))?),
            [n, "requests", "in", ..] => requests = Some(n.parse::<u64>().map_err(|_| bad(line))?),
            ["Socket", "errors:", rest @ ..] => {
                // "Socket errors: connect 0, read 12, write 0, timeout 3"
                socket_errors = rest
                    .iter()
                    .filter_map(|w| w.trim_end_matches(',').parse::<u64>().ok())
                    .sum();
            }
            ["Non-2xx", "or", "3xx", "responses:", n] => {
                non_2xx_3xx = n.parse::<u64>().map_err(|_| bad(line))?;
            }
            _ => {}
        }
    }
    Ok(WrkResult {
        requests: requests.ok_or(ParseError::NoRequests)?,
        requests_per_sec: rps.ok_or(ParseError::NoRate)?,
        p99_ms: p99.ok_or(ParseError::NoP99)?,
        socket_errors,
        non_2xx_3xx,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "Running 1s test @ http://127.0.0.1:8080/file
  2 threads and 50 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    20.70ms    9.13ms  70.80ms   76.32%
    Req/Sec     1.07k    93.13     1.28k    65.00%
  Latency Distribution
     50%   22.97ms
     75%   24.61ms
     90%   27.80ms
     99%  861.00us
  2165 requests in 1.03s, 2.02GB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 4
Requests/sec:   2102.99
Transfer/sec:      1.96GB
";

    #[test]
    fn parses_a_latency_report() {
        let r = parse(REPORT).unwrap();
        assert_eq!(r.requests, 2165);
        assert_eq!(r.requests_per_sec, 2102.99);
        assert!((r.p99_ms - 0.861).abs() < 1e-9);
        assert_eq!(r.socket_errors, 3);
        assert_eq!(r.non_2xx_3xx, 4);
    }

    #[test]
    fn durations_and_missing_lines() {
        assert_eq!(duration_ms("2.00s"), Some(2000.0));
        assert_eq!(duration_ms("1.5ms"), Some(1.5));
        assert_eq!(duration_ms("12"), None);
        assert!(parse("Requests/sec: 10\n").is_err());
        assert!(parse(&REPORT.replace("Requests/sec:   2102.99", "Requests/sec: x")).is_err());
    }
}
