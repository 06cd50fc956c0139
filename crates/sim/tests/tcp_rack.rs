//! RACK (RFC 8985 6) in the simulator: a loss found by time with fewer SACKed segments
//! than DupThresh, and reordering within the reordering window left alone.

mod support;

use std::time::Duration;

use sluice_tcp::Counters;
use support::lossy::{armed_rpc, Lossy, RTO_MIN};

/// 2,000-byte echo RPCs (two segments each way) between a client and a server 10 us apart:
/// 20 warm-up RPCs, then `arm` sets the server's impairment for the 21st, then two clean
/// ones. Returns the 21st's latency and the server's counters.
fn rpc(rack_tlp: bool, arm: impl Fn(&mut Lossy)) -> (Duration, Counters) {
    let (latency, counters, _) = armed_rpc(11, 2000, rack_tlp, arm);
    (latency, counters)
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
