//! Bulk transfers between two TCP cores over the simulator, verified by SHA-256, with and
//! without impairment. Each asserts the exact bytes and completion within a virtual-time bound.

mod support;

use std::time::Duration;

use sluice_sim::Impairment;
use support::*;

const MB: u64 = 1 << 20;

/// Runs a transfer and checks it verified within `limit` of virtual time.
fn transfer(
    seed: u64,
    imp: Impairment,
    bytes: u64,
    reverse: bool,
    limit: Duration,
) -> sluice_tcp::Counters {
    let (mut sim, a, b, _) = pair(seed, imp);
    let (from, to) = if reverse { (b, a) } else { (a, b) };
    let start = sim.now();
    let (t, r) = bulk(&mut sim, from, to, bytes, limit);
    assert!(
        r.is_ok(),
        "transfer of {bytes} B did not finish within {limit:?}: {r:?}; sent {} received {} error {:?}",
        t.sender.bytes,
        t.receiver.bytes,
        t.error
    );
    assert!(
        t.verified(),
        "content mismatch: {:?} vs {:?}",
        t.sender.digest,
        t.receiver.digest
    );
    let took = t.finished_at.unwrap() - start;
    assert!(took <= limit);
    sim.host(from).unwrap().counters().clone()
}

#[test]
fn clean_1mb_both_directions() {
    transfer(
        1,
        Impairment::default(),
        MB,
        false,
        Duration::from_millis(50),
    );
    transfer(
        1,
        Impairment::default(),
        MB,
        true,
        Duration::from_millis(50),
    );
}

#[test]
fn clean_64mb_both_directions_near_line_rate() {
    // 64 MB at 10 Gbps is 54 ms of serialization; allow 2x for slow start and headers.
    transfer(
        2,
        Impairment::default(),
        64 * MB,
        false,
        Duration::from_millis(110),
    );
    transfer(
        2,
        Impairment::default(),
        64 * MB,
        true,
        Duration::from_millis(110),
    );
}

#[test]
fn loss_0_1_percent_16mb() {
    let c = transfer(
        3,
        Impairment::default().with_loss(0.001),
        16 * MB,
        false,
        Duration::from_secs(2),
    );
    assert!(
        c.retransmitted_bytes > 0,
        "loss must have caused retransmissions"
    );
    transfer(
        4,
        Impairment::default().with_loss(0.001),
        16 * MB,
        true,
        Duration::from_secs(2),
    );
}

#[test]
fn loss_1_percent_8mb() {
    let c = transfer(
        5,
        Impairment::default().with_loss(0.01),
        8 * MB,
        false,
        Duration::from_secs(10),
    );
    assert!(c.fast_retransmits > 0);
    transfer(
        6,
        Impairment::default().with_loss(0.01),
        8 * MB,
        true,
        Duration::from_secs(10),
    );
}

#[test]
fn loss_5_percent_2mb() {
    transfer(
        7,
        Impairment::default().with_loss(0.05),
        2 * MB,
        false,
        Duration::from_secs(60),
    );
    transfer(
        8,
        Impairment::default().with_loss(0.05),
        2 * MB,
        true,
        Duration::from_secs(60),
    );
}

#[test]
fn reorder_1_percent_16mb() {
    let imp = Impairment::default().with_reorder(0.01, Duration::from_micros(30));
    transfer(9, imp.clone(), 16 * MB, false, Duration::from_secs(2));
    transfer(10, imp, 16 * MB, true, Duration::from_secs(2));
}

#[test]
fn duplicate_1_percent_16mb() {
    let imp = Impairment::default().with_duplicate(0.01);
    transfer(11, imp.clone(), 16 * MB, false, Duration::from_secs(1));
    transfer(12, imp, 16 * MB, true, Duration::from_secs(1));
}

#[test]
fn corruption_1_percent_is_caught_by_checksums() {
    let imp = Impairment::default().with_corrupt(0.01);
    let (mut sim, a, b, link) = pair(13, imp);
    let (t, r) = bulk(&mut sim, a, b, 8 * MB, Duration::from_secs(10));
    assert!(r.is_ok() && t.verified(), "{r:?} {:?}", t.error);
    let (ab, ba) = sim.link_stats(link);
    assert!(ab.corrupted + ba.corrupted > 0);
    let dropped = |c: &sluice_tcp::Counters| c.bad_checksum + c.malformed + c.not_for_us;
    let caught =
        dropped(sim.host(a).unwrap().counters()) + dropped(sim.host(b).unwrap().counters());
    // A flipped bit in the Ethernet destination or source may go unnoticed by IP and TCP
    // checksums only if it lands outside them; everything else is counted as dropped.
    assert!(
        caught > 0 && caught <= ab.corrupted + ba.corrupted,
        "caught {caught}"
    );
}

#[test]
fn handshake_and_teardown_under_30_percent_loss() {
    for seed in 20..40 {
        // The test RTO starts at 100 ms, a tenth of the default; 9 SYN retries give the
        // handshake about the time Linux's 6 retries from 1 s do (~100 s). Neighbors are
        // static so the test measures TCP's handshake, not ARP's luck.
        let mut ca = config(1);
        let mut cb = config(2);
        ca.syn_retries = 9;
        cb.syn_retries = 9;
        let (mut sim, a, b, _) = pair_with(seed, Impairment::default().with_loss(0.3), ca, cb);
        sim.host_mut(a)
            .unwrap()
            .add_neighbor(B_IP, sluice_wire::EthernetAddress([2, 0, 0, 0, 0, 2]));
        sim.host_mut(b)
            .unwrap()
            .add_neighbor(A_IP, sluice_wire::EthernetAddress([2, 0, 0, 0, 0, 1]));
        let (t, r) = bulk(&mut sim, a, b, 64 * 1024, Duration::from_secs(120));
        assert!(
            r.is_ok() && t.verified(),
            "seed {seed}: {r:?} {:?}",
            t.error
        );
        // Both sides finish the teardown: every connection leaves the table.
        sim.run_for(Duration::from_secs(300));
        assert_eq!(
            sim.host(a).unwrap().connection_count(),
            0,
            "seed {seed}: client leaked a connection"
        );
        assert_eq!(
            sim.host(b).unwrap().connection_count(),
            0,
            "seed {seed}: server leaked a connection"
        );
    }
}

#[test]
fn send_buffer_autotuning_grows_with_the_window_and_costs_no_goodput() {
    // The same 64 MB transfer with a fixed 1 MB send buffer and with one that starts at
    // 16 KB: the autotuned one grows (twice the window, up to 1 MB) and finishes within 2 %.
    let run = |initial: usize| {
        let mut a = config(1);
        a.tx_buffer_initial = initial;
        let (mut sim, a, b, _) = pair_with(3, Impairment::default(), a, config(2));
        let start = sim.now();
        let (t, r) = bulk(&mut sim, a, b, 64 * MB, Duration::from_millis(200));
        assert!(r.is_ok() && t.verified(), "{r:?} {:?}", t.error);
        let took = t.finished_at.unwrap() - start;
        (took, sim.host(a).unwrap().counters().tx_buffer_grown)
    };
    let (fixed, fixed_grown) = run(1 << 20);
    let (tuned, tuned_grown) = run(16 * 1024);
    eprintln!("fixed {fixed:?}, autotuned {tuned:?} ({tuned_grown} doublings)");
    assert_eq!(fixed_grown, 0);
    assert!(tuned_grown >= 1, "the buffer grew");
    assert!(
        tuned.as_secs_f64() <= fixed.as_secs_f64() * 1.02,
        "autotuned {tuned:?} vs fixed {fixed:?}"
    );
}
