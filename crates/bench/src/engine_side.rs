//! The engine's side of the bench, each on its own thread inside sluice-a: a long-running
//! server (echo, sink, source) or a client for one workload. By default the loop busy-polls
//! for the whole run (no sleeping on the device), as a latency-serving engine core would;
//! [`EngineSpec::idle_before_sleep`] lets it sleep on the device after an idle spell instead
//! (polling, then interrupts), leaving the core to the clients in between.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use sluice_device::{Device, DeviceStats};
use sluice_engine::apps::BenchServerApp;
use sluice_engine::setup::{self, Backend, EngineOptions};
use sluice_engine::Engine;
use sluice_lab::presets::LabPreset;
use sluice_tcp::{Config, Counters, Stack};

use crate::engine_client::EngineClient;
use crate::error::{BenchError, EngineFailure};
use crate::measure::{self, Measurement};
use crate::plan::{Kind, Timing, Workload, PORTS};

/// How the bench runs the engine.
#[derive(Clone, Copy, Debug)]
pub struct EngineSpec {
    /// The device backend.
    pub backend: Backend,
    /// Poll this long with nothing to do before sleeping on the device; None: never sleep.
    pub idle_before_sleep: Option<Duration>,
}

/// Where an engine runs and how its core is configured, when not the lab's engine with the
/// default configuration.
#[derive(Clone)]
pub struct EngineSite {
    /// Interface, address and namespace (and the backend, which [`EngineSpec`] overrides).
    pub options: EngineOptions,
    /// Changes to the core's configuration (recovery, out-of-order intervals, ...).
    pub configure: Arc<dyn Fn(&mut Config) + Send + Sync>,
}

impl EngineSite {
    /// The lab's engine (sluice-a, sl-a, 10.77.0.1) with the default configuration.
    pub fn lab(backend: Backend) -> Self {
        EngineSite::at(EngineOptions::lab(backend))
    }

    /// An engine where `options` say, with the default configuration otherwise.
    pub fn at(options: EngineOptions) -> Self {
        EngineSite {
            options,
            configure: Arc::new(|_: &mut Config| {}),
        }
    }
}

/// An engine opened where `opts` say (interface, address, namespace, policy; `spec`'s
/// backend wins), with the default configuration otherwise, tuned for `kind`.
pub fn open_with(
    opts: &EngineOptions,
    spec: EngineSpec,
    kind: Option<Kind>,
) -> Result<Engine<Box<dyn Device>>, EngineFailure> {
    open(spec, &EngineSite::at(opts.clone()), kind)
}

/// An engine opened at `site`, tuned for `kind` (None: serving).
fn open(
    spec: EngineSpec,
    site: &EngineSite,
    kind: Option<Kind>,
) -> Result<Engine<Box<dyn Device>>, EngineFailure> {
    let options = EngineOptions {
        backend: spec.backend,
        ..site.options.clone()
    };
    let mut engine = setup::open(&options).map_err(EngineFailure::Open)?;
    engine.idle_before_sleep = spec.idle_before_sleep.unwrap_or(Duration::from_secs(3600));
    let mut cfg = engine.stack.config().clone();
    (site.configure)(&mut cfg);
    engine.stack = Stack::new(cfg).map_err(EngineFailure::Config)?;
    if kind == Some(Kind::Connect) {
        // An active closer keeps every connection in TIME-WAIT. Linux clients reuse such
        // ports (tcp_tw_reuse, set by the bench); the engine gets a wide port range, room
        // for the TIME-WAIT slots, a short TIME-WAIT and small buffers instead.
        let mut cfg =
            setup::core_config(engine.device.mac(), options.ip, engine.stack.config().mtu);
        options.transport.apply(&mut cfg);
        (site.configure)(&mut cfg);
        cfg.max_connections = 32 * 1024;
        cfg.ephemeral_ports = (10000, 65535);
        cfg.time_wait = Duration::from_secs(1);
        cfg.rx_buffer = 16 * 1024;
        cfg.tx_buffer = 16 * 1024;
        engine.stack = Stack::new(cfg).map_err(EngineFailure::Config)?;
    }
    Ok(engine)
}

/// What an engine counted over its whole run: its core's counters and its device's.
#[derive(Clone, Debug, Default)]
pub struct EngineCounters {
    /// The TCP core's event and drop counters.
    pub core: Counters,
    /// The device backend's counters (drops, truncation, blocked flushes).
    pub device: DeviceStats,
}

impl EngineCounters {
    /// The counters of an engine that has finished running.
    fn of(engine: &Engine<Box<dyn Device>>) -> Self {
        EngineCounters {
            core: engine.stack.counters().clone(),
            device: engine.device.stats(),
        }
    }
}

/// The engine serving echo, sink and source on [`PORTS`] until stopped.
pub struct EngineServer {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<EngineCounters, EngineFailure>>>,
    stat_path: String,
}

impl EngineServer {
    /// Starts the engine thread in sluice-a and waits until it has opened its device.
    pub fn start(spec: EngineSpec) -> Result<EngineServer, BenchError> {
        EngineServer::start_at(spec, EngineSite::lab(spec.backend))
    }

    /// Starts the engine thread where `opts` say (interface, address, namespace, policy;
    /// `spec`'s backend wins) and waits until it has opened its device.
    pub fn start_with(opts: EngineOptions, spec: EngineSpec) -> Result<EngineServer, BenchError> {
        EngineServer::start_at(spec, EngineSite::at(opts))
    }

    /// Starts the engine thread at `site` and waits until it has opened its device.
    pub fn start_at(spec: EngineSpec, site: EngineSite) -> Result<EngineServer, BenchError> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let flag = Arc::clone(&stop);
        let handle = thread::Builder::new()
            .name("engine-server".into())
            .spawn(move || {
                let mut engine = match open(spec, &site, None) {
                    Ok(e) => e,
                    Err(e) => {
                        // The error itself comes back through the join below.
                        let _ = tx.send(None);
                        return Err(e);
                    }
                };
                let _ = tx.send(Some(measure::current_thread_stat()));
                let mut app = BenchServerApp::new(PORTS, flag);
                engine.run(&mut app, None).map_err(EngineFailure::Run)?;
                Ok(EngineCounters::of(&engine))
            })
            .map_err(|e| BenchError::io("spawn the engine thread", e))?;
        let stat_path = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Some(p)) => p,
            // The thread has returned its error.
            Ok(None) => {
                return Err(BenchError::Engine(match handle.join() {
                    Ok(Err(e)) => e,
                    Ok(Ok(_)) => EngineFailure::NotStarted,
                    Err(_) => EngineFailure::Panicked,
                }))
            }
            Err(_) => return Err(BenchError::Engine(EngineFailure::NotStarted)),
        };
        Ok(EngineServer {
            stop,
            handle: Some(handle),
            stat_path,
        })
    }

    /// CPU seconds the engine thread has used so far.
    pub fn cpu_seconds(&self) -> f64 {
        measure::cpu_seconds(&self.stat_path)
    }

    /// Stops the engine and reports how it ended.
    pub fn stop(self) -> Result<(), BenchError> {
        self.stop_counted().map(|_| ())
    }

    /// Stops the engine and returns what it counted over its whole run.
    pub fn stop_counted(mut self) -> Result<EngineCounters, BenchError> {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.take().map(JoinHandle::join) {
            Some(Ok(r)) => r.map_err(BenchError::Engine),
            Some(Err(_)) => Err(BenchError::Engine(EngineFailure::Panicked)),
            None => Ok(EngineCounters::default()),
        }
    }
}

impl Drop for EngineServer {
    fn drop(&mut self) {
        // A failed run must not leave a core busy-polling behind it.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Runs `workload` with the engine as the client against `ip:port`.
pub fn run_client(
    spec: EngineSpec,
    workload: Workload,
    ip: std::net::Ipv4Addr,
    port: u16,
    timing: Timing,
) -> Result<Measurement, BenchError> {
    run_client_at(
        spec,
        EngineSite::lab(spec.backend),
        workload,
        ip,
        port,
        timing,
    )
}

/// Runs `workload` with the engine at `site` as the client against `ip:port`.
pub fn run_client_at(
    spec: EngineSpec,
    site: EngineSite,
    workload: Workload,
    ip: std::net::Ipv4Addr,
    port: u16,
    timing: Timing,
) -> Result<Measurement, BenchError> {
    run_client_counted(spec, site, workload, ip, port, timing).map(|(m, _)| m)
}

/// [`run_client_at`], also returning what the client engine counted over its whole run.
pub fn run_client_counted(
    spec: EngineSpec,
    site: EngineSite,
    workload: Workload,
    ip: std::net::Ipv4Addr,
    port: u16,
    timing: Timing,
) -> Result<(Measurement, EngineCounters), BenchError> {
    let limit = Duration::from_secs_f64(timing.seconds + timing.warmup + 15.0);
    let handle = thread::Builder::new()
        .name("engine-client".into())
        .spawn(
            move || -> Result<(Measurement, EngineCounters), EngineFailure> {
                let mut engine = open(spec, &site, Some(workload.kind))?;
                let mut app = EngineClient::new(workload, ip, port, timing);
                engine
                    .run(&mut app, Some(limit))
                    .map_err(EngineFailure::Run)?;
                let m = app.measurement.ok_or_else(|| EngineFailure::Unfinished {
                    workload: workload.name(),
                    limit,
                })?;
                Ok((m, EngineCounters::of(&engine)))
            },
        )
        .map_err(|e| BenchError::io("spawn the engine thread", e))?;
    match handle.join() {
        Ok(r) => r.map_err(BenchError::Engine),
        Err(_) => Err(BenchError::Engine(EngineFailure::Panicked)),
    }
}
