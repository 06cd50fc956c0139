//! A closed-loop RPC client against any echo server: one request in flight, each echo checked
//! byte for byte, round-trip latency recorded in the caller's time.

use std::net::Ipv4Addr;
use std::time::Duration;

use sluice_tcp::{ConnId, Error, Instant, Stack, TcpState};

use crate::pattern::pattern_fill;

/// Why an RPC client stopped early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RpcClientError {
    /// A core call failed or the connection broke.
    Core(Error),
    /// The server closed before every request was answered.
    ClosedEarly,
    /// An echoed byte differed from the request (at this offset of the request).
    Mismatch(usize),
}

impl std::fmt::Display for RpcClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RpcClientError::Core(e) => write!(f, "{e}"),
            RpcClientError::ClosedEarly => f.write_str("server closed before the last reply"),
            RpcClientError::Mismatch(at) => write!(f, "echo differs from request at byte {at}"),
        }
    }
}

impl std::error::Error for RpcClientError {}

impl From<Error> for RpcClientError {
    fn from(e: Error) -> Self {
        RpcClientError::Core(e)
    }
}

/// Sends `count` requests of `size` bytes, one at a time, to an echo server, then closes.
pub struct RpcClient {
    conn: ConnId,
    count: u64,
    request: Vec<u8>,
    buf: Vec<u8>,
    sent_at: Option<Instant>,
    received: usize,
    connected: bool,
    closed: bool,
    /// Requests answered so far.
    pub completed: u64,
    /// Round-trip latency of each answered request.
    pub latencies: Vec<Duration>,
    /// Why the client stopped early, if it did.
    pub error: Option<RpcClientError>,
    /// When the client finished: every reply in and its close acknowledged.
    pub finished_at: Option<Instant>,
}

impl RpcClient {
    /// Connects to `ip:port`; requests carry the deterministic stream `seed`.
    pub fn connect(
        stack: &mut Stack,
        now: Instant,
        ip: Ipv4Addr,
        port: u16,
        count: u64,
        size: usize,
        seed: u64,
    ) -> Result<Self, Error> {
        if size == 0 {
            return Err(Error::InvalidArgument);
        }
        let conn = stack.connect(now, ip, port)?;
        let mut request = vec![0; size];
        pattern_fill(seed, 0, &mut request);
        Ok(RpcClient {
            conn,
            count,
            request,
            buf: vec![0; size.min(64 * 1024)],
            sent_at: None,
            received: 0,
            connected: false,
            closed: false,
            completed: 0,
            // Bounded by `count`, which the caller chose.
            latencies: Vec::with_capacity(count.min(1 << 20) as usize),
            error: None,
            finished_at: None,
        })
    }

    /// Whether every request was answered and the close acknowledged, or the client failed.
    pub fn done(&self) -> bool {
        self.error.is_some() || (self.closed && self.finished_at.is_some())
    }

    /// Moves the loop forward at `now`; returns whether the client is done.
    pub fn poll(&mut self, stack: &mut Stack, now: Instant) -> bool {
        if self.error.is_none() {
            if let Err(e) = self.step(stack, now) {
                self.error = Some(e);
                let _ = stack.abort(self.conn);
            }
        }
        self.done()
    }

    fn step(&mut self, stack: &mut Stack, now: Instant) -> Result<(), RpcClientError> {
        if !self.connected {
            match stack.state(self.conn)? {
                TcpState::SynSent | TcpState::SynReceived => return Ok(()),
                _ => {}
            }
            if let Some(e) = stack.error(self.conn)? {
                return Err(Error::Connection(e).into());
            }
            self.connected = true;
            // One small request at a time: Nagle would hold it for the previous ACK.
            stack.set_nagle(self.conn, false)?;
        }
        while self.completed < self.count {
            if self.sent_at.is_none() {
                match stack.send(self.conn, &self.request) {
                    // A partial send is completed below before the reply can come.
                    Ok(n) if n == self.request.len() => {}
                    Ok(_) | Err(Error::WouldBlock) => return Ok(()),
                    Err(e) => return Err(e.into()),
                }
                self.sent_at = Some(now);
                self.received = 0;
            }
            match stack.recv(self.conn, &mut self.buf) {
                Ok(0) => return Err(RpcClientError::ClosedEarly),
                Ok(n) => {
                    let expected = self.request.get(self.received..self.received + n);
                    if expected != Some(&self.buf[..n]) {
                        let at = (0..n)
                            .find(|&i| self.request.get(self.received + i) != Some(&self.buf[i]))
                            .unwrap_or(0);
                        return Err(RpcClientError::Mismatch(self.received + at));
                    }
                    self.received += n;
                    if self.received == self.request.len() {
                        if let Some(t0) = self.sent_at.take() {
                            self.latencies.push(now.saturating_since(t0));
                        }
                        self.completed += 1;
                    }
                }
                Err(Error::WouldBlock) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        if !self.closed {
            stack.shutdown(self.conn)?;
            self.closed = true;
        }
        // Done once our FIN is acknowledged; drain the server's FIN if it came.
        let _ = stack.recv(self.conn, &mut self.buf);
        match stack.state(self.conn) {
            Ok(TcpState::FinWait2 | TcpState::TimeWait | TcpState::Closed) => {
                let _ = stack.close(self.conn);
                self.finished_at.get_or_insert(now);
            }
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }
}
