//! The MTP rows: `sluice mtp rpc` against `sluice mtp recv --echo` (round trips) and
//! `sluice mtp send` against `sluice mtp recv --quiet` (throughput), server on engine E,
//! client on engine A; and their summary lines read back.

use std::fmt;
use std::time::Duration;

use crate::op_rows::{cpu_per_op, positive, Bw, Lat};
use crate::verbs::hosts::Hosts;

/// The MTP port the servers bind on engine E.
const RPC_PORT: u16 = 7100;
const SINK_PORT: u16 = 7101;
/// Messages outstanding in a throughput run (the sender's slots, the receiver's buffers):
/// as a TCP stream keeps a window of bytes in flight, not one round trip per 8 messages.
const WINDOW: u32 = 64;
/// How long one MTP client may take.
const LIMIT: Duration = Duration::from_secs(180);

/// Why a `sluice mtp` summary line gave no numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// The summary line is missing.
    Missing(&'static str),
    /// A value is not a number.
    BadNumber(String),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Missing(what) => write!(f, "sluice mtp printed no {what}"),
            ParseError::BadNumber(line) => write!(f, "sluice mtp line not understood: {line:?}"),
        }
    }
}

impl std::error::Error for ParseError {}

/// The number after `key` in `line` (e.g. `p50 12.3 us` with key "p50").
fn number_after(line: &str, key: &str) -> Result<f64, ParseError> {
    line.split_once(key)
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .map(|w| w.trim_start_matches('(').trim_end_matches([',', ')']))
        .and_then(|w| w.parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .ok_or_else(|| ParseError::BadNumber(line.to_string()))
}

/// The number before `unit` in `line` (e.g. `(1234 messages/s` with unit "messages/s").
fn number_before(line: &str, unit: &str) -> Result<f64, ParseError> {
    line.split_once(unit)
        .and_then(|(head, _)| head.split_whitespace().next_back())
        .map(|w| w.trim_start_matches('(').trim_end_matches(','))
        .and_then(|w| w.parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .ok_or_else(|| ParseError::BadNumber(line.to_string()))
}

/// `sluice mtp rpc`'s summary: (p50, p99) round trip in usec.
pub fn parse_rpc(out: &str) -> Result<(f64, f64), ParseError> {
    let line = out
        .lines()
        .find(|l| l.contains("round trips of") && l.contains("p50"))
        .ok_or(ParseError::Missing("round-trip summary"))?;
    Ok((number_after(line, "p50")?, number_after(line, "p99")?))
}

/// `sluice mtp send`'s summary: (messages/s, Mbit/s).
pub fn parse_send(out: &str) -> Result<(f64, f64), ParseError> {
    let line = out
        .lines()
        .find(|l| l.contains("acknowledged in"))
        .ok_or(ParseError::Missing("send summary"))?;
    Ok((
        number_before(line, "messages/s")?,
        number_before(line, "Mbit/s")?,
    ))
}

/// `count` MTP round trips of `size` bytes (round-trip usec, not halved).
pub fn mtp_rpc(h: &mut Hosts, size: u64, count: u64) -> Result<Lat, String> {
    let mut server = h.mtp_command(true, "recv")?;
    server.args(["--port", &RPC_PORT.to_string(), "--echo"]);
    let mut client = h.mtp_command(false, "rpc")?;
    let (to, size_s, count_s) = (
        format!(
            "{}:{RPC_PORT}",
            Hosts::server_ip(crate::verbs::table::Stack::SluiceTcp)
        ),
        size.to_string(),
        count.to_string(),
    );
    client.args(["--to", &to, "--size", &size_s, "--count", &count_s]);
    let what = format!("sluice mtp rpc --size {size} --count {count}");
    let (out, cpu) = h.measure_commands("mtp-rpc", &what, server, client, LIMIT, false)?;
    let (p50, p99) = parse_rpc(&out).map_err(|e| e.to_string())?;
    Ok(Lat {
        p50_us: positive("p50", p50)?,
        p99_us: positive("p99", p99)?,
        cpu: cpu_per_op(cpu, count as f64),
    })
}

/// `count` one-way MTP messages of `size` bytes, each acknowledged.
pub fn mtp_throughput(h: &mut Hosts, size: u64, count: u64) -> Result<Bw, String> {
    let mut server = h.mtp_command(true, "recv")?;
    server.args([
        "--port",
        &SINK_PORT.to_string(),
        "--quiet",
        "--buffers",
        &WINDOW.to_string(),
    ]);
    let mut client = h.mtp_command(false, "send")?;
    let (to, size_s, count_s) = (
        format!(
            "{}:{SINK_PORT}",
            Hosts::server_ip(crate::verbs::table::Stack::SluiceTcp)
        ),
        size.to_string(),
        count.to_string(),
    );
    client.args(["--to", &to, "--size", &size_s, "--count", &count_s]);
    client.args(["--window", &WINDOW.to_string()]);
    let what = format!("sluice mtp send --size {size} --count {count} --window {WINDOW}");
    let (out, cpu) = h.measure_commands("mtp-send", &what, server, client, LIMIT, false)?;
    let (msgs, mbps) = parse_send(&out).map_err(|e| e.to_string())?;
    Ok(Bw {
        gbps: positive("Mbit/s", mbps)? / 1000.0,
        msgs_per_s: positive("messages/s", msgs)?,
        cpu: cpu_per_op(cpu, count as f64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_parse_and_others_are_refused() {
        let rpc =
            "sluice mtp: 2000 round trips of 64 bytes: p50 41.2 us, p99 97.0 us, max 310.5 us\n\
                   sluice mtp: echoed digest messages=2000 bytes=128000 fnv=0123456789abcdef\n";
        assert_eq!(parse_rpc(rpc), Ok((41.2, 97.0)));
        let send = "sluice mtp: 20000 messages of 64 bytes acknowledged in 0.812 s (24631 \
                    messages/s, 12.6 Mbit/s)\n";
        assert_eq!(parse_send(send), Ok((24631.0, 12.6)));
        assert_eq!(
            parse_send("nothing\n"),
            Err(ParseError::Missing("send summary"))
        );
        assert!(matches!(
            parse_rpc("sluice mtp: 1 round trips of 64 bytes: p50 x us, p99 1 us"),
            Err(ParseError::BadNumber(_))
        ));
    }
}
