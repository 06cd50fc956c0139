//! The splice fast path in eBPF (issue 19 item 2; flextoe.txt listing 1) through the
//! service with `splice_ebpf` (`sluice engine --splice ebpf`): the core drains and hands
//! over as for its own splice stage, the service writes the rewrites into the splice
//! module's map, and the module sends the peers' frames straight back out, byte-exact both
//! ways; its map counts them. The same transfer over the core's own stage is the
//! comparison: a deterministic count of which of the two relayed each frame.

mod support;

use std::collections::HashMap;

use sluice_ebpf::programs;
use sluice_shm::admin::{from_hex, to_hex, AdminReply, AdminRequest};
use sluice_shm::flags::{CONNECTED, SPLICED};
use sluice_shm::{Command, SpliceOutcome};
use sluice_tcp::{ConnId, Error};
use support::*;

/// Every counter (core, service, ...), by name.
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

/// A counter whose name ends in `.name`.
fn counter(all: &HashMap<String, u64>, name: &str) -> u64 {
    let hit: Vec<_> = all
        .iter()
        .filter(|(k, _)| k.rsplit('.').next() == Some(name))
        .collect();
    assert_eq!(hit.len(), 1, "{name}: {hit:?}");
    *hit[0].1
}

/// The splice map's entries: (frames, payload bytes) per key.
fn entries(admin: &Client, module: u32) -> Vec<(String, u64, u64)> {
    match ask_admin(
        admin,
        AdminRequest::MapDump {
            module,
            map: "splices".into(),
            cursor: 0,
            max: 100,
        },
    ) {
        Ok(AdminReply::MapEntries { rows, next: None }) => rows
            .into_iter()
            .map(|(k, v)| {
                let v = from_hex(&v).unwrap();
                let word = |at: usize| u64::from_ne_bytes(v[at..at + 8].try_into().unwrap());
                (k, word(56), word(64))
            })
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// As in splice.rs: the application's client and backend connections, and the peer's
/// ends: (client slot, backend slot, peer's client side, peer's backend side).
fn proxy_pair(net: &mut Net, app: &mut Client, ctx: u32, port: u16) -> (u32, u32, ConnId, ConnId) {
    let l = app.listen(ctx, port, &mut || net.peer.pump());
    let c = net.peer.connect(ENGINE_IP, port);
    let rec = app.accept(ctx, l, &mut || net.peer.pump());
    let pl = net.peer.stack.listen(port + 1, 4).expect("peer listens");
    let (b, _) = app.connect(ctx, PEER_IP, port + 1, &mut || net.peer.pump());
    app.wait_flags(b, CONNECTED, &mut || net.peer.pump());
    let bc = net
        .peer
        .until("the peer accepts the backend connection", |s| {
            s.accept(pl).ok()
        });
    (rec.slot, b, c, bc)
}

/// Moves `data` from peer connection `from` to `to` through the splice; what arrived.
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

/// What relayed a splice's frames: (the core's stage, the eBPF module).
struct Relayed {
    core_frames: u64,
    ebpf_frames: u64,
}

/// Splices a pair, moves 200 kB up and 150 kB down (checked byte-exact), closes both
/// peers; with `ebpf`, the splice module is loaded at ingress and the service hands it the
/// splice.
fn splice_and_move(name: &str, ebpf: bool) -> Relayed {
    let mut net = Net::start_with(name, |c| c.splice_ebpf = ebpf);
    let admin = net.attach("admin");
    let module = ebpf.then(|| {
        let (bytes, section) = programs::shipped("splice").expect("shipped");
        match ask_admin(
            &admin,
            AdminRequest::ModuleLoad {
                hook: "ingress".into(),
                name: "splice".into(),
                section: section.into(),
                object: to_hex(bytes),
            },
        ) {
            Ok(AdminReply::ModuleLoaded { id }) => id,
            other => panic!("load splice: {other:?}"),
        }
    });
    let mut app = net.attach("proxy");
    let ctx = app.context();
    let (a, b, c, bc) = proxy_pair(&mut net, &mut app, ctx, 7400);
    let req = app.req();
    let cmd = Command::Splice {
        req,
        slot_a: a,
        slot_b: b,
    };
    let handle = app.ok(ctx, cmd, &mut || net.peer.pump());
    assert_eq!(app.flags(a) & SPLICED, SPLICED);
    app.report(
        ctx,
        handle,
        |r| r.outcome == SpliceOutcome::Installed,
        &mut || net.peer.pump(),
    );
    if ebpf {
        net.until_counters("the map entries are written", |k| {
            k.splice_fast_path_installed == 1
        });
    }
    let up = pattern(200_000, 1);
    let down = pattern(150_000, 2);
    assert_eq!(sha256(&through(&mut net, c, bc, &up)), sha256(&up));
    assert_eq!(sha256(&through(&mut net, bc, c, &down)), sha256(&down));
    let all = all_counters(&admin);
    let core_frames = counter(&all, "splice_frames_relayed");
    let ebpf_frames = match module {
        Some(id) => {
            let e = entries(&admin, id);
            assert_eq!(e.len(), 2, "one entry per direction: {e:?}");
            // Every payload byte went by on the fast path (retransmissions would add).
            assert!(e.iter().map(|x| x.2).sum::<u64>() >= (up.len() + down.len()) as u64);
            assert!(e.iter().all(|x| x.1 > 0), "{e:?}");
            e.iter().map(|x| x.1).sum()
        }
        None => 0,
    };
    net.peer.stack.close(c).unwrap();
    net.peer.stack.close(bc).unwrap();
    let ended = app.report(ctx, handle, |r| r.outcome.is_final(), &mut || {
        net.peer.pump()
    });
    // The close went through the core's stage either way.
    assert_eq!(ended.outcome, SpliceOutcome::Closed, "{ended:?}");
    if let Some(id) = module {
        let k = net.until_counters("the map entries are deleted", |k| {
            k.splice_fast_path_frames >= ebpf_frames
        });
        assert_eq!(k.splice_fast_path_failed, 0);
        assert!(entries(&admin, id).is_empty());
        assert_eq!(counter(&all_counters(&admin), "splices_fast_path"), 1);
    }
    net.stop();
    Relayed {
        core_frames,
        ebpf_frames,
    }
}

#[test]
fn the_ebpf_splice_relays_byte_exact_and_the_core_only_what_it_passes_on() {
    let core = splice_and_move("splice-core", false);
    let ebpf = splice_and_move("splice-ebpf", true);
    eprintln!(
        "built-in: core relayed {} frames; ebpf: module {} frames, core {}",
        core.core_frames, ebpf.ebpf_frames, ebpf.core_frames
    );
    // 350 kB in segments of at most 1448 bytes, and their ACKs.
    assert!(core.core_frames >= 242, "{}", core.core_frames);
    assert_eq!(core.ebpf_frames, 0);
    assert!(ebpf.ebpf_frames >= 242, "{}", ebpf.ebpf_frames);
    // Before the close, nothing of the data needed the core's stage (no loss on the pair,
    // so no SACK blocks).
    assert_eq!(ebpf.core_frames, 0);
}
