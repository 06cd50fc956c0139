//! The engine side of `sluice bench` as a server: echo, a discarding sink and an endless
//! source on three ports at once, until told to stop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sluice_apps::EchoServer;
use sluice_tcp::{ConnId, Error, Instant, ListenerId, Stack};

use crate::runtime::{App, AppStatus, EngineError};

/// The ports the bench server listens on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BenchPorts {
    /// Echo (rpc and connect workloads).
    pub echo: u16,
    /// Discards what it receives (stream, client to server).
    pub sink: u16,
    /// Sends until the client goes away (stream, server to client).
    pub source: u16,
}

/// Accept-queue depth of every bench listener.
const BACKLOG: usize = 1024;

/// What the server holds once listening.
struct Serving {
    echo: EchoServer,
    sink: ListenerId,
    source: ListenerId,
    sinks: Vec<ConnId>,
    sources: Vec<ConnId>,
}

/// Echo, sink and source on their ports, until `stop` is set.
///
/// Unlike [`crate::apps::SinkApp`] the sink does not hash (the bench measures the transport,
/// not SHA-256), and the source sends one constant buffer over and over.
pub struct BenchServerApp {
    ports: BenchPorts,
    stop: Arc<AtomicBool>,
    serving: Option<Serving>,
    chunk: Vec<u8>,
    scratch: [u8; 64],
    /// Connections the sink and source served to the end.
    pub streams_completed: u64,
}

impl BenchServerApp {
    /// A server for `ports` that finishes once `stop` is set.
    pub fn new(ports: BenchPorts, stop: Arc<AtomicBool>) -> Self {
        BenchServerApp {
            ports,
            stop,
            serving: None,
            chunk: vec![0x5a; 64 * 1024],
            scratch: [0; 64],
            streams_completed: 0,
        }
    }

    /// Echo connections served to completion.
    pub fn echo_completed(&self) -> u64 {
        self.serving.as_ref().map_or(0, |s| s.echo.completed)
    }
}

/// Discards what `c` has; true when the connection ended (end of stream or error).
fn drain(stack: &mut Stack, c: ConnId, scratch: &mut [u8]) -> bool {
    loop {
        let ready = match stack.peek(c) {
            Ok((a, b)) => a.len() + b.len(),
            Err(_) => return true,
        };
        if ready > 0 {
            // Zero-copy discard: release the bytes in place.
            if stack.consume(c, ready).is_err() {
                return true;
            }
            continue;
        }
        // Nothing buffered, so recv only reports end of stream or an error.
        return match stack.recv(c, scratch) {
            Err(Error::WouldBlock) => false,
            Ok(_) | Err(_) => true,
        };
    }
}

/// Fills `c`'s send buffer; true when the connection ended (the client closed or failed).
fn fill(stack: &mut Stack, c: ConnId, chunk: &[u8], scratch: &mut [u8]) -> bool {
    if drain(stack, c, scratch) {
        return true;
    }
    loop {
        match stack.send(c, chunk) {
            Ok(n) if n == chunk.len() => continue,
            Ok(_) | Err(Error::WouldBlock) => return false,
            Err(_) => return true,
        }
    }
}

impl App for BenchServerApp {
    fn poll(&mut self, stack: &mut Stack, _now: Instant) -> Result<AppStatus, EngineError> {
        if self.stop.load(Ordering::Relaxed) {
            return Ok(AppStatus::Done);
        }
        if self.serving.is_none() {
            self.serving = Some(Serving {
                // Backlogs as deep as the core allows: the fairness experiment opens
                // 1024 streams at once, and a connection the listener had no room for is
                // never served.
                echo: EchoServer::listen(stack, self.ports.echo, BACKLOG)?,
                sink: stack
                    .listen(self.ports.sink, BACKLOG)
                    .map_err(Error::from)?,
                source: stack
                    .listen(self.ports.source, BACKLOG)
                    .map_err(Error::from)?,
                sinks: Vec::new(),
                sources: Vec::new(),
            });
        }
        let s = self.serving.as_mut().expect("listening");
        s.echo.poll(stack);
        while let Ok(c) = stack.accept(s.sink) {
            s.sinks.push(c);
        }
        while let Ok(c) = stack.accept(s.source) {
            let _ = stack.set_nagle(c, false);
            s.sources.push(c);
        }
        let before = s.sinks.len() + s.sources.len();
        let scratch = &mut self.scratch;
        s.sinks.retain(|&c| {
            let ended = drain(stack, c, scratch);
            if ended {
                let _ = stack.close(c);
            }
            !ended
        });
        let chunk = &self.chunk;
        s.sources.retain(|&c| {
            let ended = fill(stack, c, chunk, scratch);
            if ended {
                // The client left with our data unread: reset rather than linger.
                let _ = stack.abort(c);
            }
            !ended
        });
        self.streams_completed += (before - s.sinks.len() - s.sources.len()) as u64;
        Ok(AppStatus::Running)
    }
}
