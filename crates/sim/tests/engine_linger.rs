//! An engine application that closes finishes the close before the engine returns (issue 14,
//! "Also fix"): `Engine::run` lingers after the application is done until every connection
//! it closed has its FIN acknowledged, retransmitting a lost FIN on the RTO, within a bounded
//! linger. Over the simulator's wire with a device wrapper (`TxFilter`) that loses the engine's FINs, in
//! virtual time, so every run is exact.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use sluice_device::{is_tcp_fin, Device, TxFilter};
use sluice_engine::apps::{SinkApp, SourceApp};
use sluice_engine::{AppStatus, Engine, DEFAULT_LINGER};
use sluice_sim::sim_wire::{PeerRole, SimWire, SimWireConfig};
use sluice_tcp::{Closing, Instant};

const ENGINE: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const PEER: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);

/// The simulated wire, losing what the engine sends that a predicate picks.
type Lossy = TxFilter<SimWire, Box<dyn FnMut(&[u8]) -> bool>>;

/// The engine over a wire with one simulated peer playing `role`, losing its first `drop`
/// FINs (no TSO, so a FIN is always a frame of its own to look at).
fn engine_with_peer(role: PeerRole, drop: usize) -> Engine<Lossy> {
    let mut wire = SimWire::new(SimWireConfig {
        seed: 3,
        tso: false,
        ..SimWireConfig::default()
    })
    .expect("valid wire");
    wire.add_peer(PEER, role).expect("peer");
    let engine = wire.into_engine(ENGINE).expect("engine on the wire");
    let clock = engine.clock();
    let Engine { stack, device, .. } = engine;
    let mut left = drop;
    let first_fins = move |frame: &[u8]| {
        let lose = left > 0 && is_tcp_fin(frame);
        left -= usize::from(lose);
        lose
    };
    Engine::with_clock(stack, TxFilter::new(device, Box::new(first_fins)), clock)
}

/// What the peer's core still has closing (FIN-WAIT-2 there is what a lost FIN leaves).
fn peer_closing(engine: &Engine<Lossy>) -> Closing {
    engine.device.inner().peer_stack(0).expect("peer").closing()
}

/// `sluice sink --count 1`: a simulated source sends and closes, the sink closes in turn.
fn sink_engine(drop: usize) -> (Engine<Lossy>, SinkApp) {
    let engine = engine_with_peer(
        PeerRole::Source {
            server: SocketAddrV4::new(ENGINE, 5001),
            bytes: 100_000,
            seed: 7,
        },
        drop,
    );
    let mut sink = SinkApp::new(5001);
    sink.stop_after = Some(1);
    sink.print = false;
    (engine, sink)
}

#[test]
fn sink_with_count_does_not_return_before_its_lost_fin_is_acknowledged() {
    let (mut engine, mut sink) = sink_engine(1);
    assert_eq!(engine.linger, DEFAULT_LINGER);
    let status = engine.run(&mut sink, None).expect("engine runs");
    assert_eq!(status, AppStatus::Done);
    assert_eq!(sink.reports.len(), 1);
    assert_eq!(sink.reports[0].bytes, 100_000);
    assert_eq!(engine.device.dropped(), 1, "the sink's first FIN was lost");
    // Without the linger, run returned right after the first FIN: LAST-ACK here, FIN-WAIT-2
    // at the peer. With it, the FIN was retransmitted (probe or RTO) and acknowledged.
    assert_eq!(engine.stack.closing(), Closing::default());
    assert_eq!(
        peer_closing(&engine),
        Closing::default(),
        "the peer is not left in FIN-WAIT-2"
    );
    // The FIN went again before run returned: a tail loss probe's (RFC 8985 7), or the
    // RTO's without RACK-TLP.
    let at = engine.clock().now().saturating_since(Instant::ZERO);
    let k = engine.stack.counters();
    assert!(
        k.tlp_probes + k.timeouts >= 1,
        "returned at {at:?}, before a probe or the RTO could resend the FIN: {k:?}"
    );
}

#[test]
fn sink_without_loss_returns_once_its_fin_is_acknowledged() {
    let (mut engine, mut sink) = sink_engine(0);
    engine.run(&mut sink, None).expect("engine runs");
    assert_eq!(engine.device.dropped(), 0);
    assert_eq!(engine.stack.closing(), Closing::default());
    assert_eq!(peer_closing(&engine), Closing::default());
    // One round trip on a 10 us link: nowhere near an RTO, let alone the linger.
    let at = engine.clock().now().saturating_since(Instant::ZERO);
    assert!(at < Duration::from_millis(100), "returned at {at:?}");
}

#[test]
fn the_linger_is_bounded_when_the_fin_is_never_acknowledged() {
    let (mut engine, mut sink) = sink_engine(usize::MAX);
    engine.linger = Duration::from_secs(2);
    let status = engine.run(&mut sink, None).expect("engine runs");
    assert_eq!(status, AppStatus::Done);
    assert!(engine.device.dropped() >= 2, "the FIN was retransmitted");
    assert_eq!(
        engine.stack.closing(),
        Closing {
            fin_unacked: 1,
            awaiting_peer_fin: 0
        },
        "gave up with the FIN unacknowledged"
    );
    let at = engine.clock().now().saturating_since(Instant::ZERO);
    assert!(
        at >= Duration::from_secs(2) && at < Duration::from_secs(3),
        "returned at {at:?}, not when the 2 s linger ran out"
    );
}

#[test]
fn a_zero_linger_returns_at_once() {
    let (mut engine, mut sink) = sink_engine(1);
    engine.linger = Duration::ZERO;
    engine.run(&mut sink, None).expect("engine runs");
    assert_eq!(engine.stack.closing().fin_unacked, 1);
    // An embedder may finish the closes later, on its own terms.
    let left = engine
        .finish_closing(Duration::from_secs(5))
        .expect("engine runs");
    assert_eq!(left, Closing::default());
    assert_eq!(peer_closing(&engine), Closing::default());
}

#[test]
fn source_waits_for_the_peers_fin_and_acknowledges_it() {
    let mut engine = engine_with_peer(
        PeerRole::Sink {
            port: 6001,
            connections: 1,
        },
        0,
    );
    let mut source = SourceApp::new(PEER, 6001, 100_000, 1);
    source.print = false;
    let status = engine.run(&mut source, None).expect("engine runs");
    assert_eq!(status, AppStatus::Done);
    // The source is done once its FIN is acknowledged (FIN-WAIT-2); the engine then waits
    // for the peer's FIN and acknowledges it (TIME-WAIT), so the peer does not sit in
    // LAST-ACK once that ACK has crossed the wire.
    assert_eq!(engine.stack.closing(), Closing::default());
    engine.device.wait(Some(Duration::from_millis(1))).unwrap();
    assert_eq!(peer_closing(&engine), Closing::default());
    assert!(
        engine.device.inner().peers()[0].done(),
        "the peer sink finished"
    );
}

#[test]
fn a_deadline_still_bounds_the_run() {
    let (mut engine, mut sink) = sink_engine(usize::MAX);
    let status = engine
        .run(&mut sink, Some(Duration::from_millis(500)))
        .expect("engine runs");
    assert_eq!(status, AppStatus::Done, "the application finished");
    let at = engine.clock().now().saturating_since(Instant::ZERO);
    assert!(at <= Duration::from_millis(600), "returned at {at:?}");
}
