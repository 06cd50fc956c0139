//! `sluice appcheck`: the verification clients, run in sluice-b on kernel sockets with fixed
//! seeds. Each prints one summary line, or fails with the first mismatch.

mod conn;
mod echo;
mod memcached;
mod redis;
mod values;

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::error::AppsError;

/// `sluice appcheck`.
#[derive(Args, Debug)]
pub struct AppcheckArgs {
    #[command(subcommand)]
    what: What,
}

/// Which server to check.
#[derive(Subcommand, Debug)]
enum What {
    /// SET random binary values over RESP and GET each back.
    Redis(KvArgs),
    /// `set` random binary values with memcached's text protocol and `get` each back.
    Memcached(KvArgs),
    /// Concurrent clients each sending random messages to an echo server.
    Echo(EchoArgs),
}

/// Arguments of the key-value checks.
#[derive(Args, Clone, Debug)]
pub struct KvArgs {
    /// The server.
    #[arg(long)]
    pub addr: SocketAddr,
    /// How many values.
    #[arg(long, default_value_t = 10_000)]
    pub count: usize,
    /// Values are 1..=MAX_LEN bytes long.
    #[arg(long, default_value_t = 4096)]
    pub max_len: usize,
    /// Seed of the values.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Commands sent before reading their replies.
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
}

/// Arguments of the echo check.
#[derive(Args, Clone, Debug)]
pub struct EchoArgs {
    /// The server.
    #[arg(long)]
    pub addr: SocketAddr,
    /// Concurrent clients (one thread and connection each).
    #[arg(long, default_value_t = 100)]
    pub clients: usize,
    /// Messages per client.
    #[arg(long, default_value_t = 50)]
    pub messages: usize,
    /// Messages are 1..=MAX_LEN bytes long.
    #[arg(long, default_value_t = 4096)]
    pub max_len: usize,
    /// Seed of the messages.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Runs `sluice appcheck` and prints its summary line.
pub fn run(args: &AppcheckArgs) -> Result<(), AppsError> {
    let summary = match &args.what {
        What::Redis(a) => redis::check(a.addr, a)?,
        What::Memcached(a) => memcached::check(a.addr, a)?,
        What::Echo(a) => echo::check(a.addr, a)?,
    };
    println!("{summary}");
    Ok(())
}

/// The summary of a key-value check, or the mismatches it found.
fn verdict(
    name: &str,
    addr: SocketAddr,
    args: &KvArgs,
    vals: &[Vec<u8>],
    wrong: &[String],
    took: Duration,
) -> Result<String, AppsError> {
    if let Some(first) = wrong.first() {
        return Err(AppsError::Mismatch(format!(
            "{name} {addr}: {} of {} values came back wrong; first: {first}",
            wrong.len(),
            vals.len()
        )));
    }
    let bytes: usize = vals.iter().map(Vec::len).sum();
    Ok(format!(
        "{name} {addr}: {} values (1..={} bytes, {:.1} MB, seed {}) stored and read back identical in {:.2} s",
        vals.len(),
        args.max_len,
        bytes as f64 / 1e6,
        args.seed,
        took.as_secs_f64()
    ))
}
