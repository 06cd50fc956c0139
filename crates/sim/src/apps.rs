//! Applications for simulated TCP hosts: a verified bulk transfer and a closed-loop RPC,
//! written against the core's sans-IO API. Tests, the demo and experiments share them.

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

    fn step_sender(&mut self, sender: &mut Stack) {
        let Some(conn) = self.sender_conn else { return };
        while self.sent < self.total {
            let n = (self.total - self.sent).min(self.scratch.len() as u64) as usize;
            pattern_fill(self.seed, self.sent, &mut self.scratch[..n]);
            match sender.send(conn, &self.scratch[..n]) {
                Ok(k) => {
                    self.sender_hash.update(&self.scratch[..k]);
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
