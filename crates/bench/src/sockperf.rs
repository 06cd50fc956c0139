//! sockperf's summaries, shared by every bench that runs it (`sluice bench`, `bench verbs`,
//! `bench mtp`): ping-pong's latency percentiles and maximum (usec, half a round trip unless
//! `--full-rtt`) and the messages it exchanged, and throughput's message rate.

use std::fmt;

/// What one `sockperf pp` run reported.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PingPong {
    /// Median latency, usec (one way).
    pub p50_us: f64,
    /// 90th percentile, usec (one way).
    pub p90_us: f64,
    /// 99th percentile, usec (one way).
    pub p99_us: f64,
    /// 99.9th percentile, usec (one way).
    pub p999_us: f64,
    /// 99.99th percentile, usec (one way).
    pub p9999_us: f64,
    /// The largest observation, usec (one way).
    pub max_us: f64,
    /// Round trips completed in the whole run (ReceivedMessages of `[Total Run]`).
    pub round_trips: u64,
    /// The whole run's length, seconds (RunTime of `[Total Run]`).
    pub run_seconds: f64,
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
    value_of(out, "percentile", p, "percentile line")
}

/// The value of `---> {kind} {key} = V` (`percentile 50.000`, `<MAX> observation`).
fn value_of(out: &str, kind: &str, key: &str, what: &'static str) -> Result<f64, ParseError> {
    let line = out
        .lines()
        .find(|l| {
            l.split_once(kind)
                .and_then(|(_, rest)| rest.split_once('='))
                .is_some_and(|(k, _)| k.trim() == key)
        })
        .ok_or(ParseError::Missing(what))?;
    line.rsplit('=')
        .next()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .ok_or_else(|| ParseError::BadNumber(line.to_string()))
}

/// Parses `sockperf pp` output: the 50.000, 99.000, 99.900 and 99.990 percentiles and
/// `ReceivedMessages=N` of the `[Total Run]` line (the whole run, warm-up included, as the
/// CPU window is).
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
    let run_seconds = valid
        .split(';')
        .find_map(|f| f.split_once("RunTime=").map(|(_, v)| v))
        .and_then(|v| v.trim().trim_end_matches("sec").trim().parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .ok_or_else(|| ParseError::BadNumber(valid.to_string()))?;
    Ok(PingPong {
        p50_us: percentile(out, "50.000")?,
        p90_us: percentile(out, "90.000")?,
        p99_us: percentile(out, "99.000")?,
        p999_us: percentile(out, "99.900")?,
        p9999_us: percentile(out, "99.990")?,
        max_us: value_of(out, "<MAX>", "observation", "<MAX> observation")?,
        round_trips,
        run_seconds,
    })
}

/// What one `sockperf tp` run reported.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Throughput {
    /// Messages sent in the whole run (`Total of N messages sent in T sec`).
    pub messages: u64,
    /// Its length, seconds.
    pub seconds: f64,
    /// `Summary: Message Rate is N [msg/sec]`.
    pub msgs_per_s: f64,
}

/// Parses `sockperf tp` output: the total and the message rate.
pub fn parse_tp(out: &str) -> Result<Throughput, ParseError> {
    let total = out
        .lines()
        .find_map(|l| l.split_once("Total of ").map(|(_, rest)| (l, rest)))
        .ok_or(ParseError::Missing("`Total of N messages` line"))?;
    let bad = |line: &str| ParseError::BadNumber(line.to_string());
    let words: Vec<&str> = total.1.split_whitespace().collect();
    // "N messages sent in T sec"
    let messages = words
        .first()
        .and_then(|w| w.parse::<u64>().ok())
        .ok_or_else(|| bad(total.0))?;
    let seconds = words
        .get(4)
        .and_then(|w| w.parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .ok_or_else(|| bad(total.0))?;
    let rate = out
        .lines()
        .find_map(|l| l.split_once("Message Rate is ").map(|(_, rest)| (l, rest)))
        .ok_or(ParseError::Missing("`Message Rate` line"))?;
    let msgs_per_s = rate
        .1
        .split_whitespace()
        .next()
        .map(|v| v.replace(',', ""))
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .ok_or_else(|| bad(rate.0))?;
    Ok(Throughput {
        messages,
        seconds,
        msgs_per_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// sockperf 3.7's `pp --full-rtt` output (Debian bookworm), trimmed.
    const PP: &str = "sockperf: [Total Run] RunTime=1.000 sec; Warm up time=400 msec; \
SentMessages=31090; ReceivedMessages=31089
sockperf: ========= Printing statistics for Server No: 0
sockperf: [Valid Duration] RunTime=0.550 sec; SentMessages=12786; ReceivedMessages=12786
sockperf: ---> <MAX> observation = 7607.518
sockperf: ---> percentile 99.999 = 7607.518
sockperf: ---> percentile 99.990 = 7591.879
sockperf: ---> percentile 99.900 = 6164.963
sockperf: ---> percentile 99.000 =   49.742
sockperf: ---> percentile 90.000 =   19.025
sockperf: ---> percentile 50.000 =   16.731
sockperf: ---> <MIN> observation =   15.909
";

    const TP: &str = "sockperf: Test ended
sockperf: Total of 375882 messages sent in 1.000 sec

sockperf: Summary: Message Rate is 375695 [msg/sec]
sockperf: Summary: BandWidth is 22.931 MBps (183.445 Mbps)
";

    #[test]
    fn ping_pong_percentiles_and_round_trips() {
        let pp = parse(PP).unwrap();
        assert_eq!(pp.p50_us, 16.731);
        assert_eq!(pp.p99_us, 49.742);
        assert_eq!(pp.p999_us, 6164.963);
        assert_eq!(pp.p9999_us, 7591.879);
        assert_eq!(pp.p90_us, 19.025);
        assert_eq!(pp.max_us, 7607.518);
        assert_eq!(pp.round_trips, 31089);
        assert_eq!(pp.run_seconds, 1.0);
        let no_tail = PP.replace("percentile 99.990", "percentile 99.99x");
        assert!(matches!(parse(&no_tail), Err(ParseError::Missing(_))));
        assert!(parse(&PP.replace("ReceivedMessages=31089", "ReceivedMessages=many")).is_err());
    }

    #[test]
    fn throughput_total_and_rate() {
        let tp = parse_tp(TP).unwrap();
        assert_eq!(tp.messages, 375882);
        assert_eq!(tp.seconds, 1.0);
        assert_eq!(tp.msgs_per_s, 375695.0);
        assert!(parse_tp("sockperf: Test ended\n").is_err());
        assert!(parse_tp(&TP.replace("375695", "fast")).is_err());
    }
}
