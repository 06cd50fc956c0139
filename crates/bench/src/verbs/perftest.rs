//! perftest's result tables: the `*_lat` tools' `t_typical` and 99% percentile (usec, half
//! a round trip), the `*_bw` tools' average bandwidth (MB/s with MB = 2^20 bytes) and
//! message rate (Mpps). Each table follows a line of dashes.

use std::fmt;

/// One `ib_*_lat` result row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatRow {
    /// Message size in bytes.
    pub bytes: u64,
    /// Iterations (round trips).
    pub iterations: u64,
    /// t_typical: the median, usec, one way (half a round trip).
    pub typical_us: f64,
    /// The 99th percentile, usec, one way.
    pub p99_us: f64,
}

/// One `ib_*_bw` result row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BwRow {
    /// Message size in bytes.
    pub bytes: u64,
    /// Iterations of all QPs together (perftest multiplies by `-q`).
    pub iterations: u64,
    /// Average bandwidth, MB/s with MB = 2^20 bytes (perftest's MBS format factor).
    pub avg_mib_per_s: f64,
    /// Message rate, millions of messages per second.
    pub mpps: f64,
}

impl BwRow {
    /// Payload Gbit/s (10^9 bits) from the average bandwidth.
    pub fn gbps(&self) -> f64 {
        self.avg_mib_per_s * 1_048_576.0 * 8.0 / 1e9
    }
}

/// Why perftest's output gave no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// No header line with the expected column names.
    NoHeader(&'static str),
    /// The header is there but no numeric row follows it.
    NoRow,
    /// A row has too few columns or a column is not a number.
    BadRow(String),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::NoHeader(col) => write!(f, "perftest printed no result table ({col})"),
            ParseError::NoRow => f.write_str("perftest's result table has no row"),
            ParseError::BadRow(row) => write!(f, "perftest result row not understood: {row:?}"),
        }
    }
}

impl std::error::Error for ParseError {}

/// The first numeric row after the header containing `column`, split on whitespace.
fn row_after<'a>(out: &'a str, column: &'static str) -> Result<Vec<&'a str>, ParseError> {
    let mut lines = out.lines().skip_while(|l| !l.contains(column));
    if lines.next().is_none() {
        return Err(ParseError::NoHeader(column));
    }
    let row = lines
        .map(str::trim)
        .find(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .ok_or(ParseError::NoRow)?;
    Ok(row.split_whitespace().collect())
}

fn num<T: std::str::FromStr>(cols: &[&str], i: usize) -> Result<T, ParseError> {
    cols.get(i)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| ParseError::BadRow(cols.join(" ")))
}

/// Parses an `ib_write_lat`/`ib_send_lat` client's output: `#bytes #iterations t_min t_max
/// t_typical t_avg t_stdev 99% 99.9%`.
pub fn parse_lat(out: &str) -> Result<LatRow, ParseError> {
    let cols = row_after(out, "t_typical")?;
    let row = LatRow {
        bytes: num(&cols, 0)?,
        iterations: num(&cols, 1)?,
        typical_us: num(&cols, 4)?,
        p99_us: num(&cols, 7)?,
    };
    if row.typical_us.is_finite() && row.p99_us.is_finite() {
        Ok(row)
    } else {
        Err(ParseError::BadRow(cols.join(" ")))
    }
}

/// Parses an `ib_write_bw`/`ib_send_bw` output: `#bytes #iterations BW peak BW average
/// MsgRate`.
pub fn parse_bw(out: &str) -> Result<BwRow, ParseError> {
    let cols = row_after(out, "MsgRate")?;
    let row = BwRow {
        bytes: num(&cols, 0)?,
        iterations: num(&cols, 1)?,
        avg_mib_per_s: num(&cols, 3)?,
        mpps: num(&cols, 4)?,
    };
    if row.avg_mib_per_s.is_finite() && row.mpps.is_finite() {
        Ok(row)
    } else {
        Err(ParseError::BadRow(cols.join(" ")))
    }
}
