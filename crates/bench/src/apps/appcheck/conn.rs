//! A client connection for the text and RESP protocols: bounded line reads, exact payload
//! reads, timeouts on every operation (a silent server fails the check, never hangs it).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::apps::error::AppsError;

/// How long connect, each read and each write may take.
pub const IO_LIMIT: Duration = Duration::from_secs(30);
/// The longest reply line accepted (a reply header or status, not a payload).
const MAX_LINE: u64 = 4096;

/// One TCP connection to the server under test.
pub struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    addr: SocketAddr,
}

impl Conn {
    /// Connects to `addr` with [`IO_LIMIT`] on every operation.
    pub fn open(addr: SocketAddr) -> Result<Conn, AppsError> {
        let stream = TcpStream::connect_timeout(&addr, IO_LIMIT)
            .map_err(|e| AppsError::io(format!("connect to {addr}"), e))?;
        let set = |r: std::io::Result<()>| r.map_err(|e| AppsError::io("set socket options", e));
        set(stream.set_read_timeout(Some(IO_LIMIT)))?;
        set(stream.set_write_timeout(Some(IO_LIMIT)))?;
        set(stream.set_nodelay(true))?;
        let writer = stream
            .try_clone()
            .map_err(|e| AppsError::io("clone the socket", e))?;
        Ok(Conn {
            reader: BufReader::with_capacity(64 * 1024, stream),
            writer,
            addr,
        })
    }

    /// Sends all of `bytes`.
    pub fn send(&mut self, bytes: &[u8]) -> Result<(), AppsError> {
        self.writer
            .write_all(bytes)
            .map_err(|e| AppsError::io(format!("send to {}", self.addr), e))
    }

    /// Reads one CRLF-terminated line and returns it without the CRLF.
    pub fn line(&mut self) -> Result<Vec<u8>, AppsError> {
        let mut buf = Vec::new();
        let n = (&mut self.reader)
            .take(MAX_LINE)
            .read_until(b'\n', &mut buf)
            .map_err(|e| AppsError::io(format!("read from {}", self.addr), e))?;
        if n == 0 {
            return Err(AppsError::Protocol(format!(
                "{} closed the connection",
                self.addr
            )));
        }
        if !buf.ends_with(b"\r\n") {
            return Err(AppsError::Protocol(format!(
                "reply line from {} is not CRLF-terminated within {MAX_LINE} bytes: {:?}",
                self.addr,
                String::from_utf8_lossy(&buf)
            )));
        }
        buf.truncate(buf.len() - 2);
        Ok(buf)
    }

    /// Reads exactly `len` payload bytes followed by CRLF.
    pub fn payload(&mut self, len: usize) -> Result<Vec<u8>, AppsError> {
        let mut buf = vec![0u8; len + 2];
        self.reader
            .read_exact(&mut buf)
            .map_err(|e| AppsError::io(format!("read {len} bytes from {}", self.addr), e))?;
        if !buf.ends_with(b"\r\n") {
            return Err(AppsError::Protocol(format!(
                "a {len}-byte payload from {} is not followed by CRLF",
                self.addr
            )));
        }
        buf.truncate(len);
        Ok(buf)
    }
}

/// `bytes` as text for an error message, cut short.
pub fn shown(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(120)]).into_owned();
    format!("{text:?}")
}
