//! An echo server: every connection gets back what it sends.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, DefaultHasher};

use sluice_tcp::{ConnId, Error, ListenerId, Stack};

/// Bytes received but not yet accepted by the send buffer, per connection.
struct EchoConn {
    pending: Vec<u8>,
    peer_closed: bool,
}

/// Echoes every connection on one port.
pub struct EchoServer {
    listener: ListenerId,
    /// A fixed hasher, so connections are served in the same order in every run (the
    /// simulator's runs are exact).
    conns: HashMap<ConnId, EchoConn, BuildHasherDefault<DefaultHasher>>,
    buf: Vec<u8>,
    /// Connections served to completion.
    pub completed: u64,
}

impl EchoServer {
    /// Listens on `port`.
    pub fn listen(stack: &mut Stack, port: u16, backlog: usize) -> Result<Self, Error> {
        Ok(EchoServer {
            listener: stack.listen(port, backlog)?,
            conns: HashMap::default(),
            buf: vec![0; 64 * 1024],
            completed: 0,
        })
    }

    /// Accepts, echoes and closes as far as the core allows.
    pub fn poll(&mut self, stack: &mut Stack) {
        while let Ok(c) = stack.accept(self.listener) {
            let _ = stack.set_nagle(c, false);
            self.conns.insert(
                c,
                EchoConn {
                    pending: Vec::new(),
                    peer_closed: false,
                },
            );
        }
        let mut finished = Vec::new();
        for (&c, conn) in self.conns.iter_mut() {
            if echo_one(stack, c, conn, &mut self.buf) {
                finished.push(c);
            }
        }
        for c in finished {
            self.conns.remove(&c);
            let _ = stack.close(c);
            self.completed += 1;
        }
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.conns.len()
    }
}

/// Moves one connection forward; true when it is done (peer closed, everything echoed, or failed).
fn echo_one(stack: &mut Stack, c: ConnId, conn: &mut EchoConn, buf: &mut [u8]) -> bool {
    loop {
        if !conn.pending.is_empty() {
            match stack.send(c, &conn.pending) {
                Ok(n) => {
                    conn.pending.drain(..n);
                }
                Err(Error::WouldBlock) => return false,
                Err(_) => return true,
            }
            if !conn.pending.is_empty() {
                return false; // send buffer full: read no more until it drains
            }
        }
        if conn.peer_closed {
            return true;
        }
        match stack.recv(c, buf) {
            Ok(0) => conn.peer_closed = true,
            Ok(n) => conn.pending.extend_from_slice(&buf[..n]),
            Err(Error::WouldBlock) => return false,
            Err(_) => return true,
        }
    }
}
