//! Requests and responses over MTP messages: [`Rpc`] puts an 8-byte id in front of each
//! request's payload (little-endian, top bit clear) and the responder echoes it with the
//! top bit set, so a caller pairs each response with its request and drops late ones. A
//! plain echo (the request sent back whole, id unchanged) answers too: `sluice mtp recv
//! --echo` serves `sluice mtp rpc`.

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use sluice_shm::mtp::{CqeKind, MtpStatus};

use crate::mtp::endpoint::Endpoint;
use crate::mtp::error::MtpError;

/// Bytes the id takes in front of the payload.
pub const RPC_HEADER: usize = 8;
/// Marks a response's id.
const RESPONSE: u64 = 1 << 63;

fn framed(id: u64, payload: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(RPC_HEADER + payload.len());
    m.extend_from_slice(&id.to_le_bytes());
    m.extend_from_slice(payload);
    m
}

fn parse(msg: &[u8]) -> Option<(u64, &[u8])> {
    let head: [u8; RPC_HEADER] = msg.get(..RPC_HEADER)?.try_into().ok()?;
    Some((u64::from_le_bytes(head), &msg[RPC_HEADER..]))
}

/// An endpoint used for requests and responses.
pub struct Rpc {
    ep: Endpoint,
    next: u64,
    /// Messages dropped: responses to earlier calls, or not framed as RPC.
    stale: u64,
}

impl Rpc {
    /// RPC over `ep`.
    pub fn new(ep: Endpoint) -> Rpc {
        Rpc {
            ep,
            next: 1,
            stale: 0,
        }
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    /// Messages dropped so far: late responses and messages without an RPC header.
    pub fn stale(&self) -> u64 {
        self.stale
    }

    /// Sends `request` to `dst` and waits for its response's payload, at most `timeout`.
    pub fn call(
        &mut self,
        dst: SocketAddrV4,
        request: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, MtpError> {
        if request.len() + RPC_HEADER > self.ep.max_message() {
            return Err(MtpError::TooLong(request.len()));
        }
        let id = self.next;
        self.next = (self.next + 1) & !RESPONSE;
        let send = self.ep.send_message(dst, &framed(id, request), 0, 0)?;
        let deadline = Instant::now() + timeout;
        loop {
            // Send completions are taken here so they never pile up; a failed request ends
            // the call.
            while let Some(c) = self.ep.completion() {
                let ours = c.kind == CqeKind::Sent && c.cookie == u64::from(send);
                if ours && c.status != MtpStatus::Success {
                    return Err(MtpError::Failed(c.status));
                }
            }
            while let Some(m) = self.ep.recv_message() {
                match parse(&m.data) {
                    Some((rid, payload)) if rid & !RESPONSE == id && m.src == dst => {
                        return Ok(payload.to_vec())
                    }
                    _ => self.stale += 1,
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(MtpError::TimedOut);
            }
            self.ep.wait(Some(left))?;
        }
    }

    /// Answers one request with `handler(source, payload)`, waiting for one at most
    /// `timeout`; whether one was answered. Send completions are taken (and a failed
    /// response is the caller's error).
    pub fn serve(
        &mut self,
        timeout: Option<Duration>,
        handler: &mut dyn FnMut(SocketAddrV4, &[u8]) -> Vec<u8>,
    ) -> Result<bool, MtpError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            while let Some(c) = self.ep.completion() {
                if c.status != MtpStatus::Success {
                    return Err(MtpError::Failed(c.status));
                }
            }
            if let Some(m) = self.ep.recv_message() {
                match parse(&m.data) {
                    Some((id, payload)) if id & RESPONSE == 0 => {
                        let reply = handler(m.src, payload);
                        self.ep.send_message(
                            m.src,
                            &framed(id | RESPONSE, &reply),
                            m.priority,
                            m.tc,
                        )?;
                        return Ok(true);
                    }
                    _ => {
                        self.stale += 1;
                        continue;
                    }
                }
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return Ok(false);
            }
            self.ep.wait(left)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_round_trips_and_short_messages_are_not_rpc() {
        let m = framed(0x0102_0304_0506_0708, b"abc");
        assert_eq!(m.len(), RPC_HEADER + 3);
        assert_eq!(parse(&m), Some((0x0102_0304_0506_0708, &b"abc"[..])));
        assert_eq!(parse(&framed(5, b"")), Some((5, &b""[..])));
        for n in 0..RPC_HEADER {
            assert_eq!(parse(&m[..n]), None, "cut at {n}");
        }
        let r = framed(5 | RESPONSE, b"x");
        assert_eq!(parse(&r).map(|(id, _)| id & !RESPONSE), Some(5));
    }
}
