//! Issue 23, item 4: the engine keeps a budget of memory mappings and refuses an attach
//! that would cross it, for that application only (a clean refusal and a counter), before
//! the kernel's `vm.max_map_count` makes every mapping fail for everyone. One test in this
//! binary: it counts the process's mappings, which tests beside it would disturb.

mod support;

use sluice_shm::map_budget::{mappings_in_use, ATTACH_MAPPINGS};
use sluice_shm::{Layout, Region};
use support::*;

/// Moves a pattern from `app` to the peer over a new connection; returns what arrived.
fn moves_bytes(net: &mut Net, app: &mut Client, port: u16) -> bool {
    let ctx = app.context();
    let listener = net.peer.stack.listen(port, 8).unwrap();
    let (s, _) = app.connect(ctx, PEER_IP, port, &mut || net.peer.pump());
    let c = net
        .peer
        .until("peer accepts", |st| st.accept(listener).ok());
    app.wait_flags(s, sluice_shm::flags::CONNECTED, &mut || net.peer.pump());
    let data = pattern(3 * RING as usize, port as u32);
    app.write_all(ctx, s, &data, &mut || net.peer.pump());
    let got = net.peer.read_at_least(c, data.len());
    got == data
}

#[test]
fn an_attach_over_the_mapping_budget_is_refused_and_others_go_on() {
    // Room for a few attaches beyond what the process has now.
    let budget = mappings_in_use() + 4 * ATTACH_MAPPINGS;
    let mut net = Net::start_with("map-budget", |c| c.map_budget = Some(budget));
    let mut first = net.attach("first");

    // A hog takes the rest of the budget (here: a region with every ring mapped, as each
    // region was before issue 23), leaving less than an attach needs.
    let hog_sockets = (budget - mappings_in_use()) as u32 / 2;
    let hog = Region::create(
        "map-budget-hog",
        Layout {
            max_sockets: hog_sockets.max(1),
            ..layout()
        },
    )
    .expect("hog region");
    for s in 0..hog_sockets {
        hog.map_rings(s).expect("hog rings");
    }
    assert!(
        mappings_in_use() + ATTACH_MAPPINGS > budget,
        "the hog fills the budget: {} in use, budget {budget}",
        mappings_in_use()
    );
    let refused = Client::try_attach(&net.socket, "over-budget").err();
    let reason = refused.expect("an attach over the budget is refused");
    assert!(reason.contains("ENOMEM"), "{reason}");
    assert!(reason.contains("budget"), "{reason}");
    let c = net.until_counters("the refusal counted", |c| c.apps_refused_maps == 1);
    assert_eq!(c.apps_refused, 1);

    // The application attached before still moves bytes.
    assert!(moves_bytes(&mut net, &mut first, 8201));

    // The hog goes away: a second, normal application attaches and moves bytes.
    drop(hog);
    let mut second = net.attach("second");
    assert!(moves_bytes(&mut net, &mut second, 8202));
    assert_eq!(net.counters().apps_refused_maps, 1);
    drop((first, second));
    net.stop();
}
