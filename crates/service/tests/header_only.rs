//! Header-only TX through the service (flexins.txt 3.2 for TCP; docs/service.md "Send"):
//! the socket's TX ring is its connection's send buffer. Byte-exact transfers across many
//! ring wraps on both TX paths, the bytes-touched counters that tell them apart, and an
//! application that overwrites bytes it committed: its own stream may carry the new bytes,
//! nothing crashes, and another socket's stream is untouched.

mod support;

use std::collections::HashMap;
use std::time::Instant;

use sluice_shm::admin::{AdminReply, AdminRequest};
use sluice_shm::Dir;
use sluice_tcp::{ConnId, Error, TxPath};
use support::*;

/// Every counter the engine reports, by name.
fn all_counters(client: &Client) -> HashMap<String, u64> {
    let (mut all, mut cursor) = (HashMap::new(), 0);
    loop {
        match ask_admin(client, AdminRequest::Counters { cursor, max: 1000 }).expect("counters") {
            AdminReply::Counters { rows, next } => {
                all.extend(rows);
                match next {
                    Some(n) => cursor = n,
                    None => return all,
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// A listener on `port` and one connection from the peer, accepted: (slot, peer's conn).
fn accepted(net: &mut Net, app: &mut Client, ctx: u32, l: u32, port: u16) -> (u32, ConnId) {
    let c = net.peer.connect(ENGINE_IP, port);
    let rec = app.accept(ctx, l, &mut || net.peer.pump());
    (rec.slot, c)
}

/// Moves `data` from slot `s` to the peer's `c` in odd-sized writes; returns what the peer
/// read. `meddle` runs after each write (the application misbehaving, or nothing).
fn app_to_peer(
    net: &mut Net,
    app: &mut Client,
    ctx: u32,
    s: u32,
    c: ConnId,
    data: &[u8],
    mut meddle: impl FnMut(&mut Client, usize),
) -> Vec<u8> {
    let deadline = Instant::now() + WAIT;
    let (mut sent, mut got) = (0, Vec::with_capacity(data.len()));
    let mut buf = vec![0u8; 16 << 10];
    while got.len() < data.len() {
        if sent < data.len() {
            let chunk = (data.len() - sent).min(2999);
            sent += app.write_some(ctx, s, &data[sent..sent + chunk]);
            meddle(app, sent);
        }
        loop {
            match net.peer.stack.recv(c, &mut buf) {
                Ok(0) => panic!("peer saw end of stream early"),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(Error::WouldBlock) => break,
                Err(e) => panic!("peer recv: {e}"),
            }
        }
        net.peer.pump();
        assert!(
            Instant::now() < deadline,
            "stuck after {} of {} bytes",
            got.len(),
            data.len()
        );
    }
    got
}

/// Both TX paths carry a stream byte-exactly across many wraps of the 8 KiB ring, and the
/// counters show the difference: header-only copies nothing into the core (staging 0),
/// staging copies every byte once more.
#[test]
fn both_tx_paths_carry_the_stream_exactly_and_are_told_apart_by_the_counters() {
    for (path, port) in [(TxPath::HeaderOnly, 8100), (TxPath::Staging, 8101)] {
        let name = format!("tx-path-{port}");
        let mut net = Net::start_with(&name, |c| c.tx_path = path);
        let mut app = net.attach(&name);
        let ctx = app.context();
        let l = app.listen(ctx, port, &mut || net.peer.pump());
        let (s, c) = accepted(&mut net, &mut app, ctx, l, port);
        let data = pattern(40 * RING as usize + 123, port as u32);
        let got = app_to_peer(&mut net, &mut app, ctx, s, c, &data, |_, _| {});
        assert!(got == data, "{path:?}: the stream differs");
        let k = all_counters(&app);
        let (payload, staging) = (k["tcp.tx_touch_payload"], k["tcp.tx_touch_staging"]);
        assert!(payload >= data.len() as u64, "{path:?}: payload {payload}");
        match path {
            TxPath::HeaderOnly => assert_eq!(staging, 0, "header-only copies nothing in"),
            TxPath::Staging => assert!(staging >= data.len() as u64, "staging {staging}"),
        }
        assert_eq!(k["tcp.tx_gather_failed"], 0);
        // The ring's head is where the peer's acknowledgment is: everything, now.
        let b = app.block(s);
        let until = Instant::now() + WAIT;
        while b.tx_head().load(std::sync::atomic::Ordering::Acquire) != data.len() as u64 {
            assert!(
                Instant::now() < until,
                "{path:?}: tx_head never reached the end"
            );
            net.peer.pump();
        }
        net.stop();
    }
}

/// An application that rewrites bytes it committed (the rule says it may not until tx_head
/// passes them): its stream may carry old or new bytes there, everything else arrives
/// exactly, the engine does not fail, and another socket's stream is untouched.
#[test]
fn overwriting_committed_bytes_touches_only_the_applications_own_stream() {
    let name = "tx-overwrite";
    let mut net = Net::start(name);
    let mut app = net.attach(name);
    let ctx = app.context();
    let l = app.listen(ctx, 8200, &mut || net.peer.pump());
    let (bad, cb) = accepted(&mut net, &mut app, ctx, l, 8200);
    let (good, cg) = accepted(&mut net, &mut app, ctx, l, 8200);
    let data = pattern(20 * RING as usize, 77);
    let mut scribbled = Vec::new();
    let got = app_to_peer(&mut net, &mut app, ctx, bad, cb, &data, |app, sent| {
        // After each write, scribble over the last 100 bytes committed.
        let at = sent.saturating_sub(100) as u64;
        app.region
            .ring(bad, Dir::Tx)
            .unwrap()
            .write(at, &[0xEE; 100]);
        scribbled.push(at as usize..sent);
    });
    assert_eq!(got.len(), data.len(), "the stream completes");
    for (i, (&g, &d)) in got.iter().zip(&data).enumerate() {
        if !scribbled.iter().any(|r| r.contains(&i)) {
            assert_eq!(g, d, "byte {i}, never scribbled over, differs");
        } else {
            assert!(g == d || g == 0xEE, "byte {i}: old or new bytes only");
        }
    }
    // The other socket of the same application carries its stream exactly.
    let other = pattern(10 * RING as usize, 78);
    let got = app_to_peer(&mut net, &mut app, ctx, good, cg, &other, |_, _| {});
    assert!(got == other, "the other socket's stream differs");
    assert_eq!(all_counters(&app)["tcp.tx_gather_failed"], 0);
    net.stop();
}
