//! A closed-loop request-response (echo) client and server between two cores.

use std::net::Ipv4Addr;

use sluice_tcp::{ConnId, Error, Instant, ListenerId, Stack};

/// A closed-loop RPC: the client sends a `size`-byte request, the server echoes it, the
/// client records the round-trip latency in virtual time and sends the next, `count` times.
pub struct RpcEcho {
    /// Requests to complete.
    pub count: usize,
    size: usize,
    listener: Option<ListenerId>,
    client: Option<ConnId>,
    server: Option<ConnId>,
    in_flight_since: Option<Instant>,
    received: usize,
    /// Round-trip latencies of completed requests.
    pub latencies: Vec<std::time::Duration>,
    /// First error seen, if any.
    pub error: Option<Error>,
    connected: bool,
    buf: Vec<u8>,
}

impl RpcEcho {
    /// Prepares `count` requests of `size` bytes.
    pub fn new(count: usize, size: usize) -> Self {
        RpcEcho {
            count,
            size,
            listener: None,
            client: None,
            server: None,
            in_flight_since: None,
            received: 0,
            latencies: Vec::with_capacity(count),
            error: None,
            connected: false,
            buf: vec![0; 64 * 1024],
        }
    }

    /// Listens on the server.
    pub fn listen(&mut self, server: &mut Stack, port: u16) -> Result<(), Error> {
        self.listener = Some(server.listen(port, 16)?);
        Ok(())
    }

    /// Connects from the client (Nagle off, as RPC clients do).
    pub fn connect(
        &mut self,
        now: Instant,
        client: &mut Stack,
        ip: Ipv4Addr,
        port: u16,
    ) -> Result<(), Error> {
        self.client = Some(client.connect(now, ip, port)?);
        Ok(())
    }

    /// Whether all requests completed (or an error stopped the run).
    pub fn done(&self) -> bool {
        self.error.is_some() || self.latencies.len() >= self.count
    }

    /// Advances client and server.
    pub fn step(&mut self, now: Instant, client: &mut Stack, server: &mut Stack) {
        if self.done() {
            return;
        }
        self.step_server(server);
        let Some(c) = self.client else { return };
        if !self.connected {
            match client.state(c) {
                Ok(sluice_tcp::TcpState::Established) => {
                    self.connected = true;
                    let _ = client.set_nagle(c, false);
                }
                Ok(_) => return,
                Err(e) => {
                    self.error = Some(e);
                    return;
                }
            }
        }
        if self.in_flight_since.is_none() {
            let req = vec![0x5a; self.size];
            match client.send(c, &req) {
                Ok(n) if n == self.size => {
                    self.in_flight_since = Some(now);
                    self.received = 0;
                }
                Ok(_) | Err(Error::WouldBlock) => return,
                Err(e) => {
                    self.error = Some(e);
                    return;
                }
            }
        }
        loop {
            match client.recv(c, &mut self.buf) {
                Ok(0) => {
                    self.error = Some(Error::NotConnected);
                    return;
                }
                Ok(n) => {
                    self.received += n;
                    if self.received >= self.size {
                        if let Some(t0) = self.in_flight_since.take() {
                            self.latencies.push(now - t0);
                        }
                        self.received -= self.size;
                        if !self.done() {
                            self.step(now, client, server);
                        }
                        return;
                    }
                }
                Err(Error::WouldBlock) => return,
                Err(e) => {
                    self.error = Some(e);
                    return;
                }
            }
        }
    }

    fn step_server(&mut self, server: &mut Stack) {
        if self.server.is_none() {
            if let Some(l) = self.listener {
                if let Ok(c) = server.accept(l) {
                    let _ = server.set_nagle(c, false);
                    self.server = Some(c);
                }
            }
        }
        let Some(s) = self.server else { return };
        while let Ok(n) = server.recv(s, &mut self.buf) {
            if n == 0 {
                return;
            }
            // Echo back; the send buffer is far larger than one outstanding request.
            if let Err(e) = server.send(s, &self.buf[..n]) {
                self.error = Some(e);
                return;
            }
        }
    }
}
