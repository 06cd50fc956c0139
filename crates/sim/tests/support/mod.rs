//! Shared setup for TCP-over-simulator tests.
#![allow(dead_code)]

pub mod half_close;
pub mod lossy;

use std::net::Ipv4Addr;
use std::time::Duration;

use sluice_apps::BulkTransfer;
use sluice_sim::{Impairment, LinkConfig, LinkId, NodeId, Sim, SimError};
use sluice_tcp::{Config, Instant, Stack};
use sluice_wire::EthernetAddress;

pub const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

pub fn config(n: u8) -> Config {
    let mut c = Config::new(
        EthernetAddress([2, 0, 0, 0, 0, n]),
        Ipv4Addr::new(10, 0, 0, n),
    );
    c.seed = 1000 + n as u64;
    c.rto_min = Duration::from_millis(5);
    c.rto_initial = Duration::from_millis(100);
    c.rx_buffer = 1 << 20;
    c.tx_buffer = 1 << 20;
    c.time_wait = Duration::from_millis(100);
    c
}

/// Two cores joined by one link: 10 Gbps, 10 us each way, 1 MB queue.
pub fn pair(seed: u64, imp: Impairment) -> (Sim<Stack>, NodeId, NodeId, LinkId) {
    pair_with(seed, imp, config(1), config(2))
}

pub fn pair_with(
    seed: u64,
    imp: Impairment,
    a: Config,
    b: Config,
) -> (Sim<Stack>, NodeId, NodeId, LinkId) {
    let mut sim = Sim::new(seed);
    let a = sim.add_host(Stack::new(a).unwrap());
    let b = sim.add_host(Stack::new(b).unwrap());
    let link = LinkConfig::new(10_000_000_000, Duration::from_micros(10))
        .with_queue(4 << 20)
        .with_impairment(imp);
    let l = sim.connect(a, b, link).unwrap();
    (sim, a, b, l)
}

/// Runs a bulk transfer of `bytes` from `from` to `to` (port 5001); returns it when done.
pub fn bulk(
    sim: &mut Sim<Stack>,
    from: NodeId,
    to: NodeId,
    bytes: u64,
    limit: Duration,
) -> (BulkTransfer, Result<Instant, SimError>) {
    let mut t = BulkTransfer::new(bytes, 42);
    let to_ip = sim.host(to).unwrap().config().ip;
    t.listen(sim.host_mut(to).unwrap(), 5001).unwrap();
    let now = sim.now();
    t.connect(now, sim.host_mut(from).unwrap(), to_ip, 5001)
        .unwrap();
    let deadline = sim.now() + limit;
    let r = sim.run_until(deadline, |now, hosts| {
        let (s, r) = hosts.get_pair_mut(from, to).expect("two hosts");
        t.step(now, s, r);
        t.done()
    });
    (t, r)
}

/// Client, proxy and server cores (configs 1, 2, 3) on one switch, 10 Gbps and 5 us per
/// link; `loss` on the client's and the server's links, none on the proxy's.
pub fn client_proxy_server(seed: u64, loss: f64) -> (Sim<Stack>, NodeId, NodeId, NodeId) {
    let (sim, c, p, s) = client_proxy_servers(seed, loss, 1);
    (sim, c, p, s[0])
}

/// As [`client_proxy_server`] with `servers` servers (configs 3, 4, ...), each with `loss`.
pub fn client_proxy_servers(
    seed: u64,
    loss: f64,
    servers: u8,
) -> (Sim<Stack>, NodeId, NodeId, Vec<NodeId>) {
    let mut sim: Sim<Stack> = Sim::new(seed);
    let sw = sim.add_switch();
    let mut add = |n: u8, loss: f64| -> NodeId {
        let h = sim.add_host(Stack::new(config(n)).unwrap());
        let link = LinkConfig::new(10_000_000_000, Duration::from_micros(5))
            .with_queue(4 << 20)
            .with_impairment(Impairment::default().with_loss(loss));
        sim.connect(h, sw, link).unwrap();
        h
    };
    let (c, p) = (add(1, loss), add(2, 0.0));
    let s = (0..servers).map(|i| add(3 + i, loss)).collect();
    (sim, c, p, s)
}
