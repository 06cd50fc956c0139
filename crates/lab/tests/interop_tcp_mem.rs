//! The global limit on buffered bytes (`--tcp-mem`, `Config::tcp_mem`) against clients that
//! never read (issue 14, item 4; needs root: `#[ignore]`d, and scripts/test.sh runs it as
//! root). 600 Linux clients connect to an echo service, send as much as the service takes
//! and never read their echo, so what the service buffers climbs; a well-behaved client
//! is served byte-exact while it is at its height; then everyone closes. The engine, with a
//! `tcp_mem` limit, first; then Linux as the echo server in sluice-k, with the same
//! clients, for the figures side by side. Its own test binary, so the process's RSS is the
//! engine's (plus the test harness).

mod lab_support;

use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant as WallClock};

use lab_support::{lab, rss_kib, start_engine_for, ENGINE_LIMIT, NO_IMPAIR};
use sluice_engine::apps::EchoApp;
use sluice_engine::setup::{Backend, EngineOptions};
use sluice_engine::{App, AppStatus, EngineError};
use sluice_lab::presets::LabPreset;
use sluice_lab::{ENGINE_IP, KERNEL_IP, NS_CLIENT, NS_KERNEL};
use sluice_tcp::{Instant, MemoryLimits, MemoryState, Stack};

/// Clients that never read.
const CLIENTS: usize = 600;
/// What each of them tries to send (it sends as much as the service takes, without blocking).
const PUSH_BYTES: usize = 1 << 20;
/// What the well-behaved client sends and reads back, in 16 KiB requests.
const GOOD_BYTES: usize = 1 << 20;
const PORT: u16 = 7;
const MIB: f64 = (1 << 20) as f64;

/// The engine's limit: far below what 600 connections' rings may grow to (each to a share
/// of the 512 MiB of ring memory: 256 KiB each way, 300 MiB in all), above what their first
/// windows take (600 x 64 KiB). `SLUICE_LAB_TCP_MEM=LOW,PRESSURE,HIGH` (bytes) asks for
/// another by hand, e.g. the engine's default, 268435456,357913940,536870912, to compare.
fn limits() -> MemoryLimits {
    let given = std::env::var("SLUICE_LAB_TCP_MEM").ok().and_then(|v| {
        let n: Vec<usize> = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
        match n[..] {
            [low, pressure, high] => Some(MemoryLimits {
                low,
                pressure,
                high,
            }),
            _ => None,
        }
    });
    given.unwrap_or(MemoryLimits {
        low: 48 << 20,
        pressure: 64 << 20,
        high: 96 << 20,
    })
}

/// The Linux clients in sluice-b, for a service at IP:PORT: the well-behaved one connects
/// first (over the limit a SYN is not answered), then the 600; on the word each of the 600
/// sends without blocking until the service takes no more for a second; on the next the
/// well-behaved one sends GOOD bytes in 16 KiB requests and checks each echo; on the next
/// every socket closes (unread data: Linux sends a RST).
const CLIENT: &str = r#"
import os,resource,socket,sys,time
N={n}; S={s}; G={g}; IP='{ip}'; PORT={port}
soft,hard=resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE,(hard,hard))
def connect():
    end=time.time()+20
    while True:
        try:
            return socket.create_connection((IP,PORT),timeout=30)
        except (ConnectionRefusedError,socket.timeout):
            if time.time()>end: raise
            time.sleep(0.2)
good=connect()
flood=[connect() for _ in range(N)]
print('connected',flush=True)
sys.stdin.readline()
for s in flood: s.setblocking(False)
chunk=os.urandom(65536)
sent=[0]*N
start=last=time.time()
while time.time()-start<20:
    moved=0
    for i,s in enumerate(flood):
        if sent[i]>=S: continue
        try: n=s.send(chunk[:min(65536,S-sent[i])])
        except BlockingIOError: continue
        sent[i]+=n; moved+=n
    if moved: last=time.time()
    elif time.time()-last>1: break
    else: time.sleep(0.01)
print('flooded',sum(sent),flush=True)
sys.stdin.readline()
data=os.urandom(G); got=bytearray()
t0=time.time()
for i in range(0,G,16384):
    good.sendall(data[i:i+16384])
    while len(got)<min(G,i+16384):
        x=good.recv(65536)
        if not x: raise SystemExit('the well-behaved client got EOF after %d bytes'%len(got))
        got+=x
print('good',len(got) if bytes(got)==data else -1,'%.3f'%(time.time()-t0),flush=True)
sys.stdin.readline()
for s in flood: s.close()
good.close()
print('closed',flush=True)
"#;

/// Linux as the echo server in sluice-k: echoes as the engine's EchoServer does (reads no
/// more from a connection while its echo waits for room), exits after N connections.
const LINUX_ECHO: &str = r#"
import resource,selectors,socket
N={n}; IP='{ip}'; PORT={port}
soft,hard=resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE,(hard,hard))
sel=selectors.DefaultSelector()
l=socket.socket(); l.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)
l.bind((IP,PORT)); l.listen(1024); l.setblocking(False)
sel.register(l,selectors.EVENT_READ)
pending={}; done=0
print('ready',flush=True)
while done<N:
    for key,_ in sel.select():
        s=key.fileobj
        if s is l:
            try: c,_=l.accept()
            except BlockingIOError: continue
            c.setblocking(False); pending[c]=b''; sel.register(c,selectors.EVENT_READ)
            continue
        p=pending[s]; closed=False
        try:
            if p:
                p=p[s.send(p):]
            if not p:
                x=s.recv(65536)
                if not x: closed=True
                else:
                    try: p=x[s.send(x):]
                    except BlockingIOError: p=x
        except BlockingIOError: pass
        except OSError: closed=True
        if closed:
            sel.unregister(s); s.close(); del pending[s]; done+=1
            continue
        pending[s]=p
        sel.modify(s,selectors.EVENT_WRITE if p else selectors.EVENT_READ)
print('done',flush=True)
"#;

/// What the engine's core buffers, as the echo app sees it at each poll.
#[derive(Default)]
struct Figures {
    buffered: AtomicU64,
    buffered_max: AtomicU64,
    connections: AtomicU64,
    /// Receive and send ring capacity when the buffered bytes were at their most.
    rings_at_max: AtomicU64,
    over_limit_polls: AtomicU64,
}

/// The echo app, reporting the core's buffered bytes after every poll.
struct Watched {
    echo: EchoApp,
    figures: Arc<Figures>,
}

impl App for Watched {
    fn poll(&mut self, stack: &mut Stack, now: Instant) -> Result<AppStatus, EngineError> {
        let status = self.echo.poll(stack, now)?;
        let f = &self.figures;
        let b = stack.buffered_bytes();
        f.buffered.store(b, Ordering::Relaxed);
        f.connections
            .store(stack.connection_count() as u64, Ordering::Relaxed);
        if b > f.buffered_max.load(Ordering::Relaxed) {
            f.buffered_max.store(b, Ordering::Relaxed);
            let (rx, tx) = stack.buffer_memory();
            f.rings_at_max.store((rx + tx) as u64, Ordering::Relaxed);
        }
        if stack.memory_state() == MemoryState::OverLimit {
            f.over_limit_polls.fetch_add(1, Ordering::Relaxed);
        }
        Ok(status)
    }
}

/// Calls `sample` every 50 ms on a thread until stopped; the largest value it returned.
struct Sampler {
    stop: Arc<AtomicBool>,
    handle: thread::JoinHandle<u64>,
}

impl Sampler {
    fn start(sample: impl Fn() -> u64 + Send + 'static) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = thread::spawn(move || {
            let mut max = 0;
            while !flag.load(Ordering::Relaxed) {
                max = max.max(sample());
                thread::sleep(Duration::from_millis(50));
            }
            max.max(sample())
        });
        Sampler { stop, handle }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("sampler")
    }
}

/// The clients' Python process in sluice-b and its lines.
struct Clients {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Clients {
    fn start(ip: &str) -> Clients {
        let script = CLIENT
            .replace("{n}", &CLIENTS.to_string())
            .replace("{s}", &PUSH_BYTES.to_string())
            .replace("{g}", &GOOD_BYTES.to_string())
            .replace("{ip}", ip)
            .replace("{port}", &PORT.to_string());
        let ip_cmd = sluice_lab::command::find(sluice_lab::command::IP).expect("ip(8)");
        let mut child = Command::new(ip_cmd)
            .args(["netns", "exec", NS_CLIENT, "python3", "-u", "-c"])
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 starts in sluice-b");
        let stdin = child.stdin.take().expect("piped");
        let lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        Clients {
            child,
            stdin,
            lines,
        }
    }

    /// The next line, which must start with `word`; the rest of it.
    fn expect(&mut self, word: &str) -> String {
        let line = self
            .lines
            .next()
            .unwrap_or_else(|| panic!("the clients exited before {word:?}"))
            .expect("readable");
        let rest = line
            .strip_prefix(word)
            .unwrap_or_else(|| panic!("expected {word:?} from the clients, got {line:?}"));
        rest.trim().to_string()
    }

    fn go(&mut self) {
        self.stdin.write_all(b"go\n").expect("to python");
    }

    fn finish(mut self) {
        assert!(self.child.wait().expect("python exits").success());
    }
}

/// Runs the clients' steps against a service at `ip`; returns what they said: bytes the
/// 600 sent in all, and the well-behaved client's bytes echoed exactly and seconds taken.
/// `at` is called at each step (connected, flooded, served, closed).
fn run_clients(ip: &str, mut at: impl FnMut(&str)) -> (u64, String) {
    let mut clients = Clients::start(ip);
    clients.expect("connected");
    at("connected");
    clients.go();
    let flooded: u64 = clients.expect("flooded").parse().expect("a count");
    at("flooded");
    clients.go();
    let good = clients.expect("good");
    at("served");
    clients.go();
    clients.expect("closed");
    at("closed");
    clients.finish();
    (flooded, good)
}

/// Starts Linux's echo server in sluice-k and waits until it listens.
fn linux_echo() -> Child {
    let script = LINUX_ECHO
        .replace("{n}", &(CLIENTS + 1).to_string())
        .replace("{ip}", &KERNEL_IP.to_string())
        .replace("{port}", &PORT.to_string());
    let ip_cmd = sluice_lab::command::find(sluice_lab::command::IP).expect("ip(8)");
    let mut child = Command::new(ip_cmd)
        .args(["netns", "exec", NS_KERNEL, "python3", "-u", "-c"])
        .arg(&script)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 starts in sluice-k");
    let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("server output");
    assert_eq!(line.trim(), "ready", "linux echo server did not start");
    child.stdout = Some(stdout.into_inner());
    child
}

/// Sum of `r` (receive memory) and `w` (send queue memory) of the skmem of every TCP socket
/// on port PORT in sluice-k, and the TCP `mem` pages of /proc/net/sockstat (host-wide: the
/// clients' sockets count there too).
fn linux_server_memory() -> (u64, u64) {
    let ip_cmd = sluice_lab::command::find(sluice_lab::command::IP).expect("ip(8)");
    let out = Command::new(&ip_cmd)
        .args([
            "netns", "exec", NS_KERNEL, "ss", "-tmnH", "sport", "=", ":7",
        ])
        .output()
        .expect("ss runs in sluice-k");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut bytes = 0;
    for field in text.split(['(', ',', ')', ' ', '\n', '\t']) {
        for key in ["r", "w"] {
            if let Some(v) = field.strip_prefix(key).and_then(|v| v.parse::<u64>().ok()) {
                bytes += v;
            }
        }
    }
    let sockstat = std::fs::read_to_string("/proc/net/sockstat").unwrap_or_default();
    let pages = sockstat
        .lines()
        .find_map(|l| l.strip_prefix("TCP:"))
        .and_then(|l| l.split_whitespace().skip_while(|w| *w != "mem").nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (bytes, pages)
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn six_hundred_clients_that_never_read_stay_near_tcp_mem_and_a_reader_is_served() {
    let lab = lab();
    let limits = limits();
    let t0 = WallClock::now();

    // ---- the engine, with the limit ----
    let mut opts = EngineOptions::lab(Backend::AfPacket);
    opts.transport.tcp_mem = Some(limits);
    let mut echo = EchoApp::new(PORT);
    echo.stop_after = Some(CLIENTS as u64 + 1);
    let figures = Arc::new(Figures::default());
    let app = Watched {
        echo,
        figures: Arc::clone(&figures),
    };
    let engine = start_engine_for(opts, NO_IMPAIR, app, true, ENGINE_LIMIT);
    let rss_idle = rss_kib();
    let rss = Sampler::start(rss_kib);
    let mut rss_at = Vec::new();
    let (flooded, good) = run_clients(&ENGINE_IP.to_string(), |step| {
        if step == "closed" {
            // The 600 reset their connections (they close with unread data), the
            // well-behaved one finishes its close: wait for the table to empty.
            let end = WallClock::now() + Duration::from_secs(10);
            while figures.connections.load(Ordering::Relaxed) > 0 && WallClock::now() < end {
                thread::sleep(Duration::from_millis(20));
            }
        }
        rss_at.push((
            step.to_string(),
            rss_kib(),
            figures.buffered.load(Ordering::Relaxed),
        ));
    });
    let rss_max = rss.stop();
    let (watched, status, _, counters) = engine.join();
    drop(watched);
    let rss_after = rss_kib();
    let engine_secs = t0.elapsed().as_secs_f64();
    let max = figures.buffered_max.load(Ordering::Relaxed);
    let rings_at_max = figures.rings_at_max.load(Ordering::Relaxed);
    let after = figures.buffered.load(Ordering::Relaxed);
    eprintln!(
        "engine, tcp_mem {}/{}/{} MiB: {CLIENTS} clients sent {:.1} MiB and read nothing; \
         buffered bytes max {:.1} MiB (rings then {:.1} MiB), after closing {after} B; \
         well-behaved client: {good} (bytes echoed exactly, seconds)",
        limits.low >> 20,
        limits.pressure >> 20,
        limits.high >> 20,
        flooded as f64 / MIB,
        max as f64 / MIB,
        rings_at_max as f64 / MIB,
    );
    eprintln!(
        "engine RSS: idle {rss_idle} KiB, max {rss_max} KiB, after {rss_after} KiB; \
         at each step (RSS KiB, buffered B): {rss_at:?}; {engine_secs:.1} s"
    );
    eprintln!(
        "engine counters: pressure entered {}, over limit entered {}, windows clamped {}, \
         growth refused {}, rings released {}, SYNs refused {}, cookies refused {}, \
         out-of-order dropped {}; polls over the limit {}",
        counters.memory_pressure_entered,
        counters.memory_over_limit_entered,
        counters.memory_window_clamped,
        counters.memory_growth_refused,
        counters.memory_rings_released,
        counters.memory_syn_refused,
        counters.memory_cookie_refused,
        counters.memory_ooo_dropped,
        figures.over_limit_polls.load(Ordering::Relaxed),
    );

    // ---- Linux as the echo server, the same clients ----
    let t1 = WallClock::now();
    let mut server = linux_echo();
    let (_, pages_before) = linux_server_memory();
    let linux_peak = Sampler::start(|| linux_server_memory().0);
    let mut linux_at = Vec::new();
    let (linux_flooded, linux_good) = run_clients(&KERNEL_IP.to_string(), |step| {
        linux_at.push((step.to_string(), linux_server_memory()));
    });
    let linux_max = linux_peak.stop();
    let mut done = String::new();
    BufReader::new(server.stdout.take().expect("piped"))
        .read_line(&mut done)
        .expect("server output");
    assert_eq!(done.trim(), "done");
    assert!(server.wait().expect("server exits").success());
    let (linux_after, pages_after) = linux_server_memory();
    eprintln!(
        "linux echo server (tcp_mem {} pages, host-wide): {CLIENTS} clients sent {:.1} MiB; \
         its sockets' skmem r+w max {:.1} MiB, after {linux_after} B; sockstat TCP mem \
         pages before {pages_before}, after {pages_after}; at each step (skmem B, pages): \
         {linux_at:?}; well-behaved client: {linux_good}; {:.1} s",
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_mem")
            .unwrap_or_default()
            .trim(),
        linux_flooded as f64 / MIB,
        linux_max as f64 / MIB,
        t1.elapsed().as_secs_f64(),
    );

    // ---- what must hold ----
    assert_eq!(status, AppStatus::Done, "every connection closed");
    assert_eq!(
        good.split(' ').next(),
        Some(GOOD_BYTES.to_string().as_str()),
        "the well-behaved client was served byte-exact at the flood's height: {good}"
    );
    assert!(
        counters.memory_pressure_entered >= 1 && max > limits.pressure as u64,
        "the clients brought pressure (else this run shows nothing): max {max} B"
    );
    // The bound: `high` plus what each connection's offered window may still bring. Bytes
    // enter the count only from the wire: the echo moves what it reads from the receive ring
    // to the send ring, and reads no more while its echo waits for room, which the clients
    // never make. Past `pressure` rings stop growing and a read reopens a window by at most
    // four segments; past `high` the core takes only in-order data within windows it already
    // offered (it never moves a window's right edge back), so what overshoots `high` is what
    // those windows still had room for: at most each connection's receive ring when
    // pressure began. Rings start at 64 KiB and may have doubled before pressure (runs
    // measured 0 to 38 MiB over `high` for 601 connections, 0 to 67 KB each), so the bound
    // allows four initial rings each. Linux bounds it tighter (over its hard limit only
    // tcp_rmem[0] a socket is taken): dropping in-order data over `high` beyond such a
    // minimum is the follow-up.
    let cfg = sluice_engine::setup::core_config(Default::default(), ENGINE_IP, 1500);
    let window = 4 * cfg.rx_initial() as u64;
    let connections = CLIENTS as u64 + 1;
    let bound = limits.high as u64 + connections * window;
    eprintln!(
        "asserted: buffered max {max} B <= high + {connections} x {window} B = {bound} B; \
         RSS after closing <= idle + {connections} x (initial rings) + 8 MiB"
    );
    assert!(
        max <= bound,
        "buffered bytes reached {max} B, over high + {connections} windows = {bound} B"
    );
    assert_eq!(after, 0, "nothing buffered once every connection closed");
    // The documented pool (README, src/buffer.rs): a freed slot gives back grown rings and
    // keeps initial-size ones, at most the peak of connections x their initial rings, plus
    // a little for the tables' and the app's pages.
    let (_, rss_closed, _) = rss_at.last().cloned().expect("the closed step");
    let pool_kib = connections * (cfg.rx_initial() + cfg.tx_initial()) as u64 / 1024;
    assert!(
        rss_closed <= rss_idle + pool_kib + 8 * 1024,
        "RSS after closing {rss_closed} KiB, over idle {rss_idle} KiB + the pool {pool_kib} KiB"
    );
    lab.teardown().expect("lab down");
}
