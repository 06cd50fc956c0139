//! `sluice mtp send|recv|rpc`: MTP messages through a running engine (`sluice engine`),
//! attached over its control socket like any application (docs/mtp.md).

use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use hdrhistogram::Histogram;
use sluice::mtp::{Endpoint, MtpError, MtpStatus, Rpc};
use sluice::Sluice;
use sluice_shm::control::DEFAULT_SOCKET;

use crate::error::CliError;

/// How long a send or a call may take before the command gives up.
const PATIENCE: Duration = Duration::from_secs(10);

/// The engine to attach to.
#[derive(Args, Debug)]
pub struct EngineSocket {
    /// The running engine's control socket.
    #[arg(long, default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
}

/// `sluice mtp`.
#[derive(Subcommand, Debug)]
pub enum MtpCommand {
    /// Receives messages on a port (and echoes them back with --echo).
    Recv(RecvArgs),
    /// Sends K messages of N bytes and waits for each to be acknowledged.
    Send(SendArgs),
    /// K request/response round trips of N bytes; prints p50/p99.
    Rpc(SendArgs),
}

/// `sluice mtp recv`.
#[derive(Args, Debug)]
pub struct RecvArgs {
    #[command(flatten)]
    engine: EngineSocket,
    /// The MTP port.
    #[arg(long)]
    port: u16,
    /// Send every message back to its sender (an RPC server, as `sluice mtp rpc` expects).
    #[arg(long)]
    echo: bool,
    /// Stop after this many messages.
    #[arg(long)]
    count: Option<u64>,
}

/// `sluice mtp send` and `sluice mtp rpc`.
#[derive(Args, Debug)]
pub struct SendArgs {
    #[command(flatten)]
    engine: EngineSocket,
    /// The destination, IP:PORT.
    #[arg(long)]
    to: SocketAddrV4,
    /// Bytes per message (the RPC id comes on top for `rpc`).
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Messages (or round trips).
    #[arg(long, default_value_t = 1)]
    count: u64,
    /// The messages' priority.
    #[arg(long, default_value_t = 0)]
    priority: u8,
    /// The messages' traffic class.
    #[arg(long, default_value_t = 0)]
    tc: u8,
}

/// Runs `sluice mtp ...`.
pub fn run(cmd: &MtpCommand) -> Result<(), CliError> {
    match cmd {
        MtpCommand::Recv(a) => recv(a),
        MtpCommand::Send(a) => send(a),
        MtpCommand::Rpc(a) => rpc(a),
    }
}

/// The bytes of message `k` of `size` (a pattern the receiver can recognise).
fn pattern(k: u64, size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(k) as u8)
        .collect()
}

fn recv(a: &RecvArgs) -> Result<(), CliError> {
    let app = Sluice::attach(&a.engine.socket)?;
    let ep = Endpoint::bind(&app, a.port)?;
    println!("sluice mtp: receiving on port {}", ep.port());
    let mut got = 0u64;
    let mut bytes = 0u64;
    while a.count.is_none_or(|c| got < c) {
        let Some(m) = ep.recv_message() else {
            ep.wait(Some(Duration::from_secs(1)))?;
            // Take send completions of echoes, so they never pile up.
            while let Some(c) = ep.completion() {
                if c.status != MtpStatus::Success {
                    eprintln!("sluice mtp: echo to {} failed: {}", c.peer, c.status);
                }
            }
            continue;
        };
        got += 1;
        bytes += m.data.len() as u64;
        if a.echo {
            ep.send_message(m.src, &m.data, m.priority, m.tc)?;
        } else {
            println!(
                "{} bytes from {} (message {})",
                m.data.len(),
                m.src,
                m.msg_id
            );
        }
    }
    println!("sluice mtp: {got} messages, {bytes} bytes");
    Ok(())
}

fn send(a: &SendArgs) -> Result<(), CliError> {
    let app = Sluice::attach(&a.engine.socket)?;
    let ep = Endpoint::bind(&app, 0)?;
    if a.size > ep.max_message() {
        return Err(CliError::usage(format!(
            "--size {} is over the engine's largest message, {}",
            a.size,
            ep.max_message()
        )));
    }
    let start = Instant::now();
    let mut ids = Vec::new();
    for k in 0..a.count {
        ids.push(ep.send_message(a.to, &pattern(k, a.size), a.priority, a.tc)?);
    }
    for id in ids {
        ep.wait_sent(id, Some(PATIENCE))?;
    }
    let secs = start.elapsed().as_secs_f64();
    let total = a.count * a.size as u64;
    println!(
        "sluice mtp: {} messages of {} bytes acknowledged in {:.3} s ({:.0} messages/s, {:.1} Mbit/s)",
        a.count,
        a.size,
        secs,
        a.count as f64 / secs,
        total as f64 * 8.0 / secs / 1e6
    );
    Ok(())
}

fn rpc(a: &SendArgs) -> Result<(), CliError> {
    let app = Sluice::attach(&a.engine.socket)?;
    let mut rpc = Rpc::new(Endpoint::bind(&app, 0)?);
    let mut hist = Histogram::<u64>::new(3)?;
    for k in 0..a.count {
        let req = pattern(k, a.size);
        let t = Instant::now();
        let reply = rpc.call(a.to, &req, PATIENCE)?;
        hist.record(t.elapsed().as_nanos() as u64)?;
        if reply != req {
            return Err(CliError::Mtp(MtpError::Protocol(format!(
                "round trip {k}: the response is not the request echoed"
            ))));
        }
    }
    let us = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "sluice mtp: {} round trips of {} bytes: p50 {:.1} us, p99 {:.1} us, max {:.1} us",
        a.count,
        a.size,
        us(0.5),
        us(0.99),
        hist.max() as f64 / 1000.0
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: MtpCommand,
    }

    #[test]
    fn the_flags_parse_and_a_bad_destination_is_refused() {
        let c = Cli::try_parse_from([
            "mtp",
            "send",
            "--to",
            "10.0.0.2:9000",
            "--size",
            "1000",
            "--count",
            "5",
        ])
        .unwrap();
        let MtpCommand::Send(s) = c.cmd else {
            panic!("not send")
        };
        assert_eq!(s.to, "10.0.0.2:9000".parse().unwrap());
        assert_eq!((s.size, s.count), (1000, 5));
        assert_eq!(s.engine.socket, PathBuf::from(DEFAULT_SOCKET));
        assert!(Cli::try_parse_from(["mtp", "send", "--to", "10.0.0.2"]).is_err());
        let r = Cli::try_parse_from(["mtp", "recv", "--port", "7", "--echo", "--socket", "/x"])
            .unwrap();
        let MtpCommand::Recv(r) = r.cmd else {
            panic!("not recv")
        };
        assert!(r.echo);
        assert_eq!((r.port, r.engine.socket.to_str()), (7, Some("/x")));
        assert!(Cli::try_parse_from(["mtp", "rpc", "--to", "1.2.3.4:5"]).is_ok());
    }

    #[test]
    fn patterns_differ_by_message() {
        assert_eq!(pattern(0, 3), [0, 31, 62]);
        assert_ne!(pattern(1, 8), pattern(2, 8));
        assert!(pattern(0, 0).is_empty());
    }
}
