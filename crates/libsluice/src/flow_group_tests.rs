//! The library's routing over several engine cores (flow_group.rs), against the shared
//! queues themselves: the test answers Hello and NewContext on a control socket of its own
//! and plays the engine's cores on each context's queue pairs (`Consumer::on_core`,
//! `Producer::on_core`), so no engine part for several cores is needed.

use std::net::{Ipv4Addr, Shutdown, SocketAddrV4};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_shm::control::{self, EngineInfo, Reply, Request};
use sluice_shm::{
    flags, Command, Completion, Congestion, Consumer, EventFd, Layout, Producer, QueueKind, Region,
    SocketBlock, SpliceOutcome, SpliceReport,
};

use crate::{Sluice, Socket, SpliceError};

const CONTEXTS: u32 = 4;
const ENGINE_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);

/// An application attached to a region of `cores` queue pairs per context, and the test's
/// ends of every queue.
struct Rig {
    cores: u32,
    region: Arc<Region>,
    app: Arc<Sluice>,
    /// Indexed [context][core].
    commands: Vec<Vec<Consumer>>,
    completions: Vec<Vec<Producer>>,
    eventfds: Arc<Mutex<Vec<EventFd>>>,
    stop: Arc<AtomicBool>,
    control: Option<JoinHandle<()>>,
    path: PathBuf,
}

impl Rig {
    fn new(cores: u32) -> Rig {
        static N: AtomicU64 = AtomicU64::new(0);
        let layout = Layout {
            max_sockets: 32,
            max_contexts: CONTEXTS,
            queue_entries: 16,
            ring_size: 8192,
            queue_cores: cores,
            ..Layout::default()
        };
        let region = Arc::new(Region::create("fglib-test", layout).unwrap());
        let path = std::env::temp_dir().join(format!(
            "sluice-fglib-{}-{}/engine.sock",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let listener = control::listen_at(&path).unwrap();
        let eventfds = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let control = {
            let (region, eventfds, stop) = (region.clone(), eventfds.clone(), stop.clone());
            std::thread::spawn(move || serve_control(listener, region, eventfds, stop))
        };
        let app = Sluice::attach(&path).expect("attach to the test's control socket");
        let ends = |kind| {
            (0..CONTEXTS)
                .map(|c| {
                    (0..cores)
                        .map(|k| (region.clone(), c, k, kind))
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        };
        let commands = ends(QueueKind::Command)
            .into_iter()
            .map(|v| {
                v.into_iter()
                    .map(|(r, c, k, q)| Consumer::on_core(r, c, k, q).unwrap())
                    .collect()
            })
            .collect();
        let completions = ends(QueueKind::Completion)
            .into_iter()
            .map(|v| {
                v.into_iter()
                    .map(|(r, c, k, q)| Producer::on_core(r, c, k, q).unwrap())
                    .collect()
            })
            .collect();
        Rig {
            cores,
            region,
            app,
            commands,
            completions,
            eventfds,
            stop,
            control: Some(control),
            path,
        }
    }

    /// The next command of any context on any core: (context, core, command).
    fn next_command(&mut self) -> (u32, u32, Command) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            for (c, queues) in self.commands.iter_mut().enumerate() {
                for (k, q) in queues.iter_mut().enumerate() {
                    if let Some(e) = q.pop() {
                        q.publish();
                        return (c as u32, k as u32, Command::decode(&e).unwrap());
                    }
                }
            }
            assert!(Instant::now() < deadline, "no command came");
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Posts `c` on core `core`'s completion queue of context `ctx` and wakes the context
    /// (any core may: one eventfd per context).
    fn complete(&mut self, ctx: u32, core: u32, c: Completion) {
        let q = &mut self.completions[ctx as usize][core as usize];
        assert!(q.push(&c.encode()).unwrap(), "completion queue full");
        if let Some(e) = self.eventfds.lock().unwrap().get(ctx as usize) {
            e.signal();
        }
    }

    /// Answers `Open`s until `n` sockets are open: each on the core it was posted to gets
    /// that core's next slot. The sockets, in order.
    fn open(&mut self, n: u32) -> Vec<Socket> {
        let app = self.app.clone();
        let opener = std::thread::spawn(move || {
            (0..n)
                .map(|_| Socket::open(&app).unwrap())
                .collect::<Vec<_>>()
        });
        let mut next_of_core: Vec<u32> = (0..self.cores).collect();
        for _ in 0..n {
            let (ctx, core, cmd) = self.next_command();
            let Command::Open { req } = cmd else {
                panic!("expected Open, got {cmd:?}");
            };
            let slot = next_of_core[core as usize];
            next_of_core[core as usize] += self.cores;
            self.complete(
                ctx,
                core,
                Completion::Done {
                    req,
                    slot,
                    value: slot,
                },
            );
        }
        opener.join().unwrap()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.control.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
        if let Some(d) = self.path.parent() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// The engine's control side: Welcome with the region, a context per NewContext.
fn serve_control(
    listener: std::os::fd::OwnedFd,
    region: Arc<Region>,
    eventfds: Arc<Mutex<Vec<EventFd>>>,
    stop: Arc<AtomicBool>,
) {
    let doorbell = EventFd::new().unwrap();
    let mut app = None;
    while !stop.load(Ordering::SeqCst) {
        if app.is_none() {
            app = control::accept_app(listener.as_fd()).unwrap();
        }
        let Some(fd) = app.as_ref() else {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        match control::recv_message::<Request>(fd.as_fd()) {
            Ok(Some((Request::Hello { .. }, _))) => {
                let welcome = Reply::Welcome {
                    app: 1,
                    layout: region.layout(),
                    engine: EngineInfo {
                        ip: ENGINE_IP,
                        prefix_len: 24,
                        gateway: None,
                        app_idle_us: 50,
                    },
                };
                control::send_message(fd.as_fd(), &welcome, &[region.fd(), doorbell.as_fd()])
                    .unwrap();
            }
            Ok(Some((Request::NewContext, _))) => {
                let mut all = eventfds.lock().unwrap();
                let index = all.len() as u32;
                assert!(index < CONTEXTS, "the test ran out of contexts");
                let e = EventFd::new().unwrap();
                control::send_message(fd.as_fd(), &Reply::Context { index }, &[e.as_fd()]).unwrap();
                all.push(e);
            }
            Ok(Some(_)) => panic!("unexpected control request"),
            Ok(None) => std::thread::sleep(Duration::from_millis(1)),
            Err(_) => return,
        }
    }
}

fn name_of(cmd: &Command) -> &'static str {
    match cmd {
        Command::Open { .. } => "open",
        Command::Bind { .. } => "bind",
        Command::Listen { .. } => "listen",
        Command::Connect { .. } => "connect",
        Command::Send { .. } => "send",
        Command::Consumed { .. } => "consumed",
        Command::Shutdown { .. } => "shutdown",
        Command::Close { .. } => "close",
        Command::SetNoDelay { .. } => "nodelay",
        Command::SetCongestion { .. } => "congestion",
        Command::SetTeardownOffload { .. } => "teardown",
        Command::Splice { .. } => "splice",
        Command::QpDoorbell { .. } => "qp",
        Command::MtpDoorbell { .. } => "mtp",
    }
}

#[test]
fn opens_go_round_robin_and_every_slot_command_to_the_slot_s_core() {
    for cores in [2, 3] {
        let mut rig = Rig::new(cores);
        let socks = rig.open(2 * cores);
        let slots: Vec<u32> = socks.iter().map(Socket::slot).collect();
        // Round robin from core 0, each core's slots its own.
        let want: Vec<u32> = (0..2 * cores)
            .map(|i| i % cores + cores * (i / cores))
            .collect();
        assert_eq!(slots, want, "{cores} cores");

        let (listener, client) = (slots[0], slots[1]);
        let user = std::thread::spawn(move || {
            for s in &socks {
                s.set_nodelay(true).unwrap();
                s.set_congestion(Congestion::Cubic).unwrap();
                s.set_teardown_offload(true).unwrap();
            }
            socks[0].bind(SocketAddrV4::new(ENGINE_IP, 8080)).unwrap();
            socks[0].listen(16).unwrap();
            socks[1].set_nonblocking(true);
            let c = socks[1].connect(SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 2), 80));
            assert!(matches!(c, Err(crate::Error::InProgress)), "{c:?}");
            assert_eq!(socks[1].send(b"hello").unwrap(), 5);
            socks[1].shutdown(Shutdown::Write).unwrap();
            drop(socks);
        });

        let mut want: Vec<(&str, u32)> = Vec::new();
        for &s in &slots {
            want.extend([("nodelay", s), ("congestion", s), ("teardown", s)]);
        }
        want.extend([("bind", listener), ("listen", listener)]);
        want.extend([("connect", client), ("send", client), ("shutdown", client)]);
        want.extend(slots.iter().map(|&s| ("close", s)));
        let mut got = Vec::new();
        while got.len() < want.len() {
            let (ctx, core, cmd) = rig.next_command();
            let slot = cmd.slot().expect("a slot command");
            assert_eq!(core, slot % cores, "{cmd:?} went to core {core}");
            got.push((name_of(&cmd), slot));
            if let Command::Connect { slot, .. } = cmd {
                // The handshake completes at once, so the socket may send.
                let b = SocketBlock::new(&rig.region, slot).unwrap();
                b.flags()
                    .store(flags::ALLOCATED | flags::CONNECTED, Ordering::Release);
            }
            if let Some(req) = cmd.req() {
                let value = if matches!(cmd, Command::Bind { .. }) {
                    8080
                } else {
                    0
                };
                rig.complete(ctx, core, Completion::Done { req, slot, value });
            }
        }
        user.join().unwrap();
        // The closes go to several cores at once: the test reads them core by core.
        let n = got.len() - slots.len();
        got[n..].sort_unstable_by_key(|&(_, s)| s);
        assert_eq!(got, want, "{cores} cores");
    }
}

#[test]
fn an_answer_counts_only_on_the_queue_of_the_core_the_command_went_to() {
    let mut rig = Rig::new(2);
    let socks = rig.open(2);
    let socks: Vec<Arc<Socket>> = socks.into_iter().map(Arc::new).collect();
    let (tx, rx) = mpsc::channel();
    let s1 = socks[1].clone();
    let user = std::thread::spawn(move || {
        tx.send(s1.set_nodelay(true)).unwrap();
    });
    let (ctx, core, cmd) = rig.next_command();
    assert_eq!((core, name_of(&cmd)), (1, "nodelay"));
    let req = cmd.req().unwrap();
    // Core 0 answering core 1's request is not its answer.
    rig.complete(
        ctx,
        0,
        Completion::Done {
            req,
            slot: 1,
            value: 0,
        },
    );
    assert!(
        rx.recv_timeout(Duration::from_millis(100)).is_err(),
        "completed by another core's queue"
    );
    rig.complete(
        ctx,
        1,
        Completion::Failed {
            req,
            errno: libc::ENOPROTOOPT,
        },
    );
    let r = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(r.unwrap_err().errno(), libc::ENOPROTOOPT);
    user.join().unwrap();

    // The stray answer left on core 0's queue is skipped by the next call there.
    let s0 = socks[0].clone();
    let user = std::thread::spawn(move || s0.set_nodelay(true));
    let (ctx, core, cmd) = rig.next_command();
    assert_eq!((core, name_of(&cmd)), (0, "nodelay"));
    let req = cmd.req().unwrap();
    rig.complete(
        ctx,
        0,
        Completion::Done {
            req,
            slot: 0,
            value: 0,
        },
    );
    user.join().unwrap().unwrap();
}

#[test]
fn splice_reports_are_kept_from_any_core_and_a_splice_across_cores_is_incompatible() {
    let mut rig = Rig::new(3);
    let socks = rig.open(6);
    // Slots 1 and 4 are both core 1's; slot 0 is core 0's.
    let (tx, rx) = mpsc::channel();
    let user = std::thread::spawn(move || {
        let sp = socks[1].splice(&socks[4]).unwrap();
        assert_eq!(sp.handle(), 7);
        let installed = sp.poll().map(|r| r.outcome);
        tx.send(installed).unwrap();
        let end = sp.wait(Some(Duration::from_secs(10))).unwrap();
        let across = socks[0].splice(&socks[1]).map(|_| ());
        (end, across)
    });
    let (ctx, core, cmd) = rig.next_command();
    assert_eq!((core, name_of(&cmd), cmd.slot()), (1, "splice", Some(1)));
    let report = |outcome, a_to_b, b_to_a| {
        Completion::Splice(SpliceReport {
            handle: 7,
            outcome,
            a_to_b,
            b_to_a,
        })
    };
    // Installed reported by core 2, before core 1's answer.
    rig.complete(ctx, 2, report(SpliceOutcome::Installed, 0, 0));
    let req = cmd.req().unwrap();
    rig.complete(
        ctx,
        1,
        Completion::Done {
            req,
            slot: 1,
            value: 7,
        },
    );
    let installed = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(installed, Some(SpliceOutcome::Installed));
    // The end, by core 0.
    rig.complete(ctx, 0, report(SpliceOutcome::Closed, 10, 20));

    let (ctx, core, cmd) = rig.next_command();
    assert_eq!((core, name_of(&cmd), cmd.slot()), (0, "splice", Some(0)));
    let req = cmd.req().unwrap();
    rig.complete(
        ctx,
        0,
        Completion::Failed {
            req,
            errno: libc::EOPNOTSUPP,
        },
    );
    let (end, across) = user.join().unwrap();
    let end = end.expect("the final report");
    assert_eq!(
        (end.outcome, end.a_to_b, end.b_to_a),
        (SpliceOutcome::Closed, 10, 20)
    );
    assert!(
        matches!(across, Err(SpliceError::Incompatible)),
        "{across:?}"
    );
}

#[test]
fn verbs_and_mtp_doorbells_go_to_core_0_and_slot_doorbells_to_their_core() {
    let mut rig = Rig::new(2);
    let app = rig.app.clone();
    std::thread::spawn(move || {
        app.post(Command::QpDoorbell { qpn: 3 }).unwrap();
        app.post(Command::MtpDoorbell { ep: 5 }).unwrap();
        app.post(Command::Send { slot: 3 }).unwrap();
        app.post(Command::Consumed { slot: 6 }).unwrap();
    })
    .join()
    .unwrap();
    let got: Vec<(u32, &str)> = (0..4)
        .map(|_| {
            let (_, core, cmd) = rig.next_command();
            (core, name_of(&cmd))
        })
        .collect();
    // Per core in order; across cores the test reads core 0's queue first.
    assert_eq!(got, [(0, "qp"), (0, "mtp"), (0, "consumed"), (1, "send")]);
}

/// What the test's engine answers a command with.
#[derive(Clone, Copy, Debug)]
enum Answer {
    Done(u32),
    Fail(i32),
    /// A doorbell or Close: nothing.
    Nothing,
}

/// Serves commands as `script` says, in order: (command, core, slot it names, answer).
/// A Connect answered Done marks its slot connected first. Bind entries must carry port
/// 5000 and SO_REUSEADDR, SetCongestion BBR: what the application chose.
fn play(rig: &mut Rig, script: &[(&str, u32, Option<u32>, Answer)]) {
    for (i, &(name, core, slot, answer)) in script.iter().enumerate() {
        let (ctx, k, cmd) = rig.next_command();
        assert_eq!(
            (name_of(&cmd), k, cmd.slot()),
            (name, core, slot),
            "step {i}: {cmd:?}"
        );
        match cmd {
            Command::Bind {
                ip, port, reuse, ..
            } => {
                assert_eq!((ip, port), (ENGINE_IP, 5000), "step {i}");
                assert!(reuse.addr && !reuse.port, "step {i}: {reuse:?}");
            }
            Command::SetCongestion { algorithm, .. } => {
                assert_eq!(algorithm, Congestion::Bbr, "step {i}")
            }
            Command::Connect { slot, .. } if matches!(answer, Answer::Done(_)) => {
                SocketBlock::new(&rig.region, slot)
                    .unwrap()
                    .flags()
                    .store(flags::ALLOCATED | flags::CONNECTED, Ordering::Release);
            }
            _ => {}
        }
        let req = cmd.req();
        let c = match (answer, req) {
            (Answer::Done(value), Some(req)) => Completion::Done {
                req,
                slot: slot.unwrap_or(value),
                value,
            },
            (Answer::Fail(errno), Some(req)) => Completion::Failed { req, errno },
            (Answer::Nothing, None) => continue,
            other => panic!("step {i}: answer {other:?} for {cmd:?}"),
        };
        rig.complete(ctx, k, c);
    }
}

/// A socket on slot 0 set up as an application that binds by hand does, then connected.
fn bind_by_hand_and_connect(
    sock: Socket,
) -> std::thread::JoinHandle<(Result<(), crate::Error>, Socket)> {
    std::thread::spawn(move || {
        sock.set_reuse_address(true);
        sock.set_nodelay(true).unwrap();
        sock.set_congestion(Congestion::Bbr).unwrap();
        sock.bind(SocketAddrV4::new(ENGINE_IP, 5000)).unwrap();
        let r = sock.connect(SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 2), 80));
        (r, sock)
    })
}

const SETUP_ON_0: [(&str, u32, Option<u32>, Answer); 3] = [
    ("nodelay", 0, Some(0), Answer::Done(0)),
    ("congestion", 0, Some(0), Answer::Done(0)),
    ("bind", 0, Some(0), Answer::Done(5000)),
];

#[test]
fn a_connect_answered_exdev_moves_to_the_next_cores_with_its_bind_and_options() {
    use Answer::*;
    let mut rig = Rig::new(3);
    let sock = rig.open(1).pop().unwrap();
    let user = bind_by_hand_and_connect(sock);
    let mut script = SETUP_ON_0.to_vec();
    script.extend([
        ("connect", 0, Some(0), Fail(libc::EXDEV)),
        // Core 1: a new slot, the old one given up, bound again (the first Bind finds the
        // port still held, as when core 0 has not released it yet), options again.
        ("open", 1, None, Done(1)),
        ("close", 0, Some(0), Nothing),
        ("bind", 1, Some(1), Fail(libc::EADDRINUSE)),
        ("bind", 1, Some(1), Done(5000)),
        ("nodelay", 1, Some(1), Done(0)),
        ("congestion", 1, Some(1), Done(0)),
        ("connect", 1, Some(1), Fail(libc::EXDEV)),
        // Core 2 owns the tuple.
        ("open", 2, None, Done(2)),
        ("close", 1, Some(1), Nothing),
        ("bind", 2, Some(2), Done(5000)),
        ("nodelay", 2, Some(2), Done(0)),
        ("congestion", 2, Some(2), Done(0)),
        ("connect", 2, Some(2), Done(5000)),
    ]);
    play(&mut rig, &script);
    let (r, sock) = user.join().unwrap();
    r.unwrap();
    assert_eq!(sock.slot(), 2);
    assert!(sock.is_connected());
    assert_eq!(
        sock.local_addr().unwrap(),
        SocketAddrV4::new(ENGINE_IP, 5000)
    );
}

#[test]
fn a_connect_no_core_takes_fails_and_other_errors_are_the_connect_s() {
    use Answer::*;
    let mut rig = Rig::new(2);
    let socks = rig.open(2);
    let mut socks = socks.into_iter();
    let (first, _core1) = (socks.next().unwrap(), socks.next().unwrap());
    let user = bind_by_hand_and_connect(first);
    let mut script = SETUP_ON_0.to_vec();
    script.extend([
        ("connect", 0, Some(0), Fail(libc::EXDEV)),
        // Slot 1 is the open socket's: core 1's next is 3.
        ("open", 1, None, Done(3)),
        ("close", 0, Some(0), Nothing),
        ("bind", 1, Some(3), Done(5000)),
        ("nodelay", 1, Some(3), Done(0)),
        ("congestion", 1, Some(3), Done(0)),
        ("connect", 1, Some(3), Fail(libc::EXDEV)),
    ]);
    play(&mut rig, &script);
    let (r, sock) = user.join().unwrap();
    assert_eq!(r.unwrap_err().errno(), libc::EADDRNOTAVAIL);
    assert_eq!(sock.slot(), 3, "the socket keeps the last slot tried");

    // Any other refusal is the connect's own, with no move.
    let mut rig = Rig::new(2);
    let sock = rig.open(1).pop().unwrap();
    let user = bind_by_hand_and_connect(sock);
    let mut script = SETUP_ON_0.to_vec();
    script.push(("connect", 0, Some(0), Fail(libc::ENETUNREACH)));
    play(&mut rig, &script);
    let (r, sock) = user.join().unwrap();
    assert_eq!(r.unwrap_err().errno(), libc::ENETUNREACH);
    assert_eq!(sock.slot(), 0);
    assert!(!rig.commands.iter().flatten().any(Consumer::has_entry));
}
