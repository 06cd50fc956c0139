//! Connection load and memory (needs root: `#[ignore]`d, and scripts/test.sh runs it as
//! root): more concurrent connections than the old 4,096-slot table held, each echoing
//! a little data, in two bursts; the engine's memory after each burst closes, and the
//! second burst reusing what the first left instead of growing. Its own test binary, so
//! the process's RSS is the engine's (plus the test harness).

mod lab_support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use lab_support::{lab, rss_kib, start_engine_for, ENGINE_LIMIT, NO_IMPAIR};
use sluice_engine::apps::EchoApp;
use sluice_engine::setup::{Backend, EngineOptions};
use sluice_engine::AppStatus;
use sluice_lab::presets::LabPreset;

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
"#;

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn six_thousand_concurrent_connections_twice_and_the_memory_comes_back_or_is_reused() {
    let lab = lab();
    let port = 7;
    let connections = connections();
    let mut echo = EchoApp::new(port);
    echo.stop_after = Some((BURSTS * connections) as u64);
    // Connects and echoes take a round trip each, a few milliseconds on a busy machine:
    // the engine's time limit grows with the count (the lab default would end a run of
    // 64,000 halfway, its clients' connects timing out).
    let limit = ENGINE_LIMIT + Duration::from_millis(15 * (BURSTS * connections) as u64);
    let engine = start_engine_for(
        EngineOptions::lab(Backend::AfPacket),
        NO_IMPAIR,
        echo,
        true,
        limit,
    );
    let idle = rss_kib();
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
        let peak = rss_kib();
        stdin.write_all(b"go\n").expect("to python");
        assert_eq!(next_line(), "closed");
        // The engine frees each connection when the client's FIN is acknowledged
        // (LAST-ACK); give it a moment to see them all.
        std::thread::sleep(std::time::Duration::from_secs(2));
        let after = rss_kib();
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
    for (burst, (peak, after)) in figures.iter().enumerate() {
        eprintln!(
            "burst {burst}: {connections} connections, engine RSS idle {idle} KiB, held {peak} \
             KiB (+{} KiB, {:.1} KiB per connection), after closing {after} KiB",
            peak - idle,
            (peak - idle) as f64 / connections as f64
        );
    }
    // Rings are allocated on first data and given back when drained (a bounded pool keeps a
    // few, the allocator the rest), so a second burst is served from memory the first gave
    // back, though the allocator's fragments may make it take more. A leak would keep what
    // the first burst took: the second burst must not add more than a first burst on top, and
    // must give back what it took.
    let (first_peak, _) = figures[0];
    let (second_peak, second_after) = figures[1];
    let growth = first_peak.saturating_sub(idle).max(1);
    assert!(
        second_peak <= first_peak + growth,
        "the second burst grew the engine again: {figures:?} from {idle} KiB"
    );
    assert!(
        second_after <= first_peak,
        "the second burst's memory did not come back: {figures:?} from {idle} KiB"
    );
    lab.teardown().expect("lab down");
}
