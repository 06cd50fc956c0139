//! The bounded pool of cold rows (issue 18 item 2): a connection holds out-of-order
//! intervals, a SACK scoreboard and recovery state only while it needs them. With a pool
//! far smaller than the connections that need it at once, every byte still arrives (the
//! rowless ones drop out-of-order data and recover go-back-N), the shortfall is counted,
//! and every row is back in the pool once the connections are done.

mod support;

use std::time::Duration;

use sluice_apps::BulkTransfer;
use sluice_sim::{Impairment, LinkConfig, Sim};
use sluice_tcp::{Config, Stack};
use support::*;

/// Connections at once.
const FLOWS: usize = 16;

/// `FLOWS` bulk transfers of `bytes` from host 1 to host 2 over a link with 1 % loss and
/// 1 % reordering both ways, each host's pool `rows` rows (None: the default). Returns
/// each host's `cold_pool_empty`, the most rows it held at once, and the rows still held
/// once all are done and closed.
fn flows(rows: Option<usize>, bytes: u64, seed: u64) -> [(u64, usize, usize); 2] {
    let cfg = |n: u8| -> Config {
        let mut c = config(n);
        c.cold_pool_rows = rows;
        c
    };
    let mut sim: Sim<Stack> = Sim::new(seed);
    let a = sim.add_host(Stack::new(cfg(1)).unwrap());
    let b = sim.add_host(Stack::new(cfg(2)).unwrap());
    let imp = Impairment::default()
        .with_loss(0.01)
        .with_reorder(0.01, Duration::from_micros(50));
    let link = LinkConfig::new(10_000_000_000, Duration::from_micros(10))
        .with_queue(4 << 20)
        .with_impairment(imp);
    sim.connect(a, b, link).unwrap();
    let mut ts: Vec<BulkTransfer> = (0..FLOWS)
        .map(|i| {
            let mut t = BulkTransfer::new(bytes, 300 + i as u64);
            t.listen(sim.host_mut(b).unwrap(), 7000 + i as u16).unwrap();
            t
        })
        .collect();
    let now = sim.now();
    for (i, t) in ts.iter_mut().enumerate() {
        t.connect(now, sim.host_mut(a).unwrap(), B_IP, 7000 + i as u16)
            .unwrap();
    }
    let mut most = [0usize; 2];
    let r = sim.run_until(now + Duration::from_secs(20), |now, hosts| {
        let (s, r) = hosts.get_pair_mut(a, b).expect("two hosts");
        for t in ts.iter_mut() {
            t.step(now, s, r);
        }
        most[0] = most[0].max(s.cold_pool_usage().0);
        most[1] = most[1].max(r.cold_pool_usage().0);
        ts.iter().all(|t| t.done())
    });
    for (i, t) in ts.iter().enumerate() {
        assert!(
            r.is_ok() && t.verified(),
            "flow {i} of {bytes} B with {rows:?} rows: {r:?}, error {:?}, received {}",
            t.error,
            t.receiver.bytes
        );
    }
    // TIME-WAIT (100 ms in these configurations) and the last ACKs pass.
    sim.run_for(Duration::from_millis(300));
    let out = [(a, most[0]), (b, most[1])].map(|(h, most)| {
        let s = sim.host(h).unwrap();
        (s.counters().cold_pool_empty, most, s.cold_pool_usage().0)
    });
    println!("{rows:?} rows: (pool empty, most held, held at the end) {out:?}");
    out
}

#[test]
fn a_pool_of_two_rows_for_sixteen_lossy_connections_still_delivers_every_byte() {
    let [(empty_a, most_a, held_a), (empty_b, most_b, held_b)] = flows(Some(2), 256 * 1024, 11);
    assert!(
        empty_a > 0 && empty_b > 0,
        "sixteen connections under loss found the two rows free every time"
    );
    assert_eq!((most_a, most_b), (2, 2), "the bound, reached and held");
    assert_eq!((held_a, held_b), (0, 0), "every row back in the pool");
}

#[test]
fn a_pool_of_no_rows_is_go_back_n_without_intervals_and_still_delivers() {
    let [(empty_a, most_a, held_a), (empty_b, most_b, held_b)] = flows(Some(0), 128 * 1024, 12);
    assert!(empty_a > 0 && empty_b > 0, "{empty_a} {empty_b}");
    assert_eq!((most_a, most_b), (0, 0));
    assert_eq!((held_a, held_b), (0, 0));
}

#[test]
fn the_default_pool_is_never_short_and_is_full_again_at_the_end() {
    let [(empty_a, most_a, held_a), (empty_b, most_b, held_b)] = flows(None, 256 * 1024, 13);
    assert_eq!((empty_a, empty_b), (0, 0));
    // Rows were taken (the losses and reordering left both sides out of order) and are
    // returned: fewer than the connections were held at once.
    assert!(most_a > 0 && most_b > 0, "{most_a} {most_b}");
    assert_eq!((held_a, held_b), (0, 0));
}
