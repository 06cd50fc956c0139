//! Splicing through the service (docs/service.md, Splice; acceltcp.txt 4.3), end to end
//! without root: the engine's service over the in-memory device pair, a plain core as the
//! peer host playing both the client and the backend, and a minimal application written
//! on `sluice-shm` that accepts the one, connects to the other and splices them.

mod support;

use nix::errno::Errno;
use sluice_shm::flags::{CONNECTED, SPLICED};
use sluice_shm::{Command, SpliceOutcome};
use sluice_tcp::{ConnId, Error};
use support::*;

/// The application's listener on `port`, a peer connection to it accepted, and a
/// connection from the application to the peer's listener on `backend` accepted by the
/// peer: (listener, client slot, backend slot, peer's client side, peer's backend side).
fn proxy_pair(
    net: &mut Net,
    app: &mut Client,
    ctx: u32,
    port: u16,
    backend: u16,
) -> (u32, u32, u32, ConnId, ConnId) {
    let l = app.listen(ctx, port, &mut || net.peer.pump());
    let c = net.peer.connect(ENGINE_IP, port);
    let rec = app.accept(ctx, l, &mut || net.peer.pump());
    let pl = net.peer.stack.listen(backend, 4).expect("peer listens");
    let (b, _) = app.connect(ctx, PEER_IP, backend, &mut || net.peer.pump());
    app.wait_flags(b, CONNECTED, &mut || net.peer.pump());
    let bc = net
        .peer
        .until("the peer accepts the backend connection", |s| {
            s.accept(pl).ok()
        });
    (l, rec.slot, b, c, bc)
}

/// Moves `data` from peer connection `from` to peer connection `to` (through the splice);
/// returns what arrived.
fn through(net: &mut Net, from: ConnId, to: ConnId, data: &[u8]) -> Vec<u8> {
    let (mut sent, mut got) = (0, Vec::with_capacity(data.len()));
    let mut buf = vec![0u8; 16 << 10];
    net.peer.until("bytes cross the splice", |s| {
        if sent < data.len() {
            match s.send(from, &data[sent..]) {
                Ok(n) => sent += n,
                Err(Error::WouldBlock) => {}
                Err(e) => panic!("peer send: {e}"),
            }
        }
        loop {
            match s.recv(to, &mut buf) {
                Ok(0) => panic!("end of stream after {} bytes", got.len()),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(Error::WouldBlock) => break,
                Err(e) => panic!("peer recv: {e}"),
            }
        }
        (got.len() >= data.len()).then_some(())
    });
    got
}

#[test]
fn refused_splices_change_nothing_and_a_granted_one_relays_both_ways_and_reports_its_bytes() {
    let mut net = Net::start("splice");
    let mut app = net.attach("splice");
    let ctx = app.context();
    let (l, a, b, c, bc) = proxy_pair(&mut net, &mut app, ctx, 7300, 7301);
    let opened = app.open(ctx, &mut || net.peer.pump());
    let before = net.counters();

    let refuse = |app: &mut Client, net: &mut Net, slot_a: u32, slot_b: u32| {
        let req = app.req();
        let cmd = Command::Splice {
            req,
            slot_a,
            slot_b,
        };
        app.fails(ctx, cmd, &mut || net.peer.pump())
    };
    assert_eq!(
        refuse(&mut app, &mut net, a, a),
        Errno::EINVAL as i32,
        "itself"
    );
    assert_eq!(
        refuse(&mut app, &mut net, a, l),
        Errno::EINVAL as i32,
        "a listener"
    );
    assert_eq!(
        refuse(&mut app, &mut net, a, opened),
        Errno::ENOTCONN as i32
    );
    assert_eq!(refuse(&mut app, &mut net, a, 999), Errno::EBADF as i32);
    assert_eq!(
        refuse(&mut app, &mut net, 12, a),
        Errno::EBADF as i32,
        "free"
    );

    // Bytes the application has not read yet: refused, and held until it forwards them.
    let head = pattern(300, 9);
    net.peer.send_all(c, &head);
    let block = app.block(a);
    net.peer.until("the request reaches the ring", |_| {
        (block.rx_tail().load(std::sync::atomic::Ordering::Acquire) == 300).then_some(())
    });
    assert_eq!(refuse(&mut app, &mut net, a, b), Errno::EAGAIN as i32);
    assert_eq!(
        app.flags(a) & sluice_shm::flags::SPLICED,
        0,
        "nothing changed"
    );
    let mut buf = vec![0u8; 1000];
    assert_eq!(app.read_some(ctx, a, &mut buf), 300);
    // A rewritten request header goes first (acceltcp.txt 4.3).
    let mut header = b"X-Spliced: yes\r\n".to_vec();
    header.extend_from_slice(&buf[..300]);
    app.write_all(ctx, b, &header, &mut || net.peer.pump());
    // Each refusal counted (a free slot as a bad slot, the others as the wrong state).
    net.until_counters("the refusals are counted", |k| {
        k.bad_state - before.bad_state == 5 && k.bad_slots - before.bad_slots == 1
    });

    let req = app.req();
    let handle = app.ok(
        ctx,
        Command::Splice {
            req,
            slot_a: a,
            slot_b: b,
        },
        &mut || net.peer.pump(),
    );
    assert_ne!(handle, 0);
    assert_eq!(app.flags(a) & SPLICED, SPLICED);
    assert_eq!(app.flags(b) & SPLICED, SPLICED);
    assert_eq!(
        refuse(&mut app, &mut net, a, b),
        Errno::EALREADY as i32,
        "already spliced"
    );
    let installed = app.report(
        ctx,
        handle,
        |r| r.outcome == SpliceOutcome::Installed,
        &mut || net.peer.pump(),
    );
    assert_eq!((installed.a_to_b, installed.b_to_a), (0, 0));
    // The header and the request arrive first, exactly.
    let mut first = Vec::new();
    let mut v = vec![0u8; 4096];
    net.peer.until("the header arrives", |s| {
        while let Ok(n) = s.recv(bc, &mut v) {
            if n == 0 {
                break;
            }
            first.extend_from_slice(&v[..n]);
        }
        (first.len() >= header.len()).then_some(())
    });
    assert_eq!(first, header);

    // Closing the slots does not touch the splice: the core owns the connections.
    for s in [a, b] {
        app.post(
            ctx,
            Command::Close {
                slot: s,
                abort: false,
            },
        );
    }
    app.sync(ctx, &mut || net.peer.pump());

    let up = pattern(200_000, 1);
    let down = pattern(150_000, 2);
    assert_eq!(sha256(&through(&mut net, c, bc, &up)), sha256(&up));
    assert_eq!(sha256(&through(&mut net, bc, c, &down)), sha256(&down));
    net.peer.stack.close(c).unwrap();
    net.peer.stack.close(bc).unwrap();
    let ended = app.report(ctx, handle, |r| r.outcome.is_final(), &mut || {
        net.peer.pump()
    });
    assert_eq!(ended.outcome, SpliceOutcome::Closed);
    assert_eq!(ended.a_to_b, up.len() as u64, "{ended:?}");
    assert_eq!(ended.b_to_a, down.len() as u64, "{ended:?}");
    let k = net.stop();
    assert_eq!(k.splices, 1, "{k}");
    assert_eq!(k.splice_reports, 2, "{k}");
    assert_eq!(k.splice_reports_dropped, 0, "{k}");
}

#[test]
fn a_splice_outlives_its_application_and_its_reports_are_dropped_and_counted() {
    let mut net = Net::start("splice-detach");
    let mut app = net.attach("splice-detach");
    let ctx = app.context();
    let (_l, a, b, c, bc) = proxy_pair(&mut net, &mut app, ctx, 7400, 7401);
    let req = app.req();
    let handle = app.ok(
        ctx,
        Command::Splice {
            req,
            slot_a: a,
            slot_b: b,
        },
        &mut || net.peer.pump(),
    );
    app.report(
        ctx,
        handle,
        |r| r.outcome == SpliceOutcome::Installed,
        &mut || net.peer.pump(),
    );
    drop(app);
    net.until_counters("the application is gone", |k| k.apps_detached == 1);
    let up = pattern(50_000, 3);
    assert_eq!(sha256(&through(&mut net, c, bc, &up)), sha256(&up));
    net.peer.stack.abort(c).unwrap();
    let k = net.until_counters("the end is dropped", |k| k.splice_reports_dropped == 1);
    assert_eq!(k.splice_reports, 1, "{k}");
    assert_eq!(
        k.resets_on_detach, 0,
        "the spliced connections were not reset: {k}"
    );
}
