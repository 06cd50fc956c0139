//! iperf3 client (`-J`), in either direction: Gbit/s received. In sluice-b against a server
//! on a side, or on a side (over the engine) against a server in sluice-b.

use std::fmt;
use std::net::SocketAddr;
use std::process::Output;
use std::time::Duration;

use serde_json::Value;

use crate::apps::error::AppsError;
use crate::apps::harness::{ClientHost, Harness};
use crate::apps::process::{output_tail, run_captured};
use crate::apps::program::IPERF3;

/// Which way the bytes flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// The iperf3 client to its server.
    ToServer,
    /// The server to the client (`-R`).
    FromServer,
}

impl Direction {
    /// Both directions.
    pub const BOTH: [Direction; 2] = [Direction::ToServer, Direction::FromServer];

    /// For tables: "client->server" or "server->client".
    pub fn name(self) -> &'static str {
        match self {
            Direction::ToServer => "client->server",
            Direction::FromServer => "server->client",
        }
    }
}

/// Runs `iperf3 -c IP -p PORT -4 -t SECONDS -J [-R]` in sluice-b; returns Gbit/s received.
pub fn run(h: &Harness, addr: SocketAddr, dir: Direction, seconds: u32) -> Result<f64, AppsError> {
    let what = format!("iperf3 {} against {addr}", dir.name());
    let mut cmd = h.client(IPERF3)?;
    cmd.args(client_args(addr, dir, seconds));
    let out = run_captured(cmd, &what, limit(seconds))?;
    judge(what, &out)
}

/// Runs the same iperf3 client on `host`'s side (over the engine on Side::Engine) against
/// a server at `addr` (the peer in sluice-b); returns Gbit/s received. With
/// [`Direction::ToServer`] the side sends, with [`Direction::FromServer`] (`-R`) it receives.
pub fn run_on(
    host: &mut ClientHost<'_>,
    addr: SocketAddr,
    dir: Direction,
    seconds: u32,
) -> Result<f64, AppsError> {
    let what = format!("iperf3 -c {addr} {} on {}", dir.name(), host.side());
    let out = host.run(IPERF3, &client_args(addr, dir, seconds), limit(seconds))?;
    judge(what, &out).map_err(|e| host.with_engine_log(e))
}

/// `-c IP -p PORT -4 -t SECONDS -J [-R]`.
fn client_args(addr: SocketAddr, dir: Direction, seconds: u32) -> Vec<String> {
    let mut args: Vec<String> = [
        "-c".into(),
        addr.ip().to_string(),
        "-p".into(),
        addr.port().to_string(),
        "-4".into(),
        "-t".into(),
        seconds.max(1).to_string(),
        "-J".into(),
    ]
    .into();
    if dir == Direction::FromServer {
        args.push("-R".into());
    }
    args
}

/// How long a client run of `seconds` may take.
fn limit(seconds: u32) -> Duration {
    Duration::from_secs(u64::from(seconds) + 30)
}

/// The rate from a client run's JSON, or why it failed: iperf3 -J reports its own errors as
/// JSON on stdout, with a nonzero exit.
fn judge(what: String, out: &Output) -> Result<f64, AppsError> {
    let json = String::from_utf8_lossy(&out.stdout);
    match parse(&json) {
        Ok(gbps) if out.status.success() => Ok(gbps),
        Ok(_) => Err(AppsError::client(
            what,
            format!("{}; output:\n{}", out.status, output_tail(out)),
        )),
        Err(e) if json.trim().is_empty() => Err(AppsError::client(
            what,
            format!("{e}; {}; output:\n{}", out.status, output_tail(out)),
        )),
        Err(e) => Err(AppsError::client(what, e.to_string())),
    }
}

/// Why iperf3's JSON gave no rate.
#[derive(Debug)]
pub enum ParseError {
    /// What it printed is not JSON.
    NotJson(serde_json::Error),
    /// iperf3 reported an error of its own.
    Reported(String),
    /// The JSON has no received rate.
    NoRate,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::NotJson(e) => write!(f, "iperf3 printed no JSON ({e})"),
            ParseError::Reported(err) => write!(f, "iperf3: {err}"),
            ParseError::NoRate => {
                f.write_str("no end.sum_received.bits_per_second in iperf3's JSON")
            }
        }
    }
}

impl std::error::Error for ParseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ParseError::NotJson(e) => Some(e),
            _ => None,
        }
    }
}

/// Gbit/s received (`end.sum_received.bits_per_second`) from iperf3's JSON.
pub fn parse(json: &str) -> Result<f64, ParseError> {
    let v: Value = serde_json::from_str(json).map_err(ParseError::NotJson)?;
    if let Some(err) = v.get("error").and_then(Value::as_str) {
        return Err(ParseError::Reported(err.to_owned()));
    }
    v.pointer("/end/sum_received/bits_per_second")
        .and_then(Value::as_f64)
        .filter(|b| b.is_finite())
        .map(|b| b / 1e9)
        .ok_or(ParseError::NoRate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_received_rate_and_errors() {
        let ok = r#"{"start":{},"end":{"sum_sent":{"bits_per_second":2e10},
            "sum_received":{"bits_per_second":15963994048.2}}}"#;
        assert!((parse(ok).unwrap() - 15.9639940482).abs() < 1e-9);
        let err = r#"{"start":{},"error":"unable to connect to server: Connection refused"}"#;
        assert!(parse(err)
            .unwrap_err()
            .to_string()
            .contains("Connection refused"));
        assert!(parse("not json").is_err());
        assert!(parse("{}").is_err());
    }
}
