//! Two real engines in this process, over the two ends of the in-memory device pair, each
//! running the service with its own socket: the rig of the MTP and verbs end-to-end tests.
//! No root needed.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_device::{pair, PairConfig};
use sluice_engine::Engine;
use sluice_service::{Counters, Service, ServiceConfig};
use sluice_shm::Layout;
use sluice_tcp::{Config, Stack};

/// Two engines over the device pair, each with the service.
pub struct TwoEngines {
    /// The services' sockets, engine 0's first.
    pub sockets: [PathBuf; 2],
    counters: Vec<Arc<Mutex<Counters>>>,
    dir: PathBuf,
    stops: Vec<Arc<AtomicBool>>,
    threads: Vec<JoinHandle<()>>,
}

impl TwoEngines {
    /// Engines at `ips` (a /24), their cores seeded from `seed`, sockets in a scratch
    /// directory named by `test` and `name`. With `arp_known` false the engines start
    /// knowing nothing of each other: the first frame to the peer waits for ARP.
    pub fn start(
        test: &str,
        name: &str,
        ips: [Ipv4Addr; 2],
        seed: u64,
        arp_known: bool,
    ) -> TwoEngines {
        let dir =
            std::env::temp_dir().join(format!("libsluice-{test}-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = PairConfig::default();
        let (a, b) = pair(cfg).expect("device pair");
        let macs = cfg.macs;
        let sockets = [dir.join("a.sock"), dir.join("b.sock")];
        let layout = Layout {
            max_sockets: 8,
            max_contexts: 8,
            queue_entries: 64,
            ring_size: 8192,
            verbs_queues: 16,
            verbs_queue_entries: 256,
            ..Layout::default()
        };
        let (mut stops, mut threads, mut counters) = (Vec::new(), Vec::new(), Vec::new());
        let ends = [
            (a, ips[0], ips[1], macs[0], macs[1]),
            (b, ips[1], ips[0], macs[1], macs[0]),
        ];
        for (i, (end, ip, peer, mac, peer_mac)) in ends.into_iter().enumerate() {
            let mut sc = ServiceConfig::new(&sockets[i], ip, 24);
            sc.layout = layout;
            sc.engine.app_idle_us = 100;
            // Room for the 2,000 pipe-mode QPs of one context (tests/verbs.rs).
            sc.verbs_limits.max_qps = 4096;
            sc.verbs_limits.max_cqs = 4096;
            let mut service = Service::new(sc).expect("service starts");
            let stop = service.stop_flag();
            stops.push(stop.clone());
            counters.push(service.published_counters());
            threads.push(std::thread::spawn(move || {
                let mut c = Config::new(mac, ip);
                c.seed = seed + i as u64;
                let mut stack = Stack::new(c).expect("engine core");
                if arp_known {
                    stack.add_neighbor(peer, peer_mac);
                }
                let mut engine = Engine::new(stack, end);
                engine.idle_before_sleep = Duration::from_millis(1);
                let ran = engine.run(&mut service, None);
                // At teardown the other engine may stop first and close its end of the pair.
                if let Err(e) = ran {
                    assert!(stop.load(Ordering::Relaxed), "engine {i} failed: {e:?}");
                }
            }));
        }
        TwoEngines {
            sockets,
            counters,
            dir,
            stops,
            threads,
        }
    }

    /// Engine `i`'s counters, once `check` holds of them (they are published about every
    /// millisecond), or the last ones after `wait`.
    pub fn counters_when(
        &self,
        i: usize,
        wait: Duration,
        check: impl Fn(&Counters) -> bool,
    ) -> Counters {
        let until = Instant::now() + wait;
        loop {
            let c = *self.counters[i].lock().unwrap();
            if check(&c) || Instant::now() > until {
                return c;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for TwoEngines {
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
