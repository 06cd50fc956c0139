//! sockperf ping-pong's summary: one-way latency percentiles (usec, half a round trip unless
//! `--full-rtt`) and the messages it exchanged.

use std::fmt;

/// What one `sockperf pp` run reported.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PingPong {
    /// Median latency, usec (one way).
    pub p50_us: f64,
    /// 99th percentile, usec (one way).
    pub p99_us: f64,
    /// Round trips completed in the whole run (ReceivedMessages of `[Total Run]`).
    pub round_trips: u64,
}

/// Why sockperf's output gave no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// A line sockperf prints on success is missing.
    Missing(&'static str),
    /// A value is not a number.
    BadNumber(String),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Missing(what) => write!(f, "sockperf printed no {what}"),
            ParseError::BadNumber(line) => write!(f, "sockperf line not understood: {line:?}"),
        }
    }
}

impl std::error::Error for ParseError {}

/// The value of `---> percentile P = V`.
fn percentile(out: &str, p: &'static str) -> Result<f64, ParseError> {
    let line = out
        .lines()
        .find(|l| {
            l.split_once("percentile")
                .and_then(|(_, rest)| rest.split_once('='))
                .is_some_and(|(k, _)| k.trim() == p)
        })
        .ok_or(ParseError::Missing("percentile line"))?;
    line.rsplit('=')
        .next()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .ok_or_else(|| ParseError::BadNumber(line.to_string()))
}

/// Parses `sockperf pp` output: the 50.000 and 99.000 percentiles and `ReceivedMessages=N`
/// of the `[Total Run]` line (the whole run, warm-up included, as the CPU window is).
pub fn parse(out: &str) -> Result<PingPong, ParseError> {
    let valid = out
        .lines()
        .find(|l| l.contains("[Total Run]"))
        .ok_or(ParseError::Missing("[Total Run] line"))?;
    let received = valid
        .split(';')
        .find_map(|f| f.trim().strip_prefix("ReceivedMessages="))
        .ok_or(ParseError::Missing("ReceivedMessages"))?;
    let round_trips = received
        .trim()
        .parse()
        .map_err(|_| ParseError::BadNumber(valid.to_string()))?;
    Ok(PingPong {
        p50_us: percentile(out, "50.000")?,
        p99_us: percentile(out, "99.000")?,
        round_trips,
    })
}
