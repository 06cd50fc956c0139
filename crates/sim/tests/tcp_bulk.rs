//! Bulk transfers between two TCP cores over the simulator, verified by SHA-256.

mod support;

use std::time::Duration;

use sluice_sim::Impairment;
use support::*;

#[test]
fn one_megabyte_clean() {
    let (mut sim, a, b, _) = pair(1, Impairment::default());
    let (t, r) = bulk(&mut sim, a, b, 1 << 20, Duration::from_secs(2));
    assert!(
        r.is_ok(),
        "{r:?} sent={} recv={} err={:?}",
        t.sender.bytes,
        t.receiver.bytes,
        t.error
    );
    assert!(t.verified());
}
