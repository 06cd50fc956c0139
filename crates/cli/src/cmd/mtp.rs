//! `sluice mtp send|recv|rpc`: MTP messages through a running engine (`sluice engine`),
//! attached over its control socket like any application (docs/mtp.md).

use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use hdrhistogram::Histogram;
use sluice::mtp::{CqeKind, Endpoint, EndpointConfig, MtpError, MtpStatus, Rpc};
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
    /// No line per message (throughput runs); the totals and digest are still printed.
    #[arg(long)]
    quiet: bool,
    /// Receive buffers posted: messages the engine may place before this program takes them.
    #[arg(long, default_value_t = 8)]
    buffers: usize,
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
    /// Mixed sizes: message k gets a size between --size and this, log-uniformly (the
    /// first --size, the second this), the same sequence every run.
    #[arg(long)]
    max_size: Option<usize>,
    /// Messages (or round trips).
    #[arg(long, default_value_t = 1)]
    count: u64,
    /// The messages' priority.
    #[arg(long, default_value_t = 0)]
    priority: u8,
    /// The messages' traffic class.
    #[arg(long, default_value_t = 0)]
    tc: u8,
    /// Messages outstanding at most (`send`: the endpoint's send slots; a throughput run
    /// with few is bound by the round trip, not by the engines).
    #[arg(long, default_value_t = 8)]
    window: usize,
}

/// Runs `sluice mtp ...`.
pub fn run(cmd: &MtpCommand) -> Result<(), CliError> {
    match cmd {
        MtpCommand::Recv(a) => recv(a),
        MtpCommand::Send(a) => send(a),
        MtpCommand::Rpc(a) => rpc(a),
    }
}

impl SendArgs {
    /// The sizes as printed: `N` or `MIN..MAX`.
    fn sizes(&self) -> String {
        match self.max_size {
            Some(max) => format!("{}..{max}", self.size),
            None => self.size.to_string(),
        }
    }

    /// The size of message `k`: --size, or with --max-size one drawn log-uniformly between
    /// the two by a hash of k (message 0 the smallest, message 1 the largest).
    fn size_of(&self, k: u64) -> usize {
        let Some(max) = self.max_size.filter(|m| *m > self.size) else {
            return self.size;
        };
        let min = self.size.max(1) as f64;
        let u = match k {
            0 => 0.0,
            1 => 1.0,
            _ => (fnv1a(FNV_OFFSET, &k.to_le_bytes()) >> 11) as f64 / (1u64 << 53) as f64,
        };
        ((min * (max as f64 / min).powf(u)).round() as usize).clamp(self.size, max)
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a (64 bits) of `data` from `h`.
fn fnv1a(mut h: u64, data: &[u8]) -> u64 {
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// What a run sent or received: messages, bytes, and the sum of every message's FNV-1a
/// hash (order-free, as messages may complete in any order); equal digests on both ends
/// mean the same messages arrived byte for byte.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Digest {
    messages: u64,
    bytes: u64,
    sum: u64,
}

impl Digest {
    fn add(&mut self, data: &[u8]) {
        self.messages += 1;
        self.bytes += data.len() as u64;
        // The length is hashed too, so messages that differ only by trailing bytes differ.
        let h = fnv1a(FNV_OFFSET, &(data.len() as u64).to_le_bytes());
        self.sum = self.sum.wrapping_add(fnv1a(h, data));
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "digest messages={} bytes={} fnv={:016x}",
            self.messages, self.bytes, self.sum
        )
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
    let cfg = EndpointConfig {
        recv_buffers: a.buffers.max(1),
        ..EndpointConfig::default()
    };
    let ep = Endpoint::bind_with(&app, a.port, cfg)?;
    println!("sluice mtp: receiving on port {}", ep.port());
    let mut got = 0u64;
    let mut bytes = 0u64;
    let mut digest = Digest::default();
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
        digest.add(&m.data);
        if a.echo {
            ep.send_message(m.src, &m.data, m.priority, m.tc)?;
        } else if !a.quiet {
            println!(
                "{} bytes from {} (message {})",
                m.data.len(),
                m.src,
                m.msg_id
            );
        }
    }
    if a.echo {
        // The echoes still in flight when the count is reached are sent before leaving.
        let deadline = Instant::now() + PATIENCE;
        while ep.in_flight() > 0 && Instant::now() < deadline {
            if ep.completion().is_none() {
                ep.wait(Some(Duration::from_millis(100)))?;
            }
        }
    }
    // TIME-WAIT in spirit (RFC 9293 3.6): the acknowledgement of the last packets may be
    // lost, and only a bound endpoint is acknowledged, so stay bound a while for the
    // sender's retransmissions; leaving at once fails its message after its timeouts.
    let linger = Instant::now() + RECV_LINGER;
    while Instant::now() < linger {
        ep.wait(Some(linger.saturating_duration_since(Instant::now())))?;
        while ep.recv_message().is_some() || ep.completion().is_some() {}
    }
    println!("sluice mtp: {got} messages, {bytes} bytes");
    println!("sluice mtp: received {digest}");
    Ok(())
}

/// How long `recv` stays bound after its last message (see the comment in `recv`).
const RECV_LINGER: Duration = Duration::from_millis(500);

fn send(a: &SendArgs) -> Result<(), CliError> {
    let app = Sluice::attach(&a.engine.socket)?;
    let cfg = EndpointConfig {
        send_slots: a.window.max(1),
        ..EndpointConfig::default()
    };
    let ep = Endpoint::bind_with(&app, 0, cfg)?;
    let largest = a.max_size.unwrap_or(a.size).max(a.size);
    if largest > ep.max_message() {
        return Err(CliError::usage(format!(
            "--size/--max-size {largest} is over the engine's largest message, {}",
            ep.max_message()
        )));
    }
    let start = Instant::now();
    let mut digest = Digest::default();
    // Completions are taken as they come: the endpoint keeps a bounded number, so waiting
    // for each id only at the end would miss the early ones of a long run.
    let mut done = 0u64;
    for k in 0..a.count {
        let data = pattern(k, a.size_of(k));
        digest.add(&data);
        ep.send_message(a.to, &data, a.priority, a.tc)?;
        while let Some(sent) = take_completion(&ep)? {
            done += u64::from(sent);
        }
    }
    let mut deadline = Instant::now() + PATIENCE;
    while done < a.count {
        if let Some(sent) = take_completion(&ep)? {
            done += u64::from(sent);
            deadline = Instant::now() + PATIENCE;
            continue;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(CliError::Mtp(MtpError::TimedOut));
        }
        ep.wait(Some(left))?;
    }
    let secs = start.elapsed().as_secs_f64();
    let size = a.sizes();
    println!(
        "sluice mtp: {} messages of {size} bytes acknowledged in {:.3} s ({:.0} messages/s, {:.1} Mbit/s)",
        a.count,
        secs,
        a.count as f64 / secs,
        digest.bytes as f64 * 8.0 / secs / 1e6
    );
    println!("sluice mtp: sent {digest}");
    Ok(())
}

/// Takes one completion: None if there is none, Some(true) for a send acknowledged,
/// Some(false) for another kind; a failed send is an error.
fn take_completion(ep: &Endpoint) -> Result<Option<bool>, CliError> {
    let Some(c) = ep.completion() else {
        return Ok(None);
    };
    if c.kind != CqeKind::Sent {
        return Ok(Some(false));
    }
    if c.status != MtpStatus::Success {
        return Err(CliError::Mtp(MtpError::Failed(c.status)));
    }
    Ok(Some(true))
}

fn rpc(a: &SendArgs) -> Result<(), CliError> {
    let app = Sluice::attach(&a.engine.socket)?;
    let mut rpc = Rpc::new(Endpoint::bind(&app, 0)?);
    let mut hist = Histogram::<u64>::new(3)?;
    let mut digest = Digest::default();
    for k in 0..a.count {
        let req = pattern(k, a.size_of(k));
        digest.add(&req);
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
        a.sizes(),
        us(0.5),
        us(0.99),
        hist.max() as f64 / 1000.0
    );
    // Every response equalled its request, so this digest is that of both directions.
    println!("sluice mtp: echoed {digest}");
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
    fn mixed_sizes_span_the_range_and_digests_see_every_byte() {
        let c = Cli::try_parse_from([
            "mtp",
            "send",
            "--to",
            "10.0.0.2:9",
            "--size",
            "1",
            "--max-size",
            "1048576",
        ])
        .unwrap();
        let MtpCommand::Send(s) = c.cmd else {
            panic!("not send")
        };
        assert_eq!((s.size_of(0), s.size_of(1)), (1, 1 << 20));
        let sizes: Vec<usize> = (2..1000).map(|k| s.size_of(k)).collect();
        assert!(sizes.iter().all(|n| (1..=1 << 20).contains(n)));
        assert!(sizes.iter().any(|n| *n < 1000) && sizes.iter().any(|n| *n > 100_000));
        let (mut a, mut b) = (Digest::default(), Digest::default());
        a.add(b"xy");
        a.add(b"z");
        b.add(b"z");
        b.add(b"xy");
        assert_eq!(a, b, "order does not matter");
        b.add(b"");
        assert_ne!(a, b);
        let mut c = Digest::default();
        c.add(b"xz");
        c.add(b"y");
        assert_ne!(a.sum, c.sum, "one changed byte changes it");
    }

    #[test]
    fn patterns_differ_by_message() {
        assert_eq!(pattern(0, 3), [0, 31, 62]);
        assert_ne!(pattern(1, 8), pattern(2, 8));
        assert!(pattern(0, 0).is_empty());
    }
}
