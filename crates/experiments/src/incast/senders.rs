//! The incast senders: one engine in sluice-a running N bulk connections to the receiver, on
//! its own thread, measuring what each got acknowledged over the measured window.

use std::fmt;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant as WallInstant};

use sluice_bench::{open_with, EngineFailure, EngineSpec, Timing, PORTS};
use sluice_engine::setup::{Backend, EngineOptions, Transport};
use sluice_engine::{App, AppStatus, EngineError};
use sluice_lab::presets::LabPreset;
use sluice_tcp::{Algorithm, ConnId, Error, Instant, Stack, TcpState};

use crate::error::ExperimentError;

/// The engine polls this long with nothing to do before sleeping on its device (two shared
/// cores: a busy-polling engine would starve the switch and the other engine).
pub(super) const IDLE_BEFORE_SLEEP: Duration = Duration::from_micros(100);

/// What the senders measured.
pub(super) struct Bulk {
    pub(super) seconds: f64,
    pub(super) per_conn_bytes: Vec<u64>,
    pub(super) timeouts: u64,
}

/// [`Senders::stop`]: keep sending.
const RUN: u8 = 0;
/// [`Senders::stop`]: finish once the measured window has closed.
const FINISH: u8 = 1;
/// [`Senders::stop`]: give up now (a failed run).
const ABORT: u8 = 2;

/// Why the senders' engine thread ended without a measurement.
#[derive(Debug)]
enum SendersError {
    /// The engine could not be opened or stopped with an error.
    Engine(EngineFailure),
    /// The window closed before all N senders had measured it.
    Unfinished(usize),
}

impl From<EngineFailure> for SendersError {
    fn from(e: EngineFailure) -> Self {
        SendersError::Engine(e)
    }
}

impl fmt::Display for SendersError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendersError::Engine(e) => write!(f, "{e}"),
            SendersError::Unfinished(n) => write!(f, "the {n} senders did not finish their window"),
        }
    }
}

/// The engine in sluice-a running N bulk connections to the receiver's sink, on its own
/// thread, until told to stop.
pub(super) struct Senders {
    stop: Arc<AtomicU8>,
    handle: Option<JoinHandle<Result<Bulk, SendersError>>>,
}

impl Senders {
    /// Starts the engine and returns once every connection is established (the measured
    /// window opens after the warm-up from then on).
    pub(super) fn start(
        backend: Backend,
        algorithm: Algorithm,
        n: usize,
        receiver: Ipv4Addr,
        timing: Timing,
    ) -> Result<Senders, ExperimentError> {
        let stop = Arc::new(AtomicU8::new(RUN));
        let (ready_tx, ready_rx) = mpsc::channel();
        let flag = Arc::clone(&stop);
        let handle = thread::Builder::new()
            .name("incast-senders".into())
            .spawn(move || -> Result<Bulk, SendersError> {
                let opts = EngineOptions {
                    transport: Transport {
                        congestion_control: algorithm,
                        ..Transport::default()
                    },
                    ..EngineOptions::lab(backend)
                };
                let spec = EngineSpec {
                    backend,
                    idle_before_sleep: Some(IDLE_BEFORE_SLEEP),
                };
                let mut engine = open_with(&opts, spec, None)?;
                let timeouts0 = engine.stack.counters().timeouts;
                let mut app = BulkSenders::new(n, receiver, timing, flag, ready_tx);
                // A bound on the whole run, should the stop flag never come.
                let limit = Duration::from_secs_f64(timing.seconds + timing.warmup + 120.0);
                engine
                    .run(&mut app, Some(limit))
                    .map_err(|e| SendersError::Engine(EngineFailure::Run(e)))?;
                let (seconds, per_conn_bytes) = app.measured.ok_or(SendersError::Unfinished(n))?;
                Ok(Bulk {
                    seconds,
                    per_conn_bytes,
                    timeouts: engine.stack.counters().timeouts - timeouts0,
                })
            })
            .map_err(|e| ExperimentError::Io("spawn the senders' engine".into(), e))?;
        let senders = Senders {
            stop,
            handle: Some(handle),
        };
        match ready_rx.recv_timeout(Duration::from_secs(20)) {
            Ok(()) => Ok(senders),
            // The thread ended (its error is in finish) or hangs: stop it either way.
            Err(_) => match senders.end(ABORT) {
                Ok(_) => Err(ExperimentError::Workload(
                    "the senders never became ready".into(),
                )),
                Err(e) => Err(e),
            },
        }
    }

    /// Stops the senders (after their window) and returns what they measured.
    pub(super) fn finish(self) -> Result<Bulk, ExperimentError> {
        self.end(FINISH)
    }

    fn end(mut self, how: u8) -> Result<Bulk, ExperimentError> {
        self.stop.store(how, Ordering::Relaxed);
        match self.handle.take().map(JoinHandle::join) {
            Some(Ok(r)) => r.map_err(|e| ExperimentError::Workload(e.to_string())),
            Some(Err(_)) => Err(ExperimentError::Workload(
                "the senders' engine thread panicked".into(),
            )),
            None => Err(ExperimentError::Workload(
                "the senders already finished".into(),
            )),
        }
    }
}

impl Drop for Senders {
    fn drop(&mut self) {
        self.stop.store(ABORT, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// N connections sending as fast as the window lets them; measures what each got
/// acknowledged (snd_una) over the window.
struct BulkSenders {
    n: usize,
    receiver: Ipv4Addr,
    timing: Timing,
    stop: Arc<AtomicU8>,
    ready: Option<mpsc::Sender<()>>,
    conns: Vec<ConnId>,
    began: Option<WallInstant>,
    window: Option<(WallInstant, WallInstant)>,
    una_start: Vec<u32>,
    measured: Option<(f64, Vec<u64>)>,
    chunk: Vec<u8>,
}

impl BulkSenders {
    fn new(
        n: usize,
        receiver: Ipv4Addr,
        timing: Timing,
        stop: Arc<AtomicU8>,
        ready: mpsc::Sender<()>,
    ) -> Self {
        BulkSenders {
            n,
            receiver,
            timing,
            stop,
            ready: Some(ready),
            conns: Vec::new(),
            began: None,
            window: None,
            una_start: Vec::new(),
            measured: None,
            chunk: vec![0x5a; 64 * 1024],
        }
    }

    fn fail(&self, what: impl std::fmt::Display) -> EngineError {
        EngineError::App(format!("incast sender to {}: {what}", self.receiver))
    }

    fn snd_una(&self, stack: &Stack) -> Result<Vec<u32>, EngineError> {
        self.conns
            .iter()
            .map(|&c| stack.info(c).map(|i| i.snd_una.0).map_err(|e| self.fail(e)))
            .collect()
    }
}

impl App for BulkSenders {
    fn poll(&mut self, stack: &mut Stack, core_now: Instant) -> Result<AppStatus, EngineError> {
        let now = WallInstant::now();
        let stop = self.stop.load(Ordering::Relaxed);
        if stop == ABORT || (stop == FINISH && self.measured.is_some()) {
            for &c in &self.conns {
                let _ = stack.abort(c);
            }
            return Ok(AppStatus::Done);
        }
        if self.began.is_none() {
            self.began = Some(now);
            for _ in 0..self.n {
                let c = stack
                    .connect(core_now, self.receiver, PORTS.sink)
                    .map_err(|e| self.fail(e))?;
                self.conns.push(c);
            }
        }
        let mut established = 0;
        for i in 0..self.conns.len() {
            let c = self.conns[i];
            if let Some(e) = stack.error(c).map_err(|e| self.fail(e))? {
                return Err(self.fail(e));
            }
            match stack.state(c).map_err(|e| self.fail(e))? {
                TcpState::SynSent | TcpState::SynReceived => continue,
                _ => established += 1,
            }
            if self.window.is_none() {
                continue;
            }
            loop {
                match stack.send(c, &self.chunk) {
                    Ok(k) if k == self.chunk.len() => {}
                    Ok(_) | Err(Error::WouldBlock) => break,
                    Err(e) => return Err(self.fail(e)),
                }
            }
        }
        match self.window {
            None if established == self.n => {
                let start = now + Duration::from_secs_f64(self.timing.warmup);
                let end = start + Duration::from_secs_f64(self.timing.seconds);
                self.window = Some((start, end));
                if let Some(tx) = self.ready.take() {
                    let _ = tx.send(());
                }
            }
            None if self
                .began
                .is_some_and(|b| now - b > Duration::from_secs(10)) =>
            {
                return Err(self.fail("connections did not open in time"));
            }
            None => {}
            Some((start, _)) if self.una_start.is_empty() && now >= start => {
                self.una_start = self.snd_una(stack)?;
            }
            Some((start, end)) if self.measured.is_none() && now >= end => {
                let una = self.snd_una(stack)?;
                let bytes = una
                    .iter()
                    .zip(&self.una_start)
                    .map(|(&e, &s)| u64::from(e.wrapping_sub(s)))
                    .collect();
                self.measured = Some(((now - start).as_secs_f64(), bytes));
            }
            Some(_) => {}
        }
        Ok(AppStatus::Running)
    }
}
