//! Connection splicing (acceltcp.txt 4.3) end to end in virtual time: a client connects to
//! a proxy, which reads the client's request header, connects to the server, sends it a
//! rewritten header and splices the two connections. From then on the proxy's core only
//! rewrites frames; the client and the server exchange a stream each way through it, with
//! loss on both sides, and every byte and every checksum is checked at the ends.

mod support;

use std::time::Duration;

use sluice_tcp::{ConnId, Error, SpliceEnd, SpliceEvent, Stack};
use support::*;

const PROXY_PORT: u16 = 8080;
const SERVER_PORT: u16 = 80;
const REQUEST: &[u8] = b"GET /object HTTP/1.1\r\nHost: proxy\r\n\r\n";
const REWRITTEN: &[u8] =
    b"GET /object HTTP/1.1\r\nHost: backend\r\nX-Forwarded-For: 10.0.0.1\r\n\r\n";

fn byte(salt: u8, i: u64) -> u8 {
    (i.wrapping_mul(2654435761) >> 7) as u8 ^ salt
}

/// One direction of the test's stream: what the writer sent and the reader checked.
#[derive(Default)]
struct Stream {
    sent: u64,
    received: u64,
    shut: bool,
    eof: bool,
}

impl Stream {
    fn write(&mut self, s: &mut Stack, id: ConnId, salt: u8, total: u64) {
        let mut buf = [0u8; 16384];
        while self.sent < total {
            let n = (total - self.sent).min(buf.len() as u64) as usize;
            for (k, b) in buf[..n].iter_mut().enumerate() {
                *b = byte(salt, self.sent + k as u64);
            }
            match s.send(id, &buf[..n]) {
                Ok(0) | Err(Error::WouldBlock) => return,
                Ok(m) => self.sent += m as u64,
                Err(e) => panic!("send: {e:?}"),
            }
        }
        if !self.shut {
            s.shutdown(id).unwrap();
            self.shut = true;
        }
    }

    /// Reads and checks; `skip` bytes of header come first (returned to the caller).
    fn read(&mut self, s: &mut Stack, id: ConnId, salt: u8, header: &mut Vec<u8>, skip: usize) {
        let mut buf = [0u8; 16384];
        loop {
            match s.recv(id, &mut buf) {
                Ok(0) => {
                    self.eof = true;
                    return;
                }
                Ok(n) => {
                    let mut data = &buf[..n];
                    if header.len() < skip {
                        let h = (skip - header.len()).min(data.len());
                        header.extend_from_slice(&data[..h]);
                        data = &data[h..];
                    }
                    for &b in data {
                        assert_eq!(b, byte(salt, self.received), "byte {}", self.received);
                        self.received += 1;
                    }
                }
                Err(Error::WouldBlock) => return,
                Err(e) => panic!("recv: {e:?}"),
            }
        }
    }
}

struct Outcome {
    client: sluice_tcp::Counters,
    server: sluice_tcp::Counters,
    proxy: sluice_tcp::Counters,
    events: Vec<SpliceEvent>,
}

/// Client, proxy and server on one switch; `loss` on the client's and the server's links.
fn run(seed: u64, bytes: u64, loss: f64) -> Outcome {
    let (mut sim, c, p, s) = client_proxy_server(seed, loss);
    let proxy_ip = sim.host(p).unwrap().config().ip;
    let server_ip = sim.host(s).unwrap().config().ip;
    let pl = sim.host_mut(p).unwrap().listen(PROXY_PORT, 8).unwrap();
    let sl = sim.host_mut(s).unwrap().listen(SERVER_PORT, 8).unwrap();
    let start = sim.now();
    let cid = sim
        .host_mut(c)
        .unwrap()
        .connect(start, proxy_ip, PROXY_PORT)
        .unwrap();
    let (mut up, mut down) = (Stream::default(), Stream::default());
    let mut request_sent = false;
    let (mut a, mut b, mut sid): (Option<ConnId>, Option<ConnId>, Option<ConnId>) =
        (None, None, None);
    let mut proxy_header = Vec::new();
    let mut server_header = Vec::new();
    let mut client_header = Vec::new();
    let mut spliced = false;
    let mut events = Vec::new();
    let r = sim.run_until(start + Duration::from_secs(120), |now, hosts| {
        // Client: the request, then its stream; reads the server's stream.
        {
            let cs = hosts.get_mut(c).unwrap();
            if !request_sent && cs.send(cid, REQUEST).is_ok_and(|n| n == REQUEST.len()) {
                request_sent = true;
            }
            if request_sent && spliced {
                up.write(cs, cid, 1, bytes);
            }
            down.read(cs, cid, 2, &mut client_header, 0);
        }
        // Proxy: accept, read the header, connect to the server, forward, splice.
        {
            let ps = hosts.get_mut(p).unwrap();
            if a.is_none() {
                a = ps.accept(pl).ok();
            }
            if let Some(a) = a {
                if proxy_header.len() < REQUEST.len() {
                    let mut buf = [0u8; 256];
                    if let Ok(n) = ps.recv(a, &mut buf[..REQUEST.len() - proxy_header.len()]) {
                        proxy_header.extend_from_slice(&buf[..n]);
                    }
                    if proxy_header.len() == REQUEST.len() {
                        b = Some(ps.connect(now, server_ip, SERVER_PORT).unwrap());
                    }
                }
            }
            if let (Some(a), Some(b), false) = (a, b, spliced) {
                if ps.send(b, REWRITTEN).is_ok_and(|n| n == REWRITTEN.len()) {
                    ps.splice(a, b).expect("splice");
                    spliced = true;
                }
            }
            while let Some(e) = ps.poll_splice_event() {
                events.push(e);
            }
        }
        // Server: the rewritten header, then the client's stream; its own stream back.
        {
            let ss = hosts.get_mut(s).unwrap();
            if sid.is_none() {
                sid = ss.accept(sl).ok();
            }
            if let Some(id) = sid {
                up.read(ss, id, 1, &mut server_header, REWRITTEN.len());
                if server_header.len() == REWRITTEN.len() {
                    down.write(ss, id, 2, bytes);
                }
            }
        }
        up.eof && down.eof
    });
    assert!(
        r.is_ok(),
        "seed {seed}: up {}/{} down {}/{} spliced {spliced}: {r:?}; events {events:?}",
        up.received,
        bytes,
        down.received,
        bytes
    );
    assert_eq!(
        server_header, REWRITTEN,
        "the proxy's header reached the server first"
    );
    assert_eq!((up.received, down.received), (bytes, bytes));
    // Both ends close; the splice ends a TIME-WAIT after both FINs were acknowledged.
    for (host, id) in [(c, cid), (s, sid.unwrap())] {
        sim.host_mut(host).unwrap().close(id).unwrap();
    }
    sim.run_for(Duration::from_secs(3));
    let proxy = sim.host_mut(p).unwrap();
    while let Some(e) = proxy.poll_splice_event() {
        events.push(e);
    }
    for h in [c, p, s] {
        sim.host(h).unwrap().check_invariants().unwrap();
    }
    let proxy = sim.host(p).unwrap();
    assert_eq!(
        proxy.connection_count(),
        0,
        "both slots were freed at the handover"
    );
    assert_eq!(proxy.splice_count(), 0, "the splice ended");
    Outcome {
        client: sim.host(c).unwrap().counters().clone(),
        server: sim.host(s).unwrap().counters().clone(),
        proxy: sim.host(p).unwrap().counters().clone(),
        events,
    }
}

fn check(o: &Outcome, bytes: u64) {
    assert!(
        matches!(o.events.first(), Some(SpliceEvent::Installed(_))),
        "{:?}",
        o.events
    );
    match o.events.last() {
        Some(SpliceEvent::Ended(_, SpliceEnd::Closed, stats)) => {
            // Payload relayed by the stage, retransmissions included: all but what the core
            // relayed while draining the two connections (at most a window each way).
            let drained = 256 << 10;
            assert!(stats.a_to_b + drained >= bytes, "{stats:?}");
            assert!(stats.b_to_a + drained >= bytes, "{stats:?}");
        }
        other => panic!("the splice did not end cleanly: {other:?} ({:?})", o.events),
    }
    // Every relayed frame's checksum verified at the receiver.
    assert_eq!(o.client.bad_checksum + o.server.bad_checksum, 0);
    assert_eq!(o.proxy.splice_rst_out_of_window, 0);
    assert_eq!(o.proxy.splices_installed, 1);
}

#[test]
fn acceltcp_4_3_a_spliced_pair_carries_both_streams_byte_exact() {
    let bytes = 16 << 20;
    let o = run(1, bytes, 0.0);
    check(&o, bytes);
    assert_eq!(
        o.client.retransmitted_bytes + o.server.retransmitted_bytes,
        0
    );
    match o.events.last() {
        Some(SpliceEvent::Ended(_, _, stats)) => {
            assert!(stats.a_to_b <= bytes && stats.b_to_a <= bytes, "{stats:?}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn acceltcp_4_3_loss_on_both_sides_is_recovered_end_to_end_through_the_splice() {
    // Issue 15: 64 MiB both ways with loss on each side.
    let bytes = 64 << 20;
    let o = run(2, bytes, 0.01);
    check(&o, bytes);
    assert!(
        o.client.retransmitted_bytes > 0 && o.server.retransmitted_bytes > 0,
        "the ends recovered their own losses"
    );
    assert!(
        o.client.sack_blocks_rx + o.server.sack_blocks_rx > 0,
        "SACK went through"
    );
}
