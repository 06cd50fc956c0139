//! The real engine in this process: `sluice_service::Service` run by `sluice_engine::Engine`
//! over the in-memory device pair, and on the pair's other end a plain TCP core (the
//! "peer", another host) in a thread of its own. The peer runs an echo server on port 7
//! and, when asked, clients that connect to the engine, send a pattern and check the echo.
//! No root needed.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use sluice_device::{pair, Device, PairConfig, PairEnd};
use sluice_engine::{pump, Engine};
use sluice_service::{Counters, Service, ServiceConfig};
use sluice_shm::Layout;
use sluice_tcp::{Config, ConnId, Error, Event, Instant, ListenerId, Stack};

/// The engine's address.
pub const ENGINE_IP: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
/// The peer host's address.
pub const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);
/// The peer's echo port.
pub const ECHO_PORT: u16 = 7;

fn core(mac: sluice_wire::EthernetAddress, ip: Ipv4Addr, seed: u64) -> Config {
    let mut c = Config::new(mac, ip);
    c.seed = seed;
    c.max_connections = 256;
    c.rx_buffer = 64 << 10;
    c.tx_buffer = 64 << 10;
    c.rto_min = Duration::from_millis(5);
    c.rto_initial = Duration::from_millis(50);
    c.time_wait = Duration::from_millis(100);
    c
}

/// A client the peer runs against the engine: connect, send `bytes` of the pattern
/// (seeded by `seed`), shut down, read the echo to the end; the result says whether the
/// echo matched. With `reset`, it resets the connection instead once the engine has
/// acknowledged every byte (the result is Ok then).
#[derive(Clone, Copy, Debug)]
pub struct PeerClient {
    pub port: u16,
    pub bytes: usize,
    pub seed: u32,
    pub reset: bool,
}

/// The real engine and its peer.
pub struct RealEngine {
    pub socket: PathBuf,
    dir: PathBuf,
    stop: Arc<AtomicBool>,
    engine: Option<JoinHandle<Counters>>,
    pub counters: Arc<Mutex<Counters>>,
    /// The engine core's counters, once the engine stopped.
    pub core_counters: Arc<Mutex<Option<sluice_tcp::Counters>>>,
    peer_stop: Arc<AtomicBool>,
    peer: Option<JoinHandle<()>>,
    clients: mpsc::Sender<(PeerClient, mpsc::Sender<Result<(), String>>)>,
}

impl RealEngine {
    pub fn start(name: &str, layout: Layout, app_idle_us: u64) -> RealEngine {
        let dir =
            std::env::temp_dir().join(format!("libsluice-real-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("engine.sock");
        let cfg = PairConfig::default();
        let (a, b) = pair(cfg).expect("device pair");
        let mut sc = ServiceConfig::new(&socket, ENGINE_IP, 24);
        sc.layout = layout;
        sc.engine.app_idle_us = app_idle_us;
        let mut service = Service::new(sc).expect("service starts");
        let stop = service.stop_flag();
        let counters = service.published_counters();
        let macs = cfg.macs;
        let core_counters = Arc::new(Mutex::new(None));
        let core_out = core_counters.clone();
        let engine = std::thread::spawn(move || {
            let mut stack = Stack::new(core(macs[0], ENGINE_IP, 0xe41)).expect("engine core");
            stack.add_neighbor(PEER_IP, macs[1]);
            let mut engine = Engine::new(stack, a);
            // Sleep soon when idle, so the doorbell and wake-ups are exercised.
            engine.idle_before_sleep = Duration::from_millis(1);
            engine.run(&mut service, None).expect("engine runs");
            *core_out.lock().unwrap() = Some(engine.stack.counters().clone());
            service.counters()
        });
        let peer_stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let peer = {
            let peer_stop = peer_stop.clone();
            std::thread::spawn(move || {
                let mut stack = Stack::new(core(macs[1], PEER_IP, 0x9ee7)).expect("peer core");
                stack.add_neighbor(ENGINE_IP, macs[0]);
                Peer::new(stack, b).run(&peer_stop, rx);
            })
        };
        RealEngine {
            socket,
            dir,
            stop,
            engine: Some(engine),
            counters,
            core_counters,
            peer_stop,
            peer: Some(peer),
            clients: tx,
        }
    }

    /// Starts a peer client; the receiver gets its outcome.
    pub fn peer_client(&self, c: PeerClient) -> mpsc::Receiver<Result<(), String>> {
        let (tx, rx) = mpsc::channel();
        self.clients.send((c, tx)).unwrap();
        rx
    }

    /// Stops the engine (the applications see it die); the peer keeps answering meanwhile.
    pub fn stop_engine(&mut self) -> Counters {
        self.stop.store(true, Ordering::Relaxed);
        self.engine
            .take()
            .expect("running")
            .join()
            .expect("engine thread")
    }
}

impl Drop for RealEngine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(e) = self.engine.take() {
            let _ = e.join();
        }
        self.peer_stop.store(true, Ordering::Relaxed);
        if let Some(p) = self.peer.take() {
            let _ = p.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A connection the peer serves or drives.
enum Conn {
    /// Echo: bytes read and not yet sent back; whether the FIN came.
    Echo {
        pending: Vec<u8>,
        fin: bool,
        shut: bool,
    },
    /// A client: what it sent and received, and who waits for the outcome.
    Client {
        data: Vec<u8>,
        sent: usize,
        got: Vec<u8>,
        shut: bool,
        reset: bool,
        done: mpsc::Sender<Result<(), String>>,
    },
}

struct Peer {
    stack: Stack,
    dev: PairEnd,
    start: std::time::Instant,
    listener: ListenerId,
    conns: HashMap<ConnId, Conn>,
}

/// The test pattern (the same as common::pattern).
fn pattern(len: usize, seed: u32) -> Vec<u8> {
    super::pattern(len, seed)
}

impl Peer {
    fn new(mut stack: Stack, dev: PairEnd) -> Peer {
        let listener = stack.listen(ECHO_PORT, 128).expect("peer listens");
        Peer {
            stack,
            dev,
            start: std::time::Instant::now(),
            listener,
            conns: HashMap::new(),
        }
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.start.elapsed().as_nanos() as u64)
    }

    fn run(
        &mut self,
        stop: &AtomicBool,
        clients: mpsc::Receiver<(PeerClient, mpsc::Sender<Result<(), String>>)>,
    ) {
        while !stop.load(Ordering::Relaxed) {
            while let Ok((c, done)) = clients.try_recv() {
                match self.stack.connect(self.now(), ENGINE_IP, c.port) {
                    Ok(id) => {
                        self.conns.insert(
                            id,
                            Conn::Client {
                                data: pattern(c.bytes, c.seed),
                                sent: 0,
                                got: Vec::new(),
                                shut: false,
                                reset: c.reset,
                                done,
                            },
                        );
                    }
                    Err(e) => {
                        let _ = done.send(Err(format!("peer connect: {e:?}")));
                    }
                }
            }
            self.pump();
            self.serve();
        }
    }

    /// The peer's applications: accept, echo, drive clients.
    fn serve(&mut self) {
        while let Some(ev) = self.stack.poll_event() {
            if let Event::Acceptable(l) = ev {
                while let Ok(c) = self.stack.accept(l) {
                    self.conns.insert(
                        c,
                        Conn::Echo {
                            pending: Vec::new(),
                            fin: false,
                            shut: false,
                        },
                    );
                }
            }
        }
        let _ = self.listener;
        let mut buf = vec![0u8; 16 << 10];
        let mut finished = Vec::new();
        for (&id, conn) in self.conns.iter_mut() {
            let s = &mut self.stack;
            match conn {
                Conn::Echo { pending, fin, shut } => {
                    loop {
                        match s.recv(id, &mut buf) {
                            Ok(0) => {
                                *fin = true;
                                break;
                            }
                            Ok(n) => pending.extend_from_slice(&buf[..n]),
                            Err(Error::WouldBlock) => break,
                            Err(_) => {
                                finished.push(id);
                                break;
                            }
                        }
                    }
                    while !pending.is_empty() {
                        match s.send(id, pending) {
                            Ok(n) => {
                                pending.drain(..n);
                            }
                            Err(_) => break,
                        }
                    }
                    if *fin && pending.is_empty() && !*shut {
                        *shut = true;
                        let _ = s.close(id);
                        finished.push(id);
                    }
                }
                Conn::Client {
                    data,
                    sent,
                    got,
                    shut,
                    reset,
                    done,
                } => {
                    while *sent < data.len() {
                        match s.send(id, &data[*sent..]) {
                            Ok(n) => *sent += n,
                            Err(_) => break,
                        }
                    }
                    if *reset {
                        // Every byte acknowledged: it is in the engine's hands; then RST.
                        if *sent == data.len() && s.info(id).is_ok_and(|i| i.unacked == 0) {
                            let _ = s.abort(id);
                            let _ = done.send(Ok(()));
                            finished.push(id);
                        }
                        continue;
                    }
                    if *sent == data.len() && !*shut && s.shutdown(id).is_ok() {
                        *shut = true;
                    }
                    loop {
                        match s.recv(id, &mut buf) {
                            Ok(0) => {
                                let r = if got == data {
                                    Ok(())
                                } else {
                                    Err(format!(
                                        "echo differs: {} of {} bytes",
                                        got.len(),
                                        data.len()
                                    ))
                                };
                                let _ = done.send(r);
                                let _ = s.close(id);
                                finished.push(id);
                                break;
                            }
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                            Err(Error::WouldBlock) => break,
                            Err(e) => {
                                let _ = done.send(Err(format!("peer recv: {e:?}")));
                                finished.push(id);
                                break;
                            }
                        }
                    }
                }
            }
        }
        for id in finished {
            self.conns.remove(&id);
        }
    }

    /// One round: frames in, timers, frames out (the engine's pump); then a short wait for
    /// more frames.
    fn pump(&mut self) {
        let now = self.now();
        while pump::receive(&mut self.stack, &mut self.dev, now).unwrap_or(0) > 0 {}
        pump::run_due_timers(&mut self.stack, now);
        let _ = pump::transmit(&mut self.stack, &mut self.dev, now);
        let _ = self.dev.wait(Some(Duration::from_micros(200)));
    }
}
