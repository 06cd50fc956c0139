//! Congestion control run by the control plane, end to end in the simulator: DCTCP holds a
//! shared bottleneck's queue near the ECN marking threshold K with no tail drops where
//! NewReno overflows it (16-sender incast); CUBIC and NewReno flows converge to a fair
//! share; TIMELY keeps the RTT bounded. Every run is exact in virtual time for its seed.
//! Run with `--nocapture` for the figures.

mod support;

use std::time::Duration;

use sluice_apps::BulkTransfer;
use sluice_sim::{LinkConfig, LinkId, LinkStats, NodeId, Sim};
use sluice_tcp::{Algorithm, Instant, Stack};
use support::*;

const MB: u64 = 1 << 20;
const KB: usize = 1 << 10;

/// N senders and one receiver (10.0.0.1) on one switch; the switch's port to the receiver
/// is the bottleneck.
struct Incast {
    sim: Sim<Stack>,
    receiver: NodeId,
    senders: Vec<NodeId>,
    bottleneck: LinkId,
}

fn incast(
    seed: u64,
    senders: u8,
    algorithm: Algorithm,
    bottleneck: LinkConfig,
    edge: LinkConfig,
) -> Incast {
    let mut sim: Sim<Stack> = Sim::new(seed);
    let sw = sim.add_switch();
    // Fixed receive windows (no autotuning): what fills the queue is the senders'
    // congestion control, up to the windows, as the tests below compare.
    let mut rc = config(1);
    rc.rx_buffer_initial = rc.rx_buffer;
    let receiver = sim.add_host(Stack::new(rc).unwrap());
    // Direction b -> a of this link (switch -> receiver) is the bottleneck queue.
    let bottleneck = sim.connect(receiver, sw, bottleneck).unwrap();
    let mut hosts = Vec::new();
    for n in 0..senders {
        let mut c = config(n + 2);
        c.congestion_control = algorithm;
        let h = sim.add_host(Stack::new(c).unwrap());
        sim.connect(h, sw, edge.clone()).unwrap();
        hosts.push(h);
    }
    Incast {
        sim,
        receiver,
        senders: hosts,
        bottleneck,
    }
}

/// Starts one bulk transfer of `bytes` per sender (each starting `stagger` after the
/// previous) and runs until all are done or `limit` passes; the bottleneck's stats are
/// taken (and reset) at `warmup`. Returns the transfers and the bottleneck's
/// (whole-run, after-warm-up) stats of the switch -> receiver direction.
fn run(
    inc: &mut Incast,
    bytes: u64,
    stagger: Duration,
    warmup: Duration,
    limit: Duration,
) -> (Vec<BulkTransfer>, LinkStats, LinkStats, Instant) {
    let start = inc.sim.now();
    let mut transfers: Vec<(BulkTransfer, Instant, bool)> = (0..inc.senders.len())
        .map(|i| {
            let mut t = BulkTransfer::new(bytes, 100 + i as u64);
            t.listen(inc.sim.host_mut(inc.receiver).unwrap(), 6000 + i as u16)
                .unwrap();
            (t, start + stagger * i as u32, false)
        })
        .collect();
    let (senders, receiver) = (inc.senders.clone(), inc.receiver);
    let mut step = |now: Instant, hosts: &mut sluice_sim::HostsView<'_, Stack>| {
        for (i, (t, at, started)) in transfers.iter_mut().enumerate() {
            if !*started && now >= *at {
                let port = 6000 + i as u16;
                t.connect(now, hosts.get_mut(senders[i]).unwrap(), A_IP, port)
                    .unwrap();
                *started = true;
            }
            if *started {
                let (s, r) = hosts.get_pair_mut(senders[i], receiver).unwrap();
                t.step(now, s, r);
            }
        }
        transfers.iter().all(|(t, _, _)| t.done())
    };
    let _ = inc.sim.run_until(start + warmup, &mut step);
    let (_, early) = inc.sim.take_link_stats(inc.bottleneck);
    let r = inc.sim.run_until(start + limit, &mut step);
    let end = inc.sim.now();
    let (_, steady) = inc.sim.take_link_stats(inc.bottleneck);
    let mut whole = steady.clone();
    whole.queue_drops += early.queue_drops;
    whole.ecn_marked += early.ecn_marked;
    whole.max_queue_bytes = whole.max_queue_bytes.max(early.max_queue_bytes);

    assert!(r.is_ok(), "transfers unfinished after {limit:?}: {r:?}");
    let done = transfers.into_iter().map(|(t, _, _)| t).collect();
    (done, whole, steady, end)
}

fn ten_gbps(delay_us: u64) -> LinkConfig {
    LinkConfig::new(10_000_000_000, Duration::from_micros(delay_us))
}

/// The incast of the DCTCP paper's shape: 16 senders, 10 Gbps everywhere, a 512 KB
/// bottleneck queue with ECN marking above K = 64 KB.
const K: usize = 64 * KB;
const QUEUE: usize = 512 * KB;

fn incast_16(algorithm: Algorithm) -> (LinkStats, LinkStats, Duration) {
    let mut inc = incast(
        51,
        16,
        algorithm,
        ten_gbps(5).with_queue(QUEUE).with_ecn(K),
        ten_gbps(5).with_queue(4 << 20),
    );
    let (transfers, whole, steady, end) = run(
        &mut inc,
        2 * MB,
        Duration::ZERO,
        Duration::from_millis(3),
        Duration::from_secs(5),
    );
    for t in &transfers {
        assert!(t.verified(), "{algorithm}: {:?}", t.error);
    }
    let took = end.saturating_since(Instant::ZERO);
    println!(
        "{algorithm:>6} incast 16 -> 1, K = {} KB, queue {} KB: whole run max queue {} KB, \
         drops {}, CE marks {}; after 3 ms: max {} KB, mean {:.1} KB; 32 MB in {took:?}",
        K / KB,
        QUEUE / KB,
        whole.max_queue_bytes / KB,
        whole.queue_drops,
        whole.ecn_marked,
        steady.max_queue_bytes / KB,
        steady.mean_queue_bytes() / KB as f64,
    );
    (whole, steady, took)
}

#[test]
fn dctcp_holds_the_bottleneck_queue_near_k_with_no_tail_drops_for_16_senders() {
    let (whole, steady, took) = incast_16(Algorithm::Dctcp);
    assert_eq!(whole.queue_drops, 0, "RFC 8257: no tail drops");
    assert!(whole.ecn_marked > 0, "the queue crossed K and was marked");
    // The steady state: the queue hovers around K, bounded by it plus one RTT of reaction
    // (16 flows' windows, a few segments each), and is not drained (the link stays busy).
    assert!(
        steady.max_queue_bytes <= 2 * K,
        "steady max {} B vs K {K}",
        steady.max_queue_bytes
    );
    let mean = steady.mean_queue_bytes();
    assert!(
        mean > K as f64 / 4.0 && mean < 1.5 * K as f64,
        "steady mean {mean} B vs K {K}"
    );
    // 32 MB at 10 Gbps is 27 ms of serialization: the bottleneck stayed busy.
    assert!(took < Duration::from_millis(35), "{took:?}");
}

#[test]
fn without_ecn_the_same_incast_fills_the_queue_and_tail_drops() {
    let (whole, steady, _) = incast_16(Algorithm::NewReno);
    assert!(whole.queue_drops > 0, "NewReno overflows the 512 KB queue");
    assert_eq!(
        whole.ecn_marked, 0,
        "NewReno does not negotiate ECN: nothing is ECT"
    );
    assert!(steady.mean_queue_bytes() > 2.0 * K as f64);
}

/// Jain's fairness index of `x`: (sum x)^2 / (n sum x^2).
fn jain(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let sq: f64 = x.iter().map(|v| v * v).sum();
    sum * sum / (x.len() as f64 * sq)
}

/// Two long flows through a 1 Gbps bottleneck (64 KB queue, tail drop), the second
/// starting 20 ms after the first; returns Jain's index of their throughput over
/// [start + from, start + to] and the throughputs in Mbit/s.
fn fairness(algorithm: Algorithm, seed: u64, from: Duration, to: Duration) -> (f64, [f64; 2]) {
    let mut inc = incast(
        seed,
        2,
        algorithm,
        LinkConfig::new(1_000_000_000, Duration::from_micros(50)).with_queue(64 * KB),
        ten_gbps(5).with_queue(4 << 20),
    );
    let start = inc.sim.now();
    let mut transfers: Vec<BulkTransfer> = (0..2)
        .map(|i| {
            let mut t = BulkTransfer::new(1 << 40, 7 + i as u64);
            t.listen(inc.sim.host_mut(inc.receiver).unwrap(), 6000 + i as u16)
                .unwrap();
            t
        })
        .collect();
    let (senders, receiver) = (inc.senders.clone(), inc.receiver);
    let second = start + Duration::from_millis(20);
    let mut started = [false; 2];
    let mut step = |now: Instant, hosts: &mut sluice_sim::HostsView<'_, Stack>| {
        for (i, t) in transfers.iter_mut().enumerate() {
            if !started[i] && (i == 0 || now >= second) {
                t.connect(
                    now,
                    hosts.get_mut(senders[i]).unwrap(),
                    A_IP,
                    6000 + i as u16,
                )
                .unwrap();
                started[i] = true;
            }
            if started[i] {
                let (s, r) = hosts.get_pair_mut(senders[i], receiver).unwrap();
                t.step(now, s, r);
            }
        }
        false
    };
    let _ = inc.sim.run_until(start + from, &mut step);

    let before: Vec<u64> = transfers.iter().map(|t| t.receiver.bytes).collect();
    let mut step = |now: Instant, hosts: &mut sluice_sim::HostsView<'_, Stack>| {
        for (i, t) in transfers.iter_mut().enumerate() {
            let (s, r) = hosts.get_pair_mut(senders[i], receiver).unwrap();
            t.step(now, s, r);
        }
        false
    };
    let _ = inc.sim.run_until(start + to, &mut step);

    let secs = (to - from).as_secs_f64();
    let mbps: Vec<f64> = transfers
        .iter()
        .zip(&before)
        .map(|(t, b)| (t.receiver.bytes - b) as f64 * 8.0 / secs / 1e6)
        .collect();
    for t in &transfers {
        assert!(t.error.is_none(), "{algorithm}: {:?}", t.error);
    }
    (jain(&mbps), [mbps[0], mbps[1]])
}

#[test]
fn cubic_and_newreno_converge_to_a_fair_share_within_200_ms() {
    for algorithm in [Algorithm::NewReno, Algorithm::Cubic] {
        let (index, mbps) = fairness(
            algorithm,
            61,
            Duration::from_millis(200),
            Duration::from_millis(400),
        );
        println!(
            "{algorithm:>6} 2 flows on 1 Gbps (second starts at 20 ms), 200-400 ms: \
             {:.0} + {:.0} Mbit/s, Jain's index {index:.3}",
            mbps[0], mbps[1]
        );
        assert!(index >= 0.9, "{algorithm}: Jain's index {index} ({mbps:?})");
        assert!(
            mbps[0] + mbps[1] > 800.0,
            "{algorithm}: the link is used: {mbps:?}"
        );
    }
}

/// 4 senders of 8 MB each through a 10 Gbps bottleneck with a deep 4 MB queue and no ECN.
/// Returns the bottleneck's (whole run, after 2 ms) stats and the completion time.
fn deep_queue(algorithm: Algorithm) -> (LinkStats, LinkStats, Duration) {
    let mut inc = incast(
        71,
        4,
        algorithm,
        ten_gbps(5).with_queue(4 << 20),
        ten_gbps(5).with_queue(4 << 20),
    );
    let (transfers, whole, steady, end) = run(
        &mut inc,
        8 * MB,
        Duration::ZERO,
        Duration::from_millis(2),
        Duration::from_secs(5),
    );
    for t in &transfers {
        assert!(t.verified(), "{algorithm}: {:?}", t.error);
    }
    let took = end.saturating_since(Instant::ZERO);
    println!(
        "{algorithm:>6} incast 4 -> 1, 4 MB queue: max queue {} KB (after 2 ms: {} KB, \
         mean {:.1} KB), drops {}; 32 MB in {took:?}",
        whole.max_queue_bytes / KB,
        steady.max_queue_bytes / KB,
        steady.mean_queue_bytes() / KB as f64,
        whole.queue_drops
    );
    (whole, steady, took)
}

#[test]
fn timely_keeps_the_rtt_bounded() {
    // TIMELY's T_high = 500 us caps the RTT: the queueing delay stays under
    // T_high, i.e. the queue under T_high x 10 Gbps = 625 KB, once the flows run. A
    // loss-based policy fills the deep queue up to the receivers' windows instead.
    let t_high_bytes = 500e-6 * 10e9 / 8.0;
    let (whole, steady, took) = deep_queue(Algorithm::Timely);
    assert_eq!(whole.queue_drops, 0);
    assert!(
        (whole.max_queue_bytes as f64) < t_high_bytes,
        "queueing delay past T_high: {} B",
        whole.max_queue_bytes
    );
    assert!(
        steady.mean_queue_bytes() > 0.0,
        "the bottleneck is kept busy"
    );
    assert!(took < Duration::from_millis(40), "{took:?}");
    let (_, reno, _) = deep_queue(Algorithm::NewReno);
    assert!(
        reno.max_queue_bytes as f64 > 2.0 * t_high_bytes,
        "NewReno queues {} B",
        reno.max_queue_bytes
    );
}
