//! The multi-core engine's idle threads sleep (multicore/doorbell.rs; docs/multicore.md,
//! "Idle threads"): an engine on two threads, idle, costs little CPU and its threads sleep;
//! then a transfer wakes them and arrives byte-exact. Its own test binary, so the process's
//! CPU time is the engine's. Over the in-memory device pair: no root needed.

use std::net::Ipv4Addr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::resource::{getrusage, UsageWho};
use sluice_device::{pair, PairConfig};
use sluice_engine::apps::{SinkApp, SourceApp};
use sluice_engine::multicore::{ControlMsg, Layout, MultiEngine};
use sluice_engine::setup::core_config;
use sluice_engine::{App, AppStatus, Engine, EngineError};
use sluice_shm::EventFd;
use sluice_tcp::Stack;

const ENGINE: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
const PEER: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);
const PORT: u16 = 5001;

/// One test at a time: the first measures the process's CPU time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

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
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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

/// An application with a doorbell of its own, as the service has: it counts the polls that
/// found its eventfd rung and the times the engine asked whether it may sleep.
struct Rung {
    bell: Arc<EventFd>,
    agreed: Arc<AtomicU64>,
    served: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl App for Rung {
    fn poll(&mut self, _: &mut Stack, _: sluice_tcp::Instant) -> Result<AppStatus, EngineError> {
        if self.bell.drain() {
            self.served.fetch_add(1, Ordering::AcqRel);
        }
        Ok(if self.stop.load(Ordering::Acquire) {
            AppStatus::Done
        } else {
            AppStatus::Running
        })
    }

    fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.bell.as_fd())
    }

    fn prepare_sleep(&mut self) -> bool {
        self.agreed.fetch_add(1, Ordering::AcqRel);
        true
    }
}

/// Waits (polling) until `f` holds, for at most `limit`.
fn eventually(limit: Duration, f: impl Fn() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    f()
}

/// The service's case: the protocol role's thread sleeps on its application's descriptor
/// once the application agreed, and a ring there (or a control message) wakes it.
#[test]
fn an_applications_doorbell_wakes_the_thread_of_its_protocol_role() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // The protocol role alone (pipelined: no device), with the NIC role (replicated,
    // run-to-completion: the device's wait, with an epoll set of the doorbells).
    let mut layouts = vec![Layout::RunToCompletion { groups: 1 }];
    if cores >= 2 {
        layouts.push(Layout::Pipelined { groups: 1 });
        layouts.push(Layout::Replicated {
            groups: 1,
            replicas: 1,
        });
    } else {
        eprintln!("two-thread layouts skipped: this machine has {cores} core(s)");
    }
    for layout in layouts {
        let (a, _b) = pair(PairConfig::default()).unwrap();
        let config = core_config(PairConfig::default().macs[0], ENGINE, 1500);
        let bell = Arc::new(EventFd::new().unwrap());
        let (agreed, served) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let stop = Arc::new(AtomicBool::new(false));
        let app = Rung {
            bell: bell.clone(),
            agreed: agreed.clone(),
            served: served.clone(),
            stop: stop.clone(),
        };
        let mut app = Some(app);
        let mut multi = MultiEngine::new(a, config, layout, |_| app.take().unwrap()).unwrap();
        // Only the application's descriptor can end these sleeps in time: a wake-up lost
        // would take 30 s, beyond the waits below.
        multi.max_sleep = Duration::from_secs(30);
        let mut control = multi.take_control().unwrap();
        let engine = std::thread::spawn(move || multi.run(Some(Duration::from_secs(60))));
        let mut asked = 0;
        for k in 1..=3 {
            // Going to sleep since the last ring was served: the application was asked.
            let was_asked = || agreed.load(Ordering::Acquire) > asked;
            assert!(
                eventually(Duration::from_secs(10), was_asked),
                "{layout:?}: the engine never asked the application to sleep before ring {k}"
            );
            asked = agreed.load(Ordering::Acquire);
            bell.signal();
            let was_served = || served.load(Ordering::Acquire) >= k;
            assert!(
                eventually(Duration::from_secs(10), was_served),
                "{layout:?}: ring {k} did not wake the protocol role's thread"
            );
        }
        // A control message wakes the sleeping group's thread too.
        let was_asked = || agreed.load(Ordering::Acquire) > asked;
        assert!(eventually(Duration::from_secs(10), was_asked), "{layout:?}");
        control.send(0, ControlMsg::Counters { tag: 9 }).unwrap();
        let end = Instant::now() + Duration::from_secs(10);
        let reply = loop {
            if let Some(r) = control.recv(0) {
                break Some(r);
            }
            if Instant::now() > end {
                break None;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(
            reply.map(|r| r.tag()),
            Some(9),
            "{layout:?}: the control message did not wake the group's thread"
        );
        stop.store(true, Ordering::Release);
        bell.signal();
        let report = engine.join().unwrap().unwrap();
        assert!(report.apps_done, "{layout:?}");
        assert!(
            report.threads.iter().all(|t| t.sleeps > 0),
            "{layout:?}: {:?}",
            report.threads
        );
    }
}
