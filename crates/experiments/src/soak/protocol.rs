//! The soak's protocol, the same on both servers (the engine's and Linux's): a client
//! opens with a 24-byte header naming what the connection does, and every payload byte is
//! the deterministic pattern stream (`sluice_apps::pattern_fill`) of a seed the client
//! chose, so both ends can check every byte without keeping a copy.
//!
//! - echo: the server sends back whatever arrives, until the client closes (RPC, churn);
//! - upload: the client sends `len` pattern bytes, the server checks each and answers with
//!   a 16-byte verdict (bytes that matched, bytes that did not), then waits for the close;
//! - download: the server sends `len` pattern bytes, then waits for the client to close.
//!
//! The client closes first in every mode, so TIME-WAIT stays with the (Linux) clients.

pub use sluice_apps::pattern_fill;

/// The port both servers listen on (below the clients' ephemeral range, 10000-65535).
pub const PORT: u16 = 7300;
/// Bytes in a header.
pub const HEADER_LEN: usize = 24;
/// Bytes in an upload's verdict.
pub const VERDICT_LEN: usize = 16;
/// The header's first word less the mode: "SOAK" in its high half.
const MAGIC: u64 = 0x534f_414b_0000_0000;

/// What a connection does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The server echoes until the client closes.
    Echo,
    /// The client sends `len` bytes; the server checks them and answers a verdict.
    Upload,
    /// The server sends `len` bytes.
    Download,
}

/// A connection's opening words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// What the connection does.
    pub mode: Mode,
    /// Seed of the pattern stream (upload, download).
    pub seed: u64,
    /// Payload bytes (upload, download; 0 for echo).
    pub len: u64,
}

impl Header {
    /// The header on the wire: magic|mode, seed, len, little-endian.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mode = match self.mode {
            Mode::Echo => 1,
            Mode::Upload => 2,
            Mode::Download => 3,
        };
        let mut out = [0; HEADER_LEN];
        out[..8].copy_from_slice(&(MAGIC | mode).to_le_bytes());
        out[8..16].copy_from_slice(&self.seed.to_le_bytes());
        out[16..].copy_from_slice(&self.len.to_le_bytes());
        out
    }

    /// Reads a header; None if it is not one (wrong magic or mode).
    pub fn decode(b: &[u8; HEADER_LEN]) -> Option<Header> {
        let word = |i: usize| {
            let mut w = [0; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let first = word(0);
        if first & !0xff != MAGIC {
            return None;
        }
        let mode = match first & 0xff {
            1 => Mode::Echo,
            2 => Mode::Upload,
            3 => Mode::Download,
            _ => return None,
        };
        Some(Header {
            mode,
            seed: word(8),
            len: word(16),
        })
    }
}

/// The server's answer to an upload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Bytes received that matched the pattern.
    pub matched: u64,
    /// Bytes received that did not.
    pub mismatched: u64,
}

impl Verdict {
    /// The verdict on the wire, little-endian.
    pub fn encode(&self) -> [u8; VERDICT_LEN] {
        let mut out = [0; VERDICT_LEN];
        out[..8].copy_from_slice(&self.matched.to_le_bytes());
        out[8..].copy_from_slice(&self.mismatched.to_le_bytes());
        out
    }

    /// Reads a verdict.
    pub fn decode(b: &[u8; VERDICT_LEN]) -> Verdict {
        let mut w = [0; 8];
        w.copy_from_slice(&b[..8]);
        let matched = u64::from_le_bytes(w);
        w.copy_from_slice(&b[8..]);
        Verdict {
            matched,
            mismatched: u64::from_le_bytes(w),
        }
    }
}

/// How many bytes of `data`, found at `offset` of stream `seed`, differ from the pattern
/// (`scratch` is reused for the expected bytes).
pub fn mismatches(seed: u64, offset: u64, data: &[u8], scratch: &mut Vec<u8>) -> u64 {
    scratch.resize(data.len(), 0);
    pattern_fill(seed, offset, scratch);
    data.iter()
        .zip(scratch.iter())
        .filter(|(a, b)| a != b)
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_and_verdicts_round_trip_and_junk_is_refused() {
        for mode in [Mode::Echo, Mode::Upload, Mode::Download] {
            let h = Header {
                mode,
                seed: 0xdead_beef,
                len: 1 << 33,
            };
            assert_eq!(Header::decode(&h.encode()), Some(h));
        }
        assert_eq!(Header::decode(&[0; HEADER_LEN]), None);
        let mut bad = Header {
            mode: Mode::Echo,
            seed: 1,
            len: 0,
        }
        .encode();
        bad[0] = 9;
        assert_eq!(Header::decode(&bad), None);
        let v = Verdict {
            matched: 7,
            mismatched: 2,
        };
        assert_eq!(Verdict::decode(&v.encode()), v);
    }

    #[test]
    fn a_flipped_byte_is_a_mismatch() {
        let mut data = vec![0; 1000];
        pattern_fill(5, 300, &mut data);
        let mut scratch = Vec::new();
        assert_eq!(mismatches(5, 300, &data, &mut scratch), 0);
        data[17] ^= 0x10;
        assert_eq!(mismatches(5, 300, &data, &mut scratch), 1);
        assert_eq!(mismatches(5, 301, &data[1..], &mut scratch), 1);
    }
}
