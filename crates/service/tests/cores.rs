//! The service on several data-path cores (`sluice engine --cores N`; issue 20): the same
//! service as the application of the multi-core engine's one flow group, the NIC and the
//! pre/post roles on other threads, over the in-memory device pair. No root needed.

mod support;

use sluice_engine::multicore::Layout;
use sluice_shm::admin::AdminRequest;
use sluice_shm::flags::{CONNECTED, LISTENING};
use sluice_shm::Command;
use support::*;

/// The layouts `sluice engine --cores 2` can take (CoresArgs::service_layout).
fn layouts() -> [Layout; 2] {
    [
        Layout::Pipelined { groups: 1 },
        Layout::Replicated {
            groups: 1,
            replicas: 1,
        },
    ]
}

#[test]
fn accepted_and_connected_sockets_carry_bytes_both_ways_on_every_layout() {
    for (i, layout) in layouts().into_iter().enumerate() {
        let name = format!("cores-{i}");
        let mut net = Net::start_multi(&name, layout, |_| {});
        let mut app = net.attach(&name);
        let ctx = app.context();

        // Passive open: the peer connects to the application's listener.
        let l = app.listen(ctx, 7000, &mut || net.peer.pump());
        assert_eq!(app.flags(l) & LISTENING, LISTENING, "{layout:?}");
        let c = net.peer.connect(ENGINE_IP, 7000);
        let rec = app.accept(ctx, l, &mut || net.peer.pump());
        let s = rec.slot;
        let down = pattern(5 * RING as usize + 1234, 1);
        let up = pattern(4 * RING as usize + 77, 2);
        let (at_app, at_peer) = exchange(&mut net, &mut app, ctx, s, c, &down, &up);
        assert_eq!(sha256(&at_app), sha256(&down), "{layout:?}: peer to app");
        assert_eq!(sha256(&at_peer), sha256(&up), "{layout:?}: app to peer");

        // Active open: the application connects to the peer's listener.
        let pl = net.peer.stack.listen(8000, 8).unwrap();
        let (t, _) = app.connect(ctx, PEER_IP, 8000, &mut || net.peer.pump());
        let d = net.peer.until("peer accepts", |st| st.accept(pl).ok());
        app.wait_flags(t, CONNECTED, &mut || net.peer.pump());
        let down = pattern(3 * RING as usize + 5, 3);
        let up = pattern(2 * RING as usize + 9, 4);
        let (at_app, at_peer) = exchange(&mut net, &mut app, ctx, t, d, &down, &up);
        assert_eq!(sha256(&at_app), sha256(&down), "{layout:?}: peer to app");
        assert_eq!(sha256(&at_peer), sha256(&up), "{layout:?}: app to peer");

        for slot in [s, t, l] {
            app.post(ctx, Command::Close { slot, abort: false });
        }
        app.sync(ctx, &mut || net.peer.pump());
        let counters = net.stop();
        assert_eq!(counters.accepts, 1, "{layout:?}: {counters}");
        assert_eq!(
            counters.bad_positions + counters.bad_slots + counters.bad_entries,
            0,
            "{layout:?}: {counters}"
        );
    }
}

#[test]
fn module_requests_are_refused_with_a_reason_without_hook_points() {
    let mut net = Net::start_multi("cores-modules", Layout::Pipelined { groups: 1 }, |_| {});
    let app = net.attach("cores-modules");
    let (bytes, section) = sluice_ebpf::programs::shipped("vlan_strip").expect("shipped");
    let refused = ask_admin(
        &app,
        AdminRequest::ModuleLoad {
            hook: "ingress".into(),
            name: "vlan_strip".into(),
            section: section.into(),
            object: sluice_shm::admin::to_hex(bytes),
        },
    )
    .expect_err("no hook points to load a module at");
    assert!(
        refused.contains("several data-path cores"),
        "the reason says why: {refused}"
    );
    // The application stays attached and served.
    let counters = net.stop();
    assert_eq!(counters.bad_control, 1, "{counters}");
    assert_eq!(counters.apps_attached, 1, "{counters}");
}
