//! Issue 23, failure 1: an application's region costs the engine mappings in proportion to
//! the sockets it uses, not to `max_sockets`, so a hundred applications attach at once.
//! One test in this binary: it counts the process's mappings (`/proc/self/maps`), which
//! tests running beside it would disturb. The engine and the applications share the
//! process here, so a figure per application is the engine's and the application's.

mod support;

use sluice_shm::map_budget::mappings_in_use;
use sluice_shm::Layout;
use support::*;

/// Attaches `n` applications to a fresh engine with `max_sockets` per region, each with a
/// context and `sockets` open sockets; returns the process's mappings per application and
/// the clients (still attached).
fn per_app(name: &str, max_sockets: u32, n: usize, sockets: usize) -> (f64, Net, Vec<Client>) {
    let mut net = Net::start_with(name, |c| {
        c.layout = Layout {
            max_sockets,
            ..Layout::default()
        };
        c.max_apps = 128;
    });
    let before = mappings_in_use();
    let mut apps = Vec::with_capacity(n);
    for i in 0..n {
        let mut app = net.attach(&format!("{name}-{i}"));
        let ctx = app.context();
        for _ in 0..sockets {
            app.open(ctx, &mut || net.peer.pump());
        }
        apps.push(app);
    }
    let after = mappings_in_use();
    let per = (after.saturating_sub(before)) as f64 / n as f64;
    (per, net, apps)
}

#[test]
fn an_application_costs_mappings_for_its_sockets_not_max_sockets_and_a_hundred_attach() {
    let (small, mut net, apps) = per_app("maps-64", 64, 10, 2);
    drop(apps);
    net.stop();
    let (large, mut net, apps) = per_app("maps-4096", 4096, 10, 2);
    drop(apps);
    net.stop();
    println!("mappings per application (engine + application, 2 sockets): max_sockets 64: {small:.1}, 4096: {large:.1}");
    assert!(small <= 24.0, "{small} mappings per application");
    assert!(
        (large - small).abs() <= 2.0,
        "the cost grows with max_sockets: {small} -> {large}"
    );

    // A hundred applications with the default layout (1,024 sockets each), one socket each.
    let (per, mut net, mut apps) = per_app("maps-100", Layout::default().max_sockets, 100, 1);
    println!("100 applications attached, {per:.1} mappings each");
    assert_eq!(apps.len(), 100);
    assert!(per <= 24.0, "{per} mappings per application");
    assert_eq!(net.counters().apps_refused, 0);

    // The last one still moves bytes to the peer.
    let app = apps.last_mut().expect("a hundred");
    let ctx = app.context();
    let listener = net.peer.stack.listen(8100, 8).unwrap();
    let (s, _) = app.connect(ctx, PEER_IP, 8100, &mut || net.peer.pump());
    let c = net
        .peer
        .until("peer accepts", |st| st.accept(listener).ok());
    app.wait_flags(s, sluice_shm::flags::CONNECTED, &mut || net.peer.pump());
    let data = pattern(3 * 8192, 23);
    app.write_all(ctx, s, &data, &mut || net.peer.pump());
    let got = net.peer.read_at_least(c, data.len());
    assert_eq!(got, data);
    drop(apps);
    net.stop();
}
