//! A source: connects, sends `bytes` of the deterministic stream, closes, and reports the
//! stream's SHA-256.

use std::net::Ipv4Addr;

use sha2::{Digest, Sha256};
use sluice_tcp::{ConnId, Error, Instant, Stack, TcpState};

use crate::pattern::pattern_fill;

/// Sends one deterministic stream to a server.
pub struct Source {
    conn: ConnId,
    total: u64,
    seed: u64,
    sent: u64,
    hash: Sha256,
    chunk: Vec<u8>,
    chunk_pos: usize,
    closed: bool,
    /// SHA-256 of what was sent, once everything was handed to the core and the connection closed.
    pub sha256: Option<[u8; 32]>,
}

impl Source {
    /// Connects to `ip:port`.
    pub fn connect(
        stack: &mut Stack,
        now: Instant,
        ip: Ipv4Addr,
        port: u16,
        bytes: u64,
        seed: u64,
    ) -> Result<Self, Error> {
        let conn = stack.connect(now, ip, port)?;
        Ok(Source {
            conn,
            total: bytes,
            seed,
            sent: 0,
            hash: Sha256::new(),
            chunk: Vec::new(),
            chunk_pos: 0,
            closed: false,
            sha256: None,
        })
    }

    /// Bytes handed to the core so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Sends as much as the core takes. Ok(true) once all data is sent and the peer has
    /// acknowledged our FIN (or the connection finished closing).
    pub fn poll(&mut self, stack: &mut Stack) -> Result<bool, Error> {
        if !self.closed {
            match stack.state(self.conn)? {
                TcpState::SynSent | TcpState::SynReceived => return Ok(false),
                _ => {}
            }
            if let Some(e) = stack.error(self.conn)? {
                return Err(Error::Connection(e));
            }
            while self.sent < self.total {
                if self.chunk_pos == self.chunk.len() {
                    let n = (self.total - self.sent).min(64 * 1024) as usize;
                    self.chunk.resize(n, 0);
                    pattern_fill(self.seed, self.sent, &mut self.chunk);
                    self.chunk_pos = 0;
                }
                match stack.send(self.conn, &self.chunk[self.chunk_pos..]) {
                    Ok(k) => {
                        self.hash
                            .update(&self.chunk[self.chunk_pos..self.chunk_pos + k]);
                        self.chunk_pos += k;
                        self.sent += k as u64;
                    }
                    Err(Error::WouldBlock) => return Ok(false),
                    Err(e) => return Err(e),
                }
            }
            self.sha256 = Some(self.hash.clone().finalize().into());
            stack.shutdown(self.conn)?;
            self.closed = true;
        }
        // Done once our FIN is acknowledged: nothing we sent can still be lost.
        match stack.state(self.conn) {
            Ok(TcpState::FinWait2 | TcpState::TimeWait | TcpState::Closed) => {
                let _ = stack.close(self.conn);
                Ok(true)
            }
            Ok(_) => Ok(false),
            Err(e) => Err(e),
        }
    }
}
