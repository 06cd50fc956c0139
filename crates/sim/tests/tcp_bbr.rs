//! BBR (crates/tcp/src/cc/bbr.rs) against the policies that read loss as congestion, in
//! virtual time: what it is for (a path that drops packets at random) and what it must not
//! do (fill a deep queue, starve a second flow).

mod support;

use std::time::Duration;

use sluice_apps::BulkTransfer;
use sluice_sim::{Impairment, LinkConfig, Sim};
use sluice_tcp::cc::Algorithm;
use sluice_tcp::{Config, Counters, Stack};
use support::*;

const MIB: u64 = 1 << 20;

/// The engine's configuration for a real network with `algorithm`.
fn engine(n: u8, algorithm: Algorithm) -> Config {
    let c = config(n);
    let mut e = sluice_engine::setup::core_config(c.mac, c.ip, 1500);
    e.seed = c.seed;
    // Virtual time from zero: a run is the same every time.
    e.clock_epoch = std::time::Duration::ZERO;
    e.congestion_control = algorithm;
    e
}

struct Run {
    mbps: f64,
    sender: Counters,
    max_queue: u64,
}

/// 32 MiB engine to engine over `rate` bit/s, 20 us each way, a 4 MiB queue, `loss` on the
/// data direction.
fn transfer(algorithm: Algorithm, rate: u64, loss: f64, seed: u64) -> Run {
    let bytes = 32 * MIB;
    let mut sim = Sim::new(seed);
    let a = sim.add_host(Stack::new(engine(1, algorithm)).unwrap());
    let b = sim.add_host(Stack::new(engine(2, algorithm)).unwrap());
    let link = |loss| {
        LinkConfig::new(rate, Duration::from_micros(20))
            .with_queue(4 << 20)
            .with_impairment(Impairment::default().with_loss(loss))
    };
    let ab = sim.connect_asymmetric(a, b, link(loss), link(0.0)).unwrap();
    let mut t = BulkTransfer::new(bytes, 42);
    t.listen(sim.host_mut(b).unwrap(), 5001).unwrap();
    let start = sim.now();
    t.connect(start, sim.host_mut(a).unwrap(), B_IP, 5001)
        .unwrap();
    let r = sim.run_until(start + Duration::from_secs(20), |now, hosts| {
        let (s, r) = hosts.get_pair_mut(a, b).expect("two hosts");
        t.step(now, s, r);
        t.done()
    });
    assert!(
        r.is_ok() && t.verified() && t.receiver.bytes == bytes,
        "{algorithm} at {loss} loss: {r:?}, {:?}",
        t.error
    );
    let took = t.finished_at.unwrap() - start;
    Run {
        mbps: bytes as f64 * 8.0 / took.as_secs_f64() / 1e6,
        sender: sim.host(a).unwrap().counters().clone(),
        max_queue: sim.link_stats(ab).0.max_queue_bytes as u64,
    }
}

#[test]
fn bbr_keeps_the_link_busy_under_random_loss_where_loss_based_policies_cannot() {
    let rate = 2_000_000_000;
    for loss in [0.01, 0.05] {
        let bbr = transfer(Algorithm::Bbr, rate, loss, 3);
        let dctcp = transfer(Algorithm::Dctcp, rate, loss, 3);
        let cubic = transfer(Algorithm::Cubic, rate, loss, 3);
        println!(
            "{:.0} % loss, 2 Gbit/s, 40 us RTT: bbr {:.0} Mbit/s ({} timeouts), dctcp {:.0}, \
             cubic {:.0}",
            loss * 100.0,
            bbr.mbps,
            bbr.sender.timeouts,
            dctcp.mbps,
            cubic.mbps
        );
        // Goodput is the link less the loss and the headers: at most ~0.96 x (1 - loss).
        assert!(
            bbr.mbps > 0.8 * 2000.0 * (1.0 - loss),
            "{loss}: bbr {:.0} Mbit/s",
            bbr.mbps
        );
        let best = dctcp.mbps.max(cubic.mbps);
        if loss >= 0.05 {
            // Where the loss-based policies' windows shrink to a few segments.
            assert!(
                bbr.mbps > 1.2 * best,
                "{loss}: bbr {:.0} vs {best:.0}",
                bbr.mbps
            );
        } else {
            assert!(
                bbr.mbps > 0.97 * best,
                "{loss}: bbr {:.0} vs {best:.0}",
                bbr.mbps
            );
        }
    }
}

#[test]
fn bbr_does_not_fill_a_deep_queue() {
    // 1 Gbit/s, 40 us RTT: a BDP of 5 KB. A loss-based policy fills the 4 MiB queue up to
    // the receive window; BBR's window is 2 BDP plus three 64 KB sends (the budget for the
    // device's aggregates), so its queue stays within about 200 KB.
    let bbr = transfer(Algorithm::Bbr, 1_000_000_000, 0.0, 5);
    let cubic = transfer(Algorithm::Cubic, 1_000_000_000, 0.0, 5);
    println!(
        "1 Gbit/s, no loss: bbr {:.0} Mbit/s, max queue {} KB; cubic {:.0} Mbit/s, max queue \
         {} KB",
        bbr.mbps,
        bbr.max_queue / 1024,
        cubic.mbps,
        cubic.max_queue / 1024
    );
    assert!(bbr.mbps > 850.0, "{:.0}", bbr.mbps);
    let budget = 2 * 5_000 + 3 * 65_536 + 10 * 1_500;
    assert!(
        bbr.max_queue < budget,
        "max queue {} B, over the window's budget {budget} B",
        bbr.max_queue
    );
}
