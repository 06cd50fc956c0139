//! The multi-core engine's idle threads sleep (multicore/doorbell.rs; docs/multicore.md,
//! "Idle threads"): an engine on two threads, idle, costs little CPU and its threads sleep;
//! then a transfer wakes them and arrives byte-exact. Its own test binary, so the process's
//! CPU time is the engine's. Over the in-memory device pair: no root needed.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use nix::sys::resource::{getrusage, UsageWho};
use sluice_device::{pair, PairConfig};
use sluice_engine::apps::{SinkApp, SourceApp};
use sluice_engine::multicore::{Layout, MultiEngine};
use sluice_engine::setup::core_config;
use sluice_engine::{AppStatus, Engine};
use sluice_tcp::Stack;

const ENGINE: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
const PEER: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);
const PORT: u16 = 5001;

/// The process's CPU time so far (user and system, every thread).
fn cpu_time() -> Duration {
    let u = getrusage(UsageWho::RUSAGE_SELF).expect("getrusage");
    let t = |tv: nix::sys::time::TimeVal| {
        Duration::from_secs(tv.tv_sec() as u64) + Duration::from_micros(tv.tv_usec() as u64)
    };
    t(u.user_time()) + t(u.system_time())
}

#[test]
fn idle_threads_sleep_then_wake_for_a_transfer_that_arrives_exact() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 {
        eprintln!("skipped: two data-path threads need two cores, this machine has {cores}");
        return;
    }
    let (a, b) = pair(PairConfig::default()).unwrap();
    let macs = PairConfig::default().macs;
    let mut config = core_config(macs[0], ENGINE, 1500);
    config.seed = 2;
    // Pipelined: every batch crosses between the two threads, both ways.
    let mut multi = MultiEngine::new(a, config, Layout::Pipelined { groups: 1 }, |_| {
        let mut sink = SinkApp::new(PORT);
        sink.print = false;
        sink.stop_after = Some(1);
        sink
    })
    .unwrap();
    multi.linger = Duration::from_secs(2);
    // No timeout cap to hide a lost wake-up behind: only the doorbells, the device and the
    // core's own timers wake a thread.
    multi.max_sleep = Duration::from_secs(30);
    let bells: Vec<_> = multi.doorbells().to_vec();
    assert_eq!(bells.len(), 2);
    let engine = std::thread::spawn(move || {
        let report = multi.run(Some(Duration::from_secs(60))).unwrap();
        (report, multi.into_apps())
    });

    // Idle: after a short spin the threads sleep.
    std::thread::sleep(Duration::from_millis(100));
    let (cpu0, wall0) = (cpu_time(), Instant::now());
    std::thread::sleep(Duration::from_millis(200));
    let (cpu, wall) = (cpu_time() - cpu0, wall0.elapsed());
    for (t, b) in bells.iter().enumerate() {
        assert!(
            b.counters().sleeps > 0,
            "thread {t} slept: {:?}",
            b.counters()
        );
    }
    // A sanity bound, not a benchmark: two polling threads would take ~200% of a core
    // (the old spin-yield-park loop, far more than this); sleeping ones take ~1%.
    assert!(
        cpu < wall * 3 / 10,
        "an idle engine used {cpu:?} of CPU in {wall:?}"
    );
    eprintln!("idle: {cpu:?} of CPU in {wall:?}");
    let idle_sleeps: Vec<u64> = bells.iter().map(|b| b.counters().sleeps).collect();

    // Traffic resumes: the sleeping threads are woken for every step of it.
    let bytes = 1 << 20;
    let mut peer_config = core_config(macs[1], PEER, 1500);
    peer_config.seed = 1;
    let mut peer = Engine::new(Stack::new(peer_config).unwrap(), b);
    let mut source = SourceApp::new(ENGINE, PORT, bytes, 7);
    source.print = false;
    let status = peer
        .run(&mut source, Some(Duration::from_secs(60)))
        .unwrap();
    assert_eq!(status, AppStatus::Done, "the peer's source finished");
    let (report, apps) = engine.join().unwrap();
    assert!(report.apps_done, "{report:?}");
    let got = &apps[0].reports;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].bytes, bytes);
    assert_eq!(got[0].sha256, source.sha256(), "byte-exact");
    assert!(
        report.threads.iter().map(|t| t.woken).sum::<u64>() > 0,
        "a thread was woken by the other's doorbell: {:?}",
        report.threads
    );
    eprintln!("threads: {:?}", report.threads);
    for (t, c) in report.threads.iter().enumerate() {
        assert!(c.sleeps >= idle_sleeps[t], "{:?}", report.threads);
    }
    // Device pair ends live until here: the engine's last frames met an open device.
    drop(peer);
}
