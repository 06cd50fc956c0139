//! `sluice appcheck memcached`: stores seeded random binary values with the text protocol
//! (`set`, pipelined) and reads each back with `get`, byte for byte.

use std::net::SocketAddr;
use std::time::Instant;

use super::conn::{shown, Conn};
use super::values::{difference, values};
use super::KvArgs;
use crate::apps::error::AppsError;

/// The largest value accepted back (memcached's default item limit is 1 MiB).
const MAX_VALUE: usize = 1 << 20;

/// Reads one `get` answer for `key`: `VALUE key flags bytes` + data + `END`, or just `END`.
fn get_reply(conn: &mut Conn, key: &str) -> Result<Option<Vec<u8>>, AppsError> {
    let line = conn.line()?;
    if line == b"END" {
        return Ok(None);
    }
    let text = String::from_utf8_lossy(&line);
    let fields: Vec<&str> = text.split(' ').collect();
    let len = match fields.as_slice() {
        ["VALUE", k, _flags, bytes] if *k == key => bytes.parse::<usize>().ok(),
        _ => None,
    }
    .filter(|&n| n <= MAX_VALUE)
    .ok_or_else(|| AppsError::Protocol(format!("get {key} answered {}", shown(&line))))?;
    let data = conn.payload(len)?;
    let end = conn.line()?;
    if end != b"END" {
        return Err(AppsError::Protocol(format!(
            "get {key}: expected END after the value, got {}",
            shown(&end)
        )));
    }
    Ok(Some(data))
}

/// Runs the check; returns the summary line.
pub fn check(addr: SocketAddr, args: &KvArgs) -> Result<String, AppsError> {
    let vals = values(args.seed, args.count, args.max_len);
    let key = |i: usize| format!("sluice-{}-{i}", args.seed);
    let began = Instant::now();
    let mut conn = Conn::open(addr)?;
    let batch = args.batch.max(1);
    let idx: Vec<usize> = (0..vals.len()).collect();
    for chunk in idx.chunks(batch) {
        let mut req = Vec::new();
        for &i in chunk {
            req.extend_from_slice(format!("set {} 0 0 {}\r\n", key(i), vals[i].len()).as_bytes());
            req.extend_from_slice(&vals[i]);
            req.extend_from_slice(b"\r\n");
        }
        conn.send(&req)?;
        for &i in chunk {
            let line = conn.line()?;
            if line != b"STORED" {
                return Err(AppsError::Protocol(format!(
                    "set {} answered {}",
                    key(i),
                    shown(&line)
                )));
            }
        }
    }
    let mut wrong = Vec::new();
    for chunk in idx.chunks(batch) {
        let mut req = Vec::new();
        for &i in chunk {
            req.extend_from_slice(format!("get {}\r\n", key(i)).as_bytes());
        }
        conn.send(&req)?;
        for &i in chunk {
            match get_reply(&mut conn, &key(i))? {
                Some(got) if got == vals[i] => {}
                Some(got) => wrong.push(format!("{}: {}", key(i), difference(&vals[i], &got))),
                None => wrong.push(format!("{}: missing", key(i))),
            }
        }
    }
    super::verdict("memcached", addr, args, &vals, &wrong, began.elapsed())
}
