//! A sender retransmits what the network lost, not much more: bulk flows through a drop-tail
//! dumbbell bottleneck (the ns-3 cross-check's dumbbell, issue 22) send again at most a
//! small multiple of the segments the bottleneck dropped, with byte-exact delivery.
//! Run with `--nocapture` for the figures.

mod support;

use std::net::Ipv4Addr;
use std::time::Duration;

use sluice_apps::BulkTransfer;
use sluice_sim::{LinkConfig, NodeId, Sim};
use sluice_tcp::{Algorithm, Config, Instant, Stack};
use sluice_wire::EthernetAddress;

/// Frame bytes of a full-sized segment.
const FRAME: usize = 1514;

/// Host `i`'s core: the default configuration with `algorithm`, its receive side keeping
/// `ooo_intervals` out-of-order intervals (the sender's scoreboard keeps the default 8
/// SACKed ranges).
fn host(i: u8, algorithm: Algorithm, ooo_intervals: usize) -> Config {
    let mut c = Config::new(
        EthernetAddress([2, 0, 0, 0, 1, i]),
        Ipv4Addr::new(10, 0, 1, i),
    );
    c.seed = 7000 + i as u64;
    c.congestion_control = algorithm;
    c.ooo_intervals = ooo_intervals;
    c
}

/// What one dumbbell run counted.
#[derive(Debug)]
struct Run {
    /// Frames the bottleneck's queue dropped.
    drops: u64,
    /// Segments the senders sent again (full-sized: bytes / MSS).
    retransmitted_segments: u64,
    /// Retransmission timeouts of the senders.
    timeouts: u64,
    /// Segments the receivers received out of order and could not keep (no interval left).
    ooo_dropped: u64,
    /// Segments the receivers got again though they had them (old or duplicate).
    needless: u64,
}

impl Run {
    /// Segments retransmitted per segment lost (at the bottleneck or at a receiver).
    fn ratio(&self) -> f64 {
        self.retransmitted_segments as f64 / (self.drops + self.ooo_dropped) as f64
    }
}

/// The dumbbell's shape.
struct Dumbbell {
    flows: u8,
    bytes: u64,
    /// Bottleneck queue, full-sized frames.
    queue: usize,
    /// ECN marking threshold K, full-sized frames (only DCTCP reacts).
    ecn_k: usize,
    algorithm: Algorithm,
    ooo_intervals: usize,
}

/// `flows` senders on one switch, their receivers on another, the switches joined by a
/// 1 Gbit/s, 10 us drop-tail bottleneck; host links 10 Gbit/s, 1 us; all flows start
/// together (the ns-3 cross-check's dumbbell). Every byte is verified.
fn dumbbell(seed: u64, d: &Dumbbell) -> Run {
    assert!(d.ecn_k <= d.queue);
    let algorithm = d.algorithm;
    let mut sim: Sim<Stack> = Sim::new(seed);
    let left = sim.add_switch();
    let right = sim.add_switch();
    let bottleneck = LinkConfig::new(1_000_000_000, Duration::from_micros(10))
        .with_queue(d.queue * FRAME)
        .with_queue_packets(d.queue)
        .with_ecn((d.ecn_k - 1) * FRAME);
    let core = sim.connect(left, right, bottleneck).unwrap();
    let access = LinkConfig::new(10_000_000_000, Duration::from_micros(1)).with_queue(10 << 20);
    let mut senders: Vec<NodeId> = Vec::new();
    let mut receivers: Vec<NodeId> = Vec::new();
    for i in 0..d.flows {
        let s = sim.add_host(Stack::new(host(i + 1, algorithm, d.ooo_intervals)).unwrap());
        sim.connect(s, left, access.clone()).unwrap();
        senders.push(s);
        let r = sim.add_host(Stack::new(host(100 + i, algorithm, d.ooo_intervals)).unwrap());
        sim.connect(r, right, access.clone()).unwrap();
        receivers.push(r);
    }
    let start = sim.now();
    let mut transfers: Vec<BulkTransfer> = (0..d.flows)
        .map(|i| {
            let mut t = BulkTransfer::new(d.bytes, 300 + i as u64);
            let r = sim.host_mut(receivers[i as usize]).unwrap();
            t.listen(r, 5001).unwrap();
            t
        })
        .collect();
    for (i, t) in transfers.iter_mut().enumerate() {
        let to = sim.host(receivers[i]).unwrap().config().ip;
        t.connect(start, sim.host_mut(senders[i]).unwrap(), to, 5001)
            .unwrap();
    }
    let r = sim.run_until(start + Duration::from_secs(5), |now: Instant, hosts| {
        for (i, t) in transfers.iter_mut().enumerate() {
            let (s, r) = hosts.get_pair_mut(senders[i], receivers[i]).unwrap();
            t.step(now, s, r);
        }
        transfers.iter().all(|t| t.done())
    });
    for t in &transfers {
        assert!(
            r.is_ok() && t.verified(),
            "{algorithm}: {r:?} {:?}",
            t.error
        );
        assert_eq!(t.receiver.bytes, d.bytes, "{algorithm}: byte-exact");
    }
    let (to_right, _) = sim.link_stats(core);
    let mut run = Run {
        drops: to_right.queue_drops,
        retransmitted_segments: 0,
        timeouts: 0,
        ooo_dropped: 0,
        needless: 0,
    };
    for &s in &senders {
        let k = sim.host(s).unwrap().counters();
        run.retransmitted_segments += k.retransmitted_bytes.div_ceil(MSS);
        run.timeouts += k.timeouts;
    }
    for &r in &receivers {
        let k = sim.host(r).unwrap().counters();
        run.ooo_dropped += k.ooo_dropped;
        // A segment wholly below rcv_nxt is out of window (RFC 9293 3.10.7.4).
        run.needless += k.duplicate_segments + k.out_of_window;
    }
    eprintln!(
        "{algorithm}, {} flows, ooo {}: {run:?}, ratio {:.2}",
        d.flows,
        d.ooo_intervals,
        run.ratio()
    );
    run
}

/// Payload bytes of a full-sized segment (1500 - 40 - 12 of timestamps).
const MSS: u64 = 1448;

/// The bound: retransmitted segments per lost one. A retransmission may itself be dropped
/// (then it counts as a drop and is sent again, ratio 1), and a later recovery may resend a
/// segment whose earlier retransmission only seemed lost; 20 % covers those. A timeout's
/// go-back-N (RFC 5681 3.1, the scoreboard cleared as RFC 2018 8 asks) may resend what had
/// arrived: up to a small window's worth, 10 segments, per timeout.
fn assert_bounded(run: &Run, what: &str) {
    let lost = run.drops + run.ooo_dropped;
    assert!(
        lost > 0,
        "{what}: nothing lost, the test tests nothing: {run:?}"
    );
    let bound = 1.2 * lost as f64 + 10.0 * run.timeouts as f64;
    assert!(
        run.retransmitted_segments as f64 <= bound,
        "{what}: {} segments retransmitted for {lost} lost (bound {bound:.0}): {run:?}",
        run.retransmitted_segments
    );
}

#[test]
fn newreno_retransmits_about_what_the_bottleneck_dropped() {
    // Receivers that keep every out-of-order segment of a window (as Linux's and ns-3's
    // do): SACK blocks for more ranges than the sender's 8-range scoreboard holds. Before
    // the scoreboard distrusted what it forgot, RACK and the partial-ACK rule took the
    // forgotten ranges as lost: seed 1 sent 283 segments again for 203 drops (1.39).
    for (flows, bytes) in [(4, 1_000_000), (8, 1_000_000), (6, 2_000_000)] {
        let d = Dumbbell {
            flows,
            bytes,
            queue: 200,
            ecn_k: 20,
            algorithm: Algorithm::NewReno,
            ooo_intervals: 64,
        };
        let run = dumbbell(1, &d);
        assert_bounded(&run, &format!("newreno, {flows} flows of {bytes} B"));
        assert!(run.timeouts <= u64::from(flows), "{run:?}");
    }
}

#[test]
fn a_one_interval_receiver_discards_what_the_sender_resends() {
    // The core's default receiver keeps one out-of-order interval (as Laminar and TAS):
    // after a second hole in a window it discards what arrives beyond it, and the sender
    // must resend that too. This is the ns-3 cross-check's "2.5x its drops" (issue 22):
    // seed 1, 157 bottleneck drops and 229 segments discarded at the receivers, 386
    // retransmitted: every one a segment lost, none needless.
    let d = Dumbbell {
        flows: 4,
        bytes: 1_000_000,
        queue: 200,
        ecn_k: 20,
        algorithm: Algorithm::NewReno,
        ooo_intervals: 1,
    };
    let run = dumbbell(1, &d);
    assert!(run.ooo_dropped > 0, "{run:?}");
    assert_bounded(&run, "newreno, one interval");
}

#[test]
fn dctcp_retransmits_about_what_an_overflowing_queue_dropped() {
    // A queue too short for the initial windows (10 segments each into 30 or 40 frames):
    // DCTCP's marks come too late for the first flight, which overflows the queue.
    for (flows, queue) in [(8, 30), (16, 40)] {
        let d = Dumbbell {
            flows,
            bytes: 1_000_000,
            queue,
            ecn_k: 20,
            algorithm: Algorithm::Dctcp,
            ooo_intervals: 64,
        };
        let run = dumbbell(1, &d);
        assert_bounded(&run, &format!("dctcp, {flows} flows, queue {queue}"));
    }
}
