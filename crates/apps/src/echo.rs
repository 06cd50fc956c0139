//! An echo server: every connection gets back what it sends.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, DefaultHasher};

use sluice_tcp::{ConnId, Error, Event, ListenerId, Stack};

/// Bytes received but not yet accepted by the send buffer, per connection.
struct EchoConn {
    pending: Vec<u8>,
    peer_closed: bool,
}

/// Echoes every connection on one port.
pub struct EchoServer {
    listener: ListenerId,
    /// A fixed hasher, so runs are the same every time (the simulator's runs are exact);
    /// the order of service is the core's event order.
    conns: HashMap<ConnId, EchoConn, BuildHasherDefault<DefaultHasher>>,
    buf: Vec<u8>,
    /// Connections to look at in this poll (kept to reuse its allocation).
    ready: Vec<ConnId>,
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
            ready: Vec::new(),
            completed: 0,
        })
    }

    /// Accepts, echoes and closes as far as the core allows. Only connections the core
    /// reported ready (and new ones) are looked at, so a poll costs what happened, not the
    /// number of connections held: this server consumes the stack's events, and ignores
    /// those of connections that are not its own.
    pub fn poll(&mut self, stack: &mut Stack) {
        let mut ready = std::mem::take(&mut self.ready);
        while let Ok(c) = stack.accept(self.listener) {
            let _ = stack.set_nagle(c, false);
            self.conns.insert(
                c,
                EchoConn {
                    pending: Vec::new(),
                    peer_closed: false,
                },
            );
            // Data may have come before the accept, with no event of its own.
            ready.push(c);
        }
        while let Some(event) = stack.poll_event() {
            if let Event::Conn(c, _) = event {
                ready.push(c);
            }
        }
        for &c in &ready {
            let Some(conn) = self.conns.get_mut(&c) else {
                continue; // not ours, or already finished in this poll
            };
            if echo_one(stack, c, conn, &mut self.buf) {
                self.conns.remove(&c);
                let _ = stack.close(c);
                self.completed += 1;
            }
        }
        ready.clear();
        self.ready = ready;
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
