//! Applications written against the core's sans-IO API: a verified bulk transfer and a
//! closed-loop RPC. Being sans-IO themselves, they run unchanged in the simulator, the demo,
//! the fuzzer and the engine.
#![forbid(unsafe_code)]

use std::net::Ipv4Addr;

use sha2::{Digest, Sha256};
use sluice_tcp::{ConnId, Error, Instant, ListenerId, Stack};

/// Fills `buf` with the deterministic pseudo-random stream `seed` at byte `offset`.
pub fn pattern_fill(seed: u64, offset: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        let x = (offset + i as u64) ^ seed.rotate_left(17);
        let mut z = x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z ^= z >> 29;
        *b = (z >> 24) as u8;
    }
}

/// Progress of one side of a transfer.
#[derive(Clone, Debug, Default)]
pub struct Side {
    /// Bytes moved.
    pub bytes: u64,
    /// SHA-256 of the bytes, once complete.
    pub digest: Option<[u8; 32]>,
}

/// A one-way bulk transfer of `total` bytes from a sender to a receiver, verified by hash.
/// The sender connects, sends, then closes; the receiver reads to end of stream and closes.
pub struct BulkTransfer {
    /// Bytes to move.
    pub total: u64,
    seed: u64,
    listener: Option<ListenerId>,
    sender_conn: Option<ConnId>,
    receiver_conn: Option<ConnId>,
    sent: u64,
    sender_hash: Sha256,
    receiver_hash: Sha256,
    /// Sender side progress.
    pub sender: Side,
    /// Receiver side progress.
    pub receiver: Side,
    /// First error seen, if any.
    pub error: Option<Error>,
    /// When the receiver saw end of stream.
    pub finished_at: Option<Instant>,
    shut: bool,
    scratch: Vec<u8>,
    chunk: Vec<u8>,
    chunk_pos: usize,
}

impl BulkTransfer {
    /// Prepares a transfer; `listen` must be called on the receiver before the first step.
    pub fn new(total: u64, seed: u64) -> Self {
        BulkTransfer {
            total,
            seed,
            listener: None,
            sender_conn: None,
            receiver_conn: None,
            sent: 0,
            sender_hash: Sha256::new(),
            receiver_hash: Sha256::new(),
            sender: Side::default(),
            receiver: Side::default(),
            error: None,
            finished_at: None,
            shut: false,
            scratch: vec![0; 64 * 1024],
            chunk: Vec::new(),
            chunk_pos: 0,
        }
    }

    /// Listens on the receiver.
    pub fn listen(&mut self, receiver: &mut Stack, port: u16) -> Result<(), Error> {
        self.listener = Some(receiver.listen(port, 16)?);
        Ok(())
    }

    /// Opens the connection from the sender.
    pub fn connect(
        &mut self,
        now: Instant,
        sender: &mut Stack,
        ip: Ipv4Addr,
        port: u16,
    ) -> Result<(), Error> {
        self.sender_conn = Some(sender.connect(now, ip, port)?);
        Ok(())
    }

    /// Whether both sides finished and verified (or an error stopped the transfer).
    pub fn done(&self) -> bool {
        self.error.is_some() || (self.sender.digest.is_some() && self.receiver.digest.is_some())
    }

    /// Whether the receiver got exactly what the sender sent.
    pub fn verified(&self) -> bool {
        self.error.is_none()
            && self.receiver.bytes == self.total
            && self.sender.digest.is_some()
            && self.sender.digest == self.receiver.digest
    }

    /// Advances both applications as far as the cores allow.
    pub fn step(&mut self, now: Instant, sender: &mut Stack, receiver: &mut Stack) {
        self.step_sender(sender);
        self.step_receiver(now, receiver);
    }

    /// Advances only the sending application (the receiver is not reading).
    pub fn step_sender_only(&mut self, sender: &mut Stack) {
        self.step_sender(sender);
    }

    fn step_sender(&mut self, sender: &mut Stack) {
        let Some(conn) = self.sender_conn else { return };
        while self.sent < self.total {
            if self.chunk_pos == self.chunk.len() {
                // Generate the stream a chunk at a time, only once per byte.
                let n = (self.total - self.sent).min(64 * 1024) as usize;
                self.chunk.resize(n, 0);
                pattern_fill(self.seed, self.sent, &mut self.chunk);
                self.chunk_pos = 0;
            }
            match sender.send(conn, &self.chunk[self.chunk_pos..]) {
                Ok(k) => {
                    self.sender_hash
                        .update(&self.chunk[self.chunk_pos..self.chunk_pos + k]);
                    self.chunk_pos += k;
                    self.sent += k as u64;
                }
                Err(Error::WouldBlock) => return,
                Err(e) => {
                    self.error.get_or_insert(e);
                    return;
                }
            }
        }
        if !self.shut {
            self.shut = true;
            self.sender.bytes = self.sent;
            self.sender.digest = Some(self.sender_hash.clone().finalize().into());
            if let Err(e) = sender.close(conn) {
                self.error.get_or_insert(e);
            }
        }
    }

    fn step_receiver(&mut self, now: Instant, receiver: &mut Stack) {
        if self.receiver_conn.is_none() {
            if let Some(l) = self.listener {
                if let Ok(c) = receiver.accept(l) {
                    self.receiver_conn = Some(c);
                }
            }
        }
        let Some(conn) = self.receiver_conn else {
            return;
        };
        if self.receiver.digest.is_some() {
            return;
        }
        loop {
            match receiver.recv(conn, &mut self.scratch) {
                Ok(0) => {
                    self.receiver.digest = Some(self.receiver_hash.clone().finalize().into());
                    self.finished_at = Some(now);
                    if let Err(e) = receiver.close(conn) {
                        self.error.get_or_insert(e);
                    }
                    return;
                }
                Ok(n) => {
                    self.receiver_hash.update(&self.scratch[..n]);
                    self.receiver.bytes += n as u64;
                }
                Err(Error::WouldBlock) => return,
                Err(e) => {
                    self.error.get_or_insert(e);
                    return;
                }
            }
        }
    }
}

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
