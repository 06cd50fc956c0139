//! memcaslap (libmemcached-tools' memaslap) against memcached: its closing summary line,
//! `Run time: 5.0s Ops: 189277 TPS: 37855 Net_rate: 42.4M/s`.

use std::fmt;

/// What one memcaslap run reported.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Seconds it ran.
    pub seconds: f64,
    /// get and set operations completed.
    pub ops: u64,
    /// Operations per second.
    pub tps: f64,
}

/// Why memcaslap's output gave no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// No `Run time: ... Ops: ... TPS: ...` line.
    NoSummary,
    /// The summary line has a field that is not a number.
    BadNumber(String),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::NoSummary => f.write_str("memcaslap printed no `Run time: ... TPS:` line"),
            ParseError::BadNumber(l) => write!(f, "memcaslap line not understood: {l:?}"),
        }
    }
}

impl std::error::Error for ParseError {}

/// Parses the summary line (the last one, if it printed several).
pub fn parse(out: &str) -> Result<Summary, ParseError> {
    let line = out
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with("Run time:") && l.contains("TPS:"))
        .ok_or(ParseError::NoSummary)?;
    let bad = || ParseError::BadNumber(line.to_string());
    // The value after `key`, as the word that follows it.
    let after = |key: &str| -> Option<&str> {
        let (_, rest) = line.split_once(key)?;
        rest.split_whitespace().next()
    };
    let seconds = after("Run time:")
        .map(|v| v.trim_end_matches('s'))
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v > 0.0)
        .ok_or_else(bad)?;
    let ops = after("Ops:")
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(bad)?;
    let tps = after("TPS:")
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .ok_or_else(bad)?;
    Ok(Summary { seconds, ops, tps })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// memcaslap 1.1.4 (Debian bookworm), trimmed.
    const OUT: &str = "servers: 10.77.0.3:11211
threads count: 1
concurrency: 16
run time: 2s
cmd_get: 68171
cmd_set: 7586

Run time: 2.0s Ops: 75757 TPS: 37874 Net_rate: 42.4M/s
";

    #[test]
    fn reads_the_summary_line() {
        let s = parse(OUT).unwrap();
        assert_eq!(s.seconds, 2.0);
        assert_eq!(s.ops, 75757);
        assert_eq!(s.tps, 37874.0);
        // The settings echo "run time: 2s" in lower case: not the summary.
        assert_eq!(parse("run time: 2s\n"), Err(ParseError::NoSummary));
        assert!(matches!(
            parse(&OUT.replace("Ops: 75757", "Ops: lots")),
            Err(ParseError::BadNumber(_))
        ));
    }
}
