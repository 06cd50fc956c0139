//! A sink: accepts connections, discards what they send, and reports each connection's byte
//! count and SHA-256 when it closes.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, DefaultHasher};

use sha2::{Digest, Sha256};
use sluice_tcp::{ConnId, Error, ListenerId, Stack};

/// What one closed connection delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkReport {
    /// Bytes received.
    pub bytes: u64,
    /// SHA-256 of the bytes, or None if the connection failed before its end.
    pub sha256: Option<[u8; 32]>,
    /// The error that ended it, if any.
    pub error: Option<Error>,
}

/// Discards and hashes every connection on one port.
pub struct Sink {
    listener: ListenerId,
    /// A fixed hasher, so connections are served in the same order in every run (the
    /// simulator's runs are exact).
    conns: HashMap<ConnId, (u64, Sha256), BuildHasherDefault<DefaultHasher>>,
    buf: Vec<u8>,
}

impl Sink {
    /// Listens on `port`.
    pub fn listen(stack: &mut Stack, port: u16, backlog: usize) -> Result<Self, Error> {
        Ok(Sink {
            listener: stack.listen(port, backlog)?,
            conns: HashMap::default(),
            buf: vec![0; 64 * 1024],
        })
    }

    /// Accepts and reads as far as the core allows; returns reports of connections that ended.
    pub fn poll(&mut self, stack: &mut Stack) -> Vec<SinkReport> {
        while let Ok(c) = stack.accept(self.listener) {
            self.conns.insert(c, (0, Sha256::new()));
        }
        let mut ended = Vec::new();
        for (&c, (bytes, hash)) in self.conns.iter_mut() {
            loop {
                match stack.recv(c, &mut self.buf) {
                    Ok(0) => {
                        let digest: [u8; 32] = hash.clone().finalize().into();
                        ended.push((
                            c,
                            SinkReport {
                                bytes: *bytes,
                                sha256: Some(digest),
                                error: None,
                            },
                        ));
                        break;
                    }
                    Ok(n) => {
                        hash.update(&self.buf[..n]);
                        *bytes += n as u64;
                    }
                    Err(Error::WouldBlock) => break,
                    Err(e) => {
                        ended.push((
                            c,
                            SinkReport {
                                bytes: *bytes,
                                sha256: None,
                                error: Some(e),
                            },
                        ));
                        break;
                    }
                }
            }
        }
        ended
            .into_iter()
            .map(|(c, report)| {
                self.conns.remove(&c);
                let _ = stack.close(c);
                report
            })
            .collect()
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.conns.len()
    }
}
