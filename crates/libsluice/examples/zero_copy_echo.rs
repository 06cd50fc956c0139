//! A zero-copy echo server on Sluice's native API: one thread serves every connection,
//! reading received bytes where the engine put them (`rx_slice`) and writing the echo where
//! the engine will take it (`tx_slice`), so the only copy is ring to ring (FlexiNS 3.2,
//! Laminar 4.3). It waits on readiness with `Sluice::wait`: polling while the engine
//! polls, then sleeping.
//!
//! ```text
//! sudo sluice lab up && sudo sluice engine --lab &
//! sudo SLUICE_SOCKET=/run/sluice/engine.sock ip netns exec sluice-a \
//!     cargo run -p sluice --example zero_copy_echo -- 7
//! ```
//!
//! Arguments: `PORT [CONNECTIONS]`; with CONNECTIONS it returns once that many were served.
//! It prints `listening PORT` when it accepts. The engine is found through `$SLUICE_SOCKET`.

use std::net::{Ipv4Addr, Shutdown, SocketAddrV4};

use sluice::{Error, Sluice, Socket};

/// A connection being echoed.
struct Conn {
    sock: Socket,
    /// The TX ring was full: wait until it is writable again.
    tx_full: bool,
    /// The peer ended its stream and we ended ours.
    done: bool,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(7);
    let limit: Option<usize> = args.next().map(|a| a.parse()).transpose()?;

    let app = Sluice::attach_from_env()?;
    let listener = Socket::open(&app)?;
    listener.set_nonblocking(true);
    listener.bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))?;
    listener.listen(128)?;
    println!("listening {}", listener.local_addr()?.port());

    let mut conns: Vec<Conn> = Vec::new();
    let mut accepted = 0;
    loop {
        while limit.is_none_or(|n| accepted < n) {
            match listener.accept() {
                Ok((sock, _peer)) => {
                    sock.set_nonblocking(true);
                    conns.push(Conn {
                        sock,
                        tx_full: false,
                        done: false,
                    });
                    accepted += 1;
                }
                Err(Error::WouldBlock) => break,
                Err(e) => return Err(e.into()),
            }
        }
        for conn in &mut conns {
            echo_some(conn)?;
        }
        conns.retain(|c| !c.done);
        if conns.is_empty() && limit.is_some_and(|n| accepted >= n) {
            println!("served {accepted} connections");
            return Ok(());
        }
        app.wait(None, &mut [], &mut || {
            listener.readiness().readable
                || conns.iter().any(|c| {
                    let r = c.sock.readiness();
                    r.readable || r.error || (c.tx_full && r.writable)
                })
        })?;
    }
}

/// Echoes what is readable as far as the TX ring has room, without a buffer of our own.
fn echo_some(conn: &mut Conn) -> Result<(), Error> {
    loop {
        let input = match conn.sock.rx_slice() {
            Ok(input) => input,
            Err(Error::WouldBlock) => return Ok(()),
            Err(e) => return Err(e),
        };
        if input.is_empty() {
            conn.sock.shutdown(Shutdown::Write)?;
            conn.done = true;
            return Ok(());
        }
        let mut output = match conn.sock.tx_slice() {
            Ok(output) => output,
            Err(Error::WouldBlock) => {
                conn.tx_full = true;
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        conn.tx_full = false;
        let n = input.len().min(output.len());
        output[..n].copy_from_slice(&input[..n]); // RX ring to TX ring: the only copy
        drop(output);
        conn.sock.tx_commit(n)?;
        conn.sock.rx_consume(n)?;
    }
}
