//! Connection load and memory (needs root: `#[ignore]`d, and scripts/test.sh runs it as
//! root): more concurrent connections than the old 4,096-slot table held, each echoing
//! a little data, in two bursts; the engine's memory after each burst closes, and the
//! second burst reusing what the first left instead of growing. Its own test binary, so
//! the process's RSS is the engine's (plus the test harness).

mod lab_support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use lab_support::{lab, start_engine, NO_IMPAIR};
use sluice_engine::apps::EchoApp;
use sluice_engine::setup::Backend;
use sluice_engine::AppStatus;

const CONNECTIONS: usize = 6000;
const BURSTS: usize = 2;

/// This process's resident set in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn six_thousand_concurrent_connections_twice_and_the_memory_comes_back_or_is_reused() {
    let lab = lab();
    let port = 7;
    let mut echo = EchoApp::new(port);
    echo.stop_after = Some((BURSTS * CONNECTIONS) as u64);
    let engine = start_engine(Backend::AfPacket, NO_IMPAIR, echo, true);
    let idle = rss_kib();
    // Python in sluice-b: per burst, open every connection, echo 64 bytes on each, hold
    // them all, say how many were held, wait for the word, close them all.
    let script = format!(
        "import os,resource,socket,sys,time\n\
         resource.setrlimit(resource.RLIMIT_NOFILE,({n}+100,{n}+100))\n\
         for burst in range({bursts}):\n\
         \x20   socks=[]\n\
         \x20   for i in range({n}):\n\
         \x20       for attempt in range(50):\n\
         \x20           try:\n\
         \x20               s=socket.create_connection(('{ip}',{port}),timeout=30)\n\
         \x20               break\n\
         \x20           except ConnectionRefusedError:\n\
         \x20               time.sleep(0.2)\n\
         \x20       socks.append(s)\n\
         \x20   ok=0\n\
         \x20   for s in socks:\n\
         \x20       d=os.urandom(64)\n\
         \x20       s.sendall(d)\n\
         \x20       b=b''\n\
         \x20       while len(b)<64:\n\
         \x20           x=s.recv(64-len(b))\n\
         \x20           if not x: break\n\
         \x20           b+=x\n\
         \x20       ok+=b==d\n\
         \x20   print('held',ok,flush=True)\n\
         \x20   sys.stdin.readline()\n\
         \x20   for s in socks: s.close()\n\
         \x20   print('closed',flush=True)\n\
         \x20   sys.stdin.readline()\n",
        n = CONNECTIONS,
        bursts = BURSTS,
        ip = sluice_lab::ENGINE_IP,
    );
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
            format!("held {CONNECTIONS}"),
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
            "burst {burst}: {CONNECTIONS} connections, engine RSS idle {idle} KiB, held {peak} \
             KiB (+{} KiB, {:.1} KiB per connection), after closing {after} KiB",
            peak - idle,
            (peak - idle) as f64 / CONNECTIONS as f64
        );
    }
    // The second burst reuses the slots and rings the first left: it does not grow the
    // engine by more than a tenth of the first burst's growth.
    let (first_peak, _) = figures[0];
    let (second_peak, second_after) = figures[1];
    let growth = first_peak.saturating_sub(idle).max(1);
    assert!(
        second_peak <= first_peak + growth / 10,
        "the second burst grew the engine again: {figures:?} from {idle} KiB"
    );
    assert!(second_after <= second_peak);
    lab.teardown().expect("lab down");
}
