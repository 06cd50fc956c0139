//! Tail loss probes (RFC 8985 7) in the simulator: the last segment of an RPC, which no
//! later segment can reveal by duplicate ACKs, is lost on purpose (exactly that frame),
//! and the probe, not the retransmission timeout, repairs it.

mod support;

use std::time::Duration;

use sluice_tcp::Counters;
use support::lossy::{armed_rpc, RTO_MIN};

/// A client and an echo server 10 us apart. 20 warm-up RPCs, then the server loses its
/// next `drop` data frames (the response, then its repair), and one more RPC runs, then two
/// clean ones. Returns the latency of the lossy RPC and the server's counters.
fn rpc_with_tail_loss(rack_tlp: bool, drop: u32) -> (Duration, Counters) {
    let (latency, counters, dropped) = armed_rpc(7, 64, rack_tlp, |s| s.drop_data = drop);
    assert_eq!(dropped, drop, "the frames meant to be lost were");
    (latency, counters)
}

#[test]
fn rfc8985_7_a_lost_last_segment_is_repaired_by_the_probe_in_about_a_probe_timeout() {
    let (clean, k0) = rpc_with_tail_loss(true, 0);
    assert_eq!(k0.tlp_probes, 0, "no probe on a clean path: {k0:?}");
    let (lossy, k) = rpc_with_tail_loss(true, 1);
    eprintln!("clean RPC {clean:?}, its last segment lost {lossy:?}");
    // SRTT + PTO (2 SRTT) and the probe's one-way trip: well under 10 SRTT, and far below
    // the 5 ms RTO that repaired it before.
    assert!(
        lossy > clean * 2 && lossy < clean * 6,
        "lossy RPC took {lossy:?}, a clean one {clean:?}"
    );
    assert_eq!((k.tlp_probes, k.timeouts), (1, 0), "{k:?}");
    // The clean RPCs after it acknowledged data sent after the probe with no D-SACK: the
    // probe repaired a loss, and congestion control heard of it.
    assert_eq!(k.tlp_recoveries, 1, "{k:?}");
}

#[test]
fn rfc8985_7_3_a_lost_probe_leaves_the_repair_to_the_rto() {
    let (lossy, k) = rpc_with_tail_loss(true, 2);
    assert!(
        lossy >= RTO_MIN && lossy < RTO_MIN + Duration::from_millis(1),
        "took {lossy:?}: the RTO after the probe repairs it"
    );
    assert_eq!((k.tlp_probes, k.timeouts), (1, 1), "{k:?}");
    assert_eq!(k.tlp_recoveries, 0, "the timeout ended the probe: {k:?}");
}

#[test]
fn without_rack_tlp_a_lost_last_segment_waits_for_the_rto() {
    let (lossy, k) = rpc_with_tail_loss(false, 1);
    assert!(lossy >= RTO_MIN, "took {lossy:?}");
    assert_eq!((k.tlp_probes, k.timeouts), (0, 1), "{k:?}");
}
