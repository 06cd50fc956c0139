//! The engine's soak server: the [`protocol`](super::protocol) on one port, as an engine
//! [`App`] over the core's sockets-like calls, until told to stop.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, DefaultHasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sluice_engine::{App, AppStatus, EngineError};
use sluice_tcp::{ConnId, Error, Instant, ListenerId, Stack};

use super::protocol::{mismatches, pattern_fill, Header, Mode, Verdict, HEADER_LEN, VERDICT_LEN};

/// Accept-queue depth (the churn opens connections back to back).
const BACKLOG: usize = 1024;
/// Bytes read or generated per call.
const CHUNK: usize = 64 * 1024;

/// Where a connection is in the protocol.
enum Phase {
    /// Reading the header.
    Header { got: usize, bytes: [u8; HEADER_LEN] },
    /// Echoing; `pending` is what the send buffer has not taken yet.
    Echo { pending: Vec<u8> },
    /// Checking an upload.
    Upload {
        seed: u64,
        len: u64,
        offset: u64,
        mismatched: u64,
    },
    /// Sending an upload's verdict.
    Verdict {
        bytes: [u8; VERDICT_LEN],
        sent: usize,
    },
    /// Sending a download; `chunk` holds the pattern from `chunk_at`.
    Download {
        seed: u64,
        len: u64,
        offset: u64,
        chunk_at: u64,
        chunk: Vec<u8>,
    },
    /// Done sending: waiting for the client's close.
    Drain,
}

/// How a step of a connection ended.
enum Step {
    /// Nothing more to do until the core has more (data, or room).
    Blocked,
    /// The client closed after the protocol's end: close our side.
    Finished,
    /// The connection failed or broke the protocol: abort it.
    Failed,
}

/// The soak protocol on `port`, until `stop` is set.
pub struct SoakServerApp {
    port: u16,
    stop: Arc<AtomicBool>,
    listener: Option<ListenerId>,
    /// A fixed hasher: connections are served in the same order in every run.
    conns: HashMap<ConnId, Phase, BuildHasherDefault<DefaultHasher>>,
    buf: Vec<u8>,
    scratch: Vec<u8>,
    /// Connections that ran the protocol to its end.
    pub finished: u64,
    /// Connections that failed or broke the protocol.
    pub failed: u64,
}

impl SoakServerApp {
    /// A server for `port` (it listens on the first poll) that finishes once `stop` is set.
    pub fn new(port: u16, stop: Arc<AtomicBool>) -> Self {
        SoakServerApp {
            port,
            stop,
            listener: None,
            conns: HashMap::default(),
            buf: vec![0; CHUNK],
            scratch: Vec::new(),
            finished: 0,
            failed: 0,
        }
    }
}

impl App for SoakServerApp {
    fn poll(&mut self, stack: &mut Stack, _now: Instant) -> Result<AppStatus, EngineError> {
        if self.stop.load(Ordering::Relaxed) {
            return Ok(AppStatus::Done);
        }
        let listener = match self.listener {
            Some(l) => l,
            None => {
                let l = stack.listen(self.port, BACKLOG).map_err(Error::from)?;
                self.listener = Some(l);
                l
            }
        };
        let mut busy = false;
        while let Ok(c) = stack.accept(listener) {
            let _ = stack.set_nagle(c, false);
            self.conns.insert(
                c,
                Phase::Header {
                    got: 0,
                    bytes: [0; HEADER_LEN],
                },
            );
            busy = true;
        }
        let mut ended = Vec::new();
        for (&c, phase) in self.conns.iter_mut() {
            let (step, moved) = serve(stack, c, phase, &mut self.buf, &mut self.scratch);
            busy |= moved;
            match step {
                Step::Blocked => {}
                Step::Finished => ended.push((c, true)),
                Step::Failed => ended.push((c, false)),
            }
        }
        for (c, ok) in ended {
            self.conns.remove(&c);
            if ok {
                let _ = stack.close(c);
                self.finished += 1;
            } else {
                let _ = stack.abort(c);
                self.failed += 1;
            }
        }
        Ok(if busy {
            AppStatus::Busy
        } else {
            AppStatus::Running
        })
    }
}

/// Moves one connection as far as the core allows; also whether any byte moved.
fn serve(
    stack: &mut Stack,
    c: ConnId,
    phase: &mut Phase,
    buf: &mut [u8],
    scratch: &mut Vec<u8>,
) -> (Step, bool) {
    let mut moved = false;
    loop {
        let next = match phase {
            Phase::Header { got, bytes } => match stack.recv(c, &mut bytes[*got..]) {
                Ok(0) => return (Step::Failed, moved),
                Ok(n) => {
                    moved = true;
                    *got += n;
                    if *got < HEADER_LEN {
                        continue;
                    }
                    match Header::decode(bytes) {
                        Some(h) => start(h),
                        None => return (Step::Failed, moved),
                    }
                }
                Err(Error::WouldBlock) => return (Step::Blocked, moved),
                Err(_) => return (Step::Failed, moved),
            },
            Phase::Echo { pending } => {
                if !pending.is_empty() {
                    match stack.send(c, pending) {
                        Ok(n) => {
                            moved |= n > 0;
                            pending.drain(..n);
                        }
                        Err(Error::WouldBlock) => return (Step::Blocked, moved),
                        Err(_) => return (Step::Failed, moved),
                    }
                    if !pending.is_empty() {
                        // The send buffer is full: read no more until it drains.
                        return (Step::Blocked, moved);
                    }
                }
                match stack.recv(c, buf) {
                    Ok(0) => return (Step::Finished, moved),
                    Ok(n) => {
                        moved = true;
                        pending.extend_from_slice(&buf[..n]);
                        continue;
                    }
                    Err(Error::WouldBlock) => return (Step::Blocked, moved),
                    Err(_) => return (Step::Failed, moved),
                }
            }
            Phase::Upload {
                seed,
                len,
                offset,
                mismatched,
            } => {
                if *offset == *len {
                    let v = Verdict {
                        matched: *len - *mismatched,
                        mismatched: *mismatched,
                    };
                    Phase::Verdict {
                        bytes: v.encode(),
                        sent: 0,
                    }
                } else {
                    let want = (*len - *offset).min(buf.len() as u64) as usize;
                    match stack.recv(c, &mut buf[..want]) {
                        // The client stopped short of what it announced.
                        Ok(0) => return (Step::Failed, moved),
                        Ok(n) => {
                            moved = true;
                            *mismatched += mismatches(*seed, *offset, &buf[..n], scratch);
                            *offset += n as u64;
                            continue;
                        }
                        Err(Error::WouldBlock) => return (Step::Blocked, moved),
                        Err(_) => return (Step::Failed, moved),
                    }
                }
            }
            Phase::Verdict { bytes, sent } => match stack.send(c, &bytes[*sent..]) {
                Ok(n) => {
                    moved |= n > 0;
                    *sent += n;
                    if *sent < VERDICT_LEN {
                        return (Step::Blocked, moved);
                    }
                    Phase::Drain
                }
                Err(Error::WouldBlock) => return (Step::Blocked, moved),
                Err(_) => return (Step::Failed, moved),
            },
            Phase::Download {
                seed,
                len,
                offset,
                chunk_at,
                chunk,
            } => {
                if *offset == *len {
                    Phase::Drain
                } else {
                    let in_chunk = *offset >= *chunk_at && *offset < *chunk_at + chunk.len() as u64;
                    if !in_chunk {
                        let n = (*len - *offset).min(CHUNK as u64) as usize;
                        chunk.resize(n, 0);
                        pattern_fill(*seed, *offset, chunk);
                        *chunk_at = *offset;
                    }
                    let from = (*offset - *chunk_at) as usize;
                    match stack.send(c, &chunk[from..]) {
                        Ok(0) | Err(Error::WouldBlock) => return (Step::Blocked, moved),
                        Ok(n) => {
                            moved = true;
                            *offset += n as u64;
                            continue;
                        }
                        Err(_) => return (Step::Failed, moved),
                    }
                }
            }
            Phase::Drain => match stack.recv(c, buf) {
                Ok(0) => return (Step::Finished, moved),
                // Nothing more is due from the client: the protocol is broken.
                Ok(_) => return (Step::Failed, true),
                Err(Error::WouldBlock) => return (Step::Blocked, moved),
                Err(_) => return (Step::Failed, moved),
            },
        };
        *phase = next;
    }
}

/// The phase after a header.
fn start(h: Header) -> Phase {
    match h.mode {
        Mode::Echo => Phase::Echo {
            pending: Vec::new(),
        },
        Mode::Upload => Phase::Upload {
            seed: h.seed,
            len: h.len,
            offset: 0,
            mismatched: 0,
        },
        Mode::Download => Phase::Download {
            seed: h.seed,
            len: h.len,
            offset: 0,
            chunk_at: 0,
            chunk: Vec::new(),
        },
    }
}
