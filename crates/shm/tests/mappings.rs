//! A region costs mappings for the sockets whose rings are mapped, not for `max_sockets`
//! (issue 23). One test in this binary: it counts the process's mappings.

use sluice_shm::map_budget::mappings_in_use;
use sluice_shm::{Dir, Layout, Region};

/// Mappings a region with `max_sockets` costs with `used` sockets' rings mapped.
fn cost(max_sockets: u32, used: u32) -> (Region, usize) {
    let before = mappings_in_use();
    let layout = Layout {
        max_sockets,
        ..Layout::default()
    };
    let region = Region::create("sluice-mappings-test", layout).unwrap();
    for s in 0..used {
        region.map_rings(s).unwrap();
    }
    let after = mappings_in_use();
    (region, after.saturating_sub(before))
}

#[test]
#[cfg_attr(miri, ignore = "maps a memfd, which Miri cannot")]
fn a_region_costs_mappings_for_the_sockets_it_uses_only() {
    let (r, fresh_small) = cost(64, 0);
    drop(r);
    let (r, fresh_large) = cost(MAX, 0);
    drop(r);
    let (r, three) = cost(MAX, 3);
    // A ring is mapped on first use, the same bytes through both views.
    assert!(r.rings_mapped(2) && !r.rings_mapped(3));
    let ring = r.ring(7, Dir::Tx).expect("mapped on first use");
    ring.write(8192 * 32 - 5, b"wrap-around");
    let mut out = [0u8; 6];
    r.ring(7, Dir::Tx).unwrap().read(0, &mut out);
    assert_eq!(&out, b"around");
    assert!(r.rings_mapped(7));
    assert!(r.ring(MAX, Dir::Rx).is_none(), "out of range");
    assert!(r.map_rings(MAX).is_err());
    drop(r);
    let (r, all) = cost(1024, 1024);
    drop(r);
    println!(
        "mappings per region: fresh (64 sockets) {fresh_small}, fresh ({MAX} sockets) \
         {fresh_large}, 3 sockets used {three}; every ring of 1,024 sockets mapped (the \
         cost of each region before issue 23): {all}"
    );
    assert!(fresh_small <= 4, "{fresh_small}");
    assert_eq!(fresh_small, fresh_large, "the cost grows with max_sockets");
    assert!(three <= fresh_large + 3 * 4, "{three}");
    assert!(
        all >= 2 * 1024,
        "{all}: the old layout's cost, for the record"
    );
}

/// A large `max_sockets`.
const MAX: u32 = 4096;
