//! RACK (RFC 8985 6) in the simulator: a loss found by time with fewer SACKed segments
//! than DupThresh, and reordering within the reordering window left alone.

mod support;

use std::net::Ipv4Addr;
use std::time::Duration;

use sluice_apps::RpcEcho;
use sluice_sim::{LinkConfig, Sim};
use sluice_tcp::{Counters, Stack};
use support::lossy::Lossy;
use support::*;

const RTO_MIN: Duration = Duration::from_millis(5);

/// 2,000-byte echo RPCs (two segments each way) between a client (host 1) and a server
/// (host 2) 10 us apart: 20 warm-up RPCs, then `arm` sets the server's impairment for
/// the 21st, then two clean ones. Returns the 21st's latency and the server's counters.
fn rpc(rack_tlp: bool, arm: impl Fn(&mut Lossy)) -> (Duration, Counters) {
    let mut sim: Sim<Lossy> = Sim::new(11);
    let mut add = |n| {
        let mut c = config(n);
        c.rto_min = RTO_MIN;
        c.rack_tlp = rack_tlp;
        sim.add_host(Lossy::new(Stack::new(c).unwrap()))
    };
    let (a, b) = (add(1), add(2));
    sim.connect(
        a,
        b,
        LinkConfig::new(10_000_000_000, Duration::from_micros(10)),
    )
    .unwrap();
    let mut rpc = RpcEcho::new(23, 2000);
    rpc.listen(&mut sim.host_mut(b).unwrap().stack, 7).unwrap();
    let now = sim.now();
    rpc.connect(
        now,
        &mut sim.host_mut(a).unwrap().stack,
        Ipv4Addr::new(10, 0, 0, 2),
        7,
    )
    .unwrap();
    let mut armed = false;
    let deadline = sim.now() + Duration::from_secs(5);
    sim.run_until(deadline, |now, hosts| {
        let (c, s) = hosts.get_pair_mut(a, b).expect("two hosts");
        if !armed && rpc.latencies.len() == 20 {
            arm(s);
            armed = true;
        }
        rpc.step(now, &mut c.stack, &mut s.stack);
        rpc.done()
    })
    .expect("the RPCs complete");
    assert!(rpc.error.is_none(), "{:?}", rpc.error);
    let server = sim.host(b).unwrap();
    (rpc.latencies[20], server.stack.counters().clone())
}

#[test]
fn rfc8985_6_2_a_loss_with_one_segment_sacked_after_it_is_found_by_time() {
    let (clean, k0) = rpc(true, |_| {});
    assert_eq!((k0.rack_losses, k0.retransmitted_bytes), (0, 0), "{k0:?}");
    // The first segment of the response is lost; the second is SACKed, one segment, far
    // below DupThresh (3), and no probe may go with SACKed data outstanding.
    let (lossy, k) = rpc(true, |s| s.drop_data = 1);
    eprintln!("clean RPC {clean:?}, first response segment lost {lossy:?}");
    assert_eq!(
        (k.rack_losses, k.timeouts, k.tlp_probes),
        (1, 0, 0),
        "{k:?}"
    );
    assert!(
        k.rack_reo_timeouts >= 1,
        "found when the reordering timer fired: {k:?}"
    );
    assert!(
        lossy < clean * 4,
        "repaired in about two round trips: {lossy:?}"
    );
}

#[test]
fn without_rack_the_same_loss_waits_for_the_rto() {
    let (lossy, k) = rpc(false, |s| s.drop_data = 1);
    assert!(lossy >= RTO_MIN, "took {lossy:?}");
    assert_eq!((k.timeouts, k.rack_losses), (1, 0), "{k:?}");
}

#[test]
fn rfc8985_6_2_reordering_within_the_reordering_window_is_not_retransmitted() {
    // The response's first segment arrives after its second, a frame's time later.
    let (_, k) = rpc(true, |s| s.hold_data = 1);
    assert_eq!(
        (
            k.rack_losses,
            k.retransmitted_bytes,
            k.fast_retransmits,
            k.timeouts
        ),
        (0, 0, 0, 0),
        "{k:?}"
    );
}
