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

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::time::Duration;

    use sluice_device::{pair, PairConfig};
    use sluice_engine::setup::core_config;
    use sluice_engine::Engine;
    use sluice_tcp::TcpState;

    use super::*;

    const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
    const PORT: u16 = 7300;

    /// One connection of the test client: what it sends, and what came back.
    struct Job {
        send: Vec<u8>,
        expect: usize,
        conn: Option<ConnId>,
        sent: usize,
        got: Vec<u8>,
        shut: bool,
        done: bool,
    }

    /// Runs its jobs one after another on the engine's sockets-like calls.
    struct ScriptClient {
        jobs: Vec<Job>,
        next: usize,
    }

    impl App for ScriptClient {
        fn poll(&mut self, stack: &mut Stack, now: Instant) -> Result<AppStatus, EngineError> {
            let Some(job) = self.jobs.get_mut(self.next) else {
                return Ok(AppStatus::Done);
            };
            let c = match job.conn {
                Some(c) => c,
                None => {
                    let c = stack
                        .connect(now, SERVER_IP, PORT)
                        .map_err(|e| EngineError::App(e.to_string()))?;
                    job.conn = Some(c);
                    c
                }
            };
            if matches!(stack.state(c)?, TcpState::SynSent | TcpState::SynReceived) {
                return Ok(AppStatus::Running);
            }
            if job.sent < job.send.len() {
                match stack.send(c, &job.send[job.sent..]) {
                    Ok(n) => job.sent += n,
                    Err(Error::WouldBlock) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            let mut buf = [0u8; 4096];
            loop {
                match stack.recv(c, &mut buf) {
                    Ok(0) => {
                        job.done = true;
                        let _ = stack.close(c);
                        self.next += 1;
                        break;
                    }
                    Ok(n) => job.got.extend_from_slice(&buf[..n]),
                    Err(Error::WouldBlock) => break,
                    Err(e) => return Err(e.into()),
                }
            }
            if !job.shut && job.sent == job.send.len() && job.got.len() >= job.expect {
                stack.shutdown(c)?;
                job.shut = true;
            }
            Ok(AppStatus::Busy)
        }
    }

    fn job(header: Header, payload: &[u8], expect: usize) -> Job {
        let mut send = header.encode().to_vec();
        send.extend_from_slice(payload);
        Job {
            send,
            expect,
            conn: None,
            sent: 0,
            got: Vec::new(),
            shut: false,
            done: false,
        }
    }

    fn pattern(seed: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        pattern_fill(seed, 0, &mut v);
        v
    }

    #[test]
    fn the_engine_server_checks_uploads_sends_downloads_and_echoes() {
        let cfg = PairConfig::default();
        let (a, b) = pair(cfg).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let (listening_tx, listening) = std::sync::mpsc::channel();
        let server = std::thread::spawn(move || {
            let mut stack = Stack::new(core_config(cfg.macs[0], SERVER_IP, 1500)).unwrap();
            stack.add_neighbor(CLIENT_IP, cfg.macs[1]);
            let mut engine = Engine::new(stack, a);
            engine.idle_before_sleep = Duration::from_millis(1);
            let mut app = SoakServerApp::new(PORT, flag);
            // The first poll listens; a SYN before it would be refused.
            engine.poll_once(&mut app).unwrap();
            listening_tx.send(()).unwrap();
            engine.run(&mut app, Some(Duration::from_secs(60))).unwrap();
            (app.finished, app.failed)
        });
        listening.recv().unwrap();
        let len = 300_000;
        let mut corrupted = pattern(7, len);
        corrupted[12_345] ^= 1;
        let upload = |seed| Header {
            mode: Mode::Upload,
            seed,
            len: len as u64,
        };
        let request = pattern(9, 3000);
        let mut client = ScriptClient {
            jobs: vec![
                job(upload(5), &pattern(5, len), VERDICT_LEN),
                job(upload(7), &corrupted, VERDICT_LEN),
                job(
                    Header {
                        mode: Mode::Download,
                        seed: 11,
                        len: len as u64,
                    },
                    &[],
                    len,
                ),
                job(
                    Header {
                        mode: Mode::Echo,
                        seed: 0,
                        len: 0,
                    },
                    &request,
                    request.len(),
                ),
            ],
            next: 0,
        };
        let mut stack = Stack::new(core_config(cfg.macs[1], CLIENT_IP, 1500)).unwrap();
        stack.add_neighbor(SERVER_IP, cfg.macs[0]);
        let mut engine = Engine::new(stack, b);
        engine.idle_before_sleep = Duration::from_millis(1);
        let status = engine
            .run(&mut client, Some(Duration::from_secs(30)))
            .unwrap();
        stop.store(true, Ordering::Relaxed);
        let (finished, failed) = server.join().unwrap();
        assert_eq!(status, AppStatus::Done, "the client did not finish");
        assert!(client.jobs.iter().all(|j| j.done));
        let verdict = |j: &Job| {
            let mut v = [0; VERDICT_LEN];
            v.copy_from_slice(&j.got);
            Verdict::decode(&v)
        };
        let len = len as u64;
        assert_eq!(
            verdict(&client.jobs[0]),
            Verdict {
                matched: len,
                mismatched: 0
            }
        );
        assert_eq!(
            verdict(&client.jobs[1]),
            Verdict {
                matched: len - 1,
                mismatched: 1
            }
        );
        assert_eq!(client.jobs[2].got, pattern(11, len as usize));
        assert_eq!(client.jobs[3].got, request);
        assert_eq!((finished, failed), (4, 0));
    }
}
