//! The L7 proxy's routes (crates/apps/src/route.rs) in virtual time: backends on two hosts,
//! each server answering with its own tag and then echoing; clients whose Host and path
//! differ must each get back the tag of the backend their route names, then their request
//! header as the proxy forwarded it and their body, byte for byte. Headers the proxy
//! refuses get exactly its answer (400, 404, 431) and a clean close.

mod support;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use sluice_apps::{Proxy, ProxyConfig, ProxyCounters, ProxyMode, Route, MAX_HEADER};
use sluice_tcp::{ConnId, Error, ListenerId, Stack};
use support::half_close::HalfClose;
use support::*;

/// A server that sends its tag on accept and then echoes until the peer closes.
struct TagEcho {
    listener: ListenerId,
    tag: &'static [u8],
    /// Open connections: bytes to send back, and whether the peer closed.
    conns: Vec<(ConnId, Vec<u8>, bool)>,
    buf: Vec<u8>,
    accepted: u64,
}

impl TagEcho {
    fn listen(stack: &mut Stack, port: u16, tag: &'static [u8]) -> Self {
        TagEcho {
            listener: stack.listen(port, 64).unwrap(),
            tag,
            conns: Vec::new(),
            buf: vec![0; 65536],
            accepted: 0,
        }
    }

    /// Serves every connection it holds (a handful: no need to follow events).
    fn poll(&mut self, stack: &mut Stack) {
        while let Ok(c) = stack.accept(self.listener) {
            self.accepted += 1;
            self.conns.push((c, self.tag.to_vec(), false));
        }
        let buf = &mut self.buf;
        self.conns.retain_mut(|(c, pending, eof)| {
            let c = *c;
            let done = loop {
                if !pending.is_empty() {
                    match stack.send(c, pending) {
                        Ok(n) => {
                            pending.drain(..n);
                        }
                        Err(Error::WouldBlock) => break false,
                        Err(_) => break true,
                    }
                    if !pending.is_empty() {
                        break false;
                    }
                }
                if *eof {
                    break true;
                }
                match stack.recv(c, buf) {
                    Ok(0) => *eof = true,
                    Ok(n) => pending.extend_from_slice(&buf[..n]),
                    Err(Error::WouldBlock) => break false,
                    Err(_) => break true,
                }
            };
            if done {
                let _ = stack.close(c);
            }
            !done
        });
    }
}

/// One client: what it sends (then it shuts its side) and what it must get back.
struct Client {
    conn: HalfClose,
    want: Vec<u8>,
}

fn body(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ salt).collect()
}

fn header(target: &str, host: Option<&str>) -> Vec<u8> {
    let mut h = format!("POST {target} HTTP/1.1\r\n");
    if let Some(host) = host {
        h += &format!("Host: {host}\r\n");
    }
    h += "Content-Type: application/octet-stream\r\n\r\n";
    h.into_bytes()
}

/// The header as the proxy forwards it: X-Forwarded-For after the request line.
fn forwarded(h: &[u8], client: Ipv4Addr) -> Vec<u8> {
    let line = h.windows(2).position(|w| w == b"\r\n").unwrap() + 2;
    let mut out = h[..line].to_vec();
    out.extend(format!("X-Forwarded-For: {client}\r\n").bytes());
    out.extend(&h[line..]);
    out
}

const BAD_REQUEST: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 12\r\nConnection: close\r\n\r\nbad request\n";
const NOT_FOUND: &[u8] =
    b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nno route\n";
const TOO_LARGE: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 17\r\nConnection: close\r\n\r\nheader too large\n";

/// A route: host, path prefix and its pool as (server host index, port).
type RouteSpec = (
    Option<&'static str>,
    Option<&'static str>,
    &'static [(usize, u16)],
);

/// Where a request should land.
enum Want {
    /// The backend with this tag.
    Tag(&'static [u8]),
    /// The proxy's own answer.
    Answer(&'static [u8]),
}

/// Runs `requests` (header, body bytes, where it must land) through a proxy with `routes`
/// and `default` pool; backends: "A7" and "A8" on the first server host, "B7" and "B8" on
/// the second (ports 7 and 8). Returns the proxy's counters and each backend's accepts.
fn run(
    seed: u64,
    splice: bool,
    routes: &[RouteSpec],
    default: &[(usize, u16)],
    requests: Vec<(Vec<u8>, usize, Want)>,
) -> (ProxyCounters, [u64; 4]) {
    let (mut sim, c, p, servers) = client_proxy_servers(seed, 0.0, 2);
    let ip = |sim: &sluice_sim::Sim<Stack>, n| sim.host(n).unwrap().config().ip;
    let proxy_ip = ip(&sim, p);
    let client_ip = ip(&sim, c);
    let server_ips: Vec<Ipv4Addr> = servers.iter().map(|&s| ip(&sim, s)).collect();
    let addr = |(s, port): (usize, u16)| SocketAddrV4::new(server_ips[s], port);
    let mut backends = Vec::new();
    for (i, &s) in servers.iter().enumerate() {
        let tags: [&'static [u8]; 2] = if i == 0 {
            [b"A7|", b"A8|"]
        } else {
            [b"B7|", b"B8|"]
        };
        for (port, tag) in [7, 8].into_iter().zip(tags) {
            backends.push(TagEcho::listen(sim.host_mut(s).unwrap(), port, tag));
        }
    }
    let mut proxy = Proxy::listen(
        sim.host_mut(p).unwrap(),
        ProxyConfig {
            port: 8080,
            backends: default.iter().copied().map(addr).collect(),
            routes: routes
                .iter()
                .map(|&(host, prefix, pool)| Route {
                    host: host.map(str::to_string),
                    path_prefix: prefix.map(str::to_string),
                    backends: pool.iter().copied().map(addr).collect(),
                })
                .collect(),
            mode: ProxyMode::Http,
            splice,
            splice_after: 0,
        },
    )
    .unwrap();
    let start = sim.now();
    let mut list: Vec<Client> = requests
        .into_iter()
        .enumerate()
        .map(|(i, (h, bytes, want))| {
            let id = sim
                .host_mut(c)
                .unwrap()
                .connect(start, proxy_ip, 8080)
                .unwrap();
            let b = body(bytes, i as u8);
            let want = match want {
                Want::Tag(tag) => {
                    let mut w = tag.to_vec();
                    w.extend(forwarded(&h, client_ip));
                    w.extend(&b);
                    w
                }
                Want::Answer(a) => a.to_vec(),
            };
            let mut request = h;
            request.extend(b);
            Client {
                conn: HalfClose::new(id, request),
                want,
            }
        })
        .collect();
    let mut buf = vec![0u8; 65536];
    let r = sim.run_until(start + Duration::from_secs(30), |now, hosts| {
        proxy.poll(hosts.get_mut(p).unwrap(), now);
        for (i, &s) in servers.iter().enumerate() {
            let stack = hosts.get_mut(s).unwrap();
            while stack.poll_event().is_some() {}
            for b in &mut backends[2 * i..2 * i + 2] {
                b.poll(stack);
            }
        }
        let cs = hosts.get_mut(c).unwrap();
        for cl in &mut list {
            cl.conn.step(cs, &mut buf);
        }
        list.iter().all(|cl| cl.conn.done)
    });
    assert!(r.is_ok(), "seed {seed}: {r:?}; proxy {:?}", proxy.counters);
    for (i, cl) in list.iter().enumerate() {
        assert!(
            cl.conn.got == cl.want,
            "client {i}: got {} bytes starting {:?}, want {} starting {:?}",
            cl.conn.got.len(),
            String::from_utf8_lossy(&cl.conn.got[..cl.conn.got.len().min(80)]),
            cl.want.len(),
            String::from_utf8_lossy(&cl.want[..cl.want.len().min(80)]),
        );
    }
    sim.run_for(Duration::from_secs(2));
    let now = sim.now();
    proxy.poll(sim.host_mut(p).unwrap(), now);
    assert_eq!(
        proxy.sessions(),
        0,
        "every session ended: {:?}",
        proxy.counters
    );
    sim.host(p).unwrap().check_invariants().unwrap();
    let accepted = [0, 1, 2, 3].map(|i| backends[i].accepted);
    (proxy.counters, accepted)
}

const A7: (usize, u16) = (0, 7);
const A8: (usize, u16) = (0, 8);
const B7: (usize, u16) = (1, 7);
const B8: (usize, u16) = (1, 8);

fn routed_requests() -> Vec<(Vec<u8>, usize, Want)> {
    vec![
        (header("/x", Some("a.example")), 64 << 10, Want::Tag(b"A7|")),
        // Host beats the hostless prefix; case and port do not matter.
        (
            header("/b/y", Some("A.Example:8080")),
            64 << 10,
            Want::Tag(b"A7|"),
        ),
        (header("/b/z", Some("other")), 64 << 10, Want::Tag(b"B7|")),
        // Longest prefix wins: /b/deep/ over /b/.
        (header("/b/deep/q", Some("other")), 1000, Want::Tag(b"B8|")),
        // The default pool, round-robin: A8 then B8... then A8.
        (header("/c", Some("other")), 64 << 10, Want::Tag(b"A8|")),
        (header("/", Some("x")), 300, Want::Tag(b"B8|")),
        (header("/c", Some("y")), 300, Want::Tag(b"A8|")),
        // RFC 9112 3.2: HTTP/1.1 without Host gets 400, whatever follows.
        (header("/x", None), 5000, Want::Answer(BAD_REQUEST)),
        (
            b"NOT A REQUEST\r\n\r\n".to_vec(),
            0,
            Want::Answer(BAD_REQUEST),
        ),
    ]
}

const ROUTES: &[RouteSpec] = &[
    (Some("a.example"), None, &[A7]),
    (None, Some("/b/"), &[B7]),
    (None, Some("/b/deep/"), &[B8]),
];

#[test]
fn requests_land_on_the_backend_their_route_names_spliced() {
    let (pc, accepted) = run(11, true, ROUTES, &[A8, B8], routed_requests());
    assert_eq!(
        (
            pc.accepted,
            pc.routed,
            pc.routed_default,
            pc.bad_request,
            pc.unrouted
        ),
        (9, 4, 3, 2, 0),
        "{pc:?}"
    );
    assert_eq!((pc.completed, pc.failed), (7, 0), "{pc:?}");
    // Every 64 KiB body went through the splice: the proxy copied headers (and short
    // requests that ended while their splice drained) only.
    assert!(pc.spliced >= 4, "{pc:?}");
    assert!(pc.relayed_bytes < 64 << 10, "{pc:?}");
    assert_eq!(accepted, [2, 2, 1, 2], "A7 A8 B7 B8");
}

#[test]
fn requests_land_on_the_backend_their_route_names_relayed() {
    let (pc, accepted) = run(12, false, ROUTES, &[A8, B8], routed_requests());
    assert_eq!(
        (pc.routed, pc.routed_default, pc.bad_request, pc.spliced),
        (4, 3, 2, 0),
        "{pc:?}"
    );
    assert_eq!(pc.completed, 7, "{pc:?}");
    assert_eq!(accepted, [2, 2, 1, 2], "A7 A8 B7 B8");
}

#[test]
fn without_a_default_pool_an_unrouted_request_gets_404_and_a_huge_header_431() {
    let mut huge = b"GET / HTTP/1.1\r\nHost: a.example\r\n".to_vec();
    while huge.len() <= MAX_HEADER {
        huge.extend(b"X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    huge.extend(b"\r\n");
    let requests = vec![
        (header("/x", Some("a.example")), 4096, Want::Tag(b"A7|")),
        (
            header("/nowhere", Some("other")),
            4096,
            Want::Answer(NOT_FOUND),
        ),
        (huge, 0, Want::Answer(TOO_LARGE)),
        (header("/b/1", Some("other")), 4096, Want::Tag(b"B7|")),
    ];
    let (pc, accepted) = run(13, true, ROUTES, &[], requests);
    assert_eq!(
        (
            pc.routed,
            pc.routed_default,
            pc.unrouted,
            pc.header_too_long,
            pc.failed
        ),
        (2, 0, 1, 1, 0),
        "{pc:?}"
    );
    assert_eq!(accepted, [1, 0, 1, 0]);
}
