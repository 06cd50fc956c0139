//! Two real engines in this process, each running the service over one end of the
//! in-memory device pair (as crates/libsluice/tests/common/two_engines.rs), for
//! flexins-pipe: applications attach to them through libsluice as any application would.
//! Each engine thread's /proc stat path is kept so that its CPU time can be read.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_bench::{cpu_seconds, current_thread_stat};
use sluice_device::{pair, PairConfig};
use sluice_engine::Engine;
use sluice_service::{Counters, Service, ServiceConfig};
use sluice_shm::Layout;
use sluice_tcp::{Config, Stack};

use crate::error::ExperimentError;

/// The engines' addresses (a /24).
pub const IPS: [Ipv4Addr; 2] = [Ipv4Addr::new(10, 21, 5, 1), Ipv4Addr::new(10, 21, 5, 2)];

/// Queue pairs a context may hold (and so the verbs queues of doorbell mode: a send and a
/// receive queue per QP, one per CQ).
pub const MAX_QPS: u32 = 2048;

/// Two engines over the device pair, each with the service.
pub struct Engines {
    /// The services' sockets, engine 0's first.
    pub sockets: [PathBuf; 2],
    counters: Vec<Arc<Mutex<Counters>>>,
    stats: Vec<String>,
    dir: PathBuf,
    stops: Vec<Arc<AtomicBool>>,
    threads: Vec<JoinHandle<()>>,
}

fn err(what: &str, e: impl std::fmt::Display) -> ExperimentError {
    ExperimentError::Workload(format!("{what}: {e}"))
}

impl Engines {
    /// Starts both engines, knowing each other's MAC; sockets in a scratch directory.
    pub fn start(seed: u64) -> Result<Engines, ExperimentError> {
        let dir = std::env::temp_dir().join(format!("sluice-flexins-pipe-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| ExperimentError::Io(dir.display().to_string(), e))?;
        let cfg = PairConfig::default();
        let (a, b) = pair(cfg).map_err(|e| err("device pair", e))?;
        let macs = cfg.macs;
        let sockets = [dir.join("a.sock"), dir.join("b.sock")];
        let layout = Layout {
            max_sockets: 8,
            max_contexts: 8,
            queue_entries: 256,
            ring_size: 8192,
            // Doorbell mode: a send and a receive queue per QP and one per CQ.
            verbs_queues: 2 * MAX_QPS,
            verbs_queue_entries: 16,
            ..Layout::default()
        };
        let mut engines = Engines {
            sockets: sockets.clone(),
            counters: Vec::new(),
            stats: Vec::new(),
            dir,
            stops: Vec::new(),
            threads: Vec::new(),
        };
        let ends = [
            (a, IPS[0], IPS[1], macs[0], macs[1]),
            (b, IPS[1], IPS[0], macs[1], macs[0]),
        ];
        for (i, (end, ip, peer, mac, peer_mac)) in ends.into_iter().enumerate() {
            let mut sc = ServiceConfig::new(&sockets[i], ip, 24);
            sc.layout = layout;
            sc.engine.app_idle_us = 100;
            sc.verbs_limits.max_qps = 2 * MAX_QPS;
            sc.verbs_limits.max_cqs = 2 * MAX_QPS;
            let mut service = Service::new(sc).map_err(|e| err("the service", e))?;
            let stop = service.stop_flag();
            engines.stops.push(stop.clone());
            engines.counters.push(service.published_counters());
            let (tx, rx) = mpsc::channel();
            let mut c = Config::new(mac, ip);
            c.seed = seed + i as u64;
            let mut stack = Stack::new(c).map_err(|e| err("engine core", e))?;
            stack.add_neighbor(peer, peer_mac);
            engines.threads.push(std::thread::spawn(move || {
                let _ = tx.send(current_thread_stat());
                let mut engine = Engine::new(stack, end);
                engine.idle_before_sleep = Duration::from_millis(1);
                let ran = engine.run(&mut service, None);
                // At teardown the other engine may stop first and close its end of the pair.
                if let Err(e) = ran {
                    if !stop.load(Ordering::Relaxed) {
                        eprintln!("flexins-pipe: engine {i} failed: {e:?}");
                    }
                }
            }));
            engines.stats.push(
                rx.recv_timeout(Duration::from_secs(10))
                    .map_err(|e| err("engine thread", e))?,
            );
        }
        Ok(engines)
    }

    /// Engine `i`'s thread CPU seconds so far (user + system).
    pub fn cpu(&self, i: usize) -> f64 {
        cpu_seconds(&self.stats[i])
    }

    /// Both engines' thread CPU seconds so far.
    pub fn cpu_both(&self) -> f64 {
        self.cpu(0) + self.cpu(1)
    }

    /// Engine `i`'s counters as last published (about every millisecond).
    pub fn counters(&self, i: usize) -> Counters {
        *self.counters[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Engine `i`'s counters once `check` holds of them, or the last ones after `wait`.
    pub fn counters_when(
        &self,
        i: usize,
        wait: Duration,
        check: impl Fn(&Counters) -> bool,
    ) -> Counters {
        let until = Instant::now() + wait;
        loop {
            let c = self.counters(i);
            if check(&c) || Instant::now() > until {
                return c;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Engines {
    fn drop(&mut self) {
        for s in &self.stops {
            s.store(true, Ordering::Relaxed);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
