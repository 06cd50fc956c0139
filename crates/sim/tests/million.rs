//! Issue 18 item 3 at CI size: one core holds 20,000 idle connections from stateless
//! simulated peers within the memory budget of docs/notes/issue-18/million.md, holds no
//! payload storage for them, and still serves an echo workload on more connections.
//! (`sluice experiment million` runs the million; no timing is asserted here.)

use sluice_sim::million::{self, MillionConfig};

/// Resident bytes per idle connection the note documents as the budget.
const BUDGET_BYTES_PER_CONNECTION: f64 = 2048.0;

#[test]
fn twenty_thousand_idle_connections_fit_the_budget_and_echo_still_works() {
    let cfg = MillionConfig {
        conns: 20_000,
        active: 4,
        rounds: 50,
        seed: 7,
    };
    let r = million::run(&cfg).expect("the run completes");
    assert_eq!(r.established, 20_000, "every connection established");
    let (rx, tx, pooled) = r.ring_bytes;
    assert_eq!(
        (rx, tx, pooled),
        (0, 0, 0),
        "idle connections hold no payload storage"
    );
    assert_eq!(r.echoes, 4 * 50, "every echo came back");
    assert!(r.segments >= 2 * r.echoes, "a request and a reply per echo");
    if r.rss_bytes == 0 {
        println!("skip: no /proc/self/status here, resident memory not measured");
        return;
    }
    let per = r.bytes_per_connection();
    println!("{} B per idle connection ({} B resident)", per, r.rss_bytes);
    assert!(
        per <= BUDGET_BYTES_PER_CONNECTION,
        "{per} B per connection, over the budget of {BUDGET_BYTES_PER_CONNECTION}"
    );
}
