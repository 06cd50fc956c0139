//! `sluice appcheck redis`: SETs seeded random binary values over RESP (pipelined) and GETs
//! each back, byte for byte.

use std::net::SocketAddr;
use std::time::Instant;

use super::conn::{shown, Conn};
use super::values::{difference, values};
use super::KvArgs;
use crate::apps::error::AppsError;

/// The largest bulk reply accepted (values are at most a few KiB).
const MAX_BULK: usize = 1 << 20;

/// One RESP command: an array of bulk strings.
fn command(out: &mut Vec<u8>, parts: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", parts.len()).as_bytes());
    for p in parts {
        out.extend_from_slice(format!("${}\r\n", p.len()).as_bytes());
        out.extend_from_slice(p);
        out.extend_from_slice(b"\r\n");
    }
}

/// A bulk string reply: Some(bytes), or None for a null bulk (missing key).
fn bulk_reply(conn: &mut Conn) -> Result<Option<Vec<u8>>, AppsError> {
    let line = conn.line()?;
    match line.first() {
        Some(b'$') => {
            let len = std::str::from_utf8(&line[1..])
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .ok_or_else(|| AppsError::Protocol(format!("bad bulk length {}", shown(&line))))?;
            if len < 0 {
                return Ok(None);
            }
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            if len > MAX_BULK {
                return Err(AppsError::Protocol(format!("a {len}-byte bulk reply")));
            }
            conn.payload(len).map(Some)
        }
        Some(b'-') => Err(AppsError::Protocol(format!("redis error {}", shown(&line)))),
        _ => Err(AppsError::Protocol(format!(
            "expected a bulk reply, got {}",
            shown(&line)
        ))),
    }
}

/// A status reply that must be `+OK`.
fn ok_reply(conn: &mut Conn) -> Result<(), AppsError> {
    let line = conn.line()?;
    if line == b"+OK" {
        Ok(())
    } else {
        Err(AppsError::Protocol(format!(
            "SET answered {}",
            shown(&line)
        )))
    }
}

/// Runs the check; returns the summary line.
pub fn check(addr: SocketAddr, args: &KvArgs) -> Result<String, AppsError> {
    let vals = values(args.seed, args.count, args.max_len);
    let key = |i: usize| format!("sluice:{}:{i}", args.seed);
    let began = Instant::now();
    let mut conn = Conn::open(addr)?;
    let batch = args.batch.max(1);
    let idx: Vec<usize> = (0..vals.len()).collect();
    for chunk in idx.chunks(batch) {
        let mut req = Vec::new();
        for &i in chunk {
            command(&mut req, &[b"SET", key(i).as_bytes(), &vals[i]]);
        }
        conn.send(&req)?;
        for _ in chunk {
            ok_reply(&mut conn)?;
        }
    }
    let mut wrong = Vec::new();
    for chunk in idx.chunks(batch) {
        let mut req = Vec::new();
        for &i in chunk {
            command(&mut req, &[b"GET", key(i).as_bytes()]);
        }
        conn.send(&req)?;
        for &i in chunk {
            match bulk_reply(&mut conn)? {
                Some(got) if got == vals[i] => {}
                Some(got) => wrong.push(format!("{}: {}", key(i), difference(&vals[i], &got))),
                None => wrong.push(format!("{}: missing", key(i))),
            }
        }
    }
    super::verdict("redis", addr, args, &vals, &wrong, began.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        command(&mut out, &[b"SET", b"k", b"a\r\nb"]);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n");
    }
}
