//! An engine running the service over the in-memory device pair, in its own thread, and a
//! plain core on the other end of the pair driven by the test's thread. No root needed.
#![allow(dead_code)]

pub mod client;
pub mod verbs;

use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use sha2::{Digest, Sha256};
use sluice_device::{pair, Device, PairConfig, PairEnd};
use sluice_ebpf::programs;
use sluice_engine::multicore::{Doorbell, Layout as MultiLayout, MultiEngine};
use sluice_engine::{pump, Engine, Transports};
use sluice_service::{Counters, Service, ServiceConfig};
use sluice_shm::admin::{to_hex, AdminReply, AdminRequest};
use sluice_shm::control::{recv_message, send_message, Reply, Request};
use sluice_shm::Layout;
use sluice_tcp::{Config, ConnId, Error, Instant, Stack};

pub use client::{Client, WAIT};

/// The engine's address.
pub const ENGINE_IP: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
/// The peer's address.
pub const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);
/// Payload ring size in the tests: small, so transfers wrap many times.
pub const RING: u32 = 8192;

/// A core configuration for either end.
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

/// The test's layout: few sockets, small rings.
pub fn layout() -> Layout {
    Layout {
        max_sockets: 16,
        max_contexts: 2,
        queue_entries: 64,
        ring_size: RING,
        ..Layout::default()
    }
}

/// A directory of its own for a test's socket.
fn socket_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-service-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// The engine thread, the peer core, and the socket's path.
pub struct Net {
    pub socket: PathBuf,
    dir: PathBuf,
    stop: Arc<AtomicBool>,
    engine: Option<JoinHandle<Counters>>,
    pub counters: Arc<Mutex<Counters>>,
    pub peer: Peer,
    /// The multi-core engine's threads' doorbells (their sleep counters), once it runs.
    pub bells: Arc<Mutex<Vec<Arc<Doorbell>>>>,
}

/// The plain core at the other end of the pair.
pub struct Peer {
    pub stack: Stack,
    /// Its RDMA transport beside the core (RoCEv2 frames go there).
    pub rdma: verbs::PeerRdma,
    dev: PairEnd,
    start: std::time::Instant,
}

impl Peer {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.start.elapsed().as_nanos() as u64)
    }

    /// One round: frames in, timers, frames out (the engine's pump); then a short wait for
    /// more frames.
    pub fn pump(&mut self) {
        let now = self.now();
        let mut set = Transports {
            rdma: Some(&mut self.rdma),
            mtp: None,
        };
        while pump::receive_classified(&mut self.stack, &mut set, &mut self.dev, now).unwrap_or(0)
            > 0
        {}
        pump::run_due_timers(&mut self.stack, now);
        pump::run_due_transport_timers(&mut set, now);
        let _ = pump::transmit(&mut self.stack, &mut self.dev, now);
        let _ = pump::transmit_transports(&mut set, &mut self.dev, now);
        let _ = self.dev.wait(Some(Duration::from_micros(200)));
    }

    /// Its clock (the RDMA transport's time).
    pub fn clock(&self) -> Instant {
        self.now()
    }

    /// The next frame the peer's core would send, taken instead of sent.
    pub fn take_transmit(&mut self) -> Option<Vec<u8>> {
        let now = self.now();
        let mut buf = vec![0u8; 2048];
        let n = self.stack.poll_transmit(now, &mut buf)?;
        buf.truncate(n);
        Some(buf)
    }

    /// Sends raw bytes to the engine.
    pub fn send_raw(&mut self, frame: &[u8]) {
        let _ = self.dev.transmit_with(&mut |buf| {
            let slot = buf.get_mut(..frame.len())?;
            slot.copy_from_slice(frame);
            Some(sluice_device::TxFrame::plain(frame.len()))
        });
        let _ = self.dev.flush();
    }

    /// Frames the engine sent, read raw (not handed to the peer's core), waiting up to
    /// WAIT for at least one.
    pub fn receive_raw(&mut self) -> Vec<Vec<u8>> {
        let deadline = std::time::Instant::now() + WAIT;
        let mut got = Vec::new();
        while got.is_empty() && std::time::Instant::now() < deadline {
            let _ = self.dev.receive(&mut |f, _| got.push(f.to_vec()));
            let _ = self.dev.wait(Some(Duration::from_micros(200)));
        }
        got
    }

    /// Frames the engine sent, read raw, waiting at most `wait` for more (none is fine).
    pub fn receive_raw_for(&mut self, wait: Duration) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let _ = self.dev.receive(&mut |f, _| got.push(f.to_vec()));
        if got.is_empty() {
            let _ = self.dev.wait(Some(wait));
            let _ = self.dev.receive(&mut |f, _| got.push(f.to_vec()));
        }
        got
    }

    /// Starts an active open to the engine.
    pub fn connect(&mut self, ip: Ipv4Addr, port: u16) -> ConnId {
        let now = self.now();
        self.stack.connect(now, ip, port).expect("peer connect")
    }

    /// Pumps until `f` gives a value, failing the test after [`WAIT`].
    pub fn until<T>(&mut self, what: &str, mut f: impl FnMut(&mut Stack) -> Option<T>) -> T {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if let Some(v) = f(&mut self.stack) {
                return v;
            }
            assert!(std::time::Instant::now() < deadline, "timed out: {what}");
            self.pump();
        }
    }

    /// Reads everything until end of stream or an error.
    pub fn read_to_end(&mut self, c: ConnId) -> (Vec<u8>, Option<Error>) {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 16 << 10];
        let end = self.until("peer reads to the end", |s| loop {
            match s.recv(c, &mut buf) {
                Ok(0) => return Some(None),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(Error::WouldBlock) => return None,
                Err(e) => return Some(Some(e)),
            }
        });
        (out, end)
    }

    /// Reads until `len` bytes have arrived (or end of stream), pumping meanwhile.
    pub fn read_at_least(&mut self, c: ConnId, len: usize) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 16 << 10];
        self.until("peer reads it all", |st| {
            while let Ok(n) = st.recv(c, &mut buf) {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            (got.len() >= len).then_some(())
        });
        got
    }

    /// Sends all of `data`, pumping as the send buffer drains.
    pub fn send_all(&mut self, c: ConnId, data: &[u8]) {
        let mut sent = 0;
        self.until("peer sends everything", |s| {
            while sent < data.len() {
                match s.send(c, &data[sent..]) {
                    Ok(n) => sent += n,
                    Err(Error::WouldBlock) => return None,
                    Err(e) => panic!("peer send: {e}"),
                }
            }
            Some(())
        });
    }
}

impl Net {
    /// Starts an engine with the service on a socket of its own, and the peer.
    pub fn start(name: &str) -> Net {
        Self::start_with(name, |_| {})
    }

    /// As [`Net::start`], adjusting the service's configuration first.
    pub fn start_with(name: &str, adjust: impl FnOnce(&mut ServiceConfig)) -> Net {
        Self::start_with_cores(name, adjust, |_| {})
    }

    /// As [`Net::start_with`], adjusting both cores' configuration too.
    pub fn start_with_cores(
        name: &str,
        adjust: impl FnOnce(&mut ServiceConfig),
        adjust_core: impl Fn(&mut Config) + Send + 'static,
    ) -> Net {
        Self::start_on(name, adjust, adjust_core, None, None)
    }

    /// As [`Net::start_with`], the service on the multi-core engine with `layout` (one
    /// flow group, as `sluice engine --cores N` runs it); both cores send wire-sized
    /// frames (the multi-core engine has no segmentation offload).
    pub fn start_multi(
        name: &str,
        layout: MultiLayout,
        adjust: impl FnOnce(&mut ServiceConfig),
    ) -> Net {
        Self::start_on(
            name,
            |sc| {
                sc.hook_points = false;
                adjust(sc)
            },
            |c| c.tso_max_payload = 0,
            Some(layout),
            None,
        )
    }

    /// As [`Net::start_groups`], the engine's idle threads sleeping up to `max_sleep`
    /// (long, so that a lost wake-up shows as a stall instead of a 100 ms nap).
    pub fn start_groups_sleeping(name: &str, groups: u16, max_sleep: Duration) -> Net {
        Self::start_on(
            name,
            |sc| {
                sc.hook_points = false;
                sc.flow_groups = u32::from(groups);
            },
            |c| c.tso_max_payload = 0,
            Some(MultiLayout::FlowGroups { groups }),
            Some(max_sleep),
        )
    }

    /// As [`Net::start_multi`] with `Layout::FlowGroups { groups }`: the service as
    /// `groups` parts, one per flow group (`sluice engine --cores N --layout flow-groups`).
    pub fn start_groups(name: &str, groups: u16, adjust: impl FnOnce(&mut ServiceConfig)) -> Net {
        Self::start_multi(name, MultiLayout::FlowGroups { groups }, |sc| {
            sc.flow_groups = u32::from(groups);
            adjust(sc)
        })
    }

    fn start_on(
        name: &str,
        adjust: impl FnOnce(&mut ServiceConfig),
        adjust_core: impl Fn(&mut Config) + Send + 'static,
        multi: Option<MultiLayout>,
        max_sleep: Option<Duration>,
    ) -> Net {
        let dir = socket_dir(name);
        let socket = dir.join("engine.sock");
        let cfg = PairConfig::default();
        let (a, b) = pair(cfg).expect("device pair");
        let mut sc = ServiceConfig::new(&socket, ENGINE_IP, 24);
        sc.layout = layout();
        sc.engine.app_idle_us = 100;
        adjust(&mut sc);
        let mut parts: Vec<Option<Service>> = Service::flow_groups(sc)
            .expect("service starts")
            .into_iter()
            .map(Some)
            .collect();
        let first = parts[0].as_ref().expect("part 0");
        let stop = first.stop_flag();
        let counters = first.published_counters();
        let macs = cfg.macs;
        let mut engine_core = core(macs[0], ENGINE_IP, 0xe41);
        adjust_core(&mut engine_core);
        let mut peer_core = core(macs[1], PEER_IP, 0x9ee7);
        adjust_core(&mut peer_core);
        let bells = Arc::new(Mutex::new(Vec::new()));
        let engine_bells = bells.clone();
        let engine = std::thread::spawn(move || {
            if let Some(layout) = multi {
                let mut engine = MultiEngine::new(a, engine_core, layout, |g| {
                    parts[usize::from(g)].take().expect("a part per flow group")
                })
                .expect("multi-core engine");
                engine.linger = Duration::from_millis(200);
                if let Some(m) = max_sleep {
                    engine.max_sleep = m;
                }
                *engine_bells.lock().unwrap() = engine.doorbells().to_vec();
                engine.run(None).expect("multi-core engine runs");
                // Every part's counters, summed.
                let mut sum = Counters::default();
                for part in engine.into_apps() {
                    sum += part.counters();
                }
                return sum;
            }
            let mut service = parts.pop().flatten().expect("one service");
            let mut stack = Stack::new(engine_core).expect("engine core");
            stack.add_neighbor(PEER_IP, macs[1]);
            let mut engine = Engine::new(stack, a);
            // Sleep soon when idle, so the tests exercise the doorbell and wake-ups.
            engine.idle_before_sleep = Duration::from_millis(1);
            engine.run(&mut service, None).expect("engine runs");
            service.counters()
        });
        let mut stack = Stack::new(peer_core).expect("peer core");
        stack.add_neighbor(ENGINE_IP, macs[0]);
        Net {
            socket,
            dir,
            stop,
            engine: Some(engine),
            counters,
            bells,
            peer: Peer {
                stack,
                rdma: verbs::PeerRdma::new(macs[1], PEER_IP),
                dev: b,
                start: std::time::Instant::now(),
            },
        }
    }

    /// Attaches a client.
    pub fn attach(&self, name: &str) -> Client {
        Client::attach(&self.socket, name)
    }

    /// The counters the engine published last.
    pub fn counters(&self) -> Counters {
        *self.counters.lock().unwrap()
    }

    /// Pumps until the published counters satisfy `f`.
    pub fn until_counters(&mut self, what: &str, f: impl Fn(&Counters) -> bool) -> Counters {
        let counters = self.counters.clone();
        self.peer.until(what, |_| {
            let c = *counters.lock().unwrap();
            f(&c).then_some(c)
        })
    }

    /// Stops the engine (it resets what remains) and returns its final counters.
    pub fn stop(&mut self) -> Counters {
        self.stop.store(true, Ordering::Relaxed);
        self.wake_threads();
        let engine = self.engine.take().expect("running");
        // Keep the peer answering while the engine winds down.
        while !engine.is_finished() {
            self.peer.pump();
        }
        engine.join().expect("engine thread")
    }

    /// Rings the multi-core engine's threads, so a sleeping one sees the stop flag now
    /// (as the CLI's signal handler does not: its threads nap at most 100 ms).
    fn wake_threads(&self) {
        for b in self.bells.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            b.ring();
        }
    }

    /// The socket's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        if self.engine.is_some() {
            self.stop.store(true, Ordering::Relaxed);
            self.wake_threads();
            if let Some(e) = self.engine.take() {
                let _ = e.join();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A deterministic byte stream.
pub fn pattern(n: usize, salt: u32) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(salt) >> 13) as u8)
        .collect()
}

/// SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// One admin request over `client`'s session and its answer (a refusal's reason as Err).
pub fn ask_admin(client: &Client, req: AdminRequest) -> Result<AdminReply, String> {
    send_message(client.sock.as_fd(), &Request::Admin(req), &[]).expect("send");
    let mut pfd = [PollFd::new(client.sock.as_fd(), PollFlags::POLLIN)];
    let n = poll(&mut pfd, PollTimeout::try_from(WAIT).unwrap()).expect("poll");
    assert!(n > 0, "the engine did not answer within {WAIT:?}");
    match recv_message::<Reply>(client.sock.as_fd()).expect("reply") {
        Some((Reply::Admin(a), _)) => Ok(a),
        Some((Reply::Refused { reason }, _)) => Err(reason),
        other => panic!("unexpected {other:?}"),
    }
}

/// Loads a shipped program at `hook`; its id.
pub fn load_shipped(client: &Client, hook: &str, name: &str) -> u32 {
    let (bytes, section) = programs::shipped(name).expect("shipped");
    match ask_admin(
        client,
        AdminRequest::ModuleLoad {
            hook: hook.into(),
            name: name.into(),
            section: section.into(),
            object: to_hex(bytes),
        },
    ) {
        Ok(AdminReply::ModuleLoaded { id }) => id,
        other => panic!("load {name}: {other:?}"),
    }
}

/// Sends `down` from the peer and `up` from the application's slot `s` at once, reading on
/// both sides until all of it arrived: (what the application got, what the peer got).
pub fn exchange(
    net: &mut Net,
    app: &mut Client,
    ctx: u32,
    s: u32,
    c: sluice_tcp::ConnId,
    down: &[u8],
    up: &[u8],
) -> (Vec<u8>, Vec<u8>) {
    let deadline = std::time::Instant::now() + WAIT;
    let (mut down_sent, mut up_sent) = (0, 0);
    let (mut at_app, mut at_peer) = (Vec::new(), Vec::new());
    let mut buf = vec![0u8; 16 << 10];
    while at_app.len() < down.len() || at_peer.len() < up.len() {
        match net.peer.stack.send(c, &down[down_sent..]) {
            Ok(n) => down_sent += n,
            Err(Error::WouldBlock) => {}
            Err(e) => panic!("peer send: {e}"),
        }
        if up_sent < up.len() {
            let chunk = (up.len() - up_sent).min(2999);
            up_sent += app.write_some(ctx, s, &up[up_sent..up_sent + chunk]);
        }
        let n = app.read_some(ctx, s, &mut buf);
        at_app.extend_from_slice(&buf[..n]);
        while let Ok(n) = net.peer.stack.recv(c, &mut buf) {
            if n == 0 {
                break;
            }
            at_peer.extend_from_slice(&buf[..n]);
        }
        net.peer.pump();
        assert!(
            std::time::Instant::now() < deadline,
            "stuck: {} of {} down, {} of {} up",
            at_app.len(),
            down.len(),
            at_peer.len(),
            up.len()
        );
    }
    (at_app, at_peer)
}
