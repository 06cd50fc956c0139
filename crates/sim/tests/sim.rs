//! Integration tests of the simulator with toy hosts.

mod toy;

use std::time::Duration;

use proptest::prelude::*;
use sha2::{Digest, Sha256};
use sluice_sim::{
    GilbertElliott, Host, Impairment, Instant, LinkConfig, LinkId, NodeId, Sim, SimError, TraceKind,
};
use toy::*;

const GBPS: u64 = 1_000_000_000;

fn us(n: u64) -> Instant {
    Instant::from_micros(n)
}

/// Two toy hosts joined by one link; host a sends `n` frames of `size` bytes to b.
fn pair(seed: u64, n: u32, size: usize, cfg: LinkConfig) -> (Sim<Toy>, NodeId, NodeId, LinkId) {
    let mut sim = Sim::new(seed);
    let a = sim.add_host(Toy::new(mac(1)).sending(mac(2), n, size));
    let b = sim.add_host(Toy::new(mac(2)));
    let l = sim.connect(a, b, cfg).unwrap();
    (sim, a, b, l)
}

#[test]
fn serialization_timing_is_exact() {
    // 1250 bytes at 1 Gbps = 10 µs each, back to back from t = 0.
    let (mut sim, _a, b, l) = pair(1, 10, 1250, LinkConfig::new(GBPS, Duration::ZERO));
    sim.run_for(Duration::from_millis(1));
    let rx = &sim.host(b).unwrap().received;
    assert_eq!(rx.len(), 10);
    for (i, (t, f)) in rx.iter().enumerate() {
        assert_eq!(*t, us(10 * (i as u64 + 1)), "frame {i}");
        assert_eq!(parse_toy(f), Some((KIND_DATA, i as u32)));
    }
    let (ab, ba) = sim.link_stats(l);
    assert_eq!(ab.delivered, 10);
    assert_eq!(ab.bytes_delivered, 12_500);
    assert_eq!(ab.enqueued, 10);
    assert_eq!(ab.max_queue_bytes, 9 * 1250);
    assert_eq!(ba.delivered, 0);
    assert_eq!(sim.now(), Instant::from_millis(1));
}

#[test]
fn fractional_serialization_does_not_drift() {
    // 1514 bytes at 10 Gbps = 1211.2 ns; after 1000 frames exactly 1_211_200 ns.
    let (mut sim, _a, b, _l) = pair(
        1,
        1000,
        1514,
        LinkConfig::new(10 * GBPS, Duration::ZERO).with_queue(4 << 20),
    );
    sim.run_for(Duration::from_millis(10));
    let rx = &sim.host(b).unwrap().received;
    assert_eq!(rx.len(), 1000);
    assert_eq!(rx[0].0, Instant::from_nanos(1211));
    assert_eq!(rx[4].0, Instant::from_nanos(6056));
    assert_eq!(rx[999].0, Instant::from_nanos(1_211_200));
}

#[test]
fn propagation_delay_is_exact() {
    let (mut sim, _a, b, _l) = pair(1, 3, 100, LinkConfig::new(0, Duration::from_millis(5)));
    sim.run_for(Duration::from_secs(1));
    let times: Vec<Instant> = sim.host(b).unwrap().received.iter().map(|r| r.0).collect();
    assert_eq!(times, vec![Instant::from_millis(5); 3]);

    // Serialization plus propagation: arrival = (i + 1) * 10 µs + 250 µs.
    let (mut sim, _a, b, _l) = pair(
        1,
        4,
        1250,
        LinkConfig::new(GBPS, Duration::from_micros(250)),
    );
    sim.run_for(Duration::from_secs(1));
    let times: Vec<Instant> = sim.host(b).unwrap().received.iter().map(|r| r.0).collect();
    assert_eq!(times, vec![us(260), us(270), us(280), us(290)]);
}

#[test]
fn infinite_bandwidth_never_queues() {
    // 10 000 frames sent in one burst do not overflow a tiny queue at infinite rate.
    let cfg = LinkConfig::new(0, Duration::from_micros(1)).with_queue(100);
    let (mut sim, _a, b, l) = pair(1, 10_000, 1500, cfg);
    sim.run_for(Duration::from_millis(1));
    assert_eq!(sim.host(b).unwrap().received.len(), 10_000);
    assert_eq!(sim.link_stats(l).0.queue_drops, 0);
}

#[test]
fn tail_drop_counts_are_exact() {
    // One frame goes on the wire, 10 fit in the queue, the other 39 are dropped.
    let cfg = LinkConfig::new(GBPS, Duration::from_micros(3)).with_queue(10 * 1000);
    let (mut sim, _a, b, l) = pair(1, 50, 1000, cfg);
    sim.run_for(Duration::from_millis(1));
    let (ab, _) = sim.link_stats(l);
    assert_eq!(ab.queue_drops, 39);
    assert_eq!(ab.enqueued, 11);
    assert_eq!(ab.delivered, 11);
    assert_eq!(ab.max_queue_bytes, 10_000);
    assert_eq!(sim.host(b).unwrap().seqs(), (0..11).collect::<Vec<_>>());
}

#[test]
fn tail_drop_frees_space_as_queue_drains() {
    // Queue holds 2 frames; a frame sent every 5 µs into a link that needs 8 µs per frame.
    let mut sim: Sim<Toy> = Sim::new(3);
    let a = sim.add_host(Toy::new(mac(1)));
    let b = sim.add_host(Toy::new(mac(2)));
    let l = sim
        .connect(a, b, LinkConfig::new(GBPS, Duration::ZERO).with_queue(2000))
        .unwrap();
    for i in 0..20u32 {
        sim.host_mut(a)
            .unwrap()
            .outbox
            .push_back(toy_frame(mac(2), mac(1), KIND_DATA, i, 1000));
        sim.run_for(Duration::from_micros(5));
    }
    sim.run_for(Duration::from_millis(1));
    let (ab, _) = sim.link_stats(l);
    // Worked by hand: a frame finishing at the same instant as a send frees its
    // slot first (events at the deadline run before the next push).
    assert_eq!(ab.queue_drops, 6);
    assert_eq!(ab.enqueued, 14);
    assert_eq!(ab.delivered, 14);
    assert_eq!(ab.max_queue_bytes, 2000);
    assert_eq!(
        sim.host(b).unwrap().seqs(),
        vec![0, 1, 2, 3, 4, 5, 7, 8, 10, 12, 13, 15, 16, 18]
    );
}

fn ecn_run(tos: u8, vlan: bool, k: usize) -> (Vec<Vec<u8>>, u64) {
    let mut sim: Sim<Toy> = Sim::new(9);
    let mut src = Toy::new(mac(1));
    for i in 0..20 {
        src.outbox
            .push_back(ipv4_frame(mac(2), mac(1), vlan, tos, i, 1000));
    }
    let a = sim.add_host(src);
    let b = sim.add_host(Toy::new(mac(2)));
    let l = sim
        .connect(
            a,
            b,
            LinkConfig::new(GBPS, Duration::from_micros(1)).with_ecn(k),
        )
        .unwrap();
    sim.run_for(Duration::from_millis(1));
    let frames = sim
        .host(b)
        .unwrap()
        .received
        .iter()
        .map(|r| r.1.clone())
        .collect();
    (frames, sim.link_stats(l).0.ecn_marked)
}

#[test]
fn ecn_marks_ect_above_threshold_with_valid_checksum() {
    for vlan in [false, true] {
        for tos in [0x01u8, 0x02, 0xb8 | 0x02] {
            // Queue before enqueue of frame i (i >= 1) holds (i - 1) * 1000 bytes;
            // frames with more than 3000 bytes ahead of them (i >= 5) are marked.
            let (frames, marked) = ecn_run(tos, vlan, 3000);
            assert_eq!(frames.len(), 20);
            assert_eq!(marked, 15);
            for (i, f) in frames.iter().enumerate() {
                let off = ip_offset(f);
                let got = f[off + 1];
                if i >= 5 {
                    assert_eq!(got, tos | 0x03, "frame {i} should be CE");
                } else {
                    assert_eq!(got, tos, "frame {i} should be untouched");
                }
                assert!(ipv4_checksum_ok(f), "frame {i} checksum");
                assert_eq!(u16::from_be_bytes([f[off + 4], f[off + 5]]), i as u16);
            }
        }
    }
}

#[test]
fn ecn_leaves_non_ect_and_non_ip_alone() {
    let (frames, marked) = ecn_run(0x00, false, 0);
    assert_eq!(marked, 0);
    assert!(frames.iter().all(|f| f[15] == 0 && ipv4_checksum_ok(f)));
    let (frames, marked) = ecn_run(0x03, true, 0);
    assert_eq!(marked, 0);
    assert!(frames.iter().all(|f| f[19] == 3));

    // Toy (non-IP) frames through an ECN link with K = 0 arrive unchanged.
    let cfg = LinkConfig::new(GBPS, Duration::ZERO).with_ecn(0);
    let (mut sim, _a, b, l) = pair(1, 20, 500, cfg);
    sim.run_for(Duration::from_millis(1));
    assert_eq!(sim.link_stats(l).0.ecn_marked, 0);
    for (i, (_, f)) in sim.host(b).unwrap().received.iter().enumerate() {
        assert_eq!(*f, toy_frame(mac(2), mac(1), KIND_DATA, i as u32, 500));
    }
}

#[test]
fn random_loss_rate_within_bounds() {
    let n = 100_000u32;
    let p = 0.1;
    let cfg = LinkConfig::new(0, Duration::from_micros(1))
        .with_impairment(Impairment::default().with_loss(p));
    let (mut sim, _a, b, l) = pair(77, n, 64, cfg);
    sim.host_mut(b).unwrap().discard = true;
    sim.run_for(Duration::from_millis(10));
    let (ab, _) = sim.link_stats(l);
    let mean = f64::from(n) * p;
    let sigma = (f64::from(n) * p * (1.0 - p)).sqrt();
    assert!(
        (ab.lost as f64 - mean).abs() < 5.0 * sigma,
        "lost {} expected {mean}±{}",
        ab.lost,
        5.0 * sigma
    );
    assert_eq!(ab.lost + ab.delivered, u64::from(n));
    assert_eq!(sim.host(b).unwrap().rx_count, ab.delivered);
}

/// Lengths of runs of consecutive lost sequence numbers.
fn loss_runs(received: &[u32], total: u32) -> Vec<u32> {
    let mut got = vec![false; total as usize];
    for &s in received {
        got[s as usize] = true;
    }
    let mut runs = Vec::new();
    let mut cur = 0;
    for g in got {
        if g {
            if cur > 0 {
                runs.push(cur);
            }
            cur = 0;
        } else {
            cur += 1;
        }
    }
    if cur > 0 {
        runs.push(cur);
    }
    runs
}

#[test]
fn burst_loss_produces_runs() {
    let n = 100_000u32;
    let ge = GilbertElliott {
        p_good_to_bad: 0.01,
        p_bad_to_good: 0.2,
        loss_in_bad: 1.0,
    };
    let cfg = LinkConfig::new(0, Duration::from_micros(1))
        .with_impairment(Impairment::default().with_burst_loss(ge));
    let (mut sim, _a, b, l) = pair(5, n, 64, cfg);
    sim.run_for(Duration::from_millis(10));
    let runs = loss_runs(&sim.host(b).unwrap().seqs(), n);
    let lost: u32 = runs.iter().sum();
    assert_eq!(u64::from(lost), sim.link_stats(l).0.lost);
    // Stationary bad-state probability 0.01 / 0.21 ≈ 4.8 %; mean run length 1 / 0.2 = 5.
    let rate = f64::from(lost) / f64::from(n);
    assert!((0.035..0.06).contains(&rate), "loss rate {rate}");
    let mean_run = f64::from(lost) / runs.len() as f64;
    assert!((4.0..6.0).contains(&mean_run), "mean run {mean_run}");
    assert!(runs.iter().any(|&r| r >= 15));

    // Independent loss at a similar rate gives runs barely longer than 1.
    let cfg = LinkConfig::new(0, Duration::from_micros(1))
        .with_impairment(Impairment::default().with_loss(rate));
    let (mut sim, _a, b, _l) = pair(5, n, 64, cfg);
    sim.run_for(Duration::from_millis(10));
    let runs = loss_runs(&sim.host(b).unwrap().seqs(), n);
    let mean_run = f64::from(runs.iter().sum::<u32>()) / runs.len() as f64;
    assert!(mean_run < 1.2, "independent mean run {mean_run}");
}

#[test]
fn reorder_reorders() {
    let imp = Impairment::default().with_reorder(0.1, Duration::from_micros(55));
    let cfg = LinkConfig::new(GBPS, Duration::from_micros(100))
        .with_queue(4 << 20)
        .with_impairment(imp);
    let (mut sim, _a, b, l) = pair(11, 1000, 1250, cfg);
    sim.run_for(Duration::from_secs(1));
    let seqs = sim.host(b).unwrap().seqs();
    assert_eq!(seqs.len(), 1000);
    let inversions = seqs.windows(2).filter(|w| w[0] > w[1]).count();
    let (ab, _) = sim.link_stats(l);
    assert!(ab.reordered > 50 && ab.reordered < 150, "{}", ab.reordered);
    assert!(inversions > 50, "inversions {inversions}");
    let mut sorted = seqs.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
    // A held-back frame arrives exactly reorder_delay late: 55 µs = 5.5 frame times,
    // so it lands between the 5th and 6th frames that followed it.
    let rx = &sim.host(b).unwrap().received;
    for (t, f) in rx {
        let (_, s) = parse_toy(f).unwrap();
        let on_time = us(100 + 10 * (u64::from(s) + 1));
        assert!(*t == on_time || *t == on_time + Duration::from_micros(55));
    }
}

#[test]
fn duplicate_duplicates() {
    let imp = Impairment::default().with_duplicate(0.1);
    let cfg = LinkConfig::new(GBPS, Duration::from_micros(10)).with_impairment(imp);
    let (mut sim, _a, b, l) = pair(12, 2000, 200, cfg);
    sim.run_for(Duration::from_secs(1));
    let (ab, _) = sim.link_stats(l);
    let seqs = sim.host(b).unwrap().seqs();
    assert!(
        ab.duplicated > 100 && ab.duplicated < 300,
        "{}",
        ab.duplicated
    );
    assert_eq!(seqs.len() as u64, 2000 + ab.duplicated);
    assert_eq!(ab.delivered, 2000 + ab.duplicated);
    let mut counts = vec![0u32; 2000];
    for s in seqs {
        counts[s as usize] += 1;
    }
    assert!(counts.iter().all(|&c| c == 1 || c == 2));
    assert_eq!(
        counts.iter().filter(|&&c| c == 2).count() as u64,
        ab.duplicated
    );
}

#[test]
fn corrupt_flips_exactly_one_bit() {
    let template = toy_frame(mac(2), mac(1), KIND_DATA, 7, 300);
    let mut src = Toy::new(mac(1));
    for _ in 0..2000 {
        src.outbox.push_back(template.clone());
    }
    let mut sim: Sim<Toy> = Sim::new(13);
    let a = sim.add_host(src);
    let b = sim.add_host(Toy::new(mac(2)));
    let imp = Impairment::default().with_corrupt(0.3);
    let l = sim
        .connect(
            a,
            b,
            LinkConfig::new(GBPS, Duration::ZERO).with_impairment(imp),
        )
        .unwrap();
    sim.run_for(Duration::from_secs(1));
    let rx = &sim.host(b).unwrap().received;
    assert_eq!(rx.len(), 2000);
    let mut flipped = 0u64;
    let mut positions = std::collections::BTreeSet::new();
    for (_, f) in rx {
        assert_eq!(f.len(), template.len());
        let diff: u32 = f
            .iter()
            .zip(&template)
            .map(|(x, y)| (x ^ y).count_ones())
            .sum();
        assert!(diff <= 1);
        if diff == 1 {
            flipped += 1;
            positions.insert(f.iter().zip(&template).position(|(x, y)| x != y));
        }
    }
    assert_eq!(flipped, sim.link_stats(l).0.corrupted);
    assert!(flipped > 450 && flipped < 750, "{flipped}");
    assert!(
        positions.len() > 100,
        "bit positions should be spread over the frame"
    );
}

#[test]
fn switch_learns_and_stops_flooding() {
    let mut sim: Sim<Toy> = Sim::new(21);
    let s = sim.add_switch();
    let hosts: Vec<NodeId> = (1..=3).map(|i| sim.add_host(Toy::new(mac(i)))).collect();
    let (a, b, c) = (hosts[0], hosts[1], hosts[2]);
    for &h in &hosts {
        sim.connect(h, s, LinkConfig::new(GBPS, Duration::from_micros(2)))
            .unwrap();
    }
    let send = |sim: &mut Sim<Toy>, from: NodeId, src: u8, dst: [u8; 6], seq: u32| {
        sim.host_mut(from)
            .unwrap()
            .outbox
            .push_back(toy_frame(dst, mac(src), KIND_DATA, seq, 100));
        sim.run_for(Duration::from_millis(1));
    };
    let count = |sim: &Sim<Toy>, h: NodeId| sim.host(h).unwrap().received.len();

    // Unknown destination: flooded to b and c.
    send(&mut sim, a, 1, mac(2), 0);
    assert_eq!((count(&sim, a), count(&sim, b), count(&sim, c)), (0, 1, 1));
    // a was learned: the reply goes only to a.
    send(&mut sim, b, 2, mac(1), 1);
    assert_eq!((count(&sim, a), count(&sim, b), count(&sim, c)), (1, 1, 1));
    // b was learned too: no more flooding between a and b.
    for i in 2..10 {
        send(&mut sim, a, 1, mac(2), i);
        send(&mut sim, b, 2, mac(1), i);
    }
    assert_eq!((count(&sim, a), count(&sim, b), count(&sim, c)), (9, 9, 1));
    // Broadcast still floods to everyone else.
    send(&mut sim, c, 3, BROADCAST, 99);
    assert_eq!(
        (count(&sim, a), count(&sim, b), count(&sim, c)),
        (10, 10, 1)
    );
    let st = sim.switch_stats(s).unwrap();
    assert_eq!(st.flooded, 2);
    assert_eq!(st.forwarded, 17);
    assert_eq!(st.received, 19);
    // Two hops of 100-byte frames: 0.8 µs + 2 µs each.
    let first = sim.host(b).unwrap().received[0].0;
    assert_eq!(first, Instant::from_nanos(2 * 2800));
}

/// A lossy, reordering, duplicating, corrupting three-host network.
fn chaotic_run(seed: u64) -> (Vec<sluice_sim::TraceEvent>, [u8; 32], u64) {
    let mut sim: Sim<Toy> = Sim::new(seed);
    sim.set_trace(true);
    let s = sim.add_switch();
    let a = sim.add_host(Toy::new(mac(1)).sending(mac(2), 2000, 700));
    let b = sim.add_host(Toy::new(mac(2)));
    let c = sim.add_host(Toy::new(mac(3)).sending(mac(2), 2000, 300));
    let imp = Impairment {
        loss: 0.05,
        burst_loss: None,
        reorder: 0.05,
        reorder_delay: Duration::from_micros(30),
        duplicate: 0.02,
        corrupt: 0.01,
    };
    let cfg = LinkConfig::new(100_000_000, Duration::from_micros(50))
        .with_queue(8 << 20)
        .with_impairment(imp);
    let mut links = Vec::new();
    for h in [a, b, c] {
        links.push(sim.connect(h, s, cfg.clone()).unwrap());
    }
    sim.run_for(Duration::from_secs(1));
    let mut hash = Sha256::new();
    for (t, f) in &sim.host(b).unwrap().received {
        hash.update(t.as_nanos().to_le_bytes());
        hash.update(f);
    }
    let lost = links.iter().map(|&l| sim.link_stats(l).0.lost).sum();
    (sim.take_trace(), hash.finalize().into(), lost)
}

#[test]
fn same_seed_same_trace_different_seed_different_losses() {
    let (t1, h1, lost1) = chaotic_run(42);
    let (t2, h2, lost2) = chaotic_run(42);
    assert!(t1.len() > 10_000);
    assert!(lost1 > 0);
    assert_eq!(t1, t2);
    assert_eq!(h1, h2);
    assert_eq!(lost1, lost2);
    let (t3, h3, _) = chaotic_run(43);
    assert_ne!(h1, h3);
    let losses = |t: &[sluice_sim::TraceEvent]| {
        t.iter()
            .filter(|e| e.kind == TraceKind::Lost)
            .map(|e| (e.time, e.link, e.direction))
            .collect::<Vec<_>>()
    };
    assert_ne!(losses(&t1), losses(&t3));
}

#[test]
fn run_until_stops_when_app_is_done() {
    let (mut sim, _a, b, _l) = pair(1, 10, 1250, LinkConfig::new(GBPS, Duration::from_micros(5)));
    // Checked before the first event: returns at once without advancing.
    assert_eq!(sim.run_until(us(1000), |_, _| true), Ok(Instant::ZERO));
    let mut calls = 0;
    let r = sim.run_until(us(1000), |_, hosts| {
        calls += 1;
        hosts.get(b).unwrap().received.len() >= 5
    });
    assert_eq!(r, Ok(us(55)));
    assert!(calls > 5);
    assert_eq!(sim.host(b).unwrap().received.len(), 5);
    // Deadline with events still pending.
    let r = sim.run_until(us(70), |_, _| false);
    assert_eq!(r, Err(SimError::Deadline { now: us(70) }));
    assert_eq!(sim.host(b).unwrap().received.len(), 6);
    // Nothing left: advances to the deadline and reports idle.
    let r = sim.run_until(us(5000), |_, _| false);
    assert_eq!(r, Err(SimError::Idle { now: us(5000) }));
    assert_eq!(sim.now(), us(5000));
    assert_eq!(sim.host(b).unwrap().received.len(), 10);
}

#[test]
fn app_can_drive_sends_mid_run() {
    let mut sim: Sim<Toy> = Sim::new(1);
    let a = sim.add_host(Toy::new(mac(1)));
    let b = sim.add_host(Toy::new(mac(2)));
    sim.connect(a, b, LinkConfig::new(GBPS, Duration::from_micros(20)))
        .unwrap();
    // Ping-pong driven by the app: each arrival at b triggers the next send from a.
    let mut next = 0u32;
    let r = sim.run_until(Instant::from_millis(10), |_, hosts| {
        let got = hosts.get(b).unwrap().received.len() as u32;
        if got == 5 {
            return true;
        }
        if next == got {
            let f = toy_frame(mac(2), mac(1), KIND_DATA, next, 1250);
            hosts.get_mut(a).unwrap().outbox.push_back(f);
            next += 1;
        }
        false
    });
    // Each round trip of the app: 10 µs serialization + 20 µs delay.
    assert_eq!(r, Ok(us(150)));
    assert!(sim.hosts_mut().count() == 2);
}

#[test]
fn timers_fire_at_requested_times() {
    let mut sim: Sim<Toy> = Sim::new(1);
    let mut t = Toy::new(mac(1));
    t.timers = [us(1000), us(3000), us(7000)].into_iter().collect();
    let h = sim.add_host(t);
    sim.run_for(Duration::from_millis(10));
    assert_eq!(
        sim.host(h).unwrap().fired,
        vec![us(1000), us(3000), us(7000)]
    );

    // A deadline in the past fires at `now`.
    sim.host_mut(h).unwrap().timers.push_back(us(5));
    sim.run_for(Duration::from_millis(1));
    assert_eq!(
        sim.host(h).unwrap().fired.last(),
        Some(&Instant::from_millis(10))
    );

    // A moved deadline leaves the old timer event stale.
    sim.host_mut(h)
        .unwrap()
        .timers
        .push_back(Instant::from_millis(20));
    sim.run_for(Duration::from_millis(1));
    sim.host_mut(h).unwrap().timers[0] = Instant::from_millis(15);
    sim.run_for(Duration::from_millis(20));
    let fired = &sim.host(h).unwrap().fired;
    assert_eq!(fired.len(), 5);
    assert_eq!(fired[4], Instant::from_millis(15));
}

#[test]
fn stuck_timer_cannot_livelock() {
    let mut sim: Sim<Toy> = Sim::new(1);
    let mut t = Toy::new(mac(1));
    t.stuck_timer = true;
    let h = sim.add_host(t);
    sim.run_for(Duration::from_nanos(10));
    assert_eq!(sim.now(), Instant::from_nanos(10));
    let fired = sim.host(h).unwrap().fired.len();
    assert!((10_000..=11_000).contains(&fired), "{fired}");
}

#[test]
fn oversized_and_unconnected_frames_are_counted() {
    let mut sim: Sim<Toy> = Sim::new(1);
    let mut t = Toy::new(mac(1)).sending(mac(2), 3, 100);
    t.bogus_len = Some(70_000);
    let a = sim.add_host(t);
    let b = sim.add_host(Toy::new(mac(2)));
    let lone = sim.add_host(Toy::new(mac(3)).sending(mac(2), 4, 100));
    sim.connect(a, b, LinkConfig::new(0, Duration::ZERO))
        .unwrap();
    sim.run_for(Duration::from_millis(1));
    assert_eq!(sim.stats().oversized_drops, 1);
    assert_eq!(sim.stats().unconnected_drops, 4);
    assert_eq!(sim.host(b).unwrap().received.len(), 3);
    assert!(sim.host(lone).is_some());
}

#[test]
fn connect_errors() {
    let mut sim: Sim<Toy> = Sim::new(1);
    let a = sim.add_host(Toy::new(mac(1)));
    let b = sim.add_host(Toy::new(mac(2)));
    let s = sim.add_switch();
    let cfg = LinkConfig::new(0, Duration::ZERO);
    assert_eq!(
        sim.connect(a, NodeId(9), cfg.clone()),
        Err(SimError::NoSuchNode(NodeId(9)))
    );
    assert_eq!(sim.connect(s, s, cfg.clone()), Err(SimError::SelfLoop(s)));
    sim.connect(a, s, cfg.clone()).unwrap();
    assert_eq!(
        sim.connect(b, a, cfg.clone()),
        Err(SimError::HostAlreadyConnected(a))
    );
    sim.connect(b, s, cfg.clone()).unwrap();
    assert!(sim.host(s).is_none());
    assert!(sim.host_mut(NodeId(7)).is_none());
    assert!(sim.switch_stats(a).is_none());
    assert_eq!(
        sim.start_capture(LinkId(5)),
        Err(SimError::NoSuchLink(LinkId(5)))
    );
    assert!(!SimError::Deadline { now: us(1) }.to_string().is_empty());
}

#[test]
fn asymmetric_links_and_mid_run_impairment() {
    let mut sim: Sim<Toy> = Sim::new(1);
    let a = sim.add_host(Toy::new(mac(1)).sending(mac(2), 1, 1250));
    let b = sim.add_host(Toy::new(mac(2)).sending(mac(1), 1, 1250));
    let l = sim
        .connect_asymmetric(
            a,
            b,
            LinkConfig::new(GBPS, Duration::from_micros(1)),
            LinkConfig::new(GBPS / 10, Duration::from_micros(2)),
        )
        .unwrap();
    sim.run_for(Duration::from_millis(1));
    assert_eq!(sim.host(b).unwrap().received[0].0, us(11));
    assert_eq!(sim.host(a).unwrap().received[0].0, us(102));

    sim.set_impairment(
        l,
        Impairment::default().with_loss(1.0),
        Impairment::default(),
    );
    sim.host_mut(a).unwrap().generator.as_mut().unwrap().total = 11;
    sim.run_for(Duration::from_millis(1));
    let (ab, _) = sim.link_stats(l);
    assert_eq!(ab.lost, 10);
    assert_eq!(sim.host(b).unwrap().received.len(), 1);
    sim.set_impairment(l, Impairment::default(), Impairment::default());
    sim.host_mut(a).unwrap().generator.as_mut().unwrap().total = 15;
    sim.run_for(Duration::from_millis(1));
    assert_eq!(sim.host(b).unwrap().seqs(), vec![0, 11, 12, 13, 14]);
}

#[test]
fn pcap_capture_records_delivered_frames() {
    let (mut sim, _a, _b, l) = pair(1, 3, 100, LinkConfig::new(GBPS, Duration::from_micros(1)));
    sim.start_capture(l).unwrap();
    sim.run_for(Duration::from_millis(1));
    let pcap = sim.take_capture(l).unwrap();
    assert_eq!(pcap.len(), 24 + 3 * (16 + 100));
    assert_eq!(pcap[..4], 0xa1b2_3c4du32.to_le_bytes());
    // First record: 1.8 µs = 0 s + 1800 ns.
    assert_eq!(pcap[24..28], 0u32.to_le_bytes());
    assert_eq!(pcap[28..32], 1800u32.to_le_bytes());
    assert!(sim.take_capture(l).is_none());
}

#[test]
fn boxed_hosts_work() {
    let mut sim: Sim<Box<dyn Host>> = Sim::new(1);
    let a = sim.add_host(Box::new(Toy::new(mac(1)).sending(mac(2), 5, 100)));
    let b = sim.add_host(Box::new(Toy::new(mac(2))));
    let l = sim
        .connect(a, b, LinkConfig::new(GBPS, Duration::ZERO))
        .unwrap();
    sim.run_for(Duration::from_millis(1));
    assert_eq!(sim.link_stats(l).0.delivered, 5);
}

#[test]
fn moves_64_mb_with_acks_through_a_switch() {
    let total_bytes = 64u32 << 20;
    let payload = 1460;
    let n = total_bytes.div_ceil(payload);
    let mut sim: Sim<Toy> = Sim::new(99);
    let s = sim.add_switch();
    let mut sender = Toy::new(mac(1)).sending(mac(2), n, 1514);
    sender.generator.as_mut().unwrap().window = Some(200);
    sender.discard = true;
    let a = sim.add_host(sender);
    let mut rx = Toy::new(mac(2));
    rx.ack_to = Some(mac(1));
    rx.discard = true;
    let b = sim.add_host(rx);
    let cfg = LinkConfig::new(10 * GBPS, Duration::from_micros(10));
    let la = sim.connect(a, s, cfg.clone()).unwrap();
    sim.connect(b, s, cfg).unwrap();
    let r = sim.run_until(Instant::from_millis(500), |_, hosts| {
        hosts.get(a).unwrap().generator.as_ref().unwrap().acked == n
    });
    let done = r.unwrap();
    assert_eq!(sim.host(b).unwrap().rx_count, u64::from(n));
    let (up, _) = sim.link_stats(la);
    assert_eq!(up.bytes_delivered, u64::from(n) * 1514);
    assert_eq!(up.queue_drops, 0);
    // Bottleneck-free 10 Gbps: about 1.211 µs per frame.
    let ideal = u64::from(n) * 1211;
    assert!(
        done.as_nanos() >= ideal && done.as_nanos() < ideal * 11 / 10,
        "{done:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn arbitrary_frames_never_panic(
        frames in proptest::collection::vec(
            (0usize..3, proptest::collection::vec(any::<u8>(), 0..200)), 1..60),
        seed: u64,
    ) {
        let mut sim: Sim<Toy> = Sim::new(seed);
        let s = sim.add_switch();
        let imp = Impairment::default().with_corrupt(0.5).with_duplicate(0.1);
        let cfg = LinkConfig::new(GBPS, Duration::from_micros(1))
            .with_queue(2000)
            .with_ecn(0)
            .with_impairment(imp);
        let hosts: Vec<NodeId> = (1..=3).map(|i| sim.add_host(Toy::new(mac(i)))).collect();
        for &h in &hosts {
            sim.connect(h, s, cfg.clone()).unwrap();
        }
        for (from, mut f) in frames {
            // Sometimes make it an ECT IPv4 frame so the marker parses deeper.
            if f.len() > 34 && f[0] & 2 == 0 {
                f[12] = 0x08;
                f[13] = 0x00;
                f[14] = 0x45;
                f[15] |= 0x01;
            }
            sim.host_mut(hosts[from]).unwrap().outbox.push_back(f);
        }
        sim.run_for(Duration::from_millis(1));
        let st = sim.switch_stats(s).unwrap();
        prop_assert!(st.received >= st.forwarded + st.flooded);
    }
}

/// Counts (in a shared cell) how often the simulator asks it for frames; never sends.
struct Idle(std::rc::Rc<std::cell::Cell<u64>>);

impl Host for Idle {
    fn handle_frame(&mut self, _now: Instant, _frame: &[u8]) {}
    fn poll_transmit(&mut self, _now: Instant, _buf: &mut [u8]) -> Option<usize> {
        self.0.set(self.0.get() + 1);
        None
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn handle_timeout(&mut self, _now: Instant) {}
}

#[test]
fn an_event_polls_only_the_hosts_it_reaches_so_idle_hosts_cost_nothing() {
    let mut sim: Sim<Box<dyn Host>> = Sim::new(5);
    let a = sim.add_host(Box::new(Toy::new(mac(1)).sending(mac(2), 1000, 100)));
    let b = sim.add_host(Box::new(Toy::new(mac(2))));
    sim.connect(a, b, LinkConfig::new(GBPS, Duration::from_micros(1)))
        .unwrap();
    let polls = std::rc::Rc::new(std::cell::Cell::new(0));
    let idle: Vec<NodeId> = (0..50)
        .map(|_| sim.add_host(Box::new(Idle(polls.clone()))))
        .collect();
    let deadline = sim.now() + Duration::from_millis(10);
    let mut touched_idle = 0;
    let _ = sim.run_until(deadline, |_, hosts| {
        hosts.for_each_touched(|id, _| touched_idle += u64::from(idle.contains(&id)));
        false
    });
    assert!(sim.stats().events >= 2000, "the pair exchanged frames");
    assert_eq!(touched_idle, 0, "no frame or timer reached an idle host");
    // Each idle host is asked once, when added, and never again per event.
    assert_eq!(polls.get(), 50);
}
