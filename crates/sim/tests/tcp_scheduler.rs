//! The flow scheduler (Carousel timing wheel, flextoe.txt 3.4) end to end in the simulator:
//! a programmed rate is enforced within 5 %, two rates at once each within 5 %, and the
//! scheduler is work conserving (an unlimited connection takes the capacity a rate-limited
//! one leaves). Exact in virtual time; run with `--nocapture` for the figures.
//!
//! Rates are programmed in bits per second of Ethernet frames handed to the device (what the
//! simulated link serializes). Each test measures, over a steady interval after a warm-up,
//! (a) the receiver application's goodput and compares it with the rate x payload / frame
//! (1448 bytes of payload in a 1514-byte frame with timestamps at MTU 1500), and (b) the
//! bytes the link delivered from the sender, against the rate itself.

mod support;

use std::time::Duration;

use sluice_apps::BulkTransfer;
use sluice_sim::{Impairment, NodeId, Sim};
use sluice_tcp::{Instant, Stack};
use support::*;

/// Payload over frame bytes of a full segment: 1448 / (14 + 20 + 32 + 1448).
const PAYLOAD_SHARE: f64 = 1448.0 / 1514.0;
const WARMUP: Duration = Duration::from_millis(10);
const MEASURE: Duration = Duration::from_millis(40);

struct Measured {
    /// Receiver goodput per connection, bit/s.
    goodput: Vec<f64>,
    /// Bytes the link delivered from the sender (all connections and ACKs), bit/s.
    wire: f64,
}

/// Bulk connections from A to B over the 10 Gbit/s pair, connection `i` rate-limited to
/// `rates[i]` bit/s (0: unlimited). Measured over [WARMUP, WARMUP + MEASURE].
fn run(seed: u64, rates: &[u64]) -> Measured {
    let (mut sim, a, b, link) = pair(seed, Impairment::default());
    let mut transfers: Vec<BulkTransfer> = (0..rates.len())
        .map(|i| {
            let mut t = BulkTransfer::new(1 << 40, 100 + i as u64);
            t.listen(sim.host_mut(b).unwrap(), 5001 + i as u16).unwrap();
            let now = sim.now();
            t.connect(now, sim.host_mut(a).unwrap(), B_IP, 5001 + i as u16)
                .unwrap();
            // Set before the handshake: applies from establishment.
            let conn = t.sender_conn().unwrap();
            sim.host_mut(a).unwrap().set_rate(conn, rates[i]).unwrap();
            t
        })
        .collect();
    let start = sim.now();
    step_until(&mut sim, &mut transfers, a, b, start + WARMUP);
    let before: Vec<u64> = transfers.iter().map(|t| t.receiver.bytes).collect();
    let _ = sim.take_link_stats(link);
    step_until(&mut sim, &mut transfers, a, b, start + WARMUP + MEASURE);
    let (ab, _) = sim.take_link_stats(link);
    let secs = MEASURE.as_secs_f64();
    for (t, &rate) in transfers.iter().zip(rates) {
        assert!(t.error.is_none(), "{:?}", t.error);
        let info = sim.host(a).unwrap().info(t.sender_conn().unwrap()).unwrap();
        assert_eq!(
            info.rate_bps, rate,
            "the programmed rate is the scheduler's"
        );
    }
    assert_eq!(ab.queue_drops, 0);
    Measured {
        goodput: transfers
            .iter()
            .zip(&before)
            .map(|(t, b)| (t.receiver.bytes - b) as f64 * 8.0 / secs)
            .collect(),
        wire: ab.bytes_delivered as f64 * 8.0 / secs,
    }
}

fn step_until(
    sim: &mut Sim<Stack>,
    transfers: &mut [BulkTransfer],
    a: NodeId,
    b: NodeId,
    until: Instant,
) {
    let _ = sim.run_until(until, |now, hosts| {
        let (s, r) = hosts.get_pair_mut(a, b).unwrap();
        for t in transfers.iter_mut() {
            t.step(now, s, r);
        }
        false
    });
}

fn within(measured: f64, expected: f64, tolerance: f64) -> bool {
    (measured - expected).abs() <= tolerance * expected
}

#[test]
fn the_scheduler_enforces_a_programmed_rate_within_5_percent() {
    let rate = 1_000_000_000;
    let m = run(81, &[rate]);
    let expected = rate as f64 * PAYLOAD_SHARE;
    println!(
        "1 Gbit/s programmed on a 10 Gbit/s link: goodput {:.1} Mbit/s (expected {:.1}), \
         wire {:.1} Mbit/s",
        m.goodput[0] / 1e6,
        expected / 1e6,
        m.wire / 1e6
    );
    assert!(within(m.goodput[0], expected, 0.05), "{:.0}", m.goodput[0]);
    // The frames on the wire (data, plus nothing else from this host but a few ACKs).
    assert!(within(m.wire, rate as f64, 0.05), "{:.0}", m.wire);
}

#[test]
fn two_connections_at_different_rates_each_within_5_percent() {
    let rates = [1_000_000_000, 3_000_000_000];
    let m = run(82, &rates);
    for (i, &rate) in rates.iter().enumerate() {
        let expected = rate as f64 * PAYLOAD_SHARE;
        println!(
            "connection {i} at {} Gbit/s: goodput {:.1} Mbit/s (expected {:.1})",
            rate / 1_000_000_000,
            m.goodput[i] / 1e6,
            expected / 1e6
        );
        assert!(
            within(m.goodput[i], expected, 0.05),
            "{i}: {:.0}",
            m.goodput[i]
        );
    }
    assert!(within(m.wire, 4e9, 0.05), "{:.0}", m.wire);
}

#[test]
fn the_scheduler_is_work_conserving_an_unlimited_connection_takes_the_rest() {
    // 2 Gbit/s paced next to an unlimited connection: the unlimited one fills the link.
    let paced = 2_000_000_000u64;
    let m = run(83, &[paced, 0]);
    let link_goodput = 10e9 * PAYLOAD_SHARE;
    let paced_expected = paced as f64 * PAYLOAD_SHARE;
    println!(
        "2 Gbit/s paced + unlimited on 10 Gbit/s: {:.1} + {:.1} Mbit/s goodput \
         (capacity {:.1}), wire {:.1} Mbit/s",
        m.goodput[0] / 1e6,
        m.goodput[1] / 1e6,
        link_goodput / 1e6,
        m.wire / 1e6
    );
    assert!(
        within(m.goodput[0], paced_expected, 0.05),
        "{:.0}",
        m.goodput[0]
    );
    assert!(
        within(m.goodput[1], link_goodput - paced_expected, 0.05),
        "the unlimited connection uses the remaining capacity: {:.0}",
        m.goodput[1]
    );
    assert!(m.goodput[0] + m.goodput[1] >= 0.95 * link_goodput);
}

#[test]
fn a_rate_of_zero_lifts_the_limit_and_timely_rates_are_paced() {
    // One connection paced at 1 Gbit/s, then set to 0 (unlimited): it takes the link.
    let (mut sim, a, b, _) = pair(84, Impairment::default());
    let mut t = [BulkTransfer::new(1 << 40, 7)];
    t[0].listen(sim.host_mut(b).unwrap(), 5001).unwrap();
    let now = sim.now();
    t[0].connect(now, sim.host_mut(a).unwrap(), B_IP, 5001)
        .unwrap();
    let conn = t[0].sender_conn().unwrap();
    sim.host_mut(a)
        .unwrap()
        .set_rate(conn, 1_000_000_000)
        .unwrap();
    let start = sim.now();
    step_until(&mut sim, &mut t, a, b, start + WARMUP);
    assert!(sim.host(a).unwrap().counters().sched_paced > 0);
    sim.host_mut(a).unwrap().set_rate(conn, 0).unwrap();
    assert_eq!(sim.host(a).unwrap().info(conn).unwrap().rate_bps, 0);
    step_until(&mut sim, &mut t, a, b, start + 2 * WARMUP);
    let before = t[0].receiver.bytes;
    step_until(&mut sim, &mut t, a, b, start + 3 * WARMUP);
    let gbps = (t[0].receiver.bytes - before) as f64 * 8.0 / WARMUP.as_secs_f64() / 1e9;
    println!("after set_rate(0): {gbps:.2} Gbit/s goodput");
    assert!(gbps > 9.0, "{gbps}");

    // TIMELY's rate is what the scheduler enforces.
    let mut ca = config(1);
    ca.congestion_control = sluice_tcp::Algorithm::Timely;
    let (mut sim, a, b, _) = pair_with(85, Impairment::default(), ca, config(2));
    let mut t = [BulkTransfer::new(1 << 40, 8)];
    t[0].listen(sim.host_mut(b).unwrap(), 5001).unwrap();
    let now = sim.now();
    t[0].connect(now, sim.host_mut(a).unwrap(), B_IP, 5001)
        .unwrap();
    let start = sim.now();
    step_until(&mut sim, &mut t, a, b, start + WARMUP);
    let host = sim.host(a).unwrap();
    let info = host.info(t[0].sender_conn().unwrap()).unwrap();
    println!(
        "TIMELY: rate {:.2} Gbit/s, cwnd {} B, paced {} times",
        info.rate_bps as f64 / 1e9,
        info.cwnd,
        host.counters().sched_paced
    );
    assert!(info.rate_bps > 0);
    assert!(host.counters().sched_paced > 0);
}

#[test]
fn raising_a_rate_shortens_the_wait_already_charged_at_the_old_one() {
    // Paced at 10 kbit/s a full frame buys about 1.2 s of waiting; raised to 1 Gbit/s, the
    // connection must send again within microseconds, not after that second.
    let (mut sim, a, b, _) = pair(86, Impairment::default());
    let mut t = [BulkTransfer::new(1 << 40, 9)];
    t[0].listen(sim.host_mut(b).unwrap(), 5001).unwrap();
    let now = sim.now();
    t[0].connect(now, sim.host_mut(a).unwrap(), B_IP, 5001)
        .unwrap();
    let conn = t[0].sender_conn().unwrap();
    sim.host_mut(a).unwrap().set_rate(conn, 10_000).unwrap();
    let start = sim.now();
    step_until(&mut sim, &mut t, a, b, start + WARMUP);
    let crawled = t[0].receiver.bytes;
    sim.host_mut(a)
        .unwrap()
        .set_rate(conn, 1_000_000_000)
        .unwrap();
    step_until(&mut sim, &mut t, a, b, start + 2 * WARMUP);
    let moved = t[0].receiver.bytes - crawled;
    // 1 Gbit/s for WARMUP moves megabytes; the old send time would have allowed nothing.
    let expected = WARMUP.as_secs_f64() * 1e9 / 8.0;
    assert!(
        moved as f64 > 0.5 * expected,
        "{moved} bytes after raising the rate (expected about {expected:.0})"
    );
}
