//! A bulk sender under 1 % random loss keeps near the goodput an AIMD sender can have at
//! that loss (Mathis et al., "The Macroscopic Behavior of the TCP Congestion Avoidance
//! Algorithm", 1997: about 1.22 x MSS / (RTT x sqrt p)), with the engine's configuration
//! (sluice_engine::setup::core_config) and its large segments cut to the MTU by the NIC.
//!
//! The lab's loss experiment (`sluice experiment loss`) runs the same pairing through the
//! switch; this is its deterministic counterpart (docs/notes/issue-18/loss-sender.md).

mod support;

use std::time::Duration;

use sluice_apps::BulkTransfer;
use sluice_sim::{Impairment, LinkConfig, OffloadNic, Sim};
use sluice_tcp::{AckPolicy, Config, Stack};
use support::config;

/// The link: 2 Gbit/s (above what the lab's veth path carries), 50 us each way.
const RATE_BPS: u64 = 2_000_000_000;
const ONE_WAY: Duration = Duration::from_micros(50);
/// Payload bytes of a segment at the default MTU (1500 - 20 - 20 - 12 of timestamps).
const MSS: f64 = 1448.0;
const LOSS: f64 = 0.01;
const BYTES: u64 = 8 << 20;

/// The engine's core configuration as far as the sender's loss recovery goes.
fn engine_like(n: u8, rack_tlp: bool) -> Config {
    let mut c = config(n);
    c.rx_buffer = 4 << 20;
    c.tx_buffer = 4 << 20;
    c.ooo_intervals = 64;
    c.sack_scoreboard = 64;
    c.ack_policy = AckPolicy::Delayed {
        segments: 2,
        timeout: Duration::from_micros(100),
    };
    c.rack_tlp = rack_tlp;
    c
}

/// Goodput, bit/s, of one bulk transfer with `LOSS` on the link (both directions), and the
/// sender's mean SRTT, usec, over its congestion-control iterations.
fn goodput(seed: u64, rack_tlp: bool) -> (f64, f64) {
    let mut sender = engine_like(1, rack_tlp);
    sender.tso_max_payload = 65_000;
    sender.tx_checksum_offload = true;
    let mut sim = Sim::new(seed);
    let a = sim.add_host(OffloadNic::new(Stack::new(sender).unwrap()));
    let b = sim.add_host(OffloadNic::new(
        Stack::new(engine_like(2, rack_tlp)).unwrap(),
    ));
    let link = LinkConfig::new(RATE_BPS, ONE_WAY)
        .with_queue(1 << 20)
        .with_impairment(Impairment::default().with_loss(LOSS));
    sim.connect(a, b, link).unwrap();
    let mut t = BulkTransfer::new(BYTES, 42);
    t.listen(sim.host_mut(b).unwrap(), 5001).unwrap();
    let start = sim.now();
    let to = sim.host(b).unwrap().config().ip;
    t.connect(start, sim.host_mut(a).unwrap(), to, 5001)
        .unwrap();
    let r = sim.run_until(start + Duration::from_secs(60), |now, hosts| {
        let (s, r) = hosts.get_pair_mut(a, b).expect("two hosts");
        t.step(now, s, r);
        t.done()
    });
    assert!(r.is_ok() && t.verified(), "{r:?}, error {:?}", t.error);
    let took = t.finished_at.unwrap() - start;
    let k = sim.host(a).unwrap().counters();
    assert!(k.cc_iterations > 0, "{k:?}");
    let srtt_us = k.cc_srtt_us_sum as f64 / k.cc_iterations as f64;
    (BYTES as f64 * 8.0 / took.as_secs_f64(), srtt_us)
}

/// Mathis's bound for this path, bit/s: 1.41 Gbit/s at 100 us and 1 %.
fn mathis_bps() -> f64 {
    let rtt = 2.0 * ONE_WAY.as_secs_f64();
    1.22 * MSS * 8.0 / (rtt * LOSS.sqrt())
}

#[test]
fn a_bulk_sender_at_one_percent_loss_keeps_most_of_the_mathis_rate() {
    // Measured 1.29-1.42 Gbit/s with RACK-TLP and 1.34-1.48 without (0.91-1.05 of the
    // bound); the issue-5 core did as well on this path. A sender that cuts its window
    // more than once per loss, or stalls on timeouts (the core's default 200 ms rto_min
    // without RACK-TLP: 0.27-0.45 Gbit/s on two of three seeds), falls below 0.7.
    let floor = 0.7 * mathis_bps();
    for rack_tlp in [true, false] {
        for seed in 1..=3 {
            let (bps, srtt_us) = goodput(seed, rack_tlp);
            eprintln!(
                "rack_tlp {rack_tlp} seed {seed}: {:.0} Mbit/s (Mathis {:.0}), mean SRTT \
                 {srtt_us:.0} us",
                bps / 1e6,
                mathis_bps() / 1e6
            );
            // The bound is for the path's RTT: the sender's own (the counter the lab's loss
            // experiment reports) is that, the window being too small to queue.
            let rtt_us = 2.0 * ONE_WAY.as_secs_f64() * 1e6;
            assert!(
                srtt_us >= rtt_us && srtt_us < 2.0 * rtt_us,
                "rack_tlp {rack_tlp} seed {seed}: mean SRTT {srtt_us:.0} us"
            );
            assert!(
                bps >= floor,
                "rack_tlp {rack_tlp} seed {seed}: {:.0} Mbit/s < 0.7 x Mathis ({:.0})",
                bps / 1e6,
                floor / 1e6
            );
        }
    }
}
