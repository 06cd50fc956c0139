//! The multi-core data-path (docs/multicore.md) against simulated peers: across 1-4 flow
//! groups and every layout, with the roles stepped in random orders and budgets over a lossy,
//! reordering link, every connection's bytes arrive in order and exact (SHA-256) both ways,
//! the RPC echoes check out, and the protocol roles' ownership assertions (test builds) hold.
//! Then the roles on real threads over a device pair, against a single-core engine.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use sha2::{Digest, Sha256};
use sluice_apps::pattern_fill;
use sluice_device::{pair, PairConfig};
use sluice_device::{Device, TxFrame};
use sluice_ebpf::{Maps, Program};
use sluice_engine::apps::{EchoApp, SinkApp, SourceApp};
use sluice_engine::multicore::{
    Control, ControlError, ControlMsg, ControlReply, Layout, MultiEngine, MultiError, MultiReport,
    Placement, PlacementError, CONTROL_SLOTS,
};
use sluice_engine::setup::core_config;
use sluice_engine::transport::{Transport, Transports};
use sluice_engine::HookPoint;
use sluice_engine::{App, AppStatus, Engine, EngineError};
use sluice_sim::sim_wire::{Impairment, LinkConfig, PeerRole, SimWire, SimWireConfig, ENGINE_MAC};
use sluice_tcp::{Instant, Stack};
use sluice_wire::flow_group::FlowGroups;

const ENGINE: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const SINK_PORT: u16 = 5001;
const ECHO_PORT: u16 = 7;
const PEER_SINK_PORT: u16 = 6000;

/// SHA-256 of the first `bytes` of the deterministic stream `seed`.
fn digest(bytes: u64, seed: u64) -> [u8; 32] {
    let mut data = vec![0u8; bytes as usize];
    pattern_fill(seed, 0, &mut data);
    Sha256::digest(&data).into()
}

/// One flow group's application: a sink and an echo server (the peers' connections that
/// hash to the group reach them), and the sources this group opens to peer sinks.
struct GroupApp {
    sink: SinkApp,
    echo: EchoApp,
    sources: Vec<(SourceApp, bool)>,
}

impl GroupApp {
    fn new(sources: Vec<SourceApp>) -> Self {
        let mut sink = SinkApp::new(SINK_PORT);
        sink.print = false;
        GroupApp {
            sink,
            echo: EchoApp::new(ECHO_PORT),
            sources: sources.into_iter().map(|s| (s, false)).collect(),
        }
    }

    fn sources_done(&self) -> bool {
        self.sources.iter().all(|(_, done)| *done)
    }
}

impl App for GroupApp {
    fn poll(&mut self, stack: &mut Stack, now: Instant) -> Result<AppStatus, EngineError> {
        self.sink.poll(stack, now)?;
        self.echo.poll(stack, now)?;
        for (source, done) in self.sources.iter_mut() {
            if !*done {
                *done = source.poll(stack, now)? == AppStatus::Done;
            }
        }
        Ok(AppStatus::Running)
    }
}

fn layout(kind: u8, groups: u16, replicas: u16) -> Layout {
    match kind {
        0 => Layout::RunToCompletion { groups },
        1 => Layout::Pipelined { groups },
        2 => Layout::Replicated { groups, replicas },
        _ => Layout::FlowGroups { groups },
    }
}

/// One run of the stepped model; panics (a failed case) on any mismatch.
fn model_run(
    seed: u64,
    kind: u8,
    groups: u16,
    replicas: u16,
    ins: u8,
    outs: u8,
    lossy: bool,
) -> MultiReport {
    model_run_on(seed, kind, groups, replicas, ins, outs, lossy, false)
}

/// [`model_run`] over a wire with segmentation and checksum offload (`tso`) or without.
#[allow(clippy::too_many_arguments)]
fn model_run_on(
    seed: u64,
    kind: u8,
    groups: u16,
    replicas: u16,
    ins: u8,
    outs: u8,
    lossy: bool,
    tso: bool,
) -> MultiReport {
    let impairment = if lossy {
        Impairment::default()
            .with_loss(0.01)
            .with_reorder(0.02, Duration::from_micros(30))
    } else {
        Impairment::default()
    };
    let mut wire = SimWire::new(SimWireConfig {
        seed,
        link: LinkConfig::new(1_000_000_000, Duration::from_micros(20)).with_impairment(impairment),
        tso,
        ..SimWireConfig::default()
    })
    .unwrap();
    let bytes = 48 * 1024;
    for i in 0..ins {
        wire.add_peer(
            Ipv4Addr::new(10, 77, 0, 10 + i),
            PeerRole::Source {
                server: SocketAddrV4::new(ENGINE, SINK_PORT),
                bytes,
                seed: 100 + u64::from(i),
            },
        )
        .unwrap();
    }
    for j in 0..outs {
        wire.add_peer(
            Ipv4Addr::new(10, 77, 0, 50 + j),
            PeerRole::Sink {
                port: PEER_SINK_PORT,
                connections: 1,
            },
        )
        .unwrap();
    }
    wire.add_peer(
        Ipv4Addr::new(10, 77, 0, 90),
        PeerRole::Rpc {
            server: SocketAddrV4::new(ENGINE, ECHO_PORT),
            count: 20,
            size: 700,
        },
    )
    .unwrap();
    let clock = wire.clock();
    let mut config = core_config(ENGINE_MAC, ENGINE, 1500);
    config.seed = seed ^ 0x5eed;
    config.clock_epoch = Duration::ZERO;
    let layout = layout(kind, groups, replicas);
    let mut engine = MultiEngine::with_clock(wire, config, layout, clock, |g| {
        // Engine -> peer connections are spread over the groups that open them.
        let sources = (0..outs)
            .filter(|j| u16::from(*j) % groups == g)
            .map(|j| {
                let mut s = SourceApp::new(
                    Ipv4Addr::new(10, 77, 0, 50 + j),
                    PEER_SINK_PORT,
                    bytes,
                    200 + u64::from(j),
                );
                s.print = false;
                s
            })
            .collect();
        GroupApp::new(sources)
    })
    .unwrap();
    assert!(engine.describe().contains("thread 0: nic"));
    let report = engine
        .step_model(seed, Duration::from_secs(60), |wire, protocols| {
            let received: usize = protocols.iter().map(|p| p.app.sink.reports.len()).sum();
            wire.peers_done()
                && received == usize::from(ins)
                && protocols.iter().all(|p| p.app.sources_done())
        })
        .unwrap_or_else(|e| panic!("{layout:?} seed {seed}: {e}"));
    for peer in engine.device().peers() {
        assert_eq!(peer.error(), None, "{:?}", peer.ip);
    }
    // Peer -> engine: every source's stream arrived exact in some group's sink.
    let mut got: Vec<[u8; 32]> = engine
        .protocols()
        .iter()
        .flat_map(|p| p.app.sink.reports.iter())
        .map(|r| {
            assert_eq!((r.error, r.bytes), (None, bytes));
            r.sha256.expect("complete")
        })
        .collect();
    let mut want: Vec<[u8; 32]> = (0..ins)
        .map(|i| digest(bytes, 100 + u64::from(i)))
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "peer -> engine streams");
    // Engine -> peer: every peer sink got its source's stream exact.
    for (j, peer) in engine.device().peers()[usize::from(ins)..usize::from(ins + outs)]
        .iter()
        .enumerate()
    {
        let r = &peer.sink_reports()[0];
        assert_eq!(r.bytes, bytes);
        assert_eq!(
            r.sha256,
            Some(digest(bytes, 200 + j as u64)),
            "engine -> peer {j}"
        );
    }
    // The frames went through the roles, and the sequencing held them in order.
    assert!(report.nic_rx.frames > 0 && report.nic_tx.frames > 0);
    let on_wire = engine.device().stats().tx_frames;
    if tso {
        // Large segments left the engine whole and the wire cut them (issue 20: one frame
        // through the device per large segment, not one per MSS).
        assert!(on_wire > report.nic_tx.frames, "{on_wire} on the wire");
    } else {
        assert!(on_wire <= report.nic_tx.frames, "{on_wire} on the wire");
    }
    // No frame is invented on the way (some may still be in flight when the run stops).
    let delivered: u64 = report.protocol_rx.iter().map(|c| c.frames).sum();
    assert!(delivered > 0 && delivered <= report.nic_rx.frames);
    for c in report.protocol_rx.iter().chain([&report.nic_tx]) {
        assert_eq!(c.reorder_refused, 0);
    }
    if groups > 1 {
        // Connections of both directions landed in more than one group's core.
        let busy = report.stacks.iter().filter(|c| c.frames_rx > 0).count();
        assert!(busy >= 1);
    }
    report
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, failure_persistence: None, ..ProptestConfig::default() })]
    /// Random layouts, groups, stepping orders and budgets, several connections each way:
    /// data arrives in order and exact.
    #[test]
    fn every_layout_delivers_every_connection_exact(
        seed in 1u64..1_000_000,
        kind in 0u8..4,
        groups in 1u16..=4,
        replicas in 1u16..=3,
        ins in 1u8..=3,
        outs in 1u8..=3,
        lossy in any::<bool>(),
    ) {
        model_run(seed, kind, groups, replicas, ins, outs, lossy);
    }
}

#[test]
fn four_flow_groups_over_a_lossy_link() {
    model_run(7, 3, 4, 4, 3, 3, true);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]
    /// Over a device that segments and completes checksums, large segments in the batches
    /// (and checksums left partial by the post roles): every layout still delivers every
    /// connection in order and exact, with and without loss.
    #[test]
    fn every_layout_delivers_exact_with_segmentation_offload(
        seed in 1u64..1_000_000,
        kind in 0u8..4,
        groups in 1u16..=3,
        replicas in 1u16..=2,
        lossy in any::<bool>(),
    ) {
        model_run_on(seed, kind, groups, replicas, 2, 2, lossy, true);
    }
}

#[test]
fn replicas_finish_out_of_order_and_the_reorder_buffers_restore_it() {
    // Three pre and post replicas stepped in random orders: batches of a group overtake
    // each other on both paths, and the data still arrives exact (model_run's checks).
    let mut rx_holds = 0;
    let mut tx_holds = 0;
    for seed in 1..=3 {
        let report = model_run(seed, 2, 2, 3, 2, 2, false);
        rx_holds += report
            .protocol_rx
            .iter()
            .map(|c| c.reorder_holds)
            .sum::<u64>();
        tx_holds += report.nic_tx.reorder_holds;
    }
    assert!(rx_holds > 0, "receive batches were reordered");
    assert!(tx_holds > 0, "transmit batches were reordered");
}

/// A sink that finishes, in every group at once, when the groups together have received
/// `want` connections.
struct SharedSink {
    sink: SinkApp,
    seen: usize,
    total: Arc<AtomicUsize>,
    want: usize,
}

impl App for SharedSink {
    fn poll(&mut self, stack: &mut Stack, now: Instant) -> Result<AppStatus, EngineError> {
        self.sink.poll(stack, now)?;
        let new = self.sink.reports.len() - self.seen;
        self.seen = self.sink.reports.len();
        let total = self.total.fetch_add(new, Ordering::AcqRel) + new;
        Ok(if total >= self.want {
            AppStatus::Done
        } else {
            AppStatus::Running
        })
    }
}

/// Several sources that finish together.
struct Sources(Vec<(SourceApp, bool)>);

impl App for Sources {
    fn poll(&mut self, stack: &mut Stack, now: Instant) -> Result<AppStatus, EngineError> {
        for (s, done) in self.0.iter_mut() {
            if !*done {
                *done = s.poll(stack, now)? == AppStatus::Done;
            }
        }
        Ok(if self.0.iter().all(|(_, d)| *d) {
            AppStatus::Done
        } else {
            AppStatus::Running
        })
    }
}

#[test]
fn two_flow_groups_on_threads_against_a_single_core_engine() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 {
        eprintln!("skipped: two data-path threads need two cores, this machine has {cores}");
        return;
    }
    for layout in [
        Layout::FlowGroups { groups: 2 },
        Layout::Pipelined { groups: 2 },
        Layout::Replicated {
            groups: 2,
            replicas: 1,
        },
    ] {
        threaded_run(layout);
    }
}

/// The layout's two threads against a single-core engine over a device pair: six
/// connections' bytes exact.
fn threaded_run(layout: Layout) {
    let (a, b) = pair(PairConfig::default()).unwrap();
    let peer_ip = Ipv4Addr::new(10, 77, 0, 2);
    let macs = PairConfig::default().macs;
    let connections = 6;
    let bytes = 256 * 1024;
    let total = Arc::new(AtomicUsize::new(0));
    // Fixed seeds: the peer's ports and the groups' key, so which group each connection
    // lands in is the same every run (both get some: asserted below).
    let mut config = core_config(macs[0], ENGINE, 1500);
    config.seed = 2;
    let mut multi = MultiEngine::new(a, config, layout, |_| {
        let mut sink = SinkApp::new(SINK_PORT);
        sink.print = false;
        SharedSink {
            sink,
            seen: 0,
            total: total.clone(),
            want: connections,
        }
    })
    .unwrap();
    multi.linger = Duration::from_secs(2);
    let peer = std::thread::spawn(move || {
        let mut config = core_config(macs[1], peer_ip, 1500);
        config.seed = 1;
        let mut engine = Engine::new(Stack::new(config).unwrap(), b);
        engine.linger = Duration::from_secs(2);
        let mut app = Sources(
            (0..connections)
                .map(|i| {
                    let mut s = SourceApp::new(ENGINE, SINK_PORT, bytes, 300 + i as u64);
                    s.print = false;
                    (s, false)
                })
                .collect(),
        );
        let status = engine.run(&mut app, Some(Duration::from_secs(60))).unwrap();
        assert_eq!(status, AppStatus::Done, "the peer's sources finished");
        // Its end of the pair lives until joined: the multi-core engine's last ACKs and
        // its linger must not meet a closed device.
        engine.device
    });
    let report = multi.run(Some(Duration::from_secs(60))).unwrap();
    peer.join().unwrap();
    assert!(report.apps_done, "{layout:?}: {report:?}");
    let apps = multi.into_apps();
    let per_group: Vec<usize> = apps.iter().map(|a| a.sink.reports.len()).collect();
    assert!(
        per_group.iter().all(|&n| n > 0),
        "{layout:?}: {per_group:?}"
    );
    let mut got: Vec<[u8; 32]> = apps
        .iter()
        .flat_map(|a| a.sink.reports.iter())
        .map(|r| {
            assert_eq!((r.error, r.bytes), (None, bytes));
            r.sha256.expect("complete")
        })
        .collect();
    let mut want: Vec<[u8; 32]> = (0..connections)
        .map(|i| digest(bytes, 300 + i as u64))
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

/// An application that does nothing: the control plane's messages do all there is.
struct Idle;

impl App for Idle {
    fn poll(&mut self, _: &mut Stack, _: Instant) -> Result<AppStatus, EngineError> {
        Ok(AppStatus::Running)
    }
}

/// Reads every answer waiting on every group's control link into `got`.
fn drain_replies(control: &mut Control, got: &mut Vec<ControlReply>) {
    for g in 0..control.groups() {
        while let Some(r) = control.recv(g) {
            got.push(r);
        }
    }
}

#[test]
fn control_messages_reach_only_their_group_in_order_under_every_layout() {
    let sink_ip = Ipv4Addr::new(10, 77, 0, 50);
    for kind in 0..4 {
        let mut wire = SimWire::new(SimWireConfig {
            seed: 3,
            link: LinkConfig::new(1_000_000_000, Duration::from_micros(20)),
            tso: false,
            ..SimWireConfig::default()
        })
        .unwrap();
        wire.add_peer(
            sink_ip,
            PeerRole::Sink {
                port: PEER_SINK_PORT,
                connections: 1,
            },
        )
        .unwrap();
        let clock = wire.clock();
        let mut config = core_config(ENGINE_MAC, ENGINE, 1500);
        config.seed = 11;
        config.clock_epoch = Duration::ZERO;
        let layout = layout(kind, 2, 2);
        let mut engine = MultiEngine::with_clock(wire, config, layout, clock, |_| Idle).unwrap();
        let mut control = engine.take_control().expect("the control plane's ends");
        assert!(engine.take_control().is_none(), "one control plane");
        // Group 1 opens a connection and reports its counters; group 0 fills its link
        // until it is full (the sender is told, nothing blocks).
        control
            .send(
                1,
                ControlMsg::Connect {
                    tag: 1,
                    ip: sink_ip,
                    port: PEER_SINK_PORT,
                },
            )
            .unwrap();
        control.send(1, ControlMsg::Counters { tag: 2 }).unwrap();
        for tag in 100..100 + CONTROL_SLOTS as u64 {
            control.send(0, ControlMsg::Counters { tag }).unwrap();
        }
        let refused = control.send(0, ControlMsg::Counters { tag: 999 });
        assert_eq!(
            refused,
            Err(ControlError::Full(ControlMsg::Counters { tag: 999 })),
            "{layout:?}"
        );
        let mut got = Vec::new();
        // Past the handshake (a 40 us round trip), so the close is a FIN, not a SYN-SENT
        // connection dropped.
        let handshaken = Instant::ZERO + Duration::from_millis(50);
        let model_clock = engine.clock();
        engine
            .step_model(3, Duration::from_secs(5), |_, _| {
                drain_replies(&mut control, &mut got);
                got.len() == 2 + CONTROL_SLOTS && model_clock.now() >= handshaken
            })
            .unwrap_or_else(|e| panic!("{layout:?}: {e}"));
        let conn = match &got.iter().find(|r| r.tag() == 1) {
            Some(ControlReply::Connected {
                group: 1,
                result: Ok(conn),
                ..
            }) => *conn,
            other => panic!("{layout:?}: {other:?}"),
        };
        // The connection is group 1's: a rate, then a close, travel the same link.
        control
            .send(
                1,
                ControlMsg::Rate {
                    tag: 3,
                    conn,
                    bits_per_sec: 100_000_000,
                },
            )
            .unwrap();
        control.send(1, ControlMsg::Close { tag: 4, conn }).unwrap();
        // A stale handle is the core's to refuse, after the close: said so, not panicked.
        control.send(1, ControlMsg::Abort { tag: 5, conn }).unwrap();
        engine
            .step_model(4, Duration::from_secs(5), |wire, _| {
                drain_replies(&mut control, &mut got);
                wire.peers_done() && got.len() == 5 + CONTROL_SLOTS
            })
            .unwrap_or_else(|e| {
                let peer = &engine.device().peers()[0];
                panic!(
                    "{layout:?}: {e}; answers {got:?}; peer done {} error {:?} reports {:?}",
                    peer.done(),
                    peer.error(),
                    peer.sink_reports()
                )
            });
        // Each group answered only its own messages, in the order they were sent.
        let tags = |g: u16| -> Vec<u64> {
            got.iter()
                .filter(|r| r.group() == g)
                .map(|r| r.tag())
                .collect()
        };
        assert_eq!(tags(1), vec![1, 2, 3, 4, 5], "{layout:?}");
        assert_eq!(
            tags(0),
            (100..100 + CONTROL_SLOTS as u64).collect::<Vec<_>>(),
            "{layout:?}"
        );
        let done: Vec<_> = got
            .iter()
            .filter_map(|r| match r {
                ControlReply::Done { tag, result, .. } => Some((*tag, result.is_ok())),
                _ => None,
            })
            .collect();
        assert_eq!(done, vec![(3, true), (4, true), (5, false)], "{layout:?}");
        // The connection opened by the message reached the peer, and the close ended it.
        let peer = &engine.device().peers()[0];
        assert_eq!(peer.error(), None);
        assert_eq!(peer.sink_reports()[0].bytes, 0, "{layout:?}");
        let report = engine.report();
        assert!(report.stacks[1].frames_tx > 0, "group 1 sent the SYN");
        assert_eq!(
            engine.protocols()[0].control.as_ref().unwrap().handled,
            CONTROL_SLOTS as u64
        );
        assert_eq!(control.full, 1);
    }
}

/// The port whose frames the test's module drops.
const DROPPED_PORT: u16 = 5002;

/// A module with no maps, hand-assembled: drops IPv4 TCP frames to [`DROPPED_PORT`]
/// (a 20-byte IPv4 header assumed, as the simulator's peers send), passes the rest.
fn drop_port_program() -> Program {
    use sluice_ebpf::insn::{class, jmp, Insn, SRC_X};
    const LDX_W: u8 = class::LDX | 0x60;
    const LDX_H: u8 = class::LDX | 0x60 | 0x08;
    const LDX_B: u8 = class::LDX | 0x60 | 0x10;
    const MOV_K: u8 = class::ALU64 | 0xb0;
    const MOV_X: u8 = class::ALU64 | 0xb0 | SRC_X;
    const ADD_K: u8 = class::ALU64;
    const JGT_X: u8 = class::JMP | jmp::JGT | SRC_X;
    const JNE_K: u8 = class::JMP | jmp::JNE;
    const EXIT: u8 = class::JMP | jmp::EXIT;
    // Loaded little-endian: the wire's big-endian 16-bit fields byte-swapped.
    let be = |v: u16| i32::from(v.swap_bytes());
    let insns = vec![
        Insn::new(LDX_W, 2, 1, 0, 0),  // r2 = data
        Insn::new(LDX_W, 3, 1, 4, 0),  // r3 = data_end
        Insn::new(MOV_X, 4, 2, 0, 0),  // r4 = data
        Insn::new(ADD_K, 4, 0, 0, 38), // r4 += 38 (through the TCP ports)
        Insn::new(JGT_X, 4, 3, 8, 0),  // short: pass
        Insn::new(LDX_H, 5, 2, 12, 0), // ethertype
        Insn::new(JNE_K, 5, 0, 6, be(0x0800)),
        Insn::new(LDX_B, 5, 2, 23, 0), // IPv4 protocol
        Insn::new(JNE_K, 5, 0, 4, 6),
        Insn::new(LDX_H, 5, 2, 36, 0), // TCP destination port
        Insn::new(JNE_K, 5, 0, 2, be(DROPPED_PORT)),
        Insn::new(MOV_K, 0, 0, 0, 1), // XDP_DROP
        Insn::new(EXIT, 0, 0, 0, 0),
        Insn::new(MOV_K, 0, 0, 0, 2), // XDP_PASS
        Insn::new(EXIT, 0, 0, 0, 0),
    ];
    Program::verify(insns, &[]).expect("the verifier accepts it")
}

/// Two sources to the engine's sink and one to [`DROPPED_PORT`], whose SYNs the module
/// drops (until `until`, when they have been retried twice).
fn drop_port_wire(seed: u64) -> SimWire {
    let mut wire = SimWire::new(SimWireConfig {
        seed,
        link: LinkConfig::new(1_000_000_000, Duration::from_micros(20)),
        tso: false,
        ..SimWireConfig::default()
    })
    .unwrap();
    for (i, port) in [SINK_PORT, DROPPED_PORT, SINK_PORT].into_iter().enumerate() {
        wire.add_peer(
            Ipv4Addr::new(10, 77, 0, 10 + i as u8),
            PeerRole::Source {
                server: SocketAddrV4::new(ENGINE, port),
                bytes: 32 * 1024,
                seed: 400 + i as u64,
            },
        )
        .unwrap();
    }
    wire
}

/// Virtual time both engines run to: past the dropped peer's second SYN retry.
const DROP_RUN: Duration = Duration::from_millis(3500);

/// The single engine with the module at ingress: the sink's digests and the module's drops.
fn drop_port_single() -> (Vec<[u8; 32]>, u64) {
    let wire = drop_port_wire(21);
    let clock = wire.clock();
    let mut engine = wire.into_engine(ENGINE).unwrap();
    engine
        .hooks
        .modules_mut()
        .attach(
            HookPoint::Ingress,
            "drop_port",
            "xdp",
            drop_port_program(),
            Maps::new(&[]).unwrap(),
        )
        .unwrap();
    let mut sink = SinkApp::new(SINK_PORT);
    sink.print = false;
    while clock.now() < Instant::ZERO + DROP_RUN {
        engine
            .run(&mut sink, Some(Duration::from_millis(10)))
            .unwrap();
    }
    let mut got: Vec<[u8; 32]> = sink.reports.iter().filter_map(|r| r.sha256).collect();
    got.sort();
    let dropped = engine.hooks.modules().modules()[0].counters.dropped;
    (got, dropped)
}

#[test]
fn a_module_dropping_a_port_gives_the_single_engines_bytes_and_counters_under_every_layout() {
    let (want, want_dropped) = drop_port_single();
    assert_eq!(want.len(), 2, "both sinks' streams");
    assert!(want_dropped >= 3, "the SYN and two retries: {want_dropped}");
    for placement in [Placement::Stateless, Placement::PerGroup] {
        for kind in 0..4 {
            let wire = drop_port_wire(21);
            let clock = wire.clock();
            let mut config = core_config(ENGINE_MAC, ENGINE, 1500);
            config.seed = 9;
            config.clock_epoch = Duration::ZERO;
            let layout = layout(kind, 2, 2);
            let mut engine = MultiEngine::with_clock(wire, config, layout, clock.clone(), |_| {
                let mut sink = SinkApp::new(SINK_PORT);
                sink.print = false;
                sink
            })
            .unwrap();
            let copies = engine
                .attach_module(
                    HookPoint::Ingress,
                    "drop_port",
                    "xdp",
                    &drop_port_program(),
                    placement,
                    || Maps::new(&[]).unwrap(),
                )
                .unwrap();
            assert!(copies >= 1);
            engine
                .step_model(kind.into(), DROP_RUN + Duration::from_secs(1), |_, _| {
                    clock.now() >= Instant::ZERO + DROP_RUN
                })
                .unwrap_or_else(|e| panic!("{placement:?} {layout:?}: {e}"));
            let mut got: Vec<[u8; 32]> = engine
                .protocols()
                .iter()
                .flat_map(|p| p.app.reports.iter())
                .filter_map(|r| r.sha256)
                .collect();
            got.sort();
            assert_eq!(got, want, "{placement:?} {layout:?}: delivered bytes");
            let dropped: u64 = engine.modules().iter().map(|m| m.counters.dropped).sum();
            assert_eq!(dropped, want_dropped, "{placement:?} {layout:?}: drops");
            let report = engine.report();
            // No frame of the dropped port reached a core: its peer got no RST either.
            assert!(engine.device().peers()[1].sink_reports().is_empty());
            let marked: u64 = report.pre.iter().map(|c| c.drops).sum::<u64>()
                + report.protocol_rx.iter().map(|c| c.drops).sum::<u64>();
            assert_eq!(marked, want_dropped, "{placement:?} {layout:?}: counted");
            for c in &report.protocol_rx {
                assert_eq!(c.reorder_refused, 0);
            }
        }
    }
}

#[test]
fn a_module_is_refused_where_its_placement_cannot_run() {
    let wire = drop_port_wire(1);
    let clock = wire.clock();
    let config = core_config(ENGINE_MAC, ENGINE, 1500);
    let mut engine = MultiEngine::with_clock(
        wire,
        config,
        Layout::FlowGroups { groups: 2 },
        clock,
        |_| Idle,
    )
    .unwrap();
    let p = drop_port_program();
    let none = || Maps::new(&[]).unwrap();
    assert_eq!(
        engine.attach_module(
            HookPoint::Established,
            "x",
            "xdp",
            &p,
            Placement::Stateless,
            none
        ),
        Err(PlacementError::StatelessAtEstablished)
    );
    assert_eq!(
        engine.attach_module(HookPoint::Egress, "x", "xdp", &p, Placement::PerGroup, none),
        Err(PlacementError::PerGroupAtEgress)
    );
    // Per group at established: one copy in each group's protocol role.
    assert_eq!(
        engine.attach_module(
            HookPoint::Established,
            "x",
            "xdp",
            &p,
            Placement::PerGroup,
            none
        ),
        Ok(2)
    );
}

/// A transport beside TCP that records each frame and answers it with one of its own.
#[derive(Default)]
struct Answering {
    got: Vec<Vec<u8>>,
    out: std::collections::VecDeque<Vec<u8>>,
}

impl Transport for Answering {
    fn handle_frame(&mut self, _: Instant, frame: &[u8]) {
        self.got.push(frame.to_vec());
        let mut answer = frame.to_vec();
        answer.extend_from_slice(b"-answer");
        self.out.push_back(answer);
    }
    fn poll_transmit(&mut self, _: Instant, buf: &mut [u8]) -> Option<usize> {
        let f = self.out.pop_front()?;
        buf.get_mut(..f.len())?.copy_from_slice(&f);
        Some(f.len())
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn handle_timeout(&mut self, _: Instant) {}
}

/// An application that owns an RDMA transport (group 0's) or none.
struct WithRdma(Option<Answering>);

impl App for WithRdma {
    fn poll(&mut self, _: &mut Stack, _: Instant) -> Result<AppStatus, EngineError> {
        Ok(AppStatus::Running)
    }
    fn transports(&mut self) -> Transports<'_> {
        Transports {
            rdma: self.0.as_mut().map(|t| t as &mut dyn Transport),
            mtp: None,
        }
    }
}

/// A RoCEv2-shaped frame (UDP to 4791) from 10.77.0.2:`sport` with a valid IPv4 header.
fn rocev2(sport: u16, mac: sluice_wire::EthernetAddress) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + 8 + 16];
    f[..6].copy_from_slice(&mac.0);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(20u16 + 8 + 16).to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 77, 0, 2]);
    ip[16..20].copy_from_slice(&ENGINE.octets());
    let c = sluice_wire::checksum::checksum(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&4791u16.to_be_bytes());
    f[38..40].copy_from_slice(&24u16.to_be_bytes());
    f
}

#[test]
fn rdma_frames_are_served_by_group_0_whatever_their_tuple_hashes_to() {
    for kind in 0..4 {
        let config_pair = PairConfig::default();
        let macs = config_pair.macs;
        let (a, mut b) = pair(config_pair).unwrap();
        let mut config = core_config(macs[0], ENGINE, 1500);
        config.seed = 4;
        let groups = FlowGroups {
            count: 2,
            key: config.seed,
        };
        let layout = layout(kind, 2, 2);
        let mut multi = MultiEngine::new(a, config, layout, |g| {
            WithRdma((g == 0).then(Answering::default))
        })
        .unwrap();
        let frames: Vec<Vec<u8>> = (1000..1008).map(|p| rocev2(p, macs[0])).collect();
        assert!(
            frames.iter().any(|f| groups.group_of_frame(f) == Some(1)),
            "some frames' tuples hash to group 1"
        );
        for f in &frames {
            assert!(b
                .transmit_with(&mut |buf| {
                    buf.get_mut(..f.len())?.copy_from_slice(f);
                    Some(TxFrame::plain(f.len()))
                })
                .unwrap());
        }
        b.flush().unwrap();
        let mut answers = Vec::new();
        for _ in 0..2000 {
            // Short slices of the stepped model (its budget error just ends a slice).
            let _ = multi.step_model(kind.into(), Duration::from_millis(1), |_, _| false);
            b.receive(&mut |f, _| answers.push(f.to_vec())).unwrap();
            if answers.len() >= frames.len() {
                break;
            }
        }
        let t = multi.protocols()[0].app.0.as_ref().unwrap();
        assert_eq!(
            t.got, frames,
            "{layout:?}: group 0's transport got every frame in order"
        );
        let want: Vec<Vec<u8>> = frames
            .iter()
            .map(|f| [f.as_slice(), b"-answer"].concat())
            .collect();
        assert_eq!(answers, want, "{layout:?}: its answers went out in order");
        // Group 1's core never saw them.
        assert_eq!(multi.report().stacks[1].frames_rx, 0, "{layout:?}");
    }
}

#[test]
fn transports_outside_group_0_are_refused_at_build_time() {
    let (a, _b) = pair(PairConfig::default()).unwrap();
    let config = core_config(PairConfig::default().macs[0], ENGINE, 1500);
    let built = MultiEngine::new(a, config, Layout::FlowGroups { groups: 2 }, |_| {
        WithRdma(Some(Answering::default()))
    });
    match built {
        Err(e @ MultiError::Transports { group: 1 }) => {
            assert!(e.to_string().contains("group 0 only"), "{e}")
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("built"),
    }
}

/// Peer sinks at .50 (kept) and .51 (on [`DROPPED_PORT`], whose frames the egress module
/// drops); the engine opens one connection to each.
fn egress_wire() -> SimWire {
    let mut wire = SimWire::new(SimWireConfig {
        seed: 31,
        link: LinkConfig::new(1_000_000_000, Duration::from_micros(20)),
        tso: false,
        ..SimWireConfig::default()
    })
    .unwrap();
    for (i, port) in [PEER_SINK_PORT, DROPPED_PORT].into_iter().enumerate() {
        let role = PeerRole::Sink {
            port,
            connections: 1,
        };
        wire.add_peer(Ipv4Addr::new(10, 77, 0, 50 + i as u8), role)
            .unwrap();
    }
    wire
}

/// The engine's source to peer `i`.
fn egress_source(i: u8) -> SourceApp {
    let port = [PEER_SINK_PORT, DROPPED_PORT][usize::from(i)];
    let mut s = SourceApp::new(
        Ipv4Addr::new(10, 77, 0, 50 + i),
        port,
        32 * 1024,
        500 + u64::from(i),
    );
    s.print = false;
    s
}

#[test]
fn a_stateless_egress_module_gives_the_single_engines_bytes_and_counters_under_every_layout() {
    // The single engine: both sources in one application, the module at egress.
    let wire = egress_wire();
    let clock = wire.clock();
    let mut engine = wire.into_engine(ENGINE).unwrap();
    engine
        .hooks
        .modules_mut()
        .attach(
            HookPoint::Egress,
            "drop_port",
            "xdp",
            drop_port_program(),
            Maps::new(&[]).unwrap(),
        )
        .unwrap();
    let mut app = Sources(vec![(egress_source(0), false), (egress_source(1), false)]);
    while clock.now() < Instant::ZERO + DROP_RUN {
        engine
            .run(&mut app, Some(Duration::from_millis(10)))
            .unwrap();
    }
    let want = engine.device.peers()[0].sink_reports().to_vec();
    let want_dropped = engine.hooks.modules().modules()[0].counters.dropped;
    assert_eq!(want.len(), 1, "the kept peer got its stream");
    assert!(want_dropped >= 3, "the SYN and two retries: {want_dropped}");
    for kind in 0..4 {
        let wire = egress_wire();
        let clock = wire.clock();
        let mut config = core_config(ENGINE_MAC, ENGINE, 1500);
        config.seed = 5;
        config.clock_epoch = Duration::ZERO;
        let layout = layout(kind, 2, 2);
        let mut engine = MultiEngine::with_clock(wire, config, layout, clock.clone(), |g| {
            Sources(vec![(egress_source(g as u8), false)])
        })
        .unwrap();
        engine
            .attach_module(
                HookPoint::Egress,
                "drop_port",
                "xdp",
                &drop_port_program(),
                Placement::Stateless,
                || Maps::new(&[]).unwrap(),
            )
            .unwrap();
        engine
            .step_model(kind.into(), DROP_RUN + Duration::from_secs(1), |_, _| {
                clock.now() >= Instant::ZERO + DROP_RUN
            })
            .unwrap_or_else(|e| panic!("{layout:?}: {e}"));
        let peers = engine.device().peers();
        assert_eq!(peers[0].sink_reports(), want.as_slice(), "{layout:?}");
        assert!(peers[1].sink_reports().is_empty(), "{layout:?}");
        let dropped: u64 = engine.modules().iter().map(|m| m.counters.dropped).sum();
        assert_eq!(dropped, want_dropped, "{layout:?}: drops");
        let marked: u64 = engine.report().post.iter().map(|c| c.drops).sum();
        assert_eq!(
            marked, want_dropped,
            "{layout:?}: counted by the post replicas"
        );
    }
}
