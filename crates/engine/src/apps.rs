//! The sans-IO applications of `sluice-apps` as engine [`App`]s.

use std::net::Ipv4Addr;

pub mod bench;

pub use bench::{BenchPorts, BenchServerApp};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sluice_apps::{hex, EchoServer, Proxy, ProxyConfig, ProxyCounters, Sink, SinkReport, Source};
use sluice_tcp::{Instant, Stack};

use crate::runtime::{App, AppStatus, EngineError};

/// Echoes every connection on a port, forever (or until `stop_after` connections completed).
pub struct EchoApp {
    server: Option<EchoServer>,
    port: u16,
    /// Stop after this many completed connections.
    pub stop_after: Option<u64>,
}

impl EchoApp {
    /// An echo server for `port` (it listens on the first poll).
    pub fn new(port: u16) -> Self {
        EchoApp {
            server: None,
            port,
            stop_after: None,
        }
    }
}

impl App for EchoApp {
    fn poll(&mut self, stack: &mut Stack, _now: Instant) -> Result<AppStatus, EngineError> {
        if self.server.is_none() {
            self.server = Some(EchoServer::listen(stack, self.port, 1024)?);
        }
        let server = self.server.as_mut().expect("listening");
        server.poll(stack);
        Ok(match self.stop_after {
            Some(n) if server.completed >= n => AppStatus::Done,
            _ => AppStatus::Running,
        })
    }
}

/// The L7 proxy ([`Proxy`]) until `stop` is set.
pub struct ProxyApp {
    proxy: Option<Proxy>,
    cfg: ProxyConfig,
    stop: Arc<AtomicBool>,
    /// Called once listening, with the port.
    pub on_ready: Option<Box<dyn FnMut(u16)>>,
}

impl ProxyApp {
    /// A proxy with `cfg` (it listens on the first poll) that ends when `stop` is set.
    pub fn new(cfg: ProxyConfig, stop: Arc<AtomicBool>) -> Self {
        ProxyApp {
            proxy: None,
            cfg,
            stop,
            on_ready: None,
        }
    }

    /// What it did so far.
    pub fn counters(&self) -> ProxyCounters {
        self.proxy.as_ref().map(|p| p.counters).unwrap_or_default()
    }
}

impl App for ProxyApp {
    fn poll(&mut self, stack: &mut Stack, now: Instant) -> Result<AppStatus, EngineError> {
        if self.proxy.is_none() {
            self.proxy = Some(Proxy::listen(stack, self.cfg.clone())?);
            if let Some(f) = self.on_ready.as_mut() {
                f(self.cfg.port);
            }
        }
        if self.stop.load(Ordering::Relaxed) {
            return Ok(AppStatus::Done);
        }
        self.proxy.as_mut().expect("listening").poll(stack, now);
        Ok(AppStatus::Running)
    }
}

/// Discards every connection on a port and prints each one's byte count and SHA-256 when it
/// closes; stops after `stop_after` connections if set.
pub struct SinkApp {
    sink: Option<Sink>,
    port: u16,
    /// Stop after this many connections.
    pub stop_after: Option<usize>,
    /// Reports of closed connections.
    pub reports: Vec<SinkReport>,
    /// Print a line per closed connection.
    pub print: bool,
}

impl SinkApp {
    /// A sink for `port` (it listens on the first poll).
    pub fn new(port: u16) -> Self {
        SinkApp {
            sink: None,
            port,
            stop_after: None,
            reports: Vec::new(),
            print: true,
        }
    }
}

impl App for SinkApp {
    fn poll(&mut self, stack: &mut Stack, _now: Instant) -> Result<AppStatus, EngineError> {
        if self.sink.is_none() {
            self.sink = Some(Sink::listen(stack, self.port, 1024)?);
        }
        for report in self.sink.as_mut().expect("listening").poll(stack) {
            if self.print {
                match (&report.sha256, &report.error) {
                    (Some(d), _) => println!("{} bytes sha256 {}", report.bytes, hex(d)),
                    (None, Some(e)) => println!("{} bytes, then {e}", report.bytes),
                    (None, None) => println!("{} bytes", report.bytes),
                }
            }
            self.reports.push(report);
        }
        Ok(match self.stop_after {
            Some(n) if self.reports.len() >= n => AppStatus::Done,
            _ => AppStatus::Running,
        })
    }
}

/// Connects and sends `bytes` of the deterministic stream, then prints its SHA-256.
pub struct SourceApp {
    source: Option<Source>,
    target: (Ipv4Addr, u16),
    bytes: u64,
    seed: u64,
    /// Print the digest when done.
    pub print: bool,
}

impl SourceApp {
    /// A source to `ip:port` (it connects on the first poll).
    pub fn new(ip: Ipv4Addr, port: u16, bytes: u64, seed: u64) -> Self {
        SourceApp {
            source: None,
            target: (ip, port),
            bytes,
            seed,
            print: true,
        }
    }

    /// SHA-256 of what was sent, once done.
    pub fn sha256(&self) -> Option<[u8; 32]> {
        self.source.as_ref().and_then(|s| s.sha256)
    }
}

impl App for SourceApp {
    fn poll(&mut self, stack: &mut Stack, now: Instant) -> Result<AppStatus, EngineError> {
        if self.source.is_none() {
            let (ip, port) = self.target;
            self.source = Some(Source::connect(
                stack, now, ip, port, self.bytes, self.seed,
            )?);
        }
        let source = self.source.as_mut().expect("connected");
        if source.poll(stack)? {
            if self.print {
                println!(
                    "{} bytes sha256 {}",
                    source.sent(),
                    hex(&source.sha256.unwrap_or_default())
                );
            }
            return Ok(AppStatus::Done);
        }
        Ok(AppStatus::Running)
    }
}
