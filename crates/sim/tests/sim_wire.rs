//! The engine runtime over the simulator's wire (no root): data both ways verified by SHA-256
//! under loss, reordering, duplication and corruption, an RPC echo run, exact repeatability,
//! and the errors a bad setup gets.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use sha2::{Digest, Sha256};
use sluice_apps::pattern_fill;
use sluice_device::Device;
use sluice_engine::apps::{EchoApp, SinkApp, SourceApp};
use sluice_engine::Engine;
use sluice_sim::sim_wire::{
    run_with_peers, Impairment, LinkConfig, PeerError, PeerRole, SimRunError, SimWire,
    SimWireConfig, SimWireError,
};

const ENGINE: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const PEER: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const MIB: u64 = 1 << 20;
const BUDGET: Duration = Duration::from_secs(120);

/// SHA-256 of the first `bytes` of the deterministic stream `seed`.
fn expected_digest(bytes: u64, seed: u64) -> [u8; 32] {
    let mut data = vec![0u8; bytes as usize];
    pattern_fill(seed, 0, &mut data);
    Sha256::digest(&data).into()
}

/// A 10 Gbit/s, 10 us link with the given impairment.
fn wire(seed: u64, impairment: Impairment) -> SimWire {
    SimWire::new(SimWireConfig {
        seed,
        link: LinkConfig::new(10_000_000_000, Duration::from_micros(10))
            .with_impairment(impairment),
        ..SimWireConfig::default()
    })
    .expect("valid wire")
}

fn lossy() -> Impairment {
    Impairment::default()
        .with_loss(0.01)
        .with_reorder(0.01, Duration::from_micros(30))
}

fn engine(wire: SimWire) -> Engine<SimWire> {
    wire.into_engine(ENGINE).expect("engine on the wire")
}

/// The engine's sink receives from a simulated source; returns (engine digest, finish time).
fn engine_sink_run(seed: u64, impairment: Impairment, bytes: u64) -> ([u8; 32], Duration) {
    let mut w = wire(seed, impairment);
    w.add_peer(
        PEER,
        PeerRole::Source {
            server: SocketAddrV4::new(ENGINE, 5001),
            bytes,
            seed: 7,
        },
    )
    .unwrap();
    let mut engine = engine(w);
    let mut sink = SinkApp::new(5001);
    sink.stop_after = Some(1);
    sink.print = false;
    let run = run_with_peers(&mut engine, &mut sink, BUDGET).expect("run finishes");
    assert_eq!(sink.reports.len(), 1);
    let report = &sink.reports[0];
    assert_eq!(report.error, None);
    assert_eq!(report.bytes, bytes);
    let digest = report.sha256.expect("a complete stream");
    let (sent, source_digest) = engine.device.peers()[0]
        .sent()
        .expect("the source finished");
    assert_eq!(sent, bytes);
    assert_eq!(digest, source_digest, "engine and peer saw the same bytes");
    (
        digest,
        run.finished_at.saturating_since(sluice_tcp::Instant::ZERO),
    )
}

#[test]
fn engine_server_receives_verified_stream_under_loss_and_reordering() {
    let bytes = 8 * MIB;
    let (digest, _) = engine_sink_run(1, lossy(), bytes);
    assert_eq!(digest, expected_digest(bytes, 7));
}

#[test]
fn engine_client_sends_verified_stream_under_loss_and_reordering() {
    let bytes = 8 * MIB;
    let mut w = wire(2, lossy());
    w.add_peer(
        PEER,
        PeerRole::Sink {
            port: 6001,
            connections: 1,
        },
    )
    .unwrap();
    let mut engine = engine(w);
    let mut source = SourceApp::new(PEER, 6001, bytes, 9);
    source.print = false;
    run_with_peers(&mut engine, &mut source, BUDGET).expect("run finishes");
    let expected = expected_digest(bytes, 9);
    assert_eq!(source.sha256(), Some(expected));
    let reports = engine.device.peers()[0].sink_reports();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].bytes, bytes);
    assert_eq!(reports[0].sha256, Some(expected));
    // The impairment really was there, and the engine recovered from it.
    let (out, back) = engine.device.link_stats();
    assert!(out.lost > 0 && out.reordered > 0, "{out:?}");
    assert!(back.lost > 0, "{back:?}");
    assert!(engine.stack.counters().retransmitted_bytes > 0);
    engine
        .stack
        .check_invariants()
        .expect("engine core consistent");
    let peer = engine.device.peer_stack(0).expect("the sink's core");
    peer.check_invariants().expect("peer core consistent");
    assert!(peer.counters().ooo_stored > 0 || peer.counters().duplicate_segments > 0);
}

/// The engine's source over a clean wire with and without segmentation offload: the same
/// verified bytes, large segments only with TSO, and never a frame above the MTU on the link.
#[test]
fn engine_client_uses_large_segments_when_the_wire_offers_tso() {
    let bytes = 16 * MIB;
    for tso in [true, false] {
        let mut w = SimWire::new(SimWireConfig {
            seed: 3,
            tso,
            ..SimWireConfig::default()
        })
        .unwrap();
        w.add_peer(
            PEER,
            PeerRole::Sink {
                port: 6001,
                connections: 1,
            },
        )
        .unwrap();
        let mut engine = engine(w);
        let mut source = SourceApp::new(PEER, 6001, bytes, 4);
        source.print = false;
        run_with_peers(&mut engine, &mut source, BUDGET).expect("run finishes");
        let reports = engine.device.peers()[0].sink_reports();
        assert_eq!(reports[0].bytes, bytes);
        assert_eq!(reports[0].sha256, Some(expected_digest(bytes, 4)));
        let large = engine.stack.counters().large_segments_tx;
        if tso {
            assert!(large > 100, "only {large} large segments with TSO");
            // Each large frame became several wire frames.
            assert!(engine.device.stats().tx_frames > engine.stack.counters().frames_tx);
        } else {
            assert_eq!(large, 0);
        }
        let peer = engine.device.peer_stack(0).expect("the sink's core");
        assert_eq!(peer.counters().bad_checksum, 0);
        assert_eq!(peer.counters().malformed, 0);
    }
}

#[test]
fn duplication_and_corruption_are_survived() {
    let imp = Impairment::default()
        .with_duplicate(0.01)
        .with_corrupt(0.01)
        .with_loss(0.005);
    let bytes = 2 * MIB;
    let (digest, _) = engine_sink_run(3, imp, bytes);
    assert_eq!(digest, expected_digest(bytes, 7));
}

#[test]
fn runs_are_exact() {
    let a = engine_sink_run(4, lossy(), MIB);
    let b = engine_sink_run(4, lossy(), MIB);
    assert_eq!(a, b, "same seed, same digest and same virtual finish time");
    let c = engine_sink_run(5, lossy(), MIB);
    assert_eq!(a.0, c.0);
    assert_ne!(a.1, c.1, "another seed loses other frames");
}

#[test]
fn rpc_echo_clients_all_complete_with_sane_latency() {
    let mut w = wire(6, Impairment::default());
    let clients = 4;
    for i in 0..clients {
        w.add_peer(
            Ipv4Addr::new(10, 77, 0, 2 + i),
            PeerRole::Rpc {
                server: SocketAddrV4::new(ENGINE, 7),
                count: 300,
                size: 64,
            },
        )
        .unwrap();
    }
    let mut engine = engine(w);
    let mut echo = EchoApp::new(7);
    echo.stop_after = Some(u64::from(clients));
    let run = run_with_peers(&mut engine, &mut echo, BUDGET).expect("run finishes");
    for peer in engine.device.peers() {
        let rpc = peer.rpc().expect("an RPC client");
        assert_eq!(rpc.completed, 300, "{peer:?}");
        assert_eq!(rpc.latencies.len(), 300);
        // A round trip crosses the 10 us link twice: never faster than that.
        let min = rpc.latencies.iter().min().copied().unwrap_or_default();
        assert!(min >= Duration::from_micros(20), "min latency {min:?}");
        let max = rpc.latencies.iter().max().copied().unwrap_or_default();
        assert!(
            max < Duration::from_millis(5),
            "no retransmission on a clean link: {max:?}"
        );
    }
    assert!(run.finished_at > sluice_tcp::Instant::from_micros(300 * 20));
    // Virtual time: the engine slept on the device instead of spinning.
    assert!(engine.stats().sleeps > 0);
}

#[test]
fn a_refused_connection_is_a_peer_error() {
    let mut w = wire(7, Impairment::default());
    w.add_peer(
        PEER,
        PeerRole::Source {
            server: SocketAddrV4::new(ENGINE, 5999),
            bytes: 1000,
            seed: 1,
        },
    )
    .unwrap();
    let mut engine = engine(w);
    // The engine listens on another port: the SYN gets a RST.
    let mut sink = SinkApp::new(5001);
    sink.print = false;
    match run_with_peers(&mut engine, &mut sink, BUDGET) {
        Err(SimRunError::Peer {
            ip,
            error: PeerError::Core(_),
        }) => assert_eq!(ip, PEER),
        other => panic!("expected a refused peer, got {other:?}"),
    }
}

#[test]
fn an_unfinished_run_ends_at_its_budget() {
    let mut w = wire(8, Impairment::default());
    w.add_peer(
        PEER,
        PeerRole::Sink {
            port: 6001,
            connections: 1,
        },
    )
    .unwrap();
    let mut engine = engine(w);
    // Nothing ever connects to the peer's sink.
    let mut idle = EchoApp::new(7);
    let budget = Duration::from_millis(300);
    match run_with_peers(&mut engine, &mut idle, budget) {
        Err(SimRunError::Budget {
            app_done: false,
            peers_left: 1,
            ..
        }) => {}
        other => panic!("expected the budget to run out, got {other:?}"),
    }
    // Virtual time moved to the budget, not beyond by more than one slice.
    let now = engine.clock().now();
    assert!(now >= sluice_tcp::Instant::from_millis(300), "{now}");
    assert!(now < sluice_tcp::Instant::from_millis(301), "{now}");
}

#[test]
fn bad_setups_are_refused_with_clear_errors() {
    let bad_loss = SimWire::new(SimWireConfig {
        link: LinkConfig::new(1_000_000_000, Duration::ZERO)
            .with_impairment(Impairment::default().with_loss(1.5)),
        ..SimWireConfig::default()
    });
    match bad_loss {
        Err(e @ SimWireError::InvalidConfig(_)) => assert!(e.to_string().contains("loss")),
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    let nan = SimWire::new(SimWireConfig {
        link: LinkConfig::new(1_000_000_000, Duration::ZERO)
            .with_impairment(Impairment::default().with_reorder(f64::NAN, Duration::ZERO)),
        ..SimWireConfig::default()
    });
    assert!(matches!(nan, Err(SimWireError::InvalidConfig(_))));
    assert!(matches!(
        SimWire::new(SimWireConfig {
            batch: 0,
            ..SimWireConfig::default()
        }),
        Err(SimWireError::InvalidConfig(_))
    ));
    let sink = PeerRole::Sink {
        port: 1,
        connections: 1,
    };
    let mut w = wire(1, Impairment::default());
    w.add_peer(PEER, sink.clone()).unwrap();
    assert!(matches!(
        w.add_peer(PEER, sink.clone()),
        Err(SimWireError::InvalidConfig(_))
    ));
    assert!(matches!(
        w.add_peer(Ipv4Addr::BROADCAST, sink.clone()),
        Err(SimWireError::InvalidConfig(_))
    ));
    assert!(matches!(
        w.add_peer(
            Ipv4Addr::new(10, 77, 0, 3),
            PeerRole::Rpc {
                server: SocketAddrV4::new(ENGINE, 7),
                count: 1,
                size: 0
            }
        ),
        Err(SimWireError::InvalidConfig(_))
    ));
    // The engine cannot take a peer's address.
    match w.into_engine(PEER) {
        Err(e) => assert!(e.to_string().contains("10.77.0.2"), "{e}"),
        Ok(_) => panic!("engine and peer at one address"),
    }
}
