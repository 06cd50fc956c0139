//! Connection load and memory (needs root: `#[ignore]`d, and scripts/test.sh runs it as
//! root): more concurrent connections than the old 4,096-slot table held, each echoing
//! a little data, in two bursts; the engine's memory after each burst closes, and the
//! second burst reusing what the first left instead of growing. Its own test binary, so
//! the process's heap and RSS are the engine's (plus the test harness). The assertions use
//! the live heap bytes a counting allocator reports and the core's own count of its ring
//! storage, both taken on the engine's thread between two polls: exact whatever the
//! machine's load. RSS, which the allocator's fragments and a busy machine move by
//! megabytes, is printed.

mod lab_support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::Duration;

use lab_support::{lab, rss_kib, start_engine_for, ENGINE_LIMIT, NO_IMPAIR};
use sluice_engine::apps::EchoApp;
use sluice_engine::setup::{Backend, EngineOptions};
use sluice_engine::{App, AppStatus, EngineError};
use sluice_lab::presets::LabPreset;
use sluice_tcp::{Instant, Stack};
use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static HEAP: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Bytes allocated on the heap and not yet freed, by every thread of this process.
fn live_heap() -> i64 {
    let s = HEAP.stats();
    s.bytes_allocated as i64 - s.bytes_deallocated as i64 + s.bytes_reallocated as i64
}

/// The engine's memory at one moment, taken on its thread.
#[derive(Clone, Copy, Debug)]
struct Sample {
    /// The process's resident set, KiB.
    rss_kib: u64,
    /// Live heap bytes.
    heap: i64,
    /// Ring storage attached to connections (receive + send), bytes.
    rings: usize,
    /// Ring storage the core's pools keep for reuse, bytes.
    pooled: usize,
}

impl Sample {
    /// Heap that is neither rings nor the pools: tables, timers, queues.
    fn rest(&self) -> i64 {
        self.heap - (self.rings + self.pooled) as i64
    }
}

/// The echo server, answering a request for a [`Sample`] between two polls.
struct Measured {
    echo: EchoApp,
    asked: Receiver<()>,
    answer: Sender<Sample>,
}

impl App for Measured {
    fn poll(&mut self, stack: &mut Stack, now: Instant) -> Result<AppStatus, EngineError> {
        let status = self.echo.poll(stack, now)?;
        if self.asked.try_recv().is_ok() {
            let (rx, tx, pooled) = stack.buffer_memory_allocated();
            let _ = self.answer.send(Sample {
                rss_kib: rss_kib(),
                heap: live_heap(),
                rings: rx + tx,
                pooled,
            });
        }
        Ok(status)
    }
}

/// Connections per burst; `SLUICE_LAB_CONNECTIONS` asks for another count (up to 64,000:
/// the client's ephemeral ports are widened to 1024-65535) for a measurement by hand.
fn connections() -> usize {
    std::env::var("SLUICE_LAB_CONNECTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6000)
}
const BURSTS: usize = 2;

/// The Linux clients (see the test).
const CLIENT: &str = r#"
import os,resource,socket,sys,time
N={n}; B={bursts}; W=max((N+15999)//16000,min(16,(N+999)//1000))
soft,hard=resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE,(hard,hard))
open('/proc/sys/net/ipv4/ip_local_port_range','w').write('1024 65535')
open('/proc/sys/net/ipv4/tcp_tw_reuse','w').write('1')
def connect():
    for attempt in range(50):
        try:
            return socket.create_connection(('{ip}',{port}),timeout=30)
        except ConnectionRefusedError:
            time.sleep(0.2)
    raise SystemExit('refused')
def worker(j,k,r,w):
    socks=[]
    try:
        work(k,r,w,socks)
    except BaseException as e:
        sys.stderr.write('worker %d: %d of %d connections open: %r\n'%(j,len(socks),k,e))
        os._exit(1)
    os._exit(0)
def work(k,r,w,socks):
    for burst in range(B):
        socks.clear()
        for i in range(k): socks.append(connect())
        ok=0
        sent=[os.urandom(64) for s in socks]
        for s,d in zip(socks,sent): s.sendall(d)
        for s,d in zip(socks,sent):
            b=b''
            while len(b)<64:
                x=s.recv(64-len(b))
                if not x: break
                b+=x
            ok+=b==d
        os.write(w,b'%d\n'%ok)
        os.read(r,1)
        for s in socks: s.close()
        os.write(w,b'c\n')
        os.read(r,1)
kids=[]
for j in range(W):
    k=N//W+(1 if j<N%W else 0)
    r1,w1=os.pipe(); r2,w2=os.pipe()
    if os.fork()==0: worker(j,k,r1,w2)
    # Only the worker writes its pipe: one that dies is seen as the end of it.
    os.close(r1); os.close(w2)
    kids.append((w1,os.fdopen(r2)))
def heard(f):
    line=f.readline()
    if not line: raise SystemExit('a worker exited early (its error is above)')
    return line
for burst in range(B):
    print('held',sum(int(heard(f)) for _,f in kids),flush=True)
    sys.stdin.readline()
    for w,_ in kids: os.write(w,b'g')
    for _,f in kids: heard(f)
    print('closed',flush=True)
    sys.stdin.readline()
    for w,_ in kids: os.write(w,b'g')
for _ in kids: os.wait()
# One more connection ends the engine's run: it is alive for every measurement before.
connect().close()
"#;

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn six_thousand_concurrent_connections_twice_and_the_memory_comes_back_or_is_reused() {
    let lab = lab();
    let port = 7;
    let connections = connections();
    let mut echo = EchoApp::new(port);
    // The client's last connection, after every measurement, ends the run.
    echo.stop_after = Some((BURSTS * connections + 1) as u64);
    let (ask, asked) = channel();
    let (answer, answers) = channel();
    let sample = || {
        ask.send(()).expect("the engine runs");
        answers
            .recv_timeout(Duration::from_secs(30))
            .expect("the engine answers")
    };
    // Connects and echoes take a round trip each, a few milliseconds on a busy machine:
    // the engine's time limit grows with the count (the lab default would end a run of
    // 64,000 halfway, its clients' connects timing out).
    let limit = ENGINE_LIMIT + Duration::from_millis(15 * (BURSTS * connections) as u64);
    let engine = start_engine_for(
        EngineOptions::lab(Backend::AfPacket),
        NO_IMPAIR,
        Measured {
            echo,
            asked,
            answer,
        },
        true,
        limit,
    );
    let idle = sample();
    // Python in sluice-b: per burst, open every connection, echo 64 bytes on each, hold
    // them all, say how many were held, wait for the word, close them all. Worker
    // processes of at most 16,000 connections each stay under the descriptor limit.
    let script = CLIENT
        .replace("{n}", &connections.to_string())
        .replace("{bursts}", &BURSTS.to_string())
        .replace("{ip}", &sluice_lab::ENGINE_IP.to_string())
        .replace("{port}", &port.to_string());
    let ip = sluice_lab::command::find(sluice_lab::command::IP).expect("ip(8)");
    let mut child = Command::new(ip)
        .args([
            "netns",
            "exec",
            sluice_lab::NS_CLIENT,
            "python3",
            "-u",
            "-c",
        ])
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 starts in sluice-b");
    let mut stdin = child.stdin.take().expect("piped");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let mut next_line = || lines.next().expect("a line").expect("readable");
    let mut figures = Vec::new();
    for burst in 0..BURSTS {
        let held = next_line();
        assert_eq!(
            held,
            format!("held {connections}"),
            "burst {burst}: every connection held and echoed"
        );
        let peak = sample();
        stdin.write_all(b"go\n").expect("to python");
        assert_eq!(next_line(), "closed");
        // The engine frees each connection when the client's FIN is acknowledged
        // (LAST-ACK); give it a moment to see them all.
        std::thread::sleep(std::time::Duration::from_secs(2));
        let after = sample();
        stdin.write_all(b"go\n").expect("to python");
        figures.push((peak, after));
    }
    assert!(child.wait().expect("python exits").success());
    let (_, status, _, counters) = engine.join();
    assert_eq!(
        status,
        AppStatus::Done,
        "the engine saw every connection close"
    );
    assert_eq!(counters.conn_table_full, 0, "no connection refused");
    let kib = |b: i64| b / 1024;
    for (burst, (peak, after)) in figures.iter().enumerate() {
        eprintln!(
            "burst {burst}: {connections} connections; engine RSS idle {} KiB, held {} KiB \
             ({:.1} KiB per connection), after closing {} KiB; heap held: rings {} KiB, \
             pooled {} KiB, the rest {} KiB (idle {} KiB); after closing: rings {} KiB, pooled \
             {} KiB, the rest {} KiB",
            idle.rss_kib,
            peak.rss_kib,
            (peak.rss_kib - idle.rss_kib) as f64 / connections as f64,
            after.rss_kib,
            peak.rings / 1024,
            peak.pooled / 1024,
            kib(peak.rest()),
            kib(idle.rest()),
            after.rings / 1024,
            after.pooled / 1024,
            kib(after.rest()),
        );
    }
    // Rings are allocated on first data and given back when drained, into a bounded pool
    // that keeps them for the next burst (how many depends on how many connections held data
    // at once, which a busy machine changes); the connection table keeps the slots it grew
    // to. So: once closed, no ring stays attached (a few whose final ACK is not yet seen may);
    // the pools stay within their bound; and everything else must not grow in the second
    // burst by more than a little per connection, which a per-connection leak would exceed.
    let (first_peak, first_after) = figures[0];
    let (second_peak, second_after) = figures[1];
    let slack = 1024 * connections as i64;
    for (burst, (_, after)) in figures.iter().enumerate() {
        assert!(
            after.rings <= connections / 50 * 2 * 64 * 1024,
            "burst {burst}: rings still attached after every connection closed: {after:?}"
        );
    }
    assert!(
        second_peak.rest() <= first_peak.rest() + slack,
        "the second burst grew the engine's heap again: {figures:?} from {idle:?}"
    );
    assert!(
        second_after.rest() <= first_after.rest() + slack,
        "the second burst's heap did not come back: {figures:?} from {idle:?}"
    );
    lab.teardown().expect("lab down");
}
