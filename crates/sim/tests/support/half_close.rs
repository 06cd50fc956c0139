//! A client of the proxy tests: it sends its request, shuts its side, and reads what comes
//! back until the peer closes.

use sluice_tcp::{ConnId, Error, Stack};

/// One connection's request and what came back on it.
pub struct HalfClose {
    pub id: ConnId,
    pub request: Vec<u8>,
    pub sent: usize,
    pub shut: bool,
    pub got: Vec<u8>,
    pub done: bool,
}

impl HalfClose {
    pub fn new(id: ConnId, request: Vec<u8>) -> Self {
        HalfClose {
            id,
            request,
            sent: 0,
            shut: false,
            got: Vec::new(),
            done: false,
        }
    }

    /// Sends what the window takes, shuts the sending side once all is sent, reads what
    /// arrived (into `buf` first); done, and closed, at the peer's FIN.
    pub fn step(&mut self, cs: &mut Stack, buf: &mut [u8]) {
        if self.done {
            return;
        }
        while self.sent < self.request.len() {
            match cs.send(self.id, &self.request[self.sent..]) {
                Ok(n) if n > 0 => self.sent += n,
                _ => break,
            }
        }
        if self.sent == self.request.len() && !self.shut {
            self.shut = cs.shutdown(self.id).is_ok();
        }
        loop {
            match cs.recv(self.id, buf) {
                Ok(0) => {
                    self.done = true;
                    let _ = cs.close(self.id);
                    break;
                }
                Ok(n) => self.got.extend_from_slice(&buf[..n]),
                Err(Error::WouldBlock) => break,
                Err(e) => panic!(
                    "client: {e:?}, got {:?}",
                    String::from_utf8_lossy(&self.got)
                ),
            }
        }
    }
}
