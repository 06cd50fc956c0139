//! A sockets-like echo server on Sluice's native API: attach to the engine, listen, and echo
//! each connection on a thread of its own with blocking `recv` and `send`, as one would with
//! `std::net`.
//!
//! ```text
//! sudo sluice lab up && sudo sluice engine --lab &          # the engine as a service
//! sudo SLUICE_SOCKET=/run/sluice/engine.sock ip netns exec sluice-a \
//!     cargo run -p sluice --example echo_server -- 7
//! sudo ip netns exec sluice-b nc 10.77.0.1 7                 # a Linux client
//! ```
//!
//! Arguments: `PORT [CONNECTIONS]`; with CONNECTIONS it returns once that many were served.
//! It prints `listening PORT` when it accepts. The engine is found through `$SLUICE_SOCKET`.

use std::net::{Ipv4Addr, Shutdown, SocketAddrV4};
use std::thread;

use sluice::{Error, Sluice, Socket};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(7);
    let limit: Option<usize> = args.next().map(|a| a.parse()).transpose()?;

    let app = Sluice::attach_from_env()?;
    let listener = Socket::open(&app)?;
    listener.bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))?;
    listener.listen(128)?;
    println!("listening {}", listener.local_addr()?.port());

    let mut served = Vec::new();
    while limit.is_none_or(|n| served.len() < n) {
        let (conn, peer) = listener.accept()?;
        let worker = thread::spawn(move || echo(&conn).map_err(|e| format!("{peer}: {e}")));
        if limit.is_some() {
            served.push(worker);
        }
    }
    for worker in served {
        let bytes = worker.join().map_err(|_| "an echo thread panicked")??;
        println!("echoed {bytes} bytes");
    }
    Ok(())
}

/// Echoes until the peer's end of stream, then ends ours; returns the bytes echoed.
fn echo(conn: &Socket) -> Result<u64, Error> {
    let mut buf = [0u8; 16 * 1024];
    let mut total = 0;
    loop {
        let n = conn.recv(&mut buf)?;
        if n == 0 {
            break;
        }
        let mut sent = 0;
        while sent < n {
            sent += conn.send(&buf[sent..n])?;
        }
        total += n as u64;
    }
    conn.shutdown(Shutdown::Write)?;
    Ok(total)
}
