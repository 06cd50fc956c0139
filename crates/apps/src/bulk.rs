//! A one-way bulk transfer between two cores, verified by SHA-256.

use std::net::Ipv4Addr;

use sha2::{Digest, Sha256};
use sluice_tcp::{ConnId, Error, Instant, ListenerId, Stack};

use crate::pattern::pattern_fill;

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

    /// The sender's connection, once `connect` opened it (to set options such as a rate).
    pub fn sender_conn(&self) -> Option<ConnId> {
        self.sender_conn
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
