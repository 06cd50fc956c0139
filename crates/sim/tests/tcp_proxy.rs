//! The L7 proxy (crates/apps/src/proxy.rs) in virtual time: clients send an HTTP request
//! header and a body through it to an echo server and check what comes back byte for
//! byte: the header as the proxy forwarded it (with its X-Forwarded-For line), then the
//! body. With splicing, the proxy copies only headers and the core relays the rest; without,
//! the proxy copies everything itself.

mod support;

use std::net::SocketAddrV4;
use std::time::Duration;

use sluice_apps::{EchoServer, Proxy, ProxyConfig, ProxyMode};
use support::half_close::HalfClose;
use support::*;

const HEADER: &[u8] = b"POST /upload HTTP/1.1\r\nHost: proxy\r\n\r\n";

fn body(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(29) ^ salt).collect()
}

/// `clients` clients with `bytes` of body each; `loss` on the clients' and server's links.
fn run(
    seed: u64,
    mode: ProxyMode,
    splice: bool,
    clients: usize,
    bytes: usize,
    loss: f64,
) -> (sluice_apps::ProxyCounters, sluice_tcp::Counters) {
    run_with(seed, mode, (splice, 0), clients, bytes, loss)
}

/// [`run`] with `(splice, splice_after)`.
fn run_with(
    seed: u64,
    mode: ProxyMode,
    (splice, splice_after): (bool, u64),
    clients: usize,
    bytes: usize,
    loss: f64,
) -> (sluice_apps::ProxyCounters, sluice_tcp::Counters) {
    let (mut sim, c, p, s) = client_proxy_server(seed, loss);
    let proxy_ip = sim.host(p).unwrap().config().ip;
    let server_ip = sim.host(s).unwrap().config().ip;
    let mut echo = EchoServer::listen(sim.host_mut(s).unwrap(), 7, 64).unwrap();
    let mut proxy = Proxy::listen(
        sim.host_mut(p).unwrap(),
        ProxyConfig {
            port: 8080,
            backends: vec![SocketAddrV4::new(server_ip, 7)],
            routes: vec![],
            mode,
            splice,
            splice_after,
        },
    )
    .unwrap();
    let start = sim.now();
    let mut list: Vec<HalfClose> = (0..clients)
        .map(|i| {
            let id = sim
                .host_mut(c)
                .unwrap()
                .connect(start, proxy_ip, 8080)
                .unwrap();
            let mut b = HEADER.to_vec();
            b.extend(body(bytes, i as u8));
            HalfClose::new(id, b)
        })
        .collect();
    let mut buf = vec![0u8; 65536];
    let r = sim.run_until(start + Duration::from_secs(60), |now, hosts| {
        proxy.poll(hosts.get_mut(p).unwrap(), now);
        echo.poll(hosts.get_mut(s).unwrap());
        let cs = hosts.get_mut(c).unwrap();
        for cl in &mut list {
            cl.step(cs, &mut buf);
        }
        list.iter().all(|cl| cl.done)
    });
    assert!(r.is_ok(), "seed {seed}: {r:?}; proxy {:?}", proxy.counters);
    let client_ip = sim.host(c).unwrap().config().ip;
    let forwarded =
        format!("POST /upload HTTP/1.1\r\nX-Forwarded-For: {client_ip}\r\nHost: proxy\r\n\r\n");
    for (i, cl) in list.iter().enumerate() {
        let mut want = match mode {
            ProxyMode::Http => forwarded.as_bytes().to_vec(),
            ProxyMode::Tcp => HEADER.to_vec(),
        };
        want.extend(body(bytes, i as u8));
        assert!(
            cl.got == want,
            "client {i}: {} bytes back, {} expected",
            cl.got.len(),
            want.len()
        );
    }
    sim.run_for(Duration::from_secs(2));
    let now = sim.now();
    proxy.poll(sim.host_mut(p).unwrap(), now);
    sim.host(p).unwrap().check_invariants().unwrap();
    (proxy.counters, sim.host(p).unwrap().counters().clone())
}

#[test]
fn an_http_proxy_splices_after_forwarding_the_header() {
    let bytes = 1 << 20;
    let (pc, core) = run(1, ProxyMode::Http, true, 8, bytes, 0.0);
    assert_eq!((pc.accepted, pc.spliced, pc.failed), (8, 8, 0), "{pc:?}");
    assert_eq!(pc.completed, 8, "every splice ended: {pc:?}");
    // The proxy copied headers (and what came with them) only.
    assert!(pc.relayed_bytes < 8 * 64 * 1024, "{pc:?}");
    assert!(core.splice_frames_relayed > 0);
}

#[test]
fn without_splicing_the_proxy_copies_every_byte_itself() {
    let bytes = 256 << 10;
    let (pc, core) = run(2, ProxyMode::Http, false, 4, bytes, 0.0);
    assert_eq!((pc.accepted, pc.spliced, pc.completed), (4, 0, 4), "{pc:?}");
    assert!(pc.relayed_bytes >= 2 * 4 * bytes as u64, "{pc:?}");
    assert_eq!(core.splice_frames_relayed, 0);
}

#[test]
fn a_tcp_proxy_splices_at_once_and_loss_on_both_sides_is_recovered_end_to_end() {
    let bytes = 512 << 10;
    let (pc, _) = run(3, ProxyMode::Tcp, true, 4, bytes, 0.01);
    assert_eq!((pc.spliced, pc.failed), (4, 0), "{pc:?}");
}

#[test]
fn with_splice_after_small_sessions_stay_relayed_and_large_ones_are_spliced_midway() {
    let after = 64 << 10;
    // Each session echoes 4 KiB: under the threshold, never spliced.
    let (pc, core) = run_with(4, ProxyMode::Http, (true, after), 6, 4 << 10, 0.0);
    assert_eq!((pc.spliced, pc.completed, pc.failed), (0, 6, 0), "{pc:?}");
    assert_eq!(core.splices_requested, 0);
    // 1 MiB each way: relayed until the threshold, then handed over with the rest of the
    // stream in flight; the bytes still arrive exact (checked in run_with).
    let bytes = 1 << 20;
    let (pc, core) = run_with(5, ProxyMode::Http, (true, after), 4, bytes, 0.01);
    assert_eq!((pc.spliced, pc.failed), (4, 0), "{pc:?}");
    assert_eq!(pc.completed, 4, "{pc:?}");
    assert!(pc.relayed_bytes >= 4 * after, "{pc:?}");
    assert!(
        pc.relayed_bytes < 4 * 2 * bytes as u64 / 2,
        "most bytes went through the splice: {pc:?}"
    );
    assert!(core.splice_frames_relayed > 0);
}
