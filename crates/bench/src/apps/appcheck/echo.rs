//! `sluice appcheck echo`: many concurrent clients, each sending seeded random messages and
//! checking that every one comes back unchanged.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Instant;

use super::conn::IO_LIMIT;
use super::values::{difference, values};
use super::EchoArgs;
use crate::apps::error::AppsError;

/// One client: connect, wait until every client is connected, then exchange its messages.
fn client(addr: SocketAddr, args: &EchoArgs, id: usize, start: &Barrier) -> Result<u64, AppsError> {
    let conn = TcpStream::connect_timeout(&addr, IO_LIMIT)
        .and_then(|s| {
            s.set_read_timeout(Some(IO_LIMIT))?;
            s.set_write_timeout(Some(IO_LIMIT))?;
            s.set_nodelay(true)?;
            Ok(s)
        })
        .map_err(|e| AppsError::io(format!("client {id}: connect to {addr}"), e));
    // Every client reaches the barrier, also one that failed, so none waits forever.
    start.wait();
    let mut conn = conn?;
    let seed = args.seed.wrapping_mul(1_000_003).wrapping_add(id as u64);
    let mut bytes = 0;
    for (n, msg) in values(seed, args.messages, args.max_len).iter().enumerate() {
        conn.write_all(msg)
            .map_err(|e| AppsError::io(format!("client {id}, message {n}: send"), e))?;
        let mut back = vec![0u8; msg.len()];
        conn.read_exact(&mut back).map_err(|e| {
            AppsError::io(
                format!("client {id}, message {n} ({} bytes): read", msg.len()),
                e,
            )
        })?;
        if back != *msg {
            return Err(AppsError::client(
                format!("client {id}, message {n}"),
                difference(msg, &back),
            ));
        }
        bytes += msg.len() as u64;
    }
    Ok(bytes)
}

/// Runs the check; returns the summary line.
pub fn check(addr: SocketAddr, args: &EchoArgs) -> Result<String, AppsError> {
    if args.clients == 0 {
        return Err(AppsError::Usage("--clients must be at least 1".into()));
    }
    let began = Instant::now();
    let start = Arc::new(Barrier::new(args.clients));
    let mut handles = Vec::with_capacity(args.clients);
    for id in 0..args.clients {
        let start = Arc::clone(&start);
        let a = args.clone();
        let h = thread::Builder::new()
            .name(format!("echo-{id}"))
            .stack_size(256 * 1024)
            .spawn(move || client(addr, &a, id, &start));
        match h {
            Ok(h) => handles.push(h),
            Err(e) => {
                // The barrier counts on every client: without this one, the rest would wait.
                return Err(AppsError::io(format!("spawn echo client {id}"), e));
            }
        }
    }
    let mut bytes = 0u64;
    let mut failures = Vec::new();
    for h in handles {
        match h.join() {
            Ok(Ok(b)) => bytes += b,
            Ok(Err(e)) => failures.push(e.to_string()),
            Err(_) => failures.push("a client thread panicked".into()),
        }
    }
    if let Some(first) = failures.first() {
        return Err(AppsError::Mismatch(format!(
            "echo {addr}: {} of {} clients failed; first: {first}",
            failures.len(),
            args.clients
        )));
    }
    Ok(format!(
        "echo {addr}: {} concurrent clients x {} messages ({:.1} MB) echoed back identical in {:.2} s",
        args.clients,
        args.messages,
        bytes as f64 / 1e6,
        began.elapsed().as_secs_f64()
    ))
}
