//! Several connections and hosts at once: simultaneous transfers in both directions on one
//! link (ACKs ride on data), many-to-one through a switch, and the delayed-ACK policy.

mod support;

use std::time::Duration;

use sluice_apps::BulkTransfer;
use sluice_sim::{Impairment, LinkConfig, Sim};
use sluice_tcp::{AckPolicy, Stack};
use support::*;

const MB: u64 = 1 << 20;

#[test]
fn simultaneous_transfers_in_both_directions() {
    let (mut sim, a, b, _) = pair(31, Impairment::default().with_loss(0.002));
    let mut ab = BulkTransfer::new(8 * MB, 1);
    let mut ba = BulkTransfer::new(8 * MB, 2);
    ab.listen(sim.host_mut(b).unwrap(), 5001).unwrap();
    ba.listen(sim.host_mut(a).unwrap(), 5002).unwrap();
    let now = sim.now();
    ab.connect(now, sim.host_mut(a).unwrap(), B_IP, 5001)
        .unwrap();
    ba.connect(now, sim.host_mut(b).unwrap(), A_IP, 5002)
        .unwrap();
    let r = sim.run_until(now + Duration::from_secs(5), |now, hosts| {
        let (x, y) = hosts.get_pair_mut(a, b).unwrap();
        ab.step(now, x, y);
        ba.step(now, y, x);
        ab.done() && ba.done()
    });
    assert!(r.is_ok(), "{r:?} {:?} {:?}", ab.error, ba.error);
    assert!(ab.verified() && ba.verified());
}

#[test]
fn four_senders_to_one_receiver_through_a_switch() {
    let mut sim: Sim<Stack> = Sim::new(77);
    let sw = sim.add_switch();
    // Fixed receive windows (no autotuning), large enough together to overflow the queue.
    let mut rc = config(1);
    rc.rx_buffer_initial = rc.rx_buffer;
    let receiver = sim.add_host(Stack::new(rc).unwrap());
    // The receiver's port is the bottleneck: 10 Gbps with a 512 KB queue.
    sim.connect(
        receiver,
        sw,
        LinkConfig::new(10_000_000_000, Duration::from_micros(5)).with_queue(512 << 10),
    )
    .unwrap();
    let mut senders = Vec::new();
    for n in 2..6u8 {
        let h = sim.add_host(Stack::new(config(n)).unwrap());
        sim.connect(
            h,
            sw,
            LinkConfig::new(10_000_000_000, Duration::from_micros(5)).with_queue(4 << 20),
        )
        .unwrap();
        senders.push(h);
    }
    let mut transfers: Vec<BulkTransfer> = Vec::new();
    let now = sim.now();
    for (i, &h) in senders.iter().enumerate() {
        let mut t = BulkTransfer::new(4 * MB, 100 + i as u64);
        t.listen(sim.host_mut(receiver).unwrap(), 6000 + i as u16)
            .unwrap();
        t.connect(now, sim.host_mut(h).unwrap(), A_IP, 6000 + i as u16)
            .unwrap();
        transfers.push(t);
    }
    let r = sim.run_until(now + Duration::from_secs(10), |now, hosts| {
        for (t, &h) in transfers.iter_mut().zip(&senders) {
            let (s, r) = hosts.get_pair_mut(h, receiver).unwrap();
            t.step(now, s, r);
        }
        transfers.iter().all(BulkTransfer::done)
    });
    assert!(r.is_ok(), "{r:?}");
    for t in &transfers {
        assert!(t.verified(), "{:?}", t.error);
    }
    // The shared bottleneck overflowed and TCP recovered from its drops.
    let drops: u64 = senders
        .iter()
        .map(|&h| sim.host(h).unwrap().counters().retransmitted_bytes)
        .sum();
    assert!(
        drops > 0,
        "incast through a 512 KB queue should have lost frames"
    );
}

#[test]
fn delayed_acks_halve_the_ack_count() {
    let run = |policy: AckPolicy| {
        let mut cb = config(2);
        cb.ack_policy = policy;
        let (mut sim, a, b, l) = pair_with(5, Impairment::default(), config(1), cb);
        let (t, r) = bulk(&mut sim, a, b, 4 * MB, Duration::from_secs(1));
        assert!(r.is_ok() && t.verified(), "{policy:?}: {r:?}");
        sim.link_stats(l).1.delivered // frames from receiver to sender: the ACKs
    };
    let every = run(AckPolicy::EverySegment);
    let delayed = run(AckPolicy::Delayed {
        segments: 2,
        timeout: Duration::from_millis(1),
    });
    assert!(every > 2800, "one ACK per segment: {every}");
    assert!(
        delayed * 10 < every * 6,
        "every 2nd segment: {delayed} ACKs vs {every}"
    );
}

#[test]
fn a_receiver_that_stops_reading_closes_the_window_and_the_transfer_resumes() {
    // Receiver buffer 64 KB; it reads nothing for 200 ms, so the window closes and the sender
    // probes the zero window until the reader resumes.
    let mut cb = config(2);
    cb.rx_buffer = 64 * 1024;
    let (mut sim, a, b, _) = pair_with(9, Impairment::default(), config(1), cb);
    let mut t = BulkTransfer::new(2 * MB, 3);
    t.listen(sim.host_mut(b).unwrap(), 5001).unwrap();
    let start = sim.now();
    t.connect(start, sim.host_mut(a).unwrap(), B_IP, 5001)
        .unwrap();
    let r = sim.run_until(start + Duration::from_secs(30), |now, hosts| {
        let (s, r) = hosts.get_pair_mut(a, b).unwrap();
        if now < start + Duration::from_millis(200) {
            // Only the sender runs: it fills the window and then must wait.
            t.step_sender_only(s);
        } else {
            t.step(now, s, r);
        }
        t.done()
    });
    assert!(r.is_ok() && t.verified(), "{r:?} {:?}", t.error);
    let c = sim.host(a).unwrap().counters();
    assert!(
        c.window_probes > 0,
        "the sender probed the zero window: {c:?}"
    );
}
